//! The host config file (`steward.yaml`): parsing, defaults, and validation with `file:line:column` errors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::plugin::PluginSettings;

// One module per section, each re-exported here; `load` puts them together and turns YAML errors
// into `file:line:column` ones, `values` holds the range-checked scalars the sections share.
mod api;
mod kubernetes;
mod load;
pub mod mcp;
mod plugins;
mod queue;
mod telemetry;
mod values;
mod webhook;

pub use api::{
    ApiConfig, DEFAULT_API_MAX_CONNECTIONS, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MCP_MAX_SESSIONS, ServerLimits,
};
pub use kubernetes::{KubernetesConfig, LeaderElectionConfig};
pub use load::ConfigError;
pub use mcp::McpSettings;
pub use plugins::{DEFAULT_POLL, PluginSource};
pub use queue::QueueConfig;
pub use telemetry::{LogConfig, LogFormat, TelemetryConfig};
pub use webhook::{
    DEFAULT_WEBHOOK_MAX_CONNECTIONS, DEFAULT_WEBHOOK_PATH, FailurePolicy, UrlParts, WebhookCertificate, WebhookConfig,
    WebhookEndpoint, url_parts,
};

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

/// The form the state store writes object records in (`state_format:`); either is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StateFormat {
    /// A compact binary form (the default): a third of the instructions of JSON to write, 40 % of its bytes.
    #[default]
    Binary,
    /// JSON, which every version reads: at start, records kept in binary are written again as
    /// JSON. Set it for one start before going back to a Steward that reads only JSON.
    Json,
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
    /// The form its records are written in.
    pub state_format: StateFormat,
    /// The compile cache of plugins.
    pub cache_dir: PathBuf,
    /// The bound of the compile cache's entries, in bytes: past it, those used least recently go.
    pub cache_limit: u64,
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

impl Config {
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

/// What the section modules' tests share: parsing a config text as `/srv/steward/steward.yaml`.
#[cfg(test)]
mod test_support {
    use std::path::Path;

    use super::{Config, ConfigError};

    /// `text` parsed as `steward.yaml` in `/srv/steward`.
    pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("steward.yaml"), Path::new("/srv/steward"))
    }

    /// The error `text` gives, as the user reads it.
    pub(super) fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }
}
