//! The watcher's tests: the debounce, the loop's rescans (with events fed in), and the filesystem source watched for real.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::EventKind;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::super::test_support::*;
use super::super::{FsSource, SourceEvent, Target};
use super::*;

/// What the debounce hands over: `paths`, of which `busy` are still being written.
fn due(paths: &[&str], busy: &[&str]) -> Due {
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    Due { paths: owned(paths), busy: owned(busy) }
}

#[test]
fn debounce_waits_for_quiet_but_not_longer_than_the_maximum() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut d = Debouncer::new(ms(200), ms(1000));
    d.note("a.yaml".into(), t0, false);
    assert_eq!(d.next_deadline(), Some(t0 + ms(200)));
    assert_eq!(d.take_due(t0 + ms(199)), Due::default());
    // Events every 50 ms keep pushing the quiet deadline, up to the maximum.
    let mut t = t0;
    while t < t0 + ms(1500) {
        d.note("a.yaml".into(), t, false);
        t += ms(50);
        if t == t0 + ms(600) {
            d.note("b.yaml".into(), t, false);
        }
    }
    assert_eq!(d.next_deadline(), Some(t0 + ms(800)), "b.yaml's quiet deadline");
    assert_eq!(d.take_due(t0 + ms(999)), due(&["b.yaml"], &[]), "quiet");
    assert_eq!(d.take_due(t0 + ms(1000)), due(&["a.yaml"], &["a.yaml"]), "a.yaml at its maximum, still busy");
    assert_eq!(d.next_deadline(), None);
    // A rename's other side goes along with whatever is due.
    d.note("old.yaml".into(), t0, false);
    d.note("old.yaml".into(), t0 + ms(150), true);
    d.note("new.yaml".into(), t0 + ms(150), true);
    d.note("slow.yaml".into(), t0 + ms(150), false);
    assert_eq!(d.take_due(t0 + ms(350)), due(&["new.yaml", "old.yaml", "slow.yaml"], &[]));
    d.note("x.yaml".into(), t0, false);
    d.note("y.yaml".into(), t0 + ms(100), true);
    assert_eq!(d.take_due(t0 + ms(200)), due(&["x.yaml", "y.yaml"], &[]));
    // Handed over together, a quiet path is not busy and one at its maximum is.
    d.note("p.yaml".into(), t0, false);
    d.note("q.yaml".into(), t0, false);
    d.note("q.yaml".into(), t0 + ms(900), false);
    assert_eq!(d.take_due(t0 + ms(1000)), due(&["p.yaml", "q.yaml"], &["q.yaml"]));
    // What a full rescan reads as busy: the pending paths with an event within the quiet time.
    d.note("r.yaml".into(), t0, false);
    d.note("s.yaml".into(), t0 + ms(150), false);
    d.note("gone.yaml".into(), t0 + ms(150), true);
    d.note(String::new(), t0 + ms(150), false);
    assert_eq!(d.busy(t0 + ms(250)), vec!["s.yaml".to_string()]);
    assert_eq!(d.take_due(t0 + ms(1150)), due(&["", "gone.yaml", "r.yaml", "s.yaml"], &[]));
    // A maximum below the quiet time is the quiet time: a path is never busy at every hand-over.
    let mut d = Debouncer::new(ms(200), ms(50));
    d.note("a.yaml".into(), t0, false);
    assert_eq!(d.next_deadline(), Some(t0 + ms(200)));
    // Absurd settings do not overflow.
    let mut d = Debouncer::new(Duration::MAX, Duration::MAX);
    d.note("a.yaml".into(), t0, false);
    assert!(d.next_deadline().unwrap() > t0 + Duration::from_secs(86_400 * 365));
    assert_eq!(d.take_due(t0 + ms(1000)), Due::default());
}

/// Where a test feeds the watch loop its events.
type Feed = mpsc::UnboundedSender<notify::Result<notify::Event>>;

