//! The topology a round receives: one snapshot's objects as nodes, and the edges the world's link rules find between them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;
use steward_sdk::RawObject;

use super::{LinkBy, NAMESPACE_KIND, NAMESPACE_LINK, WorldSpec, select};
use crate::children::{OWNER_ANNOTATION, owner_of_annotation};

/// One edge, by the indices of its ends in [`Topology::nodes`]: `from` refers to `to`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    /// The referring node.
    pub from: u32,
    /// The link rule that made it.
    pub link: String,
    /// The node referred to.
    pub to: u32,
}

/// One snapshot of a world: its objects sorted by kind, namespace and name (namespace nodes
/// included when the world holds them), and its edges sorted by `from`, link and `to`, each once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// The objects.
    pub nodes: Vec<RawObject>,
    /// The links between them.
    pub edges: Vec<Edge>,
}

/// Why no topology was built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The world holds more than the plugin's limits let a round receive.
    #[error(
        "the world holds {objects} objects ({bytes} bytes), over the limit of {max_objects} objects and {max_bytes} bytes \
         a round may receive; raise `plugins.<name>.world_objects` / `world_bytes` in the host config, or narrow the world"
    )]
    TooLarge {
        /// Objects in the snapshot, namespace nodes included.
        objects: usize,
        /// Their size, as counted.
        bytes: u64,
        /// The object limit.
        max_objects: usize,
        /// The byte limit.
        max_bytes: u64,
    },
}

/// The bounds of one round's topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Most objects.
    pub objects: usize,
    /// Most bytes (names, labels, annotations, spec and status text).
    pub bytes: u64,
}

/// The size an object counts for against [`Bounds::bytes`].
pub fn size_of(o: &RawObject) -> u64 {
    let pairs = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    (o.api_version.len()
        + o.kind.len()
        + o.name.len()
        + o.namespace.len()
        + pairs(&o.labels)
        + pairs(&o.annotations)
        + o.spec.len()
        + o.status.as_ref().map_or(0, String::len)) as u64
}

/// Builds the topology of `world` from `objects` (every object of its kinds, none being
/// deleted), within `bounds`: the whole world or an error, never a part of it.
pub fn build(world: &WorldSpec, mut objects: Vec<RawObject>, bounds: Bounds) -> Result<Topology, TopologyError> {
    if world.namespaces {
        let namespaces: BTreeSet<String> =
            objects.iter().filter(|o| !o.namespace.is_empty()).map(|o| o.namespace.clone()).collect();
        objects.extend(namespaces.into_iter().map(namespace_node));
    }
    let bytes: u64 = objects.iter().map(size_of).sum();
    if objects.len() > bounds.objects || bytes > bounds.bytes {
        return Err(TopologyError::TooLarge {
            objects: objects.len(),
            bytes,
            max_objects: bounds.objects,
            max_bytes: bounds.bytes,
        });
    }
    objects.sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
    objects.dedup_by(|a, b| (&a.kind, &a.namespace, &a.name) == (&b.kind, &b.namespace, &b.name));
    let index: HashMap<(&str, &str, &str), u32> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| ((o.kind.as_str(), o.namespace.as_str(), o.name.as_str()), i as u32))
        .collect();
    let mut parsed: HashMap<u32, Value> = HashMap::new();
    let mut edges: BTreeSet<Edge> = BTreeSet::new();
    let mut add = |from: u32, link: &str, to: u32| {
        if from != to {
            edges.insert(Edge { from, link: link.to_string(), to });
        }
    };
    if world.namespaces {
        for (i, o) in objects.iter().enumerate().filter(|(_, o)| o.kind != NAMESPACE_KIND && !o.namespace.is_empty()) {
            if let Some(&ns) = index.get(&(NAMESPACE_KIND, "", o.namespace.as_str())) {
                add(i as u32, NAMESPACE_LINK, ns);
            }
        }
    }
    for link in &world.links {
        match &link.by {
            LinkBy::OwnerReference => {
                for (i, o) in by_kind(&objects, &link.from) {
                    let owner = o.annotations.get(OWNER_ANNOTATION).and_then(|a| owner_of_annotation(a));
                    if let Some(owner) = owner.filter(|k| **k.kind() == link.to)
                        && let Some(&to) =
                            index.get(&(owner.kind().as_str(), owner.namespace().as_str(), owner.name().as_str()))
                    {
                        add(i, &link.name, to);
                    }
                }
            }
            LinkBy::Field(path) => {
                for (i, o) in by_kind(&objects, &link.from) {
                    let doc = parsed.entry(i).or_insert_with(|| document(o));
                    let Some(value) = at(doc, path) else { continue };
                    for r in references(value) {
                        if r.kind.is_some_and(|k| k != link.to) {
                            continue;
                        }
                        let ns = r.namespace.unwrap_or(&o.namespace);
                        let found = index
                            .get(&(link.to.as_str(), ns, r.name))
                            .or_else(|| index.get(&(link.to.as_str(), "", r.name)));
                        if let Some(&to) = found {
                            add(i, &link.name, to);
                        }
                    }
                }
            }
            LinkBy::Selector(path) => {
                let members: Vec<(u32, &RawObject)> = by_kind(&objects, &link.from).collect();
                for (t, target) in by_kind(&objects, &link.to) {
                    let doc = parsed.entry(t).or_insert_with(|| document(target));
                    let Some(sel) = at(doc, path).cloned() else { continue };
                    for (m, member) in &members {
                        let same_scope = target.namespace.is_empty() || member.namespace == target.namespace;
                        if same_scope && select::matches(&sel, &member.labels) == Some(true) {
                            add(*m, &link.name, t);
                        }
                    }
                }
            }
        }
    }
    Ok(Topology { edges: edges.into_iter().collect(), nodes: objects })
}

