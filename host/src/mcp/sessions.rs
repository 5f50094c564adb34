//! The `/mcp` endpoint's sessions: rmcp's in-memory ones, at most `api.mcp_max_sessions` open; at the cap the session idle the longest is closed to make room, and when every session is busy a new `initialize` is refused.
//!
//! A session is busy while it is being initialized and while the answer to one of its requests
//! is being streamed (a `tools/call` in flight); otherwise it is idle, even with its event stream
//! (`GET /mcp`) open. Idle the longest means the one whose last request (or notification, or
//! stream) came first.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};

use crate::metrics::http::HttpMetrics;

/// The header that names a request's session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Why a session could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// Every open session is busy and there are as many as allowed.
    #[error("{}", full(*.0))]
    Full(usize),
    /// rmcp's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// The message of a refused `initialize`: the cap, and the setting to raise.
fn full(max: usize) -> String {
    format!(
        "the MCP endpoint has its limit of {max} sessions open, each busy answering a request; \
         try again when one ends, or raise api.mcp_max_sessions in the host config"
    )
}

/// What is known of one open session.
#[derive(Debug)]
struct Entry {
    /// Answers being streamed (and the `initialize` until it is answered).
    busy: usize,
    /// The book's clock at its last use.
    touched: u64,
}

/// The open sessions, and the slots taken by sessions being made.
#[derive(Debug, Default)]
struct Book {
    sessions: HashMap<SessionId, Entry>,
    reserved: usize,
    clock: u64,
}

impl Book {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Marks `id` used now, and `busy` more (or fewer) answers under way.
    fn touch(&mut self, id: &SessionId, busy: isize) {
        let now = self.tick();
        if let Some(e) = self.sessions.get_mut(id) {
            e.touched = now;
            e.busy = e.busy.saturating_add_signed(busy);
        }
    }

    /// The idle session used the longest ago.
    fn oldest_idle(&self) -> Option<SessionId> {
        self.sessions.iter().filter(|(_, e)| e.busy == 0).min_by_key(|(_, e)| e.touched).map(|(id, _)| id.clone())
    }

    fn full(&self, max: usize) -> bool {
        self.sessions.len() + self.reserved >= max
    }
}

/// The book shared with the answer streams, which mark their session idle when they end.
#[derive(Debug, Clone, Default)]
struct Shared(Arc<Mutex<Book>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// rmcp's [`LocalSessionManager`] with at most `max` sessions open, counted in
/// `steward_mcp_sessions`: at the cap, a new session closes the one idle the longest
/// (`steward_mcp_sessions_evicted_total`); with none idle it is refused
/// (`steward_mcp_sessions_refused_total`), by [`refuse_when_full`] with a 503 before rmcp sees
/// the request, or by [`SessionManager::create_session`] when two arrive at once.
#[derive(Debug)]
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
    book: Shared,
    open: Gauge,
    evicted: Counter,
    refused: Counter,
}

impl CappedSessions {
    /// At most `max` sessions (at least one), counted in `metrics`.
    pub fn new(max: usize, metrics: &HttpMetrics) -> Self {
        Self {
            inner: LocalSessionManager::default(),
            max: max.max(1),
            book: Shared::default(),
            open: metrics.mcp_sessions.clone(),
            evicted: metrics.mcp_sessions_evicted.clone(),
            refused: metrics.mcp_sessions_refused.clone(),
        }
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.book.lock().sessions.len()
    }

    /// Whether a new session can be made now: there is room, or an idle session to close.
    pub fn admits_new(&self) -> bool {
        let book = self.book.lock();
        !book.full(self.max) || book.oldest_idle().is_some()
    }

    fn count(&self, book: &Book) {
        self.open.set(i64::try_from(book.sessions.len()).unwrap_or(i64::MAX));
    }

    /// Marks `id` one answer more busy, until the returned guard is dropped.
    fn begin(&self, id: &SessionId) -> Busy {
        self.book.lock().touch(id, 1);
        self.busy(id)
    }

    /// A guard for an answer already counted busy: dropping it marks the session one less busy.
    fn busy(&self, id: &SessionId) -> Busy {
        Busy { book: self.book.clone(), id: id.clone() }
    }
}

/// Answers 503 with the reason to a new session's request (a `POST` without `Mcp-Session-Id`)
/// when the sessions are at their cap and all busy; counts it as refused.
pub async fn refuse_when_full(State(sessions): State<Arc<CappedSessions>>, req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !req.headers().contains_key(SESSION_HEADER) && !sessions.admits_new() {
        sessions.refused.inc();
        let body = serde_json::json!({"error": full(sessions.max)});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    next.run(req).await
}

/// Answers a client's `DELETE /mcp` (closing its session) with 200 OK where rmcp answers 202
/// Accepted: the MCP transport expects 200 or 204 there, and the official Python client warns
/// on every close otherwise. Any other answer (404 for an unknown session, say) is left as is.
pub async fn delete_answers_ok(req: Request, next: Next) -> Response {
    let delete = req.method() == Method::DELETE;
    let mut answer = next.run(req).await;
    if delete && answer.status() == StatusCode::ACCEPTED {
        *answer.status_mut() = StatusCode::OK;
    }
    answer
}

/// Marks its session one answer less busy when dropped: when the answer ends, fails, or its
/// request is dropped mid-way (the client went away).
#[derive(Debug)]
struct Busy {
    book: Shared,
    id: SessionId,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.book.lock().touch(&self.id, -1);
    }
}

