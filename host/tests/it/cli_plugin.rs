//! `steward plugin inspect` and `steward plugin check`, run as the real binary.

use std::process::Command;

use crate::common::{install, wasm};

fn steward() -> Command {
    Command::new(env!("CARGO_BIN_EXE_steward"))
}

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