/// Runs the loop for `src` with events fed in by the test; returns the feed and what the source reports.
async fn fed(src: &Arc<FsSource>, scan_interval: Duration) -> (Feed, mpsc::UnboundedReceiver<SourceEvent>) {
    let (feed, raw) = mpsc::unbounded_channel();
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, mut ready) = watch::channel(false);
    let opts = WatchOptions {
        debounce: Duration::from_millis(100),
        debounce_max: Duration::from_secs(1),
        scan_interval,
        recursive: true,
    };
    tokio::spawn(run(Target { src: src.clone(), tx }, raw, opts, ready_tx, "res".into()));
    tokio::time::timeout(DEADLINE, ready.wait_for(|r| *r)).await.expect("ready").unwrap();
    (feed, rx)
}

#[tokio::test(start_paused = true)]
async fn lost_events_a_watcher_error_and_the_periodic_scan_each_read_everything_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, b, c) = (key("K", "default", "a"), key("K", "default", "b"), key("K", "default", "c"));
    write(dir, "a.yaml", &doc("K", "a", "v: 1"));
    let src = FsSource::new(opts(dir), HashMap::new());
    let (feed, mut rx) = fed(&src, Duration::ZERO).await;
    events_until(&mut rx, "the first scan", |seen| seen.contains(&changed(&a))).await;

    // Changes no event told of; then word that the kernel dropped events.
    write(dir, "sub/b.yaml", &doc("K", "b", "v: 1"));
    feed.send(Ok(notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan))).unwrap();
    events_until(&mut rx, "the rescan", |seen| seen.contains(&changed(&b))).await;

    // A watcher error does the same.
    std::fs::remove_file(dir.join("a.yaml")).unwrap();
    feed.send(Err(notify::Error::generic("queue overflow"))).unwrap();
    events_until(&mut rx, "the rescan after an error", |seen| seen.contains(&deleted(&a))).await;

    // And so does the periodic scan, with no event at all.
    let src2 = FsSource::new(opts(dir), HashMap::new());
    let (_feed2, mut rx2) = fed(&src2, DEADLINE / 3).await;
    events_until(&mut rx2, "the first scan", |seen| seen.contains(&changed(&b))).await;
    write(dir, "c.yaml", &doc("K", "c", "v: 1"));
    events_until(&mut rx2, "the periodic scan", |seen| seen.contains(&changed(&c))).await;
}

/// `ab.yaml` defining a and b, watched with events fed in, then caught after its first document
/// while a writer (the task returned) goes on for `writes` × 50 ms; at write `rescan_at`, the
/// kernel also drops events. Returns what the test holds on to, and the writer, which ends with
/// the feed (dropped, it would end the watch).
async fn ab_caught_half_written(
    writes: usize,
    rescan_at: Option<usize>,
) -> (tempfile::TempDir, Arc<FsSource>, mpsc::UnboundedReceiver<SourceEvent>, tokio::task::JoinHandle<Feed>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    write(&dir, "ab.yaml", &format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "b", "v: 1")));
    let src = FsSource::new(opts(&dir), HashMap::new());
    let (feed, mut rx) = fed(&src, Duration::ZERO).await;
    let b = key("K", "default", "b");
    events_until(&mut rx, "the first scan", |seen| seen.contains(&changed(&b))).await;
    // Caught after the marker that closes its first document.
    write(&dir, "ab.yaml", &format!("{}---\n", doc("K", "a", "v: 2")));
    let path = dir.join("ab.yaml");
    let writer = tokio::spawn(async move {
        for n in 0..writes {
            let ev = notify::Event::new(EventKind::Modify(notify::event::ModifyKind::Data(
                notify::event::DataChange::Content,
            )));
            feed.send(Ok(ev.add_path(path.clone()))).unwrap();
            if rescan_at == Some(n) {
                feed.send(Ok(notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan))).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        feed
    });
    (tmp, src, rx, writer)
}

