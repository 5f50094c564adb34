//! A small HTTP client of the Steward API that reads its answers into the API's own types.

mod views;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

pub use views::PluginView;

use crate::api::{ErrorBody, KindState, Queued};
use crate::engine::ResourceView;
use crate::model::ObjectKey;

/// Why a request failed, said so a user knows what to check.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answered.
    #[error("cannot reach the Steward API at {url}: {message}; is `steward run` running, and is --api right?")]
    Unreachable {
        /// The URL.
        url: String,
        /// The transport error.
        message: String,
    },
    /// The API said no.
    #[error("{status}: {message}")]
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// The API's error message.
        message: String,
    },
    /// The answer was not JSON.
    #[error("the API answered with something that is not JSON: {0}")]
    Body(String),
    /// The answer was JSON, but not of the shape this client knows (a field missing, unknown,
    /// or of another type): most likely the host is another version of Steward.
    #[error(
        "the API's answer to {path} is not what this steward expects: {message}; is the host the same version of Steward as this command?"
    )]
    Shape {
        /// The request path.
        path: String,
        /// What does not fit, as serde says it (with the field's name).
        message: String,
    },
}

/// Reads `answer`, the API's JSON answer to `path`, as a `T`; an answer of another shape is a
/// [`ClientError::Shape`] naming the path and the field, never a panic.
pub fn decode<T: DeserializeOwned>(path: &str, answer: serde_json::Value) -> Result<T, ClientError> {
    serde_json::from_value(answer).map_err(|e| ClientError::Shape { path: path.to_string(), message: e.to_string() })
}

/// A client of one API base URL (for example `http://127.0.0.1:7878`).
pub struct Client {
    base: String,
    token: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    /// A client of `base`, sending `token` as a bearer token when given.
    pub fn new(base: &str, token: Option<String>) -> Self {
        let http = HyperClient::builder(TokioExecutor::new()).build_http();
        Self { base: base.trim_end_matches('/').to_string(), token, http }
    }

    /// The host's own conditions (`conditions` of `GET /api/v1/overview`), sorted by type.
    pub async fn host_conditions(&self) -> Result<Vec<crate::health::HostCondition>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Conditions {
            #[serde(default)]
            conditions: Vec<crate::health::HostCondition>,
        }
        Ok(self.get_as::<Conditions>("/api/v1/overview").await?.conditions)
    }

    /// Every object (`GET /api/v1/resources`), or those of `kind`, sorted by key.
    pub async fn resources(&self, kind: Option<&str>) -> Result<Vec<ResourceView>, ClientError> {
        let path = match kind {
            Some(kind) => format!("/api/v1/resources?kind={kind}"),
            None => "/api/v1/resources".to_string(),
        };
        self.get_as(&path).await
    }

    /// One object (`GET /api/v1/resources/{kind}/{namespace}/{name}`).
    pub async fn resource(&self, key: &ObjectKey) -> Result<ResourceView, ClientError> {
        self.get_as(&resource_path(key)).await
    }

    /// Queues `key` for a reconcile now (`POST .../reconcile`); also retries a `Failed` object.
    pub async fn trigger(&self, key: &ObjectKey) -> Result<Queued, ClientError> {
        let path = format!("{}/reconcile", resource_path(key));
        decode(&path, self.post(&path).await?)
    }

    /// Every plugin file and its state (`GET /api/v1/plugins`).
    pub async fn plugins(&self) -> Result<Vec<PluginView>, ClientError> {
        self.get_as("/api/v1/plugins").await
    }

    /// Enables or disables reconciling `kind` (`POST /api/v1/kinds/{kind}/{enable|disable}`).
    pub async fn set_kind_enabled(&self, kind: &str, enabled: bool) -> Result<KindState, ClientError> {
        let path = format!("/api/v1/kinds/{kind}/{}", if enabled { "enable" } else { "disable" });
        decode(&path, self.post(&path).await?)
    }

    /// Creates an object of `kind` in `namespace` (`POST /api/v1/resources/{kind}/{namespace}`).
    pub async fn create(
        &self,
        kind: &str,
        namespace: &str,
        body: &crate::api::CreateBody,
    ) -> Result<crate::api::Created, ClientError> {
        let path = format!("/api/v1/resources/{kind}/{namespace}");
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Body(e.to_string()))?;
        decode(&path, self.send_body(Method::POST, &path, Bytes::from(bytes)).await?)
    }

    /// Deletes `key` (`DELETE /api/v1/resources/{kind}/{namespace}/{name}`); its finalize follows.
    pub async fn delete(&self, key: &ObjectKey) -> Result<crate::api::Deleted, ClientError> {
        let path = resource_path(key);
        decode(&path, self.send(Method::DELETE, &path).await?)
    }

    /// The spec of `key` as its source holds it (`GET .../spec`).
    pub async fn spec(&self, key: &ObjectKey) -> Result<serde_json::Value, ClientError> {
        self.get(&format!("{}/spec", resource_path(key))).await
    }

    async fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        decode(path, self.get(path).await?)
    }

    /// GETs `path` and parses the JSON answer.
    pub async fn get(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        self.send(Method::GET, path).await
    }

    /// POSTs to `path` (no body) and parses the JSON answer.
    pub async fn post(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        self.send(Method::POST, path).await
    }

    async fn send(&self, method: Method, path: &str) -> Result<serde_json::Value, ClientError> {
        self.send_body(method, path, Bytes::new()).await
    }

    async fn send_body(&self, method: Method, path: &str, body: Bytes) -> Result<serde_json::Value, ClientError> {
        let url = format!("{}{}", self.base, path);
        let mut req = Request::builder().method(method).uri(&url);
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if !body.is_empty() {
            req = req.header("content-type", "application/json");
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| ClientError::Unreachable { url: url.clone(), message: e.to_string() })?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| ClientError::Unreachable { url: url.clone(), message: e.to_string() })?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Unreachable { url: url.clone(), message: e.to_string() })?
            .to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| ClientError::Body(String::from_utf8_lossy(&body).chars().take(200).collect()))?;
        if !status.is_success() {
            let message =
                serde_json::from_value::<ErrorBody>(json).map_or_else(|_| "request failed".to_string(), |b| b.error);
            return Err(ClientError::Status { status, message });
        }
        Ok(json)
    }
}

