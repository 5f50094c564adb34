//! The plugin directory's watch, against a plugin set that records what it is asked to do.

use std::sync::Mutex;

use notify::EventKind;
use notify::event::{DataChange, Flag, ModifyKind};
use tokio::sync::{mpsc, watch as channel};

use super::*;
use crate::source::fs::watch::run;

/// What the watcher asked of the set: the file name and, for a reload, the bytes it then held.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Reload(String, String),
    Remove(String),
}

/// A plugin set that loads nothing: a file whose bytes start with `bad` is refused.
struct Fake {
    dir: PathBuf,
    known: Mutex<BTreeMap<PathBuf, bool>>,
    calls: Mutex<Vec<Call>>,
    count: channel::Sender<usize>,
}

impl Fake {
    fn new(dir: &Path) -> Arc<Self> {
        Arc::new(Self {
            dir: dir.to_path_buf(),
            known: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(Vec::new()),
            count: channel::channel(0).0,
        })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: Call) {
        let mut calls = self.calls.lock().unwrap();
        calls.push(call);
        self.count.send_replace(calls.len());
    }

    /// Waits until `done` holds for the calls so far, failing after a deadline.
    async fn until(&self, what: &str, done: impl Fn(&[Call]) -> bool) {
        let mut rx = self.count.subscribe();
        let waited = tokio::time::timeout(DEADLINE, rx.wait_for(|_| done(&self.calls()))).await;
        assert!(waited.is_ok(), "timed out waiting for {what}; calls: {:?}", self.calls());
    }
}

fn name(file: &Path) -> String {
    file.file_name().unwrap().to_string_lossy().into_owned()
}

impl PluginFiles for Arc<Fake> {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn known(&self) -> Vec<(PathBuf, bool)> {
        self.known.lock().unwrap().iter().map(|(f, r)| (f.clone(), *r)).collect()
    }

    async fn reload(&self, file: &Path) {
        match std::fs::read_to_string(file) {
            Ok(text) => {
                self.known.lock().unwrap().insert(file.to_path_buf(), text.starts_with("bad"));
                self.record(Call::Reload(name(file), text));
            }
            Err(_) => {
                self.known.lock().unwrap().remove(file);
                self.record(Call::Remove(name(file)));
            }
        }
    }

    async fn remove(&self, file: &Path) {
        self.known.lock().unwrap().remove(file);
        self.record(Call::Remove(name(file)));
    }
}

const DEADLINE: Duration = Duration::from_secs(30);

fn reload(file: &str, text: &str) -> Call {
    Call::Reload(file.into(), text.into())
}

fn remove(file: &str) -> Call {
    Call::Remove(file.into())
}

/// Runs the watch loop with events fed in by the test, and waits until it is ready.
async fn start(
    fake: &Arc<Fake>,
    scan_interval: Duration,
) -> (mpsc::UnboundedSender<notify::Result<notify::Event>>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, mut ready) = channel::channel(false);
    let opts = WatchOptions { debounce: SETTLE, debounce_max: SETTLE_MAX, scan_interval, recursive: false };
    let task = tokio::spawn(run(Target::new(fake.clone()), rx, opts, ready_tx, "plugins".into()));
    tokio::time::timeout(DEADLINE, ready.wait_for(|r| *r)).await.expect("ready").unwrap();
    (tx, task)
}

fn modified(file: &Path) -> notify::Result<notify::Event> {
    Ok(notify::Event::new(EventKind::Modify(ModifyKind::Data(DataChange::Content))).add_path(file.to_path_buf()))
}

fn lost_events() -> notify::Result<notify::Event> {
    Ok(notify::Event::new(EventKind::Other).set_flag(Flag::Rescan))
}

#[tokio::test(start_paused = true)]
async fn a_plugin_file_replaced_twice_quickly_is_loaded_once_with_the_last_content() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a.wasm");
    std::fs::write(&file, "v1").unwrap();
    let fake = Fake::new(tmp.path());
    let (events, _task) = start(&fake, Duration::ZERO).await;
    assert_eq!(fake.calls(), vec![reload("a.wasm", "v1")], "the first look loads what is there");

    // Replaced by a half-written file, then by the finished one, within the settle time.
    std::fs::write(&file, "bad: half written").unwrap();
    events.send(modified(&file)).unwrap();
    std::fs::write(&file, "v3").unwrap();
    events.send(modified(&file)).unwrap();
    fake.until("the reload", |c| c.len() >= 2).await;
    assert_eq!(fake.calls(), vec![reload("a.wasm", "v1"), reload("a.wasm", "v3")]);

    // A file changed again and again is still reloaded, at the latest SETTLE_MAX after its first change.
    let started = tokio::time::Instant::now();
    let mut n = 0;
    while fake.calls().len() < 3 {
        n += 1;
        std::fs::write(&file, format!("v{}", 3 + n)).unwrap();
        events.send(modified(&file)).unwrap();
        tokio::time::sleep(SETTLE / 2).await;
        assert!(started.elapsed() <= SETTLE_MAX + SETTLE, "not reloaded while busy: {:?}", fake.calls());
    }
    assert!(matches!(&fake.calls()[2], Call::Reload(f, _) if f == "a.wasm"), "{:?}", fake.calls());
}

