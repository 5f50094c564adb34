//! Tests of the services driver against real processes and real MCP servers: the shared harness here, one topic per module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use steward_sdk::{ServiceSpec, ServiceStatus, Transport};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc::UnboundedReceiver;

use super::orphans::{self, ChildRecord};
use super::process::{self, is_gone, proc_stat};
use super::{ServiceManager, ServiceOptions};
use crate::model::ObjectKey;

/// How long any awaited condition may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// Where the workspace's example MCP server may be built (after `$STEWARD_EXAMPLE_MCP`);
/// without it the tests use [`PY_SERVER`].
const EXAMPLE_SERVER: [&str; 1] = [concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/steward-example-mcp")];

/// A small MCP server (stdio, or streamable HTTP with `--http ADDR`) with knobs the example server lacks.
const PY_SERVER: &str = r#"
import json, os, signal, sys, threading, time
args = sys.argv[1:]
def flag(name): return name in args
def opt(name): return args[args.index(name) + 1] if name in args else None
if flag("--ignore-sigterm"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if opt("--exit-after-secs"):
    threading.Timer(float(opt("--exit-after-secs")), lambda: os._exit(3)).start()
tools = [{"name": "echo", "description": "Echoes its input.", "inputSchema": {"type": "object"}},
         {"name": "add", "description": "Adds a and b.", "inputSchema": {"type": "object"}}]
for i, a in enumerate(args):
    if a == "--extra-tool":
        tools.append({"name": args[i + 1], "description": "extra", "inputSchema": {"type": "object"}})
if opt("--huge-description"):
    tools[0]["description"] = "x" * int(opt("--huge-description"))
state = {"listed": False}
def answer(msg):
    mid, method = msg.get("id"), msg.get("method")
    if mid is None or method is None:
        return None
    if method == "initialize":
        if flag("--fail-initialize"):
            return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "initialize refused on purpose"}}
        return {"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "py-mcp", "version": "0"}}}
    if flag("--hang-after-init") and state["listed"]:
        return None
    if method == "tools/list":
        state["listed"] = True
        return {"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}}
    if method == "ping":
        return {"jsonrpc": "2.0", "id": mid, "result": {}}
    return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}}
def serve_stdio():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        reply = answer(msg)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
        if flag("--close-stdout-after-init") and msg.get("method") == "tools/list":
            sys.stdout.close()
            os.close(1)
            while True:
                time.sleep(3600)
def serve_http(addr):
    from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
    need = opt("--require-header")
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass
        def empty(self, code):
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if need:
                k, v = need.split("=", 1)
                if self.headers.get(k) != v:
                    return self.empty(401)
            msg = json.loads(body)
            reply = answer(msg)
            if reply is None:
                return self.empty(202)
            out = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            if msg.get("method") == "initialize":
                self.send_header("Mcp-Session-Id", "s1")
            self.end_headers()
            self.wfile.write(out)
        def do_GET(self): self.empty(405)
        def do_DELETE(self): self.empty(200)
    host, port = addr.rsplit(":", 1)
    srv = ThreadingHTTPServer((host, int(port)), H)
    sys.stderr.write("listening on http://%s:%d/mcp\n" % srv.server_address[:2])
    sys.stderr.flush()
    srv.serve_forever()
if opt("--http"):
    serve_http(opt("--http"))
else:
    serve_stdio()
"#;

/// The real python interpreter (not a version-manager shim), so its pid is the service's.
fn python() -> &'static str {
    static PY: OnceLock<String> = OnceLock::new();
    PY.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is needed by these tests");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// The python server script, in the temp directory under a name that changes with its text.
fn py_script() -> &'static Path {
    static SCRIPT: OnceLock<PathBuf> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let hash =
            PY_SERVER.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let path = std::env::temp_dir().join(format!("steward-services-test-{hash:016x}.py"));
        if !path.is_file() {
            // Written aside, then renamed: test processes running at once never see half a file.
            let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&tmp, PY_SERVER).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
        path
    })
}

/// The python server with `flags`.
fn py_server(flags: &[&str]) -> (String, Vec<String>) {
    let mut args = vec![py_script().display().to_string()];
    args.extend(flags.iter().map(|f| f.to_string()));
    (python().to_string(), args)
}

/// The example server with `flags` (which both servers understand), or the python one.
fn example_server(flags: &[&str]) -> (String, Vec<String>) {
    let env = std::env::var("STEWARD_EXAMPLE_MCP").ok();
    match env.iter().map(String::as_str).chain(EXAMPLE_SERVER).find(|p| Path::new(p).is_file()) {
        Some(real) => (real.to_string(), flags.iter().map(|f| f.to_string()).collect()),
        None => py_server(flags),
    }
}

fn stdio(name: &str, (program, args): (String, Vec<String>)) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        transport: Transport::Stdio,
        command: Some(program),
        args,
        env: BTreeMap::new(),
        working_dir: None,
        url: None,
        headers: BTreeMap::new(),
        timeout_ms: 10_000,
        secrets: Vec::new(),
    }
}

