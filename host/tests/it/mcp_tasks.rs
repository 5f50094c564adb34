//! MCP tasks (protocol 2025-11-25) through `/mcp`, by raw JSON-RPC over HTTP (the official Python client has no tasks): the reference `everything` server's task-required tool, its `execution` listed, and `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` routed to it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::common::host::{Host, HttpReply};

const T: Duration = Duration::from_secs(90);

const RESEARCH: &str = "x_ev_simulate-research-query";

/// A host running everything (see `mcp_passthru`), tools called by their names.
async fn host() -> Host {
    host_with("api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n").await
}

/// A host with `config` running everything.
async fn host_with(config: &str) -> Host {
    let mut h = Host::new(config);
    h.write("ev.yaml", &super::mcp_passthru::everything());
    h.start().await;
    h.wait_object("MCPServer/default/ev", T, "Running and Healthy", |v| {
        v.is_some_and(|v| v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy")
    })
    .await;
    h
}

/// One client session of `/mcp`, spoken to in raw JSON-RPC.
struct Client<'a> {
    h: &'a Host,
    session: String,
    next: u64,
}

/// The JSON-RPC message answering request `id` in `reply` (a JSON body, or an event stream).
fn answer_of(reply: &HttpReply, id: u64) -> Value {
    let whole = reply.json();
    if whole["id"] == id {
        return whole;
    }
    reply
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to request {id}: {reply:?}"))
}

impl<'a> Client<'a> {
    /// Opens a session at protocol 2025-11-25; returns it with the `initialize` result.
    fn open(h: &'a Host) -> (Self, Value) {
        Self::open_with(h, json!({}))
    }

    /// [`Client::open`], declaring `capabilities`.
    fn open_with(h: &'a Host, capabilities: Value) -> (Self, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}});
        let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
        let reply = h.http("POST", "/mcp", &headers, body.to_string().as_bytes());
        assert_eq!(reply.status, 200, "{reply:?}");
        let session = reply
            .headers
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id")))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| panic!("no session id: {reply:?}"));
        let init = answer_of(&reply, 0);
        let c = Self { h, session, next: 1 };
        c.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (c, init["result"].clone())
    }

    fn post(&self, body: &Value) -> HttpReply {
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", self.session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        self.h.http("POST", "/mcp", &headers, body.to_string().as_bytes())
    }

