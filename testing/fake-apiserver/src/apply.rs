//! Server-side apply: field ownership per manager at leaf level, conflicts, and apply merging.
//!
//! Modelled on structured-merge-diff as the API server uses it for custom resources, without a
//! schema: maps are granular (each key owned separately), lists are atomic (owned as a whole, the
//! CRD default), scalars are leaves. Update operations (PUT, merge/JSON/strategic patch) take
//! ownership of what they change from everyone else; Apply operations own exactly the fields
//! of their configuration and fail with a conflict when they would change a field another
//! manager owns, unless forced.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

use crate::status::{ApiError, Cause};

/// A field path: the map keys from the root to the leaf.
pub(crate) type FieldPath = Vec<String>;

/// `Apply` or `Update`, as in `managedFields[].operation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply (`application/apply-patch+yaml`).
    Apply,
    /// Any other write (create, PUT, merge/JSON/strategic patch).
    Update,
}

/// The identity of a managed-fields entry: manager name, operation and subresource ("" or "status").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ManagerKey {
    pub manager: String,
    pub operation: Operation,
    pub subresource: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Entry {
    fields: BTreeSet<FieldPath>,
    api_version: String,
    time: String,
}

/// Which part of an object a write covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The whole object (resources without a status subresource).
    All,
    /// Everything but `.status` (main resource of a type with a status subresource).
    NoStatus,
    /// Only `.status` (the `/status` subresource).
    StatusOnly,
}

/// The field ownership of one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ManagedFields {
    entries: BTreeMap<ManagerKey, Entry>,
}

/// One manager's fields, as reported by [`crate::FakeApiServer::field_managers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldManager {
    /// The manager name (`fieldManager` query parameter, or the User-Agent's product for updates).
    pub manager: String,
    /// Whether the fields were set by Apply or by Update operations.
    pub operation: Operation,
    /// `""` for the main resource, `"status"` for the status subresource.
    pub subresource: String,
    /// Owned leaf paths, printed like the API server prints them (`.spec.holderIdentity`).
    pub fields: Vec<String>,
}

const IGNORED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

fn ignored(path: &[String], scope: Scope) -> bool {
    let Some(first) = path.first() else { return false };
    if first == "apiVersion" || first == "kind" {
        return true;
    }
    if first == "metadata" && path.len() >= 2 && IGNORED_META.contains(&path[1].as_str()) {
        return true;
    }
    match scope {
        Scope::All => false,
        Scope::NoStatus => first == "status",
        Scope::StatusOnly => first != "status",
    }
}

/// The leaves of `value` in `scope`: scalars, lists, nulls and empty maps, by path.
pub(crate) fn leaves(value: &Value, scope: Scope) -> BTreeMap<FieldPath, &Value> {
    fn walk<'a>(v: &'a Value, path: &mut FieldPath, scope: Scope, out: &mut BTreeMap<FieldPath, &'a Value>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    path.push(k.clone());
                    if !ignored(path, scope) {
                        walk(child, path, scope, out);
                    }
                    path.pop();
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone(), v);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(value, &mut Vec::new(), scope, &mut out);
    out
}

struct Diff {
    changed: BTreeSet<FieldPath>,
    removed: BTreeSet<FieldPath>,
}

fn diff(old: &Value, new: &Value, scope: Scope) -> Diff {
    let (old, new) = (leaves(old, scope), leaves(new, scope));
    let changed = new.iter().filter(|(p, v)| old.get(*p) != Some(*v)).map(|(p, _)| p.clone()).collect();
    let removed = old.keys().filter(|p| !new.contains_key(*p)).cloned().collect();
    Diff { changed, removed }
}

/// `.spec.holderIdentity`.
pub(crate) fn path_string(path: &[String]) -> String {
    path.iter().map(|p| format!(".{p}")).collect()
}

fn print_manager(key: &ManagerKey, entry: &Entry) -> String {
    let mut s = format!("{:?}", key.manager);
    if !key.subresource.is_empty() {
        s = format!("{s} with subresource {:?}", key.subresource);
    }
    if key.operation == Operation::Update {
        s = format!("{s} using {} at {}", entry.api_version, entry.time);
    }
    s
}

/// Deep-merges an apply configuration into a live object: maps merge, `null` removes, anything else
/// (scalars, lists) replaces.
pub(crate) fn apply_merge(live: &mut Value, config: &Value) {
    crate::patch::merge_patch(live, config);
}