fn remote(name: &str, transport: Transport, url: &str) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        transport,
        command: None,
        args: Vec::new(),
        env: BTreeMap::new(),
        working_dir: None,
        url: Some(url.into()),
        headers: BTreeMap::new(),
        timeout_ms: 5_000,
        secrets: Vec::new(),
    }
}

fn owner(name: &str) -> ObjectKey {
    ObjectKey::new("MCPServer", "default", name)
}

fn test_opts(dir: &Path) -> ServiceOptions {
    ServiceOptions {
        health_interval: Duration::from_secs(30),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(400),
        stop_grace: Duration::from_secs(3),
        ..ServiceOptions::new(dir)
    }
}

/// A driver on a fresh state directory, and its notifications.
struct Harness {
    mgr: std::sync::Arc<ServiceManager>,
    rx: UnboundedReceiver<ObjectKey>,
    notified: Vec<ObjectKey>,
    dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Self {
        Self::with(|_| {})
    }

    fn with(tweak: impl FnOnce(&mut ServiceOptions)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = test_opts(dir.path());
        tweak(&mut opts);
        let (mgr, rx) = ServiceManager::start(opts, super::Secrets::Files).unwrap();
        Self { mgr, rx, notified: Vec::new(), dir }
    }

    /// Waits, notification by notification, until `cond` holds for `owner`'s observed services.
    async fn wait_for(
        &mut self,
        owner: &ObjectKey,
        what: &str,
        cond: impl Fn(&[ServiceStatus]) -> bool,
    ) -> Vec<ServiceStatus> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let observed = self.mgr.observed(owner);
            if cond(&observed) {
                return observed;
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(key)) => self.notified.push(key),
                Ok(None) => panic!("notification channel closed while waiting for {what}"),
                Err(_) => panic!("timed out waiting for {what}; observed: {observed:#?}"),
            }
        }
    }

    /// Waits until some status `owner`'s service `name` went through satisfies `cond`.
    async fn wait_history(
        &mut self,
        owner: &ObjectKey,
        name: &str,
        what: &str,
        cond: impl Fn(&ServiceStatus) -> bool,
    ) -> ServiceStatus {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let history = self.mgr.history(owner, name);
            if let Some(s) = history.iter().find(|s| cond(s)) {
                return s.clone();
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(key)) => self.notified.push(key),
                Ok(None) => panic!("notification channel closed while waiting for {what}"),
                Err(_) => panic!("timed out waiting for {what}; history: {history:#?}"),
            }
        }
    }
}

fn one(observed: &[ServiceStatus]) -> &ServiceStatus {
    assert_eq!(observed.len(), 1, "{observed:#?}");
    &observed[0]
}

fn phase_is(phase: &'static str) -> impl Fn(&[ServiceStatus]) -> bool {
    move |o| o.len() == 1 && o[0].phase == phase
}

/// Waits until `pid` is gone (or a zombie), polling `/proc` until the deadline.
async fn wait_gone(pid: u32, what: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !is_gone(pid) {
        assert!(tokio::time::Instant::now() < deadline, "{what} (pid {pid}) is still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every thread of `pid` is stopped (a SIGSTOP is delivered asynchronously: a thread
/// running when it was sent may still answer a request until then).
async fn wait_stopped(pid: u32) {
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
        tasks.flatten().all(|t| {
            // The state follows the command in parentheses, which may hold spaces: `pid (comm) T …`.
            std::fs::read_to_string(t.path().join("stat"))
                .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T')))
        })
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !stopped() {
        assert!(tokio::time::Instant::now() < deadline, "pid {pid} did not stop");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sigkill(pid: u32) {
    // SAFETY: kill(2) on a pid this test owns.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
}

fn tool_names(s: &ServiceStatus) -> Vec<&str> {
    s.tools.iter().map(|t| t.name.as_str()).collect()
}

/// Starts an MCP server on loopback (`--http 127.0.0.1:port`); returns it and its URL.
async fn http_server(program: (String, Vec<String>), port: u16) -> (tokio::process::Child, String) {
    let (program, mut args) = program;
    args.extend(["--http".to_string(), format!("127.0.0.1:{port}")]);
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(at) = line.find("listening on ") {
                return line[at + "listening on ".len()..].trim().to_string();
            }
        }
        panic!("the server ended before listening");
    })
    .await
    .expect("the server did not say where it listens");
    // Keep draining its stderr so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

fn port_of(url: &str) -> u16 {
    url.trim_end_matches("/mcp").rsplit(':').next().unwrap().parse().unwrap()
}

/// Calls `echo` on a live session and returns the text it answers.
async fn echo_through(live: &super::LiveSession, text: &str) -> String {
    let mut params = rmcp::model::CallToolRequestParams::new("echo");
    params.arguments = Some(serde_json::json!({"message": text}).as_object().unwrap().clone());
    let r = live.peer.call_tool(params).await.unwrap();
    serde_json::to_value(&r.content).unwrap()[0]["text"].as_str().unwrap().to_string()
}

mod hardening;
mod lifecycle;
mod live;
mod real_servers;
mod reaping;
mod remote;
mod secrets;
mod spans;
