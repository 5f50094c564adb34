//! Kubernetes mode, side by side with kube-rs: `kube-converge` and `kube-latency`; and Steward
//! alone: `kube-resync` and `kube-handover`.
//!
//! Three processes, so that each one's memory is its own: the fake API server
//! (`steward-bench __fake-apiserver KUBECONFIG`), a `steward run` in Kubernetes mode
//! (`__host run`), and the kube-rs peer ([`crate::peer`], `__peer`). The bench talks to the fake
//! over a pipe: it answers `clear`, `requests`, `converged NS N SECS` and
//! `status NS NAME VALUE SECS` (see [`fake_main`]), each with one JSON line.
//!
//! Each scenario also runs on a real kube-apiserver of `testing/realkube` when it is installed
//! ([`Real`]): the bench then sees the objects itself (lists; `kube-latency`: a watch) and reads
//! the request counts from the server's `/metrics`.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, anyhow, bail};
use futures_util::StreamExt as _;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};

mod handover;

pub use handover::{handover, handover_real};

use crate::child::{ProcStats, built_plugins, http_get};
use crate::peer::noop_ar;
use crate::round;

/// The finalizer Steward (and the peer) hold objects with.
pub const FINALIZER: &str = "steward.dev/finalizer";
/// The namespace of Steward's objects.
const NS_STEWARD: &str = "bench-steward";
/// The namespace of the peer's objects.
const NS_PEER: &str = "bench-peer";
/// Concurrent reconciles of both: Steward's default `queue.workers`.
const WORKERS: usize = 4;
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Objects of the baseline run whose RSS `rss_per_object_kib` subtracts.
const BASELINE: usize = 10;

fn converge_timeout(n: usize) -> Duration {
    Duration::from_secs(60 + n as u64 / 50)
}

fn epoch_us(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

// ---------------------------------------------------------------------------------------------
// The fake API server's process.

/// `steward-bench __fake-apiserver KUBECONFIG`: serves the fake API server on a loopback port,
/// writes a kubeconfig for it, prints `ready`, then answers one command per stdin line with one
/// JSON line on stdout, until stdin closes:
///
/// - `clear`: forgets the request log;
/// - `requests`: the request log as counts, `{"METHOD resource[/subresource] verb": count}`;
/// - `converged NS BASE N SECS`: waits (polling every 10 ms, without copying objects) until N
///   `Noop` objects of NS have a status whose `observedGeneration` is their generation and whose
///   `value` is their `spec.value`; answers `{"first_us", "all_us"}`: the wall-clock times (µs
///   since the epoch) more than BASE, and N, were first seen so;
/// - `status NS NAME VALUE SECS`: waits (re-checking after every write) until object NAME's status
///   shows VALUE at its generation; answers `{"at_us"}`.
///
/// Failures answer `{"error": ...}`.
pub fn fake_main(args: &[String]) -> Result<()> {
    let [kubeconfig] = args else { bail!("usage: __fake-apiserver KUBECONFIG") };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let options = steward_fake_apiserver::Options { history_len: 100_000, ..Default::default() };
        let server = steward_fake_apiserver::FakeApiServer::start_with(options).await?;
        server.write_kubeconfig(kubeconfig)?;
        println!("ready");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        while let Some(line) = rx.recv().await {
            let answer = fake_command(&server, &line).await.unwrap_or_else(|e| json!({"error": format!("{e:#}")}));
            println!("{answer}");
        }
        anyhow::Ok(())
    })
}

fn converged_obj(v: &Value, ns: &str) -> bool {
    v["metadata"]["namespace"] == ns
        && v["status"]["observedGeneration"].as_i64().is_some()
        && v["status"]["observedGeneration"] == v["metadata"]["generation"]
        && v["status"]["value"] == v["spec"]["value"]
}

async fn fake_command(server: &steward_fake_apiserver::FakeApiServer, line: &str) -> Result<Value> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let secs = |s: &str| s.parse::<u64>().map(Duration::from_secs).context("SECS");
    match words.as_slice() {
        ["clear"] => {
            server.clear_requests();
            Ok(json!({"ok": true}))
        }
        ["requests"] => {
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            for r in server.requests() {
                let resource = match (&r.resource, &r.subresource) {
                    (Some(res), Some(sub)) => format!("{res}/{sub}"),
                    (Some(res), None) => res.clone(),
                    _ => r.path.clone(),
                };
                *counts.entry(format!("{} {resource} {:?}", r.method, r.verb)).or_default() += 1;
            }
            Ok(json!(counts))
        }
        ["converged", ns, base, n, s] => {
            let n: usize = n.parse().context("N")?;
            let base: usize = base.parse().context("BASE")?;
            let deadline = Instant::now() + secs(s)?;
            let mut first = None;
            loop {
                let count = server.view(|v| v.count_objects("test.steward.dev", "noops", |o| converged_obj(o, ns)));
                let now = SystemTime::now();
                if count > base && first.is_none() {
                    first = Some(now);
                }
                if count >= n {
                    return Ok(json!({"first_us": epoch_us(first.unwrap_or(now)), "all_us": epoch_us(now)}));
                }
                if Instant::now() > deadline {
                    bail!("only {count} of {n} objects in {ns} converged after {s} s");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        ["status", ns, name, value, s] => {
            server
                .wait_for(secs(s)?, |v| {
                    v.object("test.steward.dev", "v1", "noops", Some(ns), name).is_some_and(|o| {
                        o["status"]["value"] == *value
                            && o["status"]["observedGeneration"] == o["metadata"]["generation"]
                    })
                })
                .await
                .with_context(|| format!("{ns}/{name} never showed {value}"))?;
            Ok(json!({"at_us": epoch_us(SystemTime::now())}))
        }
        _ => bail!("unknown command `{line}`"),
    }
}

/// The fake API server's process, from the bench's side. Killed on drop.
struct Fake {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    kubeconfig: PathBuf,
}

impl Fake {
    fn start(dir: &Path) -> Result<Self> {
        let kubeconfig = dir.join("kubeconfig");
        let mut child = Command::new(std::env::current_exe()?)
            .arg("__fake-apiserver")
            .arg(&kubeconfig)
            .env("STEWARD_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("fake.log"))?)
            .spawn()
            .context("cannot start the fake API server process")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("the fake API server did not start: {line:?}");
        }
        Ok(Self { child, stdin, stdout, kubeconfig })
    }

    fn send(&mut self, cmd: &str) -> Result<()> {
        writeln!(self.stdin, "{cmd}")?;
        Ok(self.stdin.flush()?)
    }

    fn answer(&mut self) -> Result<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the fake API server exited");
        }
        let v: Value = serde_json::from_str(&line).with_context(|| format!("the fake answered {line:?}"))?;
        if let Some(e) = v.get("error") {
            bail!("the fake API server: {}", e.as_str().unwrap_or_default());
        }
        Ok(v)
    }

    fn call(&mut self, cmd: &str) -> Result<Value> {
        self.send(cmd)?;
        self.answer()
    }

    /// Request counts by method, resource and verb, and their total.
    fn requests(&mut self) -> Result<(BTreeMap<String, u64>, u64)> {
        let v = self.call("requests")?;
        let counts: BTreeMap<String, u64> = serde_json::from_value(v)?;
        let total = counts.values().sum();
        Ok((counts, total))
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// The real API server.

/// `testing/realkube/NAME` of this checkout.
fn realkube_tool(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/realkube").join(name)
}

/// Whether realkube's `start` can run: its kube-apiserver is built in its cache dir and etcd is
/// installed (what `testing/realkube/install` does).
fn realkube_installed() -> bool {
    let cache = std::env::var_os("STEWARD_REALKUBE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/steward-realkube")));
    realkube_tool("start").is_file()
        && cache.is_some_and(|c| c.join("bin/kube-apiserver").is_file())
        && Path::new("/usr/bin/etcd").is_file()
}

