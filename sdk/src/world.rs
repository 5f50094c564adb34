//! World reconcilers: a plugin that reconciles a whole topology at once, in rounds.
//!
//! A plugin registers one [`World`] in [`crate::export_plugin!`] (`world: MyWorld,`). It then
//! says, once, which kinds its world holds besides its own and how they link ([`WorldInfo`],
//! [`Link`], [`LinkBy`]); the host keeps a consistent snapshot of every object of those kinds,
//! builds the [`Topology`] (nodes and typed edges, each edge pointing from the object that
//! refers to the object referred to), and calls [`World::reconcile`] with a [`Round`]: the
//! topology now and the [`Change`]s since the last successful round, which the host computes
//! from two snapshots, so an event it missed is still a change.
//!
//! The answer ([`WorldAnswer`]) holds one [`Outcome`] (or an [`Error`]) per own object the
//! round has something to say of: status, conditions, events, and the effects of a reconcile
//! (children, tool calls, services). The SDK attributes each outcome's effects to its object
//! (the `round.act-for` import, then the capability imports, each behind its cargo feature as
//! for a kind's outcome), so an author never calls `act-for` by hand. [`RoundContext::observed`]
//! reads what the host holds for one own object (its children, calls, services).
//!
//! Objects of a world plugin's own kinds are never reconciled one by one: the host does not
//! call `reconcile` or `finalize` for them, and the SDK answers such a call with a fatal error.
//!
//! A world's logic is tested natively with [`crate::testing::TopologyBuilder`] and
//! [`crate::testing::reconcile_world`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Host;
use crate::dispatch::{RawOutcome, raw_outcome, typed};
use crate::kind::{Error, Kind, Outcome};
use crate::types::{CallRecord, FieldError, LogLevel, Object, ObjectRef, ObservedChild, RawObject, ServiceStatus};

/// The kind of the namespace nodes of a world whose [`WorldInfo::namespaces`] is true.
pub const NAMESPACE_KIND: &str = "Namespace";

/// The name of the edges that link a namespaced object to its namespace node.
pub const NAMESPACE_LINK: &str = "namespace";

/// The most paths [`Topology::paths_to_roots`] returns before it gives up with an error, so a
/// pathological graph costs bounded memory.
pub const MAX_PATHS: usize = 4096;

/// The reconcile logic of a whole world: the world analogue of [`Kind`].
///
/// The plugin's own kinds are still listed in `kinds: [...]` of [`crate::export_plugin!`] (their
/// schema, validation and columns come from their [`Kind`] impls); the world decides their
/// status. [`Kind::reconcile`] of those kinds is never called.
pub trait World: 'static {
    /// The kinds the world holds besides the plugin's own, the links between them, and whether
    /// it holds namespace nodes. Pure: the host asks once, when it loads the plugin.
    fn info() -> WorldInfo;

    /// Reconciles the world. An error fails the round as a whole: nothing of it is applied, every
    /// own object shows the error, and the host runs the round again with backoff. An error that
    /// concerns one object belongs in [`WorldAnswer::error`] instead.
    fn reconcile(ctx: &RoundContext, round: &Round) -> Result<WorldAnswer, Error>;
}

/// What a world holds: the kinds besides the plugin's own, the link rules, the namespace nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorldInfo {
    /// Kinds of other plugins (or of this one, harmlessly) the world holds; each must be served
    /// by some loaded plugin, else the host reports the world as not ready.
    pub kinds: Vec<String>,
    /// The rules the host makes edges by.
    pub links: Vec<Link>,
    /// Whether the world holds one node of kind [`NAMESPACE_KIND`] per namespace its objects live
    /// in, each namespaced object linked to it by an edge named [`NAMESPACE_LINK`].
    pub namespaces: bool,
}

impl WorldInfo {
    /// A world of `kinds` (besides the plugin's own), without links or namespace nodes.
    pub fn new<S: Into<String>>(kinds: impl IntoIterator<Item = S>) -> Self {
        Self { kinds: kinds.into_iter().map(Into::into).collect(), links: Vec::new(), namespaces: false }
    }

    /// The same world with one more link rule.
    pub fn link(mut self, link: Link) -> Self {
        self.links.push(link);
        self
    }

    /// The same world, with namespace nodes (see [`WorldInfo::namespaces`]).
    pub fn with_namespaces(mut self) -> Self {
        self.namespaces = true;
        self
    }
}

