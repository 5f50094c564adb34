//! The queue's state behind its lock: the ready line, the delayed entries, the processing set, each pending entry with its reason.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::Urgency;
use crate::model::KeyHash;

/// How far ahead a deadline is placed when `now + delay` does not fit in an [`Instant`] (30 years, as tokio does).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// How keys are grouped for fair sharing of the workers (see [`super::WorkQueue::with_fair_share`]).
pub(super) type GroupOf<K> = Box<dyn Fn(&K) -> String + Send + Sync>;

/// The one merge rule of the queue: of two reasons for the same pending run, the more urgent
/// wins; on a tie, the one queued first stays.
pub fn merge<R: Urgency>(pending: R, new: R) -> R {
    if new.urgency() > pending.urgency() { new } else { pending }
}

/// Gives memory back once `map` holds under a quarter of what it has room for: every object
/// passes through the ready set at start-up, and a map never shrinks by itself. Amortised: a
/// shrink to twice the size left happens only after that many removals.
fn compact<K: Eq + Hash, V>(map: &mut HashMap<K, V, KeyHash>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

/// Everything behind the lock.
///
/// Invariants: a key has at most one pending entry, which is ready (`ready`/`ready_index`),
/// delayed (`timers`/`deadlines`) or dirty (`dirty`, a processing key added again); each pending
/// entry carries the reason it runs for; `dirty` is a subset of `processing`;
/// `ready`/`ready_index` and `timers`/`deadlines` mirror each other.
pub(super) struct State<K, R> {
    /// Ready keys by (time they became ready, insertion sequence): FIFO order.
    pub ready: BTreeMap<(Instant, u64), K>,
    /// Where each ready key sits in `ready`, and why it runs.
    pub ready_index: HashMap<K, ((Instant, u64), R), KeyHash>,
    next_seq: u64,
    /// Delayed keys by deadline, earliest first.
    pub timers: BTreeSet<(Instant, K)>,
    /// Each delayed key's deadline and reason.
    pub deadlines: HashMap<K, (Instant, R), KeyHash>,
    /// Keys handed out by `get` and not yet `done`.
    pub processing: HashSet<K, KeyHash>,
    /// Processing keys that were added again meanwhile, with the reason they run again for.
    pub dirty: HashMap<K, R, KeyHash>,
    /// Consecutive failures per key.
    pub failures: HashMap<K, u32, KeyHash>,
    pub shutdown: bool,
    /// Fair share: the group of a key, and the most keys of one group processing at once while
    /// another group has a ready key.
    pub fair: Option<(GroupOf<K>, usize)>,
    /// Fair share: the ready slots of each group, earliest first.
    ready_by_group: HashMap<String, BTreeSet<(Instant, u64)>>,
    /// Fair share: how many keys of each group are processing.
    processing_by_group: HashMap<String, usize>,
}

impl<K: Clone + Eq + Hash + Ord, R: Urgency> State<K, R> {
    pub fn new() -> Self {
        Self {
            ready: BTreeMap::new(),
            ready_index: HashMap::default(),
            next_seq: 0,
            timers: BTreeSet::new(),
            deadlines: HashMap::default(),
            processing: HashSet::default(),
            dirty: HashMap::default(),
            failures: HashMap::default(),
            shutdown: false,
            fair: None,
            ready_by_group: HashMap::new(),
            processing_by_group: HashMap::new(),
        }
    }

    fn group(&self, key: &K) -> Option<String> {
        self.fair.as_ref().map(|(group_of, _)| group_of(key))
    }

    /// The earliest ready key with its reason, except that with a fair share a group already
    /// holding its share of the workers is passed over while another group has a ready key.
    pub fn pop_ready(&mut self) -> Option<(K, R, Instant)> {
        let slot = match &self.fair {
            None => *self.ready.first_key_value()?.0,
            Some((_, cap)) => {
                let mut heads: Vec<(&(Instant, u64), &String)> =
                    self.ready_by_group.iter().filter_map(|(g, slots)| Some((slots.first()?, g))).collect();
                heads.sort();
                let under = heads.iter().find(|(_, g)| self.processing_by_group.get(*g).copied().unwrap_or(0) < *cap);
                *under.or(heads.first())?.0
            }
        };
        let key = self.ready.remove(&slot)?;
        let (_, reason) = self.ready_index.remove(&key)?;
        compact(&mut self.ready_index);
        self.ungroup_ready(&key, slot);
        Some((key, reason, slot.0))
    }

    fn ungroup_ready(&mut self, key: &K, slot: (Instant, u64)) {
        if let Some(g) = self.group(key)
            && let Some(slots) = self.ready_by_group.get_mut(&g)
        {
            slots.remove(&slot);
            if slots.is_empty() {
                self.ready_by_group.remove(&g);
            }
        }
    }

    pub fn start_processing(&mut self, key: K) {
        if let Some(g) = self.group(&key) {
            *self.processing_by_group.entry(g).or_insert(0) += 1;
        }
        self.processing.insert(key);
    }

    pub fn stop_processing(&mut self, key: &K) -> bool {
        if !self.processing.remove(key) {
            return false;
        }
        if let Some(g) = self.group(key)
            && let Some(n) = self.processing_by_group.get_mut(&g)
        {
            *n -= 1;
            if *n == 0 {
                self.processing_by_group.remove(&g);
            }
        }
        true
    }

    /// Drops the ready entry of `key`, returning its reason.
    pub fn remove_ready(&mut self, key: &K) -> Option<R> {
        let (slot, reason) = self.ready_index.remove(key)?;
        self.ready.remove(&slot);
        self.ungroup_ready(key, slot);
        Some(reason)
    }

    /// Drops the delayed entry of `key`, returning its reason.
    pub fn remove_delayed(&mut self, key: &K) -> Option<R> {
        let (deadline, reason) = self.deadlines.remove(key)?;
        self.timers.remove(&(deadline, key.clone()));
        Some(reason)
    }

    /// Makes `key` ready as of `since` for `reason`, taking over any delayed entry (whose reason
    /// merges in). A processing key is marked dirty instead; an entry already ready or dirty keeps
    /// its place and merges the reason. Returns whether the key entered the ready set.
    pub fn make_ready(&mut self, key: K, reason: R, since: Instant) -> bool {
        let reason = match self.remove_delayed(&key) {
            Some(delayed) => merge(delayed, reason),
            None => reason,
        };
        if self.processing.contains(&key) {
            let merged = match self.dirty.remove(&key) {
                Some(pending) => merge(pending, reason),
                None => reason,
            };
            self.dirty.insert(key, merged);
            false
        } else if let Some((_, pending)) = self.ready_index.get_mut(&key) {
            *pending = merge(pending.clone(), reason);
            false
        } else {
            let slot = (since, self.next_seq);
            self.next_seq += 1;
            if let Some(g) = self.group(&key) {
                self.ready_by_group.entry(g).or_default().insert(slot);
            }
            self.ready_index.insert(key.clone(), (slot, reason));
            self.ready.insert(slot, key);
            true
        }
    }

    /// Moves every delayed key whose deadline is not after `now` to the ready set; such a key
    /// counts as ready since its deadline. Returns whether any key entered the ready set.
    pub fn promote_due(&mut self, now: Instant) -> bool {
        let mut any = false;
        while self.timers.first().is_some_and(|(deadline, _)| *deadline <= now) {
            let Some((deadline, key)) = self.timers.pop_first() else {
                break;
            };
            let Some((_, reason)) = self.deadlines.remove(&key) else { continue };
            any |= self.make_ready(key, reason, deadline);
        }
        compact(&mut self.deadlines);
        any
    }

    /// Schedules `key` at `now + delay` for `reason`. A key ready or dirty already keeps its
    /// entry (it runs sooner anyway) and merges the reason; a key delayed already runs at the
    /// earlier of the two deadlines, for the merged reason. Returns whether the queue's earliest
    /// deadline moved earlier.
    pub fn add_after(&mut self, key: K, reason: R, now: Instant, delay: Duration) -> bool {
        if let Some((_, pending)) = self.ready_index.get_mut(&key) {
            *pending = merge(pending.clone(), reason);
            return false;
        }
        if let Some(pending) = self.dirty.get_mut(&key) {
            *pending = merge(pending.clone(), reason);
            return false;
        }
        let deadline = now.checked_add(delay).unwrap_or_else(|| now + FAR_FUTURE);
        let (deadline, reason) = match self.remove_delayed_entry(&key) {
            Some((existing, pending)) => (existing.min(deadline), merge(pending, reason)),
            None => (deadline, reason),
        };
        let earlier = self.timers.first().is_none_or(|(first, _)| deadline < *first);
        self.deadlines.insert(key.clone(), (deadline, reason));
        self.timers.insert((deadline, key));
        earlier
    }

    fn remove_delayed_entry(&mut self, key: &K) -> Option<(Instant, R)> {
        let (deadline, reason) = self.deadlines.remove(key)?;
        self.timers.remove(&(deadline, key.clone()));
        Some((deadline, reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_set_and_the_schedule_give_memory_back_once_drained() {
        let mut s: State<u32, ()> = State::new();
        let now = Instant::now();
        for k in 0..10_000 {
            s.make_ready(k, (), now);
        }
        let full = s.ready_index.capacity();
        while s.pop_ready().is_some() {}
        assert!(s.ready_index.capacity() < full / 8, "{} of {full}", s.ready_index.capacity());
        for k in 0..10_000 {
            s.add_after(k, (), now, Duration::from_secs(1));
        }
        let full = s.deadlines.capacity();
        s.promote_due(now + Duration::from_secs(2));
        assert!(s.deadlines.capacity() < full / 8, "{} of {full}", s.deadlines.capacity());
        // Every key came through, in order.
        let popped: Vec<u32> = std::iter::from_fn(|| s.pop_ready().map(|(k, _, _)| k)).collect();
        assert_eq!(popped, (0..10_000).collect::<Vec<_>>());
    }
}
