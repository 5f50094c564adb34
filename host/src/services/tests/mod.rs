//! Tests of the services driver against real processes and a real MCP server.

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

#[tokio::test]
async fn a_stdio_service_runs_and_lists_its_tools() {
    let mut h = Harness::new();
    let o = owner("a");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&["--extra-tool", "ping_me"]))]);
    let obs = h.wait_for(&o, "Running", phase_is("Running")).await;
    let s = one(&obs);
    let pid = s.pid.expect("a running service has a pid");
    assert!(!is_gone(pid));
    assert_eq!(s.healthy, Some(true));
    assert_eq!((s.restarts, s.consecutive_failures), (0, 0));
    assert!(s.last_connected.is_some() && s.next_retry_at.is_none() && s.message.is_none(), "{s:#?}");
    let names = tool_names(s);
    for t in ["echo", "add", "ping_me"] {
        assert!(names.contains(&t), "{names:?}");
    }
    assert!(h.notified.contains(&o), "the owner was notified");
    assert_eq!(h.mgr.owners(), vec![o.clone()]);
    // The child is recorded with its process group, for a later run to reap.
    let recs = orphans::read_records(h.dir.path()).unwrap();
    assert!(recs.iter().any(|r| r.pid == pid && r.pgid == pid && r.service == "srv"), "{recs:#?}");
    h.mgr.shutdown().await;
    assert!(is_gone(pid));
    assert!(orphans::read_records(h.dir.path()).unwrap().is_empty());
}

