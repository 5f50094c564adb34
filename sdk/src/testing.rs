//! Native testing of plugin logic: a fake host and helpers that run a kind like the host would.
//!
//! See the crate documentation for a complete example.

use std::cell::RefCell;

use crate::context::{Context, Host};
use crate::dispatch::typed;
use crate::kind::{Error, Kind, Outcome};
use crate::types::{CallRecord, FieldError, LogLevel, ObjectRef, ObservedChild, RawObject, ServiceStatus};

/// A read a reconcile made, as the host records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// `get` of one object.
    Get(ObjectRef),
    /// `list` of a kind in a namespace (or all).
    List {
        /// The kind.
        kind: String,
        /// The namespace, or all.
        namespace: Option<String>,
    },
}

/// An in-memory host: a cache to read from, and a record of logs and reads.
#[derive(Default)]
pub struct FakeHost {
    objects: RefCell<Vec<RawObject>>,
    logs: RefCell<Vec<(LogLevel, String)>>,
    reads: RefCell<Vec<Read>>,
    calls: RefCell<Vec<CallRecord>>,
    children: RefCell<Vec<ObservedChild>>,
}

impl FakeHost {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an object to the cache.
    pub fn with(self, obj: RawObject) -> Self {
        self.insert(obj);
        self
    }

    /// Adds or replaces an object in the cache.
    pub fn insert(&self, obj: RawObject) {
        let mut objs = self.objects.borrow_mut();
        objs.retain(|o| !(o.kind == obj.kind && o.namespace == obj.namespace && o.name == obj.name));
        objs.push(obj);
    }

    /// Sets the tool calls the host holds for the object being reconciled ([`Host::calls`]).
    pub fn set_calls(&self, calls: Vec<CallRecord>) {
        *self.calls.borrow_mut() = calls;
    }

    /// Sets the child objects the host holds for the object being reconciled ([`Host::children`]).
    pub fn set_children(&self, children: Vec<ObservedChild>) {
        *self.children.borrow_mut() = children;
    }

    /// The log lines written so far.
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.logs.borrow().clone()
    }

    /// The reads made so far, in order.
    pub fn reads(&self) -> Vec<Read> {
        self.reads.borrow().clone()
    }
}

impl Host for FakeHost {
    fn log(&self, level: LogLevel, message: &str) {
        self.logs.borrow_mut().push((level, message.to_string()));
    }

    fn get(&self, r: &ObjectRef) -> Option<RawObject> {
        self.reads.borrow_mut().push(Read::Get(r.clone()));
        self.objects
            .borrow()
            .iter()
            .find(|o| o.kind == r.kind && o.namespace == r.namespace && o.name == r.name)
            .cloned()
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject> {
        self.reads.borrow_mut().push(Read::List { kind: kind.to_string(), namespace: namespace.map(str::to_string) });
        let mut out: Vec<RawObject> = self
            .objects
            .borrow()
            .iter()
            .filter(|o| o.kind == kind && namespace.is_none_or(|ns| o.namespace == ns))
            .cloned()
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    fn calls(&self) -> Vec<CallRecord> {
        self.calls.borrow().clone()
    }

    fn children(&self) -> Vec<ObservedChild> {
        self.children.borrow().clone()
    }
}

/// A raw object of `kind` named `name` in namespace `default`, generation 1, with `spec`.
pub fn object(kind: &str, name: &str, spec: serde_json::Value) -> RawObject {
    RawObject {
        api_version: "steward.dev/v1alpha1".to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: "default".to_string(),
        generation: 1,
        spec: spec.to_string(),
        ..RawObject::default()
    }
}

/// Validates `obj` as the host would: parse the spec, then [`Kind::validate`].
pub fn validate<K: Kind>(obj: &RawObject) -> Vec<FieldError> {
    match typed::<K>(obj) {
        Ok(o) => K::validate(&o),
        Err(e) => e,
    }
}

/// The warnings of `obj` as the host asks for them: none when the spec does not parse.
pub fn warnings<K: Kind>(obj: &RawObject) -> Vec<FieldError> {
    typed::<K>(obj).map(|o| K::warnings(&o)).unwrap_or_default()
}

/// Reconciles `obj` as the host would (parse, validate, reconcile), returning the typed outcome.
pub fn reconcile<K: Kind>(
    host: &FakeHost,
    obj: &RawObject,
    services: &[ServiceStatus],
) -> Result<Outcome<K::Status>, Error> {
    let typed_obj = typed::<K>(obj).map_err(Error::Invalid)?;
    let errs = K::validate(&typed_obj);
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    K::reconcile(&Context::new(host, services), &typed_obj)
}

/// Finalizes `obj` as the host would, returning the typed outcome.
pub fn finalize<K: Kind>(
    host: &FakeHost,
    obj: &RawObject,
    services: &[ServiceStatus],
) -> Result<Outcome<K::Status>, Error> {
    match typed::<K>(obj) {
        Ok(o) => K::finalize(&Context::new(host, services), &o),
        Err(_) => Ok(Outcome::keep_status()),
    }
}
