//! Resource types the server serves: [`ResourceDef`] and the registry of them.

use std::collections::BTreeMap;

/// One served resource type at one group/version, e.g. `coordination.k8s.io/v1` `leases`.
///
/// Objects are stored per group and plural, shared by every version of the resource (like a CRD with
/// conversion strategy `None`: reading through another version only changes `apiVersion`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Lease`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `leases`.
    pub plural: String,
    /// Singular name (lowercase kind when empty).
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the resource has a `/status` subresource (status is then written only through it).
    pub status_subresource: bool,
    /// Short names shown in discovery.
    pub short_names: Vec<String>,
    /// Categories shown in discovery.
    pub categories: Vec<String>,
    /// Field selector labels accepted besides `metadata.name` and `metadata.namespace`, as dotted
    /// paths into the object (e.g. `spec.color`, like a CRD's `selectableFields`).
    pub selectable_fields: Vec<String>,
    /// Whether `application/strategic-merge-patch+json` is accepted (built-in types); custom
    /// resources answer it with 415 UnsupportedMediaType, like the real server.
    pub strategic_merge_patch: bool,
}

impl ResourceDef {
    /// A resource with the given coordinates, no status subresource and no extras.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceDef {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            status_subresource: false,
            short_names: Vec::new(),
            categories: Vec::new(),
            selectable_fields: Vec::new(),
            strategic_merge_patch: false,
        }
    }

    /// The same resource with a `/status` subresource.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The list kind, e.g. `LeaseList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub(crate) fn storage_key(&self) -> StorageKey {
        StorageKey { group: self.group.clone(), plural: self.plural.clone() }
    }

    pub(crate) fn group_resource(&self) -> crate::status::GroupResource<'_> {
        crate::status::GroupResource { group: &self.group, resource: &self.plural }
    }
}

/// Where objects of a resource are kept: group and plural, across versions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct StorageKey {
    pub group: String,
    pub plural: String,
}

/// The built-in resources every server starts with.
pub(crate) fn builtins() -> Vec<ResourceDef> {
    let mut events_core = ResourceDef::new("", "v1", "Event", "events", true);
    events_core.short_names = vec!["ev".into()];
    events_core.selectable_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut events = ResourceDef::new("events.k8s.io", "v1", "Event", "events", true);
    events.short_names = vec!["ev".into()];
    events.selectable_fields = [
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut namespaces = ResourceDef::new("", "v1", "Namespace", "namespaces", false).with_status();
    namespaces.short_names = vec!["ns".into()];
    namespaces.selectable_fields = vec!["status.phase".into()];
    let mut crds =
        ResourceDef::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false)
            .with_status();
    crds.short_names = vec!["crd".into(), "crds".into()];
    let mut all = vec![
        ResourceDef::new("coordination.k8s.io", "v1", "Lease", "leases", true),
        // Kinds the host's children capability is tested with.
        ResourceDef::new("", "v1", "ConfigMap", "configmaps", true),
        ResourceDef::new("apps", "v1", "Deployment", "deployments", true).with_status(),
        events_core,
        events,
        namespaces,
        crds,
        crate::secret::def(),
    ];
    for def in &mut all {
        def.strategic_merge_patch = true;
    }
    all
}

/// The registry: which (group, version, plural) are served, and by which definition.
#[derive(Default, Debug)]
pub(crate) struct Registry {
    defs: BTreeMap<(String, String, String), ResourceDef>,
}

impl Registry {
    pub fn insert(&mut self, def: ResourceDef) {
        self.defs.insert((def.group.clone(), def.version.clone(), def.plural.clone()), def);
    }

    pub fn remove(&mut self, group: &str, version: &str, plural: &str) -> Option<ResourceDef> {
        self.defs.remove(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs.get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// Every definition, ordered by group, version, plural.
    pub fn all(&self) -> impl Iterator<Item = &ResourceDef> {
        self.defs.values()
    }

    /// Versions served for `group`, highest Kubernetes version priority first.
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut versions: Vec<String> =
            self.defs.values().filter(|d| d.group == group).map(|d| d.version.clone()).collect();
        versions.sort_by(|a, b| version_priority(a).cmp(&version_priority(b)).then_with(|| a.cmp(b)));
        versions.dedup();
        versions
    }

    /// Groups (non-core) that serve at least one resource, sorted.
    pub fn groups(&self) -> Vec<String> {
        let mut groups: Vec<String> =
            self.defs.values().filter(|d| !d.group.is_empty()).map(|d| d.group.clone()).collect();
        groups.dedup();
        groups
    }
}

/// Sort key of Kubernetes version priority: GA before beta before alpha, higher numbers first,
/// versions that do not look like Kubernetes versions last (alphabetically).
pub(crate) fn version_priority(v: &str) -> (u8, i64, i64) {
    let parse = || -> Option<(u8, i64, i64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let rest = &rest[digits.len()..];
        if rest.is_empty() {
            return Some((0, -major, 0));
        }
        let (rank, rest) = if let Some(r) = rest.strip_prefix("beta") {
            (1, r)
        } else if let Some(r) = rest.strip_prefix("alpha") {
            (2, r)
        } else {
            return None;
        };
        let minor: i64 = rest.parse().ok()?;
        Some((rank, -major, -minor))
    };
    parse().unwrap_or((3, 0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut r = Registry::default();
        for v in ["v1alpha1", "v1", "v2beta1", "v1beta2", "v2", "foo"] {
            r.insert(ResourceDef::new("g", v, "K", "ks", true));
        }
        assert_eq!(r.versions("g"), ["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]);
    }
}
