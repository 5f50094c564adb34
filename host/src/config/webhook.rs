//! The `kubernetes.webhook` section: where the admission webhook listens, how the API server reaches it, its certificate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::values::{Count, ListenAddr};
use super::{DEFAULT_HEADER_READ_TIMEOUT, ServerLimits};
use crate::plugin::HumanDuration;

/// What the API server does with a write of a served kind when no webhook answers
/// (`kubernetes.webhook.failurePolicy`), as `failurePolicy` of a `ValidatingWebhookConfiguration`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum FailurePolicy {
    /// The write is refused: nothing invalid gets in, but while no replica answers (all down,
    /// unreachable), no object of a served kind can be created or changed (the default).
    #[default]
    Fail,
    /// The write is let through unchecked: writes never wait on Steward, and an invalid object
    /// then ends as `Failed` in its status, as without the webhook.
    Ignore,
}

impl FailurePolicy {
    /// The policy as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }
}

/// Where the API server calls the webhook (`kubernetes.webhook.url` or `.service`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookEndpoint {
    /// An `https://` URL, for an API server without a route to Services (`https://127.0.0.1:9443/validate`).
    Url(String),
    /// A Service in the cluster, which routes to the replicas' `listen` port.
    Service {
        /// The Service's name.
        name: String,
        /// Its namespace; `None` means [`WebhookConfig::namespace`] (the pod's namespace by default).
        namespace: Option<String>,
        /// The Service's port.
        port: u16,
        /// The path the API server posts to.
        path: String,
    },
}

/// Where the webhook's serving certificate comes from (`kubernetes.webhook.certificate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookCertificate {
    /// Self-managed: a CA and a serving certificate the host creates, keeps in this Secret (in
    /// [`WebhookConfig::namespace`]) shared by the replicas, and renews before they expire.
    Secret(String),
    /// User-supplied PEM files (cert-manager's, say), read again when they change.
    Files {
        /// The serving certificate chain.
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
        /// The CA that signed it, for the configuration's `caBundle`; without it the configuration
        /// carries no `caBundle` (for a publicly trusted certificate, or cert-manager's CA injector).
        ca: Option<PathBuf>,
    },
}

/// The validating admission webhook (`kubernetes.webhook`): the API server asks it about each
/// create and update of a served kind, and it answers with the plugin's `validate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Whether `steward run` serves it and writes its `ValidatingWebhookConfiguration`.
    pub enabled: bool,
    /// The HTTPS address it listens on.
    pub listen: SocketAddr,
    /// Where the API server calls it; `None` only while it is not enabled.
    pub endpoint: Option<WebhookEndpoint>,
    /// What the API server does when it does not answer; also what it answers when a plugin fails.
    pub failure_policy: FailurePolicy,
    /// How long the API server waits for an answer, 1 to 30 seconds.
    pub timeout_seconds: u32,
    /// The name of the `ValidatingWebhookConfiguration`.
    pub configuration_name: String,
    /// Where the serving certificate comes from.
    pub certificate: WebhookCertificate,
    /// The namespace of the certificate's Secret (and of the Service when it names none);
    /// `None` means the pod's own namespace (`$POD_NAMESPACE`, or `default` outside a cluster).
    pub namespace: Option<String>,
    /// Its connection limits (`maxConnections`, `headerReadTimeout`).
    pub limits: ServerLimits,
}

impl WebhookConfig {
    /// The path the webhook answers on: the URL's path, or the Service's.
    pub fn path(&self) -> String {
        match &self.endpoint {
            Some(WebhookEndpoint::Url(url)) => url_parts(url).map(|p| p.path).unwrap_or_else(|_| "/".into()),
            Some(WebhookEndpoint::Service { path, .. }) => path.clone(),
            None => DEFAULT_WEBHOOK_PATH.into(),
        }
    }
}

/// The path of the webhook behind a Service, unless `service.path` says otherwise.
pub const DEFAULT_WEBHOOK_PATH: &str = "/validate";
/// The webhook's default [`ServerLimits::max_connections`].
pub const DEFAULT_WEBHOOK_MAX_CONNECTIONS: usize = 256;

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: SocketAddr::from(([0, 0, 0, 0], 9443)),
            endpoint: None,
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 10,
            configuration_name: "steward".into(),
            certificate: WebhookCertificate::Secret("steward-webhook-tls".into()),
            namespace: None,
            limits: ServerLimits {
                max_connections: DEFAULT_WEBHOOK_MAX_CONNECTIONS,
                header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            },
        }
    }
}

/// The parts of a webhook URL the host uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlParts {
    /// The host: a DNS name, or an IP address (without brackets).
    pub host: String,
    /// The path, `/` when the URL has none.
    pub path: String,
}

