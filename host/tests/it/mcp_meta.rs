//! muster's meta-tools at `/mcp` and the destructive-tool guard, end to end: a host running the reference `everything` and `memory` servers and a Workflow, seen by the official Python MCP client, the MCP Inspector CLI and rmcp's client.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use crate::common;
use crate::common::host::Host;

const T: Duration = Duration::from_secs(90);

/// The meta-tools of this endpoint's tool group, in muster's order.
const META: [&str; 5] = ["list_tools", "describe_tool", "list_core_tools", "filter_tools", "call_tool"];

fn package(name: &str) -> PathBuf {
    common::mcp_servers_dir().join("node/node_modules/@modelcontextprotocol").join(name).join("dist/index.js")
}

/// The reference `everything` server over stdio, as MCPServer `everything`.
fn everything() -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: everything\nspec:\n  type: stdio\n  command: node\n  args: [\"{}\", \"stdio\"]\n  autoStart: true\n",
        package("server-everything").display()
    )
}

/// The reference `memory` server over stdio, as MCPServer `memory`: its `delete_entities` is
/// annotated `destructiveHint: true` (no tool of `everything` is).
fn memory(file: &Path) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: memory\nspec:\n  type: stdio\n  command: node\n  args: [\"{}\"]\n  env:\n    MEMORY_FILE_PATH: \"{}\"\n  autoStart: true\n",
        package("server-memory").display(),
        file.display()
    )
}

const GREET: &str = "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: greet\n  labels:\n    team: docs\nspec:\n  description: Greets someone through the everything server.\n  args:\n    who:\n      type: string\n      required: true\n  steps:\n    - id: greet\n      tool: x_everything_echo\n      args:\n        message: \"hello {{ .input.who }}\"\n      output: true\n";

/// Waits until MCPServer `name` runs, is healthy and lists `tool`.
async fn wait_server(h: &Host, name: &str, tool: &str) {
    h.wait_object(&format!("MCPServer/default/{name}"), T, &format!("{name} running with {tool}"), |v| {
        v.is_some_and(|v| {
            v["status"]["state"] == "Running"
                && v["status"]["health"] == "Healthy"
                && v["status"]["tools"].as_array().is_some_and(|t| t.iter().any(|t| t == tool))
        })
    })
    .await;
}

