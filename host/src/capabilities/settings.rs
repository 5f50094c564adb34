//! The `plugins.<name>` section of the host config as written: the grants (checked against [`super::UNITS`] while parsing, so an error points at its line), the limits, and each unit's own section, parsed as its unit's type.

use std::fmt;
use std::sync::LazyLock;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::plugin::{HumanDuration, HumanSize, Limits, PluginSettings, Sections};

/// The grants as written; each name is checked while parsing.
struct Grants(Vec<String>);

impl<'de> Deserialize<'de> for Grants {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let caps = Vec::<String>::deserialize(d)?;
        for c in &caps {
            super::check_grant(c).map_err(de::Error::custom)?;
        }
        Ok(Self(caps))
    }
}

/// One plugin's settings as written in the config file; values are checked while parsing,
/// so an error points at its line. Besides the keys below, each capability unit with settings
/// has its section under its name (`http`, `tools`), parsed by the unit's own type.
#[derive(Clone, Debug, Default)]
pub struct RawPluginSettings {
    /// Capabilities granted (names of [`super::UNITS`] only).
    pub capabilities: Vec<String>,
    /// Allowed kinds.
    pub kinds: Option<Vec<String>>,
    /// Deadline of one call.
    pub timeout: Option<HumanDuration>,
    /// Memory cap.
    pub memory: Option<HumanSize>,
    /// Output cap.
    pub max_output: Option<HumanSize>,
    /// Reuse instances between calls.
    pub reuse_instances: Option<bool>,
    /// Most objects a world round receives.
    pub world_objects: Option<usize>,
    /// Most bytes a world round receives (and answers).
    pub world_bytes: Option<HumanSize>,
    /// The units' sections, each under its capability's name.
    pub sections: Sections,
}

/// The keys of `plugins.<name>` that are not a unit's section.
const KEYS: [&str; 8] =
    ["capabilities", "kinds", "timeout", "memory", "max_output", "reuse_instances", "world_objects", "world_bytes"];

/// Every key of `plugins.<name>`: [`KEYS`] and the units' sections (what an unknown key's error lists).
static ALL_KEYS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| KEYS.iter().copied().chain(super::section_keys()).collect());

/// Parses the value of `key` as the section of the unit named so.
struct SectionOf<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for SectionOf<'_> {
    type Value = Option<(&'static str, std::sync::Arc<dyn crate::plugin::Section>)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        super::parse_section(self.0, d).transpose()
    }
}

impl<'de> Deserialize<'de> for RawPluginSettings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RawPluginSettings;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a plugin's settings (capabilities, kinds, limits, and each capability's section)")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPluginSettings, A::Error> {
                let mut out = RawPluginSettings::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "capabilities" => out.capabilities = map.next_value::<Grants>()?.0,
                        "kinds" => out.kinds = map.next_value()?,
                        "timeout" => out.timeout = map.next_value()?,
                        "memory" => out.memory = map.next_value()?,
                        "max_output" => out.max_output = map.next_value()?,
                        "reuse_instances" => out.reuse_instances = map.next_value()?,
                        "world_objects" => out.world_objects = map.next_value()?,
                        "world_bytes" => out.world_bytes = map.next_value()?,
                        other if super::section_keys().contains(&other) => {
                            if let Some((name, section)) = map.next_value_seed(SectionOf(other))? {
                                out.sections.insert_shared(name, section);
                            }
                        }
                        other => return Err(de::Error::unknown_field(other, &ALL_KEYS)),
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Fields)
    }
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
        if let Some(n) = self.world_objects {
            if n == 0 {
                return Err(at("world_objects", "must be at least 1".into()));
            }
            limits.world_objects = n;
        }
        if let Some(b) = self.world_bytes {
            limits.world_bytes = b.0;
        }
        let settings = PluginSettings {
            capabilities: self.capabilities.clone(),
            kinds: self.kinds.clone(),
            limits,
            sections: self.sections.clone(),
        };
        super::check_settings(plugin, &settings)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolsSettings;
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
    fn a_units_section_is_parsed_as_its_own_type_and_its_errors_point_at_their_line() {
        let s = parse("capabilities: [tools]\ntools: { allow: [\"x_git_*\", core_service_list], timeout: 5m }\n")
            .unwrap()
            .resolve("p")
            .unwrap();
        let tools = s.sections.get::<ToolsSettings>().expect("the tools section");
        assert!(tools.allows("x_git_log") && tools.allows("core_service_list"));
        assert!(!tools.allows("x_fs_read"));
        assert_eq!(tools.timeout, Some(HumanDuration(Duration::from_secs(300))));
        let e = parse("tools: { allw: [x] }\n").unwrap_err();
        assert!(e.message.contains("allw"), "{e:?}");
        // An error deep inside a section points at its own line and column.
        let e = parse("capabilities: [http]\nhttp:\n  rules:\n    - hosts: [a.example]\n      ports: [80, x]\n")
            .unwrap_err();
        assert_eq!((e.line, e.column), (Some(5), Some(19)), "{e:?}");
        let e = parse("capabilities: [tools]\ntools:\n  allow: [x]\n  timeout: soon\n").unwrap_err();
        assert_eq!(e.line, Some(4), "{e:?}");
        assert!(e.message.contains("`soon` is not a duration"), "{e:?}");
        // An unknown key lists every key, the units' sections included.
        let e = parse("htp: {}\n").unwrap_err();
        assert!(e.message.contains("htp") && e.message.contains("http") && e.message.contains("tools"), "{e:?}");
        // A section without its grant is kept (and checked only once granted); a grant without
        // its section gets the unit's default.
        let s = parse("tools: { allow: [x] }\n").unwrap().resolve("p").unwrap();
        assert!(s.sections.has("tools"));
        let s = parse("capabilities: [tools]\ntools: { allow: [x] }\n").unwrap().resolve("p").unwrap();
        assert_eq!(s.sections.get_or_default::<ToolsSettings>().allow, ["x"]);
    }

    #[test]
    fn out_of_range_memory_names_the_setting() {
        let e = parse("memory: 8GiB\n").unwrap().resolve("p").unwrap_err();
        assert!(e.starts_with("plugins.p.memory:"), "{e}");
    }
}
