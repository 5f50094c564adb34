//! The management tools (`core_*`) through `/mcp`: an MCPServer (npm's `server-memory` over stdio) and a Workflow created, updated, validated and deleted as files and as custom resources (fake and real API server), runs listed as executions, and the read-only default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceExt, model::ClientConfig};
use serde_json::{Value, json};

use crate::common;
use crate::common::host::Host;
use crate::common::kube::kube_e2e;

const T: Duration = Duration::from_secs(90);

/// The host config that offers the write tools, every tool listed directly.
const READ_WRITE: &str = "  workflowrun: { capabilities: [tools], tools: { allow: [\"x_*\", \"workflow_*\"] } }\napi: { listen: 127.0.0.1:{port}, mcp: { tools: direct, management: read-write, allow_destructive: true } }\n";

type Client = RunningService<RoleClient, ClientConfig>;

async fn connect(port: u16) -> Client {
    connect_to(port, "").await
}

async fn connect_to(port: u16, query: &str) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://127.0.0.1:{port}/mcp{query}"));
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ClientConfig::default().serve(transport).await.expect("the MCP handshake with /mcp")
}

async fn names(client: &Client) -> Vec<String> {
    client.peer().list_all_tools().await.expect("tools/list").into_iter().map(|t| t.name.to_string()).collect()
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let mut call = CallToolRequestParams::new(tool.to_string());
    call.arguments = args.as_object().cloned();
    client.peer().call_tool(call).await.unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

fn text(r: &CallToolResult) -> String {
    serde_json::to_string(&r.content).unwrap()
}

/// Every file under `dir` (relative paths) whose text contains `needle`.
fn files_with(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read_to_string(&p).is_ok_and(|t| t.contains(needle)) {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

async fn wait_names(client: &Client, what: &str, f: impl Fn(&[String]) -> bool) -> Vec<String> {
    common::eventually(T, what.to_string(), async || names(client).await, |n| f(n)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_tools_round_trip_a_server_and_a_workflow_as_files() {
    let memory = common::mcp_servers_dir().join("node/node_modules/.bin/mcp-server-memory");
    let mut h = Host::new(READ_WRITE);
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.start().await;
    let client = connect(h.port).await;
    let listed = names(&client).await;
    for t in ["core_mcpserver_create", "core_workflow_delete", "core_workflow_execution_list", "core_events"] {
        assert!(listed.iter().any(|n| n == t), "{t} listed: {listed:?}");
    }

    // An invalid definition: each field error, and nothing written.
    let bad = call(&client, "core_mcpserver_validate", json!({"name": "bad", "type": "stdio"})).await;
    assert_eq!(bad.is_error, Some(true), "{bad:?}");
    let errors = &bad.structured_content.as_ref().unwrap()["errors"];
    assert!(errors.as_array().is_some_and(|e| !e.is_empty()), "{bad:?}");
    assert!(text(&bad).contains("Validation failed"), "{bad:?}");
    let refused = call(&client, "core_mcpserver_create", json!({"name": "bad", "type": "stdio"})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(files_with(&h.resources(), "name: bad").is_empty());

    // Create: a new file, and the server's tools once it runs.
    let memory_file = h.dir.path().join("memory.jsonl");
    let server = json!({
        "name": "memory", "type": "stdio", "command": memory.display().to_string(), "autoStart": true,
        "env": {"MEMORY_FILE_PATH": memory_file.display().to_string()},
    });
    let ok = call(&client, "core_mcpserver_validate", server.clone()).await;
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    let created = call(&client, "core_mcpserver_create", server.clone()).await;
    assert_ne!(created.is_error, Some(true), "{created:?}");
    assert!(text(&created).contains("created successfully"), "{created:?}");
    let files = files_with(&h.resources(), "name: memory");
    assert_eq!(files.len(), 1, "one new file: {files:?}");
    let again = call(&client, "core_mcpserver_create", server).await;
    assert!(again.is_error == Some(true) && text(&again).contains("already exists"), "{again:?}");
    wait_names(&client, "x_memory_read_graph listed", |n| n.iter().any(|n| n == "x_memory_read_graph")).await;

    // Update: the change is in the file and in what the host reads.
    let updated =
        call(&client, "core_mcpserver_update", json!({"name": "memory", "description": "a knowledge graph"})).await;
    assert_ne!(updated.is_error, Some(true), "{updated:?}");
    assert!(std::fs::read_to_string(h.resources().join(&files[0])).unwrap().contains("a knowledge graph"));
    common::eventually(
        T,
        "the updated spec read back".to_string(),
        async || call(&client, "core_mcpserver_get", json!({"name": "memory"})).await.structured_content,
        |v| {
            v.as_ref()
                .is_some_and(|v| v["spec"]["description"] == "a knowledge graph" && v["spec"]["command"].is_string())
        },
    )
    .await;

    // A Workflow: invalid, then created, run through /mcp, listed as an execution, updated.
    let bad_flow = call(&client, "core_workflow_validate", json!({"name": "broken", "steps": [{"id": "a"}]})).await;
    assert_eq!(bad_flow.is_error, Some(true), "{bad_flow:?}");
    assert!(bad_flow.structured_content.as_ref().unwrap()["errors"][0]["path"].as_str().is_some(), "{bad_flow:?}");
    let flow = json!({"name": "graph", "description": "Reads the graph.", "steps": [{"id": "read", "tool": "x_memory_read_graph"}]});
    let made = call(&client, "core_workflow_create", flow).await;
    assert_ne!(made.is_error, Some(true), "{made:?}");
    assert_eq!(files_with(&h.resources(), "name: graph").len(), 1);
    wait_names(&client, "workflow_graph listed", |n| n.iter().any(|n| n == "workflow_graph")).await;
    let available = call(&client, "core_workflow_available", json!({"name": "graph"})).await;
    assert_eq!(available.structured_content.unwrap()["available"], true);
    // Under read-write the write tools are offered, so a Workflow that calls one is not missing it.
    let writer =
        json!({"name": "tidy", "steps": [{"id": "drop", "tool": "core_workflow_delete", "args": {"name": "x"}}]});
    assert_ne!(call(&client, "core_workflow_create", writer).await.is_error, Some(true));
    common::eventually(
        T,
        "a Workflow calling core_workflow_delete available under read-write".to_string(),
        async || call(&client, "core_workflow_available", json!({"name": "tidy"})).await.structured_content,
        |v| v.as_ref().is_some_and(|v| v["available"] == true),
    )
    .await;
    let ran = call(&client, "workflow_graph", json!({})).await;
    assert_ne!(ran.is_error, Some(true), "{ran:?}");
    let history = common::eventually(
        T,
        "the run listed as a completed execution".to_string(),
        async || {
            call(&client, "core_workflow_execution_list", json!({"workflow_name": "graph"})).await.structured_content
        },
        |v| v.as_ref().is_some_and(|v| v["executions"][0]["status"] == "completed"),
    )
    .await
    .unwrap();
    assert_eq!(history["total"], 1, "{history:#}");
    let id = history["executions"][0]["execution_id"].as_str().unwrap().to_string();
    let one = call(&client, "core_workflow_execution_get", json!({"execution_id": id})).await;
    let one = one.structured_content.unwrap();
    assert_eq!(one["workflow_name"], "graph", "{one:#}");
    assert_eq!(one["steps"][0]["step_id"], "read", "{one:#}");
    assert_eq!(one["steps"][0]["tool"], "x_memory_read_graph", "{one:#}");
    let changed = call(
        &client,
        "core_workflow_update",
        json!({"name": "graph", "description": "Reads the whole graph.", "steps": [{"id": "read", "tool": "x_memory_read_graph"}]}),
    )
    .await;
    assert_ne!(changed.is_error, Some(true), "{changed:?}");
    common::eventually(
        T,
        "the workflow's new description".to_string(),
        async || call(&client, "core_workflow_get", json!({"name": "graph"})).await.structured_content,
        |v| v.as_ref().is_some_and(|v| v["spec"]["description"] == "Reads the whole graph."),
    )
    .await;

    // A file of two objects is neither rewritten nor deleted for one of them.
    let flow_doc = |n: &str| {
        format!(
            "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {n}\nspec:\n  steps:\n    - id: read\n      tool: x_memory_read_graph\n"
        )
    };
    let two = format!("{}---\n{}", flow_doc("one"), flow_doc("two"));
    h.write("two.yaml", &two);
    wait_names(&client, "workflow_one listed", |n| n.iter().any(|n| n == "workflow_one")).await;
    let steps = json!([{"id": "read", "tool": "x_memory_read_graph"}]);
    let refused =
        call(&client, "core_workflow_update", json!({"name": "one", "description": "x", "steps": steps})).await;
    assert!(refused.is_error == Some(true) && text(&refused).contains("two.yaml:1"), "{refused:?}");
    let refused = call(&client, "core_workflow_delete", json!({"name": "two"})).await;
    assert!(refused.is_error == Some(true) && text(&refused).contains("two.yaml"), "{refused:?}");
    assert_eq!(std::fs::read_to_string(h.resources().join("two.yaml")).unwrap(), two);

    // Events and config: this namespace's objects; no secret.
    let events = call(&client, "core_events", json!({"resourceType": "WorkflowRun"})).await;
    let events = events.structured_content.unwrap();
    assert!(events["events"].as_array().is_some_and(|e| e.iter().all(|e| e["namespace"] == "default")), "{events:#}");
    assert!(events["events"].as_array().is_some_and(|e| !e.is_empty()), "the run's events: {events:#}");
    let config = call(&client, "core_config_get", json!({})).await.structured_content.unwrap();
    assert_eq!(config["api"]["mcp"]["management"], "read-write", "{config:#}");

    // Delete: the files go, and so do the tools.
    for (tool, name) in [("core_workflow_delete", "graph"), ("core_mcpserver_delete", "memory")] {
        let gone = call(&client, tool, json!({"name": name})).await;
        assert_ne!(gone.is_error, Some(true), "{gone:?}");
        assert!(files_with(&h.resources(), &format!("name: {name}")).is_empty(), "{name}'s file deleted");
    }
    wait_names(&client, "the server's and workflow's tools gone", |n| {
        !n.iter().any(|n| n == "workflow_graph" || n.starts_with("x_memory_"))
    })
    .await;
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_write_tools_are_not_listed_and_a_call_names_the_setting() {
    let mut h = Host::new("api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n");
    h.start().await;
    let client = connect(h.port).await;
    let listed = names(&client).await;
    assert!(listed.iter().any(|n| n == "core_mcpserver_validate"), "{listed:?}");
    assert!(listed.iter().any(|n| n == "core_workflow_execution_list"), "{listed:?}");
    for t in ["core_mcpserver_create", "core_mcpserver_update", "core_mcpserver_delete", "core_workflow_create"] {
        assert!(!listed.iter().any(|n| n == t), "{t} not listed: {listed:?}");
    }
    let mut call = CallToolRequestParams::new("core_mcpserver_create");
    call.arguments = json!({"name": "x", "type": "stdio", "command": "true"}).as_object().cloned();
    let err = client.peer().call_tool(call).await.unwrap_err().to_string();
    assert!(err.contains("api.mcp.management: read-write"), "{err}");
    assert!(files_with(&h.resources(), "name: x").is_empty());
    let _ = client.cancel().await;
}

kube_e2e! {
    /// The host in-process against the API server, its API (and `/mcp`) served on a free port.
    async fn management_tools_round_trip_a_server_and_a_workflow_as_custom_resources(k: Kube) {
        let packages = ["mcpserver", "workflow", "workflowrun"];
        k.install_crds(&packages).await;
        let extra = format!(
            "{}api: {{ mcp: {{ tools: direct, management: read-write, allow_destructive: true }} }}\n",
            k.kubernetes_section("")
        );
        let (dir, cfg) = common::kube::host_dir(&packages, &extra);
        let engine = common::kube::start(&cfg, k.client.clone()).await;
        engine.units().tools().set_router(steward::mcp::Aggregator::with_engine(&engine));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = steward::api::router(engine.clone(), None);
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let client = connect_to(port, &format!("?namespace={}", k.ns)).await;
        let servers = k.api(&common::kube::mcp_ar());
        let flows = k.api(&kube::api::ApiResource {
            group: "steward.dev".into(),
            version: "v1alpha1".into(),
            api_version: "steward.dev/v1alpha1".into(),
            kind: "Workflow".into(),
            plural: "workflows".into(),
        });

        let bad = call(&client, "core_mcpserver_create", json!({"name": "bad", "type": "stdio"})).await;
        assert_eq!(bad.is_error, Some(true), "{bad:?}");
        assert!(bad.structured_content.as_ref().unwrap()["errors"].as_array().is_some_and(|e| !e.is_empty()));
        assert!(servers.get_opt("bad").await.unwrap().is_none());

        let memory = common::mcp_servers_dir().join("node/node_modules/.bin/mcp-server-memory");
        let memory_file = dir.path().join("memory.jsonl");
        let server_def = json!({
            "name": "memory", "type": "stdio", "command": memory.display().to_string(), "autoStart": true,
            "env": {"MEMORY_FILE_PATH": memory_file.display().to_string()},
        });
        let created = call(&client, "core_mcpserver_create", server_def).await;
        assert_ne!(created.is_error, Some(true), "{created:?}");
        assert!(servers.get_opt("memory").await.unwrap().is_some(), "the custom resource");
        wait_names(&client, "x_memory_read_graph listed", |n| n.iter().any(|n| n == "x_memory_read_graph")).await;
        let updated = call(&client, "core_mcpserver_update", json!({"name": "memory", "description": "graph"})).await;
        assert_ne!(updated.is_error, Some(true), "{updated:?}");
        let o = servers.get("memory").await.unwrap();
        assert_eq!(o.data["spec"]["description"], "graph");
        assert!(o.data["spec"]["command"].is_string(), "the rest of the spec stays: {:?}", o.data);

        let bad_flow = call(&client, "core_workflow_validate", json!({"name": "broken", "steps": [{"id": "a"}]})).await;
        assert_eq!(bad_flow.is_error, Some(true), "{bad_flow:?}");
        let flow = json!({"name": "graph", "description": "Reads.", "steps": [{"id": "read", "tool": "x_memory_read_graph"}]});
        let made = call(&client, "core_workflow_create", flow).await;
        assert_ne!(made.is_error, Some(true), "{made:?}");
        wait_names(&client, "workflow_graph listed", |n| n.iter().any(|n| n == "workflow_graph")).await;
        let changed = call(
            &client,
            "core_workflow_update",
            json!({"name": "graph", "description": "Reads all.", "steps": [{"id": "read", "tool": "x_memory_read_graph"}]}),
        )
        .await;
        assert_ne!(changed.is_error, Some(true), "{changed:?}");
        assert_eq!(flows.get("graph").await.unwrap().data["spec"]["description"], "Reads all.");

        for (tool, name) in [("core_workflow_delete", "graph"), ("core_mcpserver_delete", "memory")] {
            let gone = call(&client, tool, json!({"name": name})).await;
            assert_ne!(gone.is_error, Some(true), "{gone:?}");
        }
        let api = (flows.clone(), servers.clone());
        common::eventually(
            T,
            "both custom resources gone".to_string(),
            async || (api.0.get_opt("graph").await.unwrap().is_none(), api.1.get_opt("memory").await.unwrap().is_none()),
            |g| *g == (true, true),
        )
        .await;
        wait_names(&client, "the tools gone", |n| !n.iter().any(|n| n == "workflow_graph" || n.starts_with("x_memory_"))).await;
        let _ = client.cancel().await;
        server.abort();
        engine.shutdown(Duration::from_secs(5)).await;
    }
}
