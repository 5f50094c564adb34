//! The MCP endpoint (`/mcp`, streamable HTTP): the catalog as `tools/list`, the aggregator as `tools/call`, and `tools/list_changed` as the catalog changes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest, CustomResult, ErrorData,
    GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::listed::Listed;
use super::router::{Aggregator, ENDPOINT_CALLER_KIND};
use super::sessions::{CappedSessions, refuse_when_full};
use super::subscriptions::Subscriptions;
use super::tasks::{self, Tasks};
use super::{prompts, resources};
use crate::api::EngineSlot;
use crate::engine::Engine;
use crate::metrics::http::HttpMetrics;
use crate::model::{ObjectKey, is_dns_subdomain};
use crate::tools::{CallError, RoutedCall};

/// The path the endpoint is served at.
pub const PATH: &str = "/mcp";

/// The namespace a client gets when its URL names none (`?namespace=`).
pub const DEFAULT_NAMESPACE: &str = "default";

/// How long one `tools/call` from a client may take (a workflow may run long); the client
/// can cancel it sooner.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// How long the catalog watcher waits after a change for more before it compares the names.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The newest protocol version served: one with sessions, so that a client's session keeps
/// receiving `notifications/tools/list_changed`.
const MAX_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The endpoint's router: `/mcp`, answering 503 until the slot holds an engine. `any_host`
/// accepts any `Host` header; otherwise only loopback names are accepted (rmcp's guard against
/// DNS rebinding), which is right for an API without a token. Authorization is the caller's:
/// wrap it in the API's token check. Its sessions are capped at
/// [`crate::config::DEFAULT_MCP_MAX_SESSIONS`], counted apart; see [`router_with`].
pub fn router(engine: EngineSlot, any_host: bool) -> axum::Router {
    let sessions = CappedSessions::new(crate::config::DEFAULT_MCP_MAX_SESSIONS, &HttpMetrics::default());
    router_with(engine, any_host, Arc::new(sessions))
}

/// [`router`] keeping its sessions in `sessions`, which caps them.
pub fn router_with(engine: EngineSlot, any_host: bool, sessions: Arc<CappedSessions>) -> axum::Router {
    let shared = Arc::new(Shared {
        slot: engine,
        aggregator: Aggregator::new(),
        watch: Mutex::default(),
        subscriptions: Arc::default(),
        tasks: Tasks::default(),
    });
    let mut config = StreamableHttpServerConfig::default().with_sse_keep_alive(Some(Duration::from_secs(15)));
    if any_host {
        config = config.disable_allowed_hosts();
    }
    let factory_shared = shared.clone();
    let service =
        StreamableHttpService::new(move || Ok(Endpoint { shared: factory_shared.clone() }), sessions.clone(), config);
    axum::Router::new()
        .route_service(PATH, service)
        .route_layer(middleware::from_fn_with_state(sessions, refuse_when_full))
        .route_layer(middleware::from_fn(super::sessions::delete_answers_ok))
        .route_layer(middleware::from_fn(super::tasks::wire::rename))
        .route_layer(middleware::from_fn_with_state(shared, guard))
}

/// Refuses a bad `?namespace=` and answers 503 while the host is starting.
async fn guard(axum::extract::State(shared): axum::extract::State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if let Err(message) = namespace_of(req.uri().query()) {
        return (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({"error": message}))).into_response();
    }
    if shared.engine().is_none() {
        let body = serde_json::json!({"error": "starting: plugins and resources are still loading"});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    next.run(req).await
}

/// The namespace a query names (`namespace=NS`), [`DEFAULT_NAMESPACE`] when it names none;
/// the error says what is wrong with it.
pub fn namespace_of(query: Option<&str>) -> Result<String, String> {
    let mut found = None;
    for pair in query.unwrap_or_default().split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "namespace" {
            if found.is_some() {
                return Err("the query names `namespace` twice".into());
            }
            found = Some(v);
        }
    }
    match found {
        None => Ok(DEFAULT_NAMESPACE.to_string()),
        Some(ns) if is_dns_subdomain(ns) => Ok(ns.to_string()),
        Some(ns) => Err(format!(
            "namespace {:?} is not valid: expected lower-case letters, digits, '-' and '.'",
            ns.chars().take(64).collect::<String>()
        )),
    }
}

