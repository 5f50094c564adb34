//! muster's resources under Steward: the corpus of `testing/muster-compat` through the real
//! `steward check`, and a muster-style workflow made Ready by a real MCP server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::host::Host;

const T: Duration = Duration::from_secs(60);

/// One corpus file and what its comments say.
struct Case {
    /// The file name, as `steward check` prints it.
    file: String,
    /// What Steward must do: `accept`, `warn` or `reject`.
    verdict: String,
    /// The fields the errors or warnings must name.
    fields: Vec<String>,
    /// Whether the verdict relies on the host pruning unknown fields.
    needs_pruning: bool,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/muster-compat")
}

/// Every case of the corpus, read from the leading comments of its file.
fn corpus() -> Vec<(PathBuf, Case)> {
    let mut out = Vec::new();
    for group in ["mcpserver", "workflow", "steward-extensions"] {
        let dir = corpus_dir().join(group);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
            let text = std::fs::read_to_string(&path).unwrap();
            let comment = |key: &str| -> Vec<String> {
                text.lines()
                    .take_while(|l| l.starts_with('#'))
                    .filter_map(|l| l.strip_prefix(&format!("# {key}: ")).map(str::to_string))
                    .collect()
            };
            let muster = comment("muster").pop().unwrap_or_else(|| panic!("{} says nothing of muster", path.display()));
            let verdict = comment("steward").pop().unwrap_or(muster);
            assert!(["accept", "warn", "reject"].contains(&verdict.as_str()), "{}: {verdict}", path.display());
            let file = format!("{group}-{}", path.file_name().unwrap().to_string_lossy());
            let needs_pruning = comment("needs").iter().any(|n| n == "fieldval");
            out.push((path, Case { file, verdict, fields: comment("field"), needs_pruning }));
        }
    }
    assert!(out.len() > 60, "the corpus is incomplete: {} files", out.len());
    out
}

/// Runs `steward check` once over the chosen cases; returns its output lines per file.
fn check(cases: &[(PathBuf, Case)]) -> Vec<(String, Vec<String>)> {
    let h = Host::new("");
    for (path, case) in cases {
        std::fs::copy(path, h.resources().join(&case.file)).unwrap();
    }
    let (_, out, err) = h.cli(&["check"]);
    let lines: Vec<String> = out.lines().chain(err.lines()).map(str::to_string).collect();
    cases
        .iter()
        .map(|(_, c)| {
            let mine = lines.iter().filter(|l| l.contains(&c.file)).cloned().collect();
            (c.file.clone(), mine)
        })
        .collect()
}

fn is_warning(line: &str) -> bool {
    line.contains("warning")
}

/// Whether `line` names `field` (as `PATH: message`, or a deeper path under it).
fn names(line: &str, field: &str) -> bool {
    line.contains(&format!(" {field}: "))
        || line.contains(&format!(" {field}."))
        || line.contains(&format!(" {field}["))
}

