//! Child objects (capability `children`), whatever the mode: the owner's marks on a child, the manifest the host writes, and when a live child already says what is desired.
//!
//! A plugin granted `children` lists the objects its object wants (`Outcome::with_children`);
//! the `children` unit makes them exist in the owner's namespace through the driver's generic
//! object primitives ([`crate::driver::Driver::apply_object`] and the rest), deletes those no
//! longer listed and those of a deleted owner, and queues the owner when one changes. Each child carries the owner's marks: a controller owner reference (Kubernetes
//! mode), the labels [`OWNER_KIND_LABEL`] and [`OWNER_NAME_LABEL`], and the annotation
//! [`OWNER_ANNOTATION`] naming the owner in full.

use serde_json::{Map, Value, json};
use steward_sdk::Child;

use crate::model::ObjectKey;

/// Label on every child: the owner's kind.
pub const OWNER_KIND_LABEL: &str = "steward.dev/owner-kind";
/// Label on every child: the owner's name (cut to 63 characters with a hash when longer).
pub const OWNER_NAME_LABEL: &str = "steward.dev/owner-name";
/// Annotation on every child: the owner as `Kind/namespace/name`.
pub const OWNER_ANNOTATION: &str = "steward.dev/owner";
/// Annotation on every child: a hash of the manifest the host last applied, so a field the
/// plugin stopped setting (which the live object still has) makes a new apply.
pub const APPLIED_ANNOTATION: &str = "steward.dev/applied";

/// Whether `name` can name a child: a DNS subdomain (RFC 1123), at most 253 bytes.
pub fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// The value of [`OWNER_NAME_LABEL`] for an owner named `name`: the name itself when it is a
/// valid label value, else its first 54 characters, `-` and 8 hex digits of its hash.
pub fn owner_name_label(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let hash = crate::model::spec_hash(name);
    let head: String = name.chars().take(54).collect();
    format!("{}-{:08x}", head.trim_end_matches(['-', '.']), hash as u32)
}

/// The owner as [`OWNER_ANNOTATION`] says it.
pub fn owner_id(owner: &ObjectKey) -> String {
    format!("{}/{}/{}", owner.kind(), owner.namespace(), owner.name())
}

/// The owner that [`OWNER_ANNOTATION`] names, if it parses.
pub fn owner_of_annotation(value: &str) -> Option<ObjectKey> {
    let mut parts = value.splitn(3, '/');
    let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
    (!kind.is_empty() && !name.is_empty()).then(|| ObjectKey::new(kind, namespace, name))
}

/// The whole object the host writes for `child` of `owner`: the plugin's body, with
/// `apiVersion`, `kind`, `metadata.name`, `metadata.namespace` and the owner's marks set by the
/// host (the plugin cannot set them otherwise). `owner_ref` is the controller owner reference
/// (Kubernetes mode), if any.
pub fn manifest(child: &Child, owner: &ObjectKey, owner_ref: Option<Value>) -> Value {
    let mut obj = match &child.body {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    obj.remove("status");
    obj.insert("apiVersion".into(), child.api_version.clone().into());
    obj.insert("kind".into(), child.kind.clone().into());
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let keep: Map<String, Value> = ["labels", "annotations"]
        .iter()
        .filter_map(|k| meta.get(*k).filter(|v| v.is_object()).map(|v| (k.to_string(), v.clone())))
        .collect();
    let mut m = keep;
    m.insert("name".into(), child.name.clone().into());
    m.insert("namespace".into(), owner.namespace().clone().into());
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    labels[OWNER_KIND_LABEL] = owner.kind().clone().into();
    labels[OWNER_NAME_LABEL] = owner_name_label(owner.name()).into();
    let annotations = m.entry("annotations").or_insert_with(|| json!({}));
    annotations[OWNER_ANNOTATION] = owner_id(owner).into();
    if let Some(r) = owner_ref {
        m.insert("ownerReferences".into(), json!([r]));
    }
    *meta = Value::Object(m);
    Value::Object(obj)
}

/// `manifest` with [`APPLIED_ANNOTATION`] set to a hash of the rest of it.
pub fn with_applied_hash(mut manifest: Value) -> Value {
    let hash = crate::model::spec_hash(&manifest.to_string());
    if let Some(a) = manifest.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        a.insert(APPLIED_ANNOTATION.into(), format!("{hash:016x}").into());
    }
    manifest
}

