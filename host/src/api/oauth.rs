//! OAuth 2.0 protected-resource metadata for `/mcp` (RFC 9728): the 401's `WWW-Authenticate` points at it, and it names the configured authorization servers.
//!
//! Steward serves the metadata only; it is no authorization server and issues no tokens (the
//! API still takes its one bearer token, `api.token_file`).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::Api;

/// Where the metadata of the `/mcp` resource is served (RFC 9728's well-known path with the
/// resource's path appended).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// The well-known path without the resource's path, served with the same document.
pub const METADATA_ROOT: &str = "/.well-known/oauth-protected-resource";

/// The protected-resource metadata document (RFC 9728, section 2), as served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceMetadata {
    /// The `/mcp` URL as the client reached it (`http://HOST/mcp`, or what a proxy's
    /// `X-Forwarded-Proto`/`X-Forwarded-Host` say).
    pub resource: String,
    /// The issuers of `api.mcp.authorization_servers` (empty when none are configured).
    pub authorization_servers: Vec<String>,
    /// How a token is sent: only in the `Authorization` header.
    pub bearer_methods_supported: Vec<String>,
}

/// `scheme://host` as the client reached this server: `X-Forwarded-Proto` (`http` or `https`)
/// and `X-Forwarded-Host` when a proxy set them, else `http` and the `Host` header. `None` when
/// the host is missing or holds characters a host name or address cannot.
pub fn base_url(headers: &HeaderMap) -> Option<String> {
    let get =
        |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.split(',').next().unwrap_or("").trim());
    let scheme = match get("x-forwarded-proto") {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    let host = get("x-forwarded-host").filter(|h| !h.is_empty()).or_else(|| get(header::HOST.as_str()))?;
    let ok = !host.is_empty()
        && host.len() <= 255
        && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'));
    ok.then(|| format!("{scheme}://{host}"))
}

/// The `WWW-Authenticate` value of a 401 from `/mcp`: `Bearer` with the metadata's URL
/// (`resource_metadata`), or plain `Bearer` when the request names no usable host.
pub fn challenge(headers: &HeaderMap) -> HeaderValue {
    base_url(headers)
        .and_then(|base| HeaderValue::from_str(&format!("Bearer resource_metadata=\"{base}{METADATA_PATH}\"")).ok())
        .unwrap_or_else(|| HeaderValue::from_static("Bearer"))
}

/// Answers the metadata document, without a token (a client reads it to learn how to get one).
pub(super) async fn metadata(State(api): State<Api>, req: Request) -> Response {
    let Some(base) = base_url(req.headers()) else {
        return super::error(
            axum::http::StatusCode::BAD_REQUEST,
            "the request's Host header is missing or not a host name: the resource's URL cannot be told",
        );
    };
    let doc = ResourceMetadata {
        resource: format!("{base}{}", crate::mcp::server::PATH),
        authorization_servers: api.authorization_servers.to_vec(),
        bearer_methods_supported: vec!["header".to_string()],
    };
    axum::Json(doc).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_base_is_what_the_client_reached() {
        assert_eq!(base_url(&headers(&[("host", "127.0.0.1:8080")])).as_deref(), Some("http://127.0.0.1:8080"));
        let proxied = headers(&[
            ("host", "10.0.0.1:8080"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "steward.example.com"),
        ]);
        assert_eq!(base_url(&proxied).as_deref(), Some("https://steward.example.com"));
        assert_eq!(base_url(&headers(&[("host", "[::1]:80")])).as_deref(), Some("http://[::1]:80"));
        assert_eq!(base_url(&headers(&[("host", "a\"b")])), None);
        assert_eq!(base_url(&HeaderMap::new()), None);
        assert_eq!(challenge(&HeaderMap::new()), "Bearer");
        assert_eq!(
            challenge(&headers(&[("host", "localhost:1")])),
            "Bearer resource_metadata=\"http://localhost:1/.well-known/oauth-protected-resource/mcp\""
        );
    }
}
