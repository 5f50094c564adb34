use super::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    timeout(3600 * SEC, q.get()).await.ok().flatten().map(|t| (t.key, t.waited))
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
    q.add("a", ());
    q.add("a", ());
    q.add("a", ());
    assert_eq!(q.len(), 1);
    assert_eq!(next(&q).await, Some("a"));
    q.done(&"a");
    assert_eq!(next(&q).await, None, "three adds must yield one run");
}

#[tokio::test(start_paused = true)]
async fn ready_keys_come_out_fifo() {
    let q = queue();
    for k in ["c", "a", "b"] {
        q.add(k, ());
    }
    q.add("c", ());
    assert_eq!(next(&q).await, Some("c"));
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!(next(&q).await, Some("b"));
}

#[tokio::test(start_paused = true)]
async fn key_never_runs_twice_concurrently() {
    let q = queue();
    q.add("a", ());
    assert_eq!(next(&q).await, Some("a"));
    q.add("a", ());
    q.add("a", ());
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
    q.add("a", ());
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
    q.add("a", ());
    assert_eq!(next(&q).await, Some("a"));
    q.add("a", ());
    q.add("b", ());
    assert_eq!(next(&q).await, Some("b"), "other keys are not blocked");
    assert_eq!(next(&q).await, None);
    q.done(&"a");
    assert_eq!(next(&q).await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn delayed_requeue_during_run_survives_done() {
    let q = queue();
    let start = Instant::now();
    q.add("a", ());
    assert_eq!(next(&q).await, Some("a"));
    q.add_after("a", (), 5 * SEC);
    q.done(&"a");
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!(start.elapsed(), 5 * SEC);
}

#[tokio::test(start_paused = true)]
async fn deadline_passing_during_run_requeues_after_done() {
    let q = queue();
    q.add("a", ());
    assert_eq!(next(&q).await, Some("a"));
    q.add_after("a", (), SEC);
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
    q.add_after("a", (), 10 * SEC);
    q.add_after("a", (), SEC);
    assert_eq!(q.next_deadline(&"a"), Some(start + SEC));
    q.add_after("b", (), SEC);
    q.add_after("b", (), 10 * SEC);
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
    q.add_after("a", (), 10 * SEC);
    q.add("a", ());
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
    q.add("a", ());
    q.add_after("a", (), 5 * SEC);
    assert_eq!((q.len(), q.delayed_len()), (1, 0));
    assert_eq!(next(&q).await, Some("a"));
    q.add("a", ()); // dirty
    q.add_after("a", (), 5 * SEC);
    assert_eq!(q.delayed_len(), 0);
    q.done(&"a");
    assert_eq!(next(&q).await, Some("a"));
    q.done(&"a");
    assert_eq!(next(&q).await, None);
}

#[tokio::test(start_paused = true)]
async fn add_after_zero_is_add() {
    let q = queue();
    q.add_after("a", (), Duration::ZERO);
    assert_eq!((q.len(), q.delayed_len()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn waiting_getter_wakes_at_new_earlier_deadline() {
    let q = queue();
    let start = Instant::now();
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await.map(|t| (t.key, start.elapsed())) }
    });
    tokio::task::yield_now().await;
    q.add_after("late", (), 10 * SEC);
    tokio::task::yield_now().await;
    q.add_after("early", (), 3 * SEC);
    assert_eq!(joined(getter).await, Some(("early", 3 * SEC)));
}

#[tokio::test(start_paused = true)]
async fn keys_due_together_reach_all_waiting_getters() {
    let q = queue();
    let start = Instant::now();
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await.map(|t| (t.key, start.elapsed())) })
        })
        .collect();
    tokio::task::yield_now().await;
    for k in ["a", "b", "c"] {
        q.add_after(k, (), 5 * SEC);
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
    q.add_after("delayed", (), SEC);
    advance(5 * SEC).await;
    q.add("fresh", ());
    assert_eq!(next(&q).await, Some("delayed"), "ready since 1s, before fresh");
    assert_eq!(next(&q).await, Some("fresh"));
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_up_to_max() {
    let q = WorkQueue::new(opts(1, 20, 0.0));
    let delays: Vec<u64> = (0..8).map(|_| q.add_rate_limited("a", ()).as_secs()).collect();
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
    q.add_rate_limited("a", ());
    assert_eq!(q.next_deadline(&"a"), Some(start + SEC));
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!(start.elapsed(), SEC);
    q.done(&"a");
    let t = Instant::now();
    assert_eq!(q.add_rate_limited("a", ()), 2 * SEC);
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!(t.elapsed(), 2 * SEC);
}

#[tokio::test(start_paused = true)]
async fn forget_resets_backoff() {
    let q = queue();
    for _ in 0..3 {
        q.add_rate_limited("a", ());
    }
    q.add_rate_limited("b", ());
    assert_eq!(q.failures(&"a"), 3);
    q.forget(&"a");
    assert_eq!(q.failures(&"a"), 0);
    assert_eq!(q.failures(&"b"), 1, "other keys keep their count");
    assert_eq!(q.add_rate_limited("a", ()), SEC);
}

#[tokio::test(start_paused = true)]
async fn jitter_stays_within_bounds() {
    let q = WorkQueue::new(opts(1, 16, 0.1));
    let (mut below, mut above) = (0, 0);
    for key in 0..2000u32 {
        let failures = key % 7 + 1; // bases 1,2,4,8,16,16(capped),16
        let mut delay = Duration::ZERO;
        for _ in 0..failures {
            delay = q.add_rate_limited(key, ());
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
    q.add_rate_limited("a", ());
    q.add_rate_limited("a", ());
    q.add("b", ());
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
    q.add("a", ());
    assert_eq!(next(&q).await, Some("a"));
    q.add_after("a", (), Duration::from_secs(600));
    q.add("a", ());
    q.unschedule(&"a");
    assert_eq!(q.delayed_len(), 0, "the scheduled resync is gone");
    q.done(&"a");
    assert_eq!(next(&q).await, Some("a"), "the add made while processing still runs");
}

#[tokio::test(start_paused = true)]
async fn remove_while_processing_drops_the_requeue() {
    let q = queue();
    q.add("a", ());
    assert_eq!(next(&q).await, Some("a"));
    q.add("a", ());
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
    q.add_after("a", (), 100 * SEC);
    tokio::task::yield_now().await;
    let start = Instant::now();
    q.shutdown();
    assert!(q.is_shutdown());
    for g in getters {
        assert_eq!(joined(g).await, None);
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "woken at once, not at a deadline");
    q.add("b", ());
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
                while let Some(Taken { key: k, .. }) = q.get().await {
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
            q.add_after(k, (), SEC * (k % 5));
        } else {
            q.add(k, ());
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
                    while let Some(Taken { key: k, .. }) = q.get().await {
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
        q.add(k, ());
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
    q.add("a", ());
    advance(3 * SEC).await;
    assert_eq!(got(&q).await, Some(("a", 3 * SEC)));

    // A delayed key is ready from its deadline on, not from the add_after call.
    q.add_after("b", (), 2 * SEC);
    advance(7 * SEC).await;
    assert_eq!(got(&q).await, Some(("b", 5 * SEC)));

    // A dirty key is ready from done(), not from the add during its run.
    q.add("a", ());
    advance(4 * SEC).await;
    q.done(&"a");
    advance(SEC).await;
    assert_eq!(got(&q).await, Some(("a", SEC)));

    // A getter that was already waiting sees no latency.
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await.map(|t| (t.key, t.waited)) }
    });
    tokio::task::yield_now().await;
    q.add("c", ());
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
        q.add(format!("Slow/{i}"), ());
    }
    let quick_done = Arc::new(AtomicU64::new(0));
    for _ in 0..2 {
        let (q, quick_done) = (q.clone(), quick_done.clone());
        tokio::spawn(async move {
            while let Some(Taken { key: k, .. }) = q.get().await {
                let slow = k.starts_with("Slow/");
                tokio::time::sleep(Duration::from_millis(if slow { 500 } else { 1 })).await;
                q.done(&k);
                if slow {
                    q.add_rate_limited(k, ());
                } else {
                    quick_done.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let added = Instant::now();
    for i in 0..50 {
        q.add(format!("Quick/{i}"), ());
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

/// A reason for the merge-rule tests: `Urgent` outranks `Routine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Routine,
    Urgent,
}

impl Urgency for Why {
    fn urgency(&self) -> u8 {
        *self as u8
    }
}

fn reasoned() -> Arc<WorkQueue<&'static str, Why>> {
    Arc::new(WorkQueue::new(opts(1, 60, 0.0)))
}

async fn taken(q: &WorkQueue<&'static str, Why>) -> Option<(&'static str, Why)> {
    timeout(3600 * SEC, q.get()).await.ok().flatten().map(|t| (t.key, t.reason))
}

#[tokio::test(start_paused = true)]
async fn a_key_runs_for_the_reason_it_was_queued_with() {
    let q = reasoned();
    q.add("a", Why::Urgent);
    q.add_after("b", Why::Routine, SEC);
    assert_eq!(taken(&q).await, Some(("a", Why::Urgent)));
    assert_eq!(taken(&q).await, Some(("b", Why::Routine)));
}

#[tokio::test(start_paused = true)]
async fn the_more_urgent_reason_wins_whatever_the_order_and_the_timing() {
    // (first add, second add) -> reason of the one run and when; `None` delay is an immediate add.
    type Add = (Option<u32>, Why);
    let cases: [(Add, Add, Why, u32); 8] = [
        ((None, Why::Routine), (None, Why::Urgent), Why::Urgent, 0),
        ((None, Why::Urgent), (None, Why::Routine), Why::Urgent, 0),
        ((Some(10), Why::Urgent), (None, Why::Routine), Why::Urgent, 0),
        ((Some(10), Why::Routine), (None, Why::Urgent), Why::Urgent, 0),
        ((None, Why::Urgent), (Some(10), Why::Routine), Why::Urgent, 0),
        ((None, Why::Routine), (Some(10), Why::Urgent), Why::Urgent, 0),
        ((Some(10), Why::Routine), (Some(2), Why::Urgent), Why::Urgent, 2),
        ((Some(2), Why::Urgent), (Some(10), Why::Routine), Why::Urgent, 2),
    ];
    for (i, ((d1, r1), (d2, r2), want, at)) in cases.into_iter().enumerate() {
        let q = reasoned();
        let start = Instant::now();
        for (d, r) in [(d1, r1), (d2, r2)] {
            match d {
                None => q.add("a", r),
                Some(s) => q.add_after("a", r, s * SEC),
            }
        }
        assert_eq!(taken(&q).await, Some(("a", want)), "case {i}");
        assert_eq!(start.elapsed(), at * SEC, "case {i}: the earlier time wins");
        q.done(&"a");
        assert_eq!(q.delayed_len() + q.len(), 0, "case {i}: one run only");
    }
}

#[tokio::test(start_paused = true)]
async fn a_reason_added_during_the_run_is_the_reason_of_the_run_after() {
    let q = reasoned();
    q.add("a", Why::Routine);
    assert_eq!(taken(&q).await, Some(("a", Why::Routine)));
    q.add_after("a", Why::Routine, 60 * SEC);
    q.add("a", Why::Urgent);
    q.add("a", Why::Routine);
    q.done(&"a");
    assert_eq!(taken(&q).await, Some(("a", Why::Urgent)), "the delayed entry merged into the re-add");
    q.done(&"a");
    assert_eq!(q.delayed_len() + q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_retry_keeps_a_more_urgent_pending_reason() {
    let q = reasoned();
    q.add_after("a", Why::Urgent, 30 * SEC);
    q.add_rate_limited("a", Why::Routine);
    assert_eq!(taken(&q).await, Some(("a", Why::Urgent)));
}

#[tokio::test(start_paused = true)]
async fn a_taken_key_says_how_many_stay_ready_as_len_would() {
    let q = queue();
    for k in ["a", "b", "c"] {
        q.add(k, ());
    }
    q.add_after("later", (), SEC);
    let first = timeout(SEC, q.get()).await.unwrap().unwrap();
    assert_eq!((first.key, first.ready_left), ("a", 2));
    assert_eq!(q.len(), 2);
    let second = timeout(SEC, q.get()).await.unwrap().unwrap();
    let third = timeout(SEC, q.get()).await.unwrap().unwrap();
    assert_eq!((second.ready_left, third.ready_left), (1, 0), "a delayed key is not ready yet");
    advance(SEC).await;
    let last = timeout(SEC, q.get()).await.unwrap().unwrap();
    assert_eq!((last.key, last.ready_left), ("later", 0));
}
