//! What passes through `/mcp` between a client (the official Python SDK) and the reference `everything` server: progress, cancellation, tool definitions.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::host::Host;

const T: Duration = Duration::from_secs(90);

/// The host config of these tests: tools called by their names.
const CONFIG: &str = "api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n";

/// An MCPServer `ev` running the reference `everything` server over stdio.
fn everything() -> String {
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

/// A host serving `everything` as `ev`, once its tools are offered.
async fn host() -> Host {
    let mut h = Host::new(CONFIG);
    h.write("ev.yaml", &everything());
    h.start().await;
    h.wait_object("MCPServer/default/ev", T, "Running and Healthy", |v| {
        v.is_some_and(|v| v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy")
    })
    .await;
    h
}

/// Runs `scripts/passthru_client.py` against the host's `/mcp` and returns the JSON it printed.
async fn python(h: &Host, mode: &str, tool: &str, args: Value) -> Value {
    let py = crate::common::mcp_servers_dir().join("py/bin/python3");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/scripts/passthru_client.py");
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let run = tokio::process::Command::new(py)
        .arg(script)
        .args([url.as_str(), mode, tool, &args.to_string()])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(T, run).await.expect("the Python client ends").expect("the Python client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the Python client failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_progress_of_a_servers_tool_reaches_the_python_client() {
    let h = host().await;
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
