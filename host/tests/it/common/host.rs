//! A real `steward run` process on a temporary directory, and an API client for it.
#![allow(dead_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use steward::client::Client;

use super::eventually;

/// One host process with its own directory, config, resources and plugins.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub port: u16,
    config: PathBuf,
    child: Option<Child>,
    client: Client,
}

/// The `api:` line of a host whose `/mcp` lists every tool flat (`api.mcp.tools: direct`), for
/// the tests of what the tools themselves do; the default is muster's meta-tools.
pub const MCP_DIRECT: &str = "api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n";

/// Plugins copied into every host's plugin directory.
pub const PLUGINS: &[&str] = &["noop", "misbehave", "mcpserver", "workflow"];

impl Host {
    /// A directory with `extra_config` appended to a base config, and the test plugins; not started.
    pub fn new(extra_config: &str) -> Self {
        Self::with_files(extra_config, &[])
    }

    /// Like [`Host::new`], with extra files written into the directory first (for example a token).
    pub fn with_files(extra_config: &str, files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("resources")).unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        for p in PLUGINS {
            super::install(&super::wasm(p), &dir.path().join("plugins").join(format!("{p}.wasm")));
        }
        let port = free_port();
        // `{port}` in `extra_config` is the chosen port; an `api:` there replaces the default one.
        let extra_config = extra_config.replace("{port}", &port.to_string());
        let api = if extra_config.contains("api:") {
            String::new()
        } else {
            format!("api: {{ listen: 127.0.0.1:{port} }}\n")
        };
        // Compiled plugins are cached across the hosts of this process (and runs of it), unless
        // the test sets its own `cache_dir:`: each host would otherwise compile the same plugins
        // again at start. The cache is keyed by the plugin's bytes and the engine, and written
        // atomically, so hosts started at once share it safely.
        let cache = shared_cache_line(&extra_config);
        let config = format!(
            "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\n{cache}{api}plugins:\n  mcpserver: {{ capabilities: [services] }}\n  misbehave: {{ timeout: 2s }}\n{extra_config}"
        );
        std::fs::write(dir.path().join("steward.yaml"), config).unwrap();
        let token = std::fs::read_to_string(dir.path().join("token")).ok().map(|t| t.trim().to_string());
        let client = Client::new(&format!("http://127.0.0.1:{port}"), token);
        let config = dir.path().join("steward.yaml");
        Self { dir, port, config, child: None, client }
    }

    /// A host of an existing layout under `dir`: its config file and the API port that config listens on; not started.
    pub fn with_config(dir: tempfile::TempDir, config: PathBuf, port: u16) -> Self {
        let client = Client::new(&format!("http://127.0.0.1:{port}"), None);
        Self { dir, port, config, child: None, client }
    }

    /// The resources directory.
    pub fn resources(&self) -> PathBuf {
        self.dir.path().join("resources")
    }

    /// Writes `text` to `resources/name` atomically.
    pub fn write(&self, name: &str, text: &str) {
        self.write_bytes(name, text.as_bytes());
    }

    /// Writes `bytes` (not necessarily text) to `resources/name` atomically.
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) {
        let path = self.resources().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        let tmp = self.dir.path().join(format!(".tmp-{}", name.replace('/', "_")));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    /// Removes `resources/name`.
    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.resources().join(name)).unwrap();
    }

    /// Starts `steward run` and waits for `/readyz`.
    pub async fn start(&mut self) {
        self.start_with_env(&[]).await
    }

    /// Starts `steward run` with `env` added to its environment, and waits for `/readyz`.
    pub async fn start_with_env(&mut self, env: &[(&str, &str)]) {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("steward.log")).unwrap();
        let child = crate::common::steward()
            .args(["run", "--config"])
            .arg(&self.config)
            .env("STEWARD_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        /// What a starting host shows: its readiness, or that it exited.
        #[derive(Debug)]
        enum Start {
            Starting,
            Ready,
            Exited(ExitStatus),
        }
        // Kept in `self` while waiting, so that a failed wait's `Drop` kills it.
        self.child = Some(child);
        let what = self.waiting_for("steward run to be ready");
        let (client, child) = (&self.client, self.child.as_mut().unwrap());
        let seen = eventually(
            Duration::from_secs(60),
            what,
            async || {
                if let Some(status) = child.try_wait().unwrap() {
                    Start::Exited(status)
                } else if client.get("/api/v1/overview").await.is_ok_and(|v| v["ready"] == true) {
                    Start::Ready
                } else {
                    Start::Starting
                }
            },
            |s| !matches!(s, Start::Starting),
        )
        .await;
        if let Start::Exited(status) = seen {
            panic!("steward exited with {status}:\n{}", self.log());
        }
    }

    /// `kill -9`, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, and the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        c.wait().unwrap()
    }

    /// The host's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("steward.log")).unwrap_or_default()
    }

    /// The API client.
    pub fn api(&self) -> &Client {
        &self.client
    }

    /// `GET /api/v1/resources/{key}`, or `None` on 404.
    pub async fn object(&self, key: &str) -> Option<Value> {
        self.client.get(&format!("/api/v1/resources/{key}")).await.ok()
    }

    /// Polls `f` on the object `key` (or its absence) until it holds; fails after `limit` with the last view.
    pub async fn wait_object(
        &self,
        key: &str,
        limit: Duration,
        what: &str,
        f: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let what = self.waiting_for(format!("{key}: {what}"));
        eventually(limit, what, async || self.object(key).await, |v| f(v.as_ref())).await
    }

    /// Polls `GET path` until `f` holds.
    pub async fn wait_get(&self, path: &str, limit: Duration, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let what = self.waiting_for(format!("{path}: {what}"));
        eventually(limit, what, async || self.client.get(path).await.unwrap_or(Value::Null), f).await
    }

    /// `what` a test waits for on this host, formatted (only when the wait fails) with the tail
    /// of the host's log: the message of an [`eventually`] about this host.
    pub fn waiting_for<W: fmt::Display>(&self, what: W) -> WaitingFor<W> {
        WaitingFor { what, log: self.dir.path().join("steward.log") }
    }
}

