//! The host config file (`steward.yaml`): parsing, defaults, and validation with `file:line:column` errors.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::plugin::{HumanDuration, PluginSettings, RawPluginSettings};
use crate::yaml;

pub mod mcp;

pub use mcp::McpSettings;

/// Where desired state comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// YAML files in a directory (the default).
    #[default]
    Filesystem,
    /// Custom resources in a Kubernetes cluster.
    Kubernetes,
    /// Kubernetes when a cluster config is found, else the filesystem.
    Auto,
}

/// The HTTP API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// File holding the bearer token; required when `listen` is not a loopback address.
    pub token_file: Option<PathBuf>,
    /// Its connection limits (`api.max_connections`, `api.header_read_timeout`).
    pub limits: ServerLimits,
    /// Most MCP sessions open at once at `/mcp` (`api.mcp_max_sessions`).
    pub mcp_max_sessions: usize,
    /// The rest of `/mcp`'s settings (`api.mcp`).
    pub mcp: McpSettings,
}

/// The limits of one of the host's HTTP listeners (the API, the admission webhook).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most connections open at once; past it, new ones wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers, and then its body (a body that
    /// has not arrived by then is answered 408); also how long an idle keep-alive connection
    /// stays open.
    pub header_read_timeout: Duration,
}

/// The API's default [`ServerLimits::max_connections`].
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 512;
/// The webhook's default [`ServerLimits::max_connections`].
pub const DEFAULT_WEBHOOK_MAX_CONNECTIONS: usize = 256;
/// The default [`ServerLimits::header_read_timeout`] of both listeners.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The default [`ApiConfig::mcp_max_sessions`].
pub const DEFAULT_MCP_MAX_SESSIONS: usize = 256;

/// The work queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Reconciles that run at once.
    pub workers: usize,
    /// Failed attempts before an object is `Failed`.
    pub max_retries: u32,
    /// First retry delay.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Quiet time after a file change before it is read.
    pub debounce: Duration,
    /// Longest a continuously written file waits before it is read anyway.
    pub debounce_max: Duration,
}

/// Leader election among replicas (Kubernetes mode): one holds a coordination Lease and reconciles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Whether replicas elect a leader; when off, every replica reconciles (run one only).
    pub enabled: bool,
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease; `None` means the pod's own namespace (or `default` outside a cluster).
    pub namespace: Option<String>,
    /// This replica's identity; `None` means `$POD_NAME`, else the host name, plus a random suffix.
    pub identity: Option<String>,
    /// How long a lease lasts without renewal before another replica may take it.
    pub lease_duration: Duration,
    /// How long before expiry the holder renews.
    pub renew_grace: Duration,
}

/// Kubernetes mode: which objects this replica serves, and how replicas share the work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// Namespaces to watch; empty means all.
    pub namespaces: Vec<String>,
    /// A label selector (`shard=a`, `tier in (x,y)`) that limits the objects this replica serves.
    pub label_selector: Option<String>,
    /// Leader election.
    pub leader_election: LeaderElectionConfig,
    /// Attempts of a status write that meets a conflict before it counts as failed.
    pub status_retries: u32,
    /// The validating admission webhook served from the plugins' `validate`.
    pub webhook: WebhookConfig,
}

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

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            label_selector: None,
            leader_election: LeaderElectionConfig {
                enabled: true,
                lease_name: "steward".into(),
                namespace: None,
                identity: None,
                lease_duration: Duration::from_secs(15),
                renew_grace: Duration::from_secs(5),
            },
            status_retries: 5,
            webhook: WebhookConfig::default(),
        }
    }
}

/// How the host writes its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Lines for people (the default).
    #[default]
    Text,
    /// One JSON object per line, with the fields of the event and of the spans it is in.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    /// `text` or `json`, as the config and `--log-format` spell them.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("`{other}` is not a log format; use text or json")),
        }
    }
}

/// The host's log (`log:`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// The format; `steward run --log-format` overrides it.
    pub format: LogFormat,
}

