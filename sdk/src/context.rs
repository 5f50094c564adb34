//! What a reconcile can ask of the host: reads of its cache, logging, observed services.

use crate::types::{CallRecord, LogLevel, ObjectRef, ObservedChild, RawObject, ServiceStatus};

/// The host's side of the contract, as the SDK sees it.
///
/// Inside WebAssembly it calls the `steward:plugin/host` imports; in native
/// tests [`crate::testing::FakeHost`] stands in.
pub trait Host {
    /// Writes a log line.
    fn log(&self, level: LogLevel, message: &str);
    /// Reads one object of the host's cache.
    fn get(&self, r: &ObjectRef) -> Option<RawObject>;
    /// Lists a kind's objects in one namespace, or in all with `None`.
    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject>;
    /// The tool calls the host holds for the object being reconciled (capability `tools`);
    /// none by default.
    fn calls(&self) -> Vec<CallRecord> {
        Vec::new()
    }
    /// The child objects the host holds for the object being reconciled (capability
    /// `children`); none by default.
    fn children(&self) -> Vec<ObservedChild> {
        Vec::new()
    }
    /// In a world round: makes [`Host::calls`], [`Host::children`] and [`Host::services`] (and
    /// the effects the SDK hands over after it) concern `object`, one of the plugin's own
    /// objects in the round; false, changing nothing, when it is not one. False by default
    /// (a host without world rounds).
    fn act_for(&self, _object: &ObjectRef) -> bool {
        false
    }
    /// In a world round, after [`Host::act_for`]: what the host observes of the services of the
    /// object acted for (capability `services`); none by default. A reconcile's services come
    /// with its request instead ([`Context::services`]).
    fn services(&self) -> Vec<ServiceStatus> {
        Vec::new()
    }
}

/// Passed to every [`crate::Kind`] method that may read or log.
///
/// Every read is recorded by the host: when an object that a reconcile read
/// changes, that reconcile's object is queued again.
pub struct Context<'a> {
    host: &'a dyn Host,
    services: &'a [ServiceStatus],
}

impl<'a> Context<'a> {
    /// A context over `host`, observing `services`.
    pub fn new(host: &'a dyn Host, services: &'a [ServiceStatus]) -> Self {
        Self { host, services }
    }

    /// What the host observes of the services this object owns.
    pub fn services(&self) -> &[ServiceStatus] {
        self.services
    }

    /// The observed state of the owned service called `name`.
    pub fn service(&self, name: &str) -> Option<&ServiceStatus> {
        self.services.iter().find(|s| s.name == name)
    }

    /// Reads one object; `None` when it does not exist.
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<RawObject> {
        self.host.get(&ObjectRef::new(kind, namespace, name))
    }

    /// Lists `kind` in `namespace`, or in every namespace with `None`.
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject> {
        self.host.list(kind, namespace)
    }

    /// The tool calls the host holds for this object, in the order first requested, with
    /// their state and results (capability `tools`; always empty without the SDK feature `tools`).
    pub fn calls(&self) -> Vec<CallRecord> {
        self.host.calls()
    }

    /// The child objects the host made for this object, as last seen, with their status where
    /// their kind has one (capability `children`; always empty without the SDK feature `children`).
    pub fn children(&self) -> Vec<ObservedChild> {
        self.host.children()
    }

    /// Writes a log line at `level`.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.host.log(level, message)
    }

    /// Writes an info line.
    pub fn info(&self, message: &str) {
        self.log(LogLevel::Info, message)
    }

    /// Writes a warning.
    pub fn warn(&self, message: &str) {
        self.log(LogLevel::Warn, message)
    }
}
