//! The generic object primitives' vocabulary: a kind by `apiVersion`, a label selector, and an object as the mode holds it.
//!
//! These name no capability and no mode: whatever needs objects of the mode asks the driver to
//! watch, list, apply and delete them through [`crate::driver::Driver`]'s `watch_selected`,
//! `list_selected`, `list_selected_now`, `apply_object` and `delete_object`, and each mode
//! (`crate::kubernetes::objects`, the files driver) speaks them.

use std::collections::BTreeMap;

use serde_json::Value;

/// A kind of object: its `apiVersion` (`v1`, `apps/v1`) and `kind` (`ConfigMap`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKind {
    /// `v1`, `apps/v1`.
    pub api_version: String,
    /// `ConfigMap`.
    pub kind: String,
}

impl ObjectKind {
    /// The kind `kind` of `api_version`.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { api_version: api_version.into(), kind: kind.into() }
    }

    /// Parses `apiVersion/Kind` as a config writes it (`v1/ConfigMap`, `apps/v1/Deployment`);
    /// the error says what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not apiVersion/Kind; write for example v1/ConfigMap or apps/v1/Deployment");
        let (api_version, kind) = text.trim().rsplit_once('/').ok_or_else(bad)?;
        let version_ok = !api_version.is_empty() && api_version.split('/').count() <= 2;
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !version_ok || !kind_ok || api_version.split('/').any(str::is_empty) {
            return Err(bad());
        }
        Ok(Self::new(api_version, kind))
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// The version (`v1`).
    pub fn version(&self) -> &str {
        self.api_version.rsplit_once('/').map_or(self.api_version.as_str(), |(_, v)| v)
    }

    /// The kind of a whole object (its `apiVersion` and `kind`), if it names one.
    pub fn of(obj: &Value) -> Option<Self> {
        let api_version = obj.get("apiVersion")?.as_str().filter(|s| !s.is_empty())?;
        let kind = obj.get("kind")?.as_str().filter(|s| !s.is_empty())?;
        Some(Self::new(api_version, kind))
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// A label selector: every label it names is present, with the value it gives when it gives one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Selector(BTreeMap<String, Option<String>>);

impl Selector {
    /// This selector, also requiring the label `key` (any value).
    pub fn has(mut self, key: &str) -> Self {
        self.0.insert(key.to_string(), None);
        self
    }

    /// This selector, also requiring the label `key` to be `value`.
    pub fn equals(mut self, key: &str, value: &str) -> Self {
        self.0.insert(key.to_string(), Some(value.to_string()));
        self
    }

    /// Whether an object with `labels` (a JSON object of strings, or nothing) is selected.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        self.0.iter().all(|(k, want)| {
            let got = labels.and_then(|l| l.get(k)).and_then(Value::as_str);
            match want {
                None => got.is_some(),
                Some(v) => got == Some(v.as_str()),
            }
        })
    }

    /// The selector as Kubernetes writes it: `a,b=c`.
    pub fn to_query(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| match v {
                None => k.clone(),
                Some(v) => format!("{k}={v}"),
            })
            .collect();
        parts.join(",")
    }
}

/// Which object: its kind, namespace and name, and the mode's id of it (Kubernetes' `uid`;
/// `None` in modes without one, or when any object of that name will do).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its namespace (empty when cluster-scoped).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The mode's id of this very object: a delete leaves an object made since in its place.
    pub uid: Option<String>,
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// An object as the mode holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Selected {
    /// Which object it is.
    pub id: ObjectId,
    /// The whole object (`apiVersion`, `kind`, `metadata`, and the rest), without the server's
    /// bookkeeping of field managers.
    pub object: Value,
}

impl Selected {
    /// The object `object` of kind `kind`, its id read from its `metadata`.
    pub fn new(kind: ObjectKind, object: Value) -> Self {
        let meta = |k: &str| object.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).map(String::from);
        let id = ObjectId {
            kind,
            namespace: meta("namespace").unwrap_or_default(),
            name: meta("name").unwrap_or_default(),
            uid: meta("uid"),
        };
        Self { id, object }
    }

    /// The object's `metadata.labels`, if any.
    pub fn labels(&self) -> Option<&Value> {
        self.object.pointer("/metadata/labels")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_selector_selects_by_presence_and_value_and_prints_as_kubernetes_does() {
        let s = Selector::default().has("a").equals("b", "x");
        assert_eq!(s.to_query(), "a,b=x");
        assert!(s.matches(Some(&json!({"a": "", "b": "x", "c": "y"}))));
        assert!(!s.matches(Some(&json!({"b": "x"}))));
        assert!(!s.matches(Some(&json!({"a": "1", "b": "y"}))));
        assert!(!s.matches(None));
        assert!(Selector::default().matches(None));
    }

    #[test]
    fn kinds_and_ids_read_from_the_object() {
        let o = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "namespace": "n", "uid": "u"}});
        let k = ObjectKind::of(&o).unwrap();
        assert_eq!((k.group(), k.version(), k.to_string().as_str()), ("apps", "v1", "apps/v1/Deployment"));
        assert_eq!(ObjectKind::new("v1", "ConfigMap").group(), "");
        let s = Selected::new(k, o);
        assert_eq!((s.id.namespace.as_str(), s.id.name.as_str(), s.id.uid.as_deref()), ("n", "w", Some("u")));
        assert!(ObjectKind::of(&json!({"kind": "X"})).is_none());
    }
}