/// A real kube-apiserver (with etcd) of `testing/realkube`, started for one run in a run
/// directory of its own. Stopped, and the directory removed, on drop.
struct Real {
    dir: PathBuf,
    kubeconfig: PathBuf,
    apiserver: String,
    token: String,
}

impl Real {
    fn start() -> Result<Self> {
        let start = realkube_tool("start");
        let out = Command::new(&start)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {}", start.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = stdout.lines().last().map(PathBuf::from);
        let dir = kubeconfig.as_deref().and_then(Path::parent).map(Path::to_path_buf);
        if let Some(dir) = dir.as_deref().filter(|d| d.is_dir()) {
            // From here on the instance may be running: stop it whatever happens next.
            let mut real = Self {
                dir: dir.to_path_buf(),
                kubeconfig: kubeconfig.unwrap_or_default(),
                apiserver: String::new(),
                token: String::new(),
            };
            if out.status.success() {
                let env_path = dir.join("env");
                let text =
                    std::fs::read_to_string(&env_path).with_context(|| format!("reading {}", env_path.display()))?;
                let env: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
                let get = |k: &str| {
                    env.get(k).map(|v| v.to_string()).with_context(|| format!("{} has no {k}", env_path.display()))
                };
                real.kubeconfig = get("KUBECONFIG")?.into();
                real.apiserver = get("APISERVER")?;
                real.token = get("APISERVER_TOKEN")?;
                return Ok(real);
            }
        }
        bail!("{} failed ({}):\n{}", start.display(), out.status, String::from_utf8_lossy(&out.stderr))
    }

    /// `apiserver_request_total` of the server's `/metrics` (read as the admin), summed by
    /// `VERB resource[/subresource]`; non-resource requests (as `/metrics`) left out.
    fn requests(&self) -> Result<BTreeMap<String, u64>> {
        let out = Command::new("curl")
            .args(["-sSfk", "--max-time", "30", "-H"])
            .arg(format!("Authorization: Bearer {}", self.token))
            .arg(format!("{}/metrics", self.apiserver))
            .stdin(Stdio::null())
            .output()
            .context("cannot run curl")?;
        if !out.status.success() {
            bail!("GET {}/metrics: {}", self.apiserver, String::from_utf8_lossy(&out.stderr).trim());
        }
        let mut counts = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            let labels: BTreeMap<&str, &str> = labels
                .split("\",")
                .filter_map(|kv| kv.split_once("=\""))
                .map(|(k, v)| (k, v.trim_end_matches('"')))
                .collect();
            let label = |k: &str| labels.get(k).copied().unwrap_or_default();
            if label("resource").is_empty() {
                continue;
            }
            let resource = match label("subresource") {
                "" => label("resource").to_string(),
                sub => format!("{}/{sub}", label("resource")),
            };
            let value: f64 = value.trim().parse().with_context(|| format!("a metric line: {line}"))?;
            *counts.entry(format!("{} {resource}", label("verb"))).or_default() += value as u64;
        }
        if counts.is_empty() {
            bail!("{}/metrics has no apiserver_request_total", self.apiserver);
        }
        Ok(counts)
    }
}

impl Drop for Real {
    fn drop(&mut self) {
        let _ = Command::new(realkube_tool("stop"))
            .arg(&self.dir)
            .arg("--clean")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

// ---------------------------------------------------------------------------------------------
// The two controllers.

/// Which controller a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Steward,
    Peer,
}

impl Who {
    fn ns(self) -> &'static str {
        match self {
            Who::Steward => NS_STEWARD,
            Who::Peer => NS_PEER,
        }
    }
}

/// Steward's directory: the Noop plugin, a compile cache, a state store and a config in
/// Kubernetes mode watching [`NS_STEWARD`], leader election off (the peer has none).
struct StewardDir {
    dir: tempfile::TempDir,
    /// The `resync` interval of the config, when not the default (10 m).
    resync: Option<Duration>,
}

impl StewardDir {
    fn new() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("steward-bench-kube-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("plugins"))?;
        let noop = built_plugins()?.get("noop").context("the noop plugin was not built")?;
        std::fs::copy(noop, dir.path().join("plugins/noop.wasm"))?;
        Ok(Self { dir, resync: None })
    }

    fn config(&self, addr: SocketAddr) -> Result<PathBuf> {
        let path = self.dir.path().join("steward.yaml");
        std::fs::write(
            &path,
            format!(
                "mode: kubernetes\nplugin_dir: plugins\nstate: state/state.redb\ncache_dir: cache\napi: {{ listen: {addr} }}\n\
                 queue: {{ workers: {WORKERS}, debounce: 1ms, debounce_max: 1ms }}\n\
                 kubernetes: {{ namespaces: [{NS_STEWARD}], leaderElection: {{ enabled: false }} }}\n{}",
                self.resync.map(|r| format!("resync: {}ms\n", r.as_millis())).unwrap_or_default()
            ),
        )?;
        Ok(path)
    }
}

