//! What changed between two snapshots of a world: the host computes a round's changes from what it saw, not from the events it was sent, so a missed event is still a change.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use steward_sdk::RawObject;

use crate::model::ObjectKey;

/// How an object changed since the last round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeType {
    /// New to the world.
    Added,
    /// Its spec, labels, annotations or apiVersion changed.
    Modified,
    /// It left the world.
    Deleted,
}

/// One object that changed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    /// Which.
    pub object: ObjectKey,
    /// How.
    pub kind: ChangeType,
}

/// What a round saw of each object: a hash of what a world's logic depends on, by key.
pub type Fingerprints = BTreeMap<ObjectKey, u64>;

/// The fingerprint of an object: its spec, labels, annotations and apiVersion (not its status,
/// which the round itself writes for the plugin's own objects).
pub fn fingerprint(o: &RawObject) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    o.api_version.hash(&mut h);
    o.spec.hash(&mut h);
    o.labels.hash(&mut h);
    o.annotations.hash(&mut h);
    h.finish()
}

/// The fingerprints of `objects`.
pub fn fingerprints<'a>(objects: impl IntoIterator<Item = &'a RawObject>) -> Fingerprints {
    objects.into_iter().map(|o| (ObjectKey::new(&o.kind, &o.namespace, &o.name), fingerprint(o))).collect()
}

/// The changes from `before` to `now`, sorted by object.
pub fn between(before: &Fingerprints, now: &Fingerprints) -> Vec<Change> {
    let mut out = Vec::new();
    for (k, f) in now {
        match before.get(k) {
            None => out.push(Change { object: k.clone(), kind: ChangeType::Added }),
            Some(b) if b != f => out.push(Change { object: k.clone(), kind: ChangeType::Modified }),
            Some(_) => {}
        }
    }
    out.extend(
        before
            .keys()
            .filter(|k| !now.contains_key(*k))
            .map(|k| Change { object: k.clone(), kind: ChangeType::Deleted }),
    );
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, spec: &str) -> RawObject {
        RawObject {
            kind: "S".into(),
            namespace: "a".into(),
            name: name.into(),
            spec: spec.into(),
            ..RawObject::default()
        }
    }

    #[test]
    fn changes_are_what_differs_between_two_snapshots() {
        let before = fingerprints(&[obj("kept", "{}"), obj("edited", "{}"), obj("gone", "{}")]);
        let mut relabelled = obj("relabelled", "{}");
        let first = fingerprints(&[relabelled.clone()]);
        relabelled.labels.insert("x".into(), "y".into());
        let now = fingerprints(&[obj("kept", "{}"), obj("edited", "{\"a\":1}"), obj("new", "{}")]);
        let kinds: Vec<(String, ChangeType)> =
            between(&before, &now).into_iter().map(|c| (c.object.name().to_string(), c.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("edited".into(), ChangeType::Modified),
                ("gone".into(), ChangeType::Deleted),
                ("new".into(), ChangeType::Added)
            ]
        );
        assert_eq!(between(&first, &fingerprints(&[relabelled]))[0].kind, ChangeType::Modified);
        assert!(between(&now, &now).is_empty());
        // A status write alone is no change.
        let mut with_status = obj("kept", "{}");
        with_status.status = Some("{\"ok\":true}".into());
        assert_eq!(fingerprint(&with_status), fingerprint(&obj("kept", "{}")));
    }
}