/// An answer stream, holding its session busy (when `busy` is set) until it ends.
struct Tracked<S> {
    stream: Pin<Box<S>>,
    busy: Option<Busy>,
}

/// A slot taken by a session being made: given back when dropped, unless [`Reserved::settle`]d
/// first, so a `create_session` dropped mid-way (the client went away) does not keep it.
#[derive(Debug)]
struct Reserved {
    book: Option<Shared>,
}

impl Reserved {
    /// Takes a slot in `book`, whose lock the caller holds.
    fn take(shared: &Shared, book: &mut Book) -> Self {
        book.reserved += 1;
        Self { book: Some(shared.clone()) }
    }

    /// Gives the slot back under the caller's lock (the new session, if any, takes it over).
    fn settle(mut self, book: &mut Book) {
        book.reserved -= 1;
        self.book = None;
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(shared) = self.book.take() {
            shared.lock().reserved -= 1;
        }
    }
}

impl<S: Stream> Stream for Tracked<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let next = self.stream.as_mut().poll_next(cx);
        if let Poll::Ready(None) = next {
            self.busy = None;
        }
        next
    }
}

impl SessionManager for CappedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (victim, reserved) = {
            let mut book = self.book.lock();
            let victim = if book.full(self.max) {
                let Some(id) = book.oldest_idle() else {
                    self.refused.inc();
                    return Err(SessionsError::Full(self.max));
                };
                book.sessions.remove(&id);
                Some(id)
            } else {
                None
            };
            let reserved = Reserved::take(&self.book, &mut book);
            self.count(&book);
            (victim, reserved)
        };
        if let Some(id) = victim {
            self.evicted.inc();
            tracing::info!(session = %id, max = self.max, "closed the MCP session idle the longest to make room for a new one (api.mcp_max_sessions)");
            if let Err(e) = self.inner.close_session(&id).await {
                tracing::debug!(session = %id, error = %e, "closing an evicted MCP session");
            }
        }
        let created = self.inner.create_session().await;
        let mut book = self.book.lock();
        reserved.settle(&mut book);
        let (id, transport) = created?;
        let touched = book.tick();
        book.sessions.insert(id.clone(), Entry { busy: 1, touched });
        self.count(&book);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        // `create_session` counted the session busy; the guard ends that however this ends.
        let _busy = self.busy(id);
        let answer = self.inner.initialize_session(id, message).await?;
        Ok(super::tasks::wire::declare(answer))
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        if !self.book.lock().sessions.contains_key(id) {
            return Ok(false);
        }
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        {
            let mut book = self.book.lock();
            if book.sessions.remove(id).is_some() {
                self.count(&book);
            }
        }
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.begin(id);
        let stream = self.inner.create_stream(id, message).await?;
        Ok(Tracked { stream: Box::pin(stream), busy: Some(busy) })
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.book.lock().touch(id, 0);
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.book.lock().touch(id, 0);
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // `index/request` resumes a request's answer, which keeps the session busy; `index`
        // resumes its event stream, which does not.
        let busy = if last_event_id.contains('/') {
            Some(self.begin(id))
        } else {
            self.book.lock().touch(id, 0);
            None
        };
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(Tracked { stream: Box::pin(stream), busy })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, ListToolsResult, PaginatedRequestParams,
        ServerCapabilities, ServerConfig,
    };
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A server whose one tool answers once `release` is cancelled.
    #[derive(Clone)]
    struct Waiter {
        release: CancellationToken,
    }

    impl rmcp::ServerHandler for Waiter {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            Ok(ListToolsResult::with_all_items(Vec::new()))
        }

        async fn call_tool(
            &self,
            _request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            self.release.cancelled().await;
            Ok(CallToolResponse::Complete(CallToolResult::success(Vec::new())))
        }
    }

    /// A client speaking streamable HTTP to `url` by hand.
    struct Client {
        http: reqwest::Client,
        url: String,
    }

    impl Client {
        async fn post(&self, session: Option<&str>, message: Value) -> reqwest::Response {
            let mut r = self
                .http
                .post(&self.url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .json(&message);
            if let Some(id) = session {
                r = r.header(SESSION_HEADER, id);
            }
            r.send().await.unwrap()
        }

        /// `initialize` and `notifications/initialized`: the new session's id.
        async fn open(&self) -> String {
            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
            let r = self.post(None, init).await;
            assert_eq!(r.status(), 200);
            let id = r.headers()[SESSION_HEADER].to_str().unwrap().to_string();
            assert!(r.text().await.unwrap().contains("\"serverInfo\""));
            let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            assert_eq!(self.post(Some(&id), done).await.status(), 202);
            id
        }

        /// `tools/list` in `session`: the status and the body.
        async fn list(&self, session: &str) -> (u16, String) {
            let r = self.post(Some(session), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
            (r.status().as_u16(), r.text().await.unwrap())
        }
    }

    /// `/mcp` of [`Waiter`] with `sessions`, on a loopback port.
    async fn serve(sessions: Arc<CappedSessions>, release: CancellationToken) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let service = StreamableHttpService::new(
            move || Ok(Waiter { release: release.clone() }),
            sessions.clone(),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new()
            .route_service("/mcp", service)
            .route_layer(axum::middleware::from_fn_with_state(sessions, refuse_when_full));
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", tcp.local_addr().unwrap());
        tokio::spawn(axum::serve(tcp, router).into_future());
        Client { http: reqwest::Client::new(), url }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_the_cap_the_session_idle_the_longest_is_closed_and_with_none_idle_a_new_one_is_refused() {
        let metrics = HttpMetrics::default();
        let sessions = Arc::new(CappedSessions::new(2, &metrics));
        let release = CancellationToken::new();
        let c = serve(sessions.clone(), release.clone()).await;
        let a = c.open().await;
        let b = c.open().await;
        assert_eq!(metrics.mcp_sessions.get(), 2);
        // `a` was used last, so `b` is the one idle the longest.
        assert_eq!(c.list(&a).await.0, 200);
        let fresh = c.open().await;
        assert_eq!((metrics.mcp_sessions.get(), metrics.mcp_sessions_evicted.get()), (2, 1));
        assert_eq!(c.list(&b).await, (404, "Not Found: Session not found".to_string()));
        assert_eq!(c.list(&a).await.0, 200);
        assert_eq!(c.list(&fresh).await.0, 200);

        // Both busy with a call: a new session is refused, naming the cap and the setting.
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "wait"}});
        let calls = futures_util::future::join_all([&a, &fresh].map(|id| c.post(Some(id), call.clone()))).await;
        assert!(calls.iter().all(|r| r.status() == 200));
        tokio::time::timeout(Duration::from_secs(60), async {
            while sessions.admits_new() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("both sessions busy");
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
        let refused = c.post(None, init).await;
        assert_eq!(refused.status(), 503);
        let body: Value = refused.json().await.unwrap();
        let message = body["error"].as_str().unwrap();
        assert!(message.contains("limit of 2 sessions") && message.contains("raise api.mcp_max_sessions"), "{message}");
        assert_eq!((metrics.mcp_sessions.get(), metrics.mcp_sessions_refused.get()), (2, 1));

        // Once the calls are answered, the sessions are idle again and make room.
        release.cancel();
        for r in calls {
            assert!(r.text().await.unwrap().contains("\"result\""));
        }
        c.open().await;
        assert_eq!((metrics.mcp_sessions.get(), metrics.mcp_sessions_evicted.get()), (2, 2));
        assert_eq!(sessions.open(), 2);
    }

    /// A client message from its JSON.
    fn message(v: Value) -> ClientJsonRpcMessage {
        serde_json::from_value(v).unwrap()
    }

    // These run on one thread: a session's worker runs only when the test waits, so a call that
    // waits on the worker stays pending, and `now_or_never` drops it there, as hyper does a
    // request whose client went away.

    #[tokio::test]
    async fn a_new_session_dropped_while_making_room_gives_its_slot_back() {
        let metrics = HttpMetrics::default();
        let sessions = CappedSessions::new(1, &metrics);
        let (a, _a) = sessions.create_session().await.unwrap();
        sessions.book.lock().touch(&a, -1);
        // Fill `a`'s queue, so closing it to make room waits.
        let note = message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let full = (0..10_000).find(|_| sessions.accept_message(&a, note.clone()).now_or_never().is_none());
        assert!(full.is_some(), "the session's queue fills");
        assert!(sessions.create_session().now_or_never().is_none(), "closing the evicted session waits");
        assert_eq!(sessions.book.lock().reserved, 0);
        let made = sessions.create_session().now_or_never().expect("nothing to wait for");
        assert!(made.is_ok(), "the slot is free again: {:?}", made.err());
        assert_eq!(metrics.mcp_sessions.get(), 1);
    }

    #[tokio::test]
    async fn a_session_whose_request_is_dropped_mid_way_is_idle_again() {
        let metrics = HttpMetrics::default();
        let sessions = CappedSessions::new(1, &metrics);
        let (a, _a) = sessions.create_session().await.unwrap();
        assert!(!sessions.admits_new(), "busy while it is initialized");
        let init = message(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}));
        assert!(sessions.initialize_session(&a, init).now_or_never().is_none());
        assert!(sessions.admits_new(), "idle after a dropped initialize");
        let list = message(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        assert!(sessions.create_stream(&a, list).now_or_never().is_none());
        assert!(sessions.admits_new(), "idle after a dropped request");
        assert!(sessions.resume(&a, "0/0".into()).now_or_never().is_none());
        assert!(sessions.admits_new(), "idle after a dropped resume");
    }
}
