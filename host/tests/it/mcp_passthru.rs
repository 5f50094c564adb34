//! What passes through `/mcp` between a client (the official Python SDK) and the reference `everything` server: progress, cancellation, tool definitions.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::host::Host;

const T: Duration = Duration::from_secs(90);

/// The host config of these tests: tools called by their names.
const CONFIG: &str = "api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n";

/// An MCPServer `ev` running the reference `everything` server over stdio.
pub(crate) fn everything() -> String {
    let dir = crate::common::mcp_servers_dir();
    let index = dir.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    json!({
        "apiVersion": "steward.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "ev"},
        "spec": {"type": "stdio", "command": "node", "args": [index.display().to_string(), "stdio"], "autoStart": true, "timeout": 30},
    })
    .to_string()
}

/// The venv's python (official MCP SDK), and the path of `scripts/<script>`.
fn python_sdk(script: &str) -> (String, String) {
    let py = crate::common::mcp_servers_dir().join("py/bin/python3").display().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/scripts").join(script);
    (py, script.display().to_string())
}

/// An MCPServer `cx` running `scripts/cancel_server.py` (it counts the calls cancelled at it).
fn cancel_server() -> String {
    let (py, script) = python_sdk("cancel_server.py");
    json!({
        "apiVersion": "steward.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "cx"},
        "spec": {"type": "stdio", "command": py, "args": [script], "autoStart": true, "timeout": 30},
    })
    .to_string()
}