/// Splits an `https://host[:port][/path]` URL, or says what is wrong with it.
pub fn url_parts(url: &str) -> Result<UrlParts, String> {
    let rest =
        url.strip_prefix("https://").ok_or("it must start with https:// (the API server calls webhooks over TLS)")?;
    if rest.contains(['?', '#']) || rest.contains(char::is_whitespace) {
        return Err("it may not have a query, a fragment or whitespace".into());
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return Err("it may not carry a user or password".into());
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6.split_once(']').ok_or("an IPv6 address goes in brackets: https://[::1]:9443/")?;
        if !(tail.is_empty() || tail.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok())) {
            return Err(format!("`{tail}` after the address is not a :port"));
        }
        h.parse::<std::net::Ipv6Addr>().map_err(|_| format!("`{h}` is not an IPv6 address"))?;
        h.to_string()
    } else {
        let (h, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if port.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(format!("`{}` is not a port", port.unwrap_or_default()));
        }
        if h.parse::<std::net::Ipv4Addr>().is_err() && !crate::model::is_dns_subdomain(h) {
            return Err(format!("`{h}` is neither an IP address nor a DNS name"));
        }
        h.to_string()
    };
    Ok(UrlParts { host, path })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawWebhook {
    enabled: Option<bool>,
    listen: Option<ListenAddr>,
    url: Option<String>,
    service: Option<RawWebhookService>,
    failure_policy: Option<FailurePolicy>,
    timeout_seconds: Option<u32>,
    configuration_name: Option<String>,
    #[serde(default)]
    certificate: RawWebhookCertificate,
    namespace: Option<String>,
    max_connections: Option<Count>,
    header_read_timeout: Option<HumanDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWebhookService {
    name: String,
    namespace: Option<String>,
    port: Option<u16>,
    path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWebhookCertificate {
    secret: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
}

/// The `kubernetes.webhook` section, with relative paths resolved against `base`; the error names the setting.
pub(super) fn webhook_config(raw: RawWebhook, base: &Path) -> Result<WebhookConfig, String> {
    const AT: &str = "kubernetes.webhook";
    let mut w = WebhookConfig { enabled: raw.enabled.unwrap_or(false), ..WebhookConfig::default() };
    if let Some(l) = raw.listen {
        w.listen = l.0;
    }
    w.endpoint = match (raw.url.filter(|u| !u.trim().is_empty()), raw.service) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{AT}: set url or service, not both (url for an API server without a route to Services, service in a cluster)"
            ));
        }
        (Some(url), None) => {
            let url = url.trim().to_string();
            url_parts(&url)
                .map_err(|e| format!("{AT}.url `{url}`: {e}; write for example https://127.0.0.1:9443/validate"))?;
            Some(WebhookEndpoint::Url(url))
        }
        (None, Some(s)) => {
            if !crate::model::is_dns_label(&s.name) {
                return Err(format!("{AT}.service.name `{}` is not a Service name (a DNS-1123 label)", s.name));
            }
            if let Some(ns) = s.namespace.as_ref().filter(|ns| !crate::model::is_dns_label(ns)) {
                return Err(format!("{AT}.service.namespace `{ns}` is not a namespace name (a DNS-1123 label)"));
            }
            let path = s.path.unwrap_or_else(|| DEFAULT_WEBHOOK_PATH.into());
            if !path.starts_with('/') || path.contains(char::is_whitespace) {
                return Err(format!("{AT}.service.path `{path}` must start with / and hold no whitespace"));
            }
            if s.port == Some(0) {
                return Err(format!("{AT}.service.port 0 is not a port; leave it out for 443"));
            }
            Some(WebhookEndpoint::Service { name: s.name, namespace: s.namespace, port: s.port.unwrap_or(443), path })
        }
        (None, None) if w.enabled => {
            return Err(format!(
                "{AT} is enabled but says nowhere the API server can call it: set {AT}.service (name, namespace, port, path of the Service in front of the replicas) or {AT}.url (https://…)"
            ));
        }
        (None, None) => None,
    };
    if let Some(p) = raw.failure_policy {
        w.failure_policy = p;
    }
    if let Some(t) = raw.timeout_seconds {
        if !(1..=30).contains(&t) {
            return Err(format!("{AT}.timeoutSeconds {t} is out of range; the API server takes 1 to 30"));
        }
        w.timeout_seconds = t;
    }
    if let Some(name) = raw.configuration_name {
        if !crate::model::is_dns_subdomain(&name) {
            return Err(format!("{AT}.configurationName `{name}` is not a DNS-1123 subdomain"));
        }
        w.configuration_name = name;
    }
    if let Some(ns) = raw.namespace {
        if !crate::model::is_dns_label(&ns) {
            return Err(format!("{AT}.namespace `{ns}` is not a namespace name (a DNS-1123 label)"));
        }
        w.namespace = Some(ns);
    }
    if let Some(n) = raw.max_connections {
        w.limits.max_connections = n.0;
    }
    if let Some(t) = raw.header_read_timeout {
        w.limits.header_read_timeout = t.0;
    }
    let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let c = raw.certificate;
    w.certificate = match (c.secret, c.cert_file, c.key_file) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(format!(
                "{AT}.certificate: set secret (a certificate Steward makes and renews) or certFile and keyFile (your own), not both"
            ));
        }
        (secret, None, None) => {
            if c.ca_file.is_some() {
                return Err(format!(
                    "{AT}.certificate.caFile goes with certFile and keyFile; a self-managed certificate's CA is in its Secret"
                ));
            }
            let name = secret.unwrap_or_else(|| "steward-webhook-tls".into());
            if !crate::model::is_dns_subdomain(&name) {
                return Err(format!("{AT}.certificate.secret `{name}` is not a Secret name (a DNS-1123 subdomain)"));
            }
            WebhookCertificate::Secret(name)
        }
        (None, Some(cert), Some(key)) => {
            WebhookCertificate::Files { cert: abs(cert), key: abs(key), ca: c.ca_file.map(abs) }
        }
        (None, Some(_), None) | (None, None, Some(_)) => {
            return Err(format!("{AT}.certificate: certFile and keyFile go together; set both"));
        }
    };
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{err, parse};

    #[test]
    fn the_webhook_section_defaults_to_off_and_checks_its_values() {
        let w = parse("").unwrap().kubernetes.webhook;
        assert_eq!(w, WebhookConfig::default());
        assert!(!w.enabled && w.endpoint.is_none());
        assert_eq!(w.listen.to_string(), "0.0.0.0:9443");
        assert_eq!(w.certificate, WebhookCertificate::Secret("steward-webhook-tls".into()));
        let c = parse(
            "kubernetes:\n  webhook:\n    enabled: true\n    service: { name: steward-webhook, namespace: ops }\n    failurePolicy: Ignore\n    timeoutSeconds: 5\n    configurationName: steward-a\n",
        )
        .unwrap();
        let w = c.kubernetes.webhook;
        assert_eq!(
            w.endpoint,
            Some(WebhookEndpoint::Service {
                name: "steward-webhook".into(),
                namespace: Some("ops".into()),
                port: 443,
                path: "/validate".into()
            })
        );
        assert_eq!(
            (w.failure_policy, w.timeout_seconds, w.configuration_name.as_str()),
            (FailurePolicy::Ignore, 5, "steward-a")
        );
        assert_eq!(w.path(), "/validate");
        let c = parse(
            "kubernetes:\n  webhook: { enabled: true, url: 'https://127.0.0.1:9443/hook', certificate: { certFile: tls/tls.crt, keyFile: tls/tls.key, caFile: tls/ca.crt } }\n",
        )
        .unwrap();
        let w = c.kubernetes.webhook;
        assert_eq!(w.path(), "/hook");
        assert_eq!(
            w.certificate,
            WebhookCertificate::Files {
                cert: "/srv/steward/tls/tls.crt".into(),
                key: "/srv/steward/tls/tls.key".into(),
                ca: Some("/srv/steward/tls/ca.crt".into())
            }
        );
        for (text, want) in [
            ("webhook: { enabled: true }", "kubernetes.webhook is enabled but says nowhere"),
            ("webhook: { url: 'https://a:1/', service: { name: s } }", "set url or service, not both"),
            ("webhook: { url: 'http://a:1/' }", "kubernetes.webhook.url `http://a:1/`: it must start with https://"),
            ("webhook: { url: 'https://a b/' }", "kubernetes.webhook.url"),
            ("webhook: { url: 'https://[::1/' }", "kubernetes.webhook.url"),
            ("webhook: { service: { name: Steward } }", "kubernetes.webhook.service.name `Steward`"),
            ("webhook: { service: { name: s, path: validate } }", "kubernetes.webhook.service.path `validate`"),
            ("webhook: { timeoutSeconds: 31 }", "kubernetes.webhook.timeoutSeconds 31 is out of range"),
            ("webhook: { failurePolicy: fail }", "fail"),
            ("webhook: { configurationName: 'A B' }", "kubernetes.webhook.configurationName"),
            ("webhook: { namespace: Ops }", "kubernetes.webhook.namespace `Ops`"),
            ("webhook: { certificate: { secret: s, certFile: c, keyFile: k } }", "not both"),
            ("webhook: { certificate: { certFile: c } }", "certFile and keyFile go together"),
            ("webhook: { certificate: { caFile: c } }", "caFile goes with certFile"),
            ("webhook: { port: 1 }", "port"),
        ] {
            let e = err(&format!("kubernetes:\n  {text}\n"));
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn webhook_urls_split_into_host_and_path() {
        let p = url_parts("https://127.0.0.1:9443/validate").unwrap();
        assert_eq!((p.host.as_str(), p.path.as_str()), ("127.0.0.1", "/validate"));
        let p = url_parts("https://[::1]:9443").unwrap();
        assert_eq!((p.host.as_str(), p.path.as_str()), ("::1", "/"));
        let p = url_parts("https://webhook.example.com/a/b").unwrap();
        assert_eq!(p.host, "webhook.example.com");
        for bad in ["https://", "https://a:x/", "https://u@a/", "https://a/?q", "https://[::1]x/"] {
            assert!(url_parts(bad).is_err(), "{bad}");
        }
    }
}
