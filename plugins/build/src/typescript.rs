//! Builds the TypeScript example plugins (`examples/plugins/*-ts`) with the SDK in `sdk-ts`, its tools installed by npm.
//!
//! Needs only Node.js (18 or newer) with npm and access to the npm registry: the tools the
//! SDK pins in `sdk-ts/package-lock.json` (componentize-js, jco, esbuild, TypeScript) are
//! installed with `npm ci` into `target/typescript/toolchain`, and `sdk-ts/bin/steward-ts.mjs
//! build` turns a plugin into `target/wasm/typescript/NAME.wasm`. A build is skipped while that
//! file is newer than the plugin's sources, the SDK's and the WIT files. Threads of one process
//! wait on a mutex and processes on a lock file (`target/typescript/build.lock`); the component
//! is written beside its final name and renamed into place, so a reader never sees half a file.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use crate::fresh::{io_error, is_fresh, wit_files};
use crate::{BuildError, target_dir, workspace_root};

/// The TypeScript example plugins: directory names under `examples/plugins`, and the `.wasm` files' stems.
pub const TS_PLUGINS: &[&str] = &["mcpservergroup-ts", "stdioserver-ts"];
/// The environment variable naming the Node.js program (default `node`).
const NODE_ENV: &str = "STEWARD_NODE";
/// The environment variable naming the npm program (default `npm`).
const NPM_ENV: &str = "STEWARD_NPM";
/// Records which `package-lock.json` the toolchain was installed from.
const INSTALLED_MARKER: &str = "steward-package-lock.json";

fn sdk_dir() -> PathBuf {
    workspace_root().join("sdk-ts")
}

fn ts_dir() -> PathBuf {
    workspace_root().join("target").join("typescript")
}

fn toolchain_dir() -> PathBuf {
    ts_dir().join("toolchain")
}

/// Where the built TypeScript plugin `name` lands.
pub fn typescript_artifact(name: &str) -> PathBuf {
    target_dir().join("typescript").join(format!("{name}.wasm"))
}

/// Builds TypeScript plugin `name` (one of [`TS_PLUGINS`]) once per process, rebuilding only when
/// its inputs changed, and returns its `.wasm`.
///
/// Later calls for the same plugin return the first result; a failed build fails every caller
/// with its message.
pub fn typescript_plugin(name: &str) -> Result<PathBuf, BuildError> {
    static BUILT: Mutex<BTreeMap<String, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    if !TS_PLUGINS.contains(&name) {
        return Err(BuildError(format!(
            "{name} is not a TypeScript example plugin (known: {})",
            TS_PLUGINS.join(", ")
        )));
    }
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built.entry(name.to_string()).or_insert_with(|| build_typescript(name).map_err(|e| e.0)).clone().map_err(BuildError)
}

fn build_typescript(name: &str) -> Result<PathBuf, BuildError> {
    let src = workspace_root().join("examples").join("plugins").join(name);
    let out = typescript_artifact(name);
    let inputs = inputs(&src)?;
    if is_fresh(&out, &inputs) {
        return Ok(out);
    }
    let dir = ts_dir();
    fs::create_dir_all(&dir).map_err(|e| io_error("create", &dir, e))?;
    let lock_path = dir.join("build.lock");
    let lock = File::create(&lock_path).map_err(|e| io_error("create", &lock_path, e))?;
    lock.lock().map_err(|e| io_error("lock", &lock_path, e))?;
    // Another process may have built it while this one waited for the lock.
    if is_fresh(&out, &inputs) {
        return Ok(out);
    }
    ensure_toolchain()?;
    componentize(name, &src, &out)?;
    Ok(out)
}

/// Every file under `dir`, recursively, skipping `node_modules` and build leftovers.
fn files_under(dir: &Path, into: &mut Vec<PathBuf>) -> Result<(), BuildError> {
    let entries = fs::read_dir(dir).map_err(|e| io_error("read", dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| io_error("read", dir, e))?.path();
        let skip = path.file_name().is_some_and(|n| n == "node_modules" || n == ".steward-build");
        if skip {
            continue;
        }
        if path.is_dir() {
            files_under(&path, into)?;
        } else if path.extension().is_none_or(|x| x != "wasm") {
            into.push(path);
        }
    }
    Ok(())
}