/// Whether `live` already holds everything `desired` says: every field of `desired` is in
/// `live` with the same value (objects compared key by key, so fields the server or others
/// added do not count; lists and scalars compared whole). A desired `null`, `{}` or `[]` is
/// held by a live object without the field (the API server drops empty fields). A child that
/// covers its manifest (with [`APPLIED_ANNOTATION`], which catches fields the plugin stopped
/// setting) is not written again, so a resync of unchanged owners writes nothing.
pub fn covers(live: &Value, desired: &Value) -> bool {
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => covers(lv, dv) || (empty(dv) && empty(lv)),
            None => empty(dv),
        }),
        (Value::Array(l), Value::Array(d)) => l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| covers(lv, dv)),
        // The API server turns integer-valued floats into integers (and the other way round).
        (Value::Number(l), Value::Number(d)) => l.as_f64() == d.as_f64(),
        _ => live == desired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> ObjectKey {
        ObjectKey::new("Site", "team-a", "web")
    }

    #[test]
    fn names_are_dns_subdomains() {
        for ok in ["web", "web-1", "a.b-c.d", &"a".repeat(253)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "Web", "-web", "web-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn long_owner_names_still_make_valid_distinct_labels() {
        assert_eq!(owner_name_label("web"), "web");
        let a = owner_name_label(&format!("{}-a", "x".repeat(70)));
        let b = owner_name_label(&format!("{}-b", "x".repeat(70)));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.chars().last().unwrap().is_ascii_alphanumeric());
    }

    #[test]
    fn the_host_sets_identity_and_marks_and_keeps_the_plugins_labels() {
        let child = Child::new(
            "v1",
            "ConfigMap",
            "web-config",
            json!({
                "metadata": {"name": "sneaky", "namespace": "other", "labels": {"app": "web"}, "finalizers": ["x"]},
                "data": {"index.html": "hi"},
                "status": {"forged": true}
            }),
        );
        let r = json!({"apiVersion": "example.dev/v1", "kind": "Site", "name": "web", "uid": "u1", "controller": true});
        let m = manifest(&child, &owner(), Some(r.clone()));
        assert_eq!(m["apiVersion"], "v1");
        assert_eq!(m["kind"], "ConfigMap");
        assert_eq!(m["metadata"]["name"], "web-config");
        assert_eq!(m["metadata"]["namespace"], "team-a");
        assert_eq!(m["metadata"]["labels"]["app"], "web");
        assert_eq!(m["metadata"]["labels"][OWNER_KIND_LABEL], "Site");
        assert_eq!(m["metadata"]["labels"][OWNER_NAME_LABEL], "web");
        assert_eq!(m["metadata"]["annotations"][OWNER_ANNOTATION], "Site/team-a/web");
        assert_eq!(m["metadata"]["ownerReferences"], json!([r]));
        assert!(m["metadata"].get("finalizers").is_none() && m.get("status").is_none(), "{m:#}");
        assert_eq!(m["data"]["index.html"], "hi");
        assert_eq!(owner_of_annotation("Site/team-a/web"), Some(owner()));
        assert_eq!(owner_of_annotation("Site//web"), Some(ObjectKey::new("Site", "", "web")));
        assert_eq!(owner_of_annotation("Site"), None);
    }

    #[test]
    fn a_live_object_covers_what_it_holds_whatever_the_server_added() {
        let desired =
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}, "spec": {"replicas": 2}});
        let live = json!({
            "metadata": {"name": "a", "uid": "u", "resourceVersion": "7", "labels": {"x": "1", "other": "y"}},
            "data": {"k": "v"},
            "spec": {"replicas": 2.0, "strategy": {"type": "RollingUpdate"}},
            "status": {"ready": 1}
        });
        assert!(covers(&live, &desired));
        let changed = json!({"data": {"k": "w"}});
        assert!(!covers(&live, &changed));
        let missing = json!({"data": {"k2": "v"}});
        assert!(!covers(&live, &missing));
        assert!(!covers(&json!({"l": [1, 2, 3]}), &json!({"l": [1, 2]})));
        // Empty fields the server dropped, or turned from one empty into another, are held.
        assert!(covers(&json!({"a": 1}), &json!({"a": 1, "data": {}, "l": [], "n": null})));
        assert!(covers(&json!({"data": null}), &json!({"data": {}})));
        assert!(!covers(&json!({"data": {}}), &json!({"data": {"k": "v"}})));
    }

    #[test]
    fn a_field_the_plugin_stops_setting_changes_the_applied_hash() {
        let child = |data: Value| Child::new("v1", "ConfigMap", "c", json!({ "data": data }));
        let before = with_applied_hash(manifest(&child(json!({"a": "1", "b": "2"})), &owner(), None));
        let after = with_applied_hash(manifest(&child(json!({"a": "1"})), &owner(), None));
        // The live object still has `b`, so it covers the fields of the new manifest, but not its hash.
        assert!(!covers(&before, &after), "a dropped key would never be removed");
        assert!(covers(&before, &with_applied_hash(manifest(&child(json!({"a": "1", "b": "2"})), &owner(), None))));
        assert_eq!(after["metadata"]["annotations"][APPLIED_ANNOTATION].as_str().map(str::len), Some(16));
    }
}
