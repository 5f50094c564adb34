//! Tests of the store: durability across reopen and crash, group commit, and failure reporting.

use super::*;
use serde::{Deserialize, Serialize};
use std::process::Command;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Rec {
    generation: u64,
    phase: String,
}

impl Record for Rec {}

fn rec(generation: u64) -> Rec {
    Rec { generation, phase: format!("Synced-{generation}") }
}

fn temp_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("status.redb");
    (dir, path)
}

#[tokio::test]
async fn round_trip_across_reopen() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    assert!(store.is_empty());
    store.put("MCPServer/default/b".into(), rec(2)).await.unwrap();
    store.put("MCPServer/default/a".into(), rec(1)).await.unwrap();
    store.put("MCPServer/default/a".into(), rec(3)).await.unwrap();
    assert_eq!(store.get("MCPServer/default/a"), Some(rec(3)));
    drop(store);

    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.skipped_on_open(), 0);
    assert_eq!(store.len(), 2);
    assert_eq!(store.keys(), vec!["MCPServer/default/a".to_string(), "MCPServer/default/b".to_string()]);
    assert_eq!(
        store.all(),
        vec![("MCPServer/default/a".to_string(), rec(3)), ("MCPServer/default/b".to_string(), rec(2))]
    );
    assert_eq!(store.get("MCPServer/default/missing"), None);
}

#[tokio::test]
async fn remove_persists_across_reopen() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.put("k/ns/a".into(), rec(1)).await.unwrap();
    store.put("k/ns/b".into(), rec(2)).await.unwrap();
    store.remove("k/ns/a").await.unwrap();
    assert_eq!(store.get("k/ns/a"), None);
    store.close().unwrap();

    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.keys(), vec!["k/ns/b".to_string()]);
    assert_eq!(store.get("k/ns/a"), None);
}

#[tokio::test]
async fn memory_reflects_writes_before_they_commit() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    let put = store.put("k/ns/a".into(), rec(1));
    // Not yet awaited (not even polled): memory already has it.
    assert_eq!(store.get("k/ns/a"), Some(rec(1)));
    let removed = store.remove("k/ns/a");
    assert_eq!(store.get("k/ns/a"), None);
    put.await.unwrap();
    removed.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_are_group_committed_and_persist() {
    const TASKS: usize = 8;
    const PER_TASK: usize = 625;
    let (_dir, path) = temp_path();
    let store = Arc::new(Store::<Rec>::open(&path).unwrap());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let acks: Vec<_> = (0..PER_TASK)
                .map(|i| store.put(format!("Kind/ns{t}/obj{i}"), rec((t * PER_TASK + i) as u64)))
                .collect();
            for ack in acks {
                ack.await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = (TASKS * PER_TASK) as u64;
    let stats = store.stats();
    assert_eq!(stats.writes, total, "{stats:?}");
    assert!(stats.commits * 10 <= total, "group commit should batch: {stats:?}");
    assert!(stats.largest_batch > 1, "{stats:?}");
    assert!(!stats.failed);
    drop(store);

    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.len(), TASKS * PER_TASK);
    for t in 0..TASKS {
        for i in 0..PER_TASK {
            assert_eq!(store.get(&format!("Kind/ns{t}/obj{i}")), Some(rec((t * PER_TASK + i) as u64)));
        }
    }
}

#[tokio::test]
async fn last_write_to_a_key_wins_within_a_batch() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    let acks: Vec<_> = (0..500).map(|i| store.put("k/ns/same".into(), rec(i))).collect();
    let removed = store.remove("k/ns/gone");
    let gone = store.put("k/ns/gone".into(), rec(7));
    let gone_again = store.remove("k/ns/gone");
    for ack in acks {
        ack.await.unwrap();
    }
    removed.await.unwrap();
    gone.await.unwrap();
    gone_again.await.unwrap();
    assert!(store.stats().commits < 500);
    drop(store);
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get("k/ns/same"), Some(rec(499)));
    assert_eq!(store.get("k/ns/gone"), None);
}

