//! MCP tasks (protocol 2025-11-25) passed through the endpoint: a task-augmented `tools/call` made at the tool's server, and `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` and `notifications/tasks/status` between the client and the server that owns the task.
//!
//! rmcp 3.9 knows only the later tasks extension, so the requests reach the endpoint renamed
//! ([`wire`]) and go to the server as custom requests; what the server answers is read from the
//! session's raw view ([`crate::services::Raw`]). Each task gets an id of the host's
//! ([`table`]): ids of two servers cannot meet, and a client reaches only its own session's.

pub mod table;
pub mod wire;

use std::time::Duration;

use rmcp::model::{ClientRequest, CustomNotification, CustomRequest, ErrorCode, ErrorData, ServerNotification};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext, RoleServer};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::catalog::{self, Target};
use crate::engine::Engine;
use crate::services::{LiveSession, RELATED_TASK};
pub use table::Tasks;

/// How long a server may take to create a task or answer `tasks/get`, `tasks/list` or `tasks/cancel`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a `tasks/result` may wait for the task to end.
pub const RESULT_TIMEOUT: Duration = super::server::CALL_TIMEOUT;

/// The statuses after which a task changes no more.
const TERMINAL: &[&str] = &["completed", "failed", "cancelled"];

/// How often a status relay checks whether its client or server session closed.
const RELAY_CHECK: Duration = Duration::from_secs(30);

/// One renamed request of a client (see [`wire`]): its method (without the prefix) and params.
pub struct Asked<'a> {
    /// The engine.
    pub engine: &'a Engine,
    /// The client's namespace.
    pub namespace: &'a str,
    /// The client's session (its `Mcp-Session-Id`).
    pub session: String,
    /// The request's context.
    pub context: &'a RequestContext<RoleServer>,
}

/// Answers the task request `method` (`tools/call` with a task, or `tasks/…`) with `params`.
pub async fn answer(
    tasks: &Tasks,
    asked: &Asked<'_>,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value, ErrorData> {
    match method {
        "tools/call" => call(tasks, asked, params).await,
        "tasks/get" | "tasks/result" | "tasks/cancel" => by_id(tasks, asked, method, params).await,
        "tasks/list" => list(tasks, asked).await,
        _ => Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, format!("no method {method}"), None)),
    }
}

/// A task-augmented `tools/call`: made at the tool's server when the tool and its server
/// support tasks; answered with the server's `CreateTaskResult` under the host's task id.
async fn call(tasks: &Tasks, asked: &Asked<'_>, mut params: Map<String, Value>) -> Result<Value, ErrorData> {
    let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_string) else {
        return Err(ErrorData::invalid_params("tools/call needs the `name` of a tool", None));
    };
    let offered = catalog::build(asked.engine, asked.namespace);
    let Some(entry) = offered.get(&name) else {
        let m = format!("no healthy MCPServer of namespace {} offers tool {name}", asked.namespace);
        return Err(ErrorData::invalid_params(m, None));
    };
    let refused = || {
        let m = format!("tool {name} does not support task-augmented calls (its server lists no taskSupport for it)");
        ErrorData::new(ErrorCode::METHOD_NOT_FOUND, m, None)
    };
    let Target::Server { owner, service, tool } = &entry.target else { return Err(refused()) };
    let services = asked.engine.units().services();
    let Some(live) = services.session(owner, service) else {
        let m = format!("no healthy MCPServer of namespace {} offers tool {name}", asked.namespace);
        return Err(ErrorData::invalid_params(m, None));
    };
    let support =
        live.tool_extras(tool).and_then(|e| e.get("execution")?.get("taskSupport")?.as_str().map(str::to_string));
    if !matches!(support.as_deref(), Some("optional" | "required")) || !live.raw.tasks_for_tool_calls() {
        return Err(refused());
    }
    params.insert("name".into(), Value::String(tool.clone()));
    params.remove("_meta");
    // Subscribed before the request goes: a status the server sends at once is not missed.
    let statuses = live.raw.statuses();
    let mut created = send(&live, "tools/call", params, &asked.context.ct, REQUEST_TIMEOUT).await?;
    let Some(server_id) = created.pointer("/task/taskId").and_then(Value::as_str).map(str::to_string) else {
        // The server ran the call without a task: its result is the client's.
        return Ok(created);
    };
    let id = tasks.insert(&asked.session, asked.context.peer.clone(), live.clone(), &server_id);
    rename_task(&mut created, &server_id, &id);
    tokio::spawn(relay_statuses(statuses, live, asked.context.peer.clone(), server_id, id));
    Ok(created)
}

