//! Plain data of the contract, owned by the SDK so plugin code never sees generated bindings.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Severity of a log line written through [`crate::Context::log`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

/// One object as the host holds it, with its spec and status still as JSON text.
///
/// This is what [`crate::Context::get`] and [`crate::Context::list`] return for
/// any kind, including kinds of other plugins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawObject {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (`default` when the source gave none).
    pub namespace: String,
    /// Bumped by the host each time the spec changes; starts at 1.
    pub generation: u64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The spec as JSON text.
    pub spec: String,
    /// The last reported status as JSON text, if any.
    pub status: Option<String>,
    /// True while the object is being deleted.
    pub deleting: bool,
}

impl RawObject {
    /// Parses the spec into `T`; the error names the field path.
    pub fn spec_as<T: DeserializeOwned>(&self) -> Result<T, FieldError> {
        parse_json(&self.spec, "spec")
    }

    /// Parses the last status into `T`; `None` when there is none or it does not parse.
    pub fn status_as<T: DeserializeOwned>(&self) -> Option<T> {
        self.status.as_deref().and_then(|s| serde_json::from_str(s).ok())
    }

    /// The value of a condition of the last status (`status.conditions[type=ty].status`), if reported.
    pub fn condition(&self, ty: &str) -> Option<ConditionStatus> {
        #[derive(Deserialize)]
        struct Conds {
            #[serde(default)]
            conditions: Vec<Condition>,
        }
        self.status_as::<Conds>()?.conditions.into_iter().find(|c| c.type_ == ty).map(|c| c.status)
    }
}

/// Parses JSON text into `T`, reporting the failing field as `prefix.path`.
pub(crate) fn parse_json<T: DeserializeOwned>(text: &str, prefix: &str) -> Result<T, FieldError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let inner = e.path().to_string();
        let path = if inner == "." || inner.is_empty() { prefix.to_string() } else { format!("{prefix}.{inner}") };
        FieldError::new(path, without_position(&e.into_inner()))
    })
}

/// serde_json's message without its ` at line L column C`: a position in the JSON text the host
/// hands over, which the author of the YAML file never sees (the field path says where).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).map_or_else(|| text.clone(), str::to_string)
}

/// One object of a kind, with its spec and last status typed.
#[derive(Clone, Debug, PartialEq)]
pub struct Object<S, St = serde_json::Value> {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// Bumped by the host each time the spec changes.
    pub generation: u64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The typed spec.
    pub spec: S,
    /// The status this plugin last reported; `None` on the first reconcile
    /// or when the stored status no longer parses as `St`.
    pub status: Option<St>,
    /// True while the object is being deleted.
    pub deleting: bool,
}

/// Which object a read means.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectRef {
    /// The kind.
    pub kind: String,
    /// The namespace.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectRef {
    /// A reference to `kind` `namespace/name`.
    pub fn new(kind: impl Into<String>, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { kind: kind.into(), namespace: namespace.into(), name: name.into() }
    }
}

/// The three values of a Kubernetes condition status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Cannot tell.
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// A Kubernetes-style condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// CamelCase type, for example `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// A sentence for people.
    pub message: String,
}

impl Condition {
    /// A condition `type_` that holds when `holds`, with a reason and message.
    pub fn new(type_: &str, holds: bool, reason: &str, message: impl Into<String>) -> Self {
        Self { type_: type_.into(), status: holds.into(), reason: reason.into(), message: message.into() }
    }
}

/// A problem with one field of a spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Path from the object root, for example `spec.steps[2].tool`.
    pub path: String,
    /// What is wrong and what would be right.
    pub message: String,
}

impl FieldError {
    /// An error at `path` saying `message`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Severity of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something needs attention.
    Warning,
}

/// A notable thing that happened to the object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Normal or warning.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// A sentence for people.
    pub message: String,
}

/// How an owned service is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// A child process spoken to over stdin/stdout.
    Stdio,
    /// A remote MCP streamable-HTTP endpoint.
    StreamableHttp,
    /// A remote MCP server-sent-events endpoint.
    Sse,
}

/// A service the object wants the host to run or connect to (capability `services`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Unique among the object's services.
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// stdio: the program.
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: extra environment.
    pub env: BTreeMap<String, String>,
    /// stdio: working directory.
    pub working_dir: Option<String>,
    /// remote: the endpoint.
    pub url: Option<String>,
    /// remote: extra headers.
    pub headers: BTreeMap<String, String>,
    /// Timeout of one health probe, in milliseconds.
    pub timeout_ms: u32,
    /// Environment variables (stdio) and headers (remote) whose values the host reads from a
    /// secret each time it starts or connects the service; the values never reach the plugin.
    /// They travel only through the `services` interface (the SDK's `services` feature): without
    /// it, a service that names secrets fails the reconcile rather than start without them.
    #[serde(default)]
    pub secrets: Vec<SecretValue>,
}

