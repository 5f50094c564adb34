//! Native testing of plugin logic: a fake host and helpers that run a kind like the host would.
//!
//! See the crate documentation for a complete example.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::context::{Context, Host};
use crate::dispatch::typed;
use crate::kind::{Error, Kind, Outcome};
use crate::types::{CallRecord, FieldError, LogLevel, ObjectRef, ObservedChild, RawObject, ServiceStatus};
use crate::world::{
    Change, ChangeType, Edge, NAMESPACE_KIND, NAMESPACE_LINK, NodeId, Observed, Round, RoundContext, Topology, World,
    WorldAnswer, ref_of,
};

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
    /// World rounds: what the host holds per own object, the objects it may act for (`None`:
    /// any), and the one acted for now.
    observed: RefCell<BTreeMap<ObjectRef, Observed>>,
    round_objects: RefCell<Option<BTreeSet<ObjectRef>>>,
    acting: RefCell<Option<ObjectRef>>,
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

    /// Sets what the host holds for `object` in world rounds ([`RoundContext::observed`]).
    pub fn set_observed(&self, object: ObjectRef, observed: Observed) {
        self.observed.borrow_mut().insert(object, observed);
    }

    /// Limits the objects [`Host::act_for`] accepts to `objects` (a round's own objects);
    /// [`reconcile_world`] sets it from the round.
    pub fn set_round_objects(&self, objects: impl IntoIterator<Item = ObjectRef>) {
        *self.round_objects.borrow_mut() = Some(objects.into_iter().collect());
    }

    /// The object the last successful [`Host::act_for`] named, if any.
    pub fn acting_for(&self) -> Option<ObjectRef> {
        self.acting.borrow().clone()
    }

    /// What the host holds for the object acted for, or `None` outside act-for.
    fn acted(&self) -> Option<Observed> {
        let acting = self.acting.borrow();
        acting.as_ref().map(|o| self.observed.borrow().get(o).cloned().unwrap_or_default())
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
        match self.acted() {
            Some(o) => o.calls,
            None => self.calls.borrow().clone(),
        }
    }

    fn children(&self) -> Vec<ObservedChild> {
        match self.acted() {
            Some(o) => o.children,
            None => self.children.borrow().clone(),
        }
    }

    fn act_for(&self, object: &ObjectRef) -> bool {
        let allowed = self.round_objects.borrow().as_ref().is_none_or(|own| own.contains(object));
        if allowed {
            *self.acting.borrow_mut() = Some(object.clone());
        }
        allowed
    }

    fn services(&self) -> Vec<ServiceStatus> {
        self.acted().map(|o| o.services).unwrap_or_default()
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

/// Builds a [`Topology`] for native tests from objects and edges named by object reference, as
/// the host would hand it over: nodes sorted by kind, namespace and name, optional namespace
/// nodes.
#[derive(Default)]
pub struct TopologyBuilder {
    objects: Vec<RawObject>,
    edges: Vec<(String, ObjectRef, ObjectRef)>,
    namespaces: bool,
}

impl TopologyBuilder {
    /// No objects, no edges.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one object (a node).
    pub fn object(mut self, obj: RawObject) -> Self {
        self.objects.push(obj);
        self
    }

    /// Adds objects (nodes).
    pub fn objects(mut self, objs: impl IntoIterator<Item = RawObject>) -> Self {
        self.objects.extend(objs);
        self
    }

    /// Adds an edge of link `link` from the object `from` refers to `to`.
    pub fn edge(mut self, link: &str, from: &ObjectRef, to: &ObjectRef) -> Self {
        self.edges.push((link.to_string(), from.clone(), to.clone()));
        self
    }

    /// Adds a node of kind [`NAMESPACE_KIND`] (empty namespace, spec `{}`) per namespace of the
    /// objects, and an edge [`NAMESPACE_LINK`] from each namespaced object to its namespace, as a
    /// world with `namespaces: true` holds them.
    pub fn with_namespaces(mut self) -> Self {
        self.namespaces = true;
        self
    }

    /// The topology; an error names an edge whose end is not one of the objects.
    pub fn build(self) -> Result<Topology, String> {
        let mut nodes = self.objects;
        let mut edges = self.edges;
        if self.namespaces {
            let spaces: BTreeSet<String> =
                nodes.iter().filter(|o| !o.namespace.is_empty()).map(|o| o.namespace.clone()).collect();
            for o in &nodes {
                if !o.namespace.is_empty() {
                    edges.push((
                        NAMESPACE_LINK.to_string(),
                        ref_of(o),
                        ObjectRef::new(NAMESPACE_KIND, "", &o.namespace),
                    ));
                }
            }
            nodes.extend(spaces.into_iter().map(|ns| RawObject {
                api_version: "v1".to_string(),
                kind: NAMESPACE_KIND.to_string(),
                name: ns,
                generation: 1,
                spec: "{}".to_string(),
                ..RawObject::default()
            }));
        }
        nodes.sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
        let index: BTreeMap<ObjectRef, u32> = nodes.iter().enumerate().map(|(i, o)| (ref_of(o), i as u32)).collect();
        let find = |r: &ObjectRef| {
            index.get(r).copied().map(NodeId).ok_or_else(|| format!("edge end {r:?} is not one of the objects"))
        };
        let edges = edges
            .iter()
            .map(|(link, from, to)| Ok(Edge { link: link.clone(), from: find(from)?, to: find(to)? }))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Topology::new(nodes, edges))
    }
}

/// The first round over `topology`: every node [`ChangeType::Added`].
pub fn first_round(topology: Topology) -> Round {
    let changes = topology.nodes().iter().map(|o| Change { type_: ChangeType::Added, object: ref_of(o) }).collect();
    Round { changes, first: true, topology }
}

/// Runs a round of `W` as the host would, natively: the host accepts `act-for` only for the
/// round's objects of `W`'s plugin kinds `own`, and reads what [`FakeHost::set_observed`] holds.
/// Returns the typed answer; the SDK's check that every outcome is for an own object of the round
/// runs too (its error is the round's).
pub fn reconcile_world<W: World>(host: &FakeHost, round: &Round, own: &[&str]) -> Result<WorldAnswer, Error> {
    let mine = round.topology.nodes().iter().filter(|o| own.contains(&o.kind.as_str())).map(ref_of);
    host.set_round_objects(mine);
    let answer = W::reconcile(&RoundContext::new(host), round)?;
    for (object, _) in &answer.outcomes {
        let ok = round
            .topology
            .node(object)
            .and_then(|id| round.topology.object(id))
            .is_some_and(|o| own.contains(&o.kind.as_str()));
        if !ok {
            return Err(Error::fatal(format!(
                "the round answered for {}, which is not one of the plugin's own objects in the round",
                crate::world::describe_ref(object)
            )));
        }
    }
    Ok(answer)
}
