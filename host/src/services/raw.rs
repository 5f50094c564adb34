//! What a server sends that rmcp's typed model drops (a tool's `execution`, the tasks of MCP 2025-11-25), read from the session's raw messages before rmcp parses them.
//!
//! rmcp 3.9 parses every message into its own types: a tool's fields it does not model
//! (`execution`) and results it does not know (`CreateTaskResult` of protocol 2025-11-25, the
//! `tasks/*` results) lose fields or their shape. Each session's transport hands every message
//! it reads to the session's [`Raw`] first ([`Raw::inspect_text`]): it keeps the results worth
//! keeping by request id for the caller to [`Raw::take`], the server's capabilities as sent,
//! and hands on every `notifications/tasks/status`.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use rmcp::model::{JsonObject, RequestId};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::broadcast;

/// How many kept results wait for their caller at most; the oldest goes first.
const KEPT: usize = 64;

/// The fields of a tool that rmcp's `Tool` models; every other field is an extra.
const MODELED: &[&str] =
    &["name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta"];

/// The `_meta` key that ties a result to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// One session's raw view. Shared by its transport (which feeds it) and its users.
#[derive(Debug)]
pub struct Raw {
    kept: Mutex<VecDeque<(String, Value)>>,
    capabilities: Mutex<Option<Value>>,
    extras: Mutex<Arc<HashMap<String, JsonObject>>>,
    statuses: broadcast::Sender<Value>,
}

impl Default for Raw {
    fn default() -> Self {
        Self {
            kept: Mutex::default(),
            capabilities: Mutex::default(),
            extras: Mutex::default(),
            statuses: broadcast::channel(256).0,
        }
    }
}

/// The key of a request id, as the raw message spells it (`7`, `"abc"`).
fn key(id: &Value) -> String {
    id.to_string()
}

impl Raw {
    /// Reads one message the server sent (one JSON-RPC message as text). Cheap for messages
    /// of no interest: only those that may hold a kept result, the server's capabilities or a
    /// task status are parsed.
    pub fn inspect_text(&self, text: &[u8]) {
        const MARKS: &[&[u8]] = &[b"\"tools\"", b"\"task", b"related-task", b"\"capabilities\""];
        if !MARKS.iter().any(|m| memchr::memmem::find(text, m).is_some()) {
            return;
        }
        if let Ok(message) = serde_json::from_slice::<Value>(text) {
            self.inspect(message);
        }
    }

    /// Reads one parsed message the server sent (a batch is read message by message).
    pub fn inspect(&self, message: Value) {
        let Value::Object(mut message) = message else {
            if let Value::Array(batch) = message {
                batch.into_iter().for_each(|m| self.inspect(m));
            }
            return;
        };
        if message.get("method").and_then(Value::as_str) == Some("notifications/tasks/status") {
            if let Some(params) = message.remove("params") {
                let _ = self.statuses.send(params);
            }
            return;
        }
        let (Some(id), Some(Value::Object(result))) = (message.get("id"), message.get("result")) else { return };
        if result.contains_key("protocolVersion") && result.contains_key("capabilities") {
            *lock(&self.capabilities) = result.get("capabilities").cloned();
            return;
        }
        let related = result.get("_meta").and_then(|m| m.get(RELATED_TASK)).is_some();
        if related || ["tools", "task", "tasks", "taskId"].iter().any(|k| result.contains_key(*k)) {
            let id = key(id);
            let result = message.remove("result").unwrap_or_default();
            let mut kept = lock(&self.kept);
            if kept.len() >= KEPT {
                kept.pop_front();
            }
            kept.push_back((id, result));
        }
    }

    /// The raw result of request `id`, if it was kept (once: it is taken).
    pub fn take(&self, id: &RequestId) -> Option<Value> {
        let want = serde_json::to_value(id).map(|v| key(&v)).ok()?;
        let mut kept = lock(&self.kept);
        let at = kept.iter().position(|(k, _)| *k == want)?;
        kept.remove(at).map(|(_, v)| v)
    }

    /// Whether the server declared task-augmented `tools/call` (`capabilities.tasks.requests.tools.call`).
    pub fn tasks_for_tool_calls(&self) -> bool {
        lock(&self.capabilities).as_ref().is_some_and(|c| c["tasks"]["requests"]["tools"]["call"].is_object())
    }

    /// Every `notifications/tasks/status` (its params) the server sends from now on.
    pub fn statuses(&self) -> broadcast::Receiver<Value> {
        self.statuses.subscribe()
    }