/// Traces exported with OpenTelemetry's OTLP over HTTP (`telemetry:`). Off unless an endpoint is
/// set here or in `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (which win).
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://host:4318`); traces go to `{endpoint}/v1/traces`.
    pub endpoint: Option<String>,
    /// The `service.name` of the traces, unless `OTEL_SERVICE_NAME` sets it.
    pub service_name: String,
    /// The share of traces kept, from 0 to 1 (a trace's spans are kept or dropped together).
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { endpoint: None, service_name: "steward".into(), sample_ratio: 1.0 }
    }
}

/// What the host does with spec fields the kind's schema does not know (`field_validation:`),
/// as a Kubernetes API server's `fieldValidation` does: the field is dropped (pruned) before
/// the plugin sees the spec, and reported or refused by this setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldValidation {
    /// Each unknown field is a field error: the object is `Failed` (invalid) until the spec changes.
    Strict,
    /// Each unknown field is dropped and reported as a warning on the object (the default).
    #[default]
    Warn,
    /// Each unknown field is dropped silently.
    Ignore,
}

impl FieldValidation {
    /// The setting as the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Warn => "warn",
            Self::Ignore => "ignore",
        }
    }
}

/// A loaded, validated host config. Relative paths are resolved against the config file's directory.
#[derive(Clone, Debug)]
pub struct Config {
    /// The config file it came from (or `<defaults>`).
    pub file: PathBuf,
    /// Where desired state comes from.
    pub mode: Mode,
    /// Directory of YAML resources (filesystem mode).
    pub resources: PathBuf,
    /// Directory of `*.wasm` plugins.
    pub plugin_dir: PathBuf,
    /// Per-plugin settings, by plugin name.
    pub plugins: BTreeMap<String, PluginSettings>,
    /// Plugins pulled from OCI registries, besides those of `plugin_dir`.
    pub plugin_sources: Vec<PluginSource>,
    /// The embedded state store.
    pub state: PathBuf,
    /// The compile cache of plugins.
    pub cache_dir: PathBuf,
    /// The HTTP API.
    pub api: ApiConfig,
    /// The work queue.
    pub queue: QueueConfig,
    /// Default interval between resyncs of an object.
    pub resync: Duration,
    /// What happens to spec fields the kind's schema does not know.
    pub field_validation: FieldValidation,
    /// Kubernetes mode settings (ignored in filesystem mode).
    pub kubernetes: KubernetesConfig,
    /// The host's log.
    pub log: LogConfig,
    /// Trace export.
    pub telemetry: TelemetryConfig,
}

