//! The work queue: per-key dedupe with the reason each key runs for, an in-flight set, delayed requeue, per-key backoff with jitter and fair share.

mod state;
#[cfg(test)]
mod tests;

use std::hash::Hash;
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use state::State;
pub use state::merge;

/// Why a key is queued, as far as the queue cares: how urgent it is.
///
/// The merge rule (the only one): a key has at most one pending run. When it is queued again
/// before that run starts, it still runs once, at the earlier of the two times (a ready entry
/// beats any delay) and for the more urgent of the two reasons; on equal urgency the reason
/// queued first stays. A reason is never dropped for a less urgent one, whichever way the
/// timing goes.
pub trait Urgency: Clone + Send + Sync + 'static {
    /// Higher runs for: of two reasons merged, the one with the higher urgency wins.
    fn urgency(&self) -> u8;
}

impl Urgency for () {
    fn urgency(&self) -> u8 {
        0
    }
}

/// A key handed out by [`WorkQueue::get`]: the key, why it runs, and how long it was ready before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken<K, R> {
    /// The key, now processing until [`WorkQueue::done`].
    pub key: K,
    /// The merged reason of every add since its last run.
    pub reason: R,
    /// How long it was ready before it was taken (the queue latency).
    pub waited: Duration,
    /// How many keys were still ready once it was taken ([`WorkQueue::len`] at that moment), so
    /// that a worker reporting the queue's depth need not lock the queue again.
    pub ready_left: usize,
}

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
pub struct WorkQueue<K, R = ()> {
    opts: QueueOptions,
    state: Mutex<State<K, R>>,
    notify: Notify,
}

impl<K, R> WorkQueue<K, R>
where
    K: Clone + Eq + Hash + Ord + Send + Sync + 'static,
    R: Urgency,
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

    fn lock(&self) -> MutexGuard<'_, State<K, R>> {
        // Nothing panics while holding the lock, and every operation leaves the state
        // consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the state with every due delayed key already promoted to ready.
    fn lock_now(&self) -> (MutexGuard<'_, State<K, R>>, Instant) {
        let now = Instant::now();
        let mut state = self.lock();
        if state.promote_due(now) {
            self.notify.notify_one();
        }
        (state, now)
    }

    /// Makes `key` ready now, for `reason`. A key is at most once in the ready set, so adding a
    /// ready key only merges the reason (see [`Urgency`]); a key that is processing is marked
    /// dirty and becomes ready again at [`done`](Self::done), never running twice at once. Any
    /// delayed entry for the key is taken over: ready now wins, its reason merges in.
    pub fn add(&self, key: K, reason: R) {
        let (mut state, now) = self.lock_now();
        if state.make_ready(key, reason, now) {
            self.notify.notify_one();
        }
    }

    /// Makes `key` ready once `delay` has passed, for `reason`. If the key is ready already, or
    /// dirty while processing, it keeps that entry (it will run soon anyway) and only the reason
    /// merges. If the key already has a deadline, the earlier of the two wins, and the reasons
    /// merge (see [`Urgency`]). A zero `delay` is [`add`](Self::add).
    pub fn add_after(&self, key: K, reason: R, delay: Duration) {
        if delay.is_zero() {
            return self.add(key, reason);
        }
        let (mut state, now) = self.lock_now();
        if state.add_after(key, reason, now, delay) {
            // A waiting worker may be sleeping towards a later deadline: let one recompute.
            self.notify.notify_one();
        }
    }

    /// Records one more consecutive failure of `key` and schedules it for `reason` with
    /// [`add_after`](Self::add_after) after the backoff delay, which it returns: after the n-th
    /// failure the delay is `initial_backoff * 2^(n-1)`, capped at `max_backoff`, then spread by
    /// ±`jitter` and kept within `0..=max_backoff`. Because the earliest deadline wins, the key
    /// may become ready sooner than the returned delay; [`next_deadline`](Self::next_deadline)
    /// tells when.
    pub fn add_rate_limited(&self, key: K, reason: R) -> Duration {
        let (mut state, now) = self.lock_now();
        let count = state.failures.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        let delay = self.backoff(*count);
        if delay.is_zero() {
            if state.make_ready(key, reason, now) {
                self.notify.notify_one();
            }
        } else if state.add_after(key, reason, now, delay) {
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

    /// Forgets what is scheduled for `key` (its ready or delayed entry, with its reason) and its failure count,
    /// but keeps a re-add made while it is processing: `done` requeues it. For a key whose object
    /// was just finalized: if it came back meanwhile, that change is not lost.
    pub fn unschedule(&self, key: &K) {
        let mut state = self.lock();
        state.remove_ready(key);
        state.remove_delayed(key);
        state.failures.remove(key);
    }

    /// Waits for a ready key, marks it processing and returns it with its reason and how long it
    /// was ready before being taken (the queue latency; a delayed key counts as ready from its deadline,
    /// a dirty key from its `done`). Keys come out in the order they became ready, and each to
    /// exactly one caller. Delayed keys become ready when their deadline passes. Returns `None`
    /// once [`shutdown`](Self::shutdown) was called, at once for callers already waiting; keys
    /// still queued stay where they are. Cancel-safe: dropping the future loses no key.
    pub async fn get(&self) -> Option<Taken<K, R>> {
        loop {
            // Register for wake-ups before looking, so a change made after the look is seen.
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            let wake_at = {
                let (mut state, now) = self.lock_now();
                if state.shutdown {
                    return None;
                }
                if let Some((key, reason, since)) = state.pop_ready() {
                    state.start_processing(key.clone());
                    if !state.ready.is_empty() {
                        // Pass the baton: another waiting worker can take the next key.
                        self.notify.notify_one();
                    }
                    let (waited, ready_left) = (now.saturating_duration_since(since), state.ready.len());
                    return Some(Taken { key, reason, waited, ready_left });
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
        if let Some(reason) = state.dirty.remove(key)
            && state.make_ready(key.clone(), reason, now)
        {
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
        self.lock_now().0.deadlines.get(key).map(|(deadline, _)| *deadline)
    }
}