/// `tasks/get`, `tasks/result` or `tasks/cancel` of one of the session's tasks, at its server.
async fn by_id(
    tasks: &Tasks,
    asked: &Asked<'_>,
    method: &str,
    mut params: Map<String, Value>,
) -> Result<Value, ErrorData> {
    let Some(id) = params.get("taskId").and_then(Value::as_str).map(str::to_string) else {
        return Err(ErrorData::invalid_params(format!("{method} needs a `taskId`"), None));
    };
    let Some(owned) = tasks.get(&id, &asked.session) else {
        return Err(ErrorData::invalid_params(format!("no task {id} in this session"), None));
    };
    if owned.live.peer.is_transport_closed() {
        tasks.remove(&id);
        let m = format!("task {id} is gone: the session with its server ended, and the server's tasks with it");
        return Err(ErrorData::invalid_params(m, None));
    }
    params.insert("taskId".into(), Value::String(owned.server_id.clone()));
    params.remove("_meta");
    let limit = if method == "tasks/result" { RESULT_TIMEOUT } else { REQUEST_TIMEOUT };
    // While a client waits for a task's result, the server's requests for the task (an
    // elicitation while it is `input_required`) are put to that client, on this request's stream.
    let asker = crate::services::Asker { peer: asked.context.peer.clone(), request: asked.context.id.clone() };
    let _held = (method == "tasks/result").then(|| owned.live.relay.reserve(Some(asker)));
    match send(&owned.live, method, params, &asked.context.ct, limit).await {
        Ok(mut answer) => {
            rename_task(&mut answer, &owned.server_id, &id);
            Ok(answer)
        }
        Err(e) => {
            if e.code == ErrorCode::INVALID_PARAMS && method != "tasks/cancel" {
                // The server no longer knows it (its time to live passed).
                tasks.remove(&id);
            }
            Err(e)
        }
    }
}

/// `tasks/list`: the session's tasks as their servers show them now (a task its server no
/// longer answers for is left out), oldest first, in one page.
async fn list(tasks: &Tasks, asked: &Asked<'_>) -> Result<Value, ErrorData> {
    let mine = tasks.of_session(&asked.session);
    let gets = mine.into_iter().map(|(id, owned)| async move {
        let mut params = Map::new();
        params.insert("taskId".into(), Value::String(owned.server_id.clone()));
        let limit = owned.live.check_after();
        let mut answer = send(&owned.live, "tasks/get", params, &asked.context.ct, limit).await.ok()?;
        rename_task(&mut answer, &owned.server_id, &id);
        answer.as_object_mut()?.remove("_meta");
        Some(answer)
    });
    let shown: Vec<Value> = futures_util::future::join_all(gets).await.into_iter().flatten().collect();
    Ok(json!({ "tasks": shown }))
}