#[tokio::test(start_paused = true)]
async fn lost_events_and_watcher_errors_make_the_whole_directory_looked_at() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("a.wasm"), "a1").unwrap();
    std::fs::write(dir.join("gone.wasm"), "g1").unwrap();
    std::fs::write(dir.join("README.md"), "not a plugin").unwrap();
    let fake = Fake::new(dir);
    let (events, _task) = start(&fake, Duration::ZERO).await;
    assert_eq!(fake.calls(), vec![reload("a.wasm", "a1"), reload("gone.wasm", "g1")]);

    // Changes the watcher never reported, then word that it lost events.
    std::fs::write(dir.join("a.wasm"), "a2").unwrap();
    std::fs::write(dir.join("new.wasm"), "n1").unwrap();
    std::fs::remove_file(dir.join("gone.wasm")).unwrap();
    events.send(lost_events()).unwrap();
    fake.until("the rescan", |c| c.len() >= 5).await;
    assert_eq!(
        fake.calls()[2..],
        [reload("a.wasm", "a2"), remove("gone.wasm"), reload("new.wasm", "n1")],
        "changed and new files reloaded, the gone one removed, the unchanged ones left alone"
    );

    // A watcher error does the same.
    std::fs::write(dir.join("new.wasm"), "n2").unwrap();
    events.send(Err(notify::Error::generic("queue overflow"))).unwrap();
    fake.until("the rescan after an error", |c| c.len() >= 6).await;
    assert_eq!(fake.calls()[5..], [reload("new.wasm", "n2")]);
}

#[tokio::test(start_paused = true)]
async fn the_periodic_rescan_repairs_what_the_watcher_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("a.wasm"), "a1").unwrap();
    let fake = Fake::new(dir);
    let (_events, _task) = start(&fake, DEADLINE / 3).await;
    std::fs::write(dir.join("a.wasm"), "a2").unwrap();
    // No event comes: only the rescan can find the change.
    fake.until("the periodic rescan", |c| c.len() >= 2).await;
    assert_eq!(fake.calls(), vec![reload("a.wasm", "a1"), reload("a.wasm", "a2")]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_file_is_not_reloaded_again_until_its_bytes_change() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bad = dir.join("bad.wasm");
    std::fs::write(&bad, "bad bytes").unwrap();
    let fake = Fake::new(dir);
    // As `load_all` leaves it: the file is known and was refused.
    fake.known.lock().unwrap().insert(bad.clone(), true);
    let (events, _task) = start(&fake, Duration::ZERO).await;
    assert_eq!(fake.calls(), vec![], "refused bytes are not tried again at the start");

    // A whole-directory look (told apart by a new file it finds) leaves the refused file alone.
    std::fs::write(dir.join("m1.wasm"), "m").unwrap();
    events.send(lost_events()).unwrap();
    fake.until("the first rescan", |c| c.contains(&reload("m1.wasm", "m"))).await;
    assert_eq!(fake.calls(), vec![reload("m1.wasm", "m")]);

    // An event for it is a change: it is tried, refused again, and then left alone again.
    events.send(modified(&bad)).unwrap();
    fake.until("the reload", |c| c.len() >= 2).await;
    std::fs::write(dir.join("m2.wasm"), "m").unwrap();
    events.send(lost_events()).unwrap();
    fake.until("the second rescan", |c| c.contains(&reload("m2.wasm", "m"))).await;
    assert_eq!(fake.calls(), vec![reload("m1.wasm", "m"), reload("bad.wasm", "bad bytes"), reload("m2.wasm", "m")]);

    // New bytes are tried, even when only a rescan finds them.
    std::fs::write(&bad, "good now").unwrap();
    events.send(lost_events()).unwrap();
    fake.until("the fixed file", |c| c.len() >= 4).await;
    assert_eq!(fake.calls()[3], reload("bad.wasm", "good now"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_watcher_sees_plugin_files_come_change_and_go() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fake = Fake::new(dir);
    let opts =
        WatchOptions { debounce: SETTLE, debounce_max: SETTLE_MAX, scan_interval: RESCAN_EVERY, recursive: false };
    let handle = watch_dir(dir, "the plugin directory", &opts, Target::new(fake.clone())).unwrap();
    handle.ready().await;

    // Copied in the way `cp` then `mv` does it; files that are not plugins are left alone.
    std::fs::write(dir.join("p.part"), "p1").unwrap();
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    std::fs::write(dir.join(".hidden.wasm"), "x").unwrap();
    std::fs::rename(dir.join("p.part"), dir.join("p.wasm")).unwrap();
    fake.until("the new file", |c| c.contains(&reload("p.wasm", "p1"))).await;
    std::fs::write(dir.join("p.wasm"), "p2").unwrap();
    fake.until("the edit", |c| c.contains(&reload("p.wasm", "p2"))).await;
    std::fs::remove_file(dir.join("p.wasm")).unwrap();
    fake.until("the removal", |c| c.contains(&remove("p.wasm"))).await;
    assert!(
        fake.calls().iter().all(|c| matches!(c, Call::Reload(f, _) | Call::Remove(f) if f == "p.wasm")),
        "{:?}",
        fake.calls()
    );
    drop(handle);
}
