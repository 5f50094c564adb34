//! The work queue: per-key dedupe, an in-flight set, delayed requeue and per-key exponential backoff with jitter.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How far ahead a deadline is placed when `now + delay` does not fit in an [`Instant`] (30 years, as tokio does).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// How a [`WorkQueue`] spaces out the retries of a failing key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueOptions {
    /// Delay before the first retry; every further consecutive failure doubles it.
    pub initial_backoff: Duration,
    /// Upper bound of every retry delay, jitter included.
    pub max_backoff: Duration,
    /// Random spread of each retry delay, as a fraction: `0.1` means ±10 %.
    /// Clamped to `0.0..=1.0`; NaN counts as `0.0`.
    pub jitter: f64,
}

impl Default for QueueOptions {
    /// The host config's defaults: 1s initial, 5m maximum, ±10 % jitter.
    fn default() -> Self {
        Self { initial_backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(300), jitter: 0.1 }
    }
}

/// A queue of object keys for reconcile workers.
///
/// Guarantees:
/// - a key is at most once in the ready set, and at most once in the delayed set;
/// - a key handed out by [`get`](Self::get) is not handed out again until [`done`](Self::done)
///   is called for it, so one key never runs twice concurrently;
/// - an [`add`](Self::add) that arrives while the key is processing is remembered and makes the
///   key ready again at `done`, so no update is lost;
/// - memory per key is bounded: one ready entry, one delayed entry, one failure counter.
///
/// Meant to be shared as `Arc<WorkQueue<K>>` between the producers and many workers.
pub struct WorkQueue<K> {
    opts: QueueOptions,
    state: Mutex<State<K>>,
    notify: Notify,
}

/// How keys are grouped for fair sharing of the workers (see [`WorkQueue::with_fair_share`]).
type GroupOf<K> = Box<dyn Fn(&K) -> String + Send + Sync>;

/// Everything behind the lock.
///
/// Invariants: a key is in `ready` or in `deadlines`/`timers`, never both; `dirty` is a subset
/// of `processing`; a dirty key has no delayed entry; `ready`/`ready_index` and
/// `timers`/`deadlines` mirror each other.
struct State<K> {
    /// Ready keys by (time they became ready, insertion sequence): FIFO order.
    ready: BTreeMap<(Instant, u64), K>,
    /// Where each ready key sits in `ready`.
    ready_index: HashMap<K, (Instant, u64)>,
    next_seq: u64,
    /// Delayed keys by deadline, earliest first.
    timers: BTreeSet<(Instant, K)>,
    /// Each delayed key's deadline.
    deadlines: HashMap<K, Instant>,
    /// Keys handed out by `get` and not yet `done`.
    processing: HashSet<K>,
    /// Processing keys that were added again meanwhile.
    dirty: HashSet<K>,
    /// Consecutive failures per key.
    failures: HashMap<K, u32>,
    shutdown: bool,
    /// Fair share: the group of a key, and the most keys of one group processing at once while
    /// another group has a ready key.
    fair: Option<(GroupOf<K>, usize)>,
    /// Fair share: the ready slots of each group, earliest first.
    ready_by_group: HashMap<String, BTreeSet<(Instant, u64)>>,
    /// Fair share: how many keys of each group are processing.
    processing_by_group: HashMap<String, usize>,
}

impl<K: Clone + Eq + Hash + Ord> State<K> {
    fn new() -> Self {
        Self {
            ready: BTreeMap::new(),
            ready_index: HashMap::new(),
            next_seq: 0,
            timers: BTreeSet::new(),
            deadlines: HashMap::new(),
            processing: HashSet::new(),
            dirty: HashSet::new(),
            failures: HashMap::new(),
            shutdown: false,
            fair: None,
            ready_by_group: HashMap::new(),
            processing_by_group: HashMap::new(),
        }
    }

    fn group(&self, key: &K) -> Option<String> {
        self.fair.as_ref().map(|(group_of, _)| group_of(key))
    }

