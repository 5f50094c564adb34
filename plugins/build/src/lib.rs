//! Builds Steward plugins to `wasm32-wasip2`, installing the Rust target first when it is missing.
//!
//! Used by the host's tests, the examples and `cargo run -p steward-plugin-build`.
//! Every build goes to its own target directory (`target/wasm`), so it never
//! waits on, or invalidates, the host's own build; cargo's lock on that
//! directory serializes builds started by concurrent test processes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

mod fresh;
mod python;
mod typescript;
pub use python::{PY_PLUGINS, python_example, python_plugin};
pub use typescript::{TS_PLUGINS, typescript_artifact, typescript_plugin};

/// The Rust target plugins are built for.
pub const TARGET: &str = "wasm32-wasip2";
/// The cargo profile plugins are built with (see the workspace `Cargo.toml`).
pub const PROFILE: &str = "plugin";
/// The plugins bundled with Steward.
pub const BUNDLED: &[&str] = &["mcpserver", "workflow", "mcpservergroup", "workflowrun", "toolpolicy"];
/// The test-only plugins under `tests/plugins`.
pub const TEST_PLUGINS: &[&str] = &["noop", "noop-v2", "noop-twin", "misbehave", "misworld", "parent"];
/// The example plugins written in Rust (under `examples/plugins`, and `plugins/etcdkey`); built
/// on demand by [`example_plugin`], not by [`all_plugins`].
pub const EXAMPLE_PLUGINS: &[&str] = &["site", "etcdkey"];

/// Why a build failed; the message says what to do.
#[derive(Debug)]
pub struct BuildError(pub String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// How a build shows itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// Prints nothing; cargo runs with `--quiet` and its messages go into the error of a failed
    /// build (what tests and other library callers want).
    #[default]
    Quiet,
    /// For a person at a terminal: one line on stderr as each step starts and one with the time
    /// it took, and cargo's own messages and progress bar between them.
    Shown,
}