/// Removes the field at `path`, and the maps this leaves empty.
fn remove_path(obj: &mut Value, path: &[String]) {
    let Some(map) = obj.as_object_mut() else { return };
    match path {
        [] => {}
        [last] => {
            map.remove(last);
        }
        [first, rest @ ..] => {
            if let Some(child) = map.get_mut(first) {
                remove_path(child, rest);
                if child.as_object().is_some_and(Map::is_empty) {
                    map.remove(first);
                }
            }
        }
    }
}

impl ManagedFields {
    fn others_own(&self, me: &ManagerKey, path: &FieldPath) -> bool {
        self.entries.iter().any(|(k, e)| k != me && e.fields.contains(path))
    }

    fn cleanup(&mut self, new: &Value) {
        let present = leaves(new, Scope::All);
        for e in self.entries.values_mut() {
            e.fields.retain(|p| present.contains_key(p));
        }
        self.entries.retain(|_, e| !e.fields.is_empty());
    }

    /// Records an Update operation by `key` that turned `old` (None on create) into `new`:
    /// the manager takes every changed field from the others; removed fields are owned by nobody.
    pub fn record_update(
        &mut self,
        key: ManagerKey,
        api_version: &str,
        old: Option<&Value>,
        new: &Value,
        scope: Scope,
    ) {
        let empty = Value::Object(Map::new());
        let d = diff(old.unwrap_or(&empty), new, scope);
        for (k, e) in self.entries.iter_mut() {
            if *k != key {
                e.fields.retain(|p| !d.changed.contains(p) && !d.removed.contains(p));
            }
        }
        if !d.changed.is_empty() || self.entries.contains_key(&key) {
            let entry = self.entries.entry(key).or_default();
            entry.fields.retain(|p| !d.removed.contains(p));
            entry.fields.extend(d.changed);
            entry.api_version = api_version.to_string();
            entry.time = crate::meta::now_rfc3339();
        }
        self.cleanup(new);
    }

    /// Applies `config` for `key` (an Apply key) to `live` and returns the merged object, or a 409
    /// Conflict naming every field another manager owns whose value would change (unless `force`,
    /// which takes those fields over). Fields the manager applied before but no longer specifies are
    /// removed when nobody else owns them.
    pub fn apply(
        &mut self,
        key: ManagerKey,
        api_version: &str,
        live: &Value,
        config: &Value,
        scope: Scope,
        force: bool,
    ) -> Result<Value, ApiError> {
        let mut merged = live.clone();
        apply_merge(&mut merged, config);
        let new_set: BTreeSet<FieldPath> =
            leaves(config, scope).into_iter().filter(|(_, v)| !v.is_null()).map(|(p, _)| p).collect();
        let last_set = self.entries.get(&key).map(|e| e.fields.clone()).unwrap_or_default();
        for path in last_set.difference(&new_set) {
            if !self.others_own(&key, path) {
                remove_path(&mut merged, path);
            }
        }
        let d = diff(live, &merged, scope);
        let mut conflicts: Vec<(ManagerKey, FieldPath)> = Vec::new();
        for (k, e) in &self.entries {
            if *k != key {
                conflicts.extend(e.fields.intersection(&d.changed).map(|p| (k.clone(), p.clone())));
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(self.conflict_error(&conflicts));
        }
        for (k, e) in self.entries.iter_mut() {
            if *k != key {
                e.fields.retain(|p| !d.changed.contains(p) && !d.removed.contains(p));
            }
        }
        let entry = self.entries.entry(key).or_default();
        entry.fields = new_set;
        entry.api_version = api_version.to_string();
        entry.time = crate::meta::now_rfc3339();
        self.cleanup(&merged);
        Ok(merged)
    }

    fn conflict_error(&self, conflicts: &[(ManagerKey, FieldPath)]) -> ApiError {
        let printed = |k: &ManagerKey| print_manager(k, self.entries.get(k).expect("conflicting entry exists"));
        let causes: Vec<Cause> = conflicts
            .iter()
            .map(|(k, p)| Cause::field("FieldManagerConflict", path_string(p), format!("conflict with {}", printed(k))))
            .collect();
        let message = if let [(k, p)] = conflicts {
            format!("Apply failed with 1 conflict: conflict with {}: {}", printed(k), path_string(p))
        } else {
            let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, p) in conflicts {
                by_manager.entry(printed(k)).or_default().push(path_string(p));
            }
            let mut lines = Vec::new();
            for (manager, paths) in by_manager {
                lines.push(format!("conflict with {manager}:"));
                lines.extend(paths.into_iter().map(|p| format!("- {p}")));
            }
            format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
        };
        ApiError::apply_conflict(message, causes)
    }

