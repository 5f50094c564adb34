//! `steward plugin inspect` and `steward plugin check`, run as the real binary.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{install, steward, wasm};

#[test]
fn inspect_prints_the_bundled_kinds_with_their_schemas() {
    // What each declares, and the capabilities whose interfaces each imports (misbehave imports
    // wasi:http without declaring `http`: it needs the grant only to call it).
    for (pkg, kind, field, declared, imports) in [
        ("mcpserver", "MCPServer", "command", vec!["services"], vec!["services"]),
        ("workflow", "Workflow", "steps", vec![], vec![]),
        ("misbehave", "Misbehave", "behavior", vec![], vec!["http"]),
    ] {
        let out = steward().args(["plugin", "inspect"]).arg(wasm(pkg)).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["name"], pkg);
        assert_eq!(v["contract"], "steward:plugin@0.1.0");
        assert_eq!(v["kinds"][0]["kind"], kind);
        let (group, version) =
            if pkg == "misbehave" { ("test.steward.dev", "v1") } else { ("steward.dev", "v1alpha1") };
        assert_eq!((v["kinds"][0]["group"].as_str(), v["kinds"][0]["version"].as_str()), (Some(group), Some(version)));
        assert!(v["kinds"][0]["specSchema"]["properties"][field].is_object(), "{v}");
        assert_eq!(v["capabilities"], serde_json::json!(declared), "{pkg}");
        assert_eq!(v["imports"], serde_json::json!(imports), "{pkg}");
    }
}

#[test]
fn inspect_of_a_broken_file_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.wasm");
    std::fs::write(&f, b"\0asm\x01\0\0\0").unwrap();
    let out = steward().args(["plugin", "inspect"]).arg(&f).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("x.wasm: a core WebAssembly module, not a component"), "{err}");
}

#[test]
fn check_reports_each_plugin_and_fails_when_one_is_blocked_or_broken() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(&wasm("mcpserver"), &plugins.join("mcpserver.wasm"));
    install(&wasm("workflow"), &plugins.join("workflow.wasm"));

    // Without the grant, mcpserver is blocked and the exit code says so.
    let cfg = dir.path().join("steward.yaml");
    std::fs::write(&cfg, "plugin_dir: plugins\n").unwrap();
    let out = steward().args(["plugin", "check", "--config"]).arg(&cfg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("Blocked") && text.contains("under plugins.mcpserver"), "{text}");

    // With it, both are ready.
    std::fs::write(&cfg, "plugin_dir: plugins\nplugins:\n  mcpserver: { capabilities: [services] }\n").unwrap();
    let out = steward().args(["plugin", "check", "-o", "json", "--config"]).arg(&cfg).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<_> = v.as_array().unwrap().iter().map(|p| (p["name"].clone(), p["state"].clone())).collect();
    assert_eq!(states, vec![("mcpserver".into(), "Ready".into()), ("workflow".into(), "Ready".into())]);

    // A broken file is named.
    std::fs::write(plugins.join("broken.wasm"), b"nope").unwrap();
    let out = steward().args(["plugin", "check", "--config"]).arg(&cfg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(text.contains("broken.wasm: not a WebAssembly file"), "{text}");
}

#[test]
fn a_bad_config_is_reported_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("steward.yaml");
    std::fs::write(&cfg, "plugin_dir: plugins\nqueue:\n  workers: lots\n").unwrap();
    let out = steward().args(["plugin", "check", "--config"]).arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("steward.yaml:3:"), "{err}");
}

#[test]
fn a_command_whose_reader_is_gone_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    // The reader is gone before the command writes a byte: as with `steward … | head`, once
    // `head` is done.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = steward()
        .args(["plugin", "inspect"])
        .arg(wasm("mcpserver"))
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "ended by SIGPIPE, not a panic: {out:?}");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `steward plugin inspect` of the noop plugin with `vars` set (and `HOME` and `XDG_CACHE_HOME`
/// unset unless `vars` sets them).
fn inspect_with(vars: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steward"));
    cmd.args(["plugin", "inspect"]).arg(wasm("noop"));
    for name in [steward::plugin::CACHE_ENV, "HOME", "XDG_CACHE_HOME"] {
        cmd.env_remove(name);
    }
    cmd.envs(vars.iter().copied()).output().unwrap()
}

/// The compiled components in `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
    read.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cwasm")).collect()
}

#[test]
fn commands_without_a_host_compile_a_plugin_once_into_the_users_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let var = steward::plugin::CACHE_ENV;

    // Named by the variable: the first run compiles into it, private to the user; the second
    // loads that entry and writes nothing (the file is the same one).
    let out = inspect_with(&[(var, &cache)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first = entries(&cache);
    assert_eq!(first.len(), 1, "one compiled component in {}", cache.display());
    assert_eq!(std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o700);
    let inode = std::fs::metadata(&first[0]).unwrap().ino();
    assert!(inspect_with(&[(var, &cache)]).status.success());
    assert_eq!(entries(&cache), first);
    assert_eq!(std::fs::metadata(&first[0]).unwrap().ino(), inode, "the entry was used, not written again");

    // Without the variable: under XDG_CACHE_HOME, else HOME's .cache.
    let xdg = tmp.path().join("xdg");
    assert!(inspect_with(&[("XDG_CACHE_HOME", &xdg), ("HOME", tmp.path())]).status.success());
    assert_eq!(entries(&xdg.join("steward/compiled")).len(), 1);
    let home = tmp.path().join("home");
    assert!(inspect_with(&[("HOME", &home)]).status.success());
    assert_eq!(entries(&home.join(".cache/steward/compiled")).len(), 1);

    // Set and empty: no cache at all.
    let bare = tmp.path().join("bare");
    assert!(inspect_with(&[(var, Path::new("")), ("HOME", &bare)]).status.success());
    assert!(!bare.exists(), "nothing written under HOME");

    // A directory that cannot be made costs only the compile, and the command says so.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = inspect_with(&[(var, &file.join("cache"))]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("warning: cannot use the compile cache directory") && stderr.contains(var), "{stderr}");
}
