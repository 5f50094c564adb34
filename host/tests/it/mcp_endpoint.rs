//! The MCP endpoint end to end: a real host, a real MCP server behind an MCPServer, and rmcp's client at `/mcp`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common;
use crate::common::host::{Host, MCP_DIRECT};

const T: Duration = Duration::from_secs(60);

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

fn mcp_server(name: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\"]\n  autoStart: true\n  timeout: 10\n",
        server_bin()
    )
}

/// A client that counts `notifications/tools/list_changed` and keeps every progress notification.
#[derive(Clone, Default)]
struct Agent {
    changed: Arc<Notify>,
    progress: Arc<std::sync::Mutex<Vec<rmcp::model::ProgressNotificationParam>>>,
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("mcp-endpoint-test", "0"))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

async fn connect(port: u16, query: &str, token: Option<&str>) -> RunningService<RoleClient, Agent> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://127.0.0.1:{port}/mcp{query}"));
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    Agent::default().serve(transport).await.expect("the MCP handshake with /mcp")
}

async fn tools(client: &RunningService<RoleClient, Agent>) -> Vec<Tool> {
    client.peer().list_all_tools().await.expect("tools/list")
}

fn names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// Lists the tools until `f` holds for their names.
async fn wait_tools(
    client: &RunningService<RoleClient, Agent>,
    what: &str,
    f: impl Fn(&[String]) -> bool,
) -> Vec<Tool> {
    common::eventually(T, what.to_string(), async || tools(client).await, |t| f(&names(t))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_lists_and_calls_a_servers_tools_and_is_told_when_they_go() {
    let mut h = Host::new(MCP_DIRECT);
    h.start().await;
    let client = connect(h.port, "", None).await;
    let info = client.peer().peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("steward"));
    let first = names(&tools(&client).await);
    assert!(first.iter().any(|n| n == "core_mcpserver_list"), "{first:?}");
    assert!(!first.iter().any(|n| n.starts_with("x_")), "no server yet: {first:?}");
    assert!(!first.iter().any(|n| n == "call_tool"), "tools: direct lists no meta-tool: {first:?}");

    h.write("git.yaml", &mcp_server("git"));
    let listed = wait_tools(&client, "x_git_echo listed", |n| n.iter().any(|n| n == "x_git_echo")).await;
    let echo = listed.iter().find(|t| t.name == "x_git_echo").unwrap();
    assert!(echo.input_schema["properties"]["message"].is_object(), "the server's schema: {echo:?}");
    assert!(names(&listed).contains(&"x_git_add".to_string()));

    let mut call = CallToolRequestParams::new("x_git_echo");
    call.arguments = json!({"message": "hello"}).as_object().cloned();
    let answer = client.peer().call_tool(call).await.expect("tools/call");
    assert_ne!(answer.is_error, Some(true), "{answer:?}");
    assert_eq!(serde_json::to_value(&answer.content).unwrap()[0]["text"], "hello");

    // The management tools read the same state.
    let list = client.peer().call_tool(CallToolRequestParams::new("core_mcpserver_list")).await.unwrap();
    let listed: Value = list.structured_content.expect("structured");
    assert_eq!(listed["mcpServers"][0]["name"], "git", "{listed:#}");

    // Another namespace sees none of it.
    let other = connect(h.port, "?namespace=elsewhere", None).await;
    assert!(!names(&tools(&other).await).iter().any(|n| n.starts_with("x_")));
    let unknown = CallToolRequestParams::new("x_git_echo");
    let err = other.peer().call_tool(unknown).await.unwrap_err().to_string();
    assert!(err.contains("no healthy MCPServer of namespace elsewhere offers tool x_git_echo"), "{err}");

    // Deleting the server: the client is told, and the tool is gone.
    let changed = client.service().changed.clone();
    h.remove("git.yaml");
    tokio::time::timeout(T, changed.notified()).await.expect("notifications/tools/list_changed");
    wait_tools(&client, "x_git_echo gone", |n| !n.iter().any(|n| n.starts_with("x_git_"))).await;
    let _ = client.cancel().await;
    let _ = other.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_needs_the_apis_token() {
    let mut h = Host::with_files(
        "api: { listen: 127.0.0.1:{port}, token_file: token, mcp: { tools: both } }\n",
        &[("token", "s3cret\n")],
    );
    h.start().await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let body = init.to_string();
    let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let anon = h.http("POST", "/mcp", &headers, body.as_bytes());
    assert_eq!(anon.status, 401, "{anon:?}");
    let bad = h.http(
        "POST",
        "/mcp?namespace=Not_Valid",
        &[headers[0], headers[1], ("Authorization", "Bearer s3cret")],
        body.as_bytes(),
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    let client = connect(h.port, "", Some("s3cret")).await;
    // tools: both lists the meta-tools, then every tool.
    let both = names(&tools(&client).await);
    assert!(both.iter().any(|n| n == "core_plugin_list"), "{both:?}");
    assert_eq!(both[..5], ["list_tools", "describe_tool", "list_core_tools", "filter_tools", "call_tool"]);
    let _ = client.cancel().await;
}

fn workflow(name: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {name}\nspec:\n  description: Echoes a greeting.\n  args:\n    who:\n      type: string\n      required: true\n      description: Whom to greet.\n  steps:\n    - id: greet\n      tool: x_git_echo\n      args:\n        message: \"hello {{{{ .input.who }}}}\"\n      output: true\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_runs_a_workflow_and_gets_its_output() {
    let mut h = Host::new(&format!(
        "  workflowrun: {{ capabilities: [tools], tools: {{ allow: [\"x_*\", \"workflow_*\"] }} }}\n{MCP_DIRECT}"
    ));
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.start().await;
    h.write("git.yaml", &mcp_server("git"));
    h.write("greet.yaml", &workflow("greet"));
    let client = connect(h.port, "", None).await;
    h.wait_object("Workflow/default/greet", T, "Ready", |v| {
        v.and_then(|v| v["conditions"].as_array())
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
    .await;
    let listed = wait_tools(&client, "workflow_greet listed", |n| n.iter().any(|n| n == "workflow_greet")).await;
    let tool = listed.iter().find(|t| t.name == "workflow_greet").unwrap();
    assert_eq!(tool.description.as_deref(), Some("Echoes a greeting."));
    assert_eq!(tool.input_schema["required"], json!(["who"]), "{tool:?}");
    assert_eq!(tool.input_schema["properties"]["who"]["type"], "string");

    let mut call = CallToolRequestParams::new("workflow_greet");
    call.arguments = json!({"who": "agent"}).as_object().cloned();
    let token = rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("greet-1".into()));
    call.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(token));
    let answer = client.peer().call_tool(call).await.expect("tools/call workflow_greet");
    // Progress streamed while the run ran, under the client's token, and before the answer.
    // rmcp's client hands each notification to its own task, so the last one sent before the
    // answer may be recorded just after the answer is read: wait for the final step.
    let progress = common::eventually(
        T,
        "the final step's progress notification",
        async || client.service().progress.lock().unwrap().clone(),
        |p: &Vec<rmcp::model::ProgressNotificationParam>| p.iter().any(|p| p.progress == 1.0),
    )
    .await;
    assert!(!progress.is_empty(), "no progress notification for a workflow call");
    // (rmcp's client puts a token of its own on the wire; every notification carries that one.)
    assert!(progress.iter().all(|p| p.progress_token == progress[0].progress_token), "{progress:?}");
    assert!(progress.iter().all(|p| p.total == Some(1.0)), "one step in all: {progress:?}");
    assert!(progress.windows(2).all(|w| w[0].progress <= w[1].progress), "progress never goes back: {progress:?}");
    assert_eq!(progress.last().map(|p| p.progress), Some(1.0), "the final step is reported: {progress:?}");
    let named =
        answer.meta.as_ref().and_then(|m| m.0.get("steward.dev/run")).and_then(Value::as_str).unwrap_or_default();
    assert!(named.starts_with("WorkflowRun/default/mcp-"), "the answer names its run: {answer:?}");
    assert!(progress.iter().all(|p| p.message.as_deref().is_some_and(|m| m.starts_with(named))), "{progress:?}");
    let text = serde_json::to_string(&answer.content).unwrap();
    assert_ne!(answer.is_error, Some(true), "{answer:?}");
    assert!(text.contains("hello agent"), "{answer:?}");
    // The run is an object like any other, created by the host.
    let runs = h.api().get("/api/v1/resources?kind=WorkflowRun").await.unwrap();
    let run = &runs.as_array().unwrap()[0];
    assert!(run["name"].as_str().unwrap().starts_with("mcp-"), "{run:#}");
    assert_eq!(run["status"]["phase"], "Succeeded", "{run:#}");
    let _ = client.cancel().await;
}

/// A client speaking streamable HTTP to a host's `/mcp` by hand, to see each answer as sent.
struct RawClient {
    http: reqwest::Client,
    url: String,
}

impl RawClient {
    fn new(port: u16) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self { http: reqwest::Client::new(), url: format!("http://127.0.0.1:{port}/mcp") }
    }

    async fn post(&self, session: Option<&str>, message: Value) -> reqwest::Response {
        let mut r = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&message);
        if let Some(id) = session {
            r = r.header("mcp-session-id", id);
        }
        r.send().await.unwrap()
    }

    /// `initialize` and `notifications/initialized`: the new session's id.
    async fn open(&self) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        let r = self.post(None, init).await;
        assert_eq!(r.status(), 200);
        let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        assert!(r.text().await.unwrap().contains("\"serverInfo\""));
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(self.post(Some(&id), done).await.status(), 202);
        id
    }

    /// `tools/list` in `session`: the status and the body.
    async fn list(&self, session: &str) -> (u16, String) {
        let r = self.post(Some(session), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

/// The value of the sample `name` (without labels) in the host's `/metrics`.
async fn sample(h: &Host, name: &str) -> f64 {
    let text = h.wait_get_text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_the_one_idle_the_longest_makes_room_for_a_new_one() {
    let mut h = Host::new("api: { listen: 127.0.0.1:{port}, mcp_max_sessions: 3, mcp: { tools: direct } }\n");
    h.start().await;
    let c = RawClient::new(h.port);
    let mut opened = Vec::new();
    for n in 1..=6 {
        opened.push(c.open().await);
        assert_eq!(sample(&h, "steward_mcp_sessions").await, f64::from(n.min(3)), "after {n} sessions");
    }
    // Each new session past the third closed the one idle the longest: the first three, in turn.
    for id in &opened[..3] {
        assert_eq!(c.list(id).await, (404, "Not Found: Session not found".to_string()));
    }
    for id in &opened[3..] {
        let (status, body) = c.list(id).await;
        assert!(status == 200 && body.contains("core_mcpserver_list"), "{status} {body}");
    }
    assert_eq!(sample(&h, "steward_mcp_sessions_evicted_total").await, 3.0);
    assert_eq!(sample(&h, "steward_mcp_sessions").await, 3.0);
}