/// Why a config cannot be used. The message starts with `file:line:column:` where there is one.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the config: {source}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("{at}: {message}")]
    Invalid {
        /// `file:line:column`, or the file alone.
        at: String,
        /// What is wrong and what to write instead.
        message: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    mode: Mode,
    resources: Option<PathBuf>,
    plugin_dir: Option<PathBuf>,
    #[serde(default)]
    plugins: BTreeMap<String, RawPluginSettings>,
    #[serde(default)]
    plugin_sources: Vec<RawPluginSource>,
    state: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    #[serde(default)]
    api: RawApi,
    #[serde(default)]
    queue: RawQueue,
    resync: Option<HumanDuration>,
    #[serde(default)]
    field_validation: FieldValidation,
    #[serde(default)]
    kubernetes: RawKubernetes,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    telemetry: RawTelemetry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    format: Option<LogFormat>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    endpoint: Option<String>,
    service_name: Option<String>,
    sample_ratio: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawKubernetes {
    #[serde(default)]
    namespaces: Vec<String>,
    label_selector: Option<String>,
    #[serde(default)]
    leader_election: RawLeaderElection,
    status_retries: Option<Positive>,
    #[serde(default)]
    webhook: RawWebhook,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWebhook {
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLeaderElection {
    enabled: Option<bool>,
    lease_name: Option<String>,
    namespace: Option<String>,
    identity: Option<String>,
    lease_duration: Option<HumanDuration>,
    renew_grace: Option<HumanDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    listen: Option<ListenAddr>,
    token_file: Option<PathBuf>,
    max_connections: Option<Count>,
    header_read_timeout: Option<HumanDuration>,
    mcp_max_sessions: Option<Count>,
    #[serde(default)]
    mcp: mcp::RawMcp,
}

/// A count of connections or sessions: 1 to [`Count::MAX`].
#[derive(Debug)]
struct Count(usize);

impl Count {
    const MAX: u32 = 65_536;
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if n == 0 || n > Self::MAX {
            return Err(serde::de::Error::custom(format!("{n} is out of range; use 1 to {}", Self::MAX)));
        }
        Ok(Count(n as usize))
    }
}

#[derive(Debug)]
struct ListenAddr(SocketAddr);

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(ListenAddr).map_err(|_| {
            serde::de::Error::custom(format!("`{text}` is not an address:port; write for example 127.0.0.1:7878"))
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueue {
    workers: Option<Positive>,
    max_retries: Option<u32>,
    initial_backoff: Option<HumanDuration>,
    max_backoff: Option<HumanDuration>,
    debounce: Option<HumanDuration>,
    debounce_max: Option<HumanDuration>,
}

#[derive(Debug)]
struct Positive(u32);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if n == 0 || n > 1024 {
            return Err(serde::de::Error::custom(format!("{n} is out of range; use 1 to 1024")));
        }
        Ok(Positive(n))
    }
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let meta = std::fs::metadata(path).map_err(|source| ConfigError::Read { file: path.into(), source })?;
        if meta.len() > yaml::MAX_FILE_BYTES {
            return Err(ConfigError::Invalid {
                at: path.display().to_string(),
                message: format!("the config is {} bytes; the limit is {}", meta.len(), yaml::MAX_FILE_BYTES),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { file: path.into(), source })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&text, path, &base)
    }

    /// The defaults, as if an empty config file lived in `base`.
    pub fn defaults(base: &Path) -> Self {
        Self::parse("{}", Path::new("<defaults>"), base).expect("the defaults are valid")
    }

    /// Parses `text` as the config file `file`, resolving relative paths against `base`.
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Self, ConfigError> {
        let label = file.display().to_string();
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            yaml::from_str(text).map_err(|e| invalid_at(&label, &e))?
        };
        let invalid = |message: String| ConfigError::Invalid { at: label.clone(), message };
        let abs = |p: Option<PathBuf>, default: &str| {
            let p = p.unwrap_or_else(|| PathBuf::from(default));
            if p.is_absolute() { p } else { base.join(p) }
        };
        let mut plugins = BTreeMap::new();
        for (name, raw) in &raw.plugins {
            if !crate::plugin::is_dns_label(name) {
                return Err(invalid(format!(
                    "plugins.{name}: a plugin name is a DNS-1123 label (lower-case letters, digits, '-')"
                )));
            }
            plugins.insert(name.clone(), raw.resolve(name).map_err(&invalid)?);
        }
        let q = &raw.queue;
        let queue = QueueConfig {
            workers: q.workers.as_ref().map_or(4, |w| w.0 as usize),
            max_retries: q.max_retries.unwrap_or(5),
            initial_backoff: q.initial_backoff.map_or(Duration::from_secs(1), |d| d.0),
            max_backoff: q.max_backoff.map_or(Duration::from_secs(300), |d| d.0),
            debounce: q.debounce.map_or(Duration::from_millis(200), |d| d.0),
            debounce_max: q.debounce_max.map_or(Duration::from_secs(2), |d| d.0),
        };
        if queue.max_backoff < queue.initial_backoff {
            return Err(invalid(format!(
                "queue.max_backoff ({}) must be at least queue.initial_backoff ({})",
                humantime::format_duration(queue.max_backoff),
                humantime::format_duration(queue.initial_backoff)
            )));
        }
        if queue.debounce_max < queue.debounce {
            return Err(invalid(format!(
                "queue.debounce_max ({}) must be at least queue.debounce ({})",
                humantime::format_duration(queue.debounce_max),
                humantime::format_duration(queue.debounce)
            )));
        }
        let listen = raw.api.listen.map_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7878)), |l| l.0);
        let token_file = raw.api.token_file.map(|p| abs(Some(p), ""));
        if !listen.ip().is_loopback() && token_file.is_none() {
            return Err(invalid(format!(
                "api.listen {listen} is not a loopback address, so the API needs a bearer token: set api.token_file to a file that holds it"
            )));
        }
        let state = abs(raw.state, ".steward/state.redb");
        let cache_dir = match raw.cache_dir {
            Some(p) => abs(Some(p), ""),
            None => state.parent().map_or_else(|| base.join(".steward/cache"), |d| d.join("cache")),
        };
        let kubernetes = kubernetes_config(raw.kubernetes, base).map_err(&invalid)?;
        let telemetry = telemetry_config(raw.telemetry).map_err(&invalid)?;
        Ok(Self {
            file: file.to_path_buf(),
            mode: raw.mode,
            resources: abs(raw.resources, "resources"),
            plugin_dir: abs(raw.plugin_dir, "plugins"),
            plugins,
            plugin_sources: plugin_sources(raw.plugin_sources, base).map_err(&invalid)?,
            state,
            cache_dir,
            api: ApiConfig {
                listen,
                token_file,
                limits: ServerLimits {
                    max_connections: raw.api.max_connections.map_or(DEFAULT_API_MAX_CONNECTIONS, |n| n.0),
                    header_read_timeout: raw.api.header_read_timeout.map_or(DEFAULT_HEADER_READ_TIMEOUT, |t| t.0),
                },
                mcp_max_sessions: raw.api.mcp_max_sessions.map_or(DEFAULT_MCP_MAX_SESSIONS, |n| n.0),
                mcp: raw.api.mcp.resolve(),
            },
            queue,
            resync: raw.resync.map_or(Duration::from_secs(600), |d| d.0),
            field_validation: raw.field_validation,
            kubernetes,
            log: LogConfig { format: raw.log.format.unwrap_or_default() },
            telemetry,
        })
    }

    /// The host-wide settings every plugin is given in its WASI environment (and nothing else of
    /// the host's environment): `STEWARD_MCP_PREFIX`, the `/mcp` tool prefix (`api.mcp.prefix`),
    /// which the SDK reads as `steward_sdk::settings::mcp_prefix`.
    pub fn plugin_env(&self) -> Vec<(String, String)> {
        let management = match self.api.mcp.management {
            mcp::Management::ReadOnly => "read-only",
            mcp::Management::ReadWrite => "read-write",
        };
        vec![
            (steward_sdk::settings::MCP_PREFIX_VAR.to_string(), self.api.mcp.prefix.clone()),
            (steward_sdk::settings::MCP_MANAGEMENT_VAR.to_string(), management.to_string()),
        ]
    }

    /// The settings of plugin `name`: its section, or the defaults.
    pub fn plugin_settings(&self, name: &str) -> PluginSettings {
        self.plugins.get(name).cloned().unwrap_or_default()
    }
}