#[tokio::test]
async fn drop_commits_what_is_queued() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    for i in 0..2000 {
        // Submitted, never awaited.
        drop(store.put(format!("k/ns/{i:04}"), rec(i)));
    }
    drop(store);
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.len(), 2000);
    assert_eq!(store.get("k/ns/1999"), Some(rec(1999)));
}

#[tokio::test]
async fn flush_waits_for_earlier_writes() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.stats().commits, 0);
    for i in 0..100 {
        drop(store.put(format!("k/ns/{i}"), rec(i)));
    }
    store.flush().await.unwrap();
    let stats = store.stats();
    assert_eq!(stats.writes, 100, "{stats:?}");
    // A flush with nothing queued commits nothing.
    store.flush().await.unwrap();
    assert_eq!(store.stats().commits, stats.commits);
}

#[tokio::test]
async fn meta_round_trip() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.put_meta("disabled-kinds".into(), "Workflow".into()).await.unwrap();
    store.put_meta("other".into(), "x".into()).await.unwrap();
    store.remove_meta("other").await.unwrap();
    store.put("k/ns/a".into(), rec(1)).await.unwrap();
    assert_eq!(store.get_meta("disabled-kinds").as_deref(), Some("Workflow"));
    drop(store);
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get_meta("disabled-kinds").as_deref(), Some("Workflow"));
    assert_eq!(store.get_meta("other"), None);
    assert_eq!(store.all_meta(), vec![("disabled-kinds".to_string(), "Workflow".to_string())]);
    // Meta lives apart from the records.
    assert_eq!(store.keys(), vec!["k/ns/a".to_string()]);
}

#[tokio::test]
async fn incompatible_records_are_skipped_and_counted() {
    #[derive(Clone, Serialize, Deserialize)]
    struct Old {
        name: String,
    }
    impl Record for Old {}
    let (_dir, path) = temp_path();
    {
        let old = Store::<Old>::open(&path).unwrap();
        old.put("k/ns/old1".into(), Old { name: "a".into() }).await.unwrap();
        old.put("k/ns/old2".into(), Old { name: "b".into() }).await.unwrap();
    }
    {
        let store = Store::<serde_json::Value>::open(&path).unwrap();
        store.put("k/ns/new".into(), serde_json::to_value(rec(5)).unwrap()).await.unwrap();
    }
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.skipped_on_open(), 2);
    assert_eq!(store.keys(), vec!["k/ns/new".to_string()]);
    assert_eq!(store.get("k/ns/new"), Some(rec(5)));
    // A skipped record can still be removed from the file.
    store.remove("k/ns/old1").await.unwrap();
    drop(store);
    assert_eq!(Store::<Rec>::open(&path).unwrap().skipped_on_open(), 1);
}

#[test]
fn garbage_file_is_an_error_naming_the_path() {
    let (_dir, path) = temp_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let garbage: Vec<u8> = (0..20_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&path, garbage).unwrap();
    let err = Store::<Rec>::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("move it away"), "{msg}");
}

