//! The debounced directory watcher: per-path debounce with a maximum, and full rescans on watcher errors, on `need_rescan` and periodically.
//!
//! One mechanism for every directory the host watches (the resources, the plugins). What a
//! directory's paths mean is the [`WatchTarget`]'s business; the watcher only says *which*
//! paths to look at again, relative to the directory, `""` meaning everything:
//!
//! - a path is handed over `debounce` after its last event, and never later than
//!   `debounce_max` after its first one, however busy the file is; a path handed over while
//!   still busy is marked so (a read may find it half-written) and looked at again once quiet;
//! - a rename, a removal or a new directory has nothing half-written to wait for: it goes
//!   along with the next batch, so that the two sides of a rename are looked at together;
//! - a watcher error, or an event with notify's `need_rescan` flag (the kernel dropped events),
//!   asks for everything, and so does the periodic scan every `scan_interval`;
//! - the watch begins with a full rescan once the watcher is live, so that nothing that changed
//!   before is missed, and then reports itself ready.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use notify::Watcher as _;
use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How a directory is watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// Quiet time after the last event for a path before it is handed over.
    pub debounce: Duration,
    /// Longest wait after the first event for a path before it is handed over, however busy it is.
    pub debounce_max: Duration,
    /// Interval of the periodic full rescan; zero turns it off.
    pub scan_interval: Duration,
    /// Whether subdirectories are watched too.
    pub recursive: bool,
}

/// What a watch does with a directory's changes.
pub trait WatchTarget: Send + 'static {
    /// `path`, as the watcher reports it, relative to the directory and `/`-separated (`""` is
    /// the directory itself); `None` for a path that does not count (the watcher drops it).
    fn relative(&self, path: &Path) -> Option<String>;

    /// Looks again at what is at or under each relative path (`""`: everything), sorted.
    /// `busy` are those of them still being written when handed over (at `debounce_max`): a read
    /// may find one half-written, and each is handed over again once quiet. Returning false
    /// stops the watch.
    fn rescan(&mut self, rels: Vec<String>, busy: &[String]) -> impl Future<Output = bool> + Send;

    /// Resolves once nobody wants what the watch finds any more; the watch then stops.
    fn closed(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// Why a watch could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The watcher could not be created or could not watch the directory.
    #[error("cannot watch {what} {dir}: {source}")]
    Watch {
        /// What the directory holds, for the message (`the plugin directory`).
        what: &'static str,
        /// The directory.
        dir: String,
        /// Why.
        #[source]
        source: notify::Error,
    },
    /// The watch was started outside a tokio runtime.
    #[error("watching {what} {dir} needs a tokio runtime")]
    NoRuntime {
        /// What the directory holds, for the message.
        what: &'static str,
        /// The directory.
        dir: String,
    },
}

/// Keeps a directory watch running; dropping it stops the watcher, the debounce and the periodic rescan.
pub struct DirWatch {
    task: tokio::task::JoinHandle<()>,
    ready: watch::Receiver<bool>,
    _watcher: notify::RecommendedWatcher,
}

impl DirWatch {
    /// Waits until the watcher is live and its initial full rescan is done: changes from then on are seen.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Whether the watch still runs (it stops when its target stops it or is closed).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }
}

impl fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirWatch").field("running", &self.is_running()).finish()
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `dir` for `target` (`what` names the directory in errors and logs). Needs a
/// tokio runtime; the watcher is live when this returns.
pub fn watch_dir<T: WatchTarget>(
    dir: &Path,
    what: &'static str,
    opts: &WatchOptions,
    target: T,
) -> Result<DirWatch, WatchError> {
    let shown = dir.display().to_string();
    let runtime =
        tokio::runtime::Handle::try_current().map_err(|_| WatchError::NoRuntime { what, dir: shown.clone() })?;
    let (raw_tx, raw_rx) = mpsc::unbounded_channel::<notify::Result<notify::Event>>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let _ = raw_tx.send(ev);
    })
    .map_err(|source| WatchError::Watch { what, dir: shown.clone(), source })?;
    let mode = if opts.recursive { notify::RecursiveMode::Recursive } else { notify::RecursiveMode::NonRecursive };
    watcher.watch(dir, mode).map_err(|source| WatchError::Watch { what, dir: shown.clone(), source })?;
    let (ready_tx, ready) = watch::channel(false);
    let task = runtime.spawn(run(target, raw_rx, opts.clone(), ready_tx, shown));
    Ok(DirWatch { task, ready, _watcher: watcher })
}

