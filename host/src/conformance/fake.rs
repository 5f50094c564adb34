//! The host's cache as a scenario gives it: `get` and `list` answer from the scenario's objects only.

use steward_sdk::{ObjectRef, RawObject};

use crate::plugin::HostReads;

/// A fixed cache: the objects of the file and of the scenario, sorted as the host's cache lists them.
pub(super) struct FixedCache {
    objects: Vec<RawObject>,
}

impl FixedCache {
    /// A cache of `objects`; a later object with the same kind, namespace and name replaces an earlier one.
    pub(super) fn new(objects: impl IntoIterator<Item = RawObject>) -> Self {
        let mut by_key = std::collections::BTreeMap::new();
        for o in objects {
            by_key.insert((o.kind.clone(), o.namespace.clone(), o.name.clone()), o);
        }
        Self { objects: by_key.into_values().collect() }
    }
}

impl HostReads for FixedCache {
    fn get(&self, r: &ObjectRef) -> Option<RawObject> {
        self.objects.iter().find(|o| o.kind == r.kind && o.namespace == r.namespace && o.name == r.name).cloned()
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject> {
        self.objects.iter().filter(|o| o.kind == kind && namespace.is_none_or(|n| o.namespace == n)).cloned().collect()
    }
}