/// A running controller process (Steward or the peer). Killed on drop.
struct Proc {
    who: Who,
    child: Child,
    /// Steward's API address.
    api: Option<SocketAddr>,
    /// The peer's stdin and stdout.
    pipes: Option<(ChildStdin, BufReader<ChildStdout>)>,
    log: PathBuf,
    spawned: SystemTime,
    stopped: bool,
}

impl Proc {
    fn spawn(who: Who, kubeconfig: &Path, steward: &StewardDir, log: PathBuf) -> Result<Self> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.env("KUBECONFIG", kubeconfig)
            .env("STEWARD_LOG", "warn")
            .stderr(std::fs::File::create(&log)?)
            .current_dir(steward.dir.path());
        let mut api = None;
        match who {
            Who::Steward => {
                let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
                cmd.args(["__host", "run", "--config"]).arg(steward.config(addr)?);
                cmd.stdin(Stdio::null()).stdout(Stdio::null());
                api = Some(addr);
            }
            Who::Peer => {
                cmd.args(["__peer", NS_PEER, &WORKERS.to_string()]);
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
            }
        }
        let spawned = SystemTime::now();
        let mut child = cmd.spawn().with_context(|| format!("cannot start {who:?}"))?;
        let pipes = match who {
            Who::Peer => Some((
                child.stdin.take().context("no stdin")?,
                BufReader::new(child.stdout.take().context("no stdout")?),
            )),
            Who::Steward => None,
        };
        Ok(Self { who, child, api, pipes, log, spawned, stopped: false })
    }

    fn alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("{:?} exited early ({status})", self.who),
            None => Ok(()),
        }
    }

    /// Waits until Steward answers `/readyz` (its caches have listed).
    fn wait_ready(&mut self) -> Result<()> {
        let start = Instant::now();
        let addr = self.api.context("only Steward has /readyz")?;
        loop {
            if matches!(http_get(addr, "/readyz"), Ok((200, _))) {
                return Ok(());
            }
            self.alive()?;
            if start.elapsed() > READY_TIMEOUT {
                bail!("Steward was not ready after {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Reconciles so far (Steward: `steward_reconcile_total` from `/metrics`; the peer: its count).
    fn reconciles(&mut self) -> Result<u64> {
        match (self.api, self.pipes.as_mut()) {
            (Some(_), _) => {
                let total = self.metric("steward_reconcile_total{", "")?;
                if total == 0.0 {
                    bail!("Steward's /metrics shows no reconcile");
                }
                Ok(total as u64)
            }
            (None, Some((stdin, out))) => {
                writeln!(stdin, "stats")?;
                stdin.flush()?;
                let mut line = String::new();
                out.read_line(&mut line)?;
                let v: Value = serde_json::from_str(&line).with_context(|| format!("the peer answered {line:?}"))?;
                v["reconciles"].as_u64().context("no reconciles in the peer's stats")
            }
            _ => bail!("no way to ask {:?}", self.who),
        }
    }

    /// The sum of Steward's `/metrics` lines that start with `prefix` and contain `labels`.
    fn metric(&self, prefix: &str, labels: &str) -> Result<f64> {
        let addr = self.api.context("only Steward has /metrics")?;
        let (code, body) = http_get(addr, "/metrics")?;
        if code != 200 {
            bail!("GET /metrics: {code}");
        }
        Ok(String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| l.starts_with(prefix) && l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    fn stats(&self) -> Result<ProcStats> {
        ProcStats::of(self.child.id())
    }

    /// SIGTERM (Steward) or closing stdin (the peer), and a wait for the exit (SIGKILL after 15 s).
    fn stop(mut self) -> Result<()> {
        self.stopped = true;
        self.pipes = None;
        if self.who == Who::Steward {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    self.print_log_tail();
                    bail!("{:?} exited with {status}", self.who);
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.child.kill()?;
        self.child.wait()?;
        bail!("{:?} did not stop within 15 s", self.who)
    }

    fn print_log_tail(&self) {
        crate::child::print_log_tail(&format!("the {:?} log", self.who), &self.log);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.stopped {
            self.print_log_tail();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Set-up through a client.

/// The API server a run uses.
enum Server {
    Fake(Fake),
    Real(Real),
}

impl Server {
    fn kubeconfig(&self) -> &Path {
        match self {
            Server::Fake(f) => &f.kubeconfig,
            Server::Real(r) => &r.kubeconfig,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Server::Fake(_) => "fake",
            Server::Real(_) => "real",
        }
    }
}

/// When the objects of a namespace were seen converged, by the bench's lists.
struct Seen {
    /// The first time more than the base were.
    first: SystemTime,
    /// The first time all were.
    all: SystemTime,
    /// The lists it took.
    polls: u64,
}

/// The bench's side: the API server, a client of it, Steward's directory and a runtime.
struct Bench {
    rt: tokio::runtime::Runtime,
    server: Server,
    client: kube::Client,
    steward: StewardDir,
}

impl Bench {
    /// Starts the fake (or the real server when `real`), installs the Noop CRD with
    /// `steward crds --apply` (on the real server, waits until it serves it), creates both
    /// namespaces, and fills Steward's compile cache with one start (on no objects).
    fn new(real: bool) -> Result<Self> {
        let steward = StewardDir::new()?;
        let server = if real { Server::Real(Real::start()?) } else { Server::Fake(Fake::start(steward.dir.path())?) };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let client = rt.block_on(async {
            let kc = kube::config::Kubeconfig::read_from(server.kubeconfig())?;
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            anyhow::Ok(kube::Client::try_from(cfg)?)
        })?;
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let status = Command::new(std::env::current_exe()?)
            .args(["__host", "crds", "--apply", "--config"])
            .arg(steward.config(addr)?)
            .env("KUBECONFIG", server.kubeconfig())
            .current_dir(steward.dir.path())
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("steward crds --apply failed ({status})");
        }
        if real {
            // The CRD is served once Established: until then a list of its objects fails.
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS_STEWARD, &noop_ar());
            let deadline = Instant::now() + Duration::from_secs(60);
            while rt.block_on(api.list(&ListParams::default().limit(1))).is_err() {
                if Instant::now() > deadline {
                    bail!("the Noop CRD was not served 60 s after `steward crds --apply`");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        rt.block_on(async {
            let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
            for ns in [NS_STEWARD, NS_PEER] {
                let body: k8s_openapi::api::core::v1::Namespace =
                    serde_json::from_value(json!({"metadata": {"name": ns}}))?;
                nss.create(&PostParams::default(), &body).await.with_context(|| format!("namespace {ns}"))?;
            }
            anyhow::Ok(())
        })?;
        let mut b = Self { rt, server, client, steward };
        let mut host = b.spawn(Who::Steward, "warm")?;
        host.wait_ready()?;
        host.stop()?;
        Ok(b)
    }

    fn spawn(&mut self, who: Who, what: &str) -> Result<Proc> {
        let log = self.steward.dir.path().join(format!("{who:?}-{what}.log").to_lowercase());
        Proc::spawn(who, self.server.kubeconfig(), &self.steward, log)
    }

    /// The real API server.
    fn real(&self) -> Result<&Real> {
        match &self.server {
            Server::Real(r) => Ok(r),
            Server::Fake(_) => bail!("this needs the real API server"),
        }
    }

    /// The fake API server.
    fn fake(&mut self) -> Result<&mut Fake> {
        match &mut self.server {
            Server::Fake(f) => Ok(f),
            Server::Real(_) => bail!("this needs the fake API server"),
        }
    }

    /// Lists the objects of `ns` every `every` after the previous list ended (the real server: the
    /// fake answers `converged` instead) until `n` are converged, while `p` runs. A list of
    /// thousands of objects loads a real server: a run that times nothing by it lists seldom.
    fn poll_converged(&self, p: &mut Proc, ns: &str, base: usize, n: usize, every: Duration) -> Result<Seen> {
        let api = self.noops(ns);
        // The real server is slower than the fake: 60 to 150 objects/s on two cores.
        let timeout = Duration::from_secs(60 + n as u64 / 10);
        let deadline = Instant::now() + timeout;
        let (mut first, mut polls) = (None, 0u64);
        loop {
            let list = self.rt.block_on(api.list(&ListParams::default())).with_context(|| format!("list {ns}"))?;
            polls += 1;
            let now = SystemTime::now();
            let count =
                list.items.iter().filter(|o| serde_json::to_value(o).is_ok_and(|v| converged_obj(&v, ns))).count();
            if count > base && first.is_none() {
                first = Some(now);
            }
            if count >= n {
                return Ok(Seen { first: first.unwrap_or(now), all: now, polls });
            }
            p.alive()?;
            if Instant::now() > deadline {
                bail!("only {count} of {n} objects in {ns} converged after {timeout:?}");
            }
            std::thread::sleep(every);
        }
    }

    fn noops(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &noop_ar())
    }

    /// Creates `o{i}` for `i` in `ids` in `ns`, 16 requests in flight.
    fn create(&self, ns: &str, ids: std::ops::Range<usize>) -> Result<()> {
        let api = self.noops(ns);
        self.rt.block_on(async {
            let results: Vec<Result<()>> = futures_util::stream::iter(ids)
                .map(|i| {
                    let api = api.clone();
                    async move {
                        let mut o = DynamicObject::new(&format!("o{i}"), &noop_ar()).within(ns);
                        o.data = json!({"spec": {"value": "v"}});
                        api.create(&PostParams::default(), &o).await.with_context(|| format!("create {ns}/o{i}"))?;
                        Ok(())
                    }
                })
                .buffer_unordered(16)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The scenarios.

/// One controller's converge of N objects.
struct ConvergeRun {
    /// Process start to every status written.
    seconds: f64,
    /// First status seen to every status written.
    window: f64,
    reconciles: u64,
    requests: BTreeMap<String, u64>,
    total_requests: u64,
    stats: ProcStats,
    cpu_after: Duration,
}

/// Runs `who` over its namespace, which holds `base` converged objects and `n - base` new ones,
/// until all `n` are converged.
fn converge_one(b: &mut Bench, who: Who, base: usize, n: usize) -> Result<ConvergeRun> {
    if matches!(b.server, Server::Real(_)) {
        return converge_one_real(b, who, base, n);
    }
    let fake = b.fake()?;
    fake.call("clear")?;
    fake.send(&format!("converged {} {base} {n} {}", who.ns(), converge_timeout(n).as_secs()))?;
    let mut p = b.spawn(who, &format!("converge-{n}"))?;
    let answer = b.fake()?.answer();
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            p.alive()?;
            return Err(e);
        }
    };
    let stats = p.stats()?;
    let (requests, total_requests) = b.fake()?.requests()?;
    let reconciles = p.reconciles()?;
    let first = answer["first_us"].as_f64().context("no first_us")?;
    let all = answer["all_us"].as_f64().context("no all_us")?;
    let seconds = (all - epoch_us(p.spawned)) / 1e6;
    let window = ((all - first) / 1e6).max(0.001);
    p.stop()?;
    Ok(ConvergeRun { seconds, window, reconciles, requests, total_requests, stats, cpu_after: stats.cpu })
}

/// [`converge_one`] on the real API server: polls the objects of its namespace with a list
/// every 10 ms (the time a list takes is the resolution), and counts requests from the API
/// server's `apiserver_request_total`, read before the start and after the stop, less the
/// bench's own polls.
fn converge_one_real(b: &mut Bench, who: Who, base: usize, n: usize) -> Result<ConvergeRun> {
    let before = b.real()?.requests()?;
    let mut p = b.spawn(who, &format!("converge-{n}"))?;
    let seen = b.poll_converged(&mut p, who.ns(), base, n, Duration::from_millis(10))?;
    let stats = p.stats()?;
    let reconciles = p.reconciles()?;
    let seconds = seen.all.duration_since(p.spawned).unwrap_or_default().as_secs_f64();
    let window = seen.all.duration_since(seen.first).unwrap_or_default().as_secs_f64().max(0.001);
    p.stop()?;
    // A watch is counted when it ends: give the server a moment to see the closed connections.
    std::thread::sleep(Duration::from_millis(500));
    let mut requests = request_delta(&before, &b.real()?.requests()?);
    if let Some(lists) = requests.get_mut("LIST noops") {
        *lists = lists.saturating_sub(seen.polls);
    }
    requests.retain(|_, v| *v > 0);
    let total_requests = requests.values().sum();
    Ok(ConvergeRun { seconds, window, reconciles, requests, total_requests, stats, cpu_after: stats.cpu })
}

/// The counts of `after` less those of `before` (counters of the same server), the zeros left out.
fn request_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|(_, d)| *d > 0)
        .collect()
}

/// `kube-converge N` on the fake API server: see the crate doc.
pub fn converge(n: usize) -> Result<Value> {
    converge_on(false, n)
}

/// `kube-converge N` on a real API server of `testing/realkube`, started for the run and stopped
/// after it; `None` (and a line on stderr saying how to install it) when it is not installed.
pub fn converge_real(n: usize) -> Result<Option<Value>> {
    on_real(&format!("kube-converge {n}"), || converge_on(true, n))
}

fn converge_on(real: bool, n: usize) -> Result<Value> {
    if n <= BASELINE {
        bail!("kube-converge needs more than {BASELINE} objects (the baseline run's)");
    }
    let mut b = Bench::new(real)?;
    b.create(NS_STEWARD, 0..BASELINE)?;
    b.create(NS_PEER, 0..BASELINE)?;
    let base_s = converge_one(&mut b, Who::Steward, 0, BASELINE)?.stats.rss_mib;
    let base_p = converge_one(&mut b, Who::Peer, 0, BASELINE)?.stats.rss_mib;
    let t = Instant::now();
    b.create(NS_STEWARD, BASELINE..n)?;
    b.create(NS_PEER, BASELINE..n)?;
    eprintln!("  {} objects created in {:.1} s", 2 * (n - BASELINE), t.elapsed().as_secs_f64());
    let s = converge_one(&mut b, Who::Steward, BASELINE, n)?;
    eprintln!("  Steward: {n} converged in {:.2} s ({:.2} s from its first new status)", s.seconds, s.window);
    let p = converge_one(&mut b, Who::Peer, BASELINE, n)?;
    eprintln!("  kube-rs: {n} converged in {:.2} s ({:.2} s from its first new status)", p.seconds, p.window);
    let fresh = (n - BASELINE) as f64;
    let rate_s = fresh / s.window;
    let rate_p = fresh / p.window;
    let per_obj = |r: &ConvergeRun, base: f64| (r.stats.rss_mib - base) * 1024.0 / fresh;
    let (kib_s, kib_p) = (per_obj(&s, base_s), per_obj(&p, base_p));
    if kib_p <= 0.0 {
        bail!("the peer's RSS did not grow with {n} objects ({base_p:.1} MiB -> {:.1} MiB)", p.stats.rss_mib);
    }
    let side = |r: &ConvergeRun, rate: f64, base: f64, kib: f64| {
        json!({
            "seconds": round(r.seconds),
            "reconcile_seconds": round(r.window),
            "objects_per_sec": round(rate),
            "reconciles": r.reconciles,
            "cpu_seconds": round(r.cpu_after.as_secs_f64()),
            "cpu_per_object_us": round(r.cpu_after.as_secs_f64() / n as f64 * 1e6),
            "rss_mib": round(r.stats.rss_mib),
            "peak_rss_mib": round(r.stats.peak_rss_mib),
            "baseline_rss_mib": round(base),
            "rss_per_object_kib": round(kib),
            "api_requests": r.total_requests,
            "api_requests_per_object": round(r.total_requests as f64 / n as f64),
            "api_requests_per_reconcile": round(r.total_requests as f64 / r.reconciles as f64),
            "requests_by_verb": r.requests,
        })
    };
    Ok(json!({
        "scenario": "kube-converge", "n": n, "workers": WORKERS, "server": b.server.name(),
        "steward": side(&s, rate_s, base_s, kib_s),
        "kube_rs": side(&p, rate_p, base_p, kib_p),
        "rate_ratio": round(rate_s / rate_p),
        "rate_ratio_target_min": 0.8,
        "rss_per_object_ratio": round(kib_s / kib_p),
        "rss_per_object_ratio_target_max": 1.5,
    }))
}

/// The latencies of `writes` spec changes of `ns/o0` on the fake, each timed from just before its
/// PATCH to the fake seeing the new value at the new generation (it re-checks after every write).
fn latencies_fake(b: &mut Bench, ns: &str, writes: usize) -> Result<Vec<Duration>> {
    let api = b.noops(ns);
    let mut out = Vec::with_capacity(writes);
    for i in 0..writes {
        let value = format!("w{i}");
        let t = Instant::now();
        b.rt.block_on(api.patch("o0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": value}}))))
            .with_context(|| format!("patch {ns}/o0"))?;
        b.fake()?.call(&format!("status {ns} o0 {value} 30"))?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// How long [`latencies_real`] waits for one status.
const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

/// The latencies of `writes` spec changes of `ns/o0` on the real server, each timed from just
/// before its PATCH to the arrival, on the bench's own watch of the objects of `ns` (a
/// `kube::runtime::watcher`, established before the first write), of the event showing `o0`'s
/// status with the new value at its generation. So each figure also includes the server's
/// delivery of that event to the bench (and its decoding), which the fake's in-process check
/// does not; the same for Steward and the peer.
fn latencies_real(b: &mut Bench, ns: &str, writes: usize) -> Result<Vec<Duration>> {
    let api = b.noops(ns);
    // (arrival, status.value) of every event of `o0` whose status is at its generation; `None`
    // once the initial list is done.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<(Instant, String)>>();
    let watched = api.clone();
    let watch = b.rt.spawn(async move {
        let mut events = watcher::watcher(watched, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let msg = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => at_generation(&o).map(|v| Some((at, v))),
                Ok(watcher::Event::InitDone) => Some(None),
                Ok(_) => None,
                Err(e) => {
                    eprintln!("  the bench's watch: {e}");
                    None
                }
            };
            if let Some(msg) = msg
                && tx.send(msg).is_err()
            {
                return;
            }
        }
    });
    let result = (|| {
        // Every write is made once the watch has listed and is watching.
        loop {
            match b.rt.block_on(async { tokio::time::timeout(STATUS_TIMEOUT, rx.recv()).await }) {
                Ok(Some(None)) => break,
                Ok(Some(Some(_))) => {}
                Ok(None) => bail!("the bench's watch of {ns} ended"),
                Err(_) => bail!("the bench's watch of {ns} did not list within {STATUS_TIMEOUT:?}"),
            }
        }
        let mut out = Vec::with_capacity(writes);
        for i in 0..writes {
            let value = format!("w{i}");
            let t = Instant::now();
            b.rt.block_on(api.patch("o0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": value}}))))
                .with_context(|| format!("patch {ns}/o0"))?;
            let deadline = tokio::time::Instant::now() + STATUS_TIMEOUT;
            let at = loop {
                match b.rt.block_on(async { tokio::time::timeout_at(deadline, rx.recv()).await }) {
                    Ok(Some(Some((at, v)))) if v == value => break at,
                    Ok(Some(_)) => {}
                    Ok(None) => bail!("the bench's watch of {ns} ended"),
                    Err(_) => bail!("{ns}/o0 never showed {value} within {STATUS_TIMEOUT:?}"),
                }
            };
            out.push(at.saturating_duration_since(t));
        }
        Ok(out)
    })();
    watch.abort();
    result
}

/// `o0`'s `status.value` when its status is at its generation.
fn at_generation(o: &DynamicObject) -> Option<String> {
    let status = o.data.get("status")?;
    (o.metadata.name.as_deref() == Some("o0")
        && status["observedGeneration"].as_i64().is_some()
        && status["observedGeneration"].as_i64() == o.metadata.generation)
        .then(|| status["value"].as_str().map(str::to_string))
        .flatten()
}

/// `kube-latency WRITES` on the fake API server: see the crate doc.
pub fn latency(objects: usize, writes: usize) -> Result<Value> {
    latency_on(false, objects, writes)
}

/// `kube-latency WRITES` on a real API server of `testing/realkube`, started for the run and
/// stopped after it; `None` (and a line on stderr saying how to install it) when it is not
/// installed.
pub fn latency_real(objects: usize, writes: usize) -> Result<Option<Value>> {
    on_real(&format!("kube-latency {writes}"), || latency_on(true, objects, writes))
}

/// Runs `run` (the scenario `what` on a real API server) when realkube is installed; otherwise
/// `None`, after one stderr line saying it was skipped and how to install realkube.
fn on_real(what: &str, run: impl FnOnce() -> Result<Value>) -> Result<Option<Value>> {
    if !realkube_installed() {
        eprintln!(
            "{what}: the real API server run was skipped: realkube is not installed; \
             install it with `{}` (Debian 12, root or sudo; see testing/realkube/README.md)",
            realkube_tool("install").display()
        );
        return Ok(None);
    }
    run().map(Some)
}

fn latency_on(real: bool, objects: usize, writes: usize) -> Result<Value> {
    if writes == 0 || objects == 0 {
        bail!("kube-latency needs at least one object and one write");
    }
    let mut b = Bench::new(real)?;
    b.create(NS_STEWARD, 0..objects)?;
    b.create(NS_PEER, 0..objects)?;
    let mut sides = BTreeMap::new();
    for who in [Who::Steward, Who::Peer] {
        let samples = if real {
            let mut p = b.spawn(who, "latency")?;
            b.poll_converged(&mut p, who.ns(), 0, objects, Duration::from_secs(1))?;
            let samples = latencies_real(&mut b, who.ns(), writes)?;
            p.stop()?;
            samples
        } else {
            b.fake()?.send(&format!("converged {} 0 {objects} {}", who.ns(), converge_timeout(objects).as_secs()))?;
            let mut p = b.spawn(who, "latency")?;
            if let Err(e) = b.fake()?.answer() {
                p.alive()?;
                return Err(e);
            }
            let samples = latencies_fake(&mut b, who.ns(), writes)?;
            p.stop()?;
            samples
        };
        let ms = |d: Duration| round(d.as_secs_f64() * 1e3);
        let mut sorted = samples;
        sorted.sort();
        let pick = |q: f64| sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)];
        sides.insert(
            if who == Who::Steward { "steward" } else { "kube_rs" },
            json!({"p50_ms": ms(pick(0.5)), "p99_ms": ms(pick(0.99)), "max_ms": ms(*sorted.last().ok_or_else(|| anyhow!("no samples"))?)}),
        );
    }
    let ratio = sides["steward"]["p50_ms"].as_f64().unwrap_or(0.0) / sides["kube_rs"]["p50_ms"].as_f64().unwrap_or(0.0);
    if !ratio.is_finite() {
        bail!("a p50 of zero: {sides:?}");
    }
    Ok(json!({
        "scenario": "kube-latency", "objects": objects, "writes": writes, "workers": WORKERS, "server": b.server.name(),
        "debounce_ms": 1,
        "steward": sides["steward"], "kube_rs": sides["kube_rs"],
        "p50_ratio": round(ratio),
    }))
}

