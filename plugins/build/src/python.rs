//! Builds the Python example plugins (`examples/plugins/*-py`) with componentize-py in a private venv.
//!
//! Needs only a Python 3 with `venv` and `pip` and access to PyPI: the venv
//! lives in `target/python/venv`, componentize-py is installed there at the
//! version `requirements.txt` pins, and each component, built for the world
//! `plugin-full` (every capability's interface; a plugin needs grants only for
//! what it calls), lands in `target/wasm/python/NAME.wasm`. A build is skipped
//! while that file is newer than `app.py`, `requirements.txt` and the WIT files. Threads
//! of one process wait on a mutex and processes on a lock file
//! (`target/python/build.lock`); the component is written beside its final
//! name and renamed into place, so a reader never sees half a file.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use crate::fresh::{io_error, is_fresh, wit_files};
use crate::{BuildError, target_dir, workspace_root};

/// The Python examples: directory names under `examples/plugins`, and the `.wasm` files' stems.
pub const PY_PLUGINS: [&str; 2] = ["mcpservergroup-py", "stdioserver-py"];
/// The world the examples are built for: componentize-py imports every interface of it.
const WORLD: &str = "plugin-full";
/// The environment variable naming the Python interpreter to create the venv with (default `python3`).
const PYTHON_ENV: &str = "STEWARD_PYTHON";

/// Records which `requirements.txt` the venv was installed from.
const INSTALLED_MARKER: &str = "steward-requirements.txt";

/// A Python example's source directory.
fn python_plugin_dir(name: &str) -> PathBuf {
    workspace_root().join("examples").join("plugins").join(name)
}

/// Where a built Python example lands.
fn python_artifact(name: &str) -> PathBuf {
    target_dir().join("python").join(format!("{name}.wasm"))
}

fn python_dir() -> PathBuf {
    workspace_root().join("target").join("python")
}

fn venv_dir() -> PathBuf {
    python_dir().join("venv")
}

fn venv_bin(name: &str) -> PathBuf {
    let (dir, exe) = if cfg!(windows) { ("Scripts", ".exe") } else { ("bin", "") };
    venv_dir().join(dir).join(format!("{name}{exe}"))
}

/// Builds the Python `MCPServerGroup` (`mcpservergroup-py`), as [`python_example`].
pub fn python_plugin() -> Result<PathBuf, BuildError> {
    python_example(PY_PLUGINS[0])
}

/// Builds Python example `name` (one of [`PY_PLUGINS`]) once per process (rebuilding only when
/// its inputs changed) and returns its `.wasm`.
///
/// Later calls for the same example return the first result; a failed build fails every caller
/// with its message.
pub fn python_example(name: &str) -> Result<PathBuf, BuildError> {
    static BUILT: Mutex<BTreeMap<String, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    if !PY_PLUGINS.contains(&name) {
        return Err(BuildError(format!("{name} is not a Python example plugin (known: {})", PY_PLUGINS.join(", "))));
    }
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built.entry(name.to_string()).or_insert_with(|| build_python(name).map_err(|e| e.0)).clone().map_err(BuildError)
}

fn build_python(name: &str) -> Result<PathBuf, BuildError> {
    let src = python_plugin_dir(name);
    let requirements = src.join("requirements.txt");
    let out = python_artifact(name);
    let inputs = inputs(&src)?;
    if is_fresh(&out, &inputs) {
        return Ok(out);
    }
    let dir = python_dir();
    fs::create_dir_all(&dir).map_err(|e| io_error("create", &dir, e))?;
    let lock_path = dir.join("build.lock");
    let lock = File::create(&lock_path).map_err(|e| io_error("create", &lock_path, e))?;
    lock.lock().map_err(|e| io_error("lock", &lock_path, e))?;
    // Another process may have built it while this one waited for the lock.
    if is_fresh(&out, &inputs) {
        return Ok(out);
    }
    ensure_venv(&requirements)?;
    componentize(name, &src, &out)?;
    Ok(out)
}

/// The files whose change makes the component stale.
fn inputs(src: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let mut files = vec![src.join("app.py"), src.join("requirements.txt")];
    files.extend(wit_files()?);
    for f in &files {
        if !f.is_file() {
            return Err(BuildError(format!(
                "{} is missing; the Python plugin cannot be built without it",
                f.display()
            )));
        }
    }
    Ok(files)
}

/// A command with the caller's Python settings removed, so only the venv decides what is found.
fn command(program: impl Into<OsString>) -> Command {
    let mut cmd = Command::new(program.into());
    for var in ["PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PIP_REQUIRE_VIRTUALENV", "VIRTUAL_ENV", "CONDA_PREFIX"] {
        cmd.env_remove(var);
    }
    cmd.env("PYTHONDONTWRITEBYTECODE", "1").env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    cmd
}

