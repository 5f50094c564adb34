//! A real `steward run` process on a temporary directory, and an API client for it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use steward::client::Client;

use super::poll_pause;

/// One host process with its own directory, config, resources and plugins.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub port: u16,
    config: PathBuf,
    child: Option<Child>,
    client: Client,
}

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
        let config = format!(
            "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\n{api}plugins:\n  mcpserver: {{ capabilities: [services] }}\n  misbehave: {{ timeout: 2s }}\n{extra_config}"
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
        let child = Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(["run", "--config"])
            .arg(&self.config)
            .env("STEWARD_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(v) = self.client.get("/api/v1/overview").await
                && v["ready"] == true
            {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("steward exited with {status}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "steward not ready after 60 s:\n{}", self.log());
            poll_pause(50).await;
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
        let deadline = Instant::now() + limit;
        loop {
            let v = self.object(key).await;
            if f(v.as_ref()) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{key}: timed out waiting for {what}; last: {v:#?}\nlog:\n{}",
                tail(&self.log())
            );
            poll_pause(25).await;
        }
    }

    /// Polls `GET path` until `f` holds.
    pub async fn wait_get(&self, path: &str, limit: Duration, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.client.get(path).await.unwrap_or(Value::Null);
            if f(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{path}: timed out waiting for {what}; last: {v:#}\nlog:\n{}",
                tail(&self.log())
            );
            poll_pause(25).await;
        }
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

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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
        let out =
            Command::new(env!("CARGO_BIN_EXE_steward")).args(args).arg("--config").arg(&self.config).output().unwrap();
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
    /// Waits until the host's log contains `needle`.
    pub async fn wait_log(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.log().contains(needle) {
            assert!(Instant::now() < deadline, "log never said {needle:?}:\n{}", tail(&self.log()));
            poll_pause(25).await;
        }
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