/// The resync interval `kube-resync` configures: longer than N objects take to converge (the
/// fake: about 750 objects/s; the real server: 60 to 150), so that no resync starts before the
/// bench's mark; the scenario fails if one did.
fn resync_interval(real: bool, n: usize) -> Duration {
    if real {
        Duration::from_secs(30) + Duration::from_millis(n as u64 * 30)
    } else {
        Duration::from_secs(10) + Duration::from_millis(n as u64 * 3)
    }
}

/// How long before the first resync is due `kube-resync` marks the start of its window.
const MARK_AHEAD: Duration = Duration::from_secs(2);

/// `kube-resync` on the real server runs at most this many objects (see the crate doc).
pub const REAL_RESYNC_MAX: usize = 3_000;

/// What a request log says of the writes and reads of the `Noop` objects and of Events (the
/// requests Steward makes; a real server's requests to itself, such as its GETs of namespaces
/// and services, are left out), from counts keyed as the fake's
/// (`METHOD resource[/subresource] Verb`) or as the real server's (`VERB resource[/subresource]`).
#[derive(Debug, Default, PartialEq, Eq)]
struct RequestKinds {
    /// PUTs and PATCHes of a `/status` subresource.
    status_writes: u64,
    /// Every write: creates, updates, patches, deletes (Events included).
    writes: u64,
    /// GETs of one object (or of its status), lists and watches not.
    object_gets: u64,
}