#[test]
fn check_accepts_and_rejects_as_muster_does() {
    let cases: Vec<_> = corpus().into_iter().filter(|(_, c)| !c.needs_pruning).collect();
    let results = check(&cases);
    let mut wrong = Vec::new();
    for ((_, case), (_, lines)) in cases.iter().zip(&results) {
        let errors: Vec<&String> = lines.iter().filter(|l| !is_warning(l)).collect();
        match case.verdict.as_str() {
            "reject" => {
                if errors.is_empty() {
                    wrong.push(format!("{}: muster refuses it, steward check accepted it", case.file));
                }
                for f in &case.fields {
                    if !errors.iter().any(|l| names(l, f)) {
                        wrong.push(format!("{}: no error names {f}: {errors:?}", case.file));
                    }
                }
            }
            _ => {
                if !errors.is_empty() {
                    wrong.push(format!("{}: muster accepts it, steward check said {errors:?}", case.file));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {} cases differ from muster:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
}

/// Relies on the host printing plugin warnings (`file:line:column: warning: ...`).
#[test]
fn check_warns_where_muster_accepts_a_likely_mistake() {
    let cases: Vec<_> = corpus().into_iter().filter(|(_, c)| !c.needs_pruning).collect();
    let results = check(&cases);
    let mut wrong = Vec::new();
    for ((_, case), (_, lines)) in cases.iter().zip(&results) {
        let warnings: Vec<&String> = lines.iter().filter(|l| is_warning(l)).collect();
        match case.verdict.as_str() {
            "warn" => {
                for f in &case.fields {
                    if !warnings.iter().any(|l| names(l, f)) {
                        wrong.push(format!("{}: no warning names {f}: {lines:?}", case.file));
                    }
                }
            }
            "accept" if !warnings.is_empty() => wrong.push(format!("{}: unexpected warnings {warnings:?}", case.file)),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Relies on the host's field validation `warn` (the default): unknown fields are pruned with a
/// warning naming them, as an API server does, and the object is accepted.
#[test]
fn check_prunes_unknown_fields_with_a_warning() {
    let cases: Vec<_> = corpus().into_iter().filter(|(_, c)| c.needs_pruning).collect();
    assert!(cases.len() >= 4, "the corpus has too few unknown-field cases");
    let results = check(&cases);
    let mut wrong = Vec::new();
    for ((_, case), (_, lines)) in cases.iter().zip(&results) {
        if lines.iter().any(|l| !is_warning(l)) {
            wrong.push(format!("{}: muster accepts it, steward check said {lines:?}", case.file));
        }
        for f in &case.fields {
            if !lines.iter().any(|l| is_warning(l) && names(l, f)) {
                wrong.push(format!("{}: no warning names {f}: {lines:?}", case.file));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

fn ready(v: Option<&Value>) -> Option<&str> {
    v?["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["status"].as_str()
}

fn ready_message(v: &Value) -> String {
    let conds = v["conditions"].as_array().cloned().unwrap_or_default();
    conds.iter().find(|c| c["type"] == "Ready").and_then(|c| c["message"].as_str()).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_muster_workflow_is_ready_on_muster_tool_names_and_core_tools_stay_missing() {
    let mut h = Host::new("");
    h.start().await;
    // No toolPrefix: muster names the tools after the server, x_tools_<tool>.
    h.write(
        "server.yaml",
        &format!(
            "apiVersion: muster.giantswarm.io/v1alpha1\nkind: MCPServer\nmetadata:\n  name: tools\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\"]\n  autoStart: true\n  timeout: 10\n",
            server_bin()
        ),
    );
    h.write(
        "workflows.yaml",
        "apiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: greet\nspec:\n  args:\n    who: {type: string}\n  steps:\n    - id: hello\n      tool: x_tools_echo\n      args: {message: \"hello {{ .input.who }}\"}\n    - id: sum\n      tool: x_tools_add\n      args: {a: 1, b: 2}\n  output:\n    said: \"{{ .results.hello }}\"\n\
         ---\napiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: wrapper\nspec:\n  steps:\n    - id: run\n      tool: workflow_greet\n\
         ---\napiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: admin\nspec:\n  steps:\n    - id: hello\n      tool: x_tools_echo\n    - id: services\n      tool: core_service_list\n",
    );
    let server = h.wait_object("MCPServer/default/tools", T, "Ready", |v| ready(v) == Some("True")).await.unwrap();
    let tools: Vec<&str> = server["status"]["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"x_tools_echo") && tools.contains(&"x_tools_add"), "{tools:?}");

    let greet = h.wait_object("Workflow/default/greet", T, "Ready", |v| ready(v) == Some("True")).await.unwrap();
    assert_eq!(greet["status"]["valid"], true);
    assert_eq!(greet["status"]["stepCount"], 2);
    assert_eq!(greet["status"]["referencedTools"], serde_json::json!(["x_tools_add", "x_tools_echo"]));
    h.wait_object("Workflow/default/wrapper", T, "Ready through workflow_greet", |v| ready(v) == Some("True")).await;

    let admin = h
        .wait_object("Workflow/default/admin", T, "reconciled, not Ready", |v| {
            ready(v) == Some("False")
                && v.is_some_and(|v| v["status"]["availableTools"] == serde_json::json!(["x_tools_echo"]))
        })
        .await
        .unwrap();
    assert_eq!(admin["status"]["missingTools"], serde_json::json!(["core_service_list"]));
    let msg = ready_message(&admin);
    assert!(msg.contains("core_service_list") && msg.contains("not offered by Steward"), "{msg}");

    // The server goes away: every workflow on its tools, and the one on workflow_greet, is not Ready.
    h.remove("server.yaml");
    let deep = serde_json::json!(["x_tools_add", "x_tools_echo"]);
    h.wait_object("Workflow/default/wrapper", T, "not Ready, missing greet's tools", |v| {
        ready(v) == Some("False") && v.is_some_and(|v| v["status"]["missingTools"] == deep)
    })
    .await;
}

/// The warnings of an object's view, as (path, source).
fn warned(v: &Value) -> Vec<(String, String)> {
    let list = v["warnings"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|w| {
            (w["path"].as_str().unwrap_or_default().to_string(), w["source"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

const RUN: &str = r#"
import asyncio, sys
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(sys.argv[1]) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            r = await s.call_tool(sys.argv[2], {"special_input": "edge-case-input_with_underscores-and-dashes"})
            print("error" if r.is_error else "ok")

asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_leniencies_load_with_warnings_and_run() {
    let mut h = Host::new(
        "  workflowrun: { capabilities: [tools], tools: { allow: [\"*\"] } }\napi:\n  listen: 127.0.0.1:{port}\n  mcp: { tools: direct }\n",
    );
    crate::common::install(&crate::common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.start().await;
    // muster's edge case (workflow-execution-edge-cases): '_' in the name; unknown keys beside it.
    h.write(
        "special.yaml",
        "apiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: special-chars-workflow_123\n  owner: team-a\nnotes: by hand\nspec:\n  args:\n    special_input: {type: string, default: x}\n  steps:\n    - id: special_step\n      tool: core_plugin_list\n",
    );
    // No metadata.name: named after the file.
    h.write(
        "unnamed.yaml",
        "apiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nspec:\n  steps:\n    - id: s\n      tool: core_plugin_list\n",
    );
    // Two documents without names: the file is refused.
    let nameless = "apiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nspec:\n  steps:\n    - id: s\n      tool: core_plugin_list\n";
    h.write("two.yaml", &format!("{nameless}---\n{nameless}"));

    let special = h
        .wait_object("Workflow/default/special-chars-workflow_123", T, "Ready", |v| ready(v) == Some("True"))
        .await
        .unwrap();
    let mut w = warned(&special);
    w.sort();
    let source = |p: &str| (p.to_string(), "source".to_string());
    assert_eq!(w, [source("metadata.name"), source("metadata.owner"), source("notes")], "{special:#}");
    for m in special["warnings"].as_array().unwrap() {
        assert!(m["message"].as_str().unwrap().contains("Kubernetes mode refuses"), "{m}");
    }
    let unnamed = h.wait_object("Workflow/default/unnamed", T, "Ready", |v| ready(v) == Some("True")).await.unwrap();
    assert_eq!(warned(&unnamed), [source("metadata.name")]);
    assert!(unnamed["warnings"][0]["message"].as_str().unwrap().contains("taken from the file name"), "{unnamed:#}");
    assert!(h.object("Workflow/default/two").await.is_none());

    // steward check says the same: the warnings, and the refused file.
    let (code, out, err) = h.cli(&["check"]);
    assert_ne!(code, 0, "two.yaml is refused: {out}{err}");
    let lines: Vec<&str> = out.lines().chain(err.lines()).collect();
    let has = |file: &str, what: &str| lines.iter().any(|l| l.starts_with(file) && l.contains(what));
    assert!(has("special.yaml", "warning: metadata.name: \"special-chars-workflow_123\" holds '_'"), "{lines:#?}");
    assert!(
        has("special.yaml", "warning: notes: unknown key") && has("special.yaml", "warning: metadata.owner:"),
        "{lines:#?}"
    );
    assert!(has("unnamed.yaml", "warning: metadata.name: missing"), "{lines:#?}");
    assert!(has("two.yaml", "metadata.name is missing") && has("two.yaml", "holds 2"), "{lines:#?}");

    // And it runs, as muster's scenario runs it.
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let (code, out, err) = crate::mcp_protocol::python(RUN, &[&url, "workflow_special-chars-workflow_123"]);
    assert_eq!((code, out.trim()), (0, "ok"), "{out}\n{err}");
}