#[tokio::test]
async fn damaged_pages_are_an_error_not_a_panic() {
    let (_dir, path) = temp_path();
    {
        let store = Store::<Rec>::open(&path).unwrap();
        for i in 0..2000 {
            drop(store.put(format!("k/ns/{i:04}"), rec(i)));
        }
        store.flush().await.unwrap();
    }
    // Keep the header page (a valid redb file), damage every page after it.
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[4096..] {
        *b ^= 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::<Rec>::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[tokio::test]
async fn reopen_after_forget_in_process_is_in_use() {
    // `mem::forget` is no crash: the writer thread still holds the file and its lock, so
    // redb refuses a second open in the same process. Hence the child process below.
    let (_dir, path) = temp_path();
    let first = Store::<Rec>::open(&path).unwrap();
    first.put("k/ns/a".into(), rec(1)).await.unwrap();
    std::mem::forget(first);
    let err = Store::<Rec>::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::InUse { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[tokio::test]
async fn a_dead_writer_fails_writes_instead_of_hanging() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.put("k/ns/a".into(), rec(1)).await.unwrap();
    let crashed = store.acknowledgement(store.submit(Op::Crash));
    assert!(matches!(crashed.await, Err(StoreError::Closed { .. })));
    let err = store.put("k/ns/b".into(), rec(2)).await.unwrap_err();
    assert!(matches!(err, StoreError::Closed { .. }), "{err:?}");
    assert!(store.flush().await.is_err());
    assert!(store.close().is_err());
    // The committed write is still there.
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get("k/ns/a"), Some(rec(1)));
}

const CRASH_PATH_ENV: &str = "STEWARD_STORE_TEST_CRASH_PATH";
const CRASH_ACKED: usize = 3000;

/// The child side of `acknowledged_writes_survive_a_crash` (the same test, re-run in a
/// child process with `CRASH_PATH_ENV` set): acknowledges `CRASH_ACKED` writes, queues
/// more without waiting, and aborts.
fn crash_child(path: std::ffi::OsString) -> ! {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Store::<Rec>::open(Path::new(&path)).unwrap();
        let acks: Vec<_> = (0..CRASH_ACKED).map(|i| store.put(format!("k/ns/{i:05}"), rec(i as u64))).collect();
        for ack in acks {
            ack.await.unwrap();
        }
        // In flight at the abort: may or may not be there, must not break the file.
        for i in CRASH_ACKED..CRASH_ACKED + 2000 {
            drop(store.put(format!("k/ns/{i:05}"), rec(i as u64)));
        }
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "acked {CRASH_ACKED}").unwrap();
        out.flush().unwrap();
        std::process::abort();
    });
    unreachable!("the child aborts")
}

#[test]
fn acknowledged_writes_survive_a_crash() {
    if let Some(path) = std::env::var_os(CRASH_PATH_ENV) {
        crash_child(path);
    }
    // redb locks the file: an in-process reopen after `mem::forget` is refused (see
    // `reopen_after_forget_in_process_is_in_use`), so the crash happens in a child process.
    let (_dir, path) = temp_path();
    let module = module_path!().split_once("::").map_or(module_path!(), |(_, rest)| rest);
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "--nocapture", "--test-threads=1", &format!("{module}::acknowledged_writes_survive_a_crash")])
        .env(CRASH_PATH_ENV, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("acked {CRASH_ACKED}")),
        "child did not ack: {:?}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "the child should have aborted");

    let store = Store::<Rec>::open(&path).unwrap();
    for i in 0..CRASH_ACKED {
        assert_eq!(store.get(&format!("k/ns/{i:05}")), Some(rec(i as u64)), "acknowledged write {i} lost");
    }
    assert!(store.len() >= CRASH_ACKED);
}

#[tokio::test]
async fn get_with_and_for_each_see_the_records_without_cloning_them() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.put("b".into(), rec(2)).await.unwrap();
    store.put("a".into(), rec(1)).await.unwrap();
    assert_eq!(store.get_with("a", |r| r.clone()), Some(rec(1)));
    assert_eq!(store.get_with("missing", |_| ()), None);
    let mut seen = Vec::new();
    store.for_each(|k, r| seen.push((k.to_string(), r.clone())));
    assert_eq!(seen, vec![("a".to_string(), rec(1)), ("b".to_string(), rec(2))]);
}