impl RequestKinds {
    fn of(counts: &BTreeMap<String, u64>) -> Result<Self> {
        let mut k = Self::default();
        for (key, n) in counts {
            let words: Vec<&str> = key.split_whitespace().collect();
            // The fake: the HTTP method and the verb it classified; the real server: its verb.
            let (write, get, resource) = match words.as_slice() {
                [method, resource, verb] => {
                    (matches!(*method, "POST" | "PUT" | "PATCH" | "DELETE"), *verb == "Get", *resource)
                }
                [verb, resource] => (
                    matches!(*verb, "CREATE" | "UPDATE" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION"),
                    *verb == "GET",
                    *resource,
                ),
                _ => bail!("a request count keyed {key:?}: expected `METHOD resource Verb` or `VERB resource`"),
            };
            if !matches!(resource.split('/').next(), Some("noops" | "events")) {
                continue;
            }
            let update = write && !matches!(words[0], "POST" | "CREATE" | "DELETE" | "DELETECOLLECTION");
            if write {
                k.writes += n;
            }
            if update && resource.ends_with("/status") {
                k.status_writes += n;
            }
            if get {
                k.object_gets += n;
            }
        }
        Ok(k)
    }
}

/// `kube-resync N` on the fake API server: see the crate doc.
pub fn resync(n: usize) -> Result<Value> {
    resync_on(false, n)
}

/// `kube-resync N` on a real API server of `testing/realkube`, started for the run and stopped
/// after it; `None` (and a line on stderr saying how to install it) when it is not installed.
pub fn resync_real(n: usize) -> Result<Option<Value>> {
    on_real(&format!("kube-resync {n}"), || resync_on(true, n))
}

fn resync_on(real: bool, n: usize) -> Result<Value> {
    if n == 0 {
        bail!("kube-resync needs at least one object");
    }
    let interval = resync_interval(real, n);
    let mut b = Bench::new(real)?;
    b.steward.resync = Some(interval);
    b.create(NS_STEWARD, 0..n)?;
    let ns = NS_STEWARD;
    // Converged, and when the first object was seen so (its first resync is due an interval after).
    let (mut p, first_seen) = if real {
        let mut p = b.spawn(Who::Steward, "resync")?;
        let seen = b.poll_converged(&mut p, ns, 0, n, Duration::from_millis(100))?;
        (p, seen.first)
    } else {
        b.fake()?.send(&format!("converged {ns} 0 {n} {}", converge_timeout(n).as_secs()))?;
        let mut p = b.spawn(Who::Steward, "resync")?;
        let answer = match b.fake()?.answer() {
            Ok(a) => a,
            Err(e) => {
                p.alive()?;
                return Err(e);
            }
        };
        let first_us = answer["first_us"].as_f64().context("no first_us")?;
        (p, SystemTime::UNIX_EPOCH + Duration::from_secs_f64(first_us / 1e6))
    };
    let converge_seconds = SystemTime::now().duration_since(p.spawned).unwrap_or_default().as_secs_f64();
    eprintln!("  {n} converged in {converge_seconds:.2} s; resyncs due {interval:?} after each one's last success");
    // The converge's Events go out in the background: wait until Steward has written nothing
    // for 500 ms.
    let writes = |p: &Proc| p.metric("steward_kube_writes_total{", "");
    let mut last = writes(&p)?;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = writes(&p)?;
        if now == last {
            break;
        }
        last = now;
    }
    // Idle until shortly before the first resync is due, so that the window measured is the
    // resync's (a resync started before the mark fails the scenario, see `resyncs_since`).
    // Steward's CPU over this wait is its idle rate (watches, timers, the lease).
    let (idle_t0, idle_cpu0) = (Instant::now(), p.stats()?.cpu);
    let mark_at = first_seen + interval.saturating_sub(MARK_AHEAD);
    if let Ok(wait) = mark_at.duration_since(SystemTime::now()) {
        std::thread::sleep(wait);
    }
    let idle_seconds = idle_t0.elapsed().as_secs_f64();
    let idle_rate = (p.stats()?.cpu.saturating_sub(idle_cpu0).as_secs_f64() / idle_seconds.max(0.001)).max(0.0);
    // The mark: the request log cleared (the fake) or read (the real server), the reconciles
    // and CPU so far.
    let rec0 = p.reconciles()?;
    let skipped0 = p.metric("steward_kube_status_writes_skipped_total{", "")?;
    let status0 = p.metric("steward_kube_writes_total{", "op=\"status\"")?;
    let before = match &mut b.server {
        Server::Fake(f) => {
            f.call("clear")?;
            BTreeMap::new()
        }
        Server::Real(r) => r.requests()?,
    };
    let t0 = SystemTime::now();
    let cpu0 = p.stats()?.cpu;
    // Until every object has been reconciled again: the reconciles count first (cheap, once a
    // second), then each object's history in Steward's API.
    let deadline = Instant::now() + interval + converge_timeout(n);
    let mut target = rec0 + n as u64;
    let mut polls = 0u64;
    let (rec1, t1, cpu1, resyncs) = loop {
        let rec = loop {
            let rec = p.reconciles()?;
            polls += 1;
            if rec >= target {
                break rec;
            }
            p.alive()?;
            if Instant::now() > deadline {
                bail!("{} of {n} reconciles {interval:?} after the mark", rec - rec0);
            }
            std::thread::sleep(Duration::from_secs(1));
        };
        let (t1, cpu1) = (SystemTime::now(), p.stats()?.cpu);
        let resyncs = resyncs_since(&p, ns, t0)?;
        if resyncs.objects >= n {
            break (rec, t1, cpu1, resyncs);
        }
        target = rec + (n - resyncs.objects) as u64;
    };
    let requests = match &mut b.server {
        Server::Fake(f) => f.requests()?.0,
        // The bench made no request to the server meanwhile: all are Steward's (or the server's own).
        Server::Real(r) => request_delta(&before, &r.requests()?),
    };
    let kinds = RequestKinds::of(&requests)?;
    let skipped = p.metric("steward_kube_status_writes_skipped_total{", "")? - skipped0;
    let host_status_writes = p.metric("steward_kube_writes_total{", "op=\"status\"")? - status0;
    p.stop()?;
    let seconds = t1.duration_since(t0).unwrap_or_default().as_secs_f64();
    let (first, last) = resyncs.first.zip(resyncs.last_end).context("no resync in Steward's history")?;
    let resync_seconds = last.duration_since(first).unwrap_or_default().as_secs_f64().max(0.001);
    let cpu = cpu1.saturating_sub(cpu0).as_secs_f64();
    let reconciles = rec1 - rec0;
    if reconciles == 0 {
        bail!("no reconcile after the mark");
    }
    let cpu_per_reconcile_us = cpu / reconciles as f64 * 1e6;
    // What the resyncs themselves cost: the window's CPU less what the idle host spends in as long.
    let above_idle_us = (cpu - idle_rate * seconds).max(0.0) / reconciles as f64 * 1e6;
    // The yardstick, in the same run: the same objects resynced in files mode.
    let files = crate::scenarios::files_resync(n).context("the files-mode resync (the yardstick)")?;
    Ok(json!({
        "scenario": "kube-resync", "n": n, "server": b.server.name(), "workers": WORKERS,
        "resync_interval_s": round(interval.as_secs_f64()),
        "converge_seconds": round(converge_seconds),
        "seconds": round(seconds),
        "resync_seconds": round(resync_seconds),
        "reconciles": reconciles,
        "resynced_objects": resyncs.objects,
        "api_requests": requests.values().sum::<u64>(),
        "requests_by_verb": requests,
        "status_writes": kinds.status_writes,
        "object_gets": kinds.object_gets,
        "writes": kinds.writes,
        "host_status_writes": host_status_writes,
        "status_writes_skipped": skipped,
        "cpu_seconds": round(cpu),
        "cpu_percent": round(cpu / resync_seconds * 100.0),
        "cpu_per_reconcile_us": round(cpu_per_reconcile_us),
        "metrics_polls": polls,
        "files_resync_interval_s": round(files.interval.as_secs_f64()),
        "files_reconciles": files.reconciles,
        "files_cpu_per_reconcile_us": round(files.cpu_per_reconcile_us()),
        "cpu_vs_files_ratio": round(cpu_per_reconcile_us / files.cpu_per_reconcile_us()),
        "idle_seconds": round(idle_seconds),
        "idle_cpu_percent": round(idle_rate * 100.0),
        "cpu_per_reconcile_above_idle_us": round(above_idle_us),
        "above_idle_vs_files_ratio": round(above_idle_us / files.cpu_per_reconcile_us()),
    }))
}

