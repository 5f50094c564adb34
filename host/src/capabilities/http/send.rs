//! Sending one allowed request: the hooks wasmtime-wasi-http calls, the allow-list check, injected secret headers, the concurrency permit, the deadline and the body cap.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use steward_sdk::LogLevel;
use tracing::Instrument;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::metrics::count;
use super::policy::{self, Target, default_port};
use super::settings::{HttpSettings, SecretHeader};
use crate::plugin::{CallLog, LogSource};

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;
type Sent = Result<(Response<WasiBody>, IoFuture), Error>;

/// The http unit's view of one call: which plugin, its settings, the call's deadline, and
/// where its words go (the call log, and `last-error` for the plugin).
pub(crate) struct Hooks {
    pub(super) plugin: String,
    pub(super) settings: HttpSettings,
    pub(super) deadline: Instant,
    pub(super) log: Option<Arc<Mutex<CallLog>>>,
    pub(super) last_error: Arc<Mutex<Option<String>>>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            plugin: String::new(),
            settings: HttpSettings::default(),
            deadline: Instant::now(),
            log: None,
            last_error: Arc::default(),
        }
    }
}

/// Says why a request failed on the host's side: to the plugin (`last-error`), in the call
/// log, on the request's span and in the metric; hands back the wasi:http error.
#[derive(Clone)]
struct Report {
    plugin: String,
    host: String,
    log: Option<Arc<Mutex<CallLog>>>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl Report {
    /// A request that ends without a response: counted under `status`, and said.
    fn fail(&self, status: &str, message: String, code: Error) -> Error {
        count(&self.plugin, &self.host, status);
        self.say(status, message, code)
    }

    /// A response cut short (already counted under its status code): said only.
    fn say(&self, status: &str, message: String, code: Error) -> Error {
        tracing::Span::current().record("error", status);
        crate::telemetry::set_error(&tracing::Span::current(), status);
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(|e| e.into_inner()).push(
                LogLevel::Warn,
                LogSource::Log,
                &format!("http: {message}"),
            );
        }
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(message);
        code
    }
}

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        let uri = request.uri();
        let scheme = uri.scheme_str().unwrap_or("https").to_ascii_lowercase();
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or_else(|| default_port(&scheme));
        let method = request.method().as_str().to_string();
        let host_port = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let span = tracing::info_span!(
            "http_request",
            plugin = %self.plugin,
            method = %method,
            host = %host_port,
            status = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let report = Report {
            plugin: self.plugin.clone(),
            host: host_port,
            log: self.log.clone(),
            last_error: self.last_error.clone(),
        };
        let target = Target { method: &method, scheme: &scheme, host: &host, port };
        let rule = match policy::check(&self.plugin, &self.settings, &target) {
            Ok(i) => i,
            Err(why) => {
                // Counted without its host: a plugin cannot grow the metric's series by asking.
                let report = Report { host: String::new(), ..report };
                let e = span.in_scope(|| report.fail("denied", why, Error::HttpRequestDenied));
                return Box::new(std::future::ready(Err(e)));
            }
        };
        let job = Job {
            report,
            settings: self.settings.clone(),
            rule,
            deadline: self.deadline,
            options,
            tls: scheme == "https",
            host,
            port,
        };
        Box::new(job.send(request).instrument(span))
    }
}

/// One allowed request on its way.
struct Job {
    report: Report,
    settings: HttpSettings,
    rule: usize,
    deadline: Instant,
    options: Option<RequestOptions>,
    tls: bool,
    host: String,
    port: u16,
}