/// One environment variable or header of a service whose value the host fills in from a
/// secret when it starts or connects the service. The plugin names only where the value
/// is; the value itself never reaches the plugin, the status, the API, the log or an event
/// (a stdio child gets it in its environment, never its arguments).
///
/// The host refuses (the service is `Failed` until the spec changes) a target that does not
/// fit the transport (`Env` on a remote service, `Header` on a stdio one), a name that is not
/// valid or is also given a literal value, and a source its mode does not read (see
/// [`SecretSource`]). A source that names something missing fails one start or connect; the
/// host tries again with its backoff, so the service starts once the secret exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretValue {
    /// Whether it is an environment variable (stdio) or an HTTP header (remote).
    pub target: SecretTarget,
    /// The variable's or header's name.
    pub name: String,
    /// Where the host reads the value.
    pub source: SecretSource,
}

/// Where a [`SecretValue`] goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SecretTarget {
    /// An environment variable of a stdio service's process.
    Env,
    /// An HTTP header sent to a remote service.
    Header,
}

/// Where the host reads a secret value. Each mode reads only its own sources: filesystem mode
/// `File` and `Env`, Kubernetes mode `SecretKeyRef` in the object's namespace (a file or
/// environment source there would let whoever writes an object send the host pod's files or
/// environment to a server of their choosing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SecretSource {
    /// One key of a Kubernetes Secret (Kubernetes mode only), read with one `get` of the Secret.
    SecretKeyRef {
        /// The Secret's name.
        name: String,
        /// Its namespace; the object's when none. Any other namespace is refused.
        namespace: Option<String>,
        /// The key within the Secret's data.
        key: String,
    },
    /// A file on the host's filesystem (filesystem mode only); its content less one trailing
    /// newline (`\n` or `\r\n`).
    File {
        /// The file's path; a relative path is relative to the directory of the host config
        /// file, as a relative command is.
        path: String,
    },
    /// An environment variable of the host process (filesystem mode only).
    Env {
        /// The variable's name.
        name: String,
    },
}

/// A tool a service exposes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Its name as the server reports it.
    pub name: String,
    /// Its description.
    pub description: String,
}

/// Where an owned service stands (stdio: `Starting`, `Running`; remote: `Connecting`,
/// `Connected`, `Disconnected`; both: `Stopped`, `Failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ServicePhase {
    /// stdio: spawned, the MCP handshake is not done yet.
    Starting,
    /// stdio: the handshake succeeded.
    Running,
    /// Stopped on purpose.
    Stopped,
    /// Cannot run or connect; see the message.
    Failed,
    /// remote: the first handshake is under way.
    Connecting,
    /// remote: the last probe succeeded.
    Connected,
    /// remote: the last probe failed; retried with backoff.
    Disconnected,
}

impl ServicePhase {
    /// Every phase.
    pub const ALL: [ServicePhase; 7] = [
        Self::Starting,
        Self::Running,
        Self::Stopped,
        Self::Failed,
        Self::Connecting,
        Self::Connected,
        Self::Disconnected,
    ];

    /// The phase's name, as the API shows it (`Running`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "Starting",
            Self::Running => "Running",
            Self::Stopped => "Stopped",
            Self::Failed => "Failed",
            Self::Connecting => "Connecting",
            Self::Connected => "Connected",
            Self::Disconnected => "Disconnected",
        }
    }
}

impl std::fmt::Display for ServicePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ServicePhase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| format!("`{s}` is not a service phase"))
    }
}

impl PartialEq<&str> for ServicePhase {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What the host observes of one owned service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// The service's name.
    pub name: String,
    /// Where it stands.
    pub phase: ServicePhase,
    /// stdio: the process id while it runs.
    pub pid: Option<u32>,
    /// Restarts so far.
    pub restarts: u32,
    /// Failed starts or probes in a row; 0 after a success.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// RFC 3339 time of the next restart or reconnect attempt.
    #[serde(default)]
    pub next_retry_at: Option<String>,
    /// How the last run ended.
    pub last_exit: Option<String>,
    /// Result of the last health probe.
    pub healthy: Option<bool>,
    /// RFC 3339 time of the last successful handshake.
    pub last_connected: Option<String>,
    /// Tools listed at the last successful probe, with the service's secret values redacted from
    /// their descriptions (a tool whose name carries one is left out).
    pub tools: Vec<ToolInfo>,
    /// Why it is in this phase. While the service works, what the host noticed of it that does
    /// not stop it (lines of its stderr dropped, tools left out), one notice a line; `None` when
    /// there is nothing to say.
    pub message: Option<String>,
    /// remote: the server answered the last connect with HTTP 401 (it wants authorization).
    #[serde(default)]
    pub auth_required: bool,
}

/// One kind a plugin reconciles, as [`crate::Kind`] describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindInfo {
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// The kind.
    pub kind: String,
    /// Lower-case plural.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// OpenAPI v3 schema of the spec, as JSON text.
    pub spec_schema: String,
    /// Default resync in seconds; 0 means the host's default.
    pub resync_seconds: u32,
    /// The columns its lists show beyond the host's own (the optional `columns` export); empty
    /// for a kind that declares none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<PrinterColumn>,
}

/// How a printer column's value is shown, as Kubernetes' printer column types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// Text as is; another JSON value as its JSON text.
    #[default]
    String,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// An RFC 3339 time.
    Date,
}