/// The objects of `kind` with their indices.
fn by_kind<'a>(objects: &'a [RawObject], kind: &'a str) -> impl Iterator<Item = (u32, &'a RawObject)> + 'a {
    objects.iter().enumerate().filter(move |(_, o)| o.kind == kind).map(|(i, o)| (i as u32, o))
}

/// The node of namespace `name`: cluster-scoped, kind [`NAMESPACE_KIND`], an empty spec.
fn namespace_node(name: String) -> RawObject {
    RawObject {
        api_version: "v1".into(),
        kind: NAMESPACE_KIND.into(),
        name,
        namespace: String::new(),
        generation: 1,
        spec: "{}".into(),
        ..RawObject::default()
    }
}

/// The object as a JSON document a path reads: `spec` and `status` parsed, `metadata` with its
/// name, namespace, labels and annotations.
fn document(o: &RawObject) -> Value {
    let spec: Value = serde_json::from_str(&o.spec).unwrap_or(Value::Null);
    let status: Value = o.status.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or(Value::Null);
    serde_json::json!({
        "metadata": {"name": o.name, "namespace": o.namespace, "labels": o.labels, "annotations": o.annotations},
        "spec": spec,
        "status": status,
    })
}

/// The value at a dotted `path` of `doc`.
fn at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, part| v.get(part)).filter(|v| !v.is_null())
}

/// One reference a field holds.
struct Reference<'a> {
    kind: Option<&'a str>,
    namespace: Option<&'a str>,
    name: &'a str,
}

