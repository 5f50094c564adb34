//! The validating admission webhook (`kubernetes.webhook`): served from the plugins' `validate`, over TLS, with its `ValidatingWebhookConfiguration`.
//!
//! - [`certs`]: the self-managed CA and serving certificate, and when they are due for renewal;
//! - [`secret`]: the Secret the replicas share them in;
//! - [`tls`]: the certificate served, swapped in place when renewed or when the user's files change;
//! - [`review`]: one AdmissionReview answered;
//! - [`server`]: the HTTPS server;
//! - [`configuration`]: the `ValidatingWebhookConfiguration`, kept applied by the leader.

pub mod certs;
pub mod configuration;
pub mod review;
pub mod secret;
pub mod server;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use steward_sdk::{FieldError, KindInfo, RawObject};
use tokio::sync::Notify;

use crate::config::{Config, WebhookCertificate, WebhookEndpoint};
use crate::plugin::Plugin;

/// A kind the webhook validates: served by a loaded plugin that is not blocked, and enabled.
#[derive(Clone)]
pub struct ServedKind {
    /// The kind, as its plugin describes it.
    pub info: KindInfo,
    /// The plugin that validates it.
    pub plugin: Arc<dyn Validates>,
}

/// What the webhook calls of a plugin ([`Plugin`] is one; the tests have others).
#[async_trait::async_trait]
pub trait Validates: Send + Sync {
    /// The plugin's name, for messages.
    fn name(&self) -> &str;
    /// The structural schema of `kind`'s spec, by which unknown fields are found and dropped.
    fn spec_schema(&self, kind: &str) -> Option<&serde_json::Value>;
    /// Its `validate`: the field errors of `obj` (none: valid), or why it could not say.
    async fn validate(&self, obj: &RawObject) -> Result<Vec<FieldError>, String>;
    /// Its optional `lint`: the warnings about `obj` (`None` when it has no such export), or why
    /// it could not say.
    async fn warnings(&self, obj: &RawObject) -> Option<Result<Vec<FieldError>, String>>;
}

#[async_trait::async_trait]
impl Validates for Plugin {
    fn name(&self) -> &str {
        Plugin::name(self)
    }

    fn spec_schema(&self, kind: &str) -> Option<&serde_json::Value> {
        Plugin::spec_schema(self, kind)
    }

    async fn validate(&self, obj: &RawObject) -> Result<Vec<FieldError>, String> {
        Plugin::validate(self, obj).await.result.map_err(|e| e.to_string())
    }

    async fn warnings(&self, obj: &RawObject) -> Option<Result<Vec<FieldError>, String>> {
        Some(Plugin::warnings(self, obj).await?.result.map_err(|e| e.to_string()))
    }
}

use crate::health::WEBHOOK_SERVING;

/// What the webhook asks of the running host.
pub trait WebhookHost: Send + Sync + 'static {
    /// The kinds served now (loaded, not blocked, enabled), each with its plugin.
    fn served(&self) -> Vec<ServedKind>;
    /// Whether this replica leads, and so writes the cluster-wide configuration.
    fn leads(&self) -> bool;
    /// Where the webhook reports the condition `WebhookServing`; none by default.
    fn conditions(&self) -> Option<crate::health::Conditions> {
        None
    }
    /// Where the webhook counts its connections and admissions; none by default (uncounted).
    fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        None
    }
}

/// Why the webhook could not start or do its work; each message names the setting or object.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Enabled without a `url` or `service` (the config's validation prevents it).
    #[error("kubernetes.webhook has no url or service: set one so the API server can call it")]
    NoEndpoint,
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr} (kubernetes.webhook.listen): {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The self-managed certificate's Secret cannot be read or written.
    #[error("the webhook certificate's Secret {secret} (kubernetes.webhook.certificate.secret): {message}")]
    Secret {
        /// `namespace/name`.
        secret: String,
        /// What failed and what to do.
        message: String,
    },
    /// The user's certificate files cannot be used.
    #[error("the webhook's certificate files (kubernetes.webhook.certificate): {0}")]
    Files(String),
    /// A certificate could not be made.
    #[error(transparent)]
    Cert(#[from] certs::CertError),
    /// The TLS server could not be set up.
    #[error("the webhook's TLS server: {0}")]
    Tls(String),
    /// The `ValidatingWebhookConfiguration` could not be applied.
    #[error("cannot apply the ValidatingWebhookConfiguration {name} (kubernetes.webhook.configurationName): {message}")]
    Configuration {
        /// Its name.
        name: String,
        /// What the API server said, and what to do.
        message: String,
    },
}

/// The names the serving certificate is for: the Service's DNS names
/// (`NAME.NAMESPACE.svc`, `NAME.NAMESPACE.svc.cluster.local`), or the URL's host (an IP SAN
/// when it is an address). `namespace` is the Service's when it names none.
pub fn serving_names(endpoint: &WebhookEndpoint, namespace: &str) -> Vec<String> {
    match endpoint {
        WebhookEndpoint::Service { name, namespace: ns, .. } => {
            let ns = ns.as_deref().unwrap_or(namespace);
            vec![format!("{name}.{ns}.svc"), format!("{name}.{ns}.svc.cluster.local")]
        }
        WebhookEndpoint::Url(url) => {
            let host = crate::config::url_parts(url).map(|p| p.host).unwrap_or_default();
            // An IP address as rcgen makes it an IP SAN: its canonical text.
            vec![host.parse::<IpAddr>().map(|ip| ip.to_string()).unwrap_or(host)]
        }
    }
}

/// The namespace of the webhook's Secret and of a Service that names none:
/// `kubernetes.webhook.namespace`, else the host's own ([`crate::kubernetes::leader::own_namespace`]).
pub fn namespace(cfg: &Config, client: &kube::Client) -> String {
    cfg.kubernetes.webhook.namespace.clone().unwrap_or_else(|| crate::kubernetes::leader::own_namespace(client))
}

/// What the configuration is made of, from the host config.
pub fn shape(cfg: &Config, namespace: &str) -> configuration::Shape {
    configuration::Shape {
        webhook: cfg.kubernetes.webhook.clone(),
        namespaces: cfg.kubernetes.namespaces.clone(),
        label_selector: cfg.kubernetes.label_selector.clone(),
        namespace: namespace.to_string(),
    }
}

/// Where the serving certificate comes from, as the config says.
pub fn cert_source(cfg: &Config, client: &kube::Client, namespace: &str) -> Result<tls::CertSource, WebhookError> {
    let w = &cfg.kubernetes.webhook;
    let endpoint = w.endpoint.as_ref().ok_or(WebhookError::NoEndpoint)?;
    Ok(match &w.certificate {
        WebhookCertificate::Secret(name) => tls::CertSource::Secret {
            secret: Box::new(secret::CertSecret::new(client.clone(), namespace, name)),
            names: serving_names(endpoint, namespace),
            validity: certs::Validity::default(),
        },
        WebhookCertificate::Files { cert, key, ca } => {
            tls::CertSource::Files(tls::CertFiles { cert: cert.clone(), key: key.clone(), ca: ca.clone() })
        }
    })
}

/// How long the webhook gives a plugin: most of the API server's `timeoutSeconds`, so that the
/// answer (a refusal naming the plugin, under `failurePolicy: Fail`) arrives before it gives up.
pub fn plugin_deadline(timeout_seconds: u32) -> Duration {
    Duration::from_millis(u64::from(timeout_seconds) * 800)
}

/// The running webhook: its server, its certificate kept current, and (on the leader) its
/// configuration kept applied. Dropping it stops all three.
pub struct Webhook {
    addr: SocketAddr,
    changed: Arc<Notify>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    _tls: tls::Tls,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            t.abort();
        }
    }
}