    /// Sends `method` with `params`; returns the whole answer (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let reply = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        answer_of(&reply, id)
    }

    /// Makes a task of the research tool; returns the `CreateTaskResult`.
    fn research(&mut self, topic: &str) -> Value {
        self.research_with(RESEARCH, topic)
    }

    /// Makes a task of the research tool `tool`; returns the `CreateTaskResult`.
    fn research_with(&mut self, tool: &str, topic: &str) -> Value {
        let created =
            self.request("tools/call", json!({"name": tool, "arguments": {"topic": topic}, "task": {"ttl": 60000}}));
        assert!(created["result"]["task"]["taskId"].is_string(), "{created:#}");
        created["result"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_required_tool_runs_as_a_task_through_the_endpoint() {
    let h = host().await;
    let (mut c, init) = Client::open(&h);
    assert!(init["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(), "{init:#}");
    assert!(init["capabilities"]["tasks"]["cancel"].is_object() && init["capabilities"]["tasks"]["list"].is_object());

    // The tool's `execution` is listed as the server gave it.
    let listed = c.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap_or_else(|| panic!("{listed:#}"));
    let research = tools.iter().find(|t| t["name"] == RESEARCH).unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(research["execution"], json!({"taskSupport": "required"}), "{research:#}");
    assert_eq!(research["title"], "Simulate Research Query");

    // A task is created, polled to its end, and its result fetched.
    let created = c.research("tides");
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    assert!(id.starts_with("steward-"), "the host's id: {created:#}");
    assert_eq!(created["task"]["status"], "working", "{created:#}");
    let done = crate::common::eventually(
        T,
        "the task completes",
        async || c.request("tasks/get", json!({"taskId": id})),
        |got| got["result"]["status"] == "completed" || got.get("error").is_some(),
    )
    .await;
    assert_eq!(done["result"]["taskId"], id.as_str(), "{done:#}");
    assert_eq!(done["result"]["status"], "completed", "{done:#}");
    let result = c.request("tasks/result", json!({"taskId": id}));
    let text = result["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Research Report: tides"), "{result:#}");
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str(), "{result:#}");

    // tasks/list shows the session's task.
    let list = c.request("tasks/list", json!({}));
    let ids: Vec<&str> =
        list["result"]["tasks"].as_array().into_iter().flatten().filter_map(|t| t["taskId"].as_str()).collect();
    assert_eq!(ids, [id.as_str()], "{list:#}");

    // Another session cannot reach it.
    let (mut other, _) = Client::open(&h);
    let foreign = other.request("tasks/get", json!({"taskId": id}));
    assert_eq!(foreign["error"]["code"], -32602, "{foreign:#}");
    let none = other.request("tasks/list", json!({}));
    assert_eq!(none["result"]["tasks"], json!([]), "{none:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_cancelled_at_its_server() {
    let h = host().await;
    let (mut c, _) = Client::open(&h);
    let created = c.research("cancel me");
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    // The research takes four stages of a second: it is running now.
    let cancelled = c.request("tasks/cancel", json!({"taskId": id}));
    assert_eq!(cancelled["result"]["taskId"], id.as_str(), "{cancelled:#}");
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled:#}");
    let got = c.request("tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "cancelled", "{got:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tasks_and_tools_without_task_support_answer_the_specs_errors() {
    let h = host().await;
    let (mut c, _) = Client::open(&h);
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let got = c.request(method, json!({"taskId": "steward-nope"}));
        assert_eq!(got["error"]["code"], -32602, "{method}: {got:#}");
    }
    // A tool whose server lists no taskSupport for it (the default is forbidden).
    let echo = c.request("tools/call", json!({"name": "x_ev_echo", "arguments": {"message": "hi"}, "task": {}}));
    assert_eq!(echo["error"]["code"], -32601, "{echo:#}");
    assert!(echo["error"]["message"].as_str().unwrap_or_default().contains("task"), "{echo:#}");
    // The same tool called plainly still works.
    let plain = c.request("tools/call", json!({"name": "x_ev_echo", "arguments": {"message": "hi"}}));
    assert!(plain["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("hi"), "{plain:#}");
}

/// The messages of the session's own event stream (`GET /mcp`), as they come.
async fn events(h: &Host, session: &str) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut answer = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/mcp", h.port))
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .expect("the event stream opens");
    assert_eq!(answer.status(), 200);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut text = String::new();
        while let Ok(Some(chunk)) = answer.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find('\n') {
                let line: String = text.drain(..=end).collect();
                if let Some(v) = line.strip_prefix("data:").and_then(|d| serde_json::from_str(d.trim()).ok())
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_task_status_notifications_reach_the_client_that_owns_the_task() {
    let h = host().await;
    let (mut c, _) = Client::open(&h);
    let mut seen = events(&h, &c.session).await;
    let created = c.research("statuses");
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let mut statuses = Vec::new();
    let ended = tokio::time::timeout(T, async {
        while let Some(m) = seen.recv().await {
            if m["method"] == "notifications/tasks/status" {
                statuses.push(m["params"].clone());
                if m["params"]["status"] == "completed" {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(ended, Ok(true), "the task's statuses up to completed: {statuses:#?}");
    assert!(statuses.iter().all(|s| s["taskId"] == id.as_str()), "under the host's id: {statuses:#?}");
    assert!(
        statuses.iter().any(|s| s["statusMessage"].as_str().is_some_and(|m| m.contains("Gathering sources"))),
        "each stage: {statuses:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_servers_task_runs_through_the_endpoint() {
    let _heavy = common::heavy().await;
    let (_server, h) = common::servers::host_with_remote_everything().await;
    h.wait_object("MCPServer/default/rv", T, "Connected and Healthy", |v| {
        v.is_some_and(|v| v["status"]["state"] == "Connected" && v["status"]["health"] == "Healthy")
    })
    .await;
    let tool = "x_remote_simulate-research-query";
    let (mut c, _) = Client::open(&h);
    let listed = c.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap_or_else(|| panic!("{listed:#}"));
    let research = tools.iter().find(|t| t["name"] == tool).unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(research["execution"], json!({"taskSupport": "required"}), "{research:#}");
    let created = c.research_with(tool, "remote");
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    // tasks/result waits for the task to end.
    let result = c.request("tasks/result", json!({"taskId": id}));
    let text = result["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Research Report: remote"), "{result:#}");
    let got = c.request("tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["status"], "completed", "{got:#}");
}

/// `POST /mcp` of `message` in `session`, by reqwest (its answer streamed).
async fn post_async(h: &Host, session: &str, message: &Value) -> reqwest::Response {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/mcp", h.port))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .body(message.to_string())
        .send()
        .await
        .expect("the POST is answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_elicitation_reaches_the_client_waiting_for_its_result() {
    let h = host().await;
    let (mut c, _) = Client::open_with(&h, json!({"elicitation": {}}));
    let created = c.request(
        "tools/call",
        json!({"name": RESEARCH, "arguments": {"topic": "python", "ambiguous": true}, "task": {"ttl": 60000}}),
    );
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{created:#}")).to_string();
    let ask = json!({"jsonrpc": "2.0", "id": 4242, "method": "tasks/result", "params": {"taskId": id}});
    let mut answer = post_async(&h, &c.session, &ask).await;
    let (mut text, mut asked, mut result) = (String::new(), Vec::new(), Value::Null);
    let read = tokio::time::timeout(T, async {
        while let Ok(Some(chunk)) = answer.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find('\n') {
                let line: String = text.drain(..=end).collect();
                let Some(m) = line.strip_prefix("data:").and_then(|d| serde_json::from_str::<Value>(d.trim()).ok())
                else {
                    continue;
                };
                if m["method"] == "elicitation/create" {
                    asked.push(m.clone());
                    let reply = json!({"jsonrpc": "2.0", "id": m["id"], "result": {"action": "accept", "content": {"interpretation": "snake"}}});
                    let sent = post_async(&h, &c.session, &reply).await;
                    assert!(sent.status().is_success(), "the answer is taken: {}", sent.status());
                } else if m["id"] == 4242 {
                    result = m;
                    return;
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the result comes in time; asked {asked:#?}");
    assert_eq!(asked.len(), 1, "one elicitation: {asked:#?} {result:#}");
    let report = result["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(report.contains("Research Report: python (snake)"), "the client's answer was used: {result:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_tool_shows_a_tools_execution_in_meta_mode() {
    let h = host_with("api: { listen: 127.0.0.1:{port} }\n").await;
    let (mut c, _) = Client::open(&h);
    let got = c.request("tools/call", json!({"name": "describe_tool", "arguments": {"name": RESEARCH}}));
    let text = got["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{got:#}"));
    let described: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(described["name"], RESEARCH, "{described:#}");
    assert_eq!(described["execution"], json!({"taskSupport": "required"}), "{described:#}");
}
