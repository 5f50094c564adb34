//! Per-plugin settings from the host config: granted capabilities, allowed kinds, and limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Capabilities this host knows how to grant.
pub const KNOWN_CAPABILITIES: &[&str] = &["services"];

/// Resource limits of every call into one plugin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Wall-clock deadline of one call, enforced by epoch interruption.
    #[serde(with = "humantime_serde_like")]
    pub timeout: Duration,
    /// Cap on the plugin's linear memory, in bytes.
    pub memory: u64,
    /// Cap on the size of what one call returns, in bytes.
    pub max_output: u64,
    /// Keep instances between calls (faster; discarded after any trap or timeout).
    pub reuse_instances: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            memory: 64 * 1024 * 1024,
            max_output: 1024 * 1024,
            reuse_instances: false,
        }
    }
}

/// What the host config says about one plugin (by plugin name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginSettings {
    /// Capabilities granted beyond the base contract.
    pub capabilities: Vec<String>,
    /// When set, only these of the plugin's kinds are served.
    pub kinds: Option<Vec<String>>,
    /// Limits of its calls.
    pub limits: Limits,
}

impl PluginSettings {
    /// Whether `capability` is granted.
    pub fn grants(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

mod humantime_serde_like {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// Settings as written in the config file, before defaults are applied.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPluginSettings {
    /// Capabilities granted.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Allowed kinds.
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// Deadline, for example `10s`.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Memory cap, for example `64MiB`.
    #[serde(default)]
    pub memory: Option<String>,
    /// Output cap, for example `1MiB`.
    #[serde(default)]
    pub max_output: Option<String>,
    /// Reuse instances between calls.
    #[serde(default)]
    pub reuse_instances: Option<bool>,
}

/// Parses a human duration (`500ms`, `10s`, `5m`) that must be positive.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration ({e}); write for example 500ms, 10s or 5m"))?;
    if d.is_zero() {
        return Err(format!("`{text}` must be longer than zero"));
    }
    Ok(d)
}

/// Parses a human size (`64MiB`, `1 MB`, `4096`) that must be positive.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .trim()
        .parse()
        .map_err(|e| format!("`{text}` is not a size ({e}); write for example 64MiB or 1MB"))?;
    if size.as_u64() == 0 {
        return Err(format!("`{text}` must be larger than zero"));
    }
    Ok(size.as_u64())
}

impl RawPluginSettings {
    /// Applies defaults and checks values; the error names the setting.
    pub fn resolve(&self, plugin: &str) -> Result<PluginSettings, String> {
        let mut limits = Limits::default();
        let at = |key: &str, e: String| format!("plugins.{plugin}.{key}: {e}");
        if let Some(t) = &self.timeout {
            limits.timeout = parse_duration(t).map_err(|e| at("timeout", e))?;
        }
        if let Some(m) = &self.memory {
            limits.memory = parse_size(m).map_err(|e| at("memory", e))?;
            if limits.memory < 1024 * 1024 {
                return Err(at("memory", format!("`{m}` is too small; a plugin needs at least 1MiB")));
            }
            if limits.memory > 4 * 1024 * 1024 * 1024 {
                return Err(at("memory", format!("`{m}` is over the 4GiB a 32-bit plugin can address")));
            }
        }
        if let Some(o) = &self.max_output {
            limits.max_output = parse_size(o).map_err(|e| at("max_output", e))?;
        }
        if let Some(r) = self.reuse_instances {
            limits.reuse_instances = r;
        }
        for c in &self.capabilities {
            if !KNOWN_CAPABILITIES.contains(&c.as_str()) {
                return Err(at(
                    "capabilities",
                    format!("unknown capability `{c}`; this host grants: {}", KNOWN_CAPABILITIES.join(", ")),
                ));
            }
        }
        Ok(PluginSettings { capabilities: self.capabilities.clone(), kinds: self.kinds.clone(), limits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ten_seconds_and_64_mib() {
        let s = RawPluginSettings::default().resolve("p").unwrap();
        assert_eq!(s.limits.timeout, Duration::from_secs(10));
        assert_eq!(s.limits.memory, 64 * 1024 * 1024);
        assert!(!s.limits.reuse_instances);
    }

    #[test]
    fn human_values_parse() {
        let raw = RawPluginSettings {
            timeout: Some("500ms".into()),
            memory: Some("128MiB".into()),
            max_output: Some("2MiB".into()),
            ..Default::default()
        };
        let s = raw.resolve("p").unwrap();
        assert_eq!(s.limits.timeout, Duration::from_millis(500));
        assert_eq!(s.limits.memory, 128 * 1024 * 1024);
        assert_eq!(s.limits.max_output, 2 * 1024 * 1024);
    }

    #[test]
    fn bad_values_name_the_setting() {
        let raw = RawPluginSettings { timeout: Some("soon".into()), ..Default::default() };
        let e = raw.resolve("mcpserver").unwrap_err();
        assert!(e.starts_with("plugins.mcpserver.timeout:"), "{e}");
        let raw = RawPluginSettings { memory: Some("8GiB".into()), ..Default::default() };
        assert!(raw.resolve("p").unwrap_err().contains("plugins.p.memory"));
        let raw = RawPluginSettings { capabilities: vec!["network".into()], ..Default::default() };
        let e = raw.resolve("p").unwrap_err();
        assert!(e.contains("unknown capability `network`") && e.contains("services"), "{e}");
    }
}
