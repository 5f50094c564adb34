//! The bundled local example end to end, a kind dropped into the running host, and the plugin guide run as written.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::host::{Host, free_port, synced};

const T: Duration = Duration::from_secs(60);

/// A copy of `examples/local` under `root/examples/local`, listening on a free port, with the named
/// bundled plugins in its plugin directory and the example MCP server in its `bin/`.
fn example(plugins: &[&str]) -> Host {
    let src = steward_plugin_build::workspace_root().join("examples/local");
    let root = tempfile::tempdir().unwrap();
    let dst = root.path().join("examples/local");
    for d in ["resources", "plugins", "bin"] {
        std::fs::create_dir_all(dst.join(d)).unwrap();
    }
    let port = free_port();
    let config = std::fs::read_to_string(src.join("steward.yaml")).unwrap();
    assert!(config.contains("127.0.0.1:7878"), "the example listens on 7878:\n{config}");
    let config = config.replace("127.0.0.1:7878", &format!("127.0.0.1:{port}"));
    let config = common::host::shared_cache_line(&config) + &config;
    std::fs::write(dst.join("steward.yaml"), config).unwrap();
    for entry in std::fs::read_dir(src.join("resources")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dst.join("resources").join(path.file_name().unwrap())).unwrap();
    }
    for p in plugins {
        common::install(&common::wasm(p), &dst.join("plugins").join(format!("{p}.wasm")));
    }
    let server = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(server, dst.join("bin").join(steward_plugin_build::EXAMPLE_MCP)).unwrap();
    let config = dst.join("steward.yaml");
    Host::with_config(root, config, port)
}

fn ready(v: Option<&Value>) -> Option<&str> {
    let conds = v?["conditions"].as_array()?;
    conds.iter().find(|c| c["type"] == "Ready").and_then(|c| c["status"].as_str())
}