impl Progress {
    /// Runs `cmd` (a cargo build) as step `what`: quietly, its output kept for the error; or
    /// shown, its stderr on the terminal and the step's start and time printed around it.
    fn run(self, cmd: &mut Command, what: &str) -> Result<(), BuildError> {
        match self {
            Progress::Quiet => {
                let out = cmd.arg("--quiet").output().map_err(|e| BuildError(format!("cannot run cargo: {e}")))?;
                if !out.status.success() {
                    return Err(BuildError(format!(
                        "{what} failed ({}):\n{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    )));
                }
            }
            Progress::Shown => {
                eprintln!("==> {what}");
                let began = Instant::now();
                let status = cmd.status().map_err(|e| BuildError(format!("cannot run cargo: {e}")))?;
                if !status.success() {
                    return Err(BuildError(format!("{what} failed ({status}); cargo's messages are above")));
                }
                eprintln!("==> {what}: done in {:.1}s", began.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }
}

/// The workspace root (this crate lives at `plugins/build`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("plugins/build has two ancestors").to_path_buf()
}

/// The target directory of plugin builds.
pub fn target_dir() -> PathBuf {
    workspace_root().join("target").join("wasm")
}

/// Where the built `.wasm` of `package` lands: copied out of cargo's profile directory right
/// after the package's own build. cargo writes a plugin crate that another plugin depends on
/// (`workflow`, under `workflowrun`) to the same profile path when it builds the dependent,
/// without the dependency's default features; the copy keeps the plugin's own build.
pub fn artifact(package: &str) -> PathBuf {
    target_dir().join("plugins").join(format!("{}.wasm", package.replace('-', "_")))
}

/// Where cargo leaves the `.wasm` of `package` in its profile directory.
fn cargo_artifact(package: &str) -> PathBuf {
    target_dir().join(TARGET).join(PROFILE).join(format!("{}.wasm", package.replace('-', "_")))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    without_enclosing_cargo(&mut cmd);
    cmd.current_dir(workspace_root());
    cmd
}

/// Removes from `cmd` the settings an enclosing cargo (a build script, `cargo run` or `cargo test`)
/// sets, so that a cargo it runs builds as it would from a shell.
///
/// That includes the package's own variables (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, …): a build
/// script may name them in `rerun-if-env-changed` (ring's names `CARGO_PKG_VERSION_MAJOR`),
/// and cargo compares those with its own environment, so a build under `cargo run` would be
/// stale for the same command typed in a shell, and rebuilt from that crate up.
pub fn without_enclosing_cargo(cmd: &mut Command) -> &mut Command {
    const PER_PACKAGE: &[&str] =
        &["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_TARGET_TMPDIR"];
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(|v| PER_PACKAGE.iter().any(|p| v.starts_with(p))) {
            cmd.env_remove(var);
        }
    }
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Installs the `wasm32-wasip2` target with rustup when the toolchain lacks it.
pub fn ensure_target() -> Result<(), BuildError> {
    ensure_target_with(Progress::Quiet)
}

/// [`ensure_target`], saying so first when it installs the target and `progress` is shown.
pub fn ensure_target_with(progress: Progress) -> Result<(), BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| BuildError(format!("cannot run rustc to find the sysroot: {e}")))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(TARGET).is_dir() {
        return Ok(());
    }
    if progress == Progress::Shown {
        eprintln!("==> installing the Rust target {TARGET} with rustup (once)");
    }
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .map_err(|e| {
            BuildError(format!(
                "the Rust target {TARGET} is missing and rustup could not be run ({e}); install the target with your toolchain manager"
            ))
        })?;
    if !status.success() {
        return Err(BuildError(format!("`rustup target add {TARGET}` failed ({status}); run it by hand to see why")));
    }
    Ok(())
}

/// Builds `packages` (workspace package names) and returns each one's `.wasm`.
///
/// Each package is built in a cargo run of its own: cargo unifies the features of a
/// dependency across the packages of one run, so building `mcpserver` (which enables
/// steward-sdk's `services` feature) beside `noop` would make `noop` import
/// `steward:plugin/services` too, and need a grant it should not need. It also keeps a
/// plugin that reuses another's library apart from that plugin: `workflowrun` depends on
/// `workflow` without its default `plugin` feature (the Workflow kind's exports), which a
/// shared run with `workflow` would turn on.
pub fn build(packages: &[&str]) -> Result<BTreeMap<String, PathBuf>, BuildError> {
    build_with(packages, Progress::Quiet)
}

/// [`build`], showing its progress as `progress` says (each plugin a step `[i/n]`).
pub fn build_with(packages: &[&str], progress: Progress) -> Result<BTreeMap<String, PathBuf>, BuildError> {
    ensure_target_with(progress)?;
    for (i, p) in packages.iter().enumerate() {
        let mut cmd = cargo();
        cmd.args(["build", "--target", TARGET, "--profile", PROFILE, "-p", p, "--target-dir"]).arg(target_dir());
        let what = if progress == Progress::Shown && packages.len() > 1 {
            format!("[{}/{}] building plugin {p} for {TARGET}", i + 1, packages.len())
        } else {
            format!("building plugin {p} for {TARGET}")
        };
        progress.run(&mut cmd, &what)?;
        let (built, out) = (cargo_artifact(p), artifact(p));
        std::fs::create_dir_all(out.parent().unwrap_or(&out))
            .and_then(|()| copy_if_changed(&built, &out))
            .map_err(|e| BuildError(format!("cannot copy {} to {}: {e}", built.display(), out.display())))?;
    }
    packages
        .iter()
        .map(|p| {
            let path = artifact(p);
            if path.is_file() {
                Ok((p.to_string(), path))
            } else {
                Err(BuildError(format!("cargo succeeded but {} is missing", path.display())))
            }
        })
        .collect()
}

/// Copies `from` to `to` (through a temporary file and a rename) unless `to` holds the same bytes,
/// so a file that did not change keeps its time and the readers of a plugin directory see no change.
fn copy_if_changed(from: &Path, to: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(from)?;
    if std::fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = to.with_extension(format!("wasm.{}.tmp", std::process::id()));
    std::fs::write(&tmp, &bytes)?;
    std::fs::rename(&tmp, to)
}

/// Builds the bundled and test plugins once per process and returns their paths by package.
///
/// Later calls return the first result; a failed build fails every caller with its message.
pub fn all_plugins() -> Result<&'static BTreeMap<String, PathBuf>, BuildError> {
    static BUILT: OnceLock<Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    BUILT
        .get_or_init(|| {
            let all: Vec<&str> = BUNDLED.iter().chain(TEST_PLUGINS).copied().collect();
            build(&all).map_err(|e| e.0)
        })
        .as_ref()
        .map_err(|e| BuildError(e.clone()))
}

/// The example MCP server's package and binary name.
pub const EXAMPLE_MCP: &str = "steward-example-mcp";

/// The example MCP server binary: the one `cargo test` built beside the running test
/// (`target/debug`), or else a fresh build into `target/tools`.
pub fn example_mcp_server() -> Result<PathBuf, BuildError> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent()?.parent().map(Path::to_path_buf)) {
                let beside = dir.join(EXAMPLE_MCP);
                if beside.is_file() {
                    return Ok(beside);
                }
            }
            build_native(EXAMPLE_MCP, EXAMPLE_MCP, &workspace_root().join("target").join("tools")).map_err(|e| e.0)
        })
        .clone()
        .map_err(BuildError)
}