/// See [`Host::waiting_for`].
pub struct WaitingFor<W> {
    what: W,
    log: PathBuf,
}

impl<W: fmt::Display> fmt::Display for WaitingFor<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        write!(f, "{}\n(the last lines of the host's log:\n{}\n)", self.what, tail(&log))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The compile cache [`Host::new`] gives a host whose config names none: one directory for every
/// host and runtime of the test binary, kept between runs (under cargo's `CARGO_TARGET_TMPDIR`).
pub fn shared_cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("host-plugin-cache")
}

/// The config line `cache_dir: <shared_cache_dir>`, for tests that write a host's config
/// themselves, unless `rest` (the rest of that config) names its own: compiling the bundled
/// plugins anew for every host was nearly half the CPU of this test binary's run.
pub fn shared_cache_line(rest: &str) -> String {
    if rest.contains("cache_dir:") { String::new() } else { format!("cache_dir: {}\n", shared_cache_dir().display()) }
}

/// A loopback port nothing listens on now, and that no other call in this process returns.
///
/// The tests share one process and many hosts start at once, so a port is handed out once per
/// process. It is below the kernel's ephemeral range (`ip_local_port_range`), so no outgoing
/// connection of a test or host takes it as its local port between this call and the bind.
pub fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16.min(ephemeral_low / 2), ephemeral_low);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    // Start where another test process (another checkout's run, say) is unlikely to be.
    let start = low + (std::process::id() % u32::from(high - low)) as u16;
    let candidates = (start..high).chain(low..start);
    for port in candidates {
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}")
}

/// A `Noop` document.
pub fn noop(name: &str, value: &str) -> String {
    format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: {name}\nspec:\n  value: \"{value}\"\n")
}

