//! A small blocking HTTP client over the standard `wasi:http/outgoing-handler` (cargo feature `http`, host capability `http`).
//!
//! ```no_run
//! use steward_sdk::http;
//! # fn f() -> Result<(), http::Error> {
//! let resp = http::post("http://127.0.0.1:2379/v3/kv/range")
//!     .header("accept", "application/json")
//!     .json(&serde_json::json!({"key": "Zm9v"}))?
//!     .send()?
//!     .error_for_status()?;
//! let body: serde_json::Value = resp.json()?;
//! # Ok(()) }
//! ```
//!
//! Every request must be allowed by a rule of the plugin's `http` grant in the host config;
//! the host refuses any other before connecting, and [`Error`] then carries the host's words
//! (which rule did not match, which key to change). Requests count against the call's
//! deadline; response bodies are capped by the host.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A request being built; [`Request::send`] makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

/// A `GET` of `url`.
pub fn get(url: impl Into<String>) -> Request {
    Request::new("GET", url)
}

/// A `PUT` to `url`.
pub fn put(url: impl Into<String>) -> Request {
    Request::new("PUT", url)
}

/// A `POST` to `url`.
pub fn post(url: impl Into<String>) -> Request {
    Request::new("POST", url)
}

/// A `DELETE` of `url`.
pub fn delete(url: impl Into<String>) -> Request {
    Request::new("DELETE", url)
}

