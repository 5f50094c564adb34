//! `steward plugin test`, run as the real binary: the bundled kinds pass their scenario files, the Rust, Python and TypeScript `MCPServerGroup` pass the same one, so do the TypeScript and Python `StdioServer` (capability `services`), and a scenario that does not hold fails with its difference.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{self, wasm};

/// The workspace's root (scenario files are named from it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

fn plugin_test(plugin: &Path, scenarios: &[PathBuf]) -> (Output, Value) {
    let out = crate::common::steward()
        .args(["plugin", "test", "--output", "json"])
        .arg(plugin)
        .args(scenarios)
        .output()
        .expect("run steward");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out, json)
}

/// Every scenario of every file passed, and there were `count` of them.
fn assert_all_pass(json: &Value, count: usize) {
    let files = json.as_array().expect("one report per file");
    let mut seen = 0;
    for f in files {
        assert!(f.get("error").is_none(), "{f:#}");
        for s in f["scenarios"].as_array().expect("scenarios") {
            assert_eq!(s["verdict"]["verdict"], "pass", "{}: {:#}", s["name"], s["verdict"]);
            seen += 1;
        }
    }
    assert_eq!(seen, count, "{json:#}");
}

#[test]
fn the_bundled_kinds_pass_their_scenarios() {
    for (package, file, count) in [
        ("mcpservergroup", "plugins/mcpservergroup/scenarios/mcpservergroup.yaml", 12),
        ("mcpserver", "plugins/mcpserver/scenarios/mcpserver.yaml", 5),
        ("workflow", "plugins/workflow/scenarios/workflow.yaml", 3),
        ("workflowrun", "plugins/workflowrun/scenarios/workflowrun.yaml", 4),
        ("site", "examples/plugins/site/scenarios/site.yaml", 3),
    ] {
        let plugin = if package == "site" { steward_plugin_build::example_plugin(package) } else { wasm(package) };
        let (out, json) = plugin_test(&plugin, &[root().join(file)]);
        assert!(out.status.success(), "{package}: {json:#}");
        assert_all_pass(&json, count);
    }
}

#[tokio::test]
async fn the_rust_and_python_groups_pass_the_same_scenarios() {
    let scenarios = [root().join("plugins/mcpservergroup/scenarios/mcpservergroup.yaml")];
    let (out, json) = plugin_test(&wasm("mcpservergroup"), &scenarios);
    assert!(out.status.success(), "rust: {json:#}");
    assert_all_pass(&json, 12);
    // Building the Python component and compiling CPython take both cores for a while.
    let _heavy = common::heavy().await;
    let python = steward_plugin_build::python_plugin().unwrap_or_else(|e| panic!("{e}"));
    let (out, json) = plugin_test(&python, &scenarios);
    assert!(out.status.success(), "python: {json:#}");
    assert_all_pass(&json, 12);
}

#[tokio::test]
async fn the_typescript_group_passes_the_same_scenarios() {
    let scenarios = [root().join("plugins/mcpservergroup/scenarios/mcpservergroup.yaml")];
    // Building the TypeScript component and compiling SpiderMonkey take both cores for a while.
    let _heavy = common::heavy().await;
    let ts = steward_plugin_build::typescript_plugin("mcpservergroup-ts").unwrap_or_else(|e| panic!("{e}"));
    let (out, json) = plugin_test(&ts, &scenarios);
    assert!(out.status.success(), "typescript: {json:#}");
    assert_all_pass(&json, 12);
}

/// A kind that owns a service, in TypeScript and in Python: one scenario file for both,
/// granting `services` (the kit grants what a plugin declares).
#[tokio::test]
async fn the_typescript_and_python_stdio_servers_pass_the_same_scenarios() {
    let scenarios = [root().join("examples/plugins/stdioserver-ts/scenarios/stdioserver.yaml")];
    let _heavy = common::heavy().await;
    let ts = steward_plugin_build::typescript_plugin("stdioserver-ts").unwrap_or_else(|e| panic!("{e}"));
    let py = steward_plugin_build::python_example("stdioserver-py").unwrap_or_else(|e| panic!("{e}"));
    for (lang, plugin) in [("typescript", ts), ("python", py)] {
        let (out, json) = plugin_test(&plugin, &scenarios);
        assert!(out.status.success(), "{lang}: {json:#}");
        assert_all_pass(&json, 5);
    }
}