/// A directory and its canonical form, to make the paths a watcher reports relative.
#[derive(Clone, Debug)]
pub struct Root {
    dir: PathBuf,
    /// `dir` canonicalized, when that differs (a watcher may report canonical paths).
    canonical: Option<PathBuf>,
}

impl Root {
    /// The root `dir` (canonicalized once, now).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        let canonical = std::fs::canonicalize(&dir).ok().filter(|c| *c != dir);
        Self { dir, canonical }
    }

    /// The directory as given.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `path` relative to the directory, `/`-separated; `""` is the directory itself. A relative
    /// `path` is taken as relative to the directory. `None` for a path outside it, one that
    /// climbs out with `..`, or one that is not UTF-8.
    pub fn relative(&self, path: &Path) -> Option<String> {
        let rel = match path.strip_prefix(&self.dir) {
            Ok(p) => p,
            Err(_) => match self.canonical.as_deref().and_then(|c| path.strip_prefix(c).ok()) {
                Some(p) => p,
                None if path.is_relative() => path,
                None => return None,
            },
        };
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_str()?),
                Component::CurDir => {}
                _ => return None,
            }
        }
        Some(parts.join("/"))
    }
}

/// The watch loop: the initial full rescan, then debounced paths, full rescans when asked, and
/// the periodic rescan, until the target stops it, is closed, or the events end.
pub(crate) async fn run<T: WatchTarget>(
    mut target: T,
    mut raw: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    opts: WatchOptions,
    ready: watch::Sender<bool>,
    dir: String,
) {
    // The watcher is live: whatever changed before is seen by this rescan, and from here on by events.
    if !target.rescan(vec![String::new()], &[]).await {
        return;
    }
    let _ = ready.send(true);
    let mut debouncer = Debouncer::new(opts.debounce, opts.debounce_max);
    // Capped so that tokio's own `deadline + period` cannot overflow.
    let interval = opts.scan_interval.min(FAR_FUTURE);
    let mut ticker = (!interval.is_zero()).then(|| {
        let mut t = tokio::time::interval_at(later(Instant::now(), interval), interval);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let deadline = debouncer.next_deadline();
        tokio::select! {
            ev = raw.recv() => {
                let Some(ev) = ev else { return };
                let now = Instant::now();
                note_event(&target, &dir, &mut debouncer, ev, now);
                // Take whatever else is queued without waking up again for each.
                while let Ok(ev) = raw.try_recv() {
                    note_event(&target, &dir, &mut debouncer, ev, now);
                }
            }
            _ = sleep_until_opt(deadline) => {
                let now = Instant::now();
                let Due { paths, busy } = debouncer.take_due(now);
                if !paths.is_empty() {
                    tracing::debug!(%dir, ?paths, ?busy, "looking again");
                    // A full rescan (after lost events) also reads the files that wait for their
                    // turn while still being written: busy too.
                    let mut read_busy = busy.clone();
                    if paths.iter().any(String::is_empty) {
                        read_busy.extend(debouncer.busy(now));
                    }
                    if !target.rescan(paths, &read_busy).await {
                        return;
                    }
                    // Looked at again once quiet: what a half-written read could not settle is then settled.
                    let now = Instant::now();
                    for rel in busy {
                        debouncer.note(rel, now, false);
                    }
                }
            }
            _ = tick_opt(&mut ticker) => {
                tracing::debug!(%dir, "periodic full rescan");
                // A file still being written is read as busy here too; its turn once quiet comes anyway.
                if !target.rescan(vec![String::new()], &debouncer.busy(Instant::now())).await {
                    return;
                }
            }
            _ = target.closed() => return,
        }
    }
}

fn note_event<T: WatchTarget>(
    target: &T,
    dir: &str,
    debouncer: &mut Debouncer,
    ev: notify::Result<notify::Event>,
    now: Instant,
) {
    match ev {
        Err(e) => {
            tracing::warn!(%dir, "file watcher error, rescanning everything: {e}");
            debouncer.note(String::new(), now, false);
        }
        Ok(ev) if ev.need_rescan() => {
            tracing::debug!(%dir, "the file watcher lost events, rescanning everything");
            debouncer.note(String::new(), now, false);
        }
        Ok(ev) if !is_relevant(&ev.kind) => {}
        Ok(ev) => {
            let structural = is_structural(&ev.kind);
            for path in &ev.paths {
                if let Some(rel) = target.relative(path) {
                    debouncer.note(rel, now, structural);
                }
            }
        }
    }
}

/// Per-path debounce: a path is due `debounce` after its last event, and never later than
/// `debounce_max` after its first one.
#[derive(Debug)]
pub(crate) struct Debouncer {
    debounce: Duration,
    debounce_max: Duration,
    pending: HashMap<String, Pending>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    first: Instant,
    last: Instant,
    /// The last event was a rename, a removal or a directory creation: nothing half-written to
    /// wait for, so the path goes with the next batch (a rename's two sides are read together).
    structural: bool,
}

impl Debouncer {
    /// A maximum below the quiet time is taken as the quiet time: a path handed over busy at
    /// every maximum would never be read quiet.
    pub(crate) fn new(debounce: Duration, debounce_max: Duration) -> Self {
        Self { debounce, debounce_max: debounce_max.max(debounce), pending: HashMap::new() }
    }

    pub(crate) fn note(&mut self, rel: String, now: Instant, structural: bool) {
        self.pending
            .entry(rel)
            .and_modify(|p| {
                p.last = now;
                p.structural = structural;
            })
            .or_insert(Pending { first: now, last: now, structural });
    }

    fn due_at(&self, p: &Pending) -> Instant {
        later(p.last, self.debounce).min(later(p.first, self.debounce_max))
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| self.due_at(p)).min()
    }

    /// Whether the file at `rel` is still being written at `now`: an event within `debounce`,
    /// and not a rename or removal (nor `""`, everything, which is no file).
    fn is_busy(&self, rel: &str, p: &Pending, now: Instant) -> bool {
        !rel.is_empty() && !p.structural && later(p.last, self.debounce) > now
    }

    /// The pending paths still being written at `now`, sorted: what a full rescan reads as busy.
    pub(crate) fn busy(&self, now: Instant) -> Vec<String> {
        let mut busy: Vec<String> =
            self.pending.iter().filter(|(k, p)| self.is_busy(k, p, now)).map(|(k, _)| k.clone()).collect();
        busy.sort();
        busy
    }

    /// Removes and returns the paths due at `now` (with the structural ones, when any is due).
    pub(crate) fn take_due(&mut self, now: Instant) -> Due {
        if !self.pending.values().any(|p| self.due_at(p) <= now) {
            return Due::default();
        }
        let mut paths: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.structural || self.due_at(p) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        paths.sort();
        let mut busy = Vec::new();
        for k in &paths {
            if let Some(p) = self.pending.remove(k)
                && self.is_busy(k, &p, now)
            {
                busy.push(k.clone());
            }
        }
        Due { paths, busy }
    }
}

/// The paths the debounce hands over together.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Due {
    /// Every path due, sorted.
    pub(crate) paths: Vec<String>,
    /// Those of `paths` still being written: handed over at the maximum, not after quiet.
    pub(crate) busy: Vec<String>,
}

/// About 30 years: a timer that never fires in practice.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `at + d`, with `d` capped at [`FAR_FUTURE`] and never overflowing.
fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d.min(FAR_FUTURE)).or_else(|| at.checked_add(Duration::from_secs(86_400))).unwrap_or(at)
}

/// Which events say something about content: not opens, reads or read-closes (our own reads
/// cause those).
fn is_relevant(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

fn is_structural(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Modify(ModifyKind::Name(_)) | EventKind::Remove(_) | EventKind::Create(CreateKind::Folder)
    )
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn tick_opt(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