/// Runs the official Python client (`testing/mcp-clients/py-client.py`) against the host's
/// `/mcp` with `steps`; one result per step.
async fn python(port: u16, steps: Value) -> Vec<Value> {
    let py = common::mcp_servers_dir().join("py/bin/python3");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-clients/py-client.py");
    let run = tokio::process::Command::new(py)
        .arg(script)
        .arg(format!("http://127.0.0.1:{port}/mcp"))
        .arg(steps.to_string())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(T, run).await.expect("the Python client hung").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the Python client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Runs the MCP Inspector's CLI against the host's `/mcp` with `args`; its JSON answer.
async fn inspector(port: u16, args: &[&str]) -> Value {
    let bin = common::mcp_servers_dir().join("node/node_modules/.bin/mcp-inspector");
    let run = tokio::process::Command::new(bin)
        .arg("--cli")
        .arg(format!("http://127.0.0.1:{port}/mcp"))
        .args(args)
        .env("MCP_CATALOG_PATH", std::env::temp_dir().join(format!("steward-inspector-{port}.json")))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(T, run).await.expect("the Inspector hung").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the Inspector failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn listed(result: &Value) -> Vec<&str> {
    result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// The JSON a meta-tool answered in its one text block.
fn answer(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result:#}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_finds_describes_and_calls_a_tool_through_the_meta_tools() {
    let mut h = Host::new("  workflowrun: { capabilities: [tools], tools: { allow: [\"x_*\"] } }\n");
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.write("everything.yaml", &everything());
    h.write("greet.yaml", GREET);
    h.start().await;
    wait_server(&h, "everything", "x_everything_get-sum").await;
    h.wait_object("Workflow/default/greet", T, "Ready", |v| {
        v.and_then(|v| v["conditions"].as_array())
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
    .await;

    let got = python(
        h.port,
        json!([
            ["list"],
            ["call", "filter_tools", {"query": "numbers"}],
            ["call", "describe_tool", {"name": "x_everything_get-sum"}],
            ["call", "call_tool", {"name": "x_everything_get-sum", "arguments": {"a": 2, "b": 3}}],
            ["call", "call_tool", {"name": "x_everything_get-structured-content", "arguments": {"location": "Chicago"}}],
            ["call", "filter_tools", {"labels": {"team": "docs"}}],
            ["call", "list_tools", {}],
            ["call", "list_core_tools", {"include_schema": false}],
            ["call", "x_everything_get-sum", {"a": 2, "b": 3}],
            ["call", "call_tool", {"name": "x_everything_nothing"}],
            ["call", "list_prompts", {}],
            ["call", "get_prompt", {"name": "x_everything_args-prompt", "arguments": {"city": "Oslo"}}],
            ["call", "get_resource", {"uri": "demo://resource/static/document/architecture.md"}],
            ["call", "describe_prompt", {"name": "x_everything_nope"}],
        ]),
    )
    .await;

    // tools/list: the meta-tools only, none of the tools behind them.
    let names = listed(&got[0]);
    assert!(META.iter().all(|m| names.contains(m)), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("x_") || n.starts_with("core_") || n.starts_with("workflow_")),
        "{names:?}"
    );

    // filter_tools: a word of get-sum's description ("Returns the sum of two numbers") ranks it first.
    let found = answer(&got[1]);
    assert_eq!(found["tools"][0]["name"], "x_everything_get-sum", "{found:#}");
    assert_eq!(found["tools"][0]["summary"], "Returns the sum of two numbers");
    assert!(found["tools"][0]["score"].as_f64().unwrap() > 0.0, "{found:#}");
    assert_eq!(found["filters"]["query"], "numbers");
    assert!(found["total_tools"].as_u64().unwrap() > 10, "{found:#}");

    // describe_tool: its schema, as the server gave it.
    let described = answer(&got[2]);
    assert_eq!(described["name"], "x_everything_get-sum");
    assert_eq!(described["inputSchema"]["properties"]["a"]["type"], "number", "{described:#}");
    assert!(described["inputSchema"]["required"].as_array().unwrap().contains(&json!("b")), "{described:#}");

    // call_tool: the tool's whole result, wrapped as muster wraps it.
    assert_ne!(got[3]["isError"], true, "{:#}", got[3]);
    let sum = answer(&got[3]);
    assert_eq!(sum["isError"], false);
    assert!(sum["content"][0]["text"].as_str().unwrap().contains('5'), "{sum:#}");
    let weather = answer(&got[4]);
    assert_eq!(weather["structuredContent"]["conditions"].as_str().map(str::is_empty), Some(false), "{weather:#}");
    assert_eq!(
        got[4]["structuredContent"], weather["structuredContent"],
        "the tool's structuredContent, on the result too"
    );

    // Labels: a Workflow's labels find its tool.
    let labelled = answer(&got[5]);
    assert_eq!(listed(&labelled), ["workflow_greet"], "{labelled:#}");
    assert_eq!(labelled["tools"][0]["labels"], json!({"team": "docs"}));

    // list_tools and list_core_tools: every tool, and the core ones.
    let all = answer(&got[6]);
    let all = listed(&all);
    assert!(all.contains(&"x_everything_echo") && all.contains(&"workflow_greet") && all.contains(&"core_plugin_list"));
    assert!(!all.contains(&"call_tool"), "{all:?}");
    let core = answer(&got[7]);
    assert!(listed(&core).iter().all(|n| n.starts_with("core_")) && core["total"].as_u64() > Some(0), "{core:#}");
    assert!(core["tools"][0].get("inputSchema").is_none() && core["tools"][0]["description"].is_string());

    // A tool called by its own name: refused in meta mode, with the way to call it.
    let direct = got[8]["error"].as_str().unwrap_or_else(|| panic!("{:#}", got[8]));
    assert!(direct.contains("x_everything_get-sum") && direct.contains("call_tool"), "{direct}");
    // A tool nobody offers: the call_tool result says so.
    assert_eq!(got[9]["isError"], true, "{:#}", got[9]);
    assert!(got[9]["content"][0]["text"].as_str().unwrap().contains("x_everything_nothing"), "{:#}", got[9]);

    // The prompt and resource meta-tools: everything's prompts under muster's names, one got
    // with its argument, a resource read whole; an unknown prompt is the meta-tool's error.
    let prompts = answer(&got[10]);
    let prompt_names: Vec<&str> =
        prompts.as_array().unwrap_or_else(|| panic!("{prompts:#}")).iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(prompt_names.contains(&"x_everything_args-prompt"), "{prompt_names:?}");
    assert!(META.iter().all(|m| !prompt_names.contains(m)));
    let messages = answer(&got[11]);
    assert!(messages.to_string().contains("Oslo"), "the prompt's messages carry the argument: {messages:#}");
    let text = got[12]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{:#}", got[12]));
    assert_ne!(got[12]["isError"], true, "{:#}", got[12]);
    assert!(!text.is_empty() && !text.contains("Resource retrieval failed"), "{text}");
    assert_eq!(got[13]["isError"], true, "{:#}", got[13]);
    assert!(got[13]["content"][0]["text"].as_str().unwrap().contains("x_everything_nope"), "{:#}", got[13]);
    let names = listed(&got[0]);
    assert!(["list_prompts", "get_prompt", "get_resource"].iter().all(|m| names.contains(m)), "{names:?}");
}

/// An rmcp client that keeps every progress notification.
#[derive(Clone, Default)]
struct Agent {
    progress: Arc<std::sync::Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("mcp-meta-test", "0"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
    }
}

async fn connect(port: u16) -> RunningService<RoleClient, Agent> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://127.0.0.1:{port}/mcp"));
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    Agent::default().serve(transport).await.expect("the MCP handshake with /mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_tool_runs_a_workflow_with_its_progress_and_the_inspector_cli_sees_the_meta_tools() {
    let mut h = Host::new("  workflowrun: { capabilities: [tools], tools: { allow: [\"x_*\"] } }\n");
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.write("everything.yaml", &everything());
    h.write("greet.yaml", GREET);
    h.start().await;
    wait_server(&h, "everything", "x_everything_echo").await;
    h.wait_object("Workflow/default/greet", T, "Ready", |v| {
        v.and_then(|v| v["conditions"].as_array())
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
    .await;

    // The Inspector CLI: tools/list is the meta-tools; call_tool reaches the server's echo.
    let list = inspector(h.port, &["--method", "tools/list"]).await;
    let names = listed(&list);
    assert!(META.iter().all(|m| names.contains(m)) && !names.contains(&"x_everything_echo"), "{names:?}");
    let called = inspector(
        h.port,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "call_tool",
            "--tool-arg",
            "name=x_everything_echo",
            "arguments={\"message\":\"hi there\"}",
        ],
    )
    .await;
    assert_ne!(called["isError"], true, "{called:#}");
    let echoed = answer(&called);
    assert!(echoed["content"][0]["text"].as_str().unwrap().contains("hi there"), "{echoed:#}");

    // call_tool of a Workflow: the run's progress reaches the client under its token, as a
    // direct call's does, and the answer names the run.
    let client = connect(h.port).await;
    let mut call = CallToolRequestParams::new("call_tool");
    call.arguments = json!({"name": "workflow_greet", "arguments": {"who": "agent"}}).as_object().cloned();
    let token = rmcp::model::ProgressToken(rmcp::model::NumberOrString::String("greet-meta".into()));
    call.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(token));
    let result = client.peer().call_tool(call).await.expect("call_tool workflow_greet");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let result = serde_json::to_value(&result).unwrap();
    let run = answer(&result);
    assert!(run["content"][0]["text"].as_str().unwrap().contains("hello agent"), "{run:#}");
    let named = result["_meta"]["steward.dev/run"].as_str().unwrap_or_default();
    assert!(named.starts_with("WorkflowRun/default/mcp-"), "{result:#}");
    let progress = client.service().progress.lock().unwrap().clone();
    assert!(!progress.is_empty(), "no progress notification for call_tool of a workflow");
    assert!(progress.iter().all(|p| p.message.as_deref().is_some_and(|m| m.starts_with(named))), "{progress:?}");
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_tool_is_refused_with_the_config_that_allows_it_until_that_config_is_written() {
    let mut h = Host::new("api: { listen: 127.0.0.1:{port}, mcp: { tools: both } }\n");
    h.write("memory.yaml", &memory(&h.dir.path().join("memory.json")));
    h.start().await;
    wait_server(&h, "memory", "x_memory_delete_entities").await;
    let steps = json!([
        ["call", "describe_tool", {"name": "x_memory_delete_entities"}],
        ["call", "call_tool", {"name": "x_memory_delete_entities", "arguments": {"entityNames": ["a"]}}],
        ["call", "x_memory_delete_entities", {"entityNames": ["a"]}],
        ["call", "call_tool", {"name": "x_memory_read_graph", "arguments": {}}],
    ]);
    let got = python(h.port, steps.clone()).await;
    assert_eq!(answer(&got[0])["annotations"]["destructiveHint"], true, "{:#}", got[0]);
    // Through call_tool and directly: a tool error that names the tool, why, and the config.
    for refused in [&got[1], &got[2]] {
        assert_eq!(refused["isError"], true, "{refused:#}");
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("x_memory_delete_entities is refused"), "{text}");
        assert!(text.contains("destructiveHint: true"), "{text}");
        assert!(text.contains("`api: { mcp: { allow_destructive: [default/memory] } }`"), "{text}");
    }
    // A tool not annotated destructive is not refused.
    assert_ne!(got[3]["isError"], true, "{:#}", got[3]);

    // The config the refusal gave, and a restart: allowed, both ways.
    h.terminate();
    let config = std::fs::read_to_string(h.config_path()).unwrap();
    let allowed = config.replace("mcp: { tools: both }", "mcp: { tools: both, allow_destructive: [default/memory] }");
    assert_ne!(config, allowed);
    std::fs::write(h.config_path(), allowed).unwrap();
    h.start().await;
    wait_server(&h, "memory", "x_memory_delete_entities").await;
    let got = python(h.port, steps).await;
    for allowed in [&got[1], &got[2]] {
        assert_ne!(allowed["isError"], true, "{allowed:#}");
        assert!(!serde_json::to_string(allowed).unwrap().contains("refused"), "{allowed:#}");
    }
    assert_eq!(answer(&got[1])["isError"], false, "{:#}", got[1]);
}
