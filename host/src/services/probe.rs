//! The MCP client side: the handshake (`initialize`, then `tools/list`) over a child's pipes or to a remote URL.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ListToolsRequest, PaginatedRequestParams,
    PingRequest, ServerResult, Tool,
};
use rmcp::service::{
    ClientCacheConfig, ClientInitializeError, NotificationContext, PeerRequestOptions, RoleClient, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::{ClientHandler, ServiceExt};
use steward_sdk::{ServiceSpec, ToolInfo};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{Notify, oneshot};
use tokio::time::timeout;

/// The probe timeout used when a spec says 0.
pub(crate) const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one probe of `spec` may take.
pub(crate) fn probe_timeout(spec: &ServiceSpec) -> Duration {
    match spec.timeout_ms {
        0 => DEFAULT_PROBE_TIMEOUT,
        ms => Duration::from_millis(u64::from(ms)),
    }
}

/// The client half of an MCP session: introduces itself as Steward and
/// reports `notifications/tools/list_changed` so the tools are listed again.
#[derive(Clone, Debug)]
pub(crate) struct Prober {
    tools_changed: Arc<Notify>,
    /// Which request of the handshake [`open`] waits for: 0 `initialize`, 1 `tools/list`.
    stage: Arc<AtomicU8>,
    /// What the server says of its prompts and resources.
    events: Arc<super::offered::Events>,
    /// Where the server's progress for calls in flight goes.
    relay: Arc<super::forward::Relay>,
    /// What the server sends that rmcp's types drop.
    raw: Arc<super::raw::Raw>,
}

impl Prober {
    /// A client that signals `tools_changed` when the server says its tools changed.
    pub(crate) fn new(tools_changed: Arc<Notify>) -> Self {
        Self {
            tools_changed,
            stage: Arc::default(),
            events: Arc::default(),
            relay: Arc::default(),
            raw: Arc::default(),
        }
    }

    /// The session's raw view: what the server sends that rmcp's types drop; its transport
    /// must feed it.
    pub(crate) fn raw(&self) -> Arc<super::raw::Raw> {
        self.raw.clone()
    }

    /// Where the server's notifications about its prompts and resources go.
    pub(crate) fn events(&self) -> Arc<super::offered::Events> {
        self.events.clone()
    }

    /// The request of the handshake [`open`] waits (or last waited) for an answer to:
    /// `initialize` or `tools/list`. It stays readable after the handshake was dropped.
    pub(crate) fn waits_for(&self) -> &'static str {
        match self.stage.load(Ordering::Relaxed) {
            0 => "initialize",
            _ => "tools/list",
        }
    }

    /// Where the server's `notifications/progress` go: the sinks of the calls in flight.
    pub(crate) fn relay(&self) -> Arc<super::forward::Relay> {
        self.relay.clone()
    }
}

impl ClientHandler for Prober {
    #[allow(deprecated)]
    fn get_info(&self) -> ClientConfig {
        // Offered because they are forwarded to the /mcp client of the call in flight (services/forward.rs).
        let caps = ClientCapabilities::builder().enable_sampling().enable_elicitation().enable_roots().build();
        ClientConfig::new(caps, Implementation::new("steward", env!("CARGO_PKG_VERSION")))
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.relay.create_message(params).await
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.relay.create_elicitation(params).await
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.relay.list_roots().await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.lists_changed();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.lists_changed();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.updated(params.uri);
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.deliver(params);
    }
}

/// An open MCP session.
pub(crate) type Session = RunningService<RoleClient, Prober>;

