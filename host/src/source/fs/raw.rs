//! A document as written: the fields every object has, each with its position, and the keys no object has (ignored in filesystem mode, as muster ignores them, and reported as warnings).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_saphyr::Spanned;

use super::document::DocError;

/// What is written where the object has a string: text, or what else it is. The check is left
/// to the caller, which knows the field and where its value is: a plain scalar that YAML reads
/// as a number or a boolean (`name: 123`, `apiVersion: 1`, a label `version: 2`) is not taken
/// as text, as the Kubernetes API server does not take it; quoted, it is text.
pub(super) enum Text {
    Text(String),
    /// What was found instead, for the message.
    Not(String),
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text::Text(v))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text::Not(format!("the boolean {v}")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Text, E> {
                Ok(Text::Not("null".into()))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Text, E> {
                Ok(Text::Not("null".into()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Text, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text::Not("a sequence".into()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Text, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text::Not("a mapping".into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The text of `field`, or an error at its value that says what was found instead.
pub(super) fn text(field: &str, v: Spanned<Text>) -> Result<String, DocError> {
    match v.value {
        Text::Text(t) => Ok(t),
        Text::Not(found) => {
            let hint = if found.starts_with("the ") { " (quote it to make it text)" } else { "" };
            Err(DocError::at(&v.referenced, format!("{field} must be a string, not {found}{hint}")))
        }
    }
}

/// The labels or annotations, each value checked by [`text`].
pub(super) fn texts(
    field: &str,
    map: Option<BTreeMap<String, Spanned<Text>>>,
) -> Result<BTreeMap<String, String>, DocError> {
    map.unwrap_or_default().into_iter().map(|(k, v)| Ok((k.clone(), text(&format!("{field}.{k}"), v)?))).collect()
}

/// A key as written: its text, or what else it is (`1`, `true`, a mapping), for the warning.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Key(match Text::deserialize(d)? {
            Text::Text(t) => t,
            Text::Not(found) => format!("<{found}>"),
        }))
    }
}

/// A document as written. `status` is accepted and ignored; any other key is kept in `unknown`.
#[derive(Default)]
pub(super) struct RawDoc {
    pub(super) api_version: Option<Spanned<Text>>,
    pub(super) kind: Option<Spanned<Text>>,
    pub(super) metadata: Option<Spanned<RawMeta>>,
    pub(super) spec: Option<Spanned<serde_json::Value>>,
    /// Keys no object has, in the order written.
    pub(super) unknown: Vec<String>,
}

impl<'de> Deserialize<'de> for RawDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawDoc;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping with apiVersion, kind, metadata and spec")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<RawDoc, A::Error> {
                let mut doc = RawDoc::default();
                while let Some(Key(key)) = a.next_key::<Key>()? {
                    match key.as_str() {
                        "apiVersion" => doc.api_version = a.next_value()?,
                        "kind" => doc.kind = a.next_value()?,
                        "metadata" => doc.metadata = a.next_value()?,
                        "spec" => doc.spec = a.next_value()?,
                        "status" => drop(a.next_value::<IgnoredAny>()?),
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                            doc.unknown.push(key);
                        }
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_map(V)
    }
}

/// `metadata`. Fields a Kubernetes server fills in are accepted and ignored, so that objects
/// exported from a cluster load; any other key (a typo like `lables`) is kept in `unknown`.
#[derive(Default)]
pub(super) struct RawMeta {
    pub(super) name: Option<Spanned<Text>>,
    pub(super) namespace: Option<Spanned<Text>>,
    pub(super) labels: Option<BTreeMap<String, Spanned<Text>>>,
    pub(super) annotations: Option<BTreeMap<String, Spanned<Text>>>,
    /// Keys `metadata` does not have, in the order written.
    pub(super) unknown: Vec<String>,
}

/// The `metadata` fields a Kubernetes server fills in, ignored.
const SERVER_FILLED: [&str; 10] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "finalizers",
    "ownerReferences",
];

impl<'de> Deserialize<'de> for RawMeta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMeta;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping with name, namespace, labels and annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<RawMeta, A::Error> {
                let mut meta = RawMeta::default();
                while let Some(Key(key)) = a.next_key::<Key>()? {
                    match key.as_str() {
                        "name" => meta.name = a.next_value()?,
                        "namespace" => meta.namespace = a.next_value()?,
                        "labels" => meta.labels = a.next_value()?,
                        "annotations" => meta.annotations = a.next_value()?,
                        k if SERVER_FILLED.contains(&k) => drop(a.next_value::<IgnoredAny>()?),
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                            meta.unknown.push(key);
                        }
                    }
                }
                Ok(meta)
            }
        }
        d.deserialize_map(V)
    }
}