/// Builds binary `bin` of workspace package `package` for the host into `target_dir`.
pub fn build_native(package: &str, bin: &str, target_dir: &Path) -> Result<PathBuf, BuildError> {
    build_native_with(package, bin, target_dir, Progress::Quiet)
}

/// [`build_native`], showing its progress as `progress` says.
pub fn build_native_with(
    package: &str,
    bin: &str,
    target_dir: &Path,
    progress: Progress,
) -> Result<PathBuf, BuildError> {
    let mut cmd = cargo();
    cmd.args(["build", "-p", package, "--bin", bin, "--target-dir"]).arg(target_dir);
    progress.run(&mut cmd, &format!("building {package}"))?;
    let path = target_dir.join("debug").join(bin);
    if path.is_file() {
        Ok(path)
    } else {
        Err(BuildError(format!("cargo succeeded but {} is missing", path.display())))
    }
}

/// A build of the host (`cargo build -p steward`, the dev profile, `target/debug`) running
/// beside the plugin builds, so that the two fill the machine's cores: the plugins' builds
/// are serial for long stretches (one LTO unit each), and the host's build waits on a few
/// large crates. `cargo run -p steward` then finds the host built. It runs quietly; its
/// messages are shown when it fails.
/// Dropped before [`HostBuild::wait`] (another step failed), it stops the build.
pub struct HostBuild {
    began: Instant,
    child: std::process::Child,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    waited: bool,
}

impl HostBuild {
    /// Starts the build.
    pub fn start() -> Result<Self, BuildError> {
        let mut cmd = cargo();
        cmd.args(["build", "--quiet", "-p", "steward"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| BuildError(format!("cannot run cargo: {e}")))?;
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let stderr = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = std::io::Read::read_to_end(&mut pipe, &mut out);
            out
        });
        Ok(Self { began: Instant::now(), child, stderr: Some(stderr), waited: false })
    }

    /// Waits for the build to end; an error carries cargo's messages.
    pub fn wait(mut self) -> Result<std::time::Duration, BuildError> {
        let status = self.child.wait().map_err(|e| BuildError(format!("cannot wait for cargo: {e}")))?;
        self.waited = true;
        let stderr = self.stderr.take().and_then(|t| t.join().ok()).unwrap_or_default();
        if !status.success() {
            return Err(BuildError(format!(
                "building the host (cargo build -p steward) failed ({status}):\n{}",
                String::from_utf8_lossy(&stderr)
            )));
        }
        Ok(self.began.elapsed())
    }
}

impl Drop for HostBuild {
    fn drop(&mut self) {
        if !self.waited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `.wasm` of example plugin `package` (one of [`EXAMPLE_PLUGINS`]), built once per process;
/// panics with the build error (for tests).
pub fn example_plugin(package: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    assert!(EXAMPLE_PLUGINS.contains(&package), "{package} is not an example plugin package");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let got = built
        .entry(package.to_string())
        .or_insert_with(|| build(&[package]).map(|mut m| m.remove(package).unwrap_or_default()).map_err(|e| e.0));
    got.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// The `.wasm` of one package from [`all_plugins`]; panics with the build error (for tests).
pub fn plugin(package: &str) -> PathBuf {
    match all_plugins() {
        Ok(map) => map.get(package).cloned().unwrap_or_else(|| panic!("{package} is not a known plugin package")),
        Err(e) => panic!("{e}"),
    }
}
