//! The object store: one global resourceVersion, objects per resource, bounded event history,
//! snapshots from that history, and the channels of open watches.

use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use tokio::sync::mpsc;

use crate::apply::ManagedFields;
use crate::meta::{self, Ids};
use crate::resource::{Registry, ResourceDef, StorageKey};

/// Namespace and name of an object ("" namespace for cluster-scoped ones); ordered like the keys
/// the real server pages through.
pub(crate) type ObjKey = (String, String);

/// The kind of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One write as watchers see it: the object after the write (for a delete: its last state carrying
/// the delete's resourceVersion) and the object before (None for a create).
#[derive(Debug)]
pub(crate) struct Event {
    pub rv: u64,
    pub kind: EventKind,
    pub obj: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

/// What a watch channel carries.
#[derive(Debug, Clone)]
pub(crate) enum WatchMsg {
    Event(Arc<Event>),
    /// Everything up to this resourceVersion has been sent.
    Bookmark(u64),
    /// The initial events of a streaming list are done, at this resourceVersion.
    InitialEventsEnd(u64),
}

pub(crate) struct Stored {
    pub obj: Arc<Value>,
    pub fields: ManagedFields,
}

struct WatcherSlot {
    tx: mpsc::UnboundedSender<WatchMsg>,
    bookmarks: bool,
}

pub(crate) struct Table {
    pub namespaced: bool,
    pub objects: BTreeMap<ObjKey, Stored>,
    history: VecDeque<Arc<Event>>,
    /// Every event of this resource with a resourceVersion above this one is in `history`.
    history_start: u64,
    watchers: Vec<WatcherSlot>,
}

impl Table {
    fn new(namespaced: bool) -> Self {
        Table { namespaced, objects: BTreeMap::new(), history: VecDeque::new(), history_start: 0, watchers: Vec::new() }
    }
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// Events strictly after this resourceVersion.
    After(u64),
    /// Synthetic ADDED events for the current objects, then live events.
    Now,
    /// Synthetic ADDED events, then a bookmark marking the end of the initial events.
    InitialEvents,
}

/// The whole state of the fake server behind one lock.
pub(crate) struct Store {
    pub(crate) rv: u64,
    pub(crate) registry: Registry,
    pub(crate) tables: BTreeMap<StorageKey, Table>,
    history_len: usize,
    pub(crate) ids: Ids,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
    /// While true, events are kept in the history but not sent to the watches open now.
    pub(crate) lose_events: bool,
}

pub(crate) fn key_of(obj: &Value) -> ObjKey {
    (
        meta::meta_str(obj, "namespace").unwrap_or_default().to_string(),
        meta::meta_str(obj, "name").unwrap_or_default().to_string(),
    )
}

impl Store {
    pub(crate) fn new(history_len: usize, changed: Arc<tokio::sync::watch::Sender<u64>>) -> Self {
        let mut store = Store {
            rv: 1,
            registry: Registry::default(),
            tables: BTreeMap::new(),
            history_len: history_len.max(1),
            ids: Ids::new(),
            changed,
            lose_events: false,
        };
        for def in crate::resource::builtins() {
            store.register(def);
        }
        store
    }

    /// Serves `def` (creating its storage if needed).
    pub(crate) fn register(&mut self, def: ResourceDef) {
        let namespaced = def.namespaced;
        self.tables.entry(def.storage_key()).or_insert_with(|| Table::new(namespaced)).namespaced = namespaced;
        self.registry.insert(def);
    }

    /// Stops serving every version of `key` and drops its objects; open watches on it end.
    pub(crate) fn unregister(&mut self, key: &StorageKey) {
        let versions: Vec<String> =
            self.registry.all().filter(|d| d.storage_key() == *key).map(|d| d.version.clone()).collect();
        for v in versions {
            self.registry.remove(&key.group, &v, &key.plural);
        }
        self.tables.remove(key);
    }

    pub(crate) fn table(&self, key: &StorageKey) -> Option<&Table> {
        self.tables.get(key)
    }

    pub(crate) fn stored(&self, key: &StorageKey, obj: &ObjKey) -> Option<&Stored> {
        self.tables.get(key)?.objects.get(obj)
    }

    fn push_event(&mut self, key: &StorageKey, event: Event) {
        let history_len = self.history_len;
        let Some(table) = self.tables.get_mut(key) else { return };
        let event = Arc::new(event);
        table.history.push_back(event.clone());
        while table.history.len() > history_len {
            if let Some(old) = table.history.pop_front() {
                table.history_start = old.rv;
            }
        }
        if !self.lose_events {
            table.watchers.retain(|w| w.tx.send(WatchMsg::Event(event.clone())).is_ok());
        }
    }

