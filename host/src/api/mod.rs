//! The HTTP API: health, readiness, metrics, status, triggers, plugins and kinds, as JSON with camelCase fields.
//!
//! Beside the JSON routes: `events` (the server-sent event stream) and `page` (the live status page).

mod create;
mod events;
pub mod oauth;
mod page;

pub use create::{CreateBody, Created, Deleted};
pub use events::{KEEP_ALIVE, ObjectEvent, OverviewEvent, ResyncEvent};

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, RequestError};
use crate::model::{ObjectKey, is_dns_subdomain, is_kind, is_object_name};

/// Largest request body accepted. No route takes a body: one is read (up to this) only to
/// refuse it with a clear message, since a client sending one expects it to mean something.
pub const MAX_BODY: usize = 64 * 1024;

/// Where the API finds the engine: empty while the host is still starting.
pub type EngineSlot = Arc<OnceLock<Arc<Engine>>>;

/// Shared state of the handlers.
#[derive(Clone)]
struct Api {
    engine: EngineSlot,
    token: Option<Arc<str>>,
    /// The issuers named in `/mcp`'s protected-resource metadata (`api.mcp.authorization_servers`).
    authorization_servers: Arc<[String]>,
    /// Cancelled when the host starts shutting down: open event streams end then.
    closing: CancellationToken,
}

impl Api {
    /// The engine, or a 503 while the host is starting.
    #[allow(clippy::result_large_err)]
    fn engine(&self) -> Result<&Arc<Engine>, Response> {
        self.engine
            .get()
            .ok_or_else(|| error(StatusCode::SERVICE_UNAVAILABLE, "starting: plugins and resources are still loading"))
    }
}

/// The body of every error answer: `{"error": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong, naming the object, kind or setting concerned.
    pub error: String,
}

/// The answer to a trigger (`POST /api/v1/resources/{kind}/{namespace}/{name}/reconcile`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queued {
    /// The key queued, as `KIND/NAMESPACE/NAME`.
    pub queued: String,
}

/// The answer to `POST /api/v1/kinds/{kind}/{enable|disable}`: the kind's state now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindState {
    /// The kind.
    pub kind: String,
    /// Whether its objects are reconciled.
    pub enabled: bool,
}

/// A JSON error answer with `status`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(ErrorBody { error: message.into() })).into_response()
}

/// The router over a started engine; see [`router_for`].
pub fn router(engine: Arc<Engine>, token: Option<String>) -> Router {
    let slot: EngineSlot = Arc::new(OnceLock::new());
    let _ = slot.set(engine);
    router_for(slot, token)
}

/// The router. Engine routes answer 503 until the slot is filled; `/healthz` and the page's
/// files answer from the start. With a `token`, every route but `/healthz`, `/readyz`,
/// `/metrics` and the page's files (`/`, `/app.css`, `/app.js`, which hold no data) needs
/// `Authorization: Bearer <token>`; the event stream too (the page sends the header).
pub fn router_for(engine: EngineSlot, token: Option<String>) -> Router {
    router_until(engine, token, CancellationToken::new())
}

/// [`router_for`], whose open event streams (`/api/v1/events`, which the page holds open) end
/// as soon as `closing` is cancelled, so a server's graceful shutdown is not held up by them.
pub fn router_until(engine: EngineSlot, token: Option<String>, closing: CancellationToken) -> Router {
    let sessions = crate::mcp::sessions::CappedSessions::new(
        crate::config::DEFAULT_MCP_MAX_SESSIONS,
        &crate::metrics::http::HttpMetrics::default(),
    );
    router_with(engine, token, closing, Arc::new(sessions))
}

/// [`router_until`] whose `/mcp` keeps its sessions in `sessions` (which caps them: the host's
/// `api.mcp_max_sessions`).
pub fn router_with(
    engine: EngineSlot,
    token: Option<String>,
    closing: CancellationToken,
    sessions: Arc<crate::mcp::sessions::CappedSessions>,
) -> Router {
    router_with_oauth(engine, token, Vec::new(), closing, sessions)
}

