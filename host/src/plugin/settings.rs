//! Per-plugin settings from the host config: granted capabilities, allowed kinds, and limits.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// Most objects (namespace nodes included) a world round receives; a larger world fails
    /// the round whole.
    pub world_objects: usize,
    /// Most bytes of objects a world round receives, and most bytes its answer may hold.
    pub world_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            memory: 64 * 1024 * 1024,
            max_output: 1024 * 1024,
            reuse_instances: false,
            world_objects: 50_000,
            world_bytes: 64 * 1024 * 1024,
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
    /// The settings sections of capability units (`plugins.<name>.http`, `.tools`), each
    /// under its capability's name, parsed by its unit; the runtime knows none of their types.
    #[serde(flatten)]
    pub sections: Sections,
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

/// A duration written as a human string (`500ms`, `10s`, `5m`); must be positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(HumanDuration).map_err(serde::de::Error::custom)
    }
}

/// A size written as a human string (`64MiB`, `1MB`, `4096`); must be positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanSize(pub u64);

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_size(&text).map(HumanSize).map_err(serde::de::Error::custom)
    }
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
    let size: bytesize::ByteSize =
        text.trim().parse().map_err(|e| format!("`{text}` is not a size ({e}); write for example 64MiB or 1MB"))?;
    if size.as_u64() == 0 {
        return Err(format!("`{text}` must be larger than zero"));
    }
    Ok(size.as_u64())
}

/// Settings sections owned by capability units: each under its capability's name, of a type
/// only its unit knows. Two are equal when they hold the same sections with equal values; they
/// serialize as one map entry per section.
#[derive(Clone, Default)]
pub struct Sections {
    entries: Vec<(&'static str, Arc<dyn Section>)>,
}

/// What a unit's settings type offers the runtime: comparison and serialization without its type.
pub trait Section: Any + Send + Sync + std::fmt::Debug {
    /// Whether `other` is the same type with an equal value.
    fn same(&self, other: &dyn Section) -> bool;
    /// The settings as JSON, as the API shows them.
    fn to_json(&self) -> serde_json::Value;
    /// The value, to downcast.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + Send + Sync + std::fmt::Debug + PartialEq + Serialize> Section for T {
    fn same(&self, other: &dyn Section) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Sections {
    /// Sets the section of capability `name` (replacing one there was).
    pub fn insert<T: Section>(&mut self, name: &'static str, value: T) {
        self.insert_shared(name, Arc::new(value));
    }

    /// [`Sections::insert`] of a section already shared (as a unit's parser makes it).
    pub fn insert_shared(&mut self, name: &'static str, value: Arc<dyn Section>) {
        self.entries.retain(|(n, _)| *n != name);
        self.entries.push((name, value));
    }

    /// Whether a section of capability `name` is set.
    pub fn has(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, _)| *n == name)
    }

    /// The section of type `T`, if the settings have one.
    pub fn get<T: Section>(&self) -> Option<&T> {
        self.entries.iter().find_map(|(_, v)| v.as_any().downcast_ref::<T>())
    }

    /// The section of type `T`, or its default when the settings have none (a grant without
    /// its section).
    pub fn get_or_default<T: Section + Default + Clone>(&self) -> std::borrow::Cow<'_, T> {
        self.get::<T>().map_or_else(|| std::borrow::Cow::Owned(T::default()), std::borrow::Cow::Borrowed)
    }
}

impl PartialEq for Sections {
    fn eq(&self, other: &Self) -> bool {
        self.entries.len() == other.entries.len()
            && self.entries.iter().all(|(n, v)| other.entries.iter().any(|(m, w)| n == m && v.same(w.as_ref())))
    }
}

impl Eq for Sections {}

impl std::fmt::Debug for Sections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.entries.iter().map(|(n, v)| (n, v))).finish()
    }
}

impl Serialize for Sections {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (n, v) in &self.entries {
            map.serialize_entry(n, &v.to_json())?;
        }
        map.end()
    }
}