/// Sends `method` with `params` to the server behind `live` and returns its result as the
/// server sent it; the server's error keeps its code, its words redacted. Cancelling (the
/// client cancelled its request) or passing `limit` tells the server.
async fn send(
    live: &LiveSession,
    method: &str,
    params: Map<String, Value>,
    cancel: &CancellationToken,
    limit: Duration,
) -> Result<Value, ErrorData> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(Value::Object(params))));
    let failed = |words: String| {
        ErrorData::internal_error(format!("{method} failed at the server: {}", live.redact(&words)), None)
    };
    let mut handle = live
        .peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| failed(crate::services::error_text(&e)))?;
    let id = handle.id.clone();
    let answer = tokio::select! {
        r = &mut handle.rx => r,
        () = cancel.cancelled() => {
            let _ = tokio::time::timeout(live.check_after(), handle.cancel(Some("cancelled by the caller".into()))).await;
            return Err(ErrorData::internal_error(format!("{method} cancelled"), None));
        }
        () = tokio::time::sleep(limit) => {
            let _ = tokio::time::timeout(live.check_after(), handle.cancel(Some("no answer in time".into()))).await;
            return Err(failed(format!("no answer within {}", crate::services::human(limit))));
        }
    };
    match answer {
        Ok(Ok(typed)) => Ok(match live.raw.take(&id) {
            Some(whole) => whole,
            None => serde_json::to_value(&typed).unwrap_or_default(),
        }),
        Ok(Err(rmcp::ServiceError::McpError(e))) => Err(ErrorData::new(e.code, live.redact(&e.message), None)),
        Ok(Err(e)) => Err(failed(crate::services::error_text(&e))),
        Err(_) => Err(failed("the MCP session closed before the answer".into())),
    }
}

/// Puts the host's id `id` for the server's `server_id` where a task answer names its task:
/// `taskId`, `task.taskId` and `_meta["io.modelcontextprotocol/related-task"].taskId`.
pub fn rename_task(answer: &mut Value, server_id: &str, id: &str) {
    for at in ["/taskId", "/task/taskId"] {
        if let Some(v) = answer.pointer_mut(at).filter(|v| v.as_str() == Some(server_id)) {
            *v = Value::String(id.to_string());
        }
    }
    if let Some(v) = answer
        .get_mut("_meta")
        .and_then(|m| m.get_mut(RELATED_TASK))
        .and_then(|r| r.get_mut("taskId"))
        .filter(|v| v.as_str() == Some(server_id))
    {
        *v = Value::String(id.to_string());
    }
}

/// Hands each `notifications/tasks/status` of the server's task `server_id` to `client`
/// under the host's id `id`, until the task ended or either session closed.
async fn relay_statuses(
    mut statuses: broadcast::Receiver<Value>,
    live: LiveSession,
    client: Peer<RoleServer>,
    server_id: String,
    id: String,
) {
    loop {
        let next = tokio::select! {
            r = statuses.recv() => r,
            () = tokio::time::sleep(RELAY_CHECK) => {
                if client.is_transport_closed() || live.peer.is_transport_closed() {
                    return;
                }
                continue;
            }
        };
        let mut status = match next {
            Ok(s) => s,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if status.get("taskId").and_then(Value::as_str) != Some(server_id.as_str()) {
            continue;
        }
        rename_task(&mut status, &server_id, &id);
        if let Some(m) = status.get_mut("statusMessage").and_then(|m| m.as_str().map(|s| live.redact(s))) {
            status["statusMessage"] = Value::String(m);
        }
        let ended = status.get("status").and_then(Value::as_str).is_some_and(|s| TERMINAL.contains(&s));
        let note = CustomNotification::new("notifications/tasks/status", Some(status));
        if client.send_notification(ServerNotification::CustomNotification(note)).await.is_err() || ended {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_answer_names_the_hosts_id() {
        let mut created = json!({"task": {"taskId": "s1", "status": "working"}});
        rename_task(&mut created, "s1", "h1");
        assert_eq!(created["task"]["taskId"], "h1");
        let mut got = json!({"taskId": "s1", "status": "completed"});
        rename_task(&mut got, "s1", "h1");
        assert_eq!(got["taskId"], "h1");
        let mut result = json!({"content": [], "_meta": {RELATED_TASK: {"taskId": "s1"}}});
        rename_task(&mut result, "s1", "h1");
        assert_eq!(result["_meta"][RELATED_TASK]["taskId"], "h1");
        let mut other = json!({"taskId": "s2"});
        rename_task(&mut other, "s1", "h1");
        assert_eq!(other["taskId"], "s2", "another task's id is left alone");
    }
}