impl Request {
    /// A request with `method` (`GET`, `PATCH`, …) to `url` (`http://` or `https://`).
    pub fn new(method: &str, url: impl Into<String>) -> Self {
        Self {
            method: method.to_ascii_uppercase(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// Adds a header (a header of the same name that the host injects from a secret replaces it).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, Error> {
        let body =
            serde_json::to_vec(value).map_err(|e| Error::new(ErrorKind::Body, format!("cannot encode JSON: {e}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Gives up waiting for a connection or the response's first byte after `timeout` (the call's
    /// deadline applies as well, whichever is sooner).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Makes the request and reads the whole response; blocks until it is read, the host
    /// refuses it, or the call's deadline passes. A response with any status is `Ok` (see
    /// [`Response::error_for_status`]).
    pub fn send(self) -> Result<Response, Error> {
        let url = Url::parse(&self.url)?;
        #[cfg(target_arch = "wasm32")]
        {
            wasi::send(&self, &url)
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = url;
            Err(Error::new(ErrorKind::Transport, "HTTP requests are made only inside the host (wasm32)"))
        }
    }
}

/// A response, read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Its headers, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON into `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::new(ErrorKind::Body, format!("the response (status {}) is not the JSON expected: {e}", self.status))
        })
    }

    /// Itself when the status is 2xx, else an [`ErrorKind::Status`] error with the status and the
    /// start of the body.
    pub fn error_for_status(self) -> Result<Self, Error> {
        if self.is_success() {
            return Ok(self);
        }
        let text: String = self.text().chars().take(200).collect();
        Err(Error { kind: ErrorKind::Status(self.status), message: format!("status {}: {}", self.status, text.trim()) })
    }
}

/// What kind of failure an [`Error`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The host refused the request: no rule of the plugin's `http` grant allows it.
    Denied,
    /// The URL cannot be requested (not `http://` or `https://`, no host).
    Url,
    /// Connecting, TLS, the protocol, the deadline, the body cap or the concurrency limit; the
    /// message says which (with the wasi:http error code).
    Transport,
    /// [`Response::error_for_status`]: the server answered with this status.
    Status(u16),
    /// A body that could not be encoded or decoded.
    Body,
}

/// Why a request failed, in words: the host's own when it refused or cut the request short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened, for people.
    pub message: String,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// Whether the host refused the request (no rule allows it).
    pub fn is_denied(&self) -> bool {
        self.kind == ErrorKind::Denied
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The parts of a URL wasi:http takes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Url {
    https: bool,
    authority: String,
    path_with_query: String,
}

impl Url {
    fn parse(url: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::new(ErrorKind::Url, format!("`{url}` cannot be requested: {why}"));
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("it must start with http:// or https://"));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.is_empty() || authority.contains('@') {
            return Err(bad("it needs a host (and no user info)"));
        }
        let tail = tail.split('#').next().unwrap_or_default();
        let path_with_query = if tail.starts_with('/') { tail.to_string() } else { format!("/{tail}") };
        Ok(Self { https, authority: authority.to_string(), path_with_query })
    }
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use super::{Error, ErrorKind, Request, Response, Url};
    use crate::wasm::bindings::steward::plugin::http as host;
    use crate::wasm::bindings::wasi::http::outgoing_handler;
    use crate::wasm::bindings::wasi::http::types as ht;
    use crate::wasm::bindings::wasi::io::streams::StreamError;

    /// The error for wasi:http's `code`, with the host's words when it gave any.
    fn transport(code: ht::ErrorCode) -> Error {
        let kind =
            if matches!(code, ht::ErrorCode::HttpRequestDenied) { ErrorKind::Denied } else { ErrorKind::Transport };
        let message = match host::last_error() {
            Some(words) => format!("{words} ({code:?})"),
            None => format!("the request failed: {code:?}"),
        };
        Error { kind, message }
    }

    fn setup(what: &str) -> Error {
        Error::new(ErrorKind::Url, format!("the host refused the request's {what}"))
    }

    pub(super) fn send(req: &Request, url: &Url) -> Result<Response, Error> {
        let entries: Vec<(String, Vec<u8>)> =
            req.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone().into_bytes())).collect();
        let fields = ht::Fields::from_list(&entries)
            .map_err(|e| Error::new(ErrorKind::Url, format!("a header cannot be sent: {e:?}")))?;
        let outgoing = ht::OutgoingRequest::new(fields);
        let method = match req.method.as_str() {
            "GET" => ht::Method::Get,
            "HEAD" => ht::Method::Head,
            "POST" => ht::Method::Post,
            "PUT" => ht::Method::Put,
            "DELETE" => ht::Method::Delete,
            "PATCH" => ht::Method::Patch,
            "OPTIONS" => ht::Method::Options,
            other => ht::Method::Other(other.to_string()),
        };
        outgoing.set_method(&method).map_err(|()| setup("method"))?;
        let scheme = if url.https { ht::Scheme::Https } else { ht::Scheme::Http };
        outgoing.set_scheme(Some(&scheme)).map_err(|()| setup("scheme"))?;
        outgoing.set_authority(Some(&url.authority)).map_err(|()| setup("host"))?;
        outgoing.set_path_with_query(Some(&url.path_with_query)).map_err(|()| setup("path"))?;
        let options = req.timeout.map(|t| {
            let o = ht::RequestOptions::new();
            let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let _ = o.set_connect_timeout(Some(ns));
            let _ = o.set_first_byte_timeout(Some(ns));
            o
        });
        let body = outgoing.body().map_err(|()| setup("body"))?;
        let pending = outgoing_handler::handle(outgoing, options).map_err(transport)?;
        {
            let stream = body.write().map_err(|()| setup("body"))?;
            for chunk in req.body.chunks(4096) {
                if stream.blocking_write_and_flush(chunk).is_err() {
                    break;
                }
            }
        }
        ht::OutgoingBody::finish(body, None).map_err(transport)?;
        let incoming = loop {
            match pending.get() {
                Some(Ok(Ok(resp))) => break resp,
                Some(Ok(Err(code))) => return Err(transport(code)),
                Some(Err(())) => return Err(Error::new(ErrorKind::Transport, "the response was taken twice")),
                None => pending.subscribe().block(),
            }
        };
        let status = incoming.status();
        let headers = incoming
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let body = incoming.consume().map_err(|()| Error::new(ErrorKind::Transport, "the response has no body"))?;
        let mut bytes = Vec::new();
        {
            let stream = body.stream().map_err(|()| Error::new(ErrorKind::Transport, "the response has no body"))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        // The host says why it cut the body short (the cap, the deadline).
                        return Err(match (ht::http_error_code(&e), host::last_error()) {
                            (Some(code), _) => transport(code),
                            (None, Some(words)) => Error::new(ErrorKind::Transport, words),
                            (None, None) => Error::new(
                                ErrorKind::Transport,
                                format!("reading the response failed: {}", e.to_debug_string()),
                            ),
                        });
                    }
                }
            }
        }
        let _ = ht::IncomingBody::finish(body);
        Ok(Response { status, headers, body: bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_what_wasi_http_takes() {
        let u = Url::parse("http://127.0.0.1:2379/v3/kv/put?x=1#frag").unwrap();
        assert_eq!(
            u,
            Url { https: false, authority: "127.0.0.1:2379".into(), path_with_query: "/v3/kv/put?x=1".into() }
        );
        let u = Url::parse("https://api.example.com").unwrap();
        assert_eq!((u.https, u.path_with_query.as_str()), (true, "/"));
        let u = Url::parse("https://h?q=1").unwrap();
        assert_eq!(u.path_with_query, "/?q=1");
        for bad in ["ftp://x/", "x/y", "http:///path", "https://user@h/"] {
            assert_eq!(Url::parse(bad).unwrap_err().kind, ErrorKind::Url, "{bad}");
        }
    }

    #[test]
    fn builders_and_response_helpers() {
        let r = post("http://h/x").header("a", "1").json(&serde_json::json!({"k": 1})).unwrap();
        assert_eq!(r.method(), "POST");
        assert_eq!(r.headers, [("a".to_string(), "1".to_string()), ("content-type".into(), "application/json".into())]);
        assert_eq!(r.body, br#"{"k":1}"#);
        let resp = Response { status: 404, headers: vec![("x-a".into(), "b".into())], body: b"nope".to_vec() };
        assert_eq!(resp.header("X-A"), Some("b"));
        let e = resp.clone().error_for_status().unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Status(404), "status 404: nope"));
        assert!(resp.json::<serde_json::Value>().is_err());
        assert!(!get("https://h/").send().unwrap_err().is_denied());
    }
}
