//! The `plugins.<name>` section of the host config as written: the grants (checked against [`super::UNITS`] while parsing, so an error points at its line) and each unit's own section.

use serde::Deserialize;

use crate::plugin::{ChildrenSettings, HumanDuration, HumanSize, Limits, PluginSettings, ToolsSettings};

fn capabilities<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let caps = Vec::<String>::deserialize(d)?;
    for c in &caps {
        super::check_grant(c).map_err(serde::de::Error::custom)?;
    }
    Ok(caps)
}

/// One plugin's settings as written in the config file; values are checked while parsing,
/// so an error points at its line.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPluginSettings {
    /// Capabilities granted (names of [`super::UNITS`] only).
    #[serde(default, deserialize_with = "capabilities")]
    pub capabilities: Vec<String>,
    /// Allowed kinds.
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// Deadline of one call.
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    /// Memory cap.
    #[serde(default)]
    pub memory: Option<HumanSize>,
    /// Output cap.
    #[serde(default)]
    pub max_output: Option<HumanSize>,
    /// Reuse instances between calls.
    #[serde(default)]
    pub reuse_instances: Option<bool>,
    /// Settings of the `tools` capability.
    #[serde(default)]
    pub tools: Option<ToolsSettings>,
    /// Settings of the `children` capability.
    #[serde(default)]
    pub children: Option<ChildrenSettings>,
    /// Settings of the `http` capability, parsed and checked by its unit.
    #[serde(default)]
    pub http: Option<super::http::HttpSettings>,
}

impl RawPluginSettings {
    /// Applies defaults and checks ranges; the error names the setting.
    pub fn resolve(&self, plugin: &str) -> Result<PluginSettings, String> {
        let mut limits = Limits::default();
        let at = |key: &str, e: String| format!("plugins.{plugin}.{key}: {e}");
        if let Some(t) = self.timeout {
            limits.timeout = t.0;
        }
        if let Some(m) = self.memory {
            limits.memory = m.0;
            if limits.memory < 1024 * 1024 {
                return Err(at(
                    "memory",
                    format!("{} is too small; a plugin needs at least 1MiB", bytesize::ByteSize::b(m.0)),
                ));
            }
            if limits.memory > 4 * 1024 * 1024 * 1024 {
                return Err(at(
                    "memory",
                    format!("{} is over the 4GiB a 32-bit plugin can address", bytesize::ByteSize::b(m.0)),
                ));
            }
        }
        if let Some(o) = self.max_output {
            limits.max_output = o.0;
        }
        if let Some(r) = self.reuse_instances {
            limits.reuse_instances = r;
        }
        let mut settings = PluginSettings {
            capabilities: self.capabilities.clone(),
            kinds: self.kinds.clone(),
            limits,
            tools: self.tools.clone().unwrap_or_default(),
            children: self.children.clone().unwrap_or_default(),
            sections: Default::default(),
        };
        // Sections a unit parses itself, under its capability's name.
        if let Some(http) = &self.http {
            settings.sections.insert(super::http::NAME, http.clone());
        }
        super::check_settings(plugin, &settings)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::glob_match;
    use std::time::Duration;

    fn parse(yaml: &str) -> Result<RawPluginSettings, crate::yaml::YamlError> {
        crate::yaml::from_str(yaml)
    }

    #[test]
    fn defaults_are_ten_seconds_and_64_mib() {
        let s = RawPluginSettings::default().resolve("p").unwrap();
        assert_eq!(s.limits.timeout, Duration::from_secs(10));
        assert_eq!(s.limits.memory, 64 * 1024 * 1024);
        assert!(!s.limits.reuse_instances);
    }

    #[test]
    fn human_values_parse() {
        let s = parse("timeout: 500ms\nmemory: 128MiB\nmax_output: 2MiB\n").unwrap().resolve("p").unwrap();
        assert_eq!(s.limits.timeout, Duration::from_millis(500));
        assert_eq!(s.limits.memory, 128 * 1024 * 1024);
        assert_eq!(s.limits.max_output, 2 * 1024 * 1024);
    }

    #[test]
    fn bad_values_point_at_their_line() {
        let e = parse("kinds: [A]\ntimeout: soon\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e:?}");
        assert!(e.message.contains("`soon` is not a duration"), "{e:?}");
        let e = parse("capabilities: [network]\n").unwrap_err();
        assert!(e.message.contains("unknown capability `network`") && e.message.contains("services"), "{e:?}");
        let e = parse("timeout: 0s\n").unwrap_err();
        assert!(e.message.contains("longer than zero"), "{e:?}");
        let e = parse("timout: 1s\n").unwrap_err();
        assert!(e.message.contains("timout"), "{e:?}");
    }

    #[test]
    fn tool_patterns_match_with_stars() {
        assert!(glob_match("x_git_*", "x_git_status"));
        assert!(glob_match("x_git_*", "x_git_"));
        assert!(!glob_match("x_git_*", "x_gitlab_status"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("workflow_*", "workflow_deploy"));
        assert!(glob_match("x_*_status", "x_git_status"));
        assert!(!glob_match("x_*_status", "x_git_statuses"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXc"));
        let s = parse("capabilities: [tools]\ntools: { allow: [\"x_git_*\", core_service_list], timeout: 5m }\n")
            .unwrap()
            .resolve("p")
            .unwrap();
        assert!(s.tools.allows("x_git_log") && s.tools.allows("core_service_list"));
        assert!(!s.tools.allows("x_fs_read"));
        assert_eq!(s.tools.timeout, Some(HumanDuration(Duration::from_secs(300))));
        let e = parse("tools: { allw: [x] }\n").unwrap_err();
        assert!(e.message.contains("allw"), "{e:?}");
    }

    #[test]
    fn out_of_range_memory_names_the_setting() {
        let e = parse("memory: 8GiB\n").unwrap().resolve("p").unwrap_err();
        assert!(e.starts_with("plugins.p.memory:"), "{e}");
    }
}