/// [`router_with`] whose `/mcp` names `authorization_servers` in its protected-resource metadata
/// (RFC 9728). With a `token`, a 401 from `/mcp` carries `WWW-Authenticate: Bearer
/// resource_metadata="<base>/.well-known/oauth-protected-resource/mcp"`, and that path (and
/// `/.well-known/oauth-protected-resource`) answers the metadata without a token; without a
/// token neither is served (no request is refused for want of one).
pub fn router_with_oauth(
    engine: EngineSlot,
    token: Option<String>,
    authorization_servers: Vec<String>,
    closing: CancellationToken,
    sessions: Arc<crate::mcp::sessions::CappedSessions>,
) -> Router {
    let serves_metadata = token.is_some();
    let state =
        Api { engine, token: token.map(Into::into), authorization_servers: authorization_servers.into(), closing };
    let protected = Router::new()
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/resources", get(resources))
        .route("/api/v1/resources/{kind}/{namespace}/{name}", get(resource).delete(create::delete))
        .route("/api/v1/resources/{kind}/{namespace}/{name}/spec", get(spec))
        .route("/api/v1/resources/{kind}/{namespace}/{name}/events", get(object_events))
        .route("/api/v1/resources/{kind}/{namespace}/{name}/reconcile", post(trigger))
        .route("/api/v1/events", get(events::events))
        .route("/api/v1/plugins", get(plugins))
        .route("/api/v1/kinds/{kind}/{action}", post(kind_switch))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(page::index))
        .route("/app.css", get(page::css))
        .route("/app.js", get(page::js))
        .merge(protected)
        .merge(if serves_metadata {
            Router::new()
                .route(oauth::METADATA_PATH, get(oauth::metadata))
                .route(oauth::METADATA_ROOT, get(oauth::metadata))
        } else {
            Router::new()
        })
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route; see /api/v1/overview") })
        .method_not_allowed_fallback(|method: Method| async move {
            error(StatusCode::METHOD_NOT_ALLOWED, format!("method {method} is not allowed on this route"))
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(no_body))
        .with_state(state.clone())
        // Creating takes a JSON body, so it is merged after the no-body rule; same token rule.
        .merge(
            Router::new()
                .route("/api/v1/resources/{kind}/{namespace}", post(create::create))
                .route_layer(middleware::from_fn_with_state(state.clone(), auth))
                .layer(DefaultBodyLimit::max(MAX_BODY))
                .with_state(state.clone()),
        )
        // The MCP endpoint takes request bodies, so it is merged after the no-body rule; same token rule.
        .merge(
            crate::mcp::server::router_with(state.engine.clone(), state.token.is_some(), sessions)
                .route_layer(middleware::from_fn_with_state(state, auth)),
        )
}

/// Refuses a request body: 413 past [`MAX_BODY`] (by its declared length, before reading it),
/// 400 for anything but nothing, `{}` or `null` (which some clients always send).
async fn no_body(req: Request, next: Next) -> Response {
    let too_large = |len: Option<u64>| {
        let size = len.map_or_else(String::new, |n| format!(" of {n} bytes"));
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body{size} is larger than the limit of {MAX_BODY} bytes; no route of this API takes a body"
            ),
        )
    };
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY as u64) {
        return too_large(Some(n));
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if s.is::<http_body_util::LengthLimitError>() {
                    return too_large(None);
                }
                source = s.source();
            }
            return error(StatusCode::BAD_REQUEST, format!("the request body could not be read: {e}"));
        }
    };
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("the request body is not valid JSON ({e}); no route of this API takes a body: send none"),
                );
            }
            Ok(serde_json::Value::Null) => {}
            Ok(serde_json::Value::Object(m)) if m.is_empty() => {}
            Ok(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "no route of this API takes a request body, and this one has {} bytes: send none",
                        bytes.len()
                    ),
                );
            }
        }
    }
    next.run(Request::from_parts(parts, Body::empty())).await
}

async fn auth(State(api): State<Api>, req: Request, next: Next) -> Response {
    if api.token.is_none()
        && let Some(host) = req.headers().get(header::HOST).and_then(|v| v.to_str().ok())
        && !is_loopback_host(host)
    {
        // Without a token the API listens on loopback only; a browser page whose name was
        // rebound to 127.0.0.1 would still send its own name: refuse it (DNS rebinding).
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "this API has no token, so it answers only requests addressed to a loopback name \
                 (127.0.0.1, localhost, [::1]), not {}; set api.token_file to reach it by another name",
                shown(host)
            ),
        );
    }
    if let Some(token) = &api.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
            let mut r = error(StatusCode::UNAUTHORIZED, "this route needs `Authorization: Bearer <token>`");
            let challenge = if req.uri().path() == crate::mcp::server::PATH {
                oauth::challenge(req.headers())
            } else {
                HeaderValue::from_static("Bearer")
            };
            r.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
            return r;
        }
    }
    next.run(req).await
}

