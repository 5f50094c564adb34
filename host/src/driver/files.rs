//! The filesystem mode's driver: YAML files under a directory, status in the store only, always the leader.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use steward_sdk::KindInfo;
use tokio::sync::{mpsc, watch};

use super::{Driver, DriverError, KindState, Lifecycle, Presence, Started};
use crate::model::{ObjectKey, Phase, StatusRecord};
use crate::source::fs::{FsOptions, FsSource};
use crate::source::{Source, SourceEvent, SourceObject};

/// Filesystem mode: the files are the whole truth, nothing holds an object, every write is the store's.
pub struct FilesDriver {
    fs: Arc<FsSource>,
    source: Arc<dyn Source>,
    leader: watch::Receiver<bool>,
    _leader: watch::Sender<bool>,
    /// Each kind's scope as its plugin last described it (`true`: namespaced). A kind whose
    /// plugin goes keeps its last scope, so its objects keep their keys.
    scopes: Mutex<BTreeMap<String, bool>>,
    /// Once started: where a rescan after a change of scope sends its events.
    events: Mutex<Option<mpsc::UnboundedSender<SourceEvent>>>,
}

impl FilesDriver {
    /// A driver over the resources directory; `known` are the generations and spec hashes the
    /// store remembers, so an unchanged file keeps its generation across restarts.
    pub fn new(opts: FsOptions, known: HashMap<ObjectKey, (u64, u64)>) -> Self {
        let fs = FsSource::new(opts, known);
        let (tx, rx) = watch::channel(true);
        Self {
            source: fs.clone(),
            fs,
            leader: rx,
            _leader: tx,
            scopes: Mutex::new(BTreeMap::new()),
            events: Mutex::new(None),
        }
    }

    /// The kinds whose objects have no namespace (the namespace rule, [`crate::model::namespace_for`]).
    fn cluster_scoped(&self) -> BTreeSet<String> {
        let scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        scopes.iter().filter(|(_, namespaced)| !**namespaced).map(|(k, _)| k.clone()).collect()
    }
}

#[async_trait::async_trait]
impl Driver for FilesDriver {
    fn mode(&self) -> &'static str {
        "filesystem"
    }

    fn source(&self) -> Arc<dyn Source> {
        self.source.clone()
    }

    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    /// The full scan first (with the kinds' scopes known), then the watcher: every object is
    /// scheduled at once.
    async fn start(&self) -> Result<Started, DriverError> {
        self.fs.set_cluster_scoped(self.cluster_scoped()).await;
        self.fs.scan().await;
        let (mut watched, handle) = self.fs.watch().map_err(|e| DriverError::Watch(e.to_string()))?;
        let (tx, events) = mpsc::unbounded_channel();
        *self.events.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
        let forward = tokio::spawn(async move {
            while let Some(ev) = watched.recv().await {
                if tx.send(ev).is_err() {
                    return;
                }
            }
        });
        let keep: Box<dyn std::any::Any + Send> = Box::new((handle, AbortOnDrop(forward)));
        Ok(Started { events, schedule_all: true, keep: Some(keep) })
    }

    /// Learns the kinds' scopes: a kind that turns out cluster-scoped (or namespaced again)
    /// re-keys its objects, so the files are read again and the changes reported.
    fn set_kinds(&self, kinds: &[KindInfo]) {
        let changed = {
            let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
            let mut changed = false;
            for k in kinds {
                changed |= scopes.insert(k.kind.clone(), k.namespaced) != Some(k.namespaced);
            }
            changed
        };
        let Some(tx) = self.events.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
        if !changed {
            return;
        }
        let (fs, scoped) = (self.fs.clone(), self.cluster_scoped());
        tokio::spawn(async move {
            if fs.set_cluster_scoped(scoped).await {
                for ev in fs.scan().await {
                    let _ = tx.send(ev);
                }
            }
        });
    }

    fn listed(&self, _kind: &str) -> bool {
        false
    }

    fn kind_state(&self, _kind: &str) -> KindState {
        KindState::Served
    }

    fn readiness(&self, _kinds: &[String]) -> Result<(), String> {
        Ok(())
    }

    fn leads(&self) -> bool {
        true
    }

    fn leadership(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// A file never says "being deleted"; an object gone from its file is finalized from its record.
    fn lifecycle(&self, _key: &ObjectKey, obj: &SourceObject, known: bool) -> Lifecycle {
        match (obj.raw.deleting, known) {
            (false, _) => Lifecycle::Reconcile,
            (true, true) => Lifecycle::Finalize,
            (true, false) => Lifecycle::Ignore,
        }
    }

    async fn hold(&self, _key: &ObjectKey) -> Result<(), DriverError> {
        Ok(())
    }

    async fn release(&self, _key: &ObjectKey) -> Result<(), DriverError> {
        Ok(())
    }

    async fn write_status(&self, _: &ObjectKey, _: &StatusRecord, _: Option<Phase>) -> Result<(), DriverError> {
        Ok(())
    }

    fn status_unwritten(&self, _key: &ObjectKey) -> bool {
        false
    }

    async fn presence(&self, _key: &ObjectKey) -> Result<Presence, DriverError> {
        Ok(Presence::Gone)
    }

    fn publish(&self, _key: &ObjectKey, _warning: bool, _reason: &str, _action: &str, _note: String) {}

    async fn shutdown(&self, _grace: Duration) {}
}

/// Stops the forwarding task with the driver's watcher.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str, namespaced: bool) -> KindInfo {
        KindInfo {
            group: "test.steward.dev".into(),
            version: "v1".into(),
            kind: name.into(),
            plural: name.to_lowercase() + "s",
            namespaced,
            spec_schema: "{}".into(),
            resync_seconds: 0,
        }
    }

    #[tokio::test]
    async fn cluster_scoped_kinds_have_no_namespace_and_a_change_of_scope_re_keys_their_objects() {
        let dir = tempfile::tempdir().unwrap();
        let doc = |kind: &str, name: &str| {
            format!("apiVersion: test.steward.dev/v1\nkind: {kind}\nmetadata:\n  name: {name}\nspec: {{}}\n")
        };
        std::fs::write(dir.path().join("a.yaml"), format!("{}---\n{}", doc("Shared", "s"), doc("Local", "l"))).unwrap();
        let driver = FilesDriver::new(FsOptions::new(dir.path()), HashMap::new());
        driver.set_kinds(&[kind("Shared", false), kind("Local", true)]);
        let mut started = driver.start().await.unwrap();
        let source = driver.source();
        assert!(source.get(&ObjectKey::new("Shared", "", "s")).is_some(), "{:?}", source.keys());
        assert!(source.get(&ObjectKey::new("Local", "default", "l")).is_some(), "{:?}", source.keys());

        // A new version of the plugin says Local is cluster-scoped: its object moves to the empty namespace.
        driver.set_kinds(&[kind("Local", false)]);
        let (old, new) = (ObjectKey::new("Local", "default", "l"), ObjectKey::new("Local", "", "l"));
        let mut seen = Vec::new();
        let wait = async {
            while !(seen.contains(&SourceEvent::Deleted(old.clone()))
                && seen.contains(&SourceEvent::Changed(new.clone())))
            {
                seen.push(started.events.recv().await.expect("the driver's events"));
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait).await.unwrap_or_else(|_| panic!("events: {seen:?}"));
        assert!(source.get(&new).is_some() && source.get(&old).is_none(), "{:?}", source.keys());
        // Shared kept its scope although this call did not name it.
        assert!(source.get(&ObjectKey::new("Shared", "", "s")).is_some(), "{:?}", source.keys());
    }
}