/// Runs the handshake over `transport`: `initialize`, then `tools/list` (the full tools, with
/// their schemas; [`tools_info`] gives the status's view). Not bounded: the caller times it.
pub(crate) async fn open<T, E, A>(transport: T, prober: Prober) -> Result<(Session, Vec<Tool>), OpenError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let stage = prober.stage.clone();
    stage.store(0, Ordering::Relaxed);
    let session = prober.serve(transport).await.map_err(|e| OpenError {
        closed: matches!(e, ClientInitializeError::TransportError { .. } | ClientInitializeError::ConnectionClosed(_)),
        message: format!("initialize: {}", init_error_text(&e)),
        auth_required: matches!(&e, ClientInitializeError::TransportError { error, .. } if unauthorized(&*error.error)),
    })?;
    // rmcp 3.x caches list results and answers from a stale cache entry when a
    // request fails; a health probe must reach the server every time.
    session.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
    stage.store(1, Ordering::Relaxed);
    let tools = list_all_tools(&session).await.map_err(|e| OpenError {
        message: format!("tools/list: {}", service_error_text(&e)),
        closed: false,
        auth_required: matches!(&e, rmcp::ServiceError::TransportSend(error) if unauthorized(&*error.error)),
    })?;
    Ok((session, tools))
}

/// Why a session could not be opened.
#[derive(Debug)]
pub(crate) struct OpenError {
    /// What failed, for people.
    pub(crate) message: String,
    /// The transport closed or broke (a stdio server is probably exiting), as opposed
    /// to the server answering with an error.
    pub(crate) closed: bool,
    /// A remote server answered with HTTP 401: it wants authorization.
    pub(crate) auth_required: bool,
}

impl OpenError {
    /// A failure that is neither a closed transport nor a 401.
    pub(crate) fn other(message: impl Into<String>) -> Self {
        Self { message: message.into(), closed: false, auth_required: false }
    }
}

/// Whether a transport error is the server's HTTP 401. rmcp reports a 401 with a
/// `WWW-Authenticate` challenge as `AuthRequired`, and one without as an unexpected
/// response whose text starts with the status (`HTTP 401 Unauthorized: ...`).
fn unauthorized(e: &(dyn std::error::Error + 'static)) -> bool {
    match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::AuthRequired(_)) => true,
        Some(StreamableHttpError::UnexpectedServerResponse(text)) => text.starts_with("HTTP 401"),
        Some(StreamableHttpError::Client(c)) => c.status() == Some(reqwest::StatusCode::UNAUTHORIZED),
        _ => false,
    }
}

impl From<OpenError> for String {
    fn from(e: OpenError) -> String {
        e.message
    }
}

/// Lists the tools over an open session. Not bounded: the caller times it.
pub(crate) async fn list_tools(session: &Session) -> Result<Vec<Tool>, String> {
    list_all_tools(session).await.map_err(|e| format!("tools/list: {}", service_error_text(&e)))
}

/// The most pages of one tools listing.
const MAX_TOOL_PAGES: usize = 100;

/// Every page of the server's `tools/list` (at most [`MAX_TOOL_PAGES`]); the fields of each
/// tool that rmcp does not model (its `execution`) are kept in the session's raw view.
async fn list_all_tools(session: &Session) -> Result<Vec<Tool>, rmcp::ServiceError> {
    let raw = session.service().raw();
    let (mut tools, mut extras) = (Vec::new(), HashMap::new());
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let handle = session.peer().send_cancellable_request(request, PeerRequestOptions::no_options()).await?;
        let id = handle.id.clone();
        let ServerResult::ListToolsResult(page) = handle.await_response().await? else {
            return Err(rmcp::ServiceError::UnexpectedResponse);
        };
        if let Some(whole) = raw.take(&id) {
            extras.extend(super::raw::tool_extras(&whole));
        }
        tools.extend(page.tools);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    raw.set_extras(Arc::new(extras));
    Ok(tools)
}

/// What the status shows of `tools`: names and descriptions.
pub(crate) fn tools_info(tools: &[Tool]) -> Vec<ToolInfo> {
    tools
        .iter()
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.as_deref().unwrap_or_default().to_string(),
        })
        .collect()
}

/// Checks a remote spec: the URL and headers; the error says what is wrong.
pub(crate) fn remote_config(spec: &ServiceSpec) -> Result<StreamableHttpClientTransportConfig, String> {
    let url = match spec.url.as_deref().map(str::trim) {
        Some(u) if !u.is_empty() => u,
        _ => return Err("a remote service needs a `url`".to_string()),
    };
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        _ => return Err(format!("url `{url}` is not an http:// or https:// URL")),
    }
    let headers = headers(&spec.headers)?;
    Ok(StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers))
}

