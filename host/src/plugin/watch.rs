//! Hot reload: watches the plugin directory and reloads, adds or removes plugins as their files change.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::registry::{PluginSet, is_plugin_file};

/// How long the directory must be quiet before changed files are reloaded.
pub const SETTLE: Duration = Duration::from_millis(200);

/// Keeps the watch running; dropping it stops watching.
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `set`'s directory. Changed and new `*.wasm` files are
/// reloaded once the directory has been quiet for [`SETTLE`] (so a file being
/// copied in is read whole); removed ones are unloaded.
pub fn watch(set: Arc<PluginSet>) -> notify::Result<WatchHandle> {
    let (tx, mut rx) = mpsc::unbounded_channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            for p in ev.paths {
                if is_plugin_file(&p) {
                    let _ = tx.send(p);
                }
            }
        }
    })?;
    watcher.watch(set.dir(), RecursiveMode::NonRecursive)?;
    let task = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut changed = BTreeSet::from([first]);
            loop {
                match tokio::time::timeout(SETTLE, rx.recv()).await {
                    Ok(Some(p)) => {
                        changed.insert(p);
                    }
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            for file in changed {
                if file.exists() {
                    set.reload(&file).await;
                } else {
                    set.remove(&file).await;
                }
            }
        }
    });
    Ok(WatchHandle { _watcher: watcher, task })
}
