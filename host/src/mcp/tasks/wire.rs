//! Where the endpoint's HTTP layer meets rmcp for what rmcp does not model: requests renamed so that they reach the endpoint whole, and the `tasks` capability in the `initialize` answer.
//!
//! rmcp 3.9 parses a client's `tools/call` without its `task`, and `tasks/get` and
//! `tasks/cancel` as the later tasks extension's; its `ServerCapabilities` has no `tasks`. So
//! [`rename`] gives the requests the endpoint answers itself ([`RENAMED`]) a method of the
//! host's ([`PREFIX`]`…`), which rmcp hands to the endpoint whole as a custom request, and
//! [`declare`] adds `capabilities.tasks` to the `initialize` answer.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{CustomResult, JsonRpcMessage, ServerJsonRpcMessage, ServerResult};
use serde_json::{Value, json};

/// The prefix of the method a renamed request arrives with.
pub const PREFIX: &str = "steward/raw/";

/// The methods renamed always; a `tools/call` is renamed when it carries `params.task`.
pub const RENAMED: &[&str] = &["tools/list", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel"];

/// The largest request body read (rmcp's own limit).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// The first protocol version with tasks.
const TASKS_SINCE: &str = "2025-11-25";

/// Renames the request of a `POST /mcp` whose method is one of [`RENAMED`] (or a
/// task-augmented `tools/call`) to [`PREFIX`]`<method>`; anything else passes unchanged.
pub async fn rename(req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        let body = json!({"error": format!("the request body is over {MAX_BODY} bytes, or could not be read")});
        return (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response();
    };
    let bytes = match renamed(&bytes) {
        Some(b) => {
            parts.headers.insert(header::CONTENT_LENGTH, b.len().into());
            b
        }
        None => bytes,
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// `body` with its method renamed, when it is a request to rename.
pub fn renamed(body: &[u8]) -> Option<Bytes> {
    const MARKS: &[&[u8]] = &[b"tools/list", b"tasks/", b"\"task\""];
    if !MARKS.iter().any(|m| memchr::memmem::find(body, m).is_some()) {
        return None;
    }
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let message = v.as_object_mut()?;
    let method = message.get("method")?.as_str()?;
    let task = message.get("params").and_then(|p| p.get("task")).is_some_and(|t| !t.is_null());
    if !(RENAMED.contains(&method) || (method == "tools/call" && task)) {
        return None;
    }
    let method = format!("{PREFIX}{method}");
    message.insert("method".into(), Value::String(method));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

/// `answer` to an `initialize`, declaring the `tasks` capability (task-augmented `tools/call`,
/// `tasks/list`, `tasks/cancel`) when the protocol agreed has tasks. Anything else is returned
/// as it is.
pub fn declare(answer: ServerJsonRpcMessage) -> ServerJsonRpcMessage {
    let JsonRpcMessage::Response(mut response) = answer else { return answer };
    let ServerResult::InitializeResult(init) = &response.result else { return JsonRpcMessage::Response(response) };
    if init.protocol_version.as_str() < TASKS_SINCE {
        return JsonRpcMessage::Response(response);
    }
    let Ok(mut v) = serde_json::to_value(init) else { return JsonRpcMessage::Response(response) };
    let Some(capabilities) = v.get_mut("capabilities").and_then(Value::as_object_mut) else {
        return JsonRpcMessage::Response(response);
    };
    capabilities.insert("tasks".into(), json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}));
    response.result = ServerResult::CustomResult(CustomResult(v));
    JsonRpcMessage::Response(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_endpoint_answers_itself_is_renamed() {
        let table: &[(Value, Option<&str>)] = &[
            (json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), Some("steward/raw/tools/list")),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "t"}}),
                Some("steward/raw/tasks/get"),
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "task": {"ttl": 1000}}}),
                Some("steward/raw/tools/call"),
            ),
            (json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "tasks/get"}}), None),
            (json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "task": null}}), None),
            (json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}), None),
        ];
        for (body, want) in table {
            let got = renamed(body.to_string().as_bytes()).map(|b| serde_json::from_slice::<Value>(&b).unwrap());
            assert_eq!(got.as_ref().and_then(|v| v["method"].as_str()), *want, "{body}");
            if let Some(v) = got {
                assert_eq!(v["params"], body["params"], "the params pass whole");
            }
        }
        assert_eq!(renamed(b"not json tools/list"), None);
    }

    fn initialized(version: rmcp::model::ProtocolVersion) -> ServerJsonRpcMessage {
        let caps = rmcp::model::ServerCapabilities::builder().enable_tools().build();
        let init = rmcp::model::InitializeResult::new(caps).with_protocol_version(version);
        ServerJsonRpcMessage::response(ServerResult::InitializeResult(init), rmcp::model::NumberOrString::Number(0))
    }

    #[test]
    fn the_tasks_capability_is_declared_from_protocol_2025_11_25() {
        let answer = serde_json::to_value(declare(initialized(rmcp::model::ProtocolVersion::V_2025_11_25))).unwrap();
        let caps = &answer["result"]["capabilities"];
        assert_eq!(caps["tasks"], json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}), "{answer}");
        assert!(caps["tools"].is_object(), "the rest is kept: {answer}");
        let older = serde_json::to_value(declare(initialized(rmcp::model::ProtocolVersion::V_2025_06_18))).unwrap();
        assert!(older["result"]["capabilities"].get("tasks").is_none(), "{older}");
    }
}