/// Whether an HTTP `Host` value (`name[:port]`) names this machine's loopback.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(n, port)| if port.parse::<u16>().is_ok() { n } else { host }),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn readyz(State(api): State<Api>) -> Response {
    match api.engine.get().map(|e| e.readiness()) {
        Some(Ok(())) => "ready".into_response(),
        Some(Err(why)) => error(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "not ready: plugins or the first full scan are still loading"),
    }
}

/// What a handler returns: the answer, or an error response (so handlers can use `?`).
type Answer = Result<Response, Response>;

/// `/metrics`: OpenMetrics when the scraper's `Accept` prefers it, else the classic Prometheus
/// text format 0.0.4 (as Prometheus negotiates).
async fn metrics(State(api): State<Api>, headers: axum::http::HeaderMap) -> Answer {
    use crate::metrics::classic;
    let text = api.engine()?.render_metrics();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    Ok(if classic::wants_openmetrics(accept) {
        ([(header::CONTENT_TYPE, classic::OPENMETRICS)], text).into_response()
    } else {
        ([(header::CONTENT_TYPE, classic::CLASSIC)], classic::to_classic(&text)).into_response()
    })
}

async fn overview(State(api): State<Api>) -> Answer {
    Ok(axum::Json(api.engine()?.overview()).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    kind: Option<String>,
}

async fn resources(State(api): State<Api>, q: Result<Query<ListQuery>, QueryRejection>) -> Answer {
    let Query(q) =
        q.map_err(|e| error(StatusCode::BAD_REQUEST, format!("the query is not valid: {}", e.body_text())))?;
    let engine = api.engine()?;
    let Some(kind) = q.kind else { return Ok(axum::Json(engine.views(None)).into_response()) };
    check_kind(&kind)?;
    let views = engine.views(Some(&kind));
    let served = engine.plugins().plugins().iter().any(|p| p.info().kinds.iter().any(|k| k.kind == kind));
    if views.is_empty() && !served {
        return Err(error(StatusCode::NOT_FOUND, format!("no kind {kind}: no plugin serves it and no object has it")));
    }
    Ok(axum::Json(views).into_response())
}

const DNS_RULE: &str = "expected lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";
const KIND_RULE: &str = "expected CamelCase letters and digits starting with an upper-case letter, at most 63";

/// A value quoted for a message: escaped, and cut when long.
fn shown(s: &str) -> String {
    let mut v: String = s.chars().take(64).collect();
    if v.len() < s.len() {
        v.push('…');
    }
    format!("\"{}\"", v.escape_debug())
}

#[allow(clippy::result_large_err)]
fn check_kind(kind: &str) -> Result<(), Response> {
    if is_kind(kind) {
        Ok(())
    } else {
        Err(error(StatusCode::BAD_REQUEST, format!("kind {} is not valid: {KIND_RULE}", shown(kind))))
    }
}

#[allow(clippy::result_large_err)]
fn key_from(kind: &str, namespace: &str, name: &str) -> Result<ObjectKey, Response> {
    check_kind(kind)?;
    if !is_dns_subdomain(namespace) {
        return Err(error(StatusCode::BAD_REQUEST, format!("namespace {} is not valid: {DNS_RULE}", shown(namespace))));
    }
    // A name may hold '_' in filesystem mode (as muster's may); Kubernetes mode has no such object.
    if !is_object_name(name) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("name {} is not valid: {DNS_RULE} (or '_' in filesystem mode)", shown(name)),
        ));
    }
    Ok(ObjectKey::new(kind, namespace, name))
}

/// The path's parameters, or a 400 that names the one that cannot be read (not UTF-8, say).
#[allow(clippy::result_large_err)]
fn path_params<T>(p: Result<Path<T>, PathRejection>) -> Result<T, Response> {
    match p {
        Ok(Path(v)) => Ok(v),
        Err(PathRejection::FailedToDeserializePathParams(e)) => match e.kind() {
            axum::extract::path::ErrorKind::InvalidUtf8InPathParam { key } => {
                Err(error(StatusCode::BAD_REQUEST, format!("the {key} in the URL is not valid UTF-8")))
            }
            _ => Err(error(StatusCode::BAD_REQUEST, format!("the URL is not valid: {}", e.body_text()))),
        },
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("the URL is not valid: {}", e.body_text()))),
    }
}

