//! The HTTP client of remote MCP sessions: reqwest, with an unknown session told apart from a server error.
//!
//! A server that restarted no longer knows the session of a request. The
//! specification says it answers HTTP 404, and rmcp then opens a new session and
//! sends the request again (once). Some servers answer otherwise: the reference
//! `everything` server answers HTTP 400 with a JSON-RPC error that names no
//! request, which rmcp would hand to the session as an answer to nothing, so the
//! request would wait forever. An error naming no request, in answer to a
//! request sent on a session, means the server could not even read which request
//! it was: it did not act on it. This client reports it as the unknown session it
//! is, so that the session is re-established and the request sent once more.
//!
//! Every message it receives is also handed to the session's [`Raw`] view as the server sent
//! it (an event stream's data as is; a plain JSON answer as rmcp parsed it, which keeps what
//! rmcp does not know but drops the fields it does not model of what it knows).

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::Sse;

use super::raw::Raw;

/// reqwest's client, with a server's error that names no request, answering a request sent on a
/// session, reported as [`StreamableHttpError::SessionExpired`].
#[derive(Clone, Debug)]
pub(crate) struct SessionClient {
    inner: reqwest::Client,
    raw: Arc<Raw>,
}

impl SessionClient {
    /// Wraps `inner`, handing what it receives to `raw`.
    pub(crate) fn new(inner: reqwest::Client, raw: Arc<Raw>) -> Self {
        Self { inner, raw }
    }

    /// `answer`, its messages handed to the raw view on their way.
    fn tap(&self, answer: StreamableHttpPostResponse) -> StreamableHttpPostResponse {
        match answer {
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(self.tap_stream(stream), session)
            }
            StreamableHttpPostResponse::Json(message, session) => {
                if let Ok(v) = serde_json::to_value(&message) {
                    self.raw.inspect(v);
                }
                StreamableHttpPostResponse::Json(message, session)
            }
            other => other,
        }
    }

    fn tap_stream(
        &self,
        stream: BoxStream<'static, Result<Sse, SseError>>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        let raw = self.raw.clone();
        Box::pin(stream.inspect(move |event| {
            if let Ok(Sse { data: Some(data), .. }) = event {
                raw.inspect_text(data.as_bytes());
            }
        }))
    }
}

/// `answer`, unless it is an error naming no request on a session: then the session is gone
/// (see [`names_no_request`]).
fn checked(
    sent: &ClientJsonRpcMessage,
    session: Option<&str>,
    answer: StreamableHttpPostResponse,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
    if names_no_request(sent, session, &answer) { Err(StreamableHttpError::SessionExpired) } else { Ok(answer) }
}

/// Whether `answer` to `sent` on session `session` says the server does not know the session:
/// an error naming no request, in answer to a request (which has an id) sent on a session.
pub(crate) fn names_no_request(
    sent: &ClientJsonRpcMessage,
    session: Option<&str>,
    answer: &StreamableHttpPostResponse,
) -> bool {
    session.is_some()
        && matches!(sent, JsonRpcMessage::Request(_))
        && matches!(answer, StreamableHttpPostResponse::Json(JsonRpcMessage::Error(e), _) if e.id.is_none())
}

impl StreamableHttpClient for SessionClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let sent = message.clone();
        let session = session_id.clone();
        let answer = self.inner.post_message(uri, message, session_id, auth_header, custom_headers).await?;
        checked(&sent, session.as_deref(), answer).map(|a| self.tap(a))
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let sent = message.clone();
        let session = session_id.clone();
        let answer = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        checked(&sent, session.as_deref(), answer).map(|a| self.tap(a))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        self.inner.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>> {
        let stream = self.inner.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await?;
        Ok(self.tap_stream(stream))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>> {
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.tap_stream(stream))
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ErrorCode, ErrorData, JsonRpcError, NumberOrString, PingRequest};

    use super::*;

    fn error(id: Option<i64>) -> StreamableHttpPostResponse {
        let e =
            JsonRpcError::new(id.map(NumberOrString::Number), ErrorData::new(ErrorCode(-32000), "Bad Request", None));
        StreamableHttpPostResponse::Json(JsonRpcMessage::Error(e), None)
    }

    #[test]
    fn only_an_error_naming_no_request_on_a_session_is_an_unknown_session() {
        let ping = ClientJsonRpcMessage::request(PingRequest::default().into(), NumberOrString::Number(7));
        assert!(names_no_request(&ping, Some("s1"), &error(None)));
        assert!(!names_no_request(&ping, Some("s1"), &error(Some(7))), "an answer to the request");
        assert!(!names_no_request(&ping, None, &error(None)), "no session to be unknown");
        assert!(!names_no_request(&ping, Some("s1"), &StreamableHttpPostResponse::Accepted));
    }
}
