//! Hot reload: the plugin directory, watched by the host's debounced watcher, reloads, adds or removes plugins as their files change.
//!
//! The same watcher as the resources ([`crate::source::fs::watch`]): a file is reloaded once
//! it has been quiet for [`SETTLE`] (so a file being copied in is read whole), and never later
//! than [`SETTLE_MAX`] after its first change however busy it is; a watcher error, lost events
//! (notify's `need_rescan`) and a rescan every [`RESCAN_EVERY`] look at the whole directory.
//! A whole-directory look reloads a file only when its bytes differ from the last the watcher
//! handed over, so that a broken file is not reported again and again.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::registry::{PluginSet, PluginState, is_plugin_file};
use crate::source::fs::watch::{DirWatch, Root, WatchError, WatchOptions, WatchTarget, watch_dir};

/// How long a plugin file must be quiet before it is reloaded.
pub const SETTLE: Duration = Duration::from_millis(200);

/// The longest a changed plugin file waits to be reloaded, however often it changes.
pub const SETTLE_MAX: Duration = Duration::from_secs(2);

/// How often the whole plugin directory is looked at, to repair events the watcher missed.
pub const RESCAN_EVERY: Duration = Duration::from_secs(300);

/// Keeps the watch running; dropping it stops watching.
#[derive(Debug)]
pub struct WatchHandle {
    inner: DirWatch,
}

impl WatchHandle {
    /// Waits until the watcher is live and has looked at the whole directory once: a change
    /// from then on is seen.
    pub async fn ready(&self) {
        self.inner.ready().await;
    }
}

/// Starts watching `set`'s directory. Changed and new `*.wasm` files are reloaded once quiet
/// for [`SETTLE`] (at most [`SETTLE_MAX`] after their first change); removed ones are unloaded.
/// The watch begins by looking at the whole directory, so a file changed after
/// [`PluginSet::load_all`] and before the watch is not missed. Needs a tokio runtime.
pub fn watch(set: Arc<PluginSet>) -> Result<WatchHandle, WatchError> {
    let opts =
        WatchOptions { debounce: SETTLE, debounce_max: SETTLE_MAX, scan_interval: RESCAN_EVERY, recursive: false };
    let dir = set.dir().to_path_buf();
    let inner = watch_dir(&dir, "the plugin directory", &opts, Target::new(set))?;
    Ok(WatchHandle { inner })
}

/// What the watcher needs of a plugin set; a trait so that the watcher is tested without
/// compiling plugins.
pub(crate) trait PluginFiles: Send + Sync + 'static {
    /// The plugin directory.
    fn dir(&self) -> &Path;
    /// The files the set knows, each with whether its current bytes were refused (the file
    /// failed to load, or a newer version of a running plugin was refused).
    fn known(&self) -> Vec<(PathBuf, bool)>;
    /// Loads or reloads `file`.
    fn reload(&self, file: &Path) -> impl Future<Output = ()> + Send;
    /// Forgets `file`, which is gone.
    fn remove(&self, file: &Path) -> impl Future<Output = ()> + Send;
}

impl PluginFiles for Arc<PluginSet> {
    fn dir(&self) -> &Path {
        PluginSet::dir(self)
    }

    fn known(&self) -> Vec<(PathBuf, bool)> {
        let dir = PluginSet::dir(self);
        self.statuses()
            .into_iter()
            // Registry plugins are not files of the directory.
            .filter(|s| s.source.is_none())
            .map(|s| (dir.join(&s.file), s.state == PluginState::Failed || s.message.is_some()))
            .collect()
    }

    async fn reload(&self, file: &Path) {
        PluginSet::reload(self, file).await;
    }

    async fn remove(&self, file: &Path) {
        PluginSet::remove(self, file).await;
    }
}

/// SHA-256 of a file's bytes, `None` when it cannot be read.
type Fingerprint = Option<[u8; 32]>;

/// The watcher's side of a plugin set: which paths count, and what a change does.
pub(crate) struct Target<P> {
    set: P,
    root: Root,
    /// What the bytes of each file were when last handed to the set.
    seen: BTreeMap<PathBuf, Fingerprint>,
}

