//! A real kube-apiserver (1.20, with etcd, from `testing/realkube`) shared by the whole `it` test
//! binary, started on first use.
//!
//! - `STEWARD_KUBE=fake`: [`enabled`] is false, and the real variants of the Kubernetes tests skip
//!   themselves (the quick loop).
//! - `STEWARD_REALKUBE_ENV=DIR/env`: the tests use that running instance (see
//!   `testing/realkube/README.md`), and leave it running.
//! - Otherwise the first test that needs it runs `testing/realkube/install` (at once when it is
//!   built) and `testing/realkube/start`, and a detached reaper stops that instance once this
//!   process has exited (the test harness has no global teardown).
//!
//! Objects persist for the life of the instance and namespaces can never be deleted on it
//! (no namespace controller): each test works in its own [`RealKube::namespace`], and
//! installs CRDs idempotently.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A running real API server.
#[derive(Debug)]
pub struct RealKube {
    /// Its kubeconfig: the admin token, `insecure-skip-tls-verify: true`.
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub apiserver: String,
    /// The admin's bearer token (`system:masters`).
    pub token: String,
}

/// Whether the real variants run: not under `STEWARD_KUBE=fake`.
pub fn enabled() -> bool {
    std::env::var("STEWARD_KUBE").as_deref() != Ok("fake")
}

/// `testing/realkube/NAME` of this checkout.
pub fn tool(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/realkube").join(name)
}

/// What to do when the real API server cannot be had.
const HOW: &str = "the real-API-server variants of the Kubernetes tests need it: build it with \
                   `testing/realkube/install` (Debian 12, root or sudo; see testing/realkube/README.md), \
                   or point STEWARD_REALKUBE_ENV at the env file of a running one, or set STEWARD_KUBE=fake \
                   to run the fake API server variants only";

/// The shared instance, started on the first call (blocking: it may build the server, and starting
/// takes about 10 s; call it from `spawn_blocking`). Panics, saying how to get one, when it cannot.
pub fn shared() -> &'static RealKube {
    static SHARED: OnceLock<Result<RealKube, String>> = OnceLock::new();
    // The outcome is kept either way: a failed start is not tried again by every test.
    match SHARED.get_or_init(attach_or_start) {
        Ok(k) => k,
        Err(e) => panic!("no real Kubernetes API server: {e}\n{HOW}"),
    }
}

fn attach_or_start() -> Result<RealKube, String> {
    if let Some(env) = std::env::var_os("STEWARD_REALKUBE_ENV") {
        return from_env(Path::new(&env));
    }
    let install = tool("install");
    eprintln!("realkube: {} (returns at once when built)", install.display());
    // Its progress goes to this process's stderr: a first build takes minutes.
    let out = Command::new(&install)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", install.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({}); its output is above", install.display(), out.status));
    }

    let dir = tempfile::Builder::new()
        .prefix("steward-realkube.")
        .tempdir()
        .map_err(|e| format!("a run directory: {e}"))?
        .keep();
    // Ports handed out by the test process, so that no other test is given them meanwhile.
    let (port, etcd_port) = (super::host::free_port(), super::host::free_port());
    let start = tool("start");
    let out = Command::new(&start)
        .arg("--dir")
        .arg(&dir)
        .args(["--port", &port.to_string(), "--etcd-port", &etcd_port.to_string()])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", start.display()))?;
    // From here on the instance may be running: the reaper stops it whatever happens next.
    reap_when_gone(&dir);
    if !out.status.success() {
        return Err(format!(
            "{} --dir {} failed ({}):\n{}",
            start.display(),
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    from_env(&dir.join("env"))
}

/// Starts a detached process that waits for this one to exit, then stops the instance in `dir`
/// and removes `dir`. It is in a session of its own, so a Ctrl-C of the test run does not kill it.
fn reap_when_gone(dir: &Path) {
    let script = r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done; exec "$1" "$2" --clean"#;
    let spawned = Command::new("setsid")
        .args(["sh", "-c", script, &std::process::id().to_string()])
        .arg(tool("stop"))
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        panic!("cannot start the reaper of the real API server in {}: {e}", dir.display());
    }
}

/// An instance from its `DIR/env` (`KEY=VALUE` lines).
fn from_env(path: &Path) -> Result<RealKube, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let env: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| env.get(k).map(|v| v.to_string()).ok_or_else(|| format!("{} has no {k}", path.display()));
    Ok(RealKube { kubeconfig: get("KUBECONFIG")?.into(), apiserver: get("APISERVER")?, token: get("APISERVER_TOKEN")? })
}

impl RealKube {
    /// The client configuration of the kubeconfig (admin, TLS not verified as it says).
    pub async fn config(&self) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("the kubeconfig {}: {e}", self.kubeconfig.display()))
    }

    /// An admin client.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).unwrap_or_else(|e| panic!("a client of {}: {e}", self.apiserver))
    }

    /// Creates a namespace of its own for a test and returns its name: `PREFIX-<pid>-<n>`
    /// (namespaces are never deleted on this server, and an instance may outlive this process).
    pub async fn namespace(&self, prefix: &str) -> String {
        super::kube::create_namespace(&self.client().await, prefix).await
    }

    /// The `kubectl` binary, installed with apt (Debian's `kubernetes-client`, kubectl 1.20) when
    /// missing and this process is root; `None` when there is none.
    pub fn kubectl(&self) -> Option<PathBuf> {
        static KUBECTL: OnceLock<Option<PathBuf>> = OnceLock::new();
        KUBECTL.get_or_init(find_or_install_kubectl).clone()
    }
}

/// The first file named `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

fn find_or_install_kubectl() -> Option<PathBuf> {
    if let Some(k) = on_path("kubectl") {
        return Some(k);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    if !super::apt_install(&["kubernetes-client"]) {
        return None;
    }
    on_path("kubectl")
}