impl Webhook {
    /// Listens on `kubernetes.webhook.listen`, gets the serving certificate (the Secret is
    /// created, or read and renewed when due; or the user's files are read), serves
    /// AdmissionReviews for `host`'s kinds, and keeps the configuration applied while `host` leads.
    pub async fn start(cfg: &Config, client: kube::Client, host: Arc<dyn WebhookHost>) -> Result<Self, WebhookError> {
        let w = &cfg.kubernetes.webhook;
        let tcp = tokio::net::TcpListener::bind(w.listen)
            .await
            .map_err(|source| WebhookError::Listen { addr: w.listen, source })?;
        let addr = tcp.local_addr().map_err(|source| WebhookError::Listen { addr: w.listen, source })?;
        let namespace = namespace(cfg, &client);
        let tls = tls::Tls::start(cert_source(cfg, &client, &namespace)?).await?;
        let http = host.metrics().map_or_else(Default::default, |m| m.http().clone());
        let serving = crate::serve::Server { name: "webhook", limits: w.limits, metrics: http };
        let listener = server::TlsListener::new(tcp, tls::server_config(tls.current.clone())?, serving.slots())
            .map_err(|source| WebhookError::Listen { addr, source })?;
        let reviewer = Arc::new(review::Reviewer::new(
            host.clone(),
            cfg.field_validation,
            w.failure_policy,
            plugin_deadline(w.timeout_seconds),
        ));
        let path = w.path();
        let conditions = host.conditions();
        let serving = server::serve(listener, serving, server::router(reviewer, &path), conditions.clone());
        let changed = Arc::new(Notify::new());
        let writer = tokio::spawn(configuration::keep_applied(
            client,
            shape(cfg, &namespace),
            host,
            tls.ca.clone(),
            changed.clone(),
        ));
        tracing::info!(%addr, %path, configuration = %w.configuration_name, "admission webhook listening");
        if let Some(c) = &conditions {
            c.ok(WEBHOOK_SERVING, None, "Serving", format!("the admission webhook listens on {addr}"));
        }
        Ok(Self { addr, changed, tasks: Mutex::new(vec![serving, writer]), _tls: tls })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Says the served kinds may have changed: the leader applies the configuration again now.
    pub fn kinds_changed(&self) {
        self.changed.notify_one();
    }

    /// [`Webhook::kinds_changed`] as a function to call from elsewhere (a task following the host's events).
    pub fn on_kinds_changed(&self) -> impl Fn() + Send + Sync + 'static {
        let changed = self.changed.clone();
        move || changed.notify_one()
    }

    /// Ties `task` to the webhook: it is stopped with it.
    pub fn hold(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).push(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_names_the_service_or_the_urls_host() {
        let service = |namespace: Option<&str>| WebhookEndpoint::Service {
            name: "steward-webhook".into(),
            namespace: namespace.map(str::to_string),
            port: 443,
            path: "/validate".into(),
        };
        assert_eq!(
            serving_names(&service(None), "steward"),
            ["steward-webhook.steward.svc", "steward-webhook.steward.svc.cluster.local"]
        );
        assert_eq!(serving_names(&service(Some("ops")), "steward")[0], "steward-webhook.ops.svc");
        let url = |u: &str| WebhookEndpoint::Url(u.into());
        assert_eq!(serving_names(&url("https://127.0.0.1:9443/validate"), "x"), ["127.0.0.1"]);
        assert_eq!(serving_names(&url("https://[::1]:9443/"), "x"), ["::1"]);
        assert_eq!(serving_names(&url("https://hooks.example.com/v"), "x"), ["hooks.example.com"]);
        assert_eq!(plugin_deadline(10), Duration::from_secs(8));
    }
}