type KeyPath = Result<Path<(String, String, String)>, PathRejection>;

async fn resource(State(api): State<Api>, p: KeyPath) -> Answer {
    let (kind, namespace, name) = path_params(p)?;
    let key = key_from(&kind, &namespace, &name)?;
    match api.engine()?.view(&key) {
        Some(v) => Ok(axum::Json(v).into_response()),
        None => Err(error(StatusCode::NOT_FOUND, format!("no object {key}"))),
    }
}

/// `GET .../events`: the events this host recorded about the object since it started, oldest
/// first, in both modes; they outlive the object (a finalized object's last is `Finalized`).
async fn object_events(State(api): State<Api>, p: KeyPath) -> Answer {
    let (kind, namespace, name) = path_params(p)?;
    let key = key_from(&kind, &namespace, &name)?;
    Ok(axum::Json(api.engine()?.events_of(&key)).into_response())
}

/// `GET .../spec`: the object's spec as its source holds it now (404 once it left its source).
async fn spec(State(api): State<Api>, p: KeyPath) -> Answer {
    let (kind, namespace, name) = path_params(p)?;
    let key = key_from(&kind, &namespace, &name)?;
    let Some(obj) = api.engine()?.cached(&key) else {
        return Err(error(StatusCode::NOT_FOUND, format!("no object {key} in the source")));
    };
    let spec: serde_json::Value = serde_json::from_str(&obj.raw.spec)
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("the spec of {key} is not JSON: {e}")))?;
    Ok(axum::Json(spec).into_response())
}

async fn trigger(State(api): State<Api>, p: KeyPath) -> Answer {
    let (kind, namespace, name) = path_params(p)?;
    let key = key_from(&kind, &namespace, &name)?;
    match api.engine()?.trigger(&key) {
        Ok(()) => Ok((StatusCode::ACCEPTED, axum::Json(Queued { queued: key.to_string() })).into_response()),
        Err(e @ RequestError::NotFound(_)) => Err(error(StatusCode::NOT_FOUND, e.to_string())),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, e.to_string())),
    }
}

async fn plugins(State(api): State<Api>) -> Answer {
    Ok(axum::Json(api.engine()?.plugins().statuses()).into_response())
}

async fn kind_switch(State(api): State<Api>, p: Result<Path<(String, String)>, PathRejection>) -> Answer {
    let (kind, action) = path_params(p)?;
    check_kind(&kind)?;
    let enabled = match action.as_str() {
        "enable" => true,
        "disable" => false,
        other => return Err(error(StatusCode::NOT_FOUND, format!("unknown action `{other}`; use enable or disable"))),
    };
    match api.engine()?.set_kind_enabled(&kind, enabled).await {
        Ok(()) => Ok(axum::Json(KindState { kind, enabled }).into_response()),
        Err(e) => Err(error(StatusCode::NOT_FOUND, e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        for ok in ["127.0.0.1:7878", "127.0.0.1", "localhost:7878", "LOCALHOST", "[::1]:7878", "127.9.9.9:1"] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for no in ["evil.example:7878", "10.0.0.1:7878", "localhost.evil.example", "[2001:db8::1]:80", "0.0.0.0:7878"] {
            assert!(!is_loopback_host(no), "{no}");
        }
    }

    #[tokio::test]
    async fn while_starting_health_answers_and_the_rest_is_503() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slot: EngineSlot = Default::default();
        tokio::spawn(axum::serve(listener, router_for(slot, None)).into_future());
        let client = crate::client::Client::new(&format!("http://{addr}"), None);
        for path in ["/readyz", "/metrics", "/api/v1/overview", "/api/v1/resources", "/api/v1/events"] {
            let err = client.get(path).await.unwrap_err().to_string();
            assert!(err.starts_with("503") && (err.contains("starting") || err.contains("not ready")), "{path}: {err}");
        }
        // /healthz is plain text "ok": the JSON client reports it as a non-JSON body, not an error status.
        let health = client.get("/healthz").await.unwrap_err().to_string();
        assert!(health.contains("not JSON: ok"), "{health}");
        // The page loads at once, and retries the event stream until the API answers.
        let page = client.get("/").await.unwrap_err().to_string();
        assert!(page.contains("not JSON") && page.contains("<title>Steward</title>"), "{page}");
    }
}
