//! The HTTP API: health, readiness, metrics, status, triggers, plugins and kinds, as JSON with camelCase fields.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::engine::{Engine, RequestError};
use crate::model::ObjectKey;

/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// Where the API finds the engine: empty while the host is still starting.
pub type EngineSlot = Arc<OnceLock<Arc<Engine>>>;

/// Shared state of the handlers.
#[derive(Clone)]
struct Api {
    engine: EngineSlot,
    token: Option<Arc<str>>,
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

/// A JSON error body: `{"error": "..."}`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message.into() }))).into_response()
}

/// The router over a started engine; see [`router_for`].
pub fn router(engine: Arc<Engine>, token: Option<String>) -> Router {
    let slot: EngineSlot = Arc::new(OnceLock::new());
    let _ = slot.set(engine);
    router_for(slot, token)
}

/// The router. Engine routes answer 503 until the slot is filled; `/healthz` answers
/// from the start. With a `token`, every route but `/healthz`, `/readyz` and `/metrics`
/// needs `Authorization: Bearer <token>`.
pub fn router_for(engine: EngineSlot, token: Option<String>) -> Router {
    let state = Api { engine, token: token.map(Into::into) };
    let protected = Router::new()
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/resources", get(resources))
        .route("/api/v1/resources/{kind}/{namespace}/{name}", get(resource))
        .route("/api/v1/resources/{kind}/{namespace}/{name}/reconcile", post(trigger))
        .route("/api/v1/plugins", get(plugins))
        .route("/api/v1/kinds/{kind}/{action}", post(kind_switch))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(protected)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route; see /api/v1/overview") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn auth(State(api): State<Api>, req: Request, next: Next) -> Response {
    if let Some(token) = &api.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
            let mut r = error(StatusCode::UNAUTHORIZED, "this route needs `Authorization: Bearer <token>`");
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn readyz(State(api): State<Api>) -> Response {
    if api.engine.get().is_some_and(|e| e.is_ready()) {
        "ready".into_response()
    } else {
        error(StatusCode::SERVICE_UNAVAILABLE, "not ready: plugins or the first full scan are still loading")
    }
}

/// What a handler returns: the answer, or an error response (so handlers can use `?`).
type Answer = Result<Response, Response>;

async fn metrics(State(api): State<Api>) -> Answer {
    let text = api.engine()?.render_metrics();
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response())
}

async fn overview(State(api): State<Api>) -> Answer {
    Ok(axum::Json(api.engine()?.overview()).into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    kind: Option<String>,
}

async fn resources(State(api): State<Api>, Query(q): Query<ListQuery>) -> Answer {
    Ok(axum::Json(api.engine()?.views(q.kind.as_deref())).into_response())
}

#[allow(clippy::result_large_err)]
fn key_from(kind: &str, namespace: &str, name: &str) -> Result<ObjectKey, Response> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            && !s.starts_with('.')
    };
    if !ok(kind) || !ok(namespace) || !ok(name) {
        return Err(error(StatusCode::BAD_REQUEST, "kind, namespace and name must be DNS-1123 names"));
    }
    Ok(ObjectKey::new(kind, namespace, name))
}

async fn resource(State(api): State<Api>, Path((kind, namespace, name)): Path<(String, String, String)>) -> Answer {
    let key = key_from(&kind, &namespace, &name)?;
    match api.engine()?.view(&key) {
        Some(v) => Ok(axum::Json(v).into_response()),
        None => Err(error(StatusCode::NOT_FOUND, format!("no object {key}"))),
    }
}

async fn trigger(State(api): State<Api>, Path((kind, namespace, name)): Path<(String, String, String)>) -> Answer {
    let key = key_from(&kind, &namespace, &name)?;
    match api.engine()?.trigger(&key) {
        Ok(()) => {
            Ok((StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "queued": key.to_string() }))).into_response())
        }
        Err(e @ RequestError::NotFound(_)) => Err(error(StatusCode::NOT_FOUND, e.to_string())),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, e.to_string())),
    }
}

async fn plugins(State(api): State<Api>) -> Answer {
    Ok(axum::Json(api.engine()?.plugins().statuses()).into_response())
}

async fn kind_switch(State(api): State<Api>, Path((kind, action)): Path<(String, String)>) -> Answer {
    let enabled = match action.as_str() {
        "enable" => true,
        "disable" => false,
        other => return Err(error(StatusCode::NOT_FOUND, format!("unknown action `{other}`; use enable or disable"))),
    };
    match api.engine()?.set_kind_enabled(&kind, enabled).await {
        Ok(()) => Ok(axum::Json(serde_json::json!({ "kind": kind, "enabled": enabled })).into_response()),
        Err(e) => Err(error(StatusCode::NOT_FOUND, e.to_string())),
    }
}

/// Binds `addr` and serves the API until `shutdown` resolves.
pub async fn serve(
    engine: Arc<Engine>,
    addr: SocketAddr,
    token: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "API listening");
    axum::serve(listener, router(engine, token)).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn while_starting_health_answers_and_the_rest_is_503() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slot: EngineSlot = Default::default();
        tokio::spawn(axum::serve(listener, router_for(slot, None)).into_future());
        let client = crate::client::Client::new(&format!("http://{addr}"), None);
        for path in ["/readyz", "/metrics", "/api/v1/overview", "/api/v1/resources"] {
            let err = client.get(path).await.unwrap_err().to_string();
            assert!(err.starts_with("503") && (err.contains("starting") || err.contains("not ready")), "{path}: {err}");
        }
        // /healthz is plain text "ok": the JSON client reports it as a non-JSON body, not an error status.
        let health = client.get("/healthz").await.unwrap_err().to_string();
        assert!(health.contains("not JSON: ok"), "{health}");
    }
}
