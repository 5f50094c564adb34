//! The dependency index: which reconciles read which objects, so a change re-queues its readers.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::model::{KeyMap, KeySet, ObjectKey};
use crate::plugin::Read;

/// Readers by what they read. Each reader's reads are replaced by its latest reconcile's.
///
/// A change is never missed for a reader whose reads were all recorded; a call that made more
/// distinct reads than the sandbox records is widened (see [`record_overflowed`](Self::record_overflowed)).
#[derive(Default)]
pub struct Deps {
    by_reader: KeyMap<Vec<Read>>,
    gets: KeyMap<KeySet>,
    lists: HashMap<String, HashSet<(ObjectKey, Option<String>)>>,
    /// Readers of every object of every kind.
    everything: KeySet,
}

impl Deps {
    /// Replaces what `reader` depends on with what a call whose reads overflowed the sandbox's
    /// record read. Which objects it read past the cap is unknown, so it depends on every object
    /// (in every namespace) of each kind in `kinds` — every kind the call read, before the cap or
    /// after — or, with `None` (it read more kinds than are tracked), on every object there is.
    pub fn record_overflowed(&mut self, reader: &ObjectKey, kinds: Option<BTreeSet<String>>) {
        match kinds {
            Some(kinds) => {
                let reads = kinds.into_iter().map(|kind| Read::List { kind, namespace: None }).collect();
                self.record(reader, reads);
            }
            None => {
                self.forget(reader);
                self.everything.insert(reader.clone());
            }
        }
    }

    /// Replaces what `reader` depends on with `reads`.
    pub fn record(&mut self, reader: &ObjectKey, reads: Vec<Read>) {
        if !self.everything.contains(reader) && self.by_reader.get(reader).is_some_and(|old| *old == reads) {
            return;
        }
        self.forget(reader);
        if reads.is_empty() {
            return;
        }
        for r in &reads {
            match r {
                Read::Get(o) => {
                    let key = ObjectKey::new(&o.kind, &o.namespace, &o.name);
                    self.gets.entry(key).or_default().insert(reader.clone());
                }
                Read::List { kind, namespace } => {
                    self.lists.entry(kind.clone()).or_default().insert((reader.clone(), namespace.clone()));
                }
            }
        }
        self.by_reader.insert(reader.clone(), reads);
    }

    /// Forgets everything `reader` depended on (it was deleted).
    pub fn forget(&mut self, reader: &ObjectKey) {
        self.everything.remove(reader);
        let Some(old) = self.by_reader.remove(reader) else { return };
        for r in old {
            match r {
                Read::Get(o) => {
                    let key = ObjectKey::new(&o.kind, &o.namespace, &o.name);
                    if let Some(set) = self.gets.get_mut(&key) {
                        set.remove(reader);
                        if set.is_empty() {
                            self.gets.remove(&key);
                        }
                    }
                }
                Read::List { kind, namespace } => {
                    if let Some(set) = self.lists.get_mut(&kind) {
                        set.remove(&(reader.clone(), namespace));
                        if set.is_empty() {
                            self.lists.remove(&kind);
                        }
                    }
                }
            }
        }
    }

    /// The readers (other than `changed` itself) whose reads cover `changed`, sorted.
    pub fn readers_of(&self, changed: &ObjectKey) -> Vec<ObjectKey> {
        let mut out: KeySet = self.everything.clone();
        if let Some(set) = self.gets.get(changed) {
            out.extend(set.iter().cloned());
        }
        if let Some(set) = self.lists.get(changed.kind().as_str()) {
            for (reader, ns) in set {
                if ns.as_deref().is_none_or(|n| n == changed.namespace()) {
                    out.insert(reader.clone());
                }
            }
        }
        out.remove(changed);
        let mut v: Vec<_> = out.into_iter().collect();
        v.sort();
        v
    }

    /// How many readers have recorded reads.
    pub fn len(&self) -> usize {
        self.by_reader.len() + self.everything.len()
    }

    /// True when no reader has recorded reads.
    pub fn is_empty(&self) -> bool {
        self.by_reader.is_empty() && self.everything.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_sdk::ObjectRef;

    fn k(kind: &str, ns: &str, name: &str) -> ObjectKey {
        ObjectKey::new(kind, ns, name)
    }

    #[test]
    fn list_and_get_readers_are_found_and_replaced() {
        let mut d = Deps::default();
        let wf = k("Workflow", "default", "wf");
        d.record(&wf, vec![Read::List { kind: "MCPServer".into(), namespace: Some("default".into()) }]);
        let g = k("Group", "default", "g");
        d.record(&g, vec![Read::Get(ObjectRef::new("MCPServer", "default", "git"))]);
        assert_eq!(d.readers_of(&k("MCPServer", "default", "git")), vec![g.clone(), wf.clone()]);
        assert_eq!(d.readers_of(&k("MCPServer", "default", "other")), vec![wf.clone()]);
        assert!(d.readers_of(&k("MCPServer", "prod", "git")).is_empty());
        d.record(&wf, vec![]);
        assert_eq!(d.readers_of(&k("MCPServer", "default", "other")), Vec::<ObjectKey>::new());
        d.forget(&g);
        assert!(d.is_empty());
        assert!(d.gets.is_empty() && d.lists.is_empty());
    }

    #[test]
    fn a_reader_is_not_its_own_dependent() {
        let mut d = Deps::default();
        let a = k("Counter", "default", "a");
        d.record(&a, vec![Read::List { kind: "Counter".into(), namespace: None }]);
        assert!(d.readers_of(&a).is_empty());
        assert_eq!(d.readers_of(&k("Counter", "x", "b")), vec![a]);
    }

    #[test]
    fn a_reader_whose_reads_overflowed_depends_on_every_object_of_each_kind_it_read() {
        let mut d = Deps::default();
        let reader = k("Report", "default", "r");
        // The first 1,024 gets were recorded; #1,050 was read past the cap, and so was a kind
        // that none of the recorded reads names.
        let kinds: BTreeSet<String> = ["Noop".to_string(), "Other".to_string()].into();
        d.record_overflowed(&reader, Some(kinds));
        assert_eq!(d.readers_of(&k("Noop", "default", "n1050")), vec![reader.clone()]);
        assert_eq!(d.readers_of(&k("Noop", "prod", "n7")), vec![reader.clone()], "every namespace");
        assert_eq!(d.readers_of(&k("Other", "x", "y")), vec![reader.clone()]);
        assert!(d.readers_of(&k("Third", "default", "z")).is_empty(), "only the kinds it read");
        // Its next call reads less: exact reads again.
        d.record(&reader, vec![Read::Get(ObjectRef::new("Noop", "default", "n1"))]);
        assert!(d.readers_of(&k("Noop", "default", "n1050")).is_empty());
        assert_eq!(d.readers_of(&k("Noop", "default", "n1")), vec![reader]);
    }

    #[test]
    fn a_reader_of_too_many_kinds_depends_on_everything_until_it_reads_less() {
        let mut d = Deps::default();
        let reader = k("Report", "default", "r");
        d.record_overflowed(&reader, None);
        assert_eq!(d.readers_of(&k("Anything", "ns", "x")), vec![reader.clone()]);
        assert!(d.readers_of(&reader).is_empty(), "not its own dependent");
        assert_eq!(d.len(), 1);
        d.record(&reader, vec![]);
        assert!(d.readers_of(&k("Anything", "ns", "x")).is_empty());
        assert!(d.is_empty());
    }
}
