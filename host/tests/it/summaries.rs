//! One summary per object on every list: an MCPServer whose command does not exist is Ready False, with its reason, in the API's list (the page's data), `steward status` and `core_resource_list`.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use crate::common::host::Host;

const T: Duration = Duration::from_secs(60);

/// A command that is nowhere on this machine.
const MISSING: &str = "/nonexistent/steward-summary-test/prog";

#[derive(Clone, Default)]
struct Agent;

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("summaries-test", "0"))
    }
}

async fn connect(port: u16) -> RunningService<RoleClient, Agent> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://127.0.0.1:{port}/mcp"));
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    Agent.serve(transport).await.expect("the MCP handshake with /mcp")
}

/// The one summary every surface shows of the broken server: not ready, red, with a reason and
/// the kind's own columns.
fn assert_failing(s: &Value, surface: &str) {
    assert_eq!(s["ready"], "False", "{surface}: {s:#}");
    assert_eq!(s["verdict"], "failing", "{surface}: never green: {s:#}");
    assert!(s["reason"].as_str().is_some_and(|r| !r.is_empty()), "{surface}: a reason: {s:#}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()), "{surface}: a message: {s:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_command_does_not_exist_is_not_ready_on_every_list() {
    let mut h = Host::new(crate::common::host::MCP_DIRECT);
    h.start().await;
    h.write(
        "broken.yaml",
        &format!(
            "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: broken\nspec:\n  type: stdio\n  command: \"{MISSING}\"\n  autoStart: true\n"
        ),
    );

    // The API's list, which is also what the status page's table is drawn from.
    let list = h
        .wait_get("/api/v1/resources?kind=MCPServer", T, "broken is Ready False", |v| {
            v[0]["summary"]["ready"] == "False" && v[0]["summary"]["columns"][0]["value"] == "Failed"
        })
        .await;
    let summary = &list[0]["summary"];
    assert_failing(summary, "GET /api/v1/resources");
    let columns: Vec<&str> =
        summary["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["State", "Health", "Tools", "Restarts"], "the kind's declared columns: {summary:#}");
    assert_eq!(summary["columns"][2]["value"], "0", "no tools: {summary:#}");
    let everything = h.api().get("/api/v1/resources").await.unwrap();
    let same = everything.as_array().unwrap().iter().find(|v| v["name"] == "broken").expect("in the whole list");
    assert_failing(&same["summary"], "GET /api/v1/resources (every kind)");

    // `steward status`: its JSON is the same summary, its table shows READY False and the reason.
    let (code, out, err) = h.cli(&["status", "MCPServer", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let views: Value = serde_json::from_str(&out).unwrap();
    assert_failing(&views[0]["summary"], "steward status -o json");
    let (code, out, err) = h.cli(&["status", "MCPServer"]);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header[3..9], ["PHASE", "READY", "REASON", "STATE", "HEALTH", "TOOLS"], "{out}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let reason = summary["reason"].as_str().unwrap();
    assert_eq!((row[4], row[5], row[6]), ("False", reason, "Failed"), "{out}");

    // `core_resource_list` through the MCP endpoint.
    let client = connect(h.port).await;
    let mut call = CallToolRequestParams::new("core_resource_list");
    call.arguments = json!({"kind": "MCPServer"}).as_object().cloned();
    let answer = client.peer().call_tool(call).await.expect("core_resource_list");
    let listed = answer.structured_content.expect("structured");
    let item = &listed["items"][0];
    assert_eq!(item["name"], "broken", "{listed:#}");
    assert_failing(item, "core_resource_list");
    assert_eq!(item["columns"][0], json!({"name": "State", "value": "Failed"}), "{listed:#}");
    let _ = client.cancel().await;
}