/// One rule the host links objects of a world by; its edges point from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The name of the edges it makes, for example `targets` or `member-of`.
    pub name: String,
    /// The kind of the referring object.
    pub from: String,
    /// The kind of the object referred to ([`NAMESPACE_KIND`] for the namespace nodes).
    pub to: String,
    /// How the host finds the edges.
    pub by: LinkBy,
}

impl Link {
    /// A rule named `name` linking objects of kind `from` to objects of kind `to` as `by` says.
    pub fn new(name: impl Into<String>, from: impl Into<String>, to: impl Into<String>, by: LinkBy) -> Self {
        Self { name: name.into(), from: from.into(), to: to.into(), by }
    }
}

/// How the host finds the edges of a [`Link`] (see the WIT's `link-by` for every detail).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkBy {
    /// `from`'s `metadata.ownerReferences` name `to`.
    OwnerReference,
    /// A field of `from`, by its dotted path from the object root (`spec.targetRef`), names
    /// `to`: an object `{kind, name, namespace}` or a string (the name), or a list of either.
    Field(String),
    /// A label selector of `to`, by its dotted path (`spec.selector`), selects `from` by its
    /// labels in `to`'s namespace; an empty selector selects all, a missing one none.
    Selector(String),
}

/// How an object changed since the last successful round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeType {
    /// New to the world (every object is, in the first round).
    Added,
    /// Its spec, labels, annotations or deletion changed.
    Modified,
    /// It left the world: deleted, being deleted, or out of the host's scope.
    Deleted,
}

/// One object that changed since the last successful round.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Change {
    /// How.
    pub type_: ChangeType,
    /// Which.
    pub object: ObjectRef,
}

/// Everything one round sees.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// What changed since the last successful round, sorted by object.
    pub changes: Vec<Change>,
    /// True for the first round after the host started or the plugin was (re)loaded; every
    /// object is then [`ChangeType::Added`].
    pub first: bool,
    /// The world now.
    pub topology: Topology,
}

/// A node of a [`Topology`], by its index in [`Topology::nodes`]; only meaningful for the
/// topology it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// One edge of a [`Topology`]: from the referring node to the node referred to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Edge {
    /// The name of the link rule that made it.
    pub link: String,
    /// The referring node.
    pub from: NodeId,
    /// The node referred to.
    pub to: NodeId,
}

/// The world as one consistent snapshot: its objects (nodes) and the edges between them, with
/// the traversals a policy author needs.
///
/// Every lookup is total: an edge whose end is out of range (which a host never sends) is left
/// out when the topology is built, and a traversal never loops on a cycle.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    nodes: Vec<RawObject>,
    edges: Vec<Edge>,
    by_ref: BTreeMap<ObjectRef, NodeId>,
    /// Per node, the indices into `edges` of the edges leaving it (to its parents).
    out: Vec<Vec<usize>>,
    /// Per node, the indices into `edges` of the edges reaching it (from its children).
    into: Vec<Vec<usize>>,
}

impl Topology {
    /// A topology of `nodes` and `edges` (by node index), as the host hands it over. Edges with
    /// an end out of range are dropped; duplicate edges are kept once; a duplicate object
    /// reference resolves to its first node.
    pub fn new(nodes: Vec<RawObject>, edges: Vec<Edge>) -> Self {
        let n = nodes.len();
        let mut edges: Vec<Edge> = edges.into_iter().filter(|e| e.from.index() < n && e.to.index() < n).collect();
        edges.sort_by(|a, b| (a.from, &a.link, a.to).cmp(&(b.from, &b.link, b.to)));
        edges.dedup();
        let mut by_ref = BTreeMap::new();
        for (i, o) in nodes.iter().enumerate() {
            by_ref.entry(ref_of(o)).or_insert(NodeId(i as u32));
        }
        let (mut out, mut into) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        for (i, e) in edges.iter().enumerate() {
            out[e.from.index()].push(i);
            into[e.to.index()].push(i);
        }
        Self { nodes, edges, by_ref, out, into }
    }

    /// Every node's object, in the host's order (by kind, namespace and name).
    pub fn nodes(&self) -> &[RawObject] {
        &self.nodes
    }

    /// Every edge, sorted by `from`, then `link`, then `to`.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The ids of every node, in order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// The node of `r`, if the world holds it. A cluster-scoped object (a namespace node) is
    /// found with an empty namespace.
    pub fn node(&self, r: &ObjectRef) -> Option<NodeId> {
        self.by_ref.get(r).copied()
    }