impl ColumnType {
    /// The name Kubernetes gives the type in `additionalPrinterColumns`.
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Integer => "integer",
            ColumnType::Number => "number",
            ColumnType::Boolean => "boolean",
            ColumnType::Date => "date",
        }
    }
}

/// One column a kind's lists show, as Kubernetes' `additionalPrinterColumns`: the host shows it in
/// `steward status KIND`, the status page and the kind's CRD.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    /// The header, for example `State`.
    pub name: String,
    /// A simple JSON path starting at `.spec` or `.status`, for example `.status.state`.
    pub json_path: String,
    /// How the value is shown.
    #[serde(rename = "type")]
    pub type_: ColumnType,
    /// What the column says, for people; may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// 0 for a column every list shows; higher for wide output only.
    #[serde(default)]
    pub priority: u32,
}

impl PrinterColumn {
    /// A column named `name` showing the value at `json_path` as `type_`, priority 0.
    pub fn new(name: &str, json_path: &str, type_: ColumnType) -> Self {
        Self { name: name.into(), json_path: json_path.into(), type_, description: String::new(), priority: 0 }
    }

    /// The same column, described for people.
    pub fn description(mut self, description: &str) -> Self {
        self.description = description.into();
        self
    }

    /// The same column, shown only in wide output when `priority` is above 0.
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = priority;
        self
    }
}

/// What a plugin says of itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    /// Unique plugin name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its kinds.
    pub kinds: Vec<KindInfo>,
    /// Capabilities it needs.
    pub capabilities: Vec<String>,
}

/// A tool call the object wants the host to make (capability `tools`, SDK feature `tools`).
///
/// The host makes each `id` at most once per object (at least once across a host crash), so a
/// plugin names calls deterministically (for example after the step they belong to) and asks
/// for the same ids on every reconcile until it no longer wants them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRequest {
    /// Identifies the call among the object's calls (at most 253 bytes).
    pub id: String,
    /// The tool, by the name the host offers it under (`x_<server>_<tool>`, `workflow_<name>`, `core_*`).
    pub tool: String,
    /// Its arguments: a JSON object.
    pub arguments: serde_json::Value,
    /// How long one attempt may take, in milliseconds; `None` means the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
}

impl CallRequest {
    /// A call of `tool` with `arguments` (a JSON object), identified by `id`, with the host's timeout.
    pub fn new(id: impl Into<String>, tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self { id: id.into(), tool: tool.into(), arguments, timeout_ms: None }
    }
}

/// Where a tool call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallState {
    /// Recorded; not started yet (waiting for a worker, or for its retry).
    Pending,
    /// An attempt is under way.
    Running,
    /// The tool answered without `isError`.
    Succeeded,
    /// The tool answered with `isError`, every attempt failed, or the host refused the call.
    Failed,
    /// The object stopped wanting the call while it was pending or running.
    Cancelled,
}

impl CallState {
    /// Whether the call has ended (succeeded, failed or cancelled): it will not change again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

/// What the host recorded of one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// The call's id, as requested.
    pub id: String,
    /// The tool, as requested.
    pub tool: String,
    /// Where it stands.
    pub state: CallState,
    /// Attempts started so far.
    pub attempts: u32,
    /// The tool's answer when it gave one: MCP's `CallToolResult` (`content`,
    /// `structuredContent`, `isError`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Whether `result` was cut to the host's size limit (it then holds a note instead).
    #[serde(default)]
    pub truncated: bool,
    /// Why the call failed or was cancelled, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339 time the first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339 time the call ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

/// A Kubernetes-shaped object the owner wants to exist (capability `children`, SDK feature
/// `children`): a ConfigMap, a Deployment, an object of a kind a plugin serves.
///
/// The child lives in the owner's namespace. The host sets `apiVersion`, `kind`,
/// `metadata.name`, `metadata.namespace`, the owner reference and the owner labels; `body`
/// holds the rest (`spec`, `data`, `metadata.labels`, `metadata.annotations`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Child {
    /// `v1`, `apps/v1`, `steward.dev/v1alpha1`.
    pub api_version: String,
    /// `ConfigMap`, `Deployment`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// The rest of the object: a JSON object.
    pub body: serde_json::Value,
}

impl Child {
    /// A child of `api_version`/`kind` named `name`, with `body` (a JSON object such as
    /// `{"data": {...}}` or `{"spec": {...}}`).
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
        body: serde_json::Value,
    ) -> Self {
        Self { api_version: api_version.into(), kind: kind.into(), name: name.into(), body }
    }
}

/// A child as the host last saw it (capability `children`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedChild {
    /// As desired.
    pub api_version: String,
    /// As desired.
    pub kind: String,
    /// As desired.
    pub name: String,
    /// The whole object as last seen (metadata, spec or data, status); `None` while it does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<serde_json::Value>,
}

impl ObservedChild {
    /// The child's `status`, when it exists and has one.
    pub fn status(&self) -> Option<&serde_json::Value> {
        self.object.as_ref().and_then(|o| o.get("status"))
    }
}