fn headers(spec: &BTreeMap<String, String>) -> Result<HashMap<HeaderName, HeaderValue>, String> {
    spec.iter()
        .map(|(k, v)| {
            let name = HeaderName::try_from(k.as_str()).map_err(|_| format!("header name `{k}` is not valid"))?;
            let mut value = HeaderValue::try_from(v.as_str())
                .map_err(|_| format!("the value of header `{k}` is not a valid header value"))?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// `config` with `extra` headers (secret values, marked sensitive) added to its own.
pub(crate) fn with_headers(
    config: &StreamableHttpClientTransportConfig,
    extra: Vec<(HeaderName, HeaderValue)>,
) -> StreamableHttpClientTransportConfig {
    let mut headers = config.custom_headers.clone();
    headers.extend(extra);
    config.clone().custom_headers(headers)
}

/// One probe of a remote endpoint: a fresh session, `initialize`, `tools/list`. Not bounded.
///
/// The session stays open for the caller to share until the next probe replaces it; dropping
/// it closes it (rmcp then sends DELETE for it in the background).
pub(crate) async fn probe_remote(
    config: StreamableHttpClientTransportConfig,
) -> Result<(Session, Vec<Tool>), OpenError> {
    let prober = Prober::new(Arc::default());
    let client = super::watched::SessionClient::new(super::http::client().map_err(OpenError::other)?, prober.raw());
    let transport = StreamableHttpClientTransport::with_client(client, config);
    open(transport, prober).await
}

/// Whether the server still answers on `session` (an MCP `ping` within `limit`). A server that
/// restarted and no longer knows the session gets it re-established by this request.
pub(crate) async fn answers(session: &Session, limit: Duration) -> bool {
    let ping = ClientRequest::PingRequest(PingRequest::default());
    matches!(timeout(limit, session.peer().send_request(ping)).await, Ok(Ok(_)))
}

/// A failed request, for people, and whether it certainly did not reach the server (its
/// connection was refused, or the server did not know its session and no new one could be
/// made), so that sending it again cannot make the server act twice.
pub(crate) fn request_failure(e: &rmcp::ServiceError) -> (String, bool) {
    let not_reached = match e {
        rmcp::ServiceError::TransportSend(error) => {
            match error.error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                Some(StreamableHttpError::Client(c)) => c.is_connect(),
                Some(StreamableHttpError::SessionExpired | StreamableHttpError::ReinitializationFailed(_)) => true,
                _ => false,
            }
        }
        _ => false,
    };
    (service_error_text(e), not_reached)
}

/// A handshake error, without rmcp's transport type names.
fn init_error_text(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", transport_error_text(&*error.error))
        }
        other => error_text(other),
    }
}

/// A request error, without rmcp's transport type names.
pub(crate) fn service_error_text(e: &rmcp::ServiceError) -> String {
    match e {
        rmcp::ServiceError::TransportSend(error) => transport_error_text(&*error.error),
        other => error_text(other),
    }
}

/// A transport error; an HTTP client error is told with its causes (rmcp does not chain them).
fn transport_error_text(e: &(dyn std::error::Error + 'static)) -> String {
    match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(e)) => error_text(e),
        _ => error_text(e),
    }
}

/// The error and its causes, each once: `a: b: c`.
pub(crate) fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text.trim_end_matches([':', ' ']).to_string()
}

/// A reader that reports its end of stream (or a read error) once, on a oneshot channel.
///
/// It wraps a child's stdout, so that a server closing its side of the session is noticed at once.
#[derive(Debug)]
pub(crate) struct EofWatch<R> {
    inner: R,
    eof: Option<oneshot::Sender<()>>,
}

impl<R> EofWatch<R> {
    /// Wraps `inner`; `eof` fires when it ends.
    pub(crate) fn new(inner: R, eof: oneshot::Sender<()>) -> Self {
        Self { inner, eof: Some(eof) }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EofWatch<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &res {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended && let Some(tx) = self.eof.take() {
            let _ = tx.send(());
        }
        res
    }
}