/// The files whose change makes the component stale: the plugin's, the SDK's and the WIT's.
fn inputs(src: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let package = src.join("package.json");
    if !package.is_file() {
        return Err(BuildError(format!(
            "{} is missing; the TypeScript plugin cannot be built without it",
            package.display()
        )));
    }
    let sdk = sdk_dir();
    let mut files = vec![sdk.join("package.json"), sdk.join("package-lock.json")];
    for f in &files {
        if !f.is_file() {
            return Err(BuildError(format!("{} is missing; the TypeScript SDK cannot build without it", f.display())));
        }
    }
    files_under(src, &mut files)?;
    files_under(&sdk.join("src"), &mut files)?;
    files_under(&sdk.join("bin"), &mut files)?;
    files.extend(wit_files()?);
    Ok(files)
}

/// A program named by environment variable `var`, else `default`.
fn program(var: &str, default: &str) -> OsString {
    std::env::var_os(var).unwrap_or_else(|| default.into())
}

/// A command with the caller's Node.js settings removed, so only the toolchain decides what is found.
fn command(program: impl Into<OsString>) -> Command {
    let mut cmd = Command::new(program.into());
    for var in ["NODE_OPTIONS", "NODE_PATH", "npm_config_prefix", "npm_config_global", "STEWARD_TS_TOOLCHAIN"] {
        cmd.env_remove(var);
    }
    cmd.env("npm_config_update_notifier", "false").env("npm_config_fund", "false").env("npm_config_audit", "false");
    cmd
}

fn run(cmd: &mut Command, what: &str, not_found: &str) -> Result<Output, BuildError> {
    cmd.output().map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            BuildError(format!("{what}: {not_found}"))
        } else {
            BuildError(format!("{what}: cannot run {:?}: {e}", cmd.get_program()))
        }
    })
}

fn tail(out: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Installs the SDK's pinned tools into the toolchain directory with `npm ci`, unless they
/// already were from the same `package-lock.json`.
fn ensure_toolchain() -> Result<(), BuildError> {
    let lock_file = sdk_dir().join("package-lock.json");
    let wanted = fs::read_to_string(&lock_file).map_err(|e| io_error("read", &lock_file, e))?;
    let dir = toolchain_dir();
    let marker = dir.join(INSTALLED_MARKER);
    let installed = dir.join("node_modules").join("@bytecodealliance").join("componentize-js").join("package.json");
    if installed.is_file() && fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(());
    }
    let _ = fs::remove_file(&marker);
    fs::create_dir_all(&dir).map_err(|e| io_error("create", &dir, e))?;
    for f in ["package.json", "package-lock.json"] {
        let from = sdk_dir().join(f);
        fs::copy(&from, dir.join(f)).map_err(|e| io_error("copy", &from, e))?;
    }
    let npm = program(NPM_ENV, "npm");
    // Install scripts are not needed (esbuild finds its binary in its platform package) and
    // are not run: the toolchain runs only code from the locked packages' files.
    let out = run(
        command(&npm).current_dir(&dir).args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]),
        "installing the TypeScript SDK's tools",
        &format!(
            "{} was not found; install Node.js 18 or newer with npm (Debian/Ubuntu: apt-get install nodejs npm), \
             or set {NPM_ENV} to npm's path",
            npm.to_string_lossy()
        ),
    )?;
    if !out.status.success() {
        return Err(BuildError(format!(
            "`npm ci` in {} failed ({}); npm needs to reach the npm registry (check the network, or point \
             npm_config_registry at a mirror):\n{}",
            dir.display(),
            out.status,
            tail(&out)
        )));
    }
    fs::write(&marker, wanted).map_err(|e| io_error("write", &marker, e))
}

