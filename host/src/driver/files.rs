//! The filesystem mode's driver: YAML files under a directory, status in the store only, always the leader.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use steward_sdk::KindInfo;
use tokio::sync::watch;

use super::{Driver, DriverError, KindState, Lifecycle, Presence, Started};
use crate::model::{ObjectKey, Phase, StatusRecord};
use crate::source::fs::{FsOptions, FsSource};
use crate::source::{Source, SourceObject};

/// Filesystem mode: the files are the whole truth, nothing holds an object, every write is the store's.
pub struct FilesDriver {
    fs: Arc<FsSource>,
    source: Arc<dyn Source>,
    leader: watch::Receiver<bool>,
    _leader: watch::Sender<bool>,
}

impl FilesDriver {
    /// A driver over the resources directory; `known` are the generations and spec hashes the
    /// store remembers, so an unchanged file keeps its generation across restarts.
    pub fn new(opts: FsOptions, known: HashMap<ObjectKey, (u64, u64)>) -> Self {
        let fs = FsSource::new(opts, known);
        let (tx, rx) = watch::channel(true);
        Self { source: fs.clone(), fs, leader: rx, _leader: tx }
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

    /// The full scan first, then the watcher: every object is scheduled at once.
    async fn start(&self) -> Result<Started, DriverError> {
        self.fs.scan().await;
        let (events, handle) = self.fs.watch().map_err(|e| DriverError::Watch(e.to_string()))?;
        Ok(Started { events, schedule_all: true, keep: Some(Box::new(handle)) })
    }

    fn set_kinds(&self, _kinds: &[KindInfo]) {}

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
