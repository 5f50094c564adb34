//! Tool calls made for objects (capability `tools`): durable call records, the executor that makes them, and the [`Router`] it sends them through.
//!
//! A plugin granted `tools` answers a reconcile with the calls it wants (`tools.request`);
//! the engine hands them to the [`executor`], which records each call in the store before
//! it starts it, makes it through the [`Router`] (the host's aggregator of MCP servers and
//! workflows), records the result, and queues the object again. The next reconcile sees the
//! records (`tools.calls`). Nothing blocks inside the plugin.

use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::model::ObjectKey;

/// Why one attempt at a tool call did not give the tool's answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No healthy server of the caller's namespace offers the tool now (it may be starting or
    /// restarting): retried with backoff, like a transport error.
    #[error("{0}")]
    NotOffered(String),
    /// The session to the server broke or could not be reached: retried with backoff.
    #[error("{0}")]
    Transport(String),
    /// The attempt took longer than its timeout: not retried (the tool may have acted).
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// The server refused the call (a JSON-RPC error: unknown tool, invalid arguments): not retried.
    #[error("{0}")]
    Refused(String),
    /// The call was cancelled before it answered.
    #[error("cancelled")]
    Cancelled,
}

impl CallError {
    /// Whether another attempt may succeed: transport errors and tools not offered yet.
    pub fn retryable(&self) -> bool {
        matches!(self, Self::NotOffered(_) | Self::Transport(_))
    }
}

/// One call, as the executor hands it to the [`Router`].
#[derive(Clone, Debug)]
pub struct RoutedCall {
    /// The object the call is made for; its namespace picks the servers and workflows.
    pub caller: ObjectKey,
    /// The call's id among the caller's calls (stable across host restarts: a router that
    /// creates something for a call, such as a WorkflowRun, names it after caller and id so a
    /// repeated attempt finds it instead of creating another).
    pub id: String,
    /// The tool, by the name the host offers it under.
    pub tool: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
    /// How long the attempt may take.
    pub timeout: Duration,
    /// Fired when the host, not the caller, stops the call (a graceful stop, a lost lease): the
    /// call is made again later, so what it started (a nested run) must be kept, not undone.
    pub host_stop: CancellationToken,
}

/// Where tool calls go: the host's aggregator (MCP servers' tools under muster's names,
/// `workflow_<name>`, `core_*`).
#[async_trait::async_trait]
pub trait Router: Send + Sync + 'static {
    /// Makes one attempt at `call`. Answers MCP's `CallToolResult` as JSON (`content`,
    /// `structuredContent`, `isError`); a result with `isError: true` is the tool's own
    /// failure and still an `Ok`. Returns within `call.timeout` ([`CallError::Timeout`]), and
    /// soon after `cancel` fires ([`CallError::Cancelled`]), having told the server with MCP's
    /// cancellation notification when the request was already sent.
    async fn call(&self, call: &RoutedCall, cancel: CancellationToken) -> Result<Value, CallError>;
}

mod executor;
mod settings;
#[cfg(test)]
mod tests;

pub use executor::{Executor, ExecutorOptions};
pub use settings::{ToolsSettings, glob_match};
