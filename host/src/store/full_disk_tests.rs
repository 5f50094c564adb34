//! Tests of the store on a full file system: a small tmpfs (the tests run as root), filled, then freed.

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use steward_sdk::ConditionStatus;

use super::{Record, Store, StoreError};
use crate::health::{Conditions, STORE_WRITABLE};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Rec {
    n: u64,
    payload: String,
}

impl Record for Rec {}

/// A record of about 32 KiB, so that a few need the file to grow.
fn big(n: u64) -> Rec {
    Rec { n, payload: "x".repeat(32 * 1024) }
}

/// A tmpfs of `size` mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs (these tests run as root) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Fills the file system with one file, until the kernel says it is full; returns the file.
    fn fill(&self) -> std::path::PathBuf {
        let file = self.path().join("filler");
        let mut f = std::fs::File::create(&file).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                    break;
                }
            }
        }
        file
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Waits until `f` holds, for at most 20 s.
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "not within 20 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_keeps_the_writes_and_they_commit_once_space_is_freed() {
    let fs = Tmpfs::mount("4m");
    let path = fs.path().join("status.redb");
    let store = Arc::new(Store::<Rec>::open(&path).unwrap());
    let conditions = Conditions::new();
    store.report_to(&conditions);
    assert_eq!(conditions.get(STORE_WRITABLE, None).unwrap().status, ConditionStatus::True);
    store.put("k/ns/before".into(), big(0)).await.unwrap();

    let filler = fs.fill();
    let waiting: Vec<_> = (1..=40).map(|n| tokio::spawn(store.put(format!("k/ns/during{n}"), big(n)))).collect();
    until("the store reports failing commits", || store.stats().failed).await;
    let c = conditions.get(STORE_WRITABLE, None).unwrap();
    assert_eq!(c.status, ConditionStatus::False, "{c:?}");
    assert_eq!(c.reason, "DiskFull", "{c:?}");
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(c.message.contains(&file) && c.message.contains("free space on the file system of the data"), "{c:?}");
    assert!(!c.message.contains(&path.display().to_string()), "no host path in a condition: {c:?}");
    assert!(conditions.readiness_problem().is_some());
    assert!(store.stats().pending > 0);
    // The callers wait: nothing was answered with an error.
    assert!(waiting.iter().all(|w| !w.is_finished()));
    // Reads see the writes all along.
    assert_eq!(store.get("k/ns/during7"), Some(big(7)));

    std::fs::remove_file(&filler).unwrap();
    for w in waiting {
        tokio::time::timeout(Duration::from_secs(20), w).await.expect("a kept write commits").unwrap().unwrap();
    }
    let stats = store.stats();
    assert!(!stats.failed && stats.pending == 0, "{stats:?}");
    assert_eq!(conditions.get(STORE_WRITABLE, None).unwrap().status, ConditionStatus::True);
    assert!(conditions.readiness_problem().is_none());
    store.put("k/ns/after".into(), big(99)).await.unwrap();

    Arc::try_unwrap(store).unwrap().close().unwrap();
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.len(), 42);
    for n in 1..=40 {
        assert_eq!(store.get(&format!("k/ns/during{n}")), Some(big(n)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_during_an_outage_fails_the_waiting_writes_and_the_close() {
    let fs = Tmpfs::mount("4m");
    let path = fs.path().join("status.redb");
    let store = Store::<Rec>::open(&path).unwrap();
    store.put("k/ns/before".into(), big(0)).await.unwrap();
    let _filler = fs.fill();
    let waiting = tokio::spawn(store.put("k/ns/lost".into(), big(1)));
    until("the store reports failing commits", || store.stats().failed).await;
    let err = tokio::task::spawn_blocking(move || store.close()).await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::Write { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    let answer = waiting.await.unwrap().unwrap_err();
    assert!(matches!(answer, StoreError::Write { .. }), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_after_many_commits_resume_once_space_is_freed() {
    let fs = Tmpfs::mount("6m");
    let path = fs.path().join("status.redb");
    let store = Arc::new(Store::<Rec>::open(&path).unwrap());
    for n in 0..50 {
        store.put(format!("k/ns/a{n}"), Rec { n, payload: "y".repeat(300) }).await.unwrap();
    }
    let filler = fs.fill();
    let waiting: Vec<_> =
        (0..20).map(|n| tokio::spawn(store.put(format!("k/ns/b{n}"), Rec { n, payload: "z".repeat(300) }))).collect();
    until("the store reports failing commits", || store.stats().failed).await;
    std::fs::remove_file(&filler).unwrap();
    for w in waiting {
        tokio::time::timeout(Duration::from_secs(20), w).await.expect("a kept write commits").unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_nobody_waits_for_commit_once_space_is_freed_with_no_write_after() {
    let fs = Tmpfs::mount("4m");
    let path = fs.path().join("status.redb");
    let store = Store::<Rec>::open(&path).unwrap();
    let conditions = Conditions::new();
    store.report_to(&conditions);
    store.put("k/ns/before".into(), big(0)).await.unwrap();

    let filler = fs.fill();
    // As the engine writes statuses: the acknowledgement is dropped at once; some put soon.
    for n in 1..=20 {
        if n % 2 == 0 {
            drop(store.put_soon(format!("k/ns/during{n}"), big(n)));
        } else {
            drop(store.put(format!("k/ns/during{n}"), big(n)));
        }
    }
    until("the store reports failing commits", || store.stats().failed).await;
    assert_eq!(conditions.get(STORE_WRITABLE, None).unwrap().status, ConditionStatus::False);

    // No write comes after the space is back: the writer retries on its own.
    std::fs::remove_file(&filler).unwrap();
    until("the kept writes commit by themselves", || !store.stats().failed && store.stats().pending == 0).await;
    assert_eq!(conditions.get(STORE_WRITABLE, None).unwrap().status, ConditionStatus::True);
    store.close().unwrap();
    let store = Store::<Rec>::open(&path).unwrap();
    assert_eq!(store.len(), 21);
    assert_eq!(store.get("k/ns/during20"), Some(big(20)));
}