impl<P: PluginFiles> Target<P> {
    pub(crate) fn new(set: P) -> Self {
        let root = Root::new(set.dir());
        Self { set, root, seen: BTreeMap::new() }
    }

    /// Reloads, or removes when gone, and remembers the bytes handed over.
    async fn hand_over(&mut self, file: PathBuf, fingerprint: Option<Fingerprint>) {
        match fingerprint {
            Some(f) => {
                self.set.reload(&file).await;
                self.seen.insert(file, f);
            }
            None => {
                self.set.remove(&file).await;
                self.seen.remove(&file);
            }
        }
    }

    /// Looks at the whole directory: new and changed files are reloaded, gone ones removed.
    async fn rescan_all(&mut self, done: &BTreeSet<PathBuf>) {
        let known = self.set.known();
        let dir = self.set.dir().to_path_buf();
        let listed = tokio::task::spawn_blocking(move || on_disk(&dir)).await.unwrap_or_else(|e| {
            tracing::warn!("looking at the plugin directory failed: {e}");
            None
        });
        // A directory that cannot be listed keeps what is loaded.
        let Some(on_disk) = listed else { return };
        for (file, refused) in known {
            if done.contains(&file) {
                continue;
            }
            match on_disk.get(&file) {
                None => self.hand_over(file, None).await,
                Some(now) => match self.seen.get(&file) {
                    Some(before) if before == now => {}
                    // Bytes the set refused before the watch began: not refused again until they change.
                    None if refused => {
                        self.seen.insert(file, *now);
                    }
                    _ => self.hand_over(file, Some(*now)).await,
                },
            }
        }
        let known: BTreeSet<PathBuf> = self.set.known().into_iter().map(|(f, _)| f).collect();
        self.seen.retain(|f, _| on_disk.contains_key(f) || done.contains(f));
        for (file, now) in on_disk {
            if !known.contains(&file) && !done.contains(&file) && self.seen.get(&file) != Some(&now) {
                self.hand_over(file, Some(now)).await;
            }
        }
    }
}

impl<P: PluginFiles> WatchTarget for Target<P> {
    fn relative(&self, path: &Path) -> Option<String> {
        let rel = self.root.relative(path)?;
        // The directory itself (removed, recreated, its attributes changed): look at all of it.
        if rel.is_empty() {
            return Some(rel);
        }
        (!rel.contains('/') && is_plugin_file(Path::new(&rel))).then_some(rel)
    }

    /// A busy plugin file read half-written is refused as not loading, and loads once read
    /// again when quiet; nothing needs holding back.
    async fn rescan(&mut self, rels: Vec<String>, _busy: &[String]) -> bool {
        let mut done = BTreeSet::new();
        let mut all = false;
        for rel in rels {
            if rel.is_empty() {
                all = true;
                continue;
            }
            let file = self.set.dir().join(&rel);
            let read = file.clone();
            let fingerprint = tokio::task::spawn_blocking(move || fingerprint(&read)).await.ok().flatten();
            self.hand_over(file.clone(), fingerprint).await;
            done.insert(file);
        }
        if all {
            self.rescan_all(&done).await;
        }
        true
    }
}

/// `Some(None)` for a file that exists but cannot be read, `None` for one that is gone.
fn fingerprint(file: &Path) -> Option<Fingerprint> {
    match std::fs::read(file) {
        Ok(bytes) => Some(Some(Sha256::digest(&bytes).into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) if file.exists() => Some(None),
        Err(_) => None,
    }
}

/// The plugin files in `dir` with their fingerprints, paths as `dir.join(name)`; `None` when
/// the directory cannot be listed.
fn on_disk(dir: &Path) -> Option<BTreeMap<PathBuf, Fingerprint>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot list the plugin directory; keeping what is loaded: {e}");
            return None;
        }
    };
    let mut out = BTreeMap::new();
    for entry in entries.flatten() {
        let file = dir.join(entry.file_name());
        if is_plugin_file(&file)
            && let Some(f) = fingerprint(&file)
        {
            out.insert(file, f);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