impl Job {
    async fn send(self, mut request: Request<WasiBody>) -> Sent {
        let plugin = self.report.plugin.clone();
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let until = |limit: Option<std::time::Duration>| match limit {
            Some(d) => deadline.min(tokio::time::Instant::now() + d),
            None => deadline,
        };
        let report = &self.report;
        let timeout = |what: &str| {
            report.fail(
                "timeout",
                format!(
                    "{} {what} before the call's deadline (plugins.{plugin}.timeout) or the request's own timeout",
                    report.host
                ),
                Error::ConnectionTimeout,
            )
        };
        let permit = match tokio::time::timeout_at(deadline, self.settings.limiter().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(report.fail(
                    "busy",
                    format!(
                        "request to {} not started: the plugin had {} requests under way (plugins.{plugin}.http.concurrency) until the call's deadline",
                        report.host, self.settings.concurrency
                    ),
                    Error::ConnectionLimitReached,
                ));
            }
        };
        let rule = &self.settings.rules[self.rule];
        for (name, source) in &rule.headers {
            let key = format!("plugins.{plugin}.http.rules[{}].headers.{name}", self.rule);
            let value = read_secret(source).map_err(|e| {
                report.fail("secret", format!("cannot read {key} for {}: {e}", report.host), Error::ConfigurationError)
            })?;
            let (Ok(name), Ok(mut value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value))
            else {
                return Err(report.fail(
                    "secret",
                    format!("{key}: the value read is not a valid header value"),
                    Error::ConfigurationError,
                ));
            };
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
        let connect = tokio::net::TcpStream::connect((self.host.as_str(), self.port));
        let connect_by = until(self.options.and_then(|o| o.connect_timeout));
        let tcp = match tokio::time::timeout_at(connect_by, connect).await {
            Err(_) => return Err(timeout("did not accept a connection")),
            Ok(Err(e)) => {
                return Err(report.fail(
                    "error",
                    format!("cannot connect to {}: {e}", report.host),
                    Error::ConnectionRefused,
                ));
            }
            Ok(Ok(tcp)) => tcp,
        };
        let _ = tcp.set_nodelay(true);
        *request.uri_mut() = http::Uri::builder()
            .path_and_query(request.uri().path_and_query().map_or("/", |p| p.as_str()))
            .build()
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let handshake = async {
            let builder = hyper::client::conn::http1::Builder::new();
            if self.tls {
                let config = super::tls().map_err(|e| report.fail("error", e, Error::TlsProtocolError))?;
                let name = rustls::pki_types::ServerName::try_from(self.host.clone()).map_err(|_| {
                    report.fail("error", format!("`{}` is not a TLS server name", self.host), Error::TlsProtocolError)
                })?;
                let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(|e| {
                    report.fail("error", format!("TLS with {} failed: {e}", report.host), Error::TlsProtocolError)
                })?;
                let (sender, conn) = builder.handshake(hyper_util::rt::TokioIo::new(stream)).await?;
                Ok::<_, Error>((sender, tokio::spawn(conn)))
            } else {
                let (sender, conn) = builder.handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
                Ok((sender, tokio::spawn(conn)))
            }
        };
        let (mut sender, conn) = match tokio::time::timeout_at(connect_by, handshake).await {
            Err(_) => return Err(timeout("did not finish the handshake")),
            Ok(r) => r?,
        };
        let first_byte_by = until(self.options.and_then(|o| o.first_byte_timeout));
        let response = match tokio::time::timeout_at(first_byte_by, sender.send_request(request)).await {
            Err(_) => return Err(timeout("did not answer")),
            Ok(Err(e)) => {
                let message = format!("{} failed: {e}", report.host);
                return Err(report.fail("error", message, Error::Hyper(e)));
            }
            Ok(Ok(r)) => r,
        };
        let status = response.status().as_u16().to_string();
        count(&plugin, &report.host, &status);
        tracing::Span::current().record("status", status.as_str());
        let (parts, body) = response.into_parts();
        let capped = Capped {
            inner: body,
            read: 0,
            cap: self.settings.max_response_body,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            report: self.report.clone(),
            span: tracing::Span::current(),
            _permit: permit,
        };
        let io: IoFuture = Box::new(async move {
            let _ = conn.await;
            Ok(())
        });
        Ok((Response::from_parts(parts, capped.boxed_unsync()), io))
    }
}

/// Reads an injected header's value from where the config says; the error says why not.
fn read_secret(source: &SecretHeader) -> Result<String, String> {
    let value = match (&source.file, &source.env) {
        (Some(path), _) => std::fs::read_to_string(path).map_err(|e| format!("file {path}: {e}"))?,
        (None, Some(name)) => std::env::var(name).map_err(|e| format!("environment variable {name}: {e}"))?,
        (None, None) => return Err("no source".into()),
    };
    Ok(format!("{}{}", source.prefix, value.trim_end_matches(['\r', '\n'])))
}