    /// Every entry, for tests and debugging.
    pub fn report(&self) -> Vec<FieldManager> {
        self.entries
            .iter()
            .map(|(k, e)| FieldManager {
                manager: k.manager.clone(),
                operation: k.operation,
                subresource: k.subresource.clone(),
                fields: e.fields.iter().map(|p| path_string(p)).collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply_key(m: &str) -> ManagerKey {
        ManagerKey { manager: m.into(), operation: Operation::Apply, subresource: String::new() }
    }

    fn update_key(m: &str) -> ManagerKey {
        ManagerKey { manager: m.into(), operation: Operation::Update, subresource: String::new() }
    }

    #[test]
    fn apply_conflicts_on_a_field_owned_by_another_applier() {
        let mut mf = ManagedFields::default();
        let live = json!({"metadata": {"name": "l"}, "spec": {}});
        let a = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 3}});
        let live = mf.apply(apply_key("a"), "v1", &live, &a, Scope::All, false).unwrap();
        assert_eq!(live["spec"]["holderIdentity"], "a");
        let b = json!({"spec": {"holderIdentity": "b"}});
        let err = mf.apply(apply_key("b"), "v1", &live, &b, Scope::All, false).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(err.message, "Apply failed with 1 conflict: conflict with \"a\": .spec.holderIdentity");
        // Same value: shared ownership, no conflict.
        let same = json!({"spec": {"leaseDurationSeconds": 3}});
        mf.apply(apply_key("b"), "v1", &live, &same, Scope::All, false).unwrap();
        // Force takes the field over.
        let live = mf.apply(apply_key("b"), "v1", &live, &b, Scope::All, true).unwrap();
        assert_eq!(live["spec"]["holderIdentity"], "b");
        let report = mf.report();
        let a_fields = &report.iter().find(|f| f.manager == "a").unwrap().fields;
        assert_eq!(a_fields, &vec![".spec.leaseDurationSeconds".to_string()]);
    }

    #[test]
    fn updates_take_ownership_and_removals_free_fields() {
        let mut mf = ManagedFields::default();
        let live = json!({"spec": {}});
        let live =
            mf.apply(apply_key("a"), "v1", &live, &json!({"spec": {"x": 1, "y": 2}}), Scope::All, false).unwrap();
        // Another manager changes x with an update: it owns x now, a keeps y.
        let mut updated = live.clone();
        updated["spec"]["x"] = json!(5);
        mf.record_update(update_key("u"), "v1", Some(&live), &updated, Scope::All);
        let live = updated;
        let err =
            mf.apply(apply_key("a"), "v1", &live, &json!({"spec": {"x": 1, "y": 2}}), Scope::All, false).unwrap_err();
        assert!(err.message.contains("conflict with \"u\" using v1 at"), "{}", err.message);
        // u removes y: nobody owns it, a may set it again without conflict.
        let mut removed = live.clone();
        removed["spec"].as_object_mut().unwrap().remove("y");
        mf.record_update(update_key("u"), "v1", Some(&live), &removed, Scope::All);
        let live = removed;
        mf.apply(apply_key("b"), "v1", &live, &json!({"spec": {"y": 9}}), Scope::All, false).unwrap();
    }

    #[test]
    fn apply_removes_fields_no_longer_specified() {
        let mut mf = ManagedFields::default();
        let live = json!({"spec": {}});
        let live = mf
            .apply(apply_key("a"), "v1", &live, &json!({"spec": {"x": 1, "m": {"k": 1}}}), Scope::All, false)
            .unwrap();
        let live = mf.apply(apply_key("a"), "v1", &live, &json!({"spec": {"x": 1}}), Scope::All, false).unwrap();
        assert_eq!(live, json!({"spec": {"x": 1}}));
    }

    #[test]
    fn scopes_ignore_system_metadata_and_status() {
        let obj = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}}, "status": {"s": 1}});
        let l: Vec<FieldPath> = leaves(&obj, Scope::NoStatus).into_keys().collect();
        assert_eq!(l, vec![vec!["metadata".to_string(), "labels".into(), "a".into()]]);
        let l: Vec<FieldPath> = leaves(&obj, Scope::StatusOnly).into_keys().collect();
        assert_eq!(l, vec![vec!["status".to_string(), "s".into()]]);
    }
}