/// One plugin pulled from an OCI registry (`plugin_sources:`), followed while the host runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSource {
    /// `oci://registry/repository:tag` (polled) or `oci://registry/repository@sha256:<hex>` (fixed).
    pub reference: String,
    /// How often a tag is looked at for a new digest.
    pub poll: Duration,
    /// A PEM ECDSA P-256 public key (cosign's `cosign.pub`): when set, only artifacts signed with
    /// it are loaded.
    pub key: Option<PathBuf>,
    /// PEM CA certificates trusted for the registry, besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Speak plain HTTP (allowed for a loopback registry; any other needs `insecure`).
    pub plain_http: bool,
    /// Allow plain HTTP to a registry that is not this machine.
    pub insecure: bool,
    /// A Docker `config.json` holding the registry's credentials.
    pub docker_config: Option<PathBuf>,
    /// A file holding a bearer token for the registry.
    pub token_file: Option<PathBuf>,
    /// Settings of this plugin; when absent, `plugins.<name>` applies as for a file.
    pub settings: Option<PluginSettings>,
}

/// The default interval between two looks at a tag.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPluginSource {
    #[serde(rename = "ref")]
    reference: String,
    poll: Option<HumanDuration>,
    key: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    plain_http: bool,
    #[serde(default)]
    insecure: bool,
    docker_config: Option<PathBuf>,
    token_file: Option<PathBuf>,
    settings: Option<RawPluginSettings>,
}

