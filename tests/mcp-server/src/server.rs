//! The MCP server proper, on rmcp: the tools and the two transports.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ContentBlock, Implementation,
    JsonObject, RequestId, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, ServerInitializeError};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWrite;
use tokio::sync::Notify;

use crate::journal::Journal;

/// The built-in tools, in the order `--help` lists them.
pub const BUILTIN_TOOLS: &[&str] = &["echo", "add", "time", "sleep", "fail", "crash", "json", "count"];

/// Status the process exits with when the `crash` tool is called.
pub const CRASH_STATUS: i32 = 4;

/// Server name reported in `initialize`.
pub const SERVER_NAME: &str = "steward-example-mcp";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub message: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    /// The first number.
    pub a: f64,
    /// The second number.
    pub b: f64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SleepArgs {
    /// How long to wait, in milliseconds.
    pub ms: u64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct FailArgs {
    /// The text of the error result.
    pub message: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct JsonArgs {
    /// Any JSON value, sent back as JSON text (and as structured content when
    /// it is an object).
    pub value: serde_json::Value,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CountArgs {
    /// The counter to increment.
    pub key: String,
}

#[derive(Debug, Clone)]
pub struct ExampleServer {
    tool_router: ToolRouter<Self>,
    /// Where tool calls are recorded (`--journal`), shared by all sessions.
    journal: Option<Arc<Journal>>,
    /// The `count` tool's counters, shared by all sessions of the process.
    counters: Arc<Mutex<HashMap<String, u64>>>,
    /// The tool calls of this session (request ids are per session).
    calls: Arc<Mutex<Calls>>,
}

/// Bound on [`Calls::cancelled_early`], which cancellations of finished calls
/// would otherwise grow.
const MAX_CANCELLED_EARLY: usize = 1024;

#[derive(Debug, Default)]
struct Calls {
    /// Calls running, by request id: the tool name.
    running: HashMap<RequestId, String>,
    /// Requests the client cancelled that were not running (yet).
    cancelled_early: HashSet<RequestId>,
}

#[tool_router]
impl ExampleServer {
    /// Builds a server exposing the given built-in tools plus one trivial
    /// tool per extra name. Names are validated by the caller.
    pub fn new(tools: &BTreeSet<&'static str>, extra_tools: &[String], journal: Option<Journal>) -> Self {
        let mut tool_router = Self::tool_router();
        for name in BUILTIN_TOOLS {
            if !tools.contains(name) {
                tool_router.remove_route(name);
            }
        }
        for name in extra_tools {
            let schema: JsonObject = serde_json::from_value(serde_json::json!({
                "type": "object",
                "properties": {},
            }))
            .unwrap_or_default();
            let attr = Tool::new(name.clone(), format!("Returns \"{name} ok\"."), Arc::new(schema));
            tool_router.add_route(ToolRoute::new_dyn(attr, extra_tool_call));
        }
        Self { tool_router, journal: journal.map(Arc::new), counters: Arc::default(), calls: Arc::default() }
    }

    /// A server for one more session: the same tools, journal and counters,
    /// but its own table of running calls (request ids are per session).
    pub fn for_session(&self) -> Self {
        Self { calls: Arc::default(), ..self.clone() }
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Names of the tools this server exposes, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        self.tool_router.list_all().into_iter().map(|t| t.name.into_owned()).collect()
    }

    #[tool(description = "Returns the message it is given.")]
    fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> String {
        message
    }

    #[tool(description = "Returns the sum of two numbers a and b.")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Returns the current unix time in seconds.")]
    fn time(&self) -> Result<String, ErrorData> {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs().to_string())
            .map_err(|e| ErrorData::internal_error(format!("clock is before 1970: {e}"), None))
    }

    /// Cancellation by the client is handled for every tool in `call_tool`,
    /// which drops this future when the request's token fires.
    #[tool(description = "Waits ms milliseconds, then returns \"slept <ms>\". Stops early if the call is cancelled.")]
    async fn sleep(&self, Parameters(SleepArgs { ms }): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        format!("slept {ms}")
    }

    #[tool(description = "Returns a tool error (isError: true) whose text is the message.")]
    fn fail(&self, Parameters(FailArgs { message }): Parameters<FailArgs>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(message)])
    }

    #[tool(description = "Makes the server process exit at once with status 4, without answering.")]
    fn crash(&self) -> CallToolResult {
        tracing::warn!("exiting with status {CRASH_STATUS} (the crash tool was called)");
        std::process::exit(CRASH_STATUS)
    }

    #[tool(description = "Returns the value as JSON text, and as structured content when it is an object.")]
    fn json(&self, Parameters(JsonArgs { value }): Parameters<JsonArgs>) -> CallToolResult {
        let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
        if value.is_object() {
            result.structured_content = Some(value);
        }
        result
    }

    #[tool(description = "Increments this process's counter for key and returns {\"key\": key, \"count\": n}.")]
    fn count(&self, Parameters(CountArgs { key }): Parameters<CountArgs>) -> CallToolResult {
        let count = {
            let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
            let counter = counters.entry(key.clone()).or_insert(0);
            *counter += 1;
            *counter
        };
        CallToolResult::structured(json!({"key": key, "count": count}))
    }
}