    /// The earliest ready key, except that with a fair share a group already holding its share
    /// of the workers is passed over while another group has a ready key.
    fn pop_ready(&mut self) -> Option<(K, Instant)> {
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
        self.ready_index.remove(&key);
        self.ungroup_ready(&key, slot);
        Some((key, slot.0))
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

    fn start_processing(&mut self, key: K) {
        if let Some(g) = self.group(&key) {
            *self.processing_by_group.entry(g).or_insert(0) += 1;
        }
        self.processing.insert(key);
    }

    fn stop_processing(&mut self, key: &K) -> bool {
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

    fn remove_ready(&mut self, key: &K) {
        if let Some(slot) = self.ready_index.remove(key) {
            self.ready.remove(&slot);
            self.ungroup_ready(key, slot);
        }
    }

    fn remove_delayed(&mut self, key: &K) {
        if let Some(deadline) = self.deadlines.remove(key) {
            self.timers.remove(&(deadline, key.clone()));
        }
    }

    /// Makes `key` ready as of `since`, dropping any delayed entry. A processing key is marked
    /// dirty instead. Returns whether the key entered the ready set.
    fn make_ready(&mut self, key: K, since: Instant) -> bool {
        self.remove_delayed(&key);
        if self.processing.contains(&key) {
            self.dirty.insert(key);
            false
        } else if self.ready_index.contains_key(&key) {
            false
        } else {
            let slot = (since, self.next_seq);
            self.next_seq += 1;
            if let Some(g) = self.group(&key) {
                self.ready_by_group.entry(g).or_default().insert(slot);
            }
            self.ready_index.insert(key.clone(), slot);
            self.ready.insert(slot, key);
            true
        }
    }

    /// Moves every delayed key whose deadline is not after `now` to the ready set; such a key
    /// counts as ready since its deadline. Returns whether any key entered the ready set.
    fn promote_due(&mut self, now: Instant) -> bool {
        let mut any = false;
        while self.timers.first().is_some_and(|(deadline, _)| *deadline <= now) {
            let Some((deadline, key)) = self.timers.pop_first() else {
                break;
            };
            self.deadlines.remove(&key);
            any |= self.make_ready(key, deadline);
        }
        any
    }

    /// Schedules `key` at `now + delay` unless it is ready, dirty, or due earlier already.
    /// Returns whether the queue's earliest deadline moved earlier.
    fn add_after(&mut self, key: K, now: Instant, delay: Duration) -> bool {
        if self.ready_index.contains_key(&key) || self.dirty.contains(&key) {
            return false;
        }
        let deadline = now.checked_add(delay).unwrap_or_else(|| now + FAR_FUTURE);
        match self.deadlines.get(&key) {
            Some(&existing) if existing <= deadline => return false,
            Some(_) => self.remove_delayed(&key),
            None => {}
        }
        let earlier = self.timers.first().is_none_or(|(first, _)| deadline < *first);
        self.deadlines.insert(key.clone(), deadline);
        self.timers.insert((deadline, key));
        earlier
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Ord + Send + Sync + 'static,
{
    /// Creates an empty, running queue that backs off failing keys as `opts` says.
    pub fn new(opts: QueueOptions) -> Self {
        Self { opts, state: Mutex::new(State::new()), notify: Notify::new() }
    }

    /// Shares the workers fairly between groups of keys (the engine groups by kind): while keys
    /// of another group are ready, no more than `max_per_group` keys of one group are processing
    /// at once. Work-conserving: with only one group ready, it may take every worker.
    pub fn with_fair_share(
        self,
        group_of: impl Fn(&K) -> String + Send + Sync + 'static,
        max_per_group: usize,
    ) -> Self {
        self.lock().fair = Some((Box::new(group_of), max_per_group.max(1)));
        self
    }

    /// The options the queue was created with.
    pub fn options(&self) -> &QueueOptions {
        &self.opts
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // Nothing panics while holding the lock, and every operation leaves the state
        // consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the state with every due delayed key already promoted to ready.
    fn lock_now(&self) -> (MutexGuard<'_, State<K>>, Instant) {
        let now = Instant::now();
        let mut state = self.lock();
        if state.promote_due(now) {
            self.notify.notify_one();
        }
        (state, now)
    }

    /// Makes `key` ready now. A key is at most once in the ready set, so adding a ready key does
    /// nothing; a key that is processing is marked dirty and becomes ready again at
    /// [`done`](Self::done), never running twice at once. Any delayed entry for the key is
    /// dropped: ready now wins.
    pub fn add(&self, key: K) {
        let (mut state, now) = self.lock_now();
        if state.make_ready(key, now) {
            self.notify.notify_one();
        }
    }

    /// Makes `key` ready once `delay` has passed. Does nothing if the key is ready already, or
    /// dirty while processing (it will run soon anyway). If the key already has a deadline, the
    /// earlier of the two wins. A zero `delay` is [`add`](Self::add).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let (mut state, now) = self.lock_now();
        if state.add_after(key, now, delay) {
            // A waiting worker may be sleeping towards a later deadline: let one recompute.
            self.notify.notify_one();
        }
    }

    /// Records one more consecutive failure of `key` and schedules it with
    /// [`add_after`](Self::add_after) after the backoff delay, which it returns: after the n-th
    /// failure the delay is `initial_backoff * 2^(n-1)`, capped at `max_backoff`, then spread by
    /// ±`jitter` and kept within `0..=max_backoff`. Because the earliest deadline wins, the key
    /// may become ready sooner than the returned delay; [`next_deadline`](Self::next_deadline)
    /// tells when.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let (mut state, now) = self.lock_now();
        let count = state.failures.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        let delay = self.backoff(*count);
        if delay.is_zero() {
            if state.make_ready(key, now) {
                self.notify.notify_one();
            }
        } else if state.add_after(key, now, delay) {
            self.notify.notify_one();
        }
        delay
    }

    /// The backoff delay after `failures` consecutive failures, jitter included; always within
    /// `0..=max_backoff`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let max = self.opts.max_backoff;
        let base = 2u32
            .checked_pow(failures.saturating_sub(1))
            .and_then(|factor| self.opts.initial_backoff.checked_mul(factor))
            .map_or(max, |delay| delay.min(max));
        let jitter = if self.opts.jitter.is_nan() { 0.0 } else { self.opts.jitter.clamp(0.0, 1.0) };
        if jitter == 0.0 || base.is_zero() {
            return base;
        }
        let factor = 1.0 + jitter * (2.0 * fastrand::f64() - 1.0);
        Duration::try_from_secs_f64(base.as_secs_f64() * factor).map_or(max, |delay| delay.min(max))
    }

    /// Resets the failure count of `key` to zero, so its next backoff starts at
    /// `initial_backoff` again. Call it after a successful reconcile.
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// The number of consecutive failures recorded for `key` since the last
    /// [`forget`](Self::forget) or [`remove`](Self::remove).
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Forgets `key` (its object was deleted): drops its ready or delayed entry and its failure
    /// count; if it is processing, a pending re-add is dropped too, so `done` will not requeue
    /// it. A later add starts afresh.
    pub fn remove(&self, key: &K) {
        let mut state = self.lock();
        state.remove_ready(key);
        state.remove_delayed(key);
        state.failures.remove(key);
        state.dirty.remove(key);
    }

    /// Forgets what is scheduled for `key` (its ready or delayed entry) and its failure count,
    /// but keeps a re-add made while it is processing: `done` requeues it. For a key whose object
    /// was just finalized: if it came back meanwhile, that change is not lost.
    pub fn unschedule(&self, key: &K) {
        let mut state = self.lock();
        state.remove_ready(key);
        state.remove_delayed(key);
        state.failures.remove(key);
    }

    /// Waits for a ready key, marks it processing and returns it with how long it was ready
    /// before being taken (the queue latency; a delayed key counts as ready from its deadline,
    /// a dirty key from its `done`). Keys come out in the order they became ready, and each to
    /// exactly one caller. Delayed keys become ready when their deadline passes. Returns `None`
    /// once [`shutdown`](Self::shutdown) was called, at once for callers already waiting; keys
    /// still queued stay where they are. Cancel-safe: dropping the future loses no key.
    pub async fn get(&self) -> Option<(K, Duration)> {
        loop {
            // Register for wake-ups before looking, so a change made after the look is seen.
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            let wake_at = {
                let (mut state, now) = self.lock_now();
                if state.shutdown {
                    return None;
                }
                if let Some((key, since)) = state.pop_ready() {
                    state.start_processing(key.clone());
                    if !state.ready.is_empty() {
                        // Pass the baton: another waiting worker can take the next key.
                        self.notify.notify_one();
                    }
                    return Some((key, now.saturating_duration_since(since)));
                }
                state.timers.first().map(|(deadline, _)| *deadline)
            };
            match wake_at {
                Some(deadline) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` as no longer processing. If it was added while processing (dirty), it is
    /// ready again now; otherwise it is not requeued (a delayed entry made meanwhile stays).
    /// Does nothing for a key that is not processing.
    pub fn done(&self, key: &K) {
        let (mut state, now) = self.lock_now();
        if !state.stop_processing(key) {
            return;
        }
        if state.dirty.remove(key) && state.make_ready(key.clone(), now) {
            self.notify.notify_one();
        }
    }

    /// Stops the queue: every current and future [`get`](Self::get) returns `None`. Adds are
    /// still recorded but never handed out. Cannot be undone.
    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.notify.notify_waiters();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutdown(&self) -> bool {
        self.lock().shutdown
    }

    /// The number of ready keys: not processing and not waiting for a deadline.
    pub fn len(&self) -> usize {
        self.lock_now().0.ready.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of keys waiting for a deadline that has not passed yet.
    pub fn delayed_len(&self) -> usize {
        self.lock_now().0.deadlines.len()
    }

    /// Whether nothing is ready, delayed or processing, observed atomically.
    pub fn is_idle(&self) -> bool {
        let (state, _) = self.lock_now();
        state.ready.is_empty() && state.deadlines.is_empty() && state.processing.is_empty()
    }

    /// The number of keys handed out by [`get`](Self::get) and not yet [`done`](Self::done).
    pub fn processing_len(&self) -> usize {
        self.lock().processing.len()
    }

    /// When `key` becomes ready, if it is waiting for a deadline that has not passed yet.
    pub fn next_deadline(&self, key: &K) -> Option<Instant> {
        self.lock_now().0.deadlines.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::time::{advance, timeout};

    const SEC: Duration = Duration::from_secs(1);

    fn opts(initial: u64, max: u64, jitter: f64) -> QueueOptions {
        QueueOptions { initial_backoff: Duration::from_secs(initial), max_backoff: Duration::from_secs(max), jitter }
    }

    fn queue() -> Arc<WorkQueue<&'static str>> {
        Arc::new(WorkQueue::new(opts(1, 60, 0.0)))
    }

    /// What `get` returns within an hour of paused time; `None` if it is still waiting then,
    /// so a missing key fails the test instead of hanging it.
    async fn got<K>(q: &WorkQueue<K>) -> Option<(K, Duration)>
    where
        K: Clone + Eq + Hash + Ord + Send + Sync + 'static,
    {
        timeout(3600 * SEC, q.get()).await.ok().flatten()
    }

    /// The next key `get` returns within an hour of paused time, if any.
    async fn next<K>(q: &WorkQueue<K>) -> Option<K>
    where
        K: Clone + Eq + Hash + Ord + Send + Sync + 'static,
    {
        got(q).await.map(|(k, _)| k)
    }

    /// The result of a spawned task; a task still blocked after an hour of paused time panics,
    /// so a missed wake-up fails the test instead of hanging it.
    async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
        timeout(3600 * SEC, task).await.expect("task still blocked after an hour").unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn dedupes_ready_keys() {
        let q = queue();
        q.add("a");
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 1);
        assert_eq!(next(&q).await, Some("a"));
        q.done(&"a");
        assert_eq!(next(&q).await, None, "three adds must yield one run");
    }

    #[tokio::test(start_paused = true)]
    async fn ready_keys_come_out_fifo() {
        let q = queue();
        for k in ["c", "a", "b"] {
            q.add(k);
        }
        q.add("c");
        assert_eq!(next(&q).await, Some("c"));
        assert_eq!(next(&q).await, Some("a"));
        assert_eq!(next(&q).await, Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn key_never_runs_twice_concurrently() {
        let q = queue();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 0);
        assert_eq!(q.processing_len(), 1);
        assert_eq!(next(&q).await, None, "a is still processing");
        q.done(&"a");
        assert_eq!(next(&q).await, Some("a"), "the add during the run is not lost");
        q.done(&"a");
        assert_eq!(next(&q).await, None, "re-queued exactly once");
    }

    #[tokio::test(start_paused = true)]
    async fn done_without_pending_add_does_not_requeue() {
        let q = queue();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.done(&"a");
        assert_eq!((q.len(), q.delayed_len(), q.processing_len()), (0, 0, 0));
        assert_eq!(next(&q).await, None);
        // done() for a key that is not processing changes nothing.
        q.done(&"b");
        assert_eq!((q.len(), q.processing_len()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn dirty_key_waits_for_done_while_others_run() {
        let q = queue();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.add("a");
        q.add("b");
        assert_eq!(next(&q).await, Some("b"), "other keys are not blocked");
        assert_eq!(next(&q).await, None);
        q.done(&"a");
        assert_eq!(next(&q).await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_requeue_during_run_survives_done() {
        let q = queue();
        let start = Instant::now();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.add_after("a", 5 * SEC);
        q.done(&"a");
        assert_eq!(q.delayed_len(), 1);
        assert_eq!(next(&q).await, Some("a"));
        assert_eq!(start.elapsed(), 5 * SEC);
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_passing_during_run_requeues_after_done() {
        let q = queue();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.add_after("a", SEC);
        advance(2 * SEC).await;
        assert_eq!((q.len(), q.delayed_len()), (0, 0));
        assert_eq!(next(&q).await, None, "still processing");
        q.done(&"a");
        assert_eq!(next(&q).await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_earliest_deadline_wins() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", 10 * SEC);
        q.add_after("a", SEC);
        assert_eq!(q.next_deadline(&"a"), Some(start + SEC));
        q.add_after("b", SEC);
        q.add_after("b", 10 * SEC);
        assert_eq!(q.next_deadline(&"b"), Some(start + SEC));
        assert_eq!(q.delayed_len(), 2);
        assert_eq!(q.len(), 0);

        let mut got = vec![next(&q).await.unwrap(), next(&q).await.unwrap()];
        got.sort();
        assert_eq!(got, ["a", "b"]);
        assert_eq!(start.elapsed(), SEC);
        q.done(&"a");
        q.done(&"b");
        assert_eq!(next(&q).await, None, "the later deadlines were dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn add_while_delayed_is_ready_now() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", 10 * SEC);
        q.add("a");
        assert_eq!((q.len(), q.delayed_len()), (1, 0));
        assert_eq!(q.next_deadline(&"a"), None);
        assert_eq!(next(&q).await, Some("a"));
        assert_eq!(start.elapsed(), Duration::ZERO);
        q.done(&"a");
        assert_eq!(next(&q).await, None, "the delayed entry must not fire later");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_is_noop_when_ready_or_dirty() {
        let q = queue();
        q.add("a");
        q.add_after("a", 5 * SEC);
        assert_eq!((q.len(), q.delayed_len()), (1, 0));
        assert_eq!(next(&q).await, Some("a"));
        q.add("a"); // dirty
        q.add_after("a", 5 * SEC);
        assert_eq!(q.delayed_len(), 0);
        q.done(&"a");
        assert_eq!(next(&q).await, Some("a"));
        q.done(&"a");
        assert_eq!(next(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_zero_is_add() {
        let q = queue();
        q.add_after("a", Duration::ZERO);
        assert_eq!((q.len(), q.delayed_len()), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_getter_wakes_at_new_earlier_deadline() {
        let q = queue();
        let start = Instant::now();
        let getter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await.map(|(k, _)| (k, start.elapsed())) }
        });
        tokio::task::yield_now().await;
        q.add_after("late", 10 * SEC);
        tokio::task::yield_now().await;
        q.add_after("early", 3 * SEC);
        assert_eq!(joined(getter).await, Some(("early", 3 * SEC)));
    }

    #[tokio::test(start_paused = true)]
    async fn keys_due_together_reach_all_waiting_getters() {
        let q = queue();
        let start = Instant::now();
        let getters: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await.map(|(k, _)| (k, start.elapsed())) })
            })
            .collect();
        tokio::task::yield_now().await;
        for k in ["a", "b", "c"] {
            q.add_after(k, 5 * SEC);
        }
        let mut got = Vec::new();
        for g in getters {
            got.push(joined(g).await.unwrap());
        }
        got.sort();
        assert_eq!(got, [("a", 5 * SEC), ("b", 5 * SEC), ("c", 5 * SEC)]);
    }

    #[tokio::test(start_paused = true)]
    async fn promoted_keys_keep_their_place_in_line() {
        let q = queue();
        q.add_after("delayed", SEC);
        advance(5 * SEC).await;
        q.add("fresh");
        assert_eq!(next(&q).await, Some("delayed"), "ready since 1s, before fresh");
        assert_eq!(next(&q).await, Some("fresh"));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_up_to_max() {
        let q = WorkQueue::new(opts(1, 20, 0.0));
        let delays: Vec<u64> = (0..8).map(|_| q.add_rate_limited("a").as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 20, 20, 20]);
        assert_eq!(q.failures(&"a"), 8);
        // Far beyond 2^32 failures the delay stays capped instead of overflowing.
        assert_eq!(q.backoff(u32::MAX), 20 * SEC);
        assert_eq!(q.backoff(40), 20 * SEC);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_key_becomes_ready_after_its_delay() {
        let q = queue();
        let start = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(q.next_deadline(&"a"), Some(start + SEC));
        assert_eq!(next(&q).await, Some("a"));
        assert_eq!(start.elapsed(), SEC);
        q.done(&"a");
        let t = Instant::now();
        assert_eq!(q.add_rate_limited("a"), 2 * SEC);
        assert_eq!(next(&q).await, Some("a"));
        assert_eq!(t.elapsed(), 2 * SEC);
    }

    #[tokio::test(start_paused = true)]
    async fn forget_resets_backoff() {
        let q = queue();
        for _ in 0..3 {
            q.add_rate_limited("a");
        }
        q.add_rate_limited("b");
        assert_eq!(q.failures(&"a"), 3);
        q.forget(&"a");
        assert_eq!(q.failures(&"a"), 0);
        assert_eq!(q.failures(&"b"), 1, "other keys keep their count");
        assert_eq!(q.add_rate_limited("a"), SEC);
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_bounds() {
        let q = WorkQueue::new(opts(1, 16, 0.1));
        let (mut below, mut above) = (0, 0);
        for key in 0..2000u32 {
            let failures = key % 7 + 1; // bases 1,2,4,8,16,16(capped),16
            let mut delay = Duration::ZERO;
            for _ in 0..failures {
                delay = q.add_rate_limited(key);
            }
            let base = SEC * (1u32 << (failures - 1)).min(16);
            let (lo, hi) = (base.mul_f64(0.9), base.mul_f64(1.1).min(16 * SEC));
            assert!((lo..=hi).contains(&delay), "{delay:?} outside {lo:?}..={hi:?}");
            below += usize::from(delay < base);
            above += usize::from(delay > base);
        }
        assert!(below > 100 && above > 100, "jitter must spread both ways: {below} below, {above} above");
    }

    #[tokio::test(start_paused = true)]
    async fn out_of_range_jitter_is_clamped() {
        for jitter in [5.0, -1.0, f64::NAN, f64::INFINITY] {
            let q = WorkQueue::<u32>::new(opts(4, 6, jitter));
            for _ in 0..200 {
                let d = q.backoff(1);
                assert!(d <= 6 * SEC, "jitter {jitter}: {d:?}");
                if jitter <= 0.0 || jitter.is_nan() {
                    assert_eq!(d, 4 * SEC, "jitter {jitter}");
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn remove_drops_entries_and_failures() {
        let q = queue();
        q.add_rate_limited("a");
        q.add_rate_limited("a");
        q.add("b");
        assert_eq!((q.len(), q.delayed_len()), (1, 1));
        q.remove(&"a");
        q.remove(&"b");
        assert_eq!((q.len(), q.delayed_len()), (0, 0));
        assert_eq!(q.failures(&"a"), 0);
        assert_eq!(q.next_deadline(&"a"), None);
        assert_eq!(next(&q).await, None, "neither the delayed nor the ready entry fires");
    }

    #[tokio::test(start_paused = true)]
    async fn unschedule_while_processing_keeps_the_requeue_but_drops_the_schedule() {
        let q = queue();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.add_after("a", Duration::from_secs(600));
        q.add("a");
        q.unschedule(&"a");
        assert_eq!(q.delayed_len(), 0, "the scheduled resync is gone");
        q.done(&"a");
        assert_eq!(next(&q).await, Some("a"), "the add made while processing still runs");
    }

    #[tokio::test(start_paused = true)]
    async fn remove_while_processing_drops_the_requeue() {
        let q = queue();
        q.add("a");
        assert_eq!(next(&q).await, Some("a"));
        q.add("a");
        q.remove(&"a");
        assert_eq!(q.processing_len(), 1, "the running reconcile still owns the key");
        q.done(&"a");
        assert_eq!(next(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_waiting_getters() {
        let q = queue();
        let getters: Vec<_> = (0..3)
            .map(|_| {
                tokio::spawn({
                    let q = q.clone();
                    async move { q.get().await }
                })
            })
            .collect();
        q.add_after("a", 100 * SEC);
        tokio::task::yield_now().await;
        let start = Instant::now();
        q.shutdown();
        assert!(q.is_shutdown());
        for g in getters {
            assert_eq!(joined(g).await, None);
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "woken at once, not at a deadline");
        q.add("b");
        assert_eq!(q.get().await, None, "no key after shutdown, even a ready one");
        assert_eq!(q.len(), 1, "queued keys are left in place");
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_getters_each_key_once() {
        const N: u32 = 200;
        let q = Arc::new(WorkQueue::new(opts(1, 60, 0.0)));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let workers: Vec<_> = (0..5)
            .map(|_| {
                let (q, tx) = (q.clone(), tx.clone());
                tokio::spawn(async move {
                    while let Some((k, _)) = q.get().await {
                        tx.send(k).unwrap();
                        tokio::task::yield_now().await;
                        q.done(&k);
                    }
                })
            })
            .collect();
        drop(tx);
        tokio::task::yield_now().await;
        for k in 0..N {
            if k % 3 == 0 {
                q.add_after(k, SEC * (k % 5));
            } else {
                q.add(k);
            }
            if k % 10 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let mut seen = Vec::new();
        while seen.len() < N as usize {
            let key = timeout(3600 * SEC, rx.recv()).await;
            seen.push(key.expect("a key was never delivered").unwrap());
        }
        q.shutdown();
        for w in workers {
            joined(w).await;
        }
        assert!(rx.recv().await.is_none(), "no key delivered twice");
        seen.sort_unstable();
        assert_eq!(seen, (0..N).collect::<Vec<_>>());
    }

    /// Real OS threads contending on the queue: one key never runs twice at once, and the
    /// last update of every key is always seen by a run that starts after it.
    #[test]
    fn threads_never_overlap_a_key_and_lose_no_update() {
        const KEYS: usize = 8;
        let q = Arc::new(WorkQueue::<usize>::new(opts(1, 60, 0.0)));
        let versions: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
        let seen: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
        let running = Arc::new(Mutex::new(HashSet::new()));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (q, versions, seen, running) = (q.clone(), versions.clone(), seen.clone(), running.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
                    rt.block_on(async {
                        while let Some((k, _)) = q.get().await {
                            assert!(running.lock().unwrap().insert(k), "key {k} runs twice at once");
                            seen[k].store(versions[k].load(Ordering::SeqCst), Ordering::SeqCst);
                            std::thread::yield_now();
                            assert!(running.lock().unwrap().remove(&k));
                            q.done(&k);
                        }
                    });
                })
            })
            .collect();
        for i in 0..20_000 {
            let k = i % KEYS;
            versions[k].fetch_add(1, Ordering::SeqCst);
            q.add(k);
        }
        // Spin (no sleep) until the workers have drained the queue; the wall-clock bound only
        // turns a lost wake-up into a failure instead of a hang.
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while !q.is_idle() {
            assert!(std::time::Instant::now() < give_up, "queue never drained");
            assert!(!workers.iter().any(|w| w.is_finished()), "a worker stopped early");
            std::thread::yield_now();
        }
        for k in 0..KEYS {
            let (seen, latest) = (seen[k].load(Ordering::SeqCst), versions[k].load(Ordering::SeqCst));
            assert_eq!(seen, latest, "key {k}: last run saw update {seen} of {latest}");
        }
        q.shutdown();
        while !workers.iter().all(|w| w.is_finished()) {
            assert!(std::time::Instant::now() < give_up, "workers not stopped by shutdown");
            std::thread::yield_now();
        }
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(q.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_time_spent_ready() {
        let q = queue();
        q.add("a");
        advance(3 * SEC).await;
        assert_eq!(got(&q).await, Some(("a", 3 * SEC)));

        // A delayed key is ready from its deadline on, not from the add_after call.
        q.add_after("b", 2 * SEC);
        advance(7 * SEC).await;
        assert_eq!(got(&q).await, Some(("b", 5 * SEC)));

        // A dirty key is ready from done(), not from the add during its run.
        q.add("a");
        advance(4 * SEC).await;
        q.done(&"a");
        advance(SEC).await;
        assert_eq!(got(&q).await, Some(("a", SEC)));

        // A getter that was already waiting sees no latency.
        let getter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.add("c");
        assert_eq!(joined(getter).await, Some(("c", Duration::ZERO)));
    }

    /// Two workers; 40 keys of one kind hold a worker 500 ms each (and are retried); 50 keys of
    /// another kind, 1 ms each, are added once those are under way. Returns how long the last of
    /// the 50 took, from when they were added.
    async fn starved_for(fair: bool) -> Duration {
        let mut q = WorkQueue::new(opts(1, 300, 0.1));
        if fair {
            q = q.with_fair_share(|k: &String| k.split('/').next().unwrap_or_default().to_string(), 1);
        }
        let q = Arc::new(q);
        for i in 0..40 {
            q.add(format!("Slow/{i}"));
        }
        let quick_done = Arc::new(AtomicU64::new(0));
        for _ in 0..2 {
            let (q, quick_done) = (q.clone(), quick_done.clone());
            tokio::spawn(async move {
                while let Some((k, _)) = q.get().await {
                    let slow = k.starts_with("Slow/");
                    tokio::time::sleep(Duration::from_millis(if slow { 500 } else { 1 })).await;
                    q.done(&k);
                    if slow {
                        q.add_rate_limited(k);
                    } else {
                        quick_done.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        let added = Instant::now();
        for i in 0..50 {
            q.add(format!("Quick/{i}"));
        }
        while quick_done.load(Ordering::SeqCst) < 50 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shutdown();
        added.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_group_does_not_hold_every_worker_with_a_fair_share() {
        assert!(starved_for(false).await > 8 * SEC, "FIFO: the quick keys wait behind every slow one");
        assert!(starved_for(true).await < SEC, "fair share: one worker stays free for the quick keys");
    }
}