fn plugin_sources(raw: Vec<RawPluginSource>, base: &Path) -> Result<Vec<PluginSource>, String> {
    let abs = |p: Option<PathBuf>| p.map(|p| if p.is_absolute() { p } else { base.join(p) });
    let mut out: Vec<PluginSource> = Vec::new();
    for (i, s) in raw.into_iter().enumerate() {
        let at = format!("plugin_sources[{i}]");
        let parsed = crate::oci::OciRef::parse(&s.reference).map_err(|e| format!("{at}.ref: {e}"))?;
        let reference = parsed.to_string();
        if out.iter().any(|o| o.reference == reference) {
            return Err(format!("{at}.ref: {reference} is listed twice; list each reference once"));
        }
        if s.plain_http && !s.insecure && !parsed.is_loopback() {
            return Err(format!(
                "{at}: plain_http to {}, which is not this machine, sends plugins and credentials in the clear; use HTTPS (ca_file for a private CA), or also set `insecure: true` if you mean it",
                parsed.registry
            ));
        }
        if s.docker_config.is_some() && s.token_file.is_some() {
            return Err(format!("{at}: set docker_config or token_file, not both"));
        }
        let settings = match &s.settings {
            Some(raw) => Some(raw.resolve("<name>").map_err(|e| format!("{at}.settings: {e}"))?),
            None => None,
        };
        out.push(PluginSource {
            reference,
            poll: s.poll.map_or(DEFAULT_POLL, |d| d.0),
            key: abs(s.key),
            ca_file: abs(s.ca_file),
            plain_http: s.plain_http,
            insecure: s.insecure,
            docker_config: abs(s.docker_config),
            token_file: abs(s.token_file),
            settings,
        });
    }
    Ok(out)
}

fn kubernetes_config(raw: RawKubernetes, base: &Path) -> Result<KubernetesConfig, String> {
    let mut k = KubernetesConfig::default();
    for ns in &raw.namespaces {
        if !crate::model::is_dns_label(ns) {
            return Err(format!("kubernetes.namespaces: `{ns}` is not a namespace name (a DNS-1123 label)"));
        }
    }
    k.namespaces = raw.namespaces;
    k.label_selector = raw.label_selector.filter(|s| !s.trim().is_empty());
    if let Some(sel) = &k.label_selector
        && let Err(e) = crate::selector::check(sel)
    {
        return Err(format!("kubernetes.labelSelector `{sel}`: {e}"));
    }
    let le = raw.leader_election;
    let d = &mut k.leader_election;
    d.enabled = le.enabled.unwrap_or(true);
    if let Some(name) = le.lease_name {
        if !crate::model::is_dns_subdomain(&name) {
            return Err(format!("kubernetes.leaderElection.leaseName: `{name}` is not a DNS-1123 subdomain"));
        }
        d.lease_name = name;
    }
    d.namespace = le.namespace;
    d.identity = le.identity.filter(|s| !s.is_empty());
    if let Some(x) = le.lease_duration {
        d.lease_duration = x.0;
    }
    if let Some(x) = le.renew_grace {
        d.renew_grace = x.0;
    }
    // Whole seconds, as a Lease counts them: the holder renews `renewGrace` before expiry.
    let secs = |d: Duration| d.as_secs_f64().ceil() as u64;
    if secs(d.lease_duration) < 2 || secs(d.renew_grace) >= secs(d.lease_duration) {
        return Err(format!(
            "kubernetes.leaderElection: leaseDuration ({}) must be at least 2s and at least a whole second longer than renewGrace ({})",
            humantime::format_duration(d.lease_duration),
            humantime::format_duration(d.renew_grace)
        ));
    }
    if let Some(n) = raw.status_retries {
        k.status_retries = n.0;
    }
    k.webhook = webhook_config(raw.webhook, base)?;
    Ok(k)
}