/// The handler of every `--extra-tool`: answers "NAME ok" with the called name.
fn extra_tool_call(
    context: ToolCallContext<'_, ExampleServer>,
) -> Pin<Box<dyn Future<Output = Result<CallToolResponse, ErrorData>> + Send + '_>> {
    let text = format!("{} ok", context.name);
    Box::pin(std::future::ready(Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())))
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for ExampleServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A small example MCP server for tests: echo, add, time, sleep, fail, crash, json and count, \
                 plus any extra tools it was started with.",
            )
    }

    /// Runs a tool, journaling the call and its end, and stops it when the
    /// request is cancelled (by the client, or because the session ends).
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let id = context.id.clone();
        let ct = context.ct.clone();
        {
            // Under the lock, so that `on_cancelled` sees the call only once
            // its `call` line is written.
            let mut calls = self.calls();
            if let Some(journal) = &self.journal {
                let arguments = serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
                journal.call(&tool, &arguments).map_err(|e| {
                    tracing::error!("cannot write the journal: {e}");
                    ErrorData::internal_error(format!("cannot write the journal: {e}"), None)
                })?;
            }
            if calls.cancelled_early.remove(&id) {
                // The client cancelled it before this handler got to run.
                tracing::info!(%id, tool, "client cancelled the call");
                journal_cancelled(self.journal.as_deref(), &tool);
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
            calls.running.insert(id.clone(), tool.clone());
        }

        let call = ToolCallContext::new(self, request, context);
        let result = tokio::select! {
            biased;
            () = ct.cancelled() => {
                // `on_cancelled` journals a cancellation by the client and
                // forgets the call; rmcp drops this answer anyway.
                tracing::info!(%id, tool, "call stopped");
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
            result = self.tool_router.call(call) => result,
        };

        if self.calls().running.remove(&id).is_some()
            && let Some(journal) = &self.journal
            && let Err(e) = journal.done(&tool)
        {
            tracing::error!("cannot write the journal: {e}");
        }
        result
    }

    async fn on_cancelled(&self, notification: CancelledNotificationParam, _context: NotificationContext<RoleServer>) {
        let Some(id) = notification.request_id else { return };
        let tool = {
            let mut calls = self.calls();
            match calls.running.remove(&id) {
                Some(tool) => tool,
                None => {
                    // Not started yet (rmcp runs handlers and notifications
                    // as separate tasks), or already finished: remember it
                    // in case it is about to start.
                    if calls.cancelled_early.len() < MAX_CANCELLED_EARLY {
                        calls.cancelled_early.insert(id);
                    }
                    return;
                }
            }
        };
        tracing::info!(%id, tool, reason = notification.reason, "client cancelled the call");
        journal_cancelled(self.journal.as_deref(), &tool);
    }
}

fn journal_cancelled(journal: Option<&Journal>, tool: &str) {
    if let Some(journal) = journal
        && let Err(e) = journal.cancelled(tool)
    {
        tracing::error!("cannot write the journal: {e}");
    }
}

/// Serves one client over stdin/stdout until it goes away: stdin reaches its
/// end, or writing to stdout fails (the reader is gone).
pub async fn serve_stdio(server: ExampleServer) -> anyhow::Result<()> {
    let broken = Arc::new(Notify::new());
    let stdout = WatchedStdout { inner: tokio::io::stdout(), broken: broken.clone() };
    let running = match server.serve((tokio::io::stdin(), stdout)).await {
        Ok(running) => running,
        Err(ServerInitializeError::ConnectionClosed(_))
        | Err(ServerInitializeError::TransportError { .. })
        | Err(ServerInitializeError::Cancelled) => {
            tracing::info!("client went away before initializing");
            return Ok(());
        }
        Err(e) => anyhow::bail!("MCP handshake failed: {e}"),
    };
    let token = running.cancellation_token();
    let watcher = tokio::spawn(async move {
        broken.notified().await;
        tracing::info!("stdout is closed; stopping");
        token.cancel();
    });
    match running.waiting().await {
        Ok(reason) => tracing::info!(?reason, "client disconnected"),
        Err(e) => tracing::info!("service ended: {e}"),
    }
    watcher.abort();
    Ok(())
}

/// Stdout that reports the first write error: rmcp only logs a failed write
/// and keeps reading, but a client that closed our stdout is gone.
struct WatchedStdout {
    inner: tokio::io::Stdout,
    broken: Arc<Notify>,
}

impl WatchedStdout {
    fn watch<T>(&self, poll: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if let Poll::Ready(Err(_)) = &poll {
            self.broken.notify_one();
        }
        poll
    }
}

impl AsyncWrite for WatchedStdout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(poll)
    }
}

/// The axum app serving MCP streamable HTTP at `/mcp`.
pub fn router(server: ExampleServer) -> axum::Router {
    let service = StreamableHttpService::new(
        move || Ok(server.for_session()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    axum::Router::new().route_service("/mcp", service)
}