    /// The fields rmcp does not model of each tool the last listing gave, by tool name.
    pub fn extras(&self) -> Arc<HashMap<String, JsonObject>> {
        lock(&self.extras).clone()
    }

    /// Keeps `extras` as the last listing's (see [`Raw::extras`]).
    pub fn set_extras(&self, extras: Arc<HashMap<String, JsonObject>>) {
        *lock(&self.extras) = extras;
    }
}

/// The fields of each tool of a raw `tools/list` result that rmcp does not model, by name;
/// tools with none are left out.
pub fn tool_extras(result: &Value) -> HashMap<String, JsonObject> {
    let tools = result.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    tools
        .iter()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?;
            let extra: JsonObject = t
                .as_object()?
                .iter()
                .filter(|(k, _)| !MODELED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (!extra.is_empty()).then(|| (name.to_string(), extra))
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stdio server's output, each line handed to a [`Raw`] before the transport reads it.
/// A line over `max` bytes is not inspected (the transport drops it too).
#[derive(Debug)]
pub(crate) struct Tapped<R> {
    inner: R,
    raw: Arc<Raw>,
    line: Vec<u8>,
    over: bool,
    max: usize,
}

impl<R> Tapped<R> {
    /// `inner`, read through `raw`.
    pub(crate) fn new(inner: R, raw: Arc<Raw>, max: usize) -> Self {
        Self { inner, raw, line: Vec::new(), over: false, max }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = memchr::memchr(b'\n', bytes);
            let (part, rest) = match end {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.over {
                if self.line.len() + part.len() > self.max {
                    self.over = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if end.is_some() {
                if !self.over && !self.line.is_empty() {
                    self.raw.inspect_text(&self.line);
                }
                self.line.clear();
                self.over = false;
            }
            bytes = rest;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Tapped<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.feed(&buf.filled()[before..]);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;
    use serde_json::json;
    use tokio::io::AsyncReadExt;

    use super::*;

    #[test]
    fn results_worth_keeping_are_kept_by_id_and_taken_once() {
        let raw = Raw::default();
        let created = json!({"jsonrpc": "2.0", "id": 7, "result": {"task": {"taskId": "t1", "status": "working"}}});
        raw.inspect_text(created.to_string().as_bytes());
        raw.inspect_text(br#"{"jsonrpc":"2.0","id":8,"result":{"content":[]}}"#);
        let id = NumberOrString::Number(7);
        assert_eq!(raw.take(&id), Some(json!({"task": {"taskId": "t1", "status": "working"}})));
        assert_eq!(raw.take(&id), None, "taken once");
        assert_eq!(raw.take(&NumberOrString::Number(8)), None, "a plain result is not kept");
    }

    #[test]
    fn the_capabilities_and_task_statuses_are_read() {
        let raw = Raw::default();
        let mut statuses = raw.statuses();
        assert!(!raw.tasks_for_tool_calls());
        let init = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}}, "serverInfo": {"name": "s", "version": "1"}}});
        raw.inspect_text(init.to_string().as_bytes());
        assert!(raw.tasks_for_tool_calls());
        let note = json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": "t1", "status": "completed"}});
        raw.inspect_text(note.to_string().as_bytes());
        assert_eq!(statuses.try_recv().ok(), Some(json!({"taskId": "t1", "status": "completed"})));
    }

    #[test]
    fn a_tools_extras_are_the_fields_rmcp_does_not_model() {
        let page = json!({"tools": [
            {"name": "a", "inputSchema": {}, "execution": {"taskSupport": "required"}, "title": "A"},
            {"name": "b", "inputSchema": {}},
        ]});
        let extras = tool_extras(&page);
        assert_eq!(extras.len(), 1);
        assert_eq!(Value::Object(extras["a"].clone()), json!({"execution": {"taskSupport": "required"}}));
    }

    #[tokio::test]
    async fn a_tapped_reader_hands_on_whole_lines_and_skips_long_ones() {
        let raw = Arc::new(Raw::default());
        let long = format!("{{\"id\":1,\"result\":{{\"taskId\":\"{}\"}}}}\n", "x".repeat(100));
        let text = format!("{long}{{\"id\":2,\"result\":{{\"taskId\":\"t\"}}}}\n");
        let mut reader = Tapped::new(text.as_bytes(), raw.clone(), 64);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, text.as_bytes(), "the bytes pass unchanged");
        assert_eq!(raw.take(&NumberOrString::Number(1)), None, "over the limit");
        assert_eq!(raw.take(&NumberOrString::Number(2)), Some(json!({"taskId": "t"})));
    }
}
