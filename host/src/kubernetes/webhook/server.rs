//! The webhook's HTTPS server: TLS handshakes off the accept loop, and one route that answers
//! AdmissionReviews (400 with the reason for a body that is not one).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::review::Reviewer;
use crate::serve::{Held, Server, Slots};

/// Largest request body: an AdmissionReview carries the object and, on update, its old version.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// Longest a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const BACKLOG: usize = 64;

/// TCP connections, each handed on once its TLS handshake is done; handshakes run in their own
/// tasks, so a slow or silent client holds up no one else. A connection takes one of the
/// listener's slots from its TCP accept on (handshake included): past the cap, new connections
/// wait in the listen backlog.
pub struct TlsListener {
    ready: mpsc::Receiver<(Held<TlsStream<TcpStream>>, SocketAddr)>,
    local: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl TlsListener {
    /// Accepts on `tcp`, at most as many connections at once as `slots` has, and handshakes with `tls`.
    pub fn new(tcp: TcpListener, tls: Arc<ServerConfig>, slots: Slots) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(BACKLOG);
        let acceptor = TlsAcceptor::from(tls);
        let accept = tokio::spawn(async move {
            loop {
                let reserved = slots.reserve().await;
                let (stream, peer) = loop {
                    match tcp.accept().await {
                        Ok(c) => break c,
                        Err(e) => crate::serve::accept_failed(&e).await,
                    }
                };
                let slot = reserved.take();
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((Held::new(tls, slot), peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "webhook TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "webhook TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, local, accept })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Held<TlsStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept task holds a sender for as long as the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The routes: `POST path` answers an AdmissionReview; anything else is 404 saying what is here.
pub fn router(reviewer: Arc<Reviewer>, path: &str) -> Router {
    let here = format!(
        "this is Steward's validating admission webhook: POST an admission.k8s.io/v1 AdmissionReview to {path}"
    );
    Router::new()
        .route(path, axum::routing::post(answer))
        .fallback(move || async move { (StatusCode::NOT_FOUND, here) })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(reviewer)
}

async fn answer(State(reviewer): State<Arc<Reviewer>>, body: Bytes) -> Response {
    match reviewer.review(&body).await {
        Ok(review) => axum::Json(review).into_response(),
        Err(e) => {
            tracing::warn!("the webhook refused a request: {e}");
            (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
        }
    }
}

/// Serves `router` on `listener` as `server` (its header-read timeout and metrics) until the
/// returned task is aborted. Should the server stop by itself, `WebhookServing` turns `False`
/// in `conditions`.
pub fn serve(
    listener: TlsListener,
    server: Server,
    router: Router,
    conditions: Option<crate::health::Conditions>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        server.serve(listener, router, std::future::pending()).await;
        let why = "it ended";
        tracing::error!(error = %why, "the webhook's server stopped");
        if let Some(c) = conditions {
            c.fail(
                crate::health::WEBHOOK_SERVING,
                None,
                "ServerStopped",
                format!(
                    "the admission webhook's server stopped ({why}); reviews of the served kinds fail (failurePolicy \
                     decides what the API server does then); restart the host"
                ),
            );
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::config::{FailurePolicy, FieldValidation, WebhookConfig};
    use crate::kubernetes::webhook::certs::{Bundle, Validity, new_bundle};
    use crate::kubernetes::webhook::tls::{CurrentCert, certified_key, server_config};
    use crate::kubernetes::webhook::{ServedKind, WebhookHost};
    use crate::metrics::http::HttpMetrics;

    struct NoKinds;

    impl WebhookHost for NoKinds {
        fn served(&self) -> Vec<ServedKind> {
            Vec::new()
        }
        fn leads(&self) -> bool {
            true
        }
    }

    fn bundle() -> Bundle {
        new_bundle(&["127.0.0.1".into()], SystemTime::now(), &Validity::default()).unwrap()
    }

    /// A TLS client config that trusts only `ca`.
    fn trusting(ca: &str) -> rustls::ClientConfig {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth()
    }

    /// A client that trusts only `ca`.
    fn client(ca: &str) -> reqwest::Client {
        reqwest::Client::builder().tls_backend_preconfigured(trusting(ca)).build().unwrap()
    }

    /// A webhook of one connection slot, to which a TLS client sends `slow` and then nothing: what
    /// the webhook sends that client before it closes the connection (within a minute, or the
    /// test fails), once a second client, waiting for the slot meanwhile, has been answered.
    async fn one_slot_held_by(slow: &[u8]) -> (Vec<u8>, HttpMetrics) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        use crate::config::ServerLimits;

        let b = bundle();
        let current = Arc::new(CurrentCert::default());
        current.set(certified_key(b.cert.as_bytes(), b.key.as_bytes()).unwrap());
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let metrics = HttpMetrics::default();
        let limits = ServerLimits { max_connections: 1, header_read_timeout: Duration::from_millis(300) };
        let server = Server { name: "webhook", limits, metrics: metrics.clone() };
        let listener = TlsListener::new(tcp, server_config(current).unwrap(), server.slots()).unwrap();
        let reviewer = Arc::new(Reviewer::new(
            Arc::new(NoKinds),
            FieldValidation::Warn,
            FailurePolicy::Fail,
            Duration::from_secs(1),
        ));
        let _server = serve(listener, server, router(reviewer, "/validate"), None);

        // Handshaken, then part of a request: it holds the one slot until a timeout frees it.
        let connector = tokio_rustls::TlsConnector::from(Arc::new(trusting(&b.ca_cert)));
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut held = connector.connect(name, tokio::net::TcpStream::connect(addr).await.unwrap()).await.unwrap();
        held.write_all(slow).await.unwrap();
        // The next client waits for the slot, then is answered.
        let url = format!("https://127.0.0.1:{}/", addr.port());
        let normal = tokio::spawn(async move { client(&b.ca_cert).get(url).send().await.unwrap().status() });
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(60), held.read_to_end(&mut rest))
            .await
            .expect("the webhook did not close a connection whose request never came whole");
        // Closed without a TLS close_notify, or with one.
        assert!(closed.is_ok() || closed.is_err_and(|e| e.kind() == std::io::ErrorKind::UnexpectedEof));
        assert_eq!(tokio::time::timeout(Duration::from_secs(60), normal).await.unwrap().unwrap(), 404);
        (rest, metrics)
    }

    #[tokio::test]
    async fn a_tls_client_that_sends_half_a_header_is_disconnected_and_its_slot_freed() {
        use crate::metrics::http::ServerLabel;

        let (rest, metrics) = one_slot_held_by(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n").await;
        assert!(rest.is_empty(), "nothing is answered to half a header");
        let label = ServerLabel::of("webhook");
        assert!(metrics.header_timeouts.get_or_create(&label).get() >= 1);
        assert!(metrics.cap_reached.get_or_create(&label).get() >= 1);
        assert!(metrics.connections.get_or_create(&label).get() <= 1);
    }

    #[tokio::test]
    async fn a_review_whose_body_never_comes_is_answered_408_and_its_slot_freed() {
        let head = b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n{";
        let (rest, _metrics) = one_slot_held_by(head.as_slice()).await;
        let answer = String::from_utf8_lossy(&rest);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }

    #[tokio::test]
    async fn it_answers_over_tls_refuses_junk_with_400_and_serves_a_new_certificate_without_a_restart() {
        let first = bundle();
        let current = Arc::new(CurrentCert::default());
        current.set(certified_key(first.cert.as_bytes(), first.key.as_bytes()).unwrap());
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let server = Server { name: "webhook", limits: WebhookConfig::default().limits, metrics: Default::default() };
        let listener = TlsListener::new(tcp, server_config(current.clone()).unwrap(), server.slots()).unwrap();
        let reviewer = Arc::new(Reviewer::new(
            Arc::new(NoKinds),
            FieldValidation::Warn,
            FailurePolicy::Fail,
            Duration::from_secs(1),
        ));
        let _server = serve(listener, server, router(reviewer, "/validate"), None);
        let url = format!("https://127.0.0.1:{}/validate", addr.port());

        let c = client(&first.ca_cert);
        let r = c.post(&url).body("{not json").send().await.unwrap();
        assert_eq!(r.status(), 400);
        let text = r.text().await.unwrap();
        assert!(text.starts_with("the body is not an admission.k8s.io/v1 AdmissionReview"), "{text}");
        let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u1", "kind": {"group": "x.dev", "version": "v1", "kind": "K"},
            "resource": {"group": "x.dev", "version": "v1", "resource": "ks"}, "name": "a",
            "operation": "CREATE", "userInfo": {}, "object": {"metadata": {"name": "a"}}}});
        let r = c.post(&url).json(&review).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let a: serde_json::Value = r.json().await.unwrap();
        assert_eq!((a["response"]["uid"].as_str(), a["response"]["allowed"].as_bool()), (Some("u1"), Some(true)));
        let r = c.get(format!("https://127.0.0.1:{}/", addr.port())).send().await.unwrap();
        assert_eq!(r.status(), 404);
        assert!(r.text().await.unwrap().contains("POST an admission.k8s.io/v1 AdmissionReview to /validate"));

        // A renewal (here with a new CA) is served from the next handshake on.
        let second = bundle();
        current.set(certified_key(second.cert.as_bytes(), second.key.as_bytes()).unwrap());
        let r = client(&second.ca_cert).post(&url).json(&review).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(client(&first.ca_cert).post(&url).json(&review).send().await.is_err(), "the old certificate is gone");
    }
}
