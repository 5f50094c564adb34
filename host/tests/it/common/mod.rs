//! Shared helpers of the host's integration tests: built plugins, runtimes, objects, a real host
//! process, waiting on a condition, and what the tests of this one process share.
#![allow(dead_code)]

pub mod host;
pub mod kube;
pub mod mcpservergroup;
pub mod realkube;
pub mod servers;
pub mod stdioserver;

use std::fmt::{Debug, Display};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use steward::plugin::{Plugin, PluginSettings, ReconcileRequest, Runtime, RuntimeOptions};
use steward_sdk::RawObject;

/// The built `.wasm` of a workspace plugin package (built once per test binary).
pub fn wasm(package: &str) -> PathBuf {
    steward_plugin_build::plugin(package)
}

/// The `steward` binary as a command, its compile cache ([`steward::plugin::CACHE_ENV`], for the
/// commands that load plugins without a host) the test binary's shared one rather than the
/// user's.
pub fn steward() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_steward"));
    cmd.env(steward::plugin::CACHE_ENV, host::shared_cache_dir());
    cmd
}

/// A runtime with the test binary's shared compile cache ([`host::shared_cache_dir`]): a
/// plugin is compiled once per run, not once per test.
pub fn runtime() -> Arc<Runtime> {
    Runtime::new(RuntimeOptions { cache_dir: Some(host::shared_cache_dir()), ..RuntimeOptions::default() })
        .expect("runtime")
}

/// Loads `package` with `settings`.
pub async fn load(rt: &Arc<Runtime>, package: &str, settings: PluginSettings) -> Plugin {
    let path = wasm(package);
    let bytes = std::fs::read(&path).unwrap();
    Plugin::load(rt.clone(), &path, bytes, move |_| settings).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Installs each built plugin (`name`, `.wasm`) in a fresh plugin directory and loads it as
/// the host does, with no settings: the directory (kept while the set is used), the set, and
/// each file's status.
pub async fn load_dir(
    built: &[(&str, PathBuf)],
) -> (tempfile::TempDir, Arc<steward::plugin::PluginSet>, Vec<steward::plugin::PluginStatus>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, wasm) in built {
        install(wasm, &dir.path().join(format!("{name}.wasm")));
    }
    let set = steward::plugin::PluginSet::new(runtime(), dir.path(), Default::default(), PluginSettings::default());
    let statuses = set.load_all().await.unwrap();
    (dir, set, statuses)
}

/// The status of plugin `name` among `statuses`.
pub fn status_of<'a>(statuses: &'a [steward::plugin::PluginStatus], name: &str) -> &'a steward::plugin::PluginStatus {
    statuses.iter().find(|s| s.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("{name} in {statuses:?}"))
}

/// A request for an object of `kind` named `name` with `spec`.
pub fn request(kind: &str, name: &str, spec: serde_json::Value) -> ReconcileRequest {
    ReconcileRequest {
        resource: RawObject {
            api_version: "test.steward.dev/v1".into(),
            kind: kind.into(),
            name: name.into(),
            namespace: "default".into(),
            generation: 1,
            spec: spec.to_string(),
            ..RawObject::default()
        },
        inputs: Default::default(),
    }
}

/// A `Misbehave` request doing `behavior`, with extra spec fields.
pub fn misbehave(behavior: &str, extra: serde_json::Value) -> ReconcileRequest {
    let mut spec = json!({ "behavior": behavior });
    if let (Some(m), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    request("Misbehave", "m", spec)
}

/// Copies `src` to `dst` atomically (write beside, then rename), as a deploy tool would.
pub fn install(src: &Path, dst: &Path) {
    let tmp = dst.with_extension("part");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

/// The sum of the samples of `name` in a Prometheus text whose labels contain every one of
/// `labels` (each written `key="value"`); 0 when there is none.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Observes with `observe` until `done` holds for what it saw, and returns that observation.
///
/// The pause between two observations is twice what the last one took, between 10 and 200 ms,
/// so a cheap probe is polled often and an expensive one (a list of thousands of objects) does
/// not load the machine. After `limit` the test fails with a message naming `what` was awaited
/// and the last observation (`what` is formatted only then, so it may carry expensive context
/// such as a host's log: see [`host::Host::waiting_for`]).
pub async fn eventually<T: Debug>(
    limit: Duration,
    what: impl Display,
    mut observe: impl AsyncFnMut() -> T,
    mut done: impl FnMut(&T) -> bool,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let began = Instant::now();
        let seen = observe().await;
        if done(&seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}; last observed: {seen:#?}");
        let pause = (began.elapsed() * 2).clamp(Duration::from_millis(10), Duration::from_millis(200));
        poll_pause(pause.as_millis() as u64).await;
    }
}

/// The cache dir `testing/mcp-servers/install` fills (the reference servers from npm, the
/// official Python SDK's venv): installed on first use, once per test process.
pub fn mcp_servers_dir() -> &'static PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let install = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-servers/install");
        let out = std::process::Command::new(&install)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", install.display()));
        assert!(out.status.success(), "{} failed ({}); its output is above", install.display(), out.status);
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// Waits until every thread of the process `pid` is stopped: a SIGSTOP is delivered
/// asynchronously, and a thread running when it was sent may still answer a request until then.
pub async fn wait_stopped(pid: u32) {
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
        tasks.flatten().all(|t| {
            // The state follows the command in parentheses, which may hold spaces: `pid (comm) T …`.
            std::fs::read_to_string(t.path().join("stat"))
                .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T')))
        })
    };
    eventually(Duration::from_secs(30), format!("pid {pid} to stop"), async || stopped(), |s| *s).await;
}

/// The pause between two steps of a test that paces itself (a file rewritten every 20 ms, the
/// polls of [`eventually`]): an interval's second tick, so a paused tokio clock advances it too.
pub async fn poll_pause(ms: u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(ms));
    tick.tick().await;
    tick.tick().await;
}

/// The right to run a heavy test: one that loads both cores for a long while (thousands of
/// objects, `kill -9` loops, a 200 MB file, a release build, compiling CPython).
///
/// The tests share one process and run as many at a time as the machine has cores; without
/// this, two heavy tests could run together and push out every deadline of both, and of the
/// light tests beside them. Take it first in the test (`let _heavy = common::heavy().await;`)
/// so that it is released last, after the test's hosts are gone. Heavy tests then run one at a
/// time, each beside at most the light tests the harness runs in its other threads; a heavy
/// test's deadlines start once it holds this.
pub async fn heavy() -> tokio::sync::SemaphorePermit<'static> {
    static HEAVY: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    HEAVY.acquire().await.expect("the semaphore of heavy tests is never closed")
}

/// Installs Debian `packages` with apt (updating the package lists first when the install fails,
/// as on a fresh machine); returns whether it worked. One install at a time in this process, and
/// each waits up to 5 minutes for another process's apt lock: several tests may need packages at
/// once on a fresh machine.
pub fn apt_install(packages: &[&str]) -> bool {
    static APT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = APT.lock().unwrap_or_else(|p| p.into_inner());
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=300"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let install = || apt(&[&["install", "-y", "--no-install-recommends"][..], packages].concat());
    install() || (apt(&["update"]) && install())
}

/// The `python3` of the venv of independent checkers (`testing/py-tools`: Prometheus' Python
/// client), installed on first use; one install at a time in this process.
pub fn py_tools() -> PathBuf {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/py-tools/install");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed:\n{}", script.display(), String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
