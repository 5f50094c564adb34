//! The kinds a call read, every read counted: what a call whose reads overflowed the sandbox's record depends on.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use steward_sdk::{ObjectRef, RawObject};

use crate::plugin::HostReads;

/// Most distinct kinds tracked per call; a call that reads more depends on every kind.
pub const MAX_KINDS: usize = 64;

/// Passes every read on to the cache and notes its kind, however many reads the call makes.
pub struct KindsSeen {
    inner: Arc<dyn HostReads>,
    /// `None` once more than [`MAX_KINDS`] kinds were read.
    kinds: Mutex<Option<BTreeSet<String>>>,
}

impl KindsSeen {
    /// Reads through `inner`.
    pub fn new(inner: Arc<dyn HostReads>) -> Self {
        Self { inner, kinds: Mutex::new(Some(BTreeSet::new())) }
    }

    /// Every kind read so far, or `None` when there were more than [`MAX_KINDS`].
    pub fn kinds(&self) -> Option<BTreeSet<String>> {
        self.kinds.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn note(&self, kind: &str) {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = kinds.as_mut()
            && !set.contains(kind)
        {
            if set.len() < MAX_KINDS {
                set.insert(kind.to_string());
            } else {
                *kinds = None;
            }
        }
    }
}

impl HostReads for KindsSeen {
    fn get(&self, r: &ObjectRef) -> Option<RawObject> {
        self.note(&r.kind);
        self.inner.get(r)
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<RawObject> {
        self.note(kind);
        self.inner.list(kind, namespace)
    }

    fn namespaced(&self, kind: &str) -> Option<bool> {
        self.inner.namespaced(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::NoReads;

    #[test]
    fn every_kind_read_is_noted_up_to_the_bound() {
        let seen = KindsSeen::new(Arc::new(NoReads));
        for i in 0..2_000 {
            seen.get(&ObjectRef::new("Noop", "default", format!("n{i}")));
        }
        seen.list("Other", None);
        assert_eq!(seen.kinds(), Some(["Noop".to_string(), "Other".to_string()].into()));
        for i in 0..MAX_KINDS {
            seen.list(&format!("K{i}"), None);
        }
        assert_eq!(seen.kinds(), None, "more kinds than tracked: every kind");
    }
}