/// The references `value` holds: `{kind, name, namespace}`, a name, or a list of either.
fn references(value: &Value) -> Vec<Reference<'_>> {
    match value {
        Value::String(name) => vec![Reference { kind: None, namespace: None, name }],
        Value::Object(m) => match m.get("name").and_then(Value::as_str) {
            Some(name) => vec![Reference {
                kind: m.get("kind").and_then(Value::as_str),
                namespace: m.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()),
                name,
            }],
            None => Vec::new(),
        },
        Value::Array(items) => items.iter().flat_map(references).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::Link;
    use serde_json::json;

    fn obj(kind: &str, ns: &str, name: &str, spec: Value, labels: &[(&str, &str)]) -> RawObject {
        RawObject {
            api_version: "steward.dev/v1alpha1".into(),
            kind: kind.into(),
            name: name.into(),
            namespace: ns.into(),
            generation: 1,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            spec: spec.to_string(),
            ..RawObject::default()
        }
    }

    fn policy_world() -> WorldSpec {
        let field = |to: &str| Link {
            name: "targets".into(),
            from: "ToolPolicy".into(),
            to: to.into(),
            by: LinkBy::Field("spec.targetRef".into()),
        };
        WorldSpec {
            own: vec!["ToolPolicy".into()],
            kinds: vec!["MCPServer".into(), "MCPServerGroup".into()],
            links: vec![
                field("MCPServer"),
                field("MCPServerGroup"),
                field("Namespace"),
                Link {
                    name: "member-of".into(),
                    from: "MCPServer".into(),
                    to: "MCPServerGroup".into(),
                    by: LinkBy::Selector("spec.selector".into()),
                },
            ],
            namespaces: true,
        }
    }

    const WIDE: Bounds = Bounds { objects: 1000, bytes: 1 << 20 };

    /// The edges as `from -link-> to` by node names, for readable assertions.
    fn named(t: &Topology) -> Vec<String> {
        let n = |i: u32| {
            let o = &t.nodes[i as usize];
            format!("{}/{}", o.kind, o.name)
        };
        t.edges.iter().map(|e| format!("{} -{}-> {}", n(e.from), e.link, n(e.to))).collect()
    }

    #[test]
    fn policies_link_to_their_targets_servers_to_their_groups_and_all_to_their_namespace() {
        let objects = vec![
            obj("MCPServer", "a", "git", json!({}), &[("team", "x")]),
            obj("MCPServer", "a", "fs", json!({}), &[("team", "y")]),
            obj("MCPServer", "b", "git", json!({}), &[("team", "x")]),
            obj("MCPServerGroup", "a", "xs", json!({"selector": {"matchLabels": {"team": "x"}}}), &[]),
            obj("ToolPolicy", "a", "on-group", json!({"targetRef": {"kind": "MCPServerGroup", "name": "xs"}}), &[]),
            obj("ToolPolicy", "a", "on-ns", json!({"targetRef": {"kind": "Namespace", "name": "a"}}), &[]),
            obj("ToolPolicy", "a", "on-git", json!({"targetRef": {"kind": "MCPServer", "name": "git"}}), &[]),
            obj("ToolPolicy", "a", "dangling", json!({"targetRef": {"kind": "MCPServer", "name": "nope"}}), &[]),
        ];
        let t = build(&policy_world(), objects, WIDE).unwrap();
        let kinds: Vec<&str> = t.nodes.iter().map(|n| n.kind.as_str()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "Namespace").count(), 2, "one node per namespace");
        let edges = named(&t);
        for want in [
            "ToolPolicy/on-group -targets-> MCPServerGroup/xs",
            "ToolPolicy/on-ns -targets-> Namespace/a",
            "ToolPolicy/on-git -targets-> MCPServer/git",
            "MCPServer/git -member-of-> MCPServerGroup/xs",
            "MCPServer/git -namespace-> Namespace/a",
            "MCPServerGroup/xs -namespace-> Namespace/a",
        ] {
            assert!(edges.contains(&want.to_string()), "missing {want} in {edges:#?}");
        }
        // The group selects in its own namespace only; a missing target makes no edge.
        assert_eq!(edges.iter().filter(|e| e.contains("member-of")).count(), 1, "{edges:#?}");
        assert!(!edges.iter().any(|e| e.starts_with("ToolPolicy/dangling -targets")), "{edges:#?}");
        // The policy on server `git` in `a` does not reach `git` in `b`.
        assert_eq!(edges.iter().filter(|e| e.contains("-targets-> MCPServer/git")).count(), 1);
        let mut sorted = t.edges.clone();
        sorted.sort();
        assert_eq!(sorted, t.edges, "edges are sorted");
    }

    #[test]
    fn a_field_may_hold_a_name_or_a_list_and_a_kind_that_is_not_the_links_is_skipped() {
        let world = WorldSpec {
            own: vec!["P".into()],
            kinds: vec!["S".into()],
            links: vec![Link {
                name: "t".into(),
                from: "P".into(),
                to: "S".into(),
                by: LinkBy::Field("spec.refs".into()),
            }],
            namespaces: false,
        };
        let objects = vec![
            obj("S", "a", "one", json!({}), &[]),
            obj("S", "a", "two", json!({}), &[]),
            obj("S", "b", "three", json!({}), &[]),
            obj(
                "P",
                "a",
                "p",
                json!({"refs": ["one", {"name": "two", "kind": "Other"}, {"name": "three", "namespace": "b"}]}),
                &[],
            ),
        ];
        let t = build(&world, objects, WIDE).unwrap();
        assert_eq!(named(&t), ["P/p -t-> S/one", "P/p -t-> S/three"]);
    }

    #[test]
    fn owner_references_are_the_owner_the_host_recorded() {
        let world = WorldSpec {
            own: vec!["P".into(), "E".into()],
            kinds: vec![],
            links: vec![Link { name: "owned-by".into(), from: "E".into(), to: "P".into(), by: LinkBy::OwnerReference }],
            namespaces: false,
        };
        let mut child = obj("E", "a", "e", json!({}), &[]);
        child.annotations.insert(OWNER_ANNOTATION.into(), "P/a/p".into());
        let t = build(&world, vec![obj("P", "a", "p", json!({}), &[]), child], WIDE).unwrap();
        assert_eq!(named(&t), ["E/e -owned-by-> P/p"]);
    }

    #[test]
    fn a_world_over_its_bounds_is_refused_whole() {
        let objects: Vec<RawObject> =
            (0..10).map(|i| obj("MCPServer", "a", &format!("s{i}"), json!({}), &[])).collect();
        let err = build(&policy_world(), objects.clone(), Bounds { objects: 10, bytes: 1 << 20 }).unwrap_err();
        assert!(matches!(err, TopologyError::TooLarge { objects: 11, max_objects: 10, .. }), "{err:?}");
        assert!(err.to_string().contains("world_objects"), "{err}");
        let err = build(&policy_world(), objects.clone(), Bounds { objects: 100, bytes: 100 }).unwrap_err();
        assert!(matches!(err, TopologyError::TooLarge { max_bytes: 100, .. }), "{err:?}");
        assert_eq!(build(&policy_world(), objects, WIDE).unwrap().nodes.len(), 11);
    }
}
