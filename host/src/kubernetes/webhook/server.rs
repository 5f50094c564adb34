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

/// Largest request body: an AdmissionReview carries the object and, on update, its old version.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// Longest a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const BACKLOG: usize = 64;

/// TCP connections, each handed on once its TLS handshake is done; handshakes run in their own
/// tasks, so a slow or silent client holds up no one else.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl TlsListener {
    /// Accepts on `tcp` and handshakes with `tls`.
    pub fn new(tcp: TcpListener, tls: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(BACKLOG);
        let acceptor = TlsAcceptor::from(tls);
        let accept = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors, say: wait a little rather than spin.
                        tracing::warn!(error = %e, "the webhook cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
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
    type Io = TlsStream<TcpStream>;
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

/// Serves `router` on `listener` until the returned task is aborted. Should the server stop by
/// itself, `WebhookServing` turns `False` in `conditions`.
pub fn serve(
    listener: TlsListener,
    router: Router,
    conditions: Option<crate::health::Conditions>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let why = match axum::serve(listener, router).await {
            Err(e) => e.to_string(),
            Ok(()) => "it ended".to_string(),
        };
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
    use crate::config::{FailurePolicy, FieldValidation};
    use crate::kubernetes::webhook::certs::{Bundle, Validity, new_bundle};
    use crate::kubernetes::webhook::tls::{CurrentCert, certified_key, server_config};
    use crate::kubernetes::webhook::{ServedKind, WebhookHost};

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

    /// A client that trusts only `ca`.
    fn client(ca: &str) -> reqwest::Client {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        reqwest::Client::builder().tls_backend_preconfigured(tls).build().unwrap()
    }

    #[tokio::test]
    async fn it_answers_over_tls_refuses_junk_with_400_and_serves_a_new_certificate_without_a_restart() {
        let first = bundle();
        let current = Arc::new(CurrentCert::default());
        current.set(certified_key(first.cert.as_bytes(), first.key.as_bytes()).unwrap());
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let listener = TlsListener::new(tcp, server_config(current.clone()).unwrap()).unwrap();
        let reviewer = Arc::new(Reviewer::new(
            Arc::new(NoKinds),
            FieldValidation::Warn,
            FailurePolicy::Fail,
            Duration::from_secs(1),
        ));
        let _server = serve(listener, router(reviewer, "/validate"), None);
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