/// A host serving the MCPServer `yaml` named `name`, once its tools are offered.
async fn host(name: &str, yaml: &str) -> Host {
    let mut h = Host::new(CONFIG);
    h.write(&format!("{name}.yaml"), yaml);
    h.start().await;
    h.wait_object(&format!("MCPServer/default/{name}"), T, "Running and Healthy", |v| {
        v.is_some_and(|v| v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy")
    })
    .await;
    h
}

/// `scripts/passthru_client.py` against the host's `/mcp`, not started.
fn client(h: &Host, mode: &str, tool: &str, args: &Value) -> tokio::process::Command {
    let (py, script) = python_sdk("passthru_client.py");
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let mut c = tokio::process::Command::new(py);
    c.arg(script).args([url.as_str(), mode, tool, &args.to_string()]).kill_on_drop(true);
    c
}

/// Runs `scripts/passthru_client.py` against the host's `/mcp` and returns the JSON it printed last.
async fn python(h: &Host, mode: &str, tool: &str, args: Value) -> Value {
    let run = client(h, mode, tool, &args).output();
    let out = tokio::time::timeout(T, run).await.expect("the Python client ends").expect("the Python client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the Python client failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_progress_of_a_servers_tool_reaches_the_python_client() {
    let h = host("ev", &everything()).await;
    let got = python(&h, "progress", "x_ev_trigger-long-running-operation", json!({"duration": 1, "steps": 3})).await;
    let progress: Vec<(f64, Option<f64>)> = got["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["progress"].as_f64().unwrap(), p["total"].as_f64()))
        .collect();
    assert_eq!(progress, vec![(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))], "{got:#}");
    assert_ne!(got["result"]["isError"], true, "{got:#}");
    assert!(got["result"]["content"][0]["text"].as_str().unwrap().contains("Steps: 3"), "{got:#}");
}

/// The text of the first content block of a tool result.
fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_a_call_cancels_it_at_the_server() {
    let h = host("cx", &cancel_server()).await;
    let got = python(&h, "cancel", "x_cx_wait", json!({})).await;
    assert_eq!(got["cancelled"], true, "{got:#}");
    assert_eq!(got["progress"].as_array().map(Vec::len), Some(1), "the call was running: {got:#}");
    // The server counts the call it saw cancelled.
    crate::common::eventually(
        T,
        "the server counts one cancelled call",
        async || python(&h, "progress", "x_cx_cancelled", json!({})).await,
        |v| text(&v["result"]) == "1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_ends_with_an_error_that_says_so_when_the_servers_session_ends() {
    use tokio::io::AsyncBufReadExt;
    let h = host("cx", &cancel_server()).await;
    let mut child = client(&h, "follow", "x_cx_wait", &json!({}))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the Python client runs");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(T, lines.next_line()).await.expect("a line in time").unwrap();
        serde_json::from_str(&line.expect("the client printed a line")).unwrap()
    };
    let first = next().await;
    assert_eq!(first["message"], "waiting", "the call runs: {first}");
    h.remove("cx.yaml");
    let end = next().await;
    assert_eq!(end["result"]["isError"], true, "{end:#}");
    let words = text(&end["result"]);
    assert!(words.starts_with("x_cx_wait failed:") && words.contains("closed"), "{end:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_tool_definitions_reach_the_client_whole() {
    let h = host("ev", &everything()).await;
    let got = python(&h, "list", "", json!({})).await;
    let tool = |name: &str| {
        got["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} listed: {got:#}"))
    };
    let long = tool("x_ev_trigger-long-running-operation");
    assert_eq!(long["title"], "Trigger Long Running Operation Tool", "{long:#}");
    assert_eq!(
        long["annotations"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
        "{long:#}"
    );
    let structured = tool("x_ev_get-structured-content");
    assert_eq!(structured["outputSchema"]["type"], "object", "{structured:#}");
    // A task-required tool called without a task (the Python client has none) fails with the
    // server's own words; `mcp_tasks` makes it as a task, and sees its `execution` listed.
    let research = tool("x_ev_simulate-research-query");
    assert_eq!(research["title"], "Simulate Research Query", "{research:#}");
    let called = python(&h, "raw", "x_ev_simulate-research-query", json!({"topic": "x"})).await;
    let words = called["result"]["content"][0]["text"].as_str().or(called["error"].as_str()).unwrap_or_default();
    assert!(words.contains("requires task augmentation"), "{called:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_sampling_elicitation_and_roots_requests_reach_the_client_of_the_call() {
    let h = host("ev", &everything()).await;
    let calls = json!([
        ["x_ev_trigger-sampling-request", {"prompt": "hi"}],
        ["x_ev_trigger-elicitation-request", {}],
        ["x_ev_get-roots-list", {}],
    ]);
    let got = python(&h, "ask", "", calls).await;
    let shown = |tool: &str| serde_json::to_string(&got["results"][tool]).unwrap();
    assert!(shown("x_ev_trigger-sampling-request").contains("sampled-by-the-client"), "{got:#}");
    assert!(shown("x_ev_trigger-elicitation-request").contains("elicited-name"), "{got:#}");
    // everything asks for roots once, as the host's session opens: no /mcp call is in flight
    // then, so it is refused (docs/mcp.md), and everything does not ask again during the call.
    assert_eq!(got["results"]["x_ev_get-roots-list"]["isError"], false, "{got:#}");
    let asked: Vec<&str> = got["asked"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(asked.contains(&"sampling/createMessage") && asked.contains(&"elicitation/create"), "{got:#}");

    // A client that declared none of them: the server is told so, and says it in its result.
    let plain = python(&h, "raw", "x_ev_trigger-sampling-request", json!({"prompt": "hi"})).await;
    assert!(serde_json::to_string(&plain).unwrap().contains("did not declare the capability"), "{plain:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_roots_request_during_a_call_reaches_the_client_of_the_call() {
    // A server on the official Python SDK asks for the roots while it serves the call: the
    // /mcp client that made the call answers with its own.
    let h = host("cx", &cancel_server()).await;
    let got = python(&h, "ask", "", json!([["x_cx_roots", {}]])).await;
    let result = &got["results"]["x_cx_roots"];
    assert_ne!(result["isError"], true, "{got:#}");
    assert!(serde_json::to_string(result).unwrap().contains("file:///client-root"), "{got:#}");
    let asked: Vec<&str> = got["asked"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(asked.contains(&"roots/list"), "{got:#}");
}