fn webhook_config(raw: RawWebhook, base: &Path) -> Result<WebhookConfig, String> {
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

fn telemetry_config(raw: RawTelemetry) -> Result<TelemetryConfig, String> {
    let mut t = TelemetryConfig::default();
    if let Some(url) = raw.endpoint.map(|u| u.trim().trim_end_matches('/').to_string()).filter(|u| !u.is_empty()) {
        let host = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/') || h.contains(char::is_whitespace)) {
            return Err(format!(
                "telemetry.endpoint `{url}` is not an http:// or https:// URL; write the collector's OTLP/HTTP base URL, for example http://127.0.0.1:4318"
            ));
        }
        t.endpoint = Some(url);
    }
    if let Some(name) = raw.service_name {
        if name.trim().is_empty() {
            return Err("telemetry.service_name is empty; leave it out for `steward`".into());
        }
        t.service_name = name;
    }
    if let Some(r) = raw.sample_ratio {
        if !(0.0..=1.0).contains(&r) {
            return Err(format!("telemetry.sample_ratio {r} is out of range; use 0 to 1 (1 keeps every trace)"));
        }
        t.sample_ratio = r;
    }
    Ok(t)
}

fn invalid_at(label: &str, e: &yaml::YamlError) -> ConfigError {
    let at = match (e.line, e.column) {
        (Some(l), Some(c)) => format!("{label}:{l}:{c}"),
        (Some(l), None) => format!("{label}:{l}"),
        _ => label.to_string(),
    };
    ConfigError::Invalid { at, message: e.message.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("steward.yaml"), Path::new("/srv/steward"))
    }

    #[test]
    fn the_documented_example_parses() {
        let c = parse(
            "mode: filesystem\nresources: ./resources\nplugin_dir: ./plugins\nplugins:\n  mcpserver: { kinds: [MCPServer], capabilities: [services], timeout: 10s, memory: 64MiB }\nstate: ./.steward/state.redb\napi: { listen: 127.0.0.1:7878 }\nqueue: { workers: 4, max_retries: 5, initial_backoff: 1s, max_backoff: 5m, debounce: 200ms, debounce_max: 2s }\nresync: 10m\n",
        )
        .unwrap();
        assert_eq!(c.resources, Path::new("/srv/steward/./resources"));
        assert_eq!(c.plugins["mcpserver"].capabilities, vec!["services"]);
        assert_eq!(c.queue.max_backoff, Duration::from_secs(300));
        assert_eq!(c.resync, Duration::from_secs(600));
        assert_eq!(c.cache_dir, Path::new("/srv/steward/./.steward/cache"));
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.mode, Mode::Filesystem);
        assert_eq!(c.queue.workers, 4);
        assert_eq!(c.api.listen.to_string(), "127.0.0.1:7878");
        assert_eq!(c.plugin_dir, Path::new("/srv/steward/plugins"));
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let e = err("mode: filesystem\nresource: ./r\n");
        assert!(e.starts_with("steward.yaml:2:"), "{e}");
        assert!(e.contains("resource"), "{e}");
        let e = err("queue:\n  workers: 2\n  retries: 3\n");
        assert!(e.starts_with("steward.yaml:3:"), "{e}");
    }

    #[test]
    fn wrong_types_and_impossible_values_are_errors() {
        assert!(err("queue: { workers: many }\n").starts_with("steward.yaml:1:"));
        // Each says what it expected and what it found, and a broken bracket is a syntax error.
        let e = err("queue:\n  workers: four\n");
        assert!(
            e.starts_with("steward.yaml:2:12:") && e.contains("expected a whole number (0 or more), found `four`"),
            "{e}"
        );
        let e = err("queue:\n  workers: [4\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("unclosed bracket"), "{e}");
        let e = err("queue:\n  workers: 0\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("out of range"), "{e}");
        let e = err("mode: cloud\n");
        assert!(e.contains("cloud"), "{e}");
        let e = err("resync: forever\n");
        assert!(e.contains("`forever` is not a duration"), "{e}");
        let e = err("queue: { initial_backoff: 10s, max_backoff: 1s }\n");
        assert!(e.contains("queue.max_backoff (1s) must be at least queue.initial_backoff (10s)"), "{e}");
        let e = err("api: { listen: 'localhost' }\n");
        assert!(e.contains("not an address:port"), "{e}");
        let e = err("plugins:\n  Bad_Name: {}\n");
        assert!(e.contains("plugins.Bad_Name"), "{e}");
    }

    #[test]
    fn the_http_servers_limits_have_defaults_and_bad_values_name_their_line() {
        let c = parse("").unwrap();
        let defaults = ServerLimits { max_connections: 512, header_read_timeout: Duration::from_secs(30) };
        assert_eq!((c.api.limits, c.api.mcp_max_sessions), (defaults, 256));
        assert_eq!(c.kubernetes.webhook.limits, ServerLimits { max_connections: 256, ..defaults });
        let c = parse(
            "api:\n  max_connections: 64\n  header_read_timeout: 5s\n  mcp_max_sessions: 8\nkubernetes:\n  webhook: { maxConnections: 32, headerReadTimeout: 2s }\n",
        )
        .unwrap();
        assert_eq!(c.api.limits, ServerLimits { max_connections: 64, header_read_timeout: Duration::from_secs(5) });
        assert_eq!(c.api.mcp_max_sessions, 8);
        assert_eq!(
            c.kubernetes.webhook.limits,
            ServerLimits { max_connections: 32, header_read_timeout: Duration::from_secs(2) }
        );
        let e = err("api:\n  mcp:\n    prefix: 1x\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("start with a letter"), "{e}");
        assert_eq!(c.api.mcp, McpSettings::default());
        let e = err("api:\n  mcp_max_sessions: 0\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("0 is out of range; use 1 to 65536"), "{e}");
        let e = err("api:\n  listen: 127.0.0.1:7878\n  header_read_timeout: 0s\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("`0s` must be longer than zero"), "{e}");
        let e = err("kubernetes:\n  webhook:\n    maxConnections: 100000\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("out of range"), "{e}");
        let e = err("kubernetes:\n  webhook:\n    headerReadTimeout: soon\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("`soon` is not a duration"), "{e}");
    }

    #[test]
    fn a_public_listen_address_needs_a_token_file() {
        let e = err("api: { listen: 0.0.0.0:7878 }\n");
        assert!(e.contains("api.token_file"), "{e}");
        let c = parse("api: { listen: 0.0.0.0:7878, token_file: token }\n").unwrap();
        assert_eq!(c.api.token_file.as_deref(), Some(Path::new("/srv/steward/token")));
    }

    #[test]
    fn the_kubernetes_section_parses_and_checks_its_values() {
        let c = parse(
            "mode: kubernetes\nkubernetes:\n  namespaces: [team-a, team-b]\n  labelSelector: shard=a\n  leaderElection: { leaseName: steward-a, leaseDuration: 10s, renewGrace: 3s }\n",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Kubernetes);
        assert_eq!(c.kubernetes.namespaces, ["team-a", "team-b"]);
        assert_eq!(c.kubernetes.label_selector.as_deref(), Some("shard=a"));
        assert_eq!(c.kubernetes.leader_election.lease_name, "steward-a");
        assert_eq!(c.kubernetes.leader_election.lease_duration, Duration::from_secs(10));
        assert!(c.kubernetes.leader_election.enabled);
        let e = err("kubernetes: { namespaces: [Team_A] }\n");
        assert!(e.contains("kubernetes.namespaces") && e.contains("Team_A"), "{e}");
        let e = err("kubernetes: { labelSelector: 'a in b' }\n");
        assert!(e.contains("kubernetes.labelSelector"), "{e}");
        let e = err("kubernetes: { leaderElection: { leaseDuration: 2s, renewGrace: 5s } }\n");
        assert!(e.contains("longer than renewGrace"), "{e}");
        let e = err("kubernetes: { leader_election: {} }\n");
        assert!(e.contains("leader_election"), "{e}");
    }

    #[test]
    fn the_log_and_telemetry_sections_parse_and_check_their_values() {
        let c = parse("").unwrap();
        assert_eq!(c.log.format, LogFormat::Text);
        assert_eq!(c.telemetry, TelemetryConfig::default());
        assert_eq!(c.telemetry.endpoint, None, "trace export is off by default");
        let c = parse(
            "log: { format: json }\ntelemetry: { endpoint: 'http://otel:4318/', service_name: edge, sample_ratio: 0.25 }\n",
        )
        .unwrap();
        assert_eq!(c.log.format, LogFormat::Json);
        assert_eq!(c.telemetry.endpoint.as_deref(), Some("http://otel:4318"));
        assert_eq!(c.telemetry.service_name, "edge");
        assert_eq!(c.telemetry.sample_ratio, 0.25);
        let e = err("log:\n  format: xml\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("xml"), "{e}");
        let e = err("telemetry: { endpoint: 'otel:4318' }\n");
        assert!(e.contains("telemetry.endpoint `otel:4318` is not an http:// or https:// URL"), "{e}");
        let e = err("telemetry: { sample_ratio: 2 }\n");
        assert!(e.contains("telemetry.sample_ratio 2 is out of range"), "{e}");
        let e = err("telemetry: { service_name: ' ' }\n");
        assert!(e.contains("telemetry.service_name"), "{e}");
        let e = err("telemetry:\n  endpoint: http://a:1\n  headers: x\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("headers"), "{e}");
    }

    #[test]
    fn field_validation_defaults_to_warn_and_takes_the_api_servers_three_values() {
        assert_eq!(parse("").unwrap().field_validation, FieldValidation::Warn);
        assert_eq!(parse("field_validation: strict\n").unwrap().field_validation, FieldValidation::Strict);
        assert_eq!(parse("field_validation: ignore\n").unwrap().field_validation, FieldValidation::Ignore);
        let e = err("resync: 1m\nfield_validation: Strict\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("Strict"), "{e}");
    }

    #[test]
    fn plugin_sources_parse_and_check_their_values() {
        let c = parse(
            "plugin_sources:\n  - ref: oci://127.0.0.1:5000/steward/mcpserver:1\n    plain_http: true\n    poll: 30s\n    key: keys/cosign.pub\n    settings: { capabilities: [services] }\n  - ref: oci://ghcr.io/acme/wf@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
        )
        .unwrap();
        let s = &c.plugin_sources[0];
        assert_eq!(s.poll, Duration::from_secs(30));
        assert_eq!(s.key.as_deref(), Some(Path::new("/srv/steward/keys/cosign.pub")));
        assert_eq!(s.settings.as_ref().unwrap().capabilities, ["services"]);
        assert_eq!(c.plugin_sources[1].poll, DEFAULT_POLL);
        assert!(c.plugin_sources[1].settings.is_none());
        let e = err("plugin_sources:\n  - ref: ghcr.io/acme/wf:1\n");
        assert!(e.contains("plugin_sources[0].ref") && e.contains("oci://"), "{e}");
        let e = err("plugin_sources:\n  - ref: oci://ghcr.io/acme/wf:1\n    plain_http: true\n");
        assert!(e.contains("insecure: true"), "{e}");
        let e = err("plugin_sources:\n  - { ref: 'oci://r/a:1' }\n  - { ref: 'oci://r/a:1' }\n");
        assert!(e.contains("listed twice"), "{e}");
        let e = err("plugin_sources:\n  - ref: oci://r/a:1\n    keys: x\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("keys"), "{e}");
    }

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

    #[test]
    fn yaml_1_1_booleans_are_refused_where_a_boolean_is_expected() {
        let e = err("plugins:\n  p: { reuse_instances: yes }\n");
        assert!(e.starts_with("steward.yaml:2:"), "{e}");
    }
}