#[tokio::test]
async fn subscribers_see_every_change_in_order() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    // Without a subscriber, writes work as ever.
    store.put("K/default/early".into(), rec(1)).await.unwrap();
    let mut changes = store.subscribe();
    store.put("K/default/a".into(), rec(2)).await.unwrap();
    store.put_meta("disabled".into(), "[\"K\"]".into()).await.unwrap();
    store.remove("K/default/a").await.unwrap();
    store.remove_meta("disabled").await.unwrap();
    let mut seen = Vec::new();
    while let Ok(change) = changes.try_recv() {
        seen.push(change);
    }
    assert_eq!(
        seen,
        vec![
            Change::Record("K/default/a".into()),
            Change::Meta("disabled".into()),
            Change::Record("K/default/a".into()),
            Change::Meta("disabled".into()),
        ]
    );
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_told_it_lagged() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    let mut changes = store.subscribe();
    for i in 0..(CHANGES_CAPACITY as u64 + 10) {
        // Submitted on the call; the flush below waits for all of them.
        drop(store.put(format!("K/default/o{i}"), rec(i)));
    }
    store.flush().await.unwrap();
    assert!(matches!(changes.recv().await, Err(broadcast::error::RecvError::Lagged(n)) if n > 0));
}

#[tokio::test]
async fn writes_put_soon_share_the_commit_of_the_next_urgent_write() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    // A window no test outlasts: only the urgent write below can commit the soon ones.
    store.set_soon_window(Duration::from_secs(3600));
    let soon: Vec<_> = (0..3).map(|i| store.put_soon(format!("k/ns/s{i}"), rec(i))).collect();
    assert_eq!(store.get("k/ns/s2"), Some(rec(2)), "memory has a soon write at once");
    assert_eq!(store.stats().waiting, 3, "the soon writes wait; none went to the writer on its own");
    store.put("k/ns/urgent".into(), rec(9)).await.unwrap();
    for ack in soon {
        ack.await.unwrap();
    }
    // How many commits the four took depends on how fast the writer picked them up; that
    // the soon ones were committed by the urgent write is what counts.
    let stats = store.stats();
    assert_eq!((stats.waiting, stats.writes), (0, 4), "the urgent write took the soon ones along");
    store.close().unwrap();

    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.len(), 4);
    assert_eq!(store.get("k/ns/s1"), Some(rec(1)));
}

#[tokio::test]
async fn a_write_put_soon_is_committed_by_a_flush_by_closing_and_by_itself() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.set_soon_window(Duration::from_secs(3600));
    let flushed = store.put_soon("k/ns/flushed".into(), rec(1));
    store.flush().await.unwrap();
    flushed.await.unwrap();
    assert_eq!(store.stats().writes, 1);
    // Closing commits what waits, however long its window.
    drop(store.put_soon("k/ns/closed".into(), rec(2)));
    store.close().unwrap();

    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get("k/ns/closed"), Some(rec(2)), "closing committed the soon write");
    // With a short window a lone soon write commits by itself.
    store.set_soon_window(Duration::from_millis(1));
    tokio::time::timeout(Duration::from_secs(30), store.put_soon("k/ns/alone".into(), rec(3)))
        .await
        .expect("a lone soon write commits once its window ends")
        .unwrap();
    assert_eq!(store.stats().commits, 1);
}

#[tokio::test]
async fn writes_put_soon_and_at_once_to_one_key_commit_in_the_order_they_were_made() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.set_soon_window(Duration::from_secs(3600));
    drop(store.put_soon("k/ns/a".into(), rec(1)));
    drop(store.put("k/ns/a".into(), rec(2)));
    drop(store.put_soon("k/ns/b".into(), rec(1)));
    drop(store.put_soon("k/ns/a".into(), rec(3)));
    drop(store.put("k/ns/b".into(), rec(2)));
    drop(store.put_soon("k/ns/b".into(), rec(3)));
    store.close().unwrap();

    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get("k/ns/a"), Some(rec(3)), "the soon write after the urgent one wins");
    assert_eq!(store.get("k/ns/b"), Some(rec(3)));
}