    /// The object of node `id`; `None` for an id of another topology that is out of range.
    pub fn object(&self, id: NodeId) -> Option<&RawObject> {
        self.nodes.get(id.index())
    }

    /// The reference of node `id` (kind, namespace, name).
    pub fn object_ref(&self, id: NodeId) -> Option<ObjectRef> {
        self.object(id).map(ref_of)
    }

    /// The nodes of `kind`, in order (by namespace and name).
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = NodeId> + 'a {
        self.ids().filter(move |&id| self.nodes[id.index()].kind == kind)
    }

    /// The nodes `id` refers to (the `to` ends of its edges) through links named in `links`, or
    /// through any link when `links` is empty; each once, in order.
    pub fn parents(&self, id: NodeId, links: &[&str]) -> Vec<NodeId> {
        let edges = self.out.get(id.index()).map(Vec::as_slice).unwrap_or_default();
        let mut got: Vec<NodeId> =
            edges.iter().map(|&i| &self.edges[i]).filter(|e| admits(links, &e.link)).map(|e| e.to).collect();
        got.sort();
        got.dedup();
        got
    }

    /// The nodes that refer to `id` (the `from` ends of edges reaching it) through links named
    /// in `links`, or through any link when `links` is empty; each once, in order.
    pub fn children(&self, id: NodeId, links: &[&str]) -> Vec<NodeId> {
        let edges = self.into.get(id.index()).map(Vec::as_slice).unwrap_or_default();
        let mut got: Vec<NodeId> =
            edges.iter().map(|&i| &self.edges[i]).filter(|e| admits(links, &e.link)).map(|e| e.from).collect();
        got.sort();
        got.dedup();
        got
    }

    /// Every node reachable from `id` by following edges forward through `links` (any link when
    /// empty), `id` itself excluded, nearest first (ties by id); each once, even on a cycle.
    pub fn ancestors(&self, id: NodeId, links: &[&str]) -> Vec<NodeId> {
        let mut seen = BTreeSet::from([id]);
        let mut order = Vec::new();
        let mut queue = VecDeque::from([id]);
        while let Some(n) = queue.pop_front() {
            for p in self.parents(n, links) {
                if seen.insert(p) {
                    order.push(p);
                    queue.push_back(p);
                }
            }
        }
        order
    }

    /// Every path from `id` to a root by following edges forward through `links` (any link when
    /// empty): each path starts with `id` and ends at a node with no further parent, or where
    /// the next step would revisit a node of the same path (a cycle). A node without parents is
    /// its own single path. Paths are in depth-first order of [`Topology::parents`]. More than
    /// [`MAX_PATHS`] paths is a fatal error naming the node rather than unbounded memory.
    pub fn paths_to_roots(&self, id: NodeId, links: &[&str]) -> Result<Vec<Vec<NodeId>>, Error> {
        let mut paths = Vec::new();
        let mut path = vec![id];
        self.walk(&mut path, links, &mut paths)?;
        Ok(paths)
    }

    fn walk(&self, path: &mut Vec<NodeId>, links: &[&str], paths: &mut Vec<Vec<NodeId>>) -> Result<(), Error> {
        let last = *path.last().unwrap_or(&NodeId(0));
        let next: Vec<NodeId> = self.parents(last, links).into_iter().filter(|p| !path.contains(p)).collect();
        if next.is_empty() {
            if paths.len() >= MAX_PATHS {
                let start = path.first().and_then(|&s| self.object_ref(s));
                return Err(Error::fatal(format!(
                    "more than {MAX_PATHS} paths lead from {} to the roots of the world",
                    start.map_or_else(|| "a node".to_string(), |r| describe_ref(&r))
                )));
            }
            paths.push(path.clone());
            return Ok(());
        }
        for p in next {
            path.push(p);
            self.walk(path, links, paths)?;
            path.pop();
        }
        Ok(())
    }

    /// The spec of node `id` as `T`; the error names the failing field (`spec.targetRef.kind`).
    pub fn spec<T: DeserializeOwned>(&self, id: NodeId) -> Result<T, FieldError> {
        match self.object(id) {
            Some(o) => o.spec_as(),
            None => Err(FieldError::new("spec", format!("node {} is not in this topology", id.0))),
        }
    }

    /// Node `id` as a typed object of kind `K`, parsed and validated as a reconcile of `K`
    /// would be: a spec that does not parse or does not pass [`Kind::validate`] is
    /// [`Error::Invalid`] with every field error, ready for [`WorldAnswer::error`].
    pub fn typed<K: Kind>(&self, id: NodeId) -> Result<Object<K::Spec, K::Status>, Error> {
        let raw = self.object(id).ok_or_else(|| Error::fatal(format!("node {} is not in this topology", id.0)))?;
        let obj = typed::<K>(raw).map_err(Error::Invalid)?;
        let errs = K::validate(&obj);
        if errs.is_empty() { Ok(obj) } else { Err(Error::Invalid(errs)) }
    }
}

