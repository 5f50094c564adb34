//! Helpers the filesystem source's tests share: a directory of documents, events, and waiting for the cache.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{FsOptions, FsSource, SourceEvent};
use crate::model::ObjectKey;

pub(super) fn key(kind: &str, ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(kind, ns, name)
}

pub(super) fn opts(dir: &Path) -> FsOptions {
    FsOptions {
        dir: dir.to_path_buf(),
        debounce: Duration::from_millis(100),
        debounce_max: Duration::from_secs(1),
        scan_interval: Duration::from_secs(3600),
    }
}

pub(super) fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

pub(super) fn doc(kind: &str, name: &str, spec: &str) -> String {
    format!("apiVersion: steward.dev/v1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  {spec}\n")
}

pub(super) fn set(events: &[SourceEvent]) -> HashSet<SourceEvent> {
    events.iter().cloned().collect()
}

pub(super) fn changed(k: &ObjectKey) -> SourceEvent {
    SourceEvent::Changed(k.clone())
}

pub(super) fn deleted(k: &ObjectKey) -> SourceEvent {
    SourceEvent::Deleted(k.clone())
}

pub(super) fn file_problem(f: &str) -> SourceEvent {
    SourceEvent::FileProblem { file: f.into() }
}

pub(super) fn file_ok(f: &str) -> SourceEvent {
    SourceEvent::FileOk { file: f.into() }
}

pub(super) fn spec_of(src: &FsSource, k: &ObjectKey) -> serde_json::Value {
    serde_json::from_str(&src.get(k).expect("object in the cache").raw.spec).unwrap()
}

pub(super) const DEADLINE: Duration = Duration::from_secs(20);

/// Receives events until `done` holds for the cache, failing at the deadline; returns what came.
pub(super) async fn events_until(
    rx: &mut mpsc::UnboundedReceiver<SourceEvent>,
    what: &str,
    mut done: impl FnMut(&[SourceEvent]) -> bool,
) -> Vec<SourceEvent> {
    let end = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    while !done(&seen) {
        match tokio::time::timeout_at(end, rx.recv()).await {
            Ok(Some(ev)) => seen.push(ev),
            Ok(None) => panic!("the event channel closed while waiting for {what}; seen {seen:?}"),
            Err(_) => panic!("timed out waiting for {what}; seen {seen:?}"),
        }
    }
    seen
}
