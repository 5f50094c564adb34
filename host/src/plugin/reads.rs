//! The host cache a plugin reads through `get` and `list`, and the record of what it read.

use steward_sdk::{ObjectRef, RawObject};

/// Read access to the host's cache of objects, as the `get`/`list` imports see it.
///
/// Implementations must be cheap and must not block: they run on the calling
/// plugin's deadline.
pub trait HostReads: Send + Sync {
    /// One object, or `None`.
    fn get(&self, r: &ObjectRef) -> Option<RawObject>;
    /// The objects of `kind` in `namespace`, or in all namespaces with `None`, in a stable order.
    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject>;
    /// Whether objects of `kind` live in namespaces, when the cache knows the kind: a `get`
    /// then keys the object by the model's namespace rule ([`crate::model::namespace_for`]).
    /// `None` (the default) keeps an empty namespace as `default`.
    fn namespaced(&self, _kind: &str) -> Option<bool> {
        None
    }
}

/// A cache with nothing in it, for calls that read nothing (describe, inspect).
pub struct NoReads;

impl HostReads for NoReads {
    fn get(&self, _: &ObjectRef) -> Option<RawObject> {
        None
    }
    fn list(&self, _: &str, _: Option<&str>) -> Vec<RawObject> {
        Vec::new()
    }
}

/// One read a call made; a change to what it covers should re-queue the reader.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Read {
    /// `get` of one object.
    Get(ObjectRef),
    /// `list` of a kind in one namespace, or in all.
    List {
        /// The kind.
        kind: String,
        /// The namespace, or all with `None`.
        namespace: Option<String>,
    },
}

impl Read {
    /// Whether a change to `kind` `namespace/name` is covered by this read.
    pub fn covers(&self, kind: &str, namespace: &str, name: &str) -> bool {
        match self {
            Read::Get(r) => r.kind == kind && r.namespace == namespace && r.name == name,
            Read::List { kind: k, namespace: ns } => k == kind && ns.as_deref().is_none_or(|n| n == namespace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_in_all_namespaces_covers_every_namespace() {
        let r = Read::List { kind: "MCPServer".into(), namespace: None };
        assert!(r.covers("MCPServer", "a", "x"));
        assert!(!r.covers("Workflow", "a", "x"));
        let r = Read::List { kind: "MCPServer".into(), namespace: Some("a".into()) };
        assert!(r.covers("MCPServer", "a", "x"));
        assert!(!r.covers("MCPServer", "b", "x"));
    }

    #[test]
    fn get_covers_only_its_object() {
        let r = Read::Get(ObjectRef::new("Noop", "default", "a"));
        assert!(r.covers("Noop", "default", "a"));
        assert!(!r.covers("Noop", "default", "b"));
    }
}