/// A `Misbehave` document.
pub fn misbehave(name: &str, behavior: &str) -> String {
    format!(
        "apiVersion: test.steward.dev/v1\nkind: Misbehave\nmetadata:\n  name: {name}\nspec:\n  behavior: {behavior}\n"
    )
}

/// Whether the object is Synced at the generation it has.
pub fn synced(v: Option<&Value>) -> bool {
    v.is_some_and(|v| v["phase"] == "Synced" && v["observedGeneration"] == v["generation"])
}

/// Path helper.
pub fn p(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

impl Host {
    /// Runs a `steward` client command against this host; returns (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = crate::common::steward().args(args).arg("--config").arg(&self.config).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Like [`Host::cli`], for a command that must end within `limit` (one that might block on
    /// what it reads): past it the command is killed and the test fails.
    pub fn cli_within(&self, args: &[&str], limit: Duration) -> (i32, String, String) {
        let child = crate::common::steward()
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let Ok(out) = rx.recv_timeout(limit) else {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("`steward {}` did not end within {limit:?}", args.join(" "));
        };
        let out = out.unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The config file.
    pub fn config_path(&self) -> PathBuf {
        self.config.clone()
    }
}

impl Host {
    /// `GET path` as text (for `/metrics` and `/healthz`).
    pub async fn wait_get_text(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Host {
    /// Waits until the host's log contains `needle` (for what a plugin logs: the log is where
    /// its lines are meant to arrive).
    pub async fn wait_log(&self, needle: &str, limit: Duration) {
        let what = self.waiting_for(format!("the log to say {needle:?}"));
        eventually(limit, what, async || self.log().contains(needle), |found| *found).await;
    }

    /// The sum of the samples of `name` in the host's `/metrics` whose labels contain every one
    /// of `labels` (each written `key="value"`); 0 when there is none.
    pub async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        super::metric(&self.wait_get_text("/metrics").await, name, labels)
    }
}

impl Host {
    /// The process id of the running host.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The running host's peak resident set size so far (`VmHWM` of /proc/PID/status), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let pid = self.pid().expect("the host is running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status:\n{status}"));
        kib * 1024
    }

    /// Sends one raw HTTP/1.1 request to the API, exactly as given (`target` is not normalized
    /// or re-encoded), and returns the answer. `Content-Length` is added unless `headers` set
    /// it or a `Transfer-Encoding`. The body is written while the answer is read, so a server
    /// that answers before reading it all (a body over the limit) is seen answering.
    pub fn http(&self, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
        http(self.port, method, target, headers, body)
    }
}

/// An HTTP answer: status code, raw header block, body as (lossy) text.
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl HttpReply {
    /// The body parsed as JSON, or `Null`.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The `error` message of a JSON error body, or "" when there is none.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_string()
    }
}

/// See [`Host::http`].
pub fn http(port: u16, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has("content-length") && !has("transfer-encoding") && (!body.is_empty() || method == "POST") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let writer = {
        let mut w = s.try_clone().unwrap();
        let body = body.to_vec();
        std::thread::spawn(move || {
            // The server may answer and close before reading it all: not an error here.
            let _ = w.write_all(&body);
        })
    };
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A reset after the answer (the unread rest of a big body) ends the answer.
            Err(_) if !raw.is_empty() => break,
            Err(e) => panic!("{method} {target}: no answer: {e}"),
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("not HTTP: {text}"));
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.into() };
    HttpReply { status, headers: head.to_string(), body }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

impl Host {
    /// Sends SIGTERM and waits up to `limit` for the process to exit; returns its exit status.
    /// The test fails (and the process is killed) when it is still running after `limit`.
    pub async fn terminate_within(&mut self, limit: Duration) -> ExitStatus {
        let pid = self.pid().expect("the host is running");
        let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        let what = self.waiting_for(format!("steward run (pid {pid}) to exit after SIGTERM"));
        let child = self.child.as_mut().expect("the host is running");
        let status = eventually(limit, what, async || child.try_wait().unwrap(), Option::is_some).await;
        self.child = None;
        status.expect("exited")
    }
}