const WRONG: &str = r#"
scenarios:
  - name: expects too many members
    object:
      apiVersion: steward.dev/v1alpha1
      kind: MCPServerGroup
      metadata: {name: g, namespace: team-a}
      spec: {requiredTools: [search]}
    cache:
      - apiVersion: steward.dev/v1alpha1
        kind: MCPServer
        metadata: {name: alpha, namespace: team-a}
        status: {state: Running, health: Healthy, tools: [search]}
    expect:
      status: {selected: 2}
      conditions: [{type: Ready, status: "False"}]
  - name: holds
    object:
      apiVersion: steward.dev/v1alpha1
      kind: MCPServerGroup
      metadata: {name: g, namespace: team-a}
    expect:
      conditions: [{type: Ready, reason: NoServersSelected}]
"#;

#[test]
fn a_scenario_that_does_not_hold_fails_with_each_difference() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wrong.yaml");
    std::fs::write(&file, WRONG).unwrap();
    let (out, json) = plugin_test(&wasm("mcpservergroup"), std::slice::from_ref(&file));
    assert_eq!(out.status.code(), Some(1), "{json:#}");
    let scenarios = &json[0]["scenarios"];
    assert_eq!(scenarios[1]["verdict"]["verdict"], "pass", "the other scenario still runs: {json:#}");
    let failed = &scenarios[0];
    assert_eq!(failed["line"], 3);
    let mismatches: Vec<(String, String, String)> = failed["verdict"]["mismatches"]
        .as_array()
        .expect("mismatches")
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().into(),
                m["expected"].as_str().unwrap().into(),
                m["actual"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        mismatches,
        [
            ("status.selected".to_string(), "2".to_string(), "1".to_string()),
            ("conditions[Ready].status".to_string(), "\"False\"".to_string(), "\"True\"".to_string()),
        ]
    );
    // The text form says the same for people, with where the scenario is.
    let text =
        crate::common::steward().args(["plugin", "test"]).arg(wasm("mcpservergroup")).arg(&file).output().unwrap();
    assert_eq!(text.status.code(), Some(1));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("FAIL  expects too many members"), "{text}");
    assert!(text.contains("status.selected: expected 2, got 1"), "{text}");
    assert!(text.contains("1 passed, 1 failed"), "{text}");
}

#[test]
fn a_bad_scenario_file_is_an_error_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "scenarios:\n  - name: x\n    object: {kind: MCPServerGroup, metadata: {name: g}}\n")
        .unwrap();
    let (out, json) = plugin_test(&wasm("mcpservergroup"), std::slice::from_ref(&file));
    assert_eq!(out.status.code(), Some(1));
    let error = json[0]["error"].as_str().expect("an error");
    assert!(error.ends_with("bad.yaml:3: the object has no `apiVersion`"), "{error}");
}

const LIMITS: &str = r#"
plugin:
  timeout: 300ms
  memory: 32MiB
scenarios:
  - name: a loop ends at the deadline
    object: {apiVersion: test.steward.dev/v1, kind: Misbehave, metadata: {name: m}, spec: {behavior: loop}}
    expect: {result: timeout, message: deadline}
  - name: unbounded allocation ends at the memory cap
    object: {apiVersion: test.steward.dev/v1, kind: Misbehave, metadata: {name: m}, spec: {behavior: alloc}}
    expect: {result: memory}
  - name: a trap is a crash
    object: {apiVersion: test.steward.dev/v1, kind: Misbehave, metadata: {name: m}, spec: {behavior: trap}}
    expect: {result: crashed}
  - name: retry
    object: {apiVersion: test.steward.dev/v1, kind: Misbehave, metadata: {name: m}, spec: {behavior: retry}}
    expect: {result: retry}
"#;

#[test]
fn scenarios_run_under_the_runtimes_limits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    std::fs::write(&file, LIMITS).unwrap();
    let (out, json) = plugin_test(&wasm("misbehave"), std::slice::from_ref(&file));
    assert!(out.status.success(), "{json:#}");
    assert_all_pass(&json, 4);
}
