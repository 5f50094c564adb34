//! Making an owner's children what it wants, whatever the mode, through the driver's generic object primitives: the owner's marks, desired against observed, pruning, and removal with the owner.
//!
//! The driver only watches, lists, applies and deletes objects by selector
//! ([`crate::driver::Driver::apply_object`] and the rest). What makes them children is here:
//! each carries the owner's labels and annotation ([`crate::children`]) and, where the mode
//! has ids, a controller owner reference; a child that already says what is desired is not
//! written again; one the owner no longer lists is deleted; all go with the owner.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use steward_sdk::{Child, ObservedChild};

use crate::children::{self as marks, APPLIED_ANNOTATION, OWNER_ANNOTATION, OWNER_KIND_LABEL, OWNER_NAME_LABEL};
use crate::driver::{Driver, DriverError, ObjectKind, Selected, Selector};
use crate::model::ObjectKey;

/// A child by namespace, `apiVersion`, kind and name (any object of that name: its uid aside).
type ChildId = (String, ObjectKind, String);

/// What the host's last write of a child left: the applied hash it wrote, and the version of
/// the object the write made (Kubernetes' `resourceVersion`; `None` where the mode has none).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    hash: String,
    version: Option<String>,
}

/// The children of every owner, made through one driver.
pub(super) struct Converge {
    driver: Arc<dyn Driver>,
    /// Each child's last write by this host, to tell "unchanged since" without comparing fields.
    written: Mutex<HashMap<ChildId, Written>>,
}

/// The selector of every child of every owner: the objects that carry the owner-kind label.
pub(super) fn all_children() -> Selector {
    Selector::default().has(OWNER_KIND_LABEL)
}

/// The selector of `owner`'s children: its kind and name labels.
fn children_of(owner: &ObjectKey) -> Selector {
    Selector::default()
        .equals(OWNER_KIND_LABEL, owner.kind())
        .equals(OWNER_NAME_LABEL, &marks::owner_name_label(owner.name()))
}

/// The owner of a child: the one its owner annotation names, in the child's namespace, unless
/// a controller owner reference names another (an object someone else controls is not the
/// host's child).
pub(super) fn owner_of(obj: &Selected) -> Option<ObjectKey> {
    let named = obj.object.pointer("/metadata/annotations")?.get(OWNER_ANNOTATION)?.as_str()?;
    let owner = marks::owner_of_annotation(named).filter(|o| **o.namespace() == obj.id.namespace)?;
    let refs = obj.object.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    let controller = refs.into_iter().flatten().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true));
    match controller {
        Some(r) => (r.get("kind").and_then(Value::as_str) == Some(owner.kind().as_str())
            && r.get("name").and_then(Value::as_str) == Some(owner.name().as_str()))
        .then_some(owner),
        None => Some(owner),
    }
}

/// The id of an observed or desired child.
fn id_of(namespace: &str, kind: ObjectKind, name: &str) -> ChildId {
    (namespace.to_string(), kind, name.to_string())
}

/// `child {apiVersion}/{kind} {name}`, as messages name a child.
fn what(kind: &ObjectKind, name: &str) -> String {
    format!("child {kind} {name}")
}

/// The `metadata` string field `field` of `obj`.
fn meta<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The applied hash a manifest or a live child carries.
fn applied_hash(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations")?.get(APPLIED_ANNOTATION)?.as_str()
}

impl Converge {
    /// Children made through `driver`.
    pub(super) fn new(driver: Arc<dyn Driver>) -> Self {
        Self { driver, written: Mutex::default() }
    }

    /// `owner`'s children of `kinds` as the mode last saw them.
    pub(super) fn observed(&self, owner: &ObjectKey, kinds: &[ObjectKind]) -> Vec<Selected> {
        let listed = self.driver.list_selected(kinds, owner.namespace(), &children_of(owner));
        listed.into_iter().filter(|o| owner_of(o).as_ref() == Some(owner)).collect()
    }

    /// `owner`'s children of `kinds` as the plugin sees them.
    pub(super) fn observed_children(&self, owner: &ObjectKey, kinds: &[ObjectKind]) -> Vec<ObservedChild> {
        let to_child = |o: Selected| ObservedChild {
            api_version: o.id.kind.api_version,
            kind: o.id.kind.kind,
            name: o.id.name,
            object: Some(o.object),
        };
        self.observed(owner, kinds).into_iter().map(to_child).collect()
    }