    /// Wakes [`crate::FakeApiServer::wait_for`] callers.
    pub(crate) fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Writes `obj` (create or update) with a new resourceVersion and emits ADDED or MODIFIED.
    pub(crate) fn commit(&mut self, key: &StorageKey, mut obj: Value, fields: ManagedFields) -> Arc<Value> {
        self.rv += 1;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let obj = Arc::new(obj);
        let okey = key_of(&obj);
        let namespaced = self.registry.all().any(|d| d.storage_key() == *key && d.namespaced);
        let table = self.tables.entry(key.clone()).or_insert_with(|| Table::new(namespaced));
        let prev = table.objects.insert(okey, Stored { obj: obj.clone(), fields }).map(|s| s.obj);
        let kind = if prev.is_some() { EventKind::Modified } else { EventKind::Added };
        self.push_event(key, Event { rv: self.rv, kind, obj: obj.clone(), prev });
        self.notify();
        obj
    }

    /// Replaces the managed fields of a stored object without a write (no new resourceVersion).
    pub(crate) fn set_fields(&mut self, key: &StorageKey, okey: &ObjKey, fields: ManagedFields) {
        if let Some(s) = self.tables.get_mut(key).and_then(|t| t.objects.get_mut(okey)) {
            s.fields = fields;
        }
    }

    /// Removes an object with a new resourceVersion and emits DELETED carrying its last state.
    pub(crate) fn remove(&mut self, key: &StorageKey, okey: &ObjKey) -> Option<Arc<Value>> {
        let prev = self.tables.get_mut(key)?.objects.remove(okey)?.obj;
        self.rv += 1;
        let mut last = (*prev).clone();
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let last = Arc::new(last);
        self.push_event(key, Event { rv: self.rv, kind: EventKind::Deleted, obj: last.clone(), prev: Some(prev) });
        if *key == crd_key() {
            self.crd_removed(&last);
        }
        self.notify();
        Some(last)
    }

    fn crd_removed(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        self.unregister(&StorageKey { group: group.into(), plural: plural.into() });
    }

    /// Registers the versions a CRD serves and stops serving versions it no longer serves.
    pub(crate) fn sync_crd(&mut self, crd: &Value) {
        let defs = crate::crd::resource_defs(crd);
        let group = crd["spec"]["group"].as_str().unwrap_or_default().to_string();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default().to_string();
        let stale: Vec<String> = self
            .registry
            .all()
            .filter(|d| d.group == group && d.plural == plural && !defs.iter().any(|n| n.version == d.version))
            .map(|d| d.version.clone())
            .collect();
        for v in stale {
            self.registry.remove(&group, &v, &plural);
        }
        for def in defs {
            self.register(def);
        }
    }

    /// The objects of `key` as of resourceVersion `at` (None: now), rebuilt from the event history.
    /// Fails when the history no longer reaches back to `at` (it was compacted or trimmed).
    pub(crate) fn snapshot(&self, key: &StorageKey, at: Option<u64>) -> Result<BTreeMap<ObjKey, Arc<Value>>, u64> {
        let Some(table) = self.tables.get(key) else { return Ok(BTreeMap::new()) };
        let mut objects: BTreeMap<ObjKey, Arc<Value>> =
            table.objects.iter().map(|(k, s)| (k.clone(), s.obj.clone())).collect();
        let Some(at) = at.filter(|at| *at < self.rv) else { return Ok(objects) };
        if at < table.history_start {
            return Err(table.history_start);
        }
        for event in table.history.iter().rev().take_while(|e| e.rv > at) {
            let k = key_of(&event.obj);
            match &event.prev {
                Some(prev) => objects.insert(k, prev.clone()),
                None => objects.remove(&k),
            };
        }
        Ok(objects)
    }

    /// Opens a watch on `key`: queues the replayed or synthetic events under the lock, so nothing
    /// written afterwards is missed or duplicated. `Err(oldest)` when `After(rv)` is older than the
    /// retained history.
    pub(crate) fn watch(
        &mut self,
        key: &StorageKey,
        namespace: Option<&str>,
        from: WatchFrom,
        bookmarks: bool,
    ) -> Result<mpsc::UnboundedReceiver<WatchMsg>, u64> {
        let rv = self.rv;
        let namespaced = self.registry.all().any(|d| d.storage_key() == *key && d.namespaced);
        let table = self.tables.entry(key.clone()).or_insert_with(|| Table::new(namespaced));
        let (tx, rx) = mpsc::unbounded_channel();
        let in_ns = |o: &Value| namespace.is_none_or(|ns| meta::meta_str(o, "namespace") == Some(ns));
        match from {
            WatchFrom::After(after) => {
                if after < table.history_start {
                    return Err(table.history_start);
                }
                for e in table.history.iter().filter(|e| e.rv > after) {
                    let _ = tx.send(WatchMsg::Event(e.clone()));
                }
            }
            WatchFrom::Now | WatchFrom::InitialEvents => {
                for s in table.objects.values().filter(|s| in_ns(&s.obj)) {
                    let rv = meta::meta_str(&s.obj, "resourceVersion").and_then(|r| r.parse().ok()).unwrap_or(0);
                    let event = Event { rv, kind: EventKind::Added, obj: s.obj.clone(), prev: None };
                    let _ = tx.send(WatchMsg::Event(Arc::new(event)));
                }
                if from == WatchFrom::InitialEvents {
                    let _ = tx.send(WatchMsg::InitialEventsEnd(rv));
                }
            }
        }
        table.watchers.push(WatcherSlot { tx, bookmarks });
        self.notify();
        Ok(rx)
    }