#[tokio::test(start_paused = true)]
async fn a_file_handed_over_while_busy_loses_nothing_and_is_read_again_once_quiet() {
    let (a, b) = (key("K", "default", "a"), key("K", "default", "b"));
    // Still written every 50 ms for 950 ms: the read at the 1 s maximum finds it half-written.
    let (_tmp, src, mut rx, writer) = ab_caught_half_written(20, None).await;
    let seen = events_until(&mut rx, "the read while busy", |seen| seen.contains(&changed(&a))).await;
    assert!(src.get(&b).is_some(), "a read of a file still being written deleted b: {seen:?}");
    assert!(!seen.contains(&deleted(&b)), "{seen:?}");
    // No event comes after the writer's last: the watch itself reads the file again once quiet.
    let _feed = writer.await.unwrap();
    events_until(&mut rx, "the read once quiet", |seen| seen.contains(&deleted(&b))).await;
    assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 2}));
}

#[tokio::test(start_paused = true)]
async fn a_full_rescan_reads_a_file_still_being_written_as_busy() {
    let (a, b) = (key("K", "default", "a"), key("K", "default", "b"));
    // Still written for 500 ms; 150 ms in, the kernel drops events, and the rescan of everything
    // 100 ms later finds the file half-written.
    let (_tmp, src, mut rx, writer) = ab_caught_half_written(10, Some(3)).await;
    let seen = events_until(&mut rx, "the rescan of everything", |seen| seen.contains(&changed(&a))).await;
    assert!(src.get(&b).is_some(), "a full rescan deleted b from a file still being written: {seen:?}");
    let _feed = writer.await.unwrap();
    events_until(&mut rx, "the read once quiet", |seen| seen.contains(&deleted(&b))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_change_is_delivered_and_dropping_the_handle_stops_the_watch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let k = key("K", "default", "a");
    write(dir, "a.yaml", &doc("K", "a", "v: 1"));
    let src = FsSource::new(opts(dir), HashMap::new());
    assert_eq!(src.scan().await, vec![changed(&k)]);
    let (mut rx, handle) = src.watch().unwrap();
    handle.ready().await;

    write(dir, "a.yaml", &doc("K", "a", "v: 2"));
    events_until(&mut rx, "the edit", |_| src.get(&k).is_some_and(|o| o.raw.generation == 2)).await;
    assert_eq!(spec_of(&src, &k), serde_json::json!({"v": 2}));

    write(dir, "new/b.yaml", &doc("K", "b", "v: 1"));
    let b = key("K", "default", "b");
    events_until(&mut rx, "the new file", |seen| seen.contains(&changed(&b))).await;

    write(dir, "a.yaml", "kind: [\n");
    events_until(&mut rx, "the problem", |seen| seen.contains(&file_problem("a.yaml"))).await;
    assert_eq!(src.get(&k).unwrap().raw.generation, 2, "kept");

    std::fs::remove_file(dir.join("a.yaml")).unwrap();
    let seen =
        events_until(&mut rx, "the delete", |seen| seen.contains(&deleted(&k)) && seen.contains(&file_ok("a.yaml")))
            .await;
    assert!(!seen.contains(&changed(&k)), "{seen:?}");

    drop(handle);
    let end = Instant::now() + DEADLINE;
    loop {
        match tokio::time::timeout_at(end, rx.recv()).await {
            Ok(None) => break,
            Ok(Some(_)) => continue,
            Err(_) => panic!("the watch did not stop"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_continuously_is_read_before_the_writes_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let k = key("K", "default", "busy");
    // The document rewritten is closed by a marker: the last document of a file read while it
    // is written waits for the quiet read (it may be cut mid-value); this one need not.
    let text = |n: u32| format!("{}---\n{}", doc("K", "busy", &format!("n: {n}")), doc("K", "tail", "v: 1"));
    write(&dir, "busy.yaml", &text(0));
    let mut o = opts(&dir);
    o.debounce = Duration::from_millis(200);
    o.debounce_max = Duration::from_secs(1);
    let src = FsSource::new(o, HashMap::new());
    src.scan().await;
    let (mut rx, handle) = src.watch().unwrap();
    handle.ready().await;

    // Rewrite every 50 ms for 4 s: never quiet for 200 ms.
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (dir, done) = (dir.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            for n in 1..=80 {
                write(&dir, "busy.yaml", &text(n));
                std::thread::sleep(Duration::from_millis(50));
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut picked_up_while_writing = false;
    events_until(&mut rx, "a read during the writes", |_| {
        let n = src
            .get(&k)
            .and_then(|o| serde_json::from_str::<serde_json::Value>(&o.raw.spec).ok())
            .and_then(|s| s["n"].as_u64());
        if n.is_some_and(|n| n >= 1) {
            picked_up_while_writing = !done.load(Ordering::SeqCst);
            true
        } else {
            false
        }
    })
    .await;
    assert!(picked_up_while_writing, "the file was only read after the writes stopped");
    writer.join().unwrap();
    // And the final content is read once the writes stop.
    // (A writer stalled past the debounce by a loaded machine can be read truncated: absent a while.)
    events_until(&mut rx, "the last write", |_| {
        src.get(&k).is_some_and(|o| {
            serde_json::from_str::<serde_json::Value>(&o.raw.spec).ok() == Some(serde_json::json!({"n": 80}))
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temp_file_renamed_over_the_file_is_picked_up_and_a_rename_is_not_a_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let k = key("K", "default", "a");
    write(dir, "a.yaml", &doc("K", "a", "v: 1"));
    let src = FsSource::new(opts(dir), HashMap::new());
    src.scan().await;
    let (mut rx, handle) = src.watch().unwrap();
    handle.ready().await;

    // How editors and config tools save: write a temporary file, rename it over the target.
    write(dir, ".a.yaml.tmp", &doc("K", "a", "v: 2"));
    std::fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).unwrap();
    write(dir, "a.yaml.new", &doc("K", "a", "v: 3"));
    std::fs::rename(dir.join("a.yaml.new"), dir.join("a.yaml")).unwrap();
    let seen = events_until(&mut rx, "the renamed content", |_| spec_of(&src, &k) == serde_json::json!({"v": 3})).await;
    assert!(!seen.contains(&deleted(&k)), "{seen:?}");
    assert!(src.problems().is_empty(), "{:?}", src.problems());

    // `mv a.yaml b.yaml`: the object moves file, it is not deleted and re-created.
    std::fs::rename(dir.join("a.yaml"), dir.join("b.yaml")).unwrap();
    let seen = events_until(&mut rx, "the move", |_| src.get(&k).is_some_and(|o| o.location.file == "b.yaml")).await;
    assert!(!seen.contains(&deleted(&k)), "{seen:?}");
    assert_eq!(src.files(), vec!["b.yaml".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_moved_in_and_out_are_rescanned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("res");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    write(&outside, "pack/a.yaml", &doc("K", "a", "v: 1"));
    write(&outside, "pack/inner/b.yaml", &doc("K", "b", "v: 1"));
    let (a, b) = (key("K", "default", "a"), key("K", "default", "b"));
    let src = FsSource::new(opts(&dir), HashMap::new());
    assert_eq!(src.scan().await, vec![]);
    let (mut rx, handle) = src.watch().unwrap();
    handle.ready().await;

    std::fs::rename(outside.join("pack"), dir.join("pack")).unwrap();
    events_until(&mut rx, "the moved-in files", |seen| seen.contains(&changed(&a)) && seen.contains(&changed(&b)))
        .await;
    assert_eq!(src.get(&b).unwrap().location.file, "pack/inner/b.yaml");

    // The moved-in directory is watched: an edit inside it is seen.
    write(&dir, "pack/inner/b.yaml", &doc("K", "b", "v: 2"));
    events_until(&mut rx, "the edit in the moved-in directory", |_| src.get(&b).is_some_and(|o| o.raw.generation == 2))
        .await;

    std::fs::rename(dir.join("pack"), outside.join("pack2")).unwrap();
    events_until(&mut rx, "the moved-out files", |seen| seen.contains(&deleted(&a)) && seen.contains(&deleted(&b)))
        .await;
    assert!(src.is_empty());

    // And in again, under another name.
    std::fs::rename(outside.join("pack2"), dir.join("again")).unwrap();
    events_until(&mut rx, "the files moved in again", |_| {
        src.get(&a).is_some_and(|o| o.location.file == "again/a.yaml") && src.get(&b).is_some()
    })
    .await;
    assert_eq!(src.get(&b).unwrap().raw.generation, 2, "same spec as when it left");
    drop(handle);
}