/// The resyncs Steward's API shows in the history of the objects of a namespace.
#[derive(Debug)]
struct Resyncs {
    /// Objects with a resync (a history entry of reason `resync`, outcome `Synced`) started at or
    /// after the mark.
    objects: usize,
    /// The earliest start of those.
    first: Option<SystemTime>,
    /// The latest end of those (start plus duration).
    last_end: Option<SystemTime>,
}

/// The resyncs of the objects of `ns` since `mark`, from Steward's API; an error if any started
/// before it (the interval was too short for the converge).
fn resyncs_since(p: &Proc, ns: &str, mark: SystemTime) -> Result<Resyncs> {
    let addr = p.api.context("Steward has no API address")?;
    let (code, body) = http_get(addr, "/api/v1/resources?kind=Noop")?;
    if code != 200 {
        bail!("GET /api/v1/resources?kind=Noop: {code}");
    }
    let views: Vec<Value> = serde_json::from_slice(&body).context("the resources Steward's API listed")?;
    let mut r = Resyncs { objects: 0, first: None, last_end: None };
    for v in views.iter().filter(|v| v["namespace"] == ns) {
        let name = v["name"].as_str().unwrap_or_default();
        let mut resynced = false;
        for h in v["history"].as_array().into_iter().flatten().filter(|h| h["reason"] == "resync") {
            let time = h["time"].as_str().context("a history entry with no time")?;
            let at = humantime::parse_rfc3339(time).with_context(|| format!("the time {time:?} of {ns}/{name}"))?;
            // The API shows milliseconds: a start in the mark's own millisecond counts as after.
            if at + Duration::from_millis(1) <= mark {
                bail!("{ns}/{name} was resynced at {time}, before the bench's mark: the resync interval is too short");
            }
            if h["outcome"] == "Synced" {
                resynced = true;
                let end = at + Duration::from_millis(h["durationMs"].as_u64().unwrap_or(0));
                r.first = Some(r.first.map_or(at, |f| f.min(at)));
                r.last_end = Some(r.last_end.map_or(end, |l| l.max(end)));
            }
        }
        r.objects += usize::from(resynced);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn the_fakes_request_log_splits_into_status_writes_writes_and_object_gets_of_the_objects_and_events() {
        let log = counts(&[
            ("GET noops Get", 2),
            ("GET noops List", 3),
            ("GET noops Watch", 1),
            ("GET noops/status Get", 1),
            ("PUT noops/status Update", 4),
            ("PATCH noops/status Patch", 5),
            ("PATCH noops Patch", 6),
            ("POST events Create", 7),
            ("GET leases Get", 8),
            ("PUT leases Update", 8),
        ]);
        let k = RequestKinds::of(&log).unwrap();
        assert_eq!(k, RequestKinds { status_writes: 9, writes: 22, object_gets: 3 });
    }

    #[test]
    fn the_real_servers_verbs_split_the_same_way_and_its_own_requests_are_left_out() {
        let log = counts(&[
            ("GET noops", 2),
            ("LIST noops", 3),
            ("WATCH noops", 1),
            ("UPDATE noops/status", 4),
            ("PATCH noops/status", 5),
            ("APPLY noops/status", 1),
            ("PATCH noops", 6),
            ("CREATE events", 7),
            ("DELETE noops", 1),
            // The server's own.
            ("GET namespaces", 7),
            ("GET services", 4),
            ("UPDATE leases", 2),
        ]);
        let k = RequestKinds::of(&log).unwrap();
        assert_eq!(k, RequestKinds { status_writes: 10, writes: 24, object_gets: 2 });
    }

    #[test]
    fn an_empty_log_is_zero_and_an_unknown_key_is_an_error() {
        assert_eq!(RequestKinds::of(&BTreeMap::new()).unwrap(), RequestKinds::default());
        assert!(RequestKinds::of(&counts(&[("GET", 1)])).is_err());
    }

    #[test]
    fn a_request_delta_keeps_what_grew() {
        let before = counts(&[("LIST noops", 3), ("WATCH noops", 1)]);
        let after = counts(&[("LIST noops", 3), ("WATCH noops", 2), ("GET noops", 4)]);
        assert_eq!(request_delta(&before, &after), counts(&[("WATCH noops", 1), ("GET noops", 4)]));
    }
}
