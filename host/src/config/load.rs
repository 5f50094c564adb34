//! Reading and parsing the config file: the top-level sections put together, and YAML errors turned into `file:line:column` ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{Config, FieldValidation, LogConfig, Mode, StateFormat, api, kubernetes, plugins, queue, telemetry};
use crate::capabilities::RawPluginSettings;
use crate::plugin::HumanDuration;
use crate::yaml;

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
    plugin_sources: Vec<plugins::RawPluginSource>,
    state: Option<PathBuf>,
    #[serde(default)]
    state_format: StateFormat,
    cache_dir: Option<PathBuf>,
    cache_limit: Option<crate::plugin::HumanSize>,
    #[serde(default)]
    api: api::RawApi,
    #[serde(default)]
    queue: queue::RawQueue,
    resync: Option<HumanDuration>,
    #[serde(default)]
    field_validation: FieldValidation,
    #[serde(default)]
    kubernetes: kubernetes::RawKubernetes,
    #[serde(default)]
    log: telemetry::RawLog,
    #[serde(default)]
    telemetry: telemetry::RawTelemetry,
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
        let plugins = plugins::plugin_settings(&raw.plugins).map_err(&invalid)?;
        let queue = queue::queue_config(&raw.queue).map_err(&invalid)?;
        let api = api::api_config(raw.api, base).map_err(&invalid)?;
        let state = abs(raw.state, ".steward/state.redb");
        let cache_dir = match raw.cache_dir {
            Some(p) => abs(Some(p), ""),
            None => state.parent().map_or_else(|| base.join(".steward/cache"), |d| d.join("cache")),
        };
        let kubernetes = kubernetes::kubernetes_config(raw.kubernetes, base).map_err(&invalid)?;
        let telemetry = telemetry::telemetry_config(raw.telemetry).map_err(&invalid)?;
        Ok(Self {
            file: file.to_path_buf(),
            mode: raw.mode,
            resources: abs(raw.resources, "resources"),
            plugin_dir: abs(raw.plugin_dir, "plugins"),
            plugins,
            plugin_sources: plugins::plugin_sources(raw.plugin_sources, base).map_err(&invalid)?,
            state,
            state_format: raw.state_format,
            cache_dir,
            cache_limit: raw.cache_limit.map_or(crate::plugin::DEFAULT_CACHE_LIMIT, |s| s.0),
            api,
            queue,
            resync: raw.resync.map_or(Duration::from_secs(600), |d| d.0),
            field_validation: raw.field_validation,
            kubernetes,
            log: LogConfig { format: raw.log.format.unwrap_or_default() },
            telemetry,
        })
    }
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
    use std::path::Path;
    use std::time::Duration;

    use crate::config::test_support::{err, parse};
    use crate::config::{FieldValidation, Mode, StateFormat};

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

    #[test]
    fn the_compile_cache_is_bounded_by_default_and_by_cache_limit() {
        assert_eq!(parse("").unwrap().cache_limit, crate::plugin::DEFAULT_CACHE_LIMIT);
        assert_eq!(parse("cache_limit: 256MiB\n").unwrap().cache_limit, 256 * 1024 * 1024);
        let e = err("resync: 1m\ncache_limit: lots\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("`lots` is not a size"), "{e}");
        let e = err("cache_limit: 0\n");
        assert!(e.starts_with("steward.yaml:1:") && e.contains("must be larger than zero"), "{e}");
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
    fn field_validation_defaults_to_warn_and_takes_the_api_servers_three_values() {
        assert_eq!(parse("").unwrap().field_validation, FieldValidation::Warn);
        assert_eq!(parse("field_validation: strict\n").unwrap().field_validation, FieldValidation::Strict);
        assert_eq!(parse("field_validation: ignore\n").unwrap().field_validation, FieldValidation::Ignore);
        let e = err("resync: 1m\nfield_validation: Strict\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("Strict"), "{e}");
    }

    #[test]
    fn the_state_store_writes_binary_records_unless_told_json() {
        assert_eq!(parse("").unwrap().state_format, StateFormat::Binary);
        assert_eq!(parse("state_format: json\n").unwrap().state_format, StateFormat::Json);
        assert_eq!(parse("state_format: binary\n").unwrap().state_format, StateFormat::Binary);
        let e = err("resync: 1m\nstate_format: yaml\n");
        assert!(e.starts_with("steward.yaml:2:") && e.contains("yaml"), "{e}");
    }

    #[test]
    fn yaml_1_1_booleans_are_refused_where_a_boolean_is_expected() {
        let e = err("plugins:\n  p: { reuse_instances: yes }\n");
        assert!(e.starts_with("steward.yaml:2:"), "{e}");
    }
}