/// A command run inside the venv; componentize-py bundles the modules of `VIRTUAL_ENV`'s site-packages only.
fn venv_command(name: &str) -> Command {
    let mut cmd = command(venv_bin(name));
    cmd.env("VIRTUAL_ENV", venv_dir());
    cmd
}

fn run(cmd: &mut Command, what: &str, not_found: &str) -> Result<Output, BuildError> {
    let out = cmd.output().map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            BuildError(format!("{what}: {not_found}"))
        } else {
            BuildError(format!("{what}: cannot run {:?}: {e}", cmd.get_program()))
        }
    })?;
    Ok(out)
}

fn tail(out: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Creates the venv when it is missing and installs `requirements` into it unless it already was.
fn ensure_venv(requirements: &Path) -> Result<(), BuildError> {
    let wanted = fs::read_to_string(requirements).map_err(|e| io_error("read", requirements, e))?;
    let marker = venv_dir().join(INSTALLED_MARKER);
    if venv_bin("componentize-py").is_file() && fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(());
    }
    if !venv_bin("python").is_file() {
        let python = std::env::var_os(PYTHON_ENV).unwrap_or_else(|| "python3".into());
        let out = run(
            command(&python).arg("-m").arg("venv").arg(venv_dir()),
            "creating the Python venv for the Python plugin",
            &format!(
                "{} was not found; install Python 3 (3.9 or newer) with pip, or set {PYTHON_ENV} to its path",
                python.to_string_lossy()
            ),
        )?;
        if !out.status.success() {
            // A half-made venv would be taken as made next time.
            let _ = fs::remove_dir_all(venv_dir());
            return Err(BuildError(format!(
                "`{} -m venv {}` failed ({}); make sure Python's venv module and ensurepip are installed \
                 (Debian/Ubuntu: apt-get install python3-venv):\n{}",
                python.to_string_lossy(),
                venv_dir().display(),
                out.status,
                tail(&out)
            )));
        }
    }
    let out = run(
        venv_command("python").args(["-m", "pip", "install", "--quiet", "-r"]).arg(requirements),
        "installing componentize-py",
        "the venv's python is missing; delete target/python/venv and try again",
    )?;
    if !out.status.success() {
        return Err(BuildError(format!(
            "`pip install -r {}` in {} failed ({}); pip needs to reach PyPI (check the network, or point \
             PIP_INDEX_URL at a mirror), or install the pinned componentize-py into that venv by hand:\n{}",
            requirements.display(),
            venv_dir().display(),
            out.status,
            tail(&out)
        )));
    }
    fs::write(&marker, wanted).map_err(|e| io_error("write", &marker, e))
}

/// Runs componentize-py on a copy of `src/app.py` (it writes bytecode beside the app) and renames the result to `out`.
fn componentize(name: &str, src: &Path, out: &Path) -> Result<(), BuildError> {
    let stage = python_dir().join("src").join(name);
    fs::create_dir_all(&stage).map_err(|e| io_error("create", &stage, e))?;
    let app = src.join("app.py");
    fs::copy(&app, stage.join("app.py")).map_err(|e| io_error("copy", &app, e))?;
    let dir = out.parent().expect("the artifact has a directory");
    fs::create_dir_all(dir).map_err(|e| io_error("create", dir, e))?;
    let part = out.with_extension(format!("{}.part", std::process::id()));
    let output = run(
        venv_command("componentize-py")
            .current_dir(&stage)
            .arg("-d")
            .arg(workspace_root().join("wit"))
            .args(["-w", WORLD, "componentize", "app", "-p"])
            .arg(&stage)
            .arg("-o")
            .arg(&part),
        "building the Python plugin",
        "componentize-py is missing from the venv; delete target/python/venv and try again",
    )?;
    if !output.status.success() {
        let _ = fs::remove_file(&part);
        return Err(BuildError(format!(
            "componentize-py failed on {} ({}):\n{}",
            app.display(),
            output.status,
            tail(&output)
        )));
    }
    fs::rename(&part, out).map_err(|e| io_error("move the component into", out, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_needs_an_output_newer_than_every_input() {
        let dir = std::env::temp_dir().join(format!("steward-python-fresh-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let input = dir.join("app.py");
        let out = dir.join("out.wasm");
        fs::write(&input, "x").unwrap();
        assert!(!is_fresh(&out, std::slice::from_ref(&input)), "a missing output is stale");
        fs::write(&out, "y").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        File::options().write(true).open(&input).unwrap().set_modified(old).unwrap();
        assert!(is_fresh(&out, std::slice::from_ref(&input)));
        File::options().write(true).open(&out).unwrap().set_modified(old - std::time::Duration::from_secs(1)).unwrap();
        assert!(!is_fresh(&out, std::slice::from_ref(&input)), "an input newer than the output makes it stale");
        fs::remove_dir_all(&dir).unwrap();
    }
}