    /// Makes the children of `owner` (of `kinds`) exactly `children`: each one that does not say
    /// what is desired already is applied with the owner's marks, and each observed one that is
    /// not desired any more is deleted. The first failure stops the rest and says which child
    /// and why; [`DriverError::NotLeader`] comes back as it is.
    pub(super) async fn apply(
        &self,
        owner: &ObjectKey,
        kinds: &[ObjectKind],
        children: &[Child],
    ) -> Result<(), DriverError> {
        let refused = |kind: &ObjectKind, name: &str, e: DriverError| match e {
            DriverError::NotLeader => DriverError::NotLeader,
            e => DriverError::Refused(format!("{}: {e}", what(kind, name))),
        };
        let seen: BTreeMap<ChildId, Selected> = self
            .observed(owner, kinds)
            .into_iter()
            .map(|o| (id_of(&o.id.namespace, o.id.kind.clone(), &o.id.name), o))
            .collect();
        let owner_ref = if children.is_empty() { None } else { self.owner_reference(owner)? };
        let mut wanted = std::collections::BTreeSet::new();
        for c in children {
            let kind = ObjectKind::new(&c.api_version, &c.kind);
            if owner.namespace().is_empty() {
                return Err(DriverError::Refused(format!(
                    "{}: a cluster-scoped owner cannot own children (they live in the owner's namespace)",
                    what(&kind, &c.name)
                )));
            }
            let id = id_of(owner.namespace(), kind.clone(), &c.name);
            let manifest = marks::with_applied_hash(marks::manifest(c, owner, owner_ref.clone()));
            wanted.insert(id.clone());
            if seen.get(&id).is_some_and(|live| self.unchanged(&id, &live.object, &manifest)) {
                continue;
            }
            let out = self.driver.apply_object(&manifest, Some(owner)).await.map_err(|e| refused(&kind, &c.name, e))?;
            self.remember(id, &manifest, &out);
        }
        for (id, obj) in &seen {
            if wanted.contains(id) {
                continue;
            }
            self.driver.delete_object(&obj.id, Some(owner)).await.map_err(|e| refused(&id.1, &id.2, e))?;
            self.written.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        }
        Ok(())
    }

    /// Deletes every child of `owner` of `kinds`, as the mode holds them now (not only as last
    /// seen), so a deleted owner leaves nothing behind even without a garbage collector.
    pub(super) async fn delete_all(&self, owner: &ObjectKey, kinds: &[ObjectKind]) -> Result<(), DriverError> {
        let listed = self.driver.list_selected_now(kinds, owner.namespace(), &children_of(owner)).await;
        let listed = listed.map_err(|e| match e {
            DriverError::NotLeader => DriverError::NotLeader,
            e => DriverError::Refused(format!("children of {owner}: {e}")),
        })?;
        for obj in listed.iter().filter(|o| owner_of(o).as_ref() == Some(owner)) {
            self.driver.delete_object(&obj.id, Some(owner)).await.map_err(|e| match e {
                DriverError::NotLeader => DriverError::NotLeader,
                e => DriverError::Refused(format!("{}: {e}", what(&obj.id.kind, &obj.id.name))),
            })?;
            let id = id_of(&obj.id.namespace, obj.id.kind.clone(), &obj.id.name);
            self.written.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        }
        Ok(())
    }

    /// The controller owner reference to `owner` where the mode has ids; `None` where it has none.
    fn owner_reference(&self, owner: &ObjectKey) -> Result<Option<Value>, DriverError> {
        let Some(uid) = self.driver.uid(owner)? else { return Ok(None) };
        let api_version = self.driver.source().get(owner).map(|o| o.raw.api_version).unwrap_or_default();
        Ok(Some(json!({
            "apiVersion": api_version,
            "kind": owner.kind(),
            "name": owner.name(),
            "uid": uid,
            "controller": true,
        })))
    }

    /// Whether the live child `id` says what `manifest` says already ([`unchanged`]).
    fn unchanged(&self, id: &ChildId, live: &Value, manifest: &Value) -> bool {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned();
        unchanged(written.as_ref(), live, manifest)
    }

    /// Records what the write of `manifest` left (`out`, the object as the mode holds it after).
    fn remember(&self, id: ChildId, manifest: &Value, out: &Value) {
        let Some(hash) = applied_hash(manifest) else { return };
        let written = Written { hash: hash.to_string(), version: meta(out, "resourceVersion").map(String::from) };
        self.written.lock().unwrap_or_else(|p| p.into_inner()).insert(id, written);
    }
}

