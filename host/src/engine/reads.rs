//! The host cache as plugins read it: objects from the source, with the status the store holds.

use std::sync::Arc;

use steward_sdk::{ObjectRef, RawObject};

use crate::driver::{Source, SourceObject};
use crate::model::{ObjectKey, StatusRecord};
use crate::plugin::{HostReads, PluginSet};
use crate::store::Store;

/// Serves `get`/`list` from the source's cache, each object with its last stored status.
pub struct EngineReads {
    source: Arc<dyn Source>,
    store: Arc<Store<StatusRecord>>,
    plugins: Option<Arc<PluginSet>>,
}

impl EngineReads {
    /// Reads over `source` and `store`.
    pub fn new(source: Arc<dyn Source>, store: Arc<Store<StatusRecord>>) -> Self {
        Self { source, store, plugins: None }
    }

    /// Answers whether a kind is namespaced from the kinds `plugins` describe, so a `get`
    /// of a cluster-scoped object is keyed with the empty namespace.
    pub fn with_plugins(mut self, plugins: Arc<PluginSet>) -> Self {
        self.plugins = Some(plugins);
        self
    }

    fn with_status(&self, obj: SourceObject) -> RawObject {
        let mut raw = obj.raw;
        let key = ObjectKey::new(&raw.kind, &raw.namespace, &raw.name);
        raw.status = self.store.get_with(&key.text(), |r| r.status.as_ref().map(|s| s.to_string())).flatten();
        raw
    }
}

impl HostReads for EngineReads {
    fn get(&self, r: &ObjectRef) -> Option<RawObject> {
        let key = ObjectKey::new(&r.kind, &r.namespace, &r.name);
        self.source.get(&key).map(|o| self.with_status(o))
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject> {
        self.source.list(kind, namespace).into_iter().map(|o| self.with_status(o)).collect()
    }

    fn namespaced(&self, kind: &str) -> Option<bool> {
        self.plugins.as_ref().and_then(|p| p.namespaced(kind))
    }
}