/// A response body that stops with an error past the cap or the call's deadline, and holds the
/// request's concurrency permit until it is read to its end or dropped.
struct Capped {
    inner: hyper::body::Incoming,
    read: u64,
    cap: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
    report: Report,
    span: tracing::Span,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Body for Capped {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.read += data.len() as u64;
                    if this.read > this.cap {
                        let plugin = &this.report.plugin;
                        let message = format!(
                            "the response body from {} is over {} (plugins.{plugin}.http.max_response_body)",
                            this.report.host,
                            bytesize::ByteSize::b(this.cap)
                        );
                        let e = this.span.in_scope(|| {
                            this.report.say("body_too_large", message, Error::HttpResponseBodySize(Some(this.cap)))
                        });
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let message = format!("reading the response body from {} failed: {e}", this.report.host);
                let e = this.span.in_scope(|| this.report.say("error", message, Error::Hyper(e)));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let message = format!(
                        "the response body from {} was still arriving at the call's deadline (plugins.{}.timeout)",
                        this.report.host, this.report.plugin
                    );
                    let e = this.span.in_scope(|| this.report.say("timeout", message, Error::ConnectionReadTimeout));
                    Poll::Ready(Some(Err(e)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn hooks(settings: &str, deadline: Duration) -> Hooks {
        Hooks {
            plugin: "p".into(),
            settings: crate::yaml::from_str(settings).unwrap(),
            deadline: Instant::now() + deadline,
            log: Some(Arc::default()),
            last_error: Arc::default(),
        }
    }

    fn get(url: &str) -> Request<WasiBody> {
        let body = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync();
        Request::get(url).body(body).unwrap()
    }

    async fn send(h: &mut Hooks, url: &str) -> Result<u16, Error> {
        let fut = h.send_request(get(url), None, Box::new(async { Ok(()) }));
        Box::into_pin(fut).await.map(|(r, _)| r.status().as_u16())
    }

    fn words(h: &Hooks) -> String {
        let said = h.last_error.lock().unwrap().clone().unwrap_or_default();
        let logged =
            h.log.as_ref().unwrap().lock().unwrap().lines.iter().map(|l| l.message.clone()).collect::<Vec<_>>();
        assert!(logged.iter().any(|l| l == &format!("http: {said}")), "the call log says it too: {logged:?}");
        said
    }

    #[tokio::test]
    async fn a_refusal_connects_nowhere_and_says_why() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut h = hooks("rules: [{hosts: [127.0.0.1], schemes: [http], ports: [1]}]\n", Duration::from_secs(5));
        let e = send(&mut h, &format!("http://127.0.0.1:{port}/x")).await.unwrap_err();
        assert!(matches!(e, Error::HttpRequestDenied), "{e:?}");
        assert!(words(&h).contains(&format!("rules[0].ports [1] has not {port}")));
        // Counted, without the host it asked for.
        let label = super::super::RequestLabel { plugin: "p".into(), host: String::new(), status: "denied".into() };
        assert!(super::super::requests().get_or_create(&label).get() >= 1);
        // Nothing reached the listener.
        let accepted = tokio::time::timeout(Duration::from_millis(1), listener.accept()).await;
        assert!(accepted.is_err(), "a connection was made");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_ends_at_the_call_s_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut h = hooks(
            &format!("rules: [{{hosts: [127.0.0.1], schemes: [http], ports: [{port}]}}]\n"),
            Duration::from_millis(300),
        );
        // Accepted, and never answered.
        let held = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
        let e = send(&mut h, &format!("http://127.0.0.1:{port}/")).await.unwrap_err();
        assert!(matches!(e, Error::ConnectionTimeout), "{e:?}");
        assert!(words(&h).contains("did not answer before the call's deadline (plugins.p.timeout)"));
        drop(held);
    }

    #[tokio::test]
    async fn past_the_concurrency_limit_a_request_waits_then_fails_at_the_deadline() {
        let mut h = hooks(
            "rules: [{hosts: [127.0.0.1], schemes: [http], ports: [1]}]\nconcurrency: 1\n",
            Duration::from_millis(200),
        );
        let _busy = h.settings.limiter().try_acquire_owned().unwrap();
        let e = send(&mut h, "http://127.0.0.1:1/").await.unwrap_err();
        assert!(matches!(e, Error::ConnectionLimitReached), "{e:?}");
        assert!(words(&h).contains("1 requests under way (plugins.p.http.concurrency)"));
    }

    #[test]
    fn a_secret_header_is_read_with_its_prefix_and_without_the_newline() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "tok\n").unwrap();
        let source = SecretHeader { file: Some(file.display().to_string()), env: None, prefix: "Bearer ".into() };
        assert_eq!(read_secret(&source).unwrap(), "Bearer tok");
        let missing = SecretHeader { file: Some("/nonexistent/x".into()), env: None, prefix: String::new() };
        assert!(read_secret(&missing).unwrap_err().contains("/nonexistent/x"));
    }
}