#[tokio::test]
async fn at_most_a_batch_of_writes_put_soon_waits() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.set_soon_window(Duration::from_secs(3600));
    let acks: Vec<_> = (0..MAX_BATCH as u64).map(|i| store.put_soon(format!("k/ns/{i:05}"), rec(i))).collect();
    // The last of them filled a batch and was sent at once, taking the others along.
    for ack in acks {
        tokio::time::timeout(Duration::from_secs(60), ack).await.expect("a full batch commits").unwrap();
    }
    assert_eq!(store.stats().writes, MAX_BATCH as u64);
}

#[tokio::test]
async fn detached_writes_wait_for_company_until_a_write_someone_awaits() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    // A wait no test outlasts: only the awaited write below can end it.
    store.set_linger(Duration::from_secs(3600));
    store.put_detached("k/ns/a".into(), rec(1));
    store.put_detached("k/ns/b".into(), rec(2));
    assert_eq!(store.get("k/ns/b"), Some(rec(2)), "memory has a detached write at once");
    let stats = store.stats();
    assert_eq!((stats.waiting, stats.commits), (2, 0), "both detached writes wait; nothing was committed");
    tokio::time::timeout(Duration::from_secs(30), store.put("k/ns/awaited".into(), rec(3)))
        .await
        .expect("the awaited write was committed")
        .unwrap();
    let stats = store.stats();
    assert_eq!((stats.waiting, stats.writes), (0, 3), "the awaited write took both detached ones along");
    store.close().unwrap();
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get("k/ns/a"), Some(rec(1)));
}

#[tokio::test]
async fn a_detached_write_is_committed_by_itself_and_by_closing() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.put_detached("k/ns/alone".into(), rec(1));
    assert_eq!(store.stats().waiting, 1, "a detached write waits for company");
    // The default wait is milliseconds: the write commits with no other write to share it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.stats().commits == 0 {
        assert!(Instant::now() < deadline, "a detached write was never committed on its own");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Closing commits a detached write at once, whatever the wait.
    store.set_linger(Duration::from_secs(3600));
    store.put_detached("k/ns/last".into(), rec(2));
    store.close().unwrap();
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!((store.get("k/ns/alone"), store.get("k/ns/last")), (Some(rec(1)), Some(rec(2))));
}

#[tokio::test]
async fn a_detached_write_brings_the_commit_of_waiting_soon_writes_forward() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.set_soon_window(Duration::from_secs(3600));
    let soon = store.put_soon("k/ns/soon".into(), rec(1));
    // Its window is milliseconds: it asks for a commit sooner than the soon write did.
    store.put_detached("k/ns/detached".into(), rec(2));
    assert_eq!(store.stats().waiting, 2, "the detached write waits too; it does not commit the soon one at once");
    tokio::time::timeout(Duration::from_secs(30), soon)
        .await
        .expect("the detached write's deadline committed the soon write, long before its own window")
        .unwrap();
    let stats = store.stats();
    assert_eq!((stats.waiting, stats.writes), (0, 2), "both were committed");
}

#[tokio::test]
async fn a_write_put_soon_without_an_answer_commits_with_the_next_and_leaves_awaited_ones_answered() {
    let (_dir, path) = temp_path();
    let store = Store::<Rec>::open(&path).unwrap();
    store.set_soon_window(Duration::from_secs(3600));
    store.put_soon_detached("k/ns/quiet".into(), rec(1));
    assert_eq!(store.get("k/ns/quiet"), Some(rec(1)), "memory has it at once");
    assert_eq!(store.stats().waiting, 1, "it waits for company as an awaited soon write would");
    let awaited = store.put_soon("k/ns/awaited".into(), rec(2));
    store.put_detached("k/ns/detached".into(), rec(3));
    // The detached write's short wait commits all three; the one awaited is answered.
    tokio::time::timeout(Duration::from_secs(30), awaited).await.expect("the awaited soon write was answered").unwrap();
    let stats = store.stats();
    assert_eq!((stats.waiting, stats.writes), (0, 3));
    store.close().unwrap();
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.get("k/ns/quiet"), Some(rec(1)), "the write no one awaited is durable after the commit");
}