/// Runs `steward-ts build` on plugin `name` and leaves the component at `out`.
fn componentize(name: &str, src: &Path, out: &Path) -> Result<(), BuildError> {
    let dir = out.parent().expect("the artifact has a directory");
    fs::create_dir_all(dir).map_err(|e| io_error("create", dir, e))?;
    let part = out.with_extension(format!("{}.part", std::process::id()));
    let node = program(NODE_ENV, "node");
    let output = run(
        command(&node)
            .arg(sdk_dir().join("bin").join("steward-ts.mjs"))
            .arg("build")
            .arg(src)
            .arg("--toolchain")
            .arg(toolchain_dir().join("node_modules"))
            .arg("--wit")
            .arg(workspace_root().join("wit"))
            .arg("--work")
            .arg(ts_dir().join("work").join(name))
            .arg("-o")
            .arg(&part),
        "building the TypeScript plugin",
        &format!(
            "{} was not found; install Node.js 18 or newer (Debian/Ubuntu: apt-get install nodejs npm), or set \
             {NODE_ENV} to its path",
            node.to_string_lossy()
        ),
    )?;
    if !output.status.success() {
        let _ = fs::remove_file(&part);
        return Err(BuildError(format!(
            "steward-ts build failed on {} ({}):\n{}",
            src.display(),
            output.status,
            tail(&output)
        )));
    }
    fs::rename(&part, out).map_err(|e| io_error("move the component into", out, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("steward-ts-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn freshness_needs_an_output_newer_than_every_input() {
        let dir = scratch("fresh");
        let input = dir.join("index.ts");
        let out = dir.join("out.wasm");
        fs::write(&input, "x").unwrap();
        assert!(!is_fresh(&out, std::slice::from_ref(&input)), "a missing output is stale");
        fs::write(&out, "y").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        File::options().write(true).open(&input).unwrap().set_modified(old).unwrap();
        assert!(is_fresh(&out, std::slice::from_ref(&input)));
        File::options().write(true).open(&out).unwrap().set_modified(old - std::time::Duration::from_secs(1)).unwrap();
        assert!(!is_fresh(&out, std::slice::from_ref(&input)), "an input newer than the output makes it stale");
        assert!(!is_fresh(&out, &[dir.join("gone.ts")]), "a missing input makes it stale");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn inputs_are_the_plugin_sources_the_sdk_and_the_wit_without_installs_or_outputs() {
        let dir = scratch("inputs");
        fs::create_dir_all(dir.join("src").join("deep")).unwrap();
        fs::create_dir_all(dir.join("node_modules").join("x")).unwrap();
        fs::create_dir_all(dir.join(".steward-build")).unwrap();
        for f in
            ["package.json", "src/index.ts", "src/deep/more.ts", "node_modules/x/a.js", ".steward-build/b.js", "p.wasm"]
        {
            fs::write(dir.join(f), "x").unwrap();
        }
        let got = inputs(&dir).unwrap();
        for f in ["package.json", "src/index.ts", "src/deep/more.ts"] {
            assert!(got.contains(&dir.join(f)), "{f} missing from {got:?}");
        }
        assert!(
            !got.iter().any(|p| p.starts_with(dir.join("node_modules")) || p.starts_with(dir.join(".steward-build")))
        );
        assert!(!got.contains(&dir.join("p.wasm")));
        assert!(got.contains(&sdk_dir().join("src").join("index.ts")), "{got:?}");
        assert!(got.contains(&sdk_dir().join("package-lock.json")));
        assert!(got.contains(&workspace_root().join("wit").join("plugin.wit")));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_plugin_without_a_package_json_or_of_another_name_is_refused_with_what_to_do() {
        let dir = scratch("nopackage");
        let err = inputs(&dir).unwrap_err();
        assert!(err.0.contains("package.json"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
        let err = typescript_plugin("nope-ts").unwrap_err();
        assert!(err.0.contains("mcpservergroup-ts"), "{err}");
    }
}
