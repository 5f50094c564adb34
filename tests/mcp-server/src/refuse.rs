//! `--fail-initialize`: a server that stays up but refuses the handshake.
//!
//! This is deliberately not rmcp: it is a few lines of JSON-RPC that answer
//! `initialize` (and every other request but `ping`) with an error, so that a
//! health probe fails the same way every time while the process keeps running.

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// JSON-RPC "internal error".
const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC "invalid request".
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "parse error".
const PARSE_ERROR: i64 = -32700;
/// Longest line read from stdin; longer ones are dropped.
const MAX_LINE: usize = 4 << 20;

pub const REFUSAL: &str = "initialize refused: steward-example-mcp was started with --fail-initialize";

/// The answer to one JSON-RPC message, if it needs one.
fn answer(message: &Value) -> Option<Value> {
    let object = message.as_object()?;
    let method = object.get("method")?.as_str()?;
    // Notifications (no id) get no answer.
    let id = object.get("id")?;
    Some(match method {
        "ping" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        "initialize" => error(id.clone(), INTERNAL_ERROR, REFUSAL),
        _ => error(id.clone(), INVALID_REQUEST, "server not initialized (it refuses initialize: --fail-initialize)"),
    })
}

/// The answer to a message or a batch of them.
fn answer_all(message: &Value) -> Option<Value> {
    match message {
        Value::Array(batch) => {
            let answers: Vec<Value> = batch.iter().filter_map(answer).collect();
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        single => answer(single),
    }
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Answers newline-delimited JSON-RPC on stdin/stdout until stdin closes or
/// stdout breaks.
pub async fn serve_stdio() -> anyhow::Result<()> {
    let mut input = BufReader::new(tokio::io::stdin());
    let mut output = tokio::io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        let oversized = match read_line(&mut input, &mut line).await {
            Ok(None) => return Ok(()),
            Ok(Some(oversized)) => oversized,
            Err(e) => {
                tracing::info!("stdin closed: {e}");
                return Ok(());
            }
        };
        if oversized {
            tracing::warn!("dropping an input line longer than {MAX_LINE} bytes");
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(message) = serde_json::from_slice::<Value>(text) else {
            tracing::debug!("ignoring a line that is not JSON");
            continue;
        };
        let Some(reply) = answer_all(&message) else {
            continue;
        };
        let mut bytes = reply.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(e) = async {
            output.write_all(&bytes).await?;
            output.flush().await
        }
        .await
        {
            tracing::info!("stdout closed: {e}");
            return Ok(());
        }
    }
}

/// Reads one line into `line`. `None` at end of input; `Some(true)` if the
/// line was longer than [`MAX_LINE`] and was discarded.
async fn read_line(input: &mut BufReader<tokio::io::Stdin>, line: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    let mut oversized = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && !oversized { None } else { Some(oversized) });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(end) => (&buf[..=end], true),
            None => (buf, false),
        };
        let used = chunk.len();
        if !oversized {
            if line.len() + used > MAX_LINE {
                oversized = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        input.consume(used);
        if done {
            return Ok(Some(oversized));
        }
    }
}

/// The axum app answering `POST /mcp` with the same refusals.
pub fn router() -> axum::Router {
    axum::Router::new()
        .route("/mcp", axum::routing::post(post_mcp).fallback(|| async { StatusCode::METHOD_NOT_ALLOWED }))
}

async fn post_mcp(body: Bytes) -> Response {
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            let reply = error(Value::Null, PARSE_ERROR, &format!("parse error: {e}"));
            return json_response(StatusCode::BAD_REQUEST, &reply);
        }
    };
    match answer_all(&message) {
        Some(reply) => json_response(StatusCode::OK, &reply),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_is_refused_ping_answered_notifications_ignored() {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
        let reply = answer_all(&init).unwrap();
        assert_eq!(reply["id"], 1);
        assert_eq!(reply["error"]["code"], INTERNAL_ERROR);
        assert_eq!(reply["error"]["message"], REFUSAL);

        let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
        assert_eq!(answer_all(&ping).unwrap()["result"], json!({}));

        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert!(answer_all(&note).is_none());

        let batch = json!([init, note, ping]);
        assert_eq!(answer_all(&batch).unwrap().as_array().unwrap().len(), 2);

        assert!(answer_all(&json!(42)).is_none());
        assert!(answer_all(&json!([])).is_none());
    }
}
