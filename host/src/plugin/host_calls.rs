//! The base contract's state in one store: the call's log, the host cache `get` and `list` read, and what they read.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use steward_sdk::{LogLevel, ObjectRef};

use super::bindings::steward::plugin::{host, types as w};
use super::convert;
use super::logs::{CallLog, LogSource};
use super::reads::{HostReads, NoReads, Read};
use super::sandbox::MAX_RECORDED_READS;
use crate::model::{DEFAULT_NAMESPACE, namespace_for};

/// The base contract's state in one store: the call's log, the cache it reads, and what it read.
pub struct HostState {
    pub(crate) log: Arc<Mutex<CallLog>>,
    reads: Arc<dyn HostReads>,
    pub(crate) recorded: BTreeSet<Read>,
    pub(crate) reads_overflowed: bool,
}

/// Reads that find nothing, shared: what a state holds between calls.
pub(crate) fn no_reads() -> Arc<dyn HostReads> {
    static NONE: std::sync::LazyLock<Arc<dyn HostReads>> = std::sync::LazyLock::new(|| Arc::new(NoReads));
    NONE.clone()
}

impl HostState {
    /// State writing log lines to `log` (which the store's stdout and stderr share) and reading nothing.
    pub(crate) fn new(log: Arc<Mutex<CallLog>>) -> Self {
        Self { log, reads: no_reads(), recorded: BTreeSet::new(), reads_overflowed: false }
    }

    /// Lets go of the reads the call was given, once it is over: an instance kept for the next
    /// call, or a store state kept for the next fresh one, must not keep the host's cache (and
    /// what holds it) alive.
    pub(crate) fn release(&mut self) {
        self.reads = no_reads();
    }

    /// Starts the state of a call that reads through `reads`: an empty log, nothing read yet.
    pub(crate) fn reset(&mut self, reads: Arc<dyn HostReads>) {
        *self.log.lock().unwrap_or_else(|e| e.into_inner()) = CallLog::default();
        self.reads = reads;
        self.recorded.clear();
        self.reads_overflowed = false;
    }

    fn record(&mut self, read: Read) {
        if self.recorded.len() < MAX_RECORDED_READS {
            self.recorded.insert(read);
        } else if !self.recorded.contains(&read) {
            self.reads_overflowed = true;
        }
    }

    /// The namespace an object of `kind` is keyed under when a read names `given`: the
    /// model's rule when the cache knows whether the kind is namespaced, else `default`
    /// for an empty namespace.
    pub(crate) fn namespace(&self, kind: &str, given: String) -> String {
        match self.reads.namespaced(kind) {
            Some(namespaced) => namespace_for(namespaced, &given).to_string(),
            None if given.is_empty() => DEFAULT_NAMESPACE.to_string(),
            None => given,
        }
    }
}

impl w::Host for HostState {}

impl host::Host for HostState {
    fn log(&mut self, level: w::LogLevel, message: String) -> wasmtime::Result<()> {
        let level = match level {
            w::LogLevel::Trace => LogLevel::Trace,
            w::LogLevel::Debug => LogLevel::Debug,
            w::LogLevel::Info => LogLevel::Info,
            w::LogLevel::Warn => LogLevel::Warn,
            w::LogLevel::Error => LogLevel::Error,
        };
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(level, LogSource::Log, &message);
        Ok(())
    }

    fn get(&mut self, r: w::ObjectRef) -> wasmtime::Result<Option<w::Resource>> {
        let namespace = self.namespace(&r.kind, r.namespace);
        let r = ObjectRef::new(r.kind, namespace, r.name);
        let found = self.reads.get(&r);
        self.record(Read::Get(r));
        Ok(found.as_ref().map(convert::resource_to_wit))
    }

    fn list(&mut self, kind: String, namespace: Option<String>) -> wasmtime::Result<Vec<w::Resource>> {
        let found = self.reads.list(&kind, namespace.as_deref());
        self.record(Read::List { kind, namespace });
        Ok(found.iter().map(convert::resource_to_wit).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use host::Host as _;
    use steward_sdk::RawObject;

    /// A cache holding one cluster-scoped `Node` (keyed with the empty namespace) and
    /// knowing `Node` is cluster-scoped and `Pod` namespaced.
    struct Cluster;

    impl HostReads for Cluster {
        fn get(&self, r: &ObjectRef) -> Option<RawObject> {
            (r.kind == "Node" && r.namespace.is_empty() && r.name == "n1").then(|| RawObject {
                kind: "Node".into(),
                name: "n1".into(),
                spec: "{}".into(),
                ..Default::default()
            })
        }
        fn list(&self, _: &str, _: Option<&str>) -> Vec<RawObject> {
            Vec::new()
        }
        fn namespaced(&self, kind: &str) -> Option<bool> {
            match kind {
                "Node" => Some(false),
                "Pod" => Some(true),
                _ => None,
            }
        }
    }

    fn state() -> HostState {
        let mut s = HostState::new(Arc::new(Mutex::new(CallLog::default())));
        s.reset(Arc::new(Cluster));
        s
    }

    fn get(s: &mut HostState, kind: &str, namespace: &str, name: &str) -> Option<w::Resource> {
        s.get(w::ObjectRef { kind: kind.into(), namespace: namespace.into(), name: name.into() }).unwrap()
    }

    #[test]
    fn a_cluster_scoped_read_is_recorded_under_the_empty_namespace() {
        let mut s = state();
        assert!(get(&mut s, "Node", "", "n1").is_some(), "the object is found under its own key");
        let read: Vec<_> = s.recorded.iter().cloned().collect();
        assert_eq!(read, vec![Read::Get(ObjectRef::new("Node", "", "n1"))]);
        // A change to the node (keyed with the empty namespace) re-queues the reader.
        assert!(read[0].covers("Node", "", "n1"));
        // A namespace given for a cluster-scoped kind does not matter either.
        assert!(get(&mut s, "Node", "default", "n1").is_some());
    }

    #[test]
    fn namespaced_and_unknown_kinds_default_an_empty_namespace() {
        let mut s = state();
        get(&mut s, "Pod", "", "p");
        get(&mut s, "Mystery", "", "m");
        get(&mut s, "Pod", "team-a", "q");
        let read: Vec<_> = s.recorded.iter().cloned().collect();
        assert!(read.contains(&Read::Get(ObjectRef::new("Pod", "default", "p"))), "{read:?}");
        assert!(read.contains(&Read::Get(ObjectRef::new("Mystery", "default", "m"))), "{read:?}");
        assert!(read.contains(&Read::Get(ObjectRef::new("Pod", "team-a", "q"))), "{read:?}");
    }

    #[test]
    fn reads_past_the_bound_are_flagged() {
        let mut s = state();
        for i in 0..=MAX_RECORDED_READS {
            get(&mut s, "Pod", "a", &format!("p{i}"));
        }
        assert_eq!(s.recorded.len(), MAX_RECORDED_READS);
        assert!(s.reads_overflowed);
    }
}
