//! A small HTTP client of the Steward API, for the CLI's client commands.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

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

    /// GETs `path` and parses the JSON answer.
    pub async fn get(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        self.send(Method::GET, path).await
    }

    /// POSTs to `path` (no body) and parses the JSON answer.
    pub async fn post(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        self.send(Method::POST, path).await
    }

    async fn send(&self, method: Method, path: &str) -> Result<serde_json::Value, ClientError> {
        let url = format!("{}{}", self.base, path);
        let mut req = Request::builder().method(method).uri(&url);
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::new()))
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
            let message = json["error"].as_str().unwrap_or("request failed").to_string();
            return Err(ClientError::Status { status, message });
        }
        Ok(json)
    }
}