#[tokio::test]
async fn a_child_killed_from_outside_is_restarted_with_backoff() {
    let mut h = Harness::new();
    let o = owner("kill");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&[]))]);
    let first = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    sigkill(first);
    let obs = h
        .wait_for(&o, "a restarted process", |o| {
            o.len() == 1 && o[0].phase == "Running" && o[0].restarts >= 1 && o[0].pid != Some(first)
        })
        .await;
    let s = one(&obs);
    assert_eq!(s.last_exit.as_deref(), Some("killed by signal 9 (SIGKILL)"));
    assert_eq!(s.consecutive_failures, 0);
    let failed = h.wait_history(&o, "srv", "the Failed state", |s| s.phase == "Failed").await;
    assert!(failed.next_retry_at.is_some() && failed.pid.is_none(), "{failed:#?}");
    assert_eq!(failed.consecutive_failures, 1);
    let msg = failed.message.unwrap();
    assert!(msg.starts_with("killed by signal 9 (SIGKILL) unexpectedly"), "{msg}");
    wait_gone(first, "the killed child").await;

    // Again: the restart count keeps rising.
    let second = s.pid.unwrap();
    sigkill(second);
    h.wait_for(&o, "a second restart", |o| o.len() == 1 && o[0].phase == "Running" && o[0].restarts >= 2).await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_missing_command_fails_clearly_and_runs_once_it_appears() {
    let mut h = Harness::new();
    let o = owner("missing");
    let bin = h.dir.path().join("late-server");
    h.mgr.ensure(&o, vec![stdio("srv", (bin.display().to_string(), Vec::new()))]);
    let obs = h.wait_for(&o, "two failed attempts", |o| o.len() == 1 && o[0].consecutive_failures >= 2).await;
    let s = one(&obs);
    assert_eq!(s.phase, "Failed");
    // Named as given, path included: which program was asked for is what the operator must see.
    let expected = format!("cannot start `{}`: No such file or directory (os error 2)", bin.display());
    assert_eq!(s.message.as_deref(), Some(expected.as_str()));
    assert!(s.pid.is_none() && s.next_retry_at.is_some(), "{s:#?}");
    assert!(s.restarts >= 1);
    // Between attempts it never left Failed.
    let history = h.mgr.history(&o, "srv");
    assert!(history.iter().skip(1).all(|s| s.phase == "Failed"), "{history:#?}");

    // The program appears: the next attempt runs it.
    let (program, args) = example_server(&[]);
    let script = format!("#!/bin/sh\nexec {program} {}\n", args.join(" "));
    let tmp = h.dir.path().join("late-server.tmp");
    std::fs::write(&tmp, script).unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &bin).unwrap();
    let obs = h.wait_for(&o, "Running once the program exists", phase_is("Running")).await;
    assert_eq!(one(&obs).consecutive_failures, 0);
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_changed_spec_restarts_the_service_and_an_equal_one_does_nothing() {
    let mut h = Harness::new();
    let o = owner("change");
    let spec = stdio("srv", example_server(&[]));
    h.mgr.ensure(&o, vec![spec.clone()]);
    let first = one(&h.wait_for(&o, "Running", phase_is("Running")).await).clone();
    let pid = first.pid.unwrap();

    // The same spec again: nothing happens.
    h.mgr.ensure(&o, vec![spec.clone()]);
    assert_eq!(h.mgr.observed(&o), vec![first.clone()]);

    let mut changed = stdio("srv", example_server(&["--extra-tool", "fresh"]));
    changed.env.insert("GREETING".into(), "hello".into());
    h.mgr.ensure(&o, vec![changed]);
    let obs = h
        .wait_for(&o, "the new process", |o| {
            o.len() == 1 && o[0].phase == "Running" && o[0].pid.is_some_and(|p| p != pid)
        })
        .await;
    assert!(tool_names(one(&obs)).contains(&"fresh"));
    assert_eq!(one(&obs).restarts, 0, "a new spec starts a fresh count");
    wait_gone(pid, "the process of the old spec").await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn removing_services_stops_their_processes() {
    let mut h = Harness::new();
    let (a, b) = (owner("rm-a"), owner("rm-b"));
    h.mgr.ensure(&a, vec![stdio("one", example_server(&[])), stdio("two", example_server(&[]))]);
    h.mgr.ensure(&b, vec![stdio("one", example_server(&[]))]);
    let running = |o: &[ServiceStatus]| !o.is_empty() && o.iter().all(|s| s.phase == "Running");
    let obs_a = h.wait_for(&a, "a's services Running", running).await;
    let obs_b = h.wait_for(&b, "b's service Running", running).await;
    assert_eq!(obs_a.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["one", "two"]);

    // Dropping one service from the wanted list stops just that one.
    h.mgr.ensure(&a, vec![stdio("one", example_server(&[]))]);
    wait_gone(obs_a[1].pid.unwrap(), "the unwanted service").await;
    assert_eq!(h.mgr.observed(&a).len(), 1);
    assert!(!is_gone(obs_a[0].pid.unwrap()));

    // An owner that is gone loses all of its services.
    h.mgr.remove_owner(&a);
    wait_gone(obs_a[0].pid.unwrap(), "the removed owner's service").await;
    assert!(h.mgr.observed(&a).is_empty());
    assert_eq!(h.mgr.owners(), vec![b.clone()]);
    assert!(!is_gone(obs_b[0].pid.unwrap()));

    // An empty wanted list is the same as removing the owner.
    h.mgr.ensure(&b, Vec::new());
    wait_gone(obs_b[0].pid.unwrap(), "b's service").await;
    assert!(h.mgr.owners().is_empty());
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_everything_even_a_process_that_ignores_sigterm() {
    let mut h = Harness::with(|o| o.stop_grace = Duration::from_millis(300));
    let (a, b) = (owner("sd-a"), owner("sd-b"));
    h.mgr.ensure(&a, vec![stdio("polite", example_server(&[]))]);
    h.mgr.ensure(&b, vec![stdio("stubborn", py_server(&["--ignore-sigterm"]))]);
    let pa = one(&h.wait_for(&a, "Running", phase_is("Running")).await).pid.unwrap();
    let pb = one(&h.wait_for(&b, "Running", phase_is("Running")).await).pid.unwrap();
    h.mgr.shutdown().await;
    assert!(is_gone(pa), "the polite service is stopped when shutdown returns");
    assert!(is_gone(pb), "the stubborn service is killed when shutdown returns");
    assert!(h.mgr.owners().is_empty());
    assert!(orphans::read_records(h.dir.path()).unwrap().is_empty());
    // Once shut down, nothing starts any more.
    h.mgr.ensure(&a, vec![stdio("polite", example_server(&[]))]);
    assert!(h.mgr.observed(&a).is_empty());
}

#[tokio::test]
async fn a_crashing_process_reports_its_exit_and_stderr_in_a_clean_environment() {
    let mut h = Harness::with(|o| o.initial_backoff = Duration::from_secs(60));
    let o = owner("crash");
    let mut spec = stdio("srv", ("sh".into(), vec!["-c".into(), "env >&2; echo boom >&2; exit 3".into()]));
    spec.env.insert("FOO".into(), "bar".into());
    spec.working_dir = Some(h.dir.path().display().to_string());
    h.mgr.ensure(&o, vec![spec]);
    let obs = h.wait_for(&o, "Failed", phase_is("Failed")).await;
    let s = one(&obs);
    assert_eq!(s.last_exit.as_deref(), Some("exited with code 3"));
    let msg = s.message.as_deref().unwrap();
    assert!(msg.starts_with("exited with code 3 before the MCP handshake completed; stderr (last lines):\n"), "{msg}");
    assert!(msg.ends_with("\nboom"), "{msg}");
    let env: Vec<&str> = msg.lines().skip(1).filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    assert!(env.contains(&"FOO") && env.contains(&"PATH"), "{env:?}");
    // The working directory, reported without the host's absolute path (see `Ctx::report`).
    let dir_name = h.dir.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(msg.contains(&format!("PWD={dir_name}\n")), "{msg}");
    assert!(!msg.contains(&h.dir.path().display().to_string()), "{msg}");
    // Nothing else of the host's environment leaks in (sh adds PWD, SHLVL and `_` itself).
    let leaked: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| !["PATH", "HOME", "PWD", "SHLVL", "_", "OLDPWD"].contains(&k.as_str()))
        .filter(|k| env.contains(&k.as_str()))
        .collect();
    assert!(leaked.is_empty(), "host variables leaked into the service: {leaked:?}");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_failed_handshake_stops_the_process_and_retries() {
    let mut h = Harness::with(|o| o.initial_backoff = Duration::from_millis(200));
    let o = owner("noinit");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&["--fail-initialize"]))]);
    let failed = h
        .wait_history(&o, "srv", "a failed handshake", |s| {
            s.phase == "Failed" && s.message.as_deref().is_some_and(|m| m.starts_with("MCP handshake failed"))
        })
        .await;
    assert_eq!(failed.healthy, None);
    let first = h.mgr.history(&o, "srv").iter().find_map(|s| s.pid).unwrap();
    wait_gone(first, "the process whose handshake failed").await;
    h.wait_for(&o, "a retry", |o| o.len() == 1 && o[0].restarts >= 1 && o[0].consecutive_failures >= 2).await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn failing_health_probes_mark_it_unhealthy_then_restart_it() {
    let mut h = Harness::with(|o| {
        o.health_interval = Duration::from_millis(100);
        o.max_failed_probes = 3;
    });
    let o = owner("hang");
    // Answers the handshake, then never again.
    let mut spec = stdio("srv", py_server(&["--hang-after-init"]));
    spec.timeout_ms = 1000;
    h.mgr.ensure(&o, vec![spec]);
    let unhealthy = h
        .wait_history(&o, "srv", "an unhealthy Running service", |s| s.phase == "Running" && s.healthy == Some(false))
        .await;
    let message = unhealthy.message.as_deref().unwrap();
    assert!(message.starts_with("health probe failed (1 of 3 in a row): the server does not answer"), "{unhealthy:#?}");
    let failed = h.wait_history(&o, "srv", "a restart after 3 failed probes", |s| s.phase == "Failed").await;
    assert!(failed.message.as_deref().unwrap().starts_with("3 health probes in a row failed"), "{failed:#?}");
    assert_eq!(failed.consecutive_failures, 3, "{failed:#?}");
    h.wait_for(&o, "the restarted process", |o| o.len() == 1 && o[0].restarts >= 1 && o[0].phase == "Running").await;
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_server_that_closes_its_session_is_restarted() {
    let mut h = Harness::new();
    let o = owner("eof");
    h.mgr.ensure(&o, vec![stdio("srv", py_server(&["--close-stdout-after-init"]))]);
    let failed = h.wait_history(&o, "srv", "a broken session", |s| s.phase == "Failed").await;
    assert!(failed.message.as_deref().unwrap().starts_with("the server closed its stdout"), "{failed:#?}");
    assert_eq!(failed.last_exit.as_deref(), Some("killed by signal 15 (SIGTERM)"));
    h.wait_for(&o, "a restart", |o| o.len() == 1 && o[0].restarts >= 1).await;
    h.mgr.shutdown().await;
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

#[tokio::test]
async fn a_remote_server_is_connected_and_reconnected_after_an_outage() {
    let mut h = Harness::with(|o| o.health_interval = Duration::from_millis(100));
    let o = owner("remote");
    let (mut server, url) = http_server(example_server(&["--extra-tool", "far"]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    let obs = h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let s = one(&obs);
    assert!(tool_names(s).contains(&"far") && tool_names(s).contains(&"echo"), "{s:#?}");
    assert_eq!((s.healthy, s.pid), (Some(true), None));
    assert!(s.last_connected.is_some());
    assert!(h.mgr.history(&o, "web").iter().any(|s| s.phase == "Connecting"));

    server.kill().await.unwrap();
    let obs = h.wait_for(&o, "Disconnected", phase_is("Disconnected")).await;
    let s = one(&obs);
    assert_eq!(s.healthy, Some(false));
    assert!(s.next_retry_at.is_some() && s.consecutive_failures >= 1, "{s:#?}");
    assert!(s.message.as_deref().unwrap().starts_with(&format!("cannot reach {url}: ")), "{s:#?}");

    let (_server, _) = http_server(example_server(&[]), port_of(&url)).await;
    let obs = h.wait_for(&o, "Connected again", phase_is("Connected")).await;
    let s = one(&obs);
    assert!(s.restarts >= 1 && s.consecutive_failures == 0 && s.next_retry_at.is_none(), "{s:#?}");
    assert!(!tool_names(s).contains(&"far"), "tools come from the last probe");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn sse_services_use_the_streamable_http_client_and_send_their_headers() {
    let mut h = Harness::new();
    let o = owner("sse");
    let (_server, url) = http_server(py_server(&["--require-header", "Authorization=Bearer s3cret"]), 0).await;
    let mut with = remote("with", Transport::Sse, &url);
    with.headers.insert("Authorization".into(), "Bearer s3cret".into());
    let without = remote("without", Transport::StreamableHttp, &url);
    // TLS against a plain-HTTP server: a clear error, not a crash.
    let tls_url = url.replace("http://", "https://");
    let tls = remote("x-tls", Transport::StreamableHttp, &tls_url);
    h.mgr.ensure(&o, vec![with, without, tls]);
    let obs = h
        .wait_for(&o, "one Connected, two Disconnected", |o| {
            o.len() == 3 && o[0].phase == "Connected" && o[1].phase == "Disconnected" && o[2].phase == "Disconnected"
        })
        .await;
    assert!(tool_names(&obs[0]).contains(&"add"));
    assert!(obs[1].message.as_deref().unwrap().contains("401"), "{:#?}", obs[1]);
    assert!(obs[1].auth_required && !obs[0].auth_required && !obs[2].auth_required, "{obs:#?}");
    assert!(obs[2].message.as_deref().unwrap().starts_with(&format!("cannot reach {tls_url}: ")), "{:#?}", obs[2]);
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn specs_that_cannot_work_fail_at_once() {
    let mut h = Harness::new();
    let o = owner("bad");
    let mut no_url = remote("a-no-url", Transport::StreamableHttp, "");
    no_url.url = None;
    let mut bad_header = remote("b-bad-header", Transport::Sse, "http://127.0.0.1:9/mcp");
    bad_header.headers.insert("bad header".into(), "x".into());
    let not_http = remote("c-not-http", Transport::StreamableHttp, "ftp://example.invalid/mcp");
    let mut no_command = stdio("d-no-command", (String::new(), Vec::new()));
    no_command.command = None;
    h.mgr.ensure(&o, vec![no_url, bad_header, not_http, no_command]);
    let obs = h.wait_for(&o, "all Failed", |o| o.len() == 4 && o.iter().all(|s| s.phase == "Failed")).await;
    let messages: Vec<&str> = obs.iter().map(|s| s.message.as_deref().unwrap()).collect();
    assert_eq!(
        messages,
        [
            "a remote service needs a `url`",
            "header name `bad header` is not valid",
            "url `ftp://example.invalid/mcp` is not an http:// or https:// URL",
            "a stdio service needs a `command`",
        ]
    );
    assert!(obs.iter().all(|s| s.next_retry_at.is_none()), "a wrong spec is not retried");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn every_owner_is_notified_of_its_own_changes() {
    let mut h = Harness::new();
    let (a, b) = (owner("n-a"), owner("n-b"));
    h.mgr.ensure(&a, vec![stdio("srv", example_server(&[]))]);
    h.mgr.ensure(&b, vec![stdio("srv", example_server(&[]))]);
    let pa = one(&h.wait_for(&a, "a Running", phase_is("Running")).await).pid.unwrap();
    h.wait_for(&b, "b Running", phase_is("Running")).await;
    // Both were notified (at the latest when their pid was set, before they ran).
    while let Ok(key) = h.rx.try_recv() {
        h.notified.push(key);
    }
    assert!(h.notified.contains(&a) && h.notified.contains(&b), "{:?}", h.notified);
    h.notified.clear();

    sigkill(pa);
    h.wait_for(&a, "a restarted", |o| o.len() == 1 && o[0].restarts >= 1 && o[0].phase == "Running").await;
    assert!(h.notified.iter().all(|k| *k == a), "only a changed: {:?}", h.notified);
    // Failed, then Starting, then Running: each a notification of a.
    assert!(h.notified.len() >= 3, "{:?}", h.notified);
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn reaping_kills_only_groups_that_are_certainly_ours() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim =
        std::os::unix::process::CommandExt::process_group(std::process::Command::new("sleep").arg("300"), 0)
            .spawn()
            .unwrap();
    let pid = victim.id();
    let stat = proc_stat(pid).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let rec = ChildRecord {
        pid,
        pgid: pid,
        start_time: stat.start_time,
        session: stat.session,
        boot_id: process::boot_id(),
        host_pid: gone.id(),
        host_start_time: 1,
        owner: "MCPServer/default/x".into(),
        service: "srv".into(),
        command: "sleep".into(),
    };
    let spared = [
        // The pid now belongs to a process started after the recorded one.
        ChildRecord { start_time: stat.start_time + 1, ..rec.clone() },
        // Another session.
        ChildRecord { session: stat.session + 1, ..rec.clone() },
        // An earlier boot.
        ChildRecord { boot_id: "another-boot".into(), ..rec.clone() },
        // The host that recorded it still runs (here: the victim itself stands for it).
        ChildRecord { host_pid: pid, host_start_time: stat.start_time, ..rec.clone() },
    ];
    orphans::write_records(dir.path(), spared.to_vec()).unwrap();
    assert_eq!(orphans::reap_orphans(dir.path()).unwrap(), Vec::<u32>::new());
    assert!(!is_gone(pid));

    orphans::write_records(dir.path(), vec![rec]).unwrap();
    assert_eq!(orphans::reap_orphans(dir.path()).unwrap(), vec![pid]);
    let status = victim.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
}

const HELPER_DIR: &str = "STEWARD_SERVICES_TEST_HELPER_DIR";
const HELPER_SPEC: &str = "STEWARD_SERVICES_TEST_HELPER_SPEC";

/// The child side of `no_child_survives_a_killed_host` (the same test, re-run in a child
/// process with `HELPER_DIR` set): a host that starts one service, prints its pid, and waits
/// to be killed.
async fn helper_host_process(dir: std::ffi::OsString, spec: String) -> ! {
    let spec: ServiceSpec = serde_json::from_str(&spec).unwrap();
    let (mgr, rx) = ServiceManager::start(test_opts(Path::new(&dir)), super::Secrets::Files).unwrap();
    let mut h = Harness { mgr, rx, notified: Vec::new(), dir: tempfile::tempdir().unwrap() };
    let o = owner("helper");
    h.mgr.ensure(&o, vec![spec]);
    let pid = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    println!("SERVICE_PID={pid}");
    std::future::pending::<()>().await;
    unreachable!("the parent kills this process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_survives_a_killed_host() {
    if let (Some(dir), Ok(spec)) = (std::env::var_os(HELPER_DIR), std::env::var(HELPER_SPEC)) {
        helper_host_process(dir, spec).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let sleep_file = dir.path().join("sleep.pid");
    // The service leaves a grandchild in its process group: the parent-death
    // signal reaches only the direct child, so the grandchild is for the reaper.
    let (program, args) = example_server(&[]);
    let script = format!("sleep 300 & echo $! > '{}'; exec '{program}' {}", sleep_file.display(), args.join(" "));
    let spec = stdio("srv", ("sh".into(), vec!["-c".into(), script]));

    let name = concat!(module_path!(), "::no_child_survives_a_killed_host");
    let name = name.split_once("::").unwrap().1;
    let mut host = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(HELPER_DIR, &state)
        .env(HELPER_SPEC, serde_json::to_string(&spec).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(host.stdout.take().unwrap()).lines();
    let service: u32 = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // libtest prints `test NAME ... ` just before, on the same line.
            if let Some((_, pid)) = line.split_once("SERVICE_PID=") {
                return pid.trim().parse().unwrap();
            }
        }
        panic!("the helper host ended without starting its service");
    })
    .await
    .expect("the helper host did not report its service");
    let grandchild: u32 = std::fs::read_to_string(&sleep_file).unwrap().trim().parse().unwrap();
    assert!(!is_gone(service) && !is_gone(grandchild));
    assert_eq!(proc_stat(grandchild).unwrap().pgrp, service, "the grandchild is in the service's group");

    sigkill(host.id().unwrap());
    host.wait().await.unwrap();
    wait_gone(service, "the service of the killed host").await;
    assert!(!is_gone(grandchild), "only the reaper catches what is left in the group");

    // The next run reaps the group the killed host left behind.
    let (mgr, _rx) = ServiceManager::start(test_opts(&state), super::Secrets::Files).unwrap();
    wait_gone(grandchild, "the grandchild left by the killed host").await;
    assert!(orphans::read_records(&state).unwrap().is_empty());
    mgr.shutdown().await;
}

mod hardening;
mod real_servers;
mod secrets;
mod spans;

/// Calls `echo` on a live session and returns the text it answers.
async fn echo_through(live: &super::LiveSession, text: &str) -> String {
    let mut params = rmcp::model::CallToolRequestParams::new("echo");
    params.arguments = Some(serde_json::json!({"message": text}).as_object().unwrap().clone());
    let r = live.peer.call_tool(params).await.unwrap();
    serde_json::to_value(&r.content).unwrap()[0]["text"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_live_session_is_shared_while_the_service_runs() {
    let mut h = Harness::new();
    let o = owner("live");
    assert!(h.mgr.session(&o, "srv").is_none(), "nothing before the service exists");
    h.mgr.ensure(&o, vec![stdio("srv", example_server(&[]))]);
    let pid = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    let live = h.mgr.session(&o, "srv").expect("a running service shares its session");
    let echo = live.tool("echo").expect("the full tool list");
    assert!(echo.input_schema["properties"]["message"].is_object(), "with input schemas: {echo:?}");
    assert_eq!(echo_through(&live, "hi").await, "hi");
    assert!(h.mgr.session(&o, "other").is_none());

    // A broken session is withdrawn before the failure is reported, and the restart shares a new one.
    sigkill(pid);
    h.wait_history(&o, "srv", "Failed after the kill", |s| s.phase == "Failed").await;
    let again = h.wait_for(&o, "Running again", |s| s.len() == 1 && s[0].phase == "Running" && s[0].pid != Some(pid));
    again.await;
    let live = h.mgr.session(&o, "srv").expect("the restarted process shares its session");
    assert_eq!(echo_through(&live, "again").await, "again");

    h.mgr.remove_owner(&o);
    assert!(h.mgr.session(&o, "srv").is_none(), "gone as soon as the service is not wanted");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_remote_service_shares_the_session_of_its_last_probe() {
    let mut h = Harness::new();
    let o = owner("live-remote");
    let (_server, url) = http_server(example_server(&[]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let live = h.mgr.session(&o, "web").expect("a connected service shares its session");
    assert_eq!(echo_through(&live, "far").await, "far");
    h.mgr.ensure(&o, Vec::new());
    assert!(h.mgr.session(&o, "web").is_none());
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_call_on_a_remote_session_outlives_the_health_probes_around_it() {
    let mut h = Harness::with(|o| o.health_interval = Duration::from_millis(100));
    let o = owner("live-remote-long");
    let (_server, url) = http_server(example_server(&[]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let live = h.mgr.session(&o, "web").expect("a connected service shares its session");
    // A call that spans many probes (every 100 ms): the probes must not cut the session it runs on.
    let mut params = rmcp::model::CallToolRequestParams::new("sleep");
    params.arguments = Some(serde_json::json!({"ms": 1500}).as_object().unwrap().clone());
    let answer = live.peer.call_tool(params).await.expect("the call outlives the probes");
    assert_eq!(serde_json::to_value(&answer.content).unwrap()[0]["text"], "slept 1500");
    let again = h.mgr.session(&o, "web").expect("still shared");
    assert_eq!(echo_through(&again, "after").await, "after");
    h.mgr.shutdown().await;
}

/// A stdio server that stops answering without exiting (SIGSTOP): a call that times out has it
/// probed at once, the probe says it does not answer, and it is restarted per its policy.
#[tokio::test]
async fn a_stdio_server_that_stops_answering_is_noticed_by_a_call_and_restarted() {
    let mut h = Harness::with(|o| {
        // No periodic probe in the test's time: the call is what notices it.
        o.health_interval = Duration::from_secs(600);
        o.max_failed_probes = 1;
    });
    let o = owner("sigstop");
    let mut spec = stdio("srv", example_server(&[]));
    spec.timeout_ms = 500;
    h.mgr.ensure(&o, vec![spec]);
    let pid = one(&h.wait_for(&o, "Running", phase_is("Running")).await).pid.unwrap();
    let live = h.mgr.session(&o, "srv").expect("shared");
    // SAFETY: kill(2) on a pid this test owns.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    wait_stopped(pid).await;
    let mut params = rmcp::model::CallToolRequestParams::new("echo");
    params.arguments = Some(serde_json::json!({"message": "hello?"}).as_object().unwrap().clone());
    let call = tokio::time::timeout(Duration::from_millis(300), live.peer.call_tool(params)).await;
    assert!(call.is_err(), "a stopped server cannot answer: {call:?}");
    live.call_unanswered();
    let red = h.wait_history(&o, "srv", "unhealthy", |s| s.healthy == Some(false)).await;
    let message = red.message.as_deref().unwrap();
    assert!(message.contains("the server does not answer: tools/list got no answer within 500ms"), "{red:#?}");
    let failed = h.wait_history(&o, "srv", "given up", |s| s.phase == "Failed").await;
    assert!(failed.message.as_deref().unwrap().contains("does not answer"), "{failed:#?}");
    wait_gone(pid, "the stopped server").await;
    // Running comes before the first probe of the new process says it is healthy: wait for both.
    let obs = h
        .wait_for(&o, "restarted and healthy", |s| {
            s.len() == 1 && s[0].phase == "Running" && s[0].pid != Some(pid) && s[0].healthy == Some(true)
        })
        .await;
    assert!(one(&obs).restarts >= 1, "{obs:#?}");
    let again = h.mgr.session(&o, "srv").expect("the restarted server shares its session");
    assert_eq!(echo_through(&again, "back").await, "back");
    h.mgr.shutdown().await;
}

/// A command that cannot start is named whole, as given, with its secrets redacted.
#[tokio::test]
async fn a_command_that_cannot_start_is_shown_as_given_without_its_secrets() {
    let mut h = Harness::new();
    let o = owner("missing-args");
    let spec = stdio(
        "srv",
        ("/opt/nowhere/bin/mcp-prog".to_string(), vec!["--port".into(), "9".into(), "--token=s3cr3t-value".into()]),
    );
    h.mgr.ensure(&o, vec![spec]);
    let obs = h.wait_for(&o, "Failed", |o| o.len() == 1 && o[0].phase == "Failed").await;
    let message = one(&obs).message.clone().unwrap();
    assert!(message.starts_with("cannot start `/opt/nowhere/bin/mcp-prog --port 9 --token="), "{message}");
    assert!(!message.contains("s3cr3t-value"), "{message}");
    assert!(message.ends_with("No such file or directory (os error 2)"), "{message}");
    h.mgr.shutdown().await;
}
