//! The MCP server proper, on rmcp: the tools and the two transports.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::ServerInitializeError;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use tokio::io::AsyncWrite;
use tokio::sync::Notify;

/// The built-in tools, in the order `--help` lists them.
pub const BUILTIN_TOOLS: &[&str] = &["echo", "add", "time"];

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

#[derive(Debug, Clone)]
pub struct ExampleServer {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl ExampleServer {
    /// Builds a server exposing the given built-in tools plus one trivial
    /// tool per extra name. Names are validated by the caller.
    pub fn new(tools: &BTreeSet<&'static str>, extra_tools: &[String]) -> Self {
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
        Self { tool_router }
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
                "A small example MCP server: echo, add and time, plus any extra tools it was started with.",
            )
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
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    axum::Router::new().route_service("/mcp", service)
}