    /// Sends a bookmark at the current resourceVersion to every watch that asked for bookmarks.
    pub(crate) fn bookmark_all(&mut self) {
        let rv = self.rv;
        for table in self.tables.values_mut() {
            table.watchers.retain(|w| !w.bookmarks || w.tx.send(WatchMsg::Bookmark(rv)).is_ok());
        }
    }

    /// Forgets every retained event: watches and snapshots from before now get 410 Expired.
    pub(crate) fn compact(&mut self) {
        let rv = self.rv;
        for table in self.tables.values_mut() {
            table.history.clear();
            table.history_start = rv;
        }
    }

    /// Open watches per resource (group, plural), counting only those whose stream is still open.
    pub(crate) fn watch_counts(&self) -> BTreeMap<(String, String), usize> {
        self.tables
            .iter()
            .map(|(k, t)| {
                ((k.group.clone(), k.plural.clone()), t.watchers.iter().filter(|w| !w.tx.is_closed()).count())
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Storage of CustomResourceDefinitions.
pub(crate) fn crd_key() -> StorageKey {
    StorageKey { group: "apiextensions.k8s.io".into(), plural: "customresourcedefinitions".into() }
}

/// Storage of Namespaces.
pub(crate) fn namespace_key() -> StorageKey {
    StorageKey { group: String::new(), plural: "namespaces".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, v: i64) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": "default"}, "spec": {"v": v}})
    }

    fn key() -> StorageKey {
        StorageKey { group: "coordination.k8s.io".into(), plural: "leases".into() }
    }

    #[test]
    fn snapshots_rebuild_past_states_until_history_runs_out() {
        let tx = Arc::new(tokio::sync::watch::Sender::new(0));
        let mut s = Store::new(3, tx);
        s.commit(&key(), lease("a", 1), ManagedFields::default());
        let at = s.rv;
        s.commit(&key(), lease("a", 2), ManagedFields::default());
        s.commit(&key(), lease("b", 1), ManagedFields::default());
        s.remove(&key(), &("default".into(), "a".into()));
        let snap = s.snapshot(&key(), Some(at)).unwrap();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[&("default".to_string(), "a".to_string())]["spec"]["v"], 1);
        assert_eq!(s.snapshot(&key(), None).unwrap().len(), 1);
        // History holds 3 events: the first write is gone, so a snapshot before it is expired.
        assert!(s.snapshot(&key(), Some(at - 1)).is_err());
        s.compact();
        assert!(s.snapshot(&key(), Some(at)).is_err());
        assert!(s.watch(&key(), None, WatchFrom::After(at), false).is_err());
        assert!(s.watch(&key(), None, WatchFrom::After(s.rv), false).is_ok());
    }

    #[test]
    fn watches_get_replay_then_live_events() {
        let tx = Arc::new(tokio::sync::watch::Sender::new(0));
        let mut s = Store::new(100, tx);
        s.commit(&key(), lease("a", 1), ManagedFields::default());
        let from = s.rv;
        s.commit(&key(), lease("a", 2), ManagedFields::default());
        let mut rx = s.watch(&key(), None, WatchFrom::After(from), true).unwrap();
        s.commit(&key(), lease("a", 3), ManagedFields::default());
        s.bookmark_all();
        let kinds: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| match m {
                WatchMsg::Event(e) => format!("{:?}{}", e.kind, e.obj["spec"]["v"]),
                WatchMsg::Bookmark(rv) => format!("bookmark{rv}"),
                WatchMsg::InitialEventsEnd(rv) => format!("end{rv}"),
            })
            .collect();
        assert_eq!(kinds, vec!["Modified2", "Modified3", format!("bookmark{}", s.rv).as_str()]);
        assert_eq!(s.watch_counts().values().sum::<usize>(), 1);
        drop(rx);
        assert_eq!(s.watch_counts().values().sum::<usize>(), 0);
    }
}