fn admits(links: &[&str], link: &str) -> bool {
    links.is_empty() || links.contains(&link)
}

/// The reference of `o` (kind, namespace, name).
pub(crate) fn ref_of(o: &RawObject) -> ObjectRef {
    ObjectRef::new(&o.kind, &o.namespace, &o.name)
}

/// `Kind namespace/name`, or `Kind name` without a namespace, for messages.
pub fn describe_ref(r: &ObjectRef) -> String {
    if r.namespace.is_empty() {
        format!("{} {}", r.kind, r.name)
    } else {
        format!("{} {}/{}", r.kind, r.namespace, r.name)
    }
}

/// What the host holds for one own object in a round ([`RoundContext::observed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Its children, as last seen (capability `children`; empty without the SDK feature).
    pub children: Vec<ObservedChild>,
    /// Its tool calls, in the order first requested (capability `tools`; empty without the SDK feature).
    pub calls: Vec<CallRecord>,
    /// Its services (capability `services`; empty without the SDK feature).
    pub services: Vec<ServiceStatus>,
}

/// Passed to [`World::reconcile`]: logging, and what the host holds for each own object.
pub struct RoundContext<'a> {
    host: &'a dyn Host,
}

impl<'a> RoundContext<'a> {
    /// A context over `host`.
    pub fn new(host: &'a dyn Host) -> Self {
        Self { host }
    }

    /// What the host holds for `object`, one of the plugin's own objects in this round; `None`
    /// when it is not one (the host refuses to act for it).
    pub fn observed(&self, object: &ObjectRef) -> Option<Observed> {
        if !self.host.act_for(object) {
            return None;
        }
        Some(Observed { children: self.host.children(), calls: self.host.calls(), services: self.host.services() })
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

/// What one round wants: an outcome or an error per own object it has something to say of
/// (one left out keeps its last status and effects), and when to run again.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorldAnswer {
    /// One entry per object, in the order given; the last entry for an object wins.
    pub outcomes: Vec<(ObjectRef, Result<Outcome<serde_json::Value>, Error>)>,
    /// Run a round again after this long even with no change; the SDK also takes the shortest
    /// [`Outcome::requeue_after`] of the outcomes.
    pub requeue_after: Option<Duration>,
}

impl WorldAnswer {
    /// An answer that says nothing of any object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `object`'s outcome. A status that does not serialize to JSON becomes a fatal error
    /// of that object, never a panic.
    pub fn outcome<St: Serialize>(&mut self, object: ObjectRef, outcome: Outcome<St>) -> &mut Self {
        let result = match outcome.status.as_ref().map(serde_json::to_value).transpose() {
            Ok(status) => Ok(Outcome {
                status,
                conditions: outcome.conditions,
                services: outcome.services,
                requeue_after: outcome.requeue_after,
                events: outcome.events,
                calls: outcome.calls,
                children: outcome.children,
            }),
            Err(e) => Err(Error::fatal(format!("status does not serialize to JSON: {e}"))),
        };
        self.set(object, result)
    }

    /// Sets `object`'s result to `error`: the host shows it on the object as a reconcile error.
    pub fn error(&mut self, object: ObjectRef, error: Error) -> &mut Self {
        self.set(object, Err(error))
    }

    fn set(&mut self, object: ObjectRef, result: Result<Outcome<serde_json::Value>, Error>) -> &mut Self {
        self.outcomes.retain(|(o, _)| *o != object);
        self.outcomes.push((object, result));
        self
    }

    /// The outcome given for `object`, if any.
    pub fn get(&self, object: &ObjectRef) -> Option<&Result<Outcome<serde_json::Value>, Error>> {
        self.outcomes.iter().find(|(o, _)| o == object).map(|(_, r)| r)
    }