fn resource_path(key: &ObjectKey) -> String {
    format!("/api/v1/resources/{}/{}/{}", key.kind(), key.namespace(), key.name())
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::{get, post};

    use super::*;

    /// A client of a server answering with `router`.
    async fn client_of(router: Router) -> Client {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(axum::serve(listener, router).into_future());
        Client::new(&format!("http://{addr}/"), None)
    }

    #[tokio::test]
    async fn answers_are_read_into_the_api_types() {
        let client = client_of(
            Router::new()
                .route(
                    "/api/v1/resources/Noop/default/a/reconcile",
                    post(|| async { (StatusCode::ACCEPTED, axum::Json(Queued { queued: "Noop/default/a".into() })) }),
                )
                .route(
                    "/api/v1/kinds/Noop/disable",
                    post(|| async { axum::Json(KindState { kind: "Noop".into(), enabled: false }) }),
                ),
        )
        .await;
        let key = ObjectKey::new("Noop", "default", "a");
        assert_eq!(client.trigger(&key).await.unwrap().queued, "Noop/default/a");
        assert_eq!(
            client.set_kind_enabled("Noop", false).await.unwrap(),
            KindState { kind: "Noop".into(), enabled: false }
        );
    }

    #[tokio::test]
    async fn an_answer_of_another_shape_names_the_path_and_the_field() {
        let client = client_of(
            Router::new()
                .route("/api/v1/resources", get(|| async { axum::Json(serde_json::json!([{"kind": "Noop"}])) }))
                .route("/api/v1/plugins", get(|| async { axum::Json(serde_json::json!({"plugins": []})) })),
        )
        .await;
        let e = client.resources(None).await.unwrap_err();
        assert!(matches!(&e, ClientError::Shape { path, .. } if path == "/api/v1/resources"), "{e}");
        assert!(e.to_string().contains("missing field"), "{e}");
        let e = client.plugins().await.unwrap_err();
        assert!(matches!(&e, ClientError::Shape { path, .. } if path == "/api/v1/plugins"), "{e}");
    }

    #[tokio::test]
    async fn an_error_answer_gives_its_status_and_message() {
        let client = client_of(
            Router::new()
                .route(
                    "/api/v1/resources/Noop/default/ghost",
                    get(|| async {
                        (StatusCode::NOT_FOUND, axum::Json(ErrorBody { error: "no object Noop/default/ghost".into() }))
                    }),
                )
                .route(
                    "/api/v1/resources/Noop/default/odd",
                    get(|| async { (StatusCode::BAD_GATEWAY, axum::Json(serde_json::json!({"why": "proxy"}))) }),
                ),
        )
        .await;
        let e = client.resource(&ObjectKey::new("Noop", "default", "ghost")).await.unwrap_err();
        assert!(matches!(&e, ClientError::Status { status, .. } if *status == StatusCode::NOT_FOUND), "{e}");
        assert_eq!(e.to_string(), "404 Not Found: no object Noop/default/ghost");
        // An error answer without the API's error body still says what happened.
        let e = client.resource(&ObjectKey::new("Noop", "default", "odd")).await.unwrap_err();
        assert_eq!(e.to_string(), "502 Bad Gateway: request failed");
    }
}