/// What every session of the endpoint shares.
struct Shared {
    slot: EngineSlot,
    aggregator: Arc<Aggregator>,
    watch: Mutex<Watch>,
    subscriptions: Arc<Subscriptions>,
    /// The tasks clients made at servers.
    tasks: Tasks,
}

/// The connected sessions by namespace, and what each namespace listed when last told.
#[derive(Default)]
struct Watch {
    peers: BTreeMap<String, Vec<Peer<RoleServer>>>,
    names: BTreeMap<String, Listed>,
    started: bool,
}

impl Shared {
    fn engine(&self) -> Option<Arc<Engine>> {
        let engine = self.slot.get()?;
        self.aggregator.bind(engine);
        Some(engine.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `peer` to tell it when what `namespace` lists changes; starts the watcher once.
    fn register(self: &Arc<Self>, namespace: String, peer: Peer<RoleServer>, engine: &Engine) {
        let names = Listed::of(engine, &namespace);
        let mut w = self.lock();
        w.names.entry(namespace.clone()).or_insert(names);
        w.peers.entry(namespace).or_default().push(peer);
        if !w.started {
            w.started = true;
            tokio::spawn(watch(self.clone()));
        }
    }
}

/// Tells the sessions of each namespace when its set of tool names (or prompts, or resources)
/// changed: after every store change or change of what live sessions offer (debounced),
/// compares the names with those last told.
async fn watch(shared: Arc<Shared>) {
    let Some(engine) = shared.engine() else { return };
    let mut changes = engine.changes();
    let mut offered = engine.units().services().offered_changes();
    drop(engine);
    loop {
        tokio::select! {
            r = changes.recv() => match r {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            r = offered.changed() => if r.is_err() { return },
        }
        tokio::time::sleep(DEBOUNCE).await;
        while !changes.is_empty() {
            let _ = changes.try_recv();
        }
        offered.borrow_and_update();
        let Some(engine) = shared.engine() else { return };
        let namespaces: Vec<String> = {
            let mut w = shared.lock();
            w.peers.retain(|_, peers| {
                peers.retain(|p| !p.is_transport_closed());
                !peers.is_empty()
            });
            let Watch { peers, names, .. } = &mut *w;
            names.retain(|ns, _| peers.contains_key(ns));
            peers.keys().cloned().collect()
        };
        for ns in namespaces {
            let now = Listed::of(&engine, &ns);
            let (before, peers) = {
                let mut w = shared.lock();
                if w.names.get(&ns) == Some(&now) {
                    continue;
                }
                let before = w.names.insert(ns.clone(), now.clone()).unwrap_or_default();
                (before, w.peers.get(&ns).cloned().unwrap_or_default())
            };
            tracing::debug!(namespace = %ns, sessions = peers.len(), "what the MCP endpoint lists changed");
            for peer in peers {
                if let Err(e) = now.tell(&before, &peer).await {
                    tracing::debug!(namespace = %ns, error = %e, "cannot tell an MCP session that its lists changed");
                }
            }
        }
    }
}

/// One MCP session of the endpoint.
#[derive(Clone)]
struct Endpoint {
    shared: Arc<Shared>,
}

impl Endpoint {
    fn engine(&self) -> Result<Arc<Engine>, ErrorData> {
        self.shared.engine().ok_or_else(|| ErrorData::internal_error("the host is starting or stopping", None))
    }
}

/// The MCP session of the HTTP request behind `ctx` (its `Mcp-Session-Id`).
fn session_of(ctx: &RequestContext<RoleServer>) -> String {
    let parts = ctx.extensions.get::<axum::http::request::Parts>();
    let id = parts.and_then(|p| p.headers.get("mcp-session-id")).and_then(|v| v.to_str().ok());
    id.unwrap_or_default().to_string()
}

/// The namespace of the HTTP request behind `ctx`.
fn namespace(ctx: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
    let query = ctx.extensions.get::<axum::http::request::Parts>().and_then(|p| p.uri.query());
    namespace_of(query).map_err(|m| ErrorData::invalid_params(m, None))
}

impl rmcp::ServerHandler for Endpoint {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("steward", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Steward's tools for one namespace (?namespace=, default `default`): the tools of its healthy \
                 MCPServers as x_<server>_<tool>, each ready Workflow as workflow_<name>, and core_* tools to \
                 inspect and trigger what Steward manages. By default (api.mcp.tools: meta) tools/list names \
                 muster's meta-tools instead: find a tool with filter_tools or list_tools, read it with \
                 describe_tool, and call it with call_tool. The servers' prompts are x_<server>_<prompt>; their \
                 resources and templates are listed as they are.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&MAX_PROTOCOL))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let ns = namespace(&context)?;
        let engine = self.engine()?;
        context.peer.set_peer_info(request.clone());
        self.shared.register(ns, context.peer.clone(), &engine);
        rmcp::ServerHandler::negotiate_initialize(self, &request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let ns = namespace(&context)?;
        let engine = self.engine()?;
        Ok(ListToolsResult::with_all_items(super::meta::list(&engine, &ns, &engine.config().api.mcp)))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let (ns, engine) = (namespace(&context)?, self.engine()?);
        Ok(ListPromptsResult::with_all_items(prompts::list(&engine, &ns).into_iter().map(|e| e.prompt).collect()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let ns = namespace(&context)?;
        let engine = self.engine()?;
        prompts::get(&engine, &ns, &request.name, request.arguments, context.ct).await.map(GetPromptResponse::Complete)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let (ns, engine) = (namespace(&context)?, self.engine()?);
        let listing = resources::list(&engine, &ns);
        Ok(ListResourcesResult::with_all_items(listing.resources.into_iter().map(|e| e.item).collect()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let (ns, engine) = (namespace(&context)?, self.engine()?);
        let listing = resources::list(&engine, &ns);
        Ok(ListResourceTemplatesResult::with_all_items(listing.templates.into_iter().map(|e| e.item).collect()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let ns = namespace(&context)?;
        let engine = self.engine()?;
        resources::read(&engine, &ns, &request.uri, context.ct).await.map(ReadResourceResponse::Complete)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (ns, session) = (namespace(&context)?, session_of(&context));
        let subs = self.shared.subscriptions.clone();
        subs.subscribe(&self.engine()?, &ns, &request.uri, session, context.peer.clone()).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (ns, session, engine) = (namespace(&context)?, session_of(&context), self.engine()?);
        self.shared.subscriptions.unsubscribe(&engine, &ns, &request.uri, &session).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ns = namespace(&context)?;
        let engine = self.engine()?;
        let route = Direct { endpoint: self, namespace: &ns, context: &context };
        let settings = &engine.config().api.mcp;
        let ctx = super::meta::Ctx { engine: &engine, namespace: &ns, settings, request: &context, route: &route };
        let arguments = request.arguments.unwrap_or_default();
        super::meta::call(&ctx, &request.name, arguments).await.map(CallToolResponse::Complete)
    }

    /// The requests rmcp does not model, renamed by [`tasks::wire::rename`]: `tools/list` (its
    /// tools whole, `execution` included), a task-augmented `tools/call`, and `tasks/…`.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let unknown = || ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, "method not found", None);
        let method = request.method.strip_prefix(tasks::wire::PREFIX).ok_or_else(unknown)?;
        let (ns, engine) = (namespace(&context)?, self.engine()?);
        if method == "tools/list" {
            return Ok(CustomResult(tool_list(&engine, &ns)));
        }
        let params = match request.params {
            Some(serde_json::Value::Object(p)) => p,
            None | Some(serde_json::Value::Null) => serde_json::Map::new(),
            Some(_) => {
                return Err(ErrorData::invalid_params(format!("the params of {method} are not an object"), None));
            }
        };
        let asked = tasks::Asked { engine: &engine, namespace: &ns, session: session_of(&context), context: &context };
        tasks::answer(&self.shared.tasks, &asked, method, params).await.map(CustomResult)
    }
}

/// The `tools/list` result of `namespace`: each tool as [`super::meta::list`] gives it, with
/// the fields of a server's tool that rmcp does not model (its `execution`) put back.
fn tool_list(engine: &Engine, namespace: &str) -> serde_json::Value {
    let listed = super::meta::list(engine, namespace, &engine.config().api.mcp);
    let offered = super::catalog::build(engine, namespace);
    let tools: Vec<serde_json::Value> = listed
        .iter()
        .map(|t| super::catalog::shown(t, offered.get(&t.name).and_then(|e| super::catalog::extras(engine, e))))
        .collect();
    serde_json::json!({ "tools": tools })
}

/// A client's call of a real tool: what a direct `tools/call` does, for [`super::meta`] to use
/// for `tools/call` and `call_tool` alike.
struct Direct<'a> {
    endpoint: &'a Endpoint,
    namespace: &'a str,
    context: &'a RequestContext<RoleServer>,
}

#[async_trait::async_trait]
impl super::meta::Route for Direct<'_> {
    async fn route(&self, tool: &str, arguments: rmcp::model::JsonObject) -> Result<CallToolResult, ErrorData> {
        let (ns, context) = (self.namespace, self.context);
        let call = RoutedCall {
            caller: ObjectKey::new(ENDPOINT_CALLER_KIND, ns, "mcp"),
            id: format!("{:016x}", fastrand::u64(..)),
            tool: tool.to_string(),
            arguments,
            timeout: CALL_TIMEOUT,
            host_stop: CancellationToken::new(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<super::workflow::Progress>();
        let forward = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                while let Some(p) = rx.recv().await {
                    let mut param = ProgressNotificationParam::new(token.clone(), p.done);
                    param.total = p.total;
                    param.message = p.message;
                    let _ = peer.notify_progress(param).await;
                }
            })
        });
        let asker = crate::services::Asker { peer: context.peer.clone(), request: context.id.clone() };
        let answer = crate::services::asking(
            asker,
            self.endpoint.shared.aggregator.call_with_progress(&call, context.ct.clone(), Some(&tx)),
        )
        .await;
        drop(tx);
        if let Some(f) = forward {
            // Every progress sent before the answer reaches the client before it.
            let _ = f.await;
        }
        match answer {
            Ok(v) => serde_json::from_value::<CallToolResult>(v)
                .map_err(|e| ErrorData::internal_error(format!("the tool's answer cannot be read: {e}"), None)),
            Err(CallError::NotOffered(m)) | Err(CallError::Refused(m)) => Err(ErrorData::invalid_params(m, None)),
            Err(e @ (CallError::Transport(_) | CallError::Timeout(_) | CallError::Cancelled)) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(format!("{} failed: {e}", call.tool))]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_comes_from_the_query() {
        let table: &[(Option<&str>, Result<&str, &str>)] = &[
            (None, Ok("default")),
            (Some(""), Ok("default")),
            (Some("namespace=team-a"), Ok("team-a")),
            (Some("x=1&namespace=b"), Ok("b")),
            (Some("namespace=Team"), Err("not valid")),
            (Some("namespace="), Err("not valid")),
            (Some("namespace=a&namespace=b"), Err("twice")),
        ];
        for (query, want) in table {
            match (namespace_of(*query), want) {
                (Ok(ns), Ok(w)) => assert_eq!(&ns, w, "{query:?}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{query:?}: {e}"),
                (got, want) => panic!("{query:?}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
