//! World reconcilers, the pure part: what a world holds ([`WorldSpec`]), the topology built from one snapshot of it, and the changes between two snapshots.
//!
//! A plugin that reconciles a world names the kinds it holds and the rules that link them;
//! the engine takes a consistent snapshot of those kinds, and this module turns it into the
//! nodes and edges the plugin receives ([`topology::build`]) and into the changes since the
//! last round ([`changes::between`]). Nothing here touches a store, a driver or a plugin.

pub mod changes;
mod select;
pub mod topology;

pub use changes::{Change, ChangeType, Fingerprints};
pub use topology::{Edge, Topology, TopologyError};

/// The kind of the nodes a world holds for its namespaces ([`WorldSpec::namespaces`]).
pub const NAMESPACE_KIND: &str = "Namespace";
/// The name of the edges that link a namespaced object to its namespace node.
pub const NAMESPACE_LINK: &str = "namespace";

/// What a plugin's world holds, as its `describe-world` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorldSpec {
    /// The kinds of the plugin's own objects: the world always holds them, and a round's
    /// outcomes are about them only.
    pub own: Vec<String>,
    /// The other kinds it holds (served by other plugins).
    pub kinds: Vec<String>,
    /// The rules that make its edges.
    pub links: Vec<Link>,
    /// Whether it holds a node per namespace, each namespaced object linked to it.
    pub namespaces: bool,
}

impl WorldSpec {
    /// Every kind whose objects the world holds: its own, then the others, each once.
    pub fn all_kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for k in self.own.iter().chain(&self.kinds) {
            if !out.contains(k) {
                out.push(k.clone());
            }
        }
        out
    }

    /// Whether an object of `kind` belongs to the world (namespace nodes aside).
    pub fn holds(&self, kind: &str) -> bool {
        self.own.iter().chain(&self.kinds).any(|k| k == kind)
    }

    /// Checks what a plugin described: each link is named, its ends are kinds of the world (or
    /// `Namespace` when it holds namespaces), and its path is a dotted path. The error says
    /// which link and what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let known = |k: &str| self.holds(k) || (self.namespaces && k == NAMESPACE_KIND);
        for (i, l) in self.links.iter().enumerate() {
            let which = if l.name.is_empty() { format!("link #{i}") } else { format!("link `{}`", l.name) };
            if l.name.is_empty() {
                return Err(format!("{which}: a link needs a name"));
            }
            if l.name == NAMESPACE_LINK {
                return Err(format!("{which}: `{NAMESPACE_LINK}` names the host's own namespace edges"));
            }
            for end in [&l.from, &l.to] {
                if !known(end) {
                    return Err(format!(
                        "{which}: kind `{end}` is not in the world (its kinds are {}{})",
                        self.all_kinds().join(", "),
                        if self.namespaces { ", Namespace" } else { "" }
                    ));
                }
            }
            match &l.by {
                LinkBy::Field(p) | LinkBy::Selector(p) if !valid_path(p) => {
                    return Err(format!("{which}: `{p}` is not a dotted field path such as `spec.targetRef`"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// One rule the host links objects of a world by; every edge points from the referring object
/// to the one it refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The name of the edges it makes.
    pub name: String,
    /// The kind of the referring object.
    pub from: String,
    /// The kind of the object referred to.
    pub to: String,
    /// How the reference is found.
    pub by: LinkBy,
}

/// How a link rule finds its references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkBy {
    /// `from` is owned by `to`: the owner the host records on what it makes
    /// (its `steward.dev/owner` annotation, in both modes).
    OwnerReference,
    /// A field of `from` (a dotted path from the object root) holds `{kind, name, namespace}`,
    /// a name, or a list of either.
    Field(String),
    /// A label selector at a dotted path of `to` selects `from` by its labels, in `to`'s namespace.
    Selector(String),
}

/// Whether `path` is a dotted path of field names (`spec.targetRef`).
fn valid_path(path: &str) -> bool {
    !path.is_empty() && path.split('.').all(|p| !p.is_empty() && !p.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(links: Vec<Link>) -> WorldSpec {
        WorldSpec { own: vec!["Policy".into()], kinds: vec!["Server".into()], links, namespaces: true }
    }

    fn link(name: &str, from: &str, to: &str, by: LinkBy) -> Link {
        Link { name: name.into(), from: from.into(), to: to.into(), by }
    }

    #[test]
    fn a_world_checks_its_links_ends_and_paths() {
        assert_eq!(
            spec(vec![link("targets", "Policy", "Server", LinkBy::Field("spec.targetRef".into()))]).check(),
            Ok(())
        );
        assert_eq!(spec(vec![link("in", "Server", "Namespace", LinkBy::OwnerReference)]).check(), Ok(()));
        let err = spec(vec![link("targets", "Policy", "Gateway", LinkBy::OwnerReference)]).check().unwrap_err();
        assert!(err.contains("`Gateway` is not in the world"), "{err}");
        let err = spec(vec![link("", "Policy", "Server", LinkBy::OwnerReference)]).check().unwrap_err();
        assert!(err.contains("needs a name"), "{err}");
        let err = spec(vec![link("t", "Policy", "Server", LinkBy::Selector("spec..sel".into()))]).check().unwrap_err();
        assert!(err.contains("dotted field path"), "{err}");
        let err = spec(vec![link("namespace", "Policy", "Server", LinkBy::OwnerReference)]).check().unwrap_err();
        assert!(err.contains("host's own"), "{err}");
    }

    #[test]
    fn all_kinds_lists_own_kinds_first_each_once() {
        let w =
            WorldSpec { own: vec!["A".into(), "B".into()], kinds: vec!["B".into(), "C".into()], ..Default::default() };
        assert_eq!(w.all_kinds(), ["A", "B", "C"]);
        assert!(w.holds("C") && !w.holds("Namespace"));
    }
}