fn ready_reason(v: &Value) -> &str {
    v["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_local_example_converges_and_takes_a_kind_dropped_in_while_running() {
    let mut h = example(&["mcpserver", "workflow", "workflowrun"]);
    h.start().await;
    let local = h.dir.path().join("examples/local");

    let server = h
        .wait_object("MCPServer/default/everything", T, "Running and Healthy", |v| {
            v.is_some_and(|v| v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy")
        })
        .await
        .unwrap();
    let tools: Vec<&str> = server["status"]["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"x_ex_echo") && tools.contains(&"x_ex_add"), "{tools:?}");
    h.wait_object("Workflow/default/greet-and-add", T, "Ready", |v| ready(v) == Some("True")).await;

    // The workflow runs, as the example's comment says, and answers with its output.
    let (code, out, err) =
        h.cli_within(&["workflow", "run", "greet-and-add", "--arg", "who=world", "--wait", "--rm", "-o", "json"], T);
    assert_eq!(code, 0, "{out}\n{err}");
    let output: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(output, serde_json::json!({"greeting": "hello world", "sum": 3}));
    // `--rm`: the run is gone once it answered, file and object.
    assert!(err.contains("deleted WorkflowRun/default/greet-and-add-"), "{err}");
    h.wait_get("/api/v1/resources?kind=WorkflowRun", T, "no run left", |v| v.as_array().is_some_and(Vec::is_empty))
        .await;
    let runs = local.join("resources/workflowruns/default");
    assert!(!std::fs::read_dir(&runs).is_ok_and(|mut d| d.next().is_some()), "{}", runs.display());

    // No plugin serves MCPServerGroup yet: the object waits, and says why.
    let g = h
        .wait_object("MCPServerGroup/default/platform", T, "Pending", |v| v.is_some_and(|v| v["phase"] == "Pending"))
        .await
        .unwrap();
    assert!(g["lastError"].as_str().unwrap_or("").contains("no plugin serves kind MCPServerGroup"), "{g:#}");

    // Dropping the plugin into the directory of the running host is all it takes.
    common::install(&common::wasm("mcpservergroup"), &local.join("plugins/mcpservergroup.wasm"));
    let g = h
        .wait_object("MCPServerGroup/default/platform", T, "Synced and Ready", |v| {
            synced(v) && ready(v) == Some("True")
        })
        .await
        .unwrap();
    assert_eq!((g["status"]["selected"].as_u64(), g["status"]["ready"].as_u64()), (Some(1), Some(1)), "{g:#}");
    assert_eq!(g["status"]["members"][0]["name"], "everything");
    assert_eq!(g["status"]["missingTools"], serde_json::json!([]));
    let offered: Vec<&str> = g["status"]["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(offered, tools, "the group offers what its one member offers");
    assert_eq!(g["pluginVersion"], "0.1.0");

    // The group follows its members: stopping the server makes it not ready, by itself.
    let servers = std::fs::read_to_string(local.join("resources/servers.yaml")).unwrap();
    assert!(servers.contains("autoStart: true"));
    let tmp = local.join("servers.tmp");
    std::fs::write(&tmp, servers.replace("autoStart: true", "autoStart: false")).unwrap();
    std::fs::rename(&tmp, local.join("resources/servers.yaml")).unwrap();
    let g = h
        .wait_object("MCPServerGroup/default/platform", T, "NoServersReady", |v| {
            v.is_some_and(|v| ready_reason(v) == "NoServersReady")
        })
        .await
        .unwrap();
    assert_eq!(ready(Some(&g)), Some("False"));
    assert_eq!(g["status"]["missingTools"], serde_json::json!(["x_ex_add", "x_ex_echo"]));
    h.wait_object("Workflow/default/greet-and-add", T, "not Ready", |v| ready(v) == Some("False")).await;
}

/// The `$ ` lines of the ```console blocks of `docs/plugins.md`, in order.
fn guide_commands() -> Vec<String> {
    let guide = std::fs::read_to_string(steward_plugin_build::workspace_root().join("docs/plugins.md")).unwrap();
    let mut in_console = false;
    let mut commands = Vec::new();
    for line in guide.lines() {
        if let Some(fence) = line.strip_prefix("```") {
            in_console = !in_console && fence.trim() == "console";
            continue;
        }
        if in_console && let Some(cmd) = line.strip_prefix("$ ") {
            commands.push(cmd.to_string());
        }
    }
    commands
}

/// A shell command as a user types it: `steward` on the PATH, nothing of the enclosing cargo; the
/// compile cache of the commands without a host is `cache` rather than the user's.
fn shell(cmd: &str, cwd: &Path, cache: &Path) -> (bool, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_steward")).parent().unwrap().to_path_buf();
    let path =
        std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())))
            .unwrap();
    let mut c = Command::new("sh");
    c.args(["-c", cmd]).current_dir(cwd).env("PATH", path).env(steward::plugin::CACHE_ENV, cache);
    steward_plugin_build::without_enclosing_cargo(&mut c);
    let out = c.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plugin_guide_runs_as_written() {
    // The walkthrough builds and tests a new plugin crate with cargo.
    let _heavy = common::heavy().await;
    let commands = guide_commands();
    assert!(commands.len() >= 10, "the guide's walkthrough: {commands:#?}");
    assert_eq!(commands[0], "steward new plugin greeter --kind Greeting");

    let mut h = example(&["mcpserver", "workflow", "mcpservergroup"]);
    h.start().await;
    let root = h.dir.path().to_path_buf();
    let mut cwd: PathBuf = root.clone();
    for cmd in &commands {
        if let Some(dir) = cmd.strip_prefix("cd ") {
            cwd = cwd.join(dir).canonicalize().unwrap();
            continue;
        }
        let (ok, out) = shell(cmd, &cwd, &root.join("compile-cache"));
        assert!(ok, "`{cmd}` failed in {}:\n{out}\nhost log:\n{}", cwd.display(), h.log());
        match cmd.split_whitespace().take(3).collect::<Vec<_>>()[..] {
            ["steward", "new", "plugin"] if cmd.contains("--lang ts") => {
                let package = cwd.join("greeter-ts");
                assert!(package.join("src/index.ts").is_file() && package.join("package.json").is_file(), "{out}");
                assert!(out.contains("npm run build"), "prints the build:\n{out}");
            }
            ["steward", "new", "plugin"] if cmd.contains("--lang py") => {
                let module = cwd.join("greeter-py");
                assert!(module.join("app.py").is_file() && module.join("wit/plugin.wit").is_file(), "{out}");
                assert!(
                    out.contains("componentize-py -d wit -w plugin-full componentize app"),
                    "prints the build:\n{out}"
                );
            }
            ["steward", "new", "plugin"] => {
                assert!(
                    out.contains("cargo build --release --target wasm32-wasip2"),
                    "prints the build command:\n{out}"
                );
                let krate = cwd.join("greeter");
                assert!(krate.join("src/lib.rs").is_file() && krate.join("README.md").is_file());
                // Test set-up, not part of the walkthrough: the versions the workspace was tested with, and a
                // build directory kept between test runs, so the crate's dependencies are compiled once.
                std::fs::copy(steward_plugin_build::workspace_root().join("Cargo.lock"), krate.join("Cargo.lock"))
                    .unwrap();
                let shared = steward_plugin_build::workspace_root().join("target/scaffold");
                std::fs::create_dir_all(&shared).unwrap();
                std::os::unix::fs::symlink(&shared, krate.join("target")).unwrap();
            }
            ["cargo", "test", ..] => {
                assert!(out.contains("test result: ok. 2 passed"), "the generated tests run:\n{out}")
            }
            ["cargo", "build", ..] => assert!(cwd.join("target/wasm32-wasip2/release/greeter.wasm").is_file()),
            ["cp", "resource.yaml", ..] => {
                let v = h.wait_object("Greeting/default/hello", T, "Synced", synced).await.unwrap();
                assert_eq!(v["status"]["rendered"], "hello from greeter hello from greeter", "{v:#}");
                assert_eq!(ready(Some(&v)), Some("True"));
                assert_eq!(v["plugin"], "greeter");
            }
            ["steward", "plugins", ..] => assert!(out.contains("greeter") && out.contains("Ready"), "{out}"),
            ["steward", "status", "Greeting"] => {
                assert!(out.contains("hello") && out.contains("Synced"), "{out}")
            }
            ["steward", "status", _] => {
                let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
                assert_eq!(v["phase"], "Synced", "{v:#}");
            }
            ["steward", "plugin", "test"] => assert!(out.contains("2 passed, 0 failed"), "{out}"),
            ["steward", "plugin", "inspect"] => {
                let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
                assert_eq!(v["kinds"][0]["kind"], "Greeting", "{v:#}");
            }
            ["steward", "trigger", _] => assert!(out.contains("queued"), "{out}"),
            _ => {}
        }
    }
    // The triggered reconcile shows in the object's history.
    h.wait_object("Greeting/default/hello", T, "a manual trigger in its history", |v| {
        v.is_some_and(|v| v["history"].as_array().is_some_and(|hs| hs.iter().any(|e| e["reason"] == "manualTrigger")))
    })
    .await;
}