/// Whether the live child says what `manifest` says already, so nothing is written: it carries
/// the manifest's applied hash (so a field the plugin stopped setting is caught), and either it
/// is the very version the host's last write of that manifest made (`written`: nothing changed
/// it since, whatever the server defaulted or normalized in it), or it holds every field of the
/// manifest ([`marks::covers`]).
fn unchanged(written: Option<&Written>, live: &Value, manifest: &Value) -> bool {
    let Some(hash) = applied_hash(manifest) else { return false };
    if applied_hash(live) != Some(hash) {
        return false;
    }
    let version = meta(live, "resourceVersion");
    let untouched = written.is_some_and(|w| w.hash == hash && w.version.is_some() && w.version.as_deref() == version);
    untouched || marks::covers(live, manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(annotation: Option<&str>, controller: Option<(&str, &str)>) -> Selected {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}});
        if let Some(a) = annotation {
            obj["metadata"]["annotations"] = json!({ OWNER_ANNOTATION: a });
        }
        if let Some((kind, name)) = controller {
            obj["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "example.dev/v1", "kind": kind, "name": name, "uid": "u", "controller": true}]);
        }
        Selected::new(ObjectKind::new("v1", "ConfigMap"), obj)
    }

    #[test]
    fn a_child_belongs_to_the_owner_its_annotation_names_unless_another_controls_it() {
        let owner = ObjectKey::new("Site", "ns", "web");
        assert_eq!(owner_of(&child(Some("Site/ns/web"), Some(("Site", "web")))), Some(owner.clone()));
        // Filesystem mode: no owner references, the annotation says it.
        assert_eq!(owner_of(&child(Some("Site/ns/web"), None)), Some(owner));
        // Not marked by the host, marked for another, controlled by another, or in another namespace.
        assert_eq!(owner_of(&child(None, Some(("Site", "web")))), None);
        assert_eq!(owner_of(&child(Some("Site/ns/other"), Some(("Site", "web")))), None);
        assert_eq!(owner_of(&child(Some("Site/ns/web"), Some(("Other", "web")))), None);
        assert_eq!(owner_of(&child(Some("Site/elsewhere/web"), None)), None);
    }

    #[test]
    fn an_unchanged_child_is_one_that_holds_the_manifest_or_that_the_last_write_left_as_it_is() {
        let owner = ObjectKey::new("Site", "ns", "web");
        let c = |data: Value| Child::new("v1", "ConfigMap", "cm", json!({ "data": data }));
        let manifest = marks::with_applied_hash(marks::manifest(&c(json!({"n": "1.0"})), &owner, None));
        let hash = applied_hash(&manifest).unwrap().to_string();
        let mut live = manifest.clone();
        live["metadata"]["resourceVersion"] = "7".into();
        live["metadata"]["uid"] = "u".into();
        assert!(unchanged(None, &live, &manifest), "the server's own fields do not count");
        // The server normalized a value: it no longer holds the manifest field by field, but it
        // is the version the host's write of this very manifest made.
        live["data"]["n"] = "1".into();
        assert!(!unchanged(None, &live, &manifest));
        let mine = Written { hash: hash.clone(), version: Some("7".into()) };
        assert!(unchanged(Some(&mine), &live, &manifest));
        // Someone changed it since (a new version), or the manifest changed: written again.
        live["metadata"]["resourceVersion"] = "8".into();
        assert!(!unchanged(Some(&mine), &live, &manifest));
        live["metadata"]["resourceVersion"] = "7".into();
        let other = marks::with_applied_hash(marks::manifest(&c(json!({"n": "2"})), &owner, None));
        assert!(!unchanged(Some(&mine), &live, &other));
        // A mode without versions compares fields.
        let unversioned = Written { hash, version: None };
        let mut file = manifest.clone();
        assert!(unchanged(Some(&unversioned), &file, &manifest));
        file["data"]["n"] = "1".into();
        assert!(!unchanged(Some(&unversioned), &file, &manifest));
    }

    #[test]
    fn selectors_name_the_owner_by_its_labels() {
        let s = children_of(&ObjectKey::new("Site", "ns", "web"));
        assert_eq!(s.to_query(), format!("{OWNER_KIND_LABEL}=Site,{OWNER_NAME_LABEL}=web"));
        assert!(s.matches(Some(&json!({OWNER_KIND_LABEL: "Site", OWNER_NAME_LABEL: "web"}))));
        assert!(all_children().matches(Some(&json!({OWNER_KIND_LABEL: "Site", OWNER_NAME_LABEL: "web"}))));
        assert!(!s.matches(Some(&json!({OWNER_KIND_LABEL: "Site", OWNER_NAME_LABEL: "blog"}))));
    }
}