    /// Asks for another round after `after`.
    pub fn requeue_after(&mut self, after: Duration) -> &mut Self {
        self.requeue_after = Some(after);
        self
    }
}

/// One own object's verdict, ready for the contract: the raw outcome (status JSON text, the
/// object's last status when the outcome keeps it) or the error.
#[derive(Clone, Debug, PartialEq)]
pub struct RawObjectOutcome {
    /// Which object.
    pub object: ObjectRef,
    /// Its outcome or error.
    pub result: Result<RawOutcome, Error>,
}

/// A round's answer, checked and ready for the contract.
#[derive(Clone, Debug, PartialEq)]
pub struct RawAnswer {
    /// One per object, in the order the world gave them.
    pub outcomes: Vec<RawObjectOutcome>,
    /// The shortest of the answer's and its outcomes' requeue, in milliseconds.
    pub requeue_after_ms: Option<u64>,
}

/// A world's entry points, monomorphised from its [`World`] impl.
pub struct WorldEntry {
    /// Describes the world.
    pub info: fn() -> WorldInfo,
    /// Runs a round.
    pub reconcile: fn(&dyn Host, &Round, &[&str]) -> Result<RawAnswer, Error>,
}

impl WorldEntry {
    /// The entry points of `W`.
    pub fn of<W: World>() -> Self {
        Self { info: W::info, reconcile: run::<W> }
    }
}

/// Runs a round of `W` and checks its answer: every outcome must be for a node of the round whose
/// kind is one of `own` (the plugin's kinds), else the round fails with a fatal error naming the
/// object (the host would refuse the answer as a whole).
pub fn run<W: World>(host: &dyn Host, round: &Round, own: &[&str]) -> Result<RawAnswer, Error> {
    let answer = W::reconcile(&RoundContext::new(host), round)?;
    let mut requeue = answer.requeue_after;
    let mut outcomes = Vec::with_capacity(answer.outcomes.len());
    for (object, result) in answer.outcomes {
        let node = round.topology.node(&object).and_then(|id| round.topology.object(id));
        let Some(raw) = node.filter(|o| own.contains(&o.kind.as_str())) else {
            return Err(Error::fatal(format!(
                "the round answered for {}, which is not one of the plugin's own objects in the round",
                describe_ref(&object)
            )));
        };
        let result = result.and_then(|o| {
            if let Some(after) = o.requeue_after {
                requeue = Some(requeue.map_or(after, |r| r.min(after)));
            }
            raw_outcome(o, raw)
        });
        outcomes.push(RawObjectOutcome { object, result });
    }
    Ok(RawAnswer { outcomes, requeue_after_ms: requeue.map(|d| d.as_millis().min(u64::MAX as u128) as u64) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TopologyBuilder, object};
    use serde_json::json;

    fn r(kind: &str, name: &str) -> ObjectRef {
        ObjectRef::new(kind, "default", name)
    }

    /// a -> b -> d, a -> c -> d, d -> e (link `up`); c -> a (link `back`, a cycle with `up`).
    fn diamond() -> Topology {
        TopologyBuilder::new()
            .objects(["a", "b", "c", "d", "e"].map(|n| object("N", n, json!({"n": n}))))
            .edge("up", &r("N", "a"), &r("N", "b"))
            .edge("up", &r("N", "a"), &r("N", "c"))
            .edge("up", &r("N", "b"), &r("N", "d"))
            .edge("up", &r("N", "c"), &r("N", "d"))
            .edge("up", &r("N", "d"), &r("N", "e"))
            .edge("back", &r("N", "c"), &r("N", "a"))
            .build()
            .unwrap()
    }

    fn names(t: &Topology, ids: &[NodeId]) -> Vec<String> {
        ids.iter().map(|&i| t.object(i).unwrap().name.clone()).collect()
    }

    #[test]
    fn parents_and_children_follow_the_named_links_only() {
        let t = diamond();
        let (a, c, d) = (t.node(&r("N", "a")).unwrap(), t.node(&r("N", "c")).unwrap(), t.node(&r("N", "d")).unwrap());
        assert_eq!(names(&t, &t.parents(a, &["up"])), ["b", "c"]);
        assert_eq!(names(&t, &t.parents(c, &[])), ["a", "d"]);
        assert_eq!(names(&t, &t.parents(c, &["up"])), ["d"]);
        assert_eq!(names(&t, &t.children(d, &["up"])), ["b", "c"]);
        assert_eq!(names(&t, &t.children(a, &["back"])), ["c"]);
        assert!(t.children(a, &["up"]).is_empty());
        assert_eq!(t.node(&r("N", "zz")), None);
        assert_eq!(t.of_kind("N").count(), 5);
        assert_eq!(t.of_kind("M").count(), 0);
    }

    #[test]
    fn ancestors_are_nearest_first_and_survive_a_cycle() {
        let t = diamond();
        let a = t.node(&r("N", "a")).unwrap();
        assert_eq!(names(&t, &t.ancestors(a, &["up"])), ["b", "c", "d", "e"]);
        let c = t.node(&r("N", "c")).unwrap();
        // c -> a (back) -> b, c (up) -> ...: the cycle back to c is not followed again.
        assert_eq!(names(&t, &t.ancestors(c, &[])), ["a", "d", "b", "e"]);
    }

    #[test]
    fn every_path_to_a_root_is_listed_and_a_cycle_ends_a_path() {
        let t = diamond();
        let a = t.node(&r("N", "a")).unwrap();
        let paths: Vec<_> = t.paths_to_roots(a, &["up"]).unwrap().iter().map(|p| names(&t, p)).collect();
        assert_eq!(paths, [vec!["a", "b", "d", "e"], vec!["a", "c", "d", "e"]]);
        let e = t.node(&r("N", "e")).unwrap();
        assert_eq!(t.paths_to_roots(e, &[]).unwrap(), vec![vec![e]]);
        let c = t.node(&r("N", "c")).unwrap();
        let paths: Vec<_> = t.paths_to_roots(c, &[]).unwrap().iter().map(|p| names(&t, p)).collect();
        assert_eq!(paths, [vec!["c", "a", "b", "d", "e"], vec!["c", "d", "e"]], "a→c is not taken again");
    }

    #[test]
    fn too_many_paths_is_an_error_not_exhausted_memory() {
        // 14 layers of two nodes each, every node linked to both of the next layer: 2^13 paths.
        let mut b = TopologyBuilder::new();
        for layer in 0..14 {
            for i in 0..2 {
                b = b.object(object("N", &format!("n{layer}-{i}"), json!({})));
                if layer > 0 {
                    for j in 0..2 {
                        b = b.edge("up", &r("N", &format!("n{}-{j}", layer - 1)), &r("N", &format!("n{layer}-{i}")));
                    }
                }
            }
        }
        let t = b.build().unwrap();
        let got = t.paths_to_roots(t.node(&r("N", "n0-0")).unwrap(), &[]);
        let Err(err) = got else { panic!("{} paths, more than {MAX_PATHS}", got.map_or(0, |p| p.len())) };
        assert!(matches!(&err, Error::Fatal(m) if m.contains("N default/n0-0")), "{err}");
    }

    #[test]
    fn specs_are_typed_with_the_failing_field_named() {
        #[derive(serde::Deserialize)]
        struct S {
            #[allow(dead_code)]
            n: u32,
        }
        let t = diamond();
        let a = t.node(&r("N", "a")).unwrap();
        let err = t.spec::<S>(a).err().unwrap();
        assert_eq!(err.path, "spec.n");
        assert_eq!(t.spec::<serde_json::Value>(a).unwrap(), json!({"n": "a"}));
        assert!(t.spec::<serde_json::Value>(NodeId(99)).is_err());
        assert_eq!(t.object_ref(NodeId(99)), None);
    }

    #[test]
    fn edges_out_of_range_and_duplicates_are_dropped() {
        let t = Topology::new(
            vec![object("N", "a", json!({})), object("N", "b", json!({}))],
            vec![
                Edge { link: "x".into(), from: NodeId(0), to: NodeId(1) },
                Edge { link: "x".into(), from: NodeId(0), to: NodeId(1) },
                Edge { link: "x".into(), from: NodeId(0), to: NodeId(7) },
            ],
        );
        assert_eq!(t.edges().len(), 1);
        assert_eq!(t.parents(NodeId(5), &[]), Vec::<NodeId>::new());
    }

    #[test]
    fn an_answer_keeps_the_last_outcome_per_object() {
        let mut a = WorldAnswer::new();
        a.outcome(r("N", "a"), Outcome::status(json!({"v": 1})));
        a.error(r("N", "b"), Error::retry("later"));
        a.outcome(r("N", "a"), Outcome::status(json!({"v": 2})));
        assert_eq!(a.outcomes.len(), 2);
        assert_eq!(a.get(&r("N", "a")).unwrap().as_ref().unwrap().status, Some(json!({"v": 2})));
        assert_eq!(a.get(&r("N", "b")).unwrap(), &Err(Error::retry("later")));
    }
}
