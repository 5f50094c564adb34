//! Filesystem mode's change detection: Kubernetes-shaped YAML documents in files under a directory.
//!
//! [`FsSource`] keeps a cache of every object the files define (the host's `get`/`list` read it)
//! and reports *which* objects changed ([`SourceEvent`]); the host always re-reads the cache.
//!
//! - [`FsSource::scan`] reads every file; [`FsSource::watch`] adds a recursive `notify` watcher
//!   with a per-file debounce and a periodic full scan that repairs dropped events.
//! - A file that does not parse keeps all its objects at their last good state and is reported
//!   as a [`FileProblem`] (`file:line:column: message`) until it parses again.
//! - The same object defined in two files is a conflict: the file that had it first keeps it,
//!   both files get a problem naming the other one.
//! - Generations are bumped when the spec's content changes, starting from what the host knows.
//!
//! Only regular files ending in `.yaml` or `.yml` count. Hidden files and directories (a name
//! starting with `.`) and editor leftovers (a name ending in `~`, `.swp`, `.swo`, `.swx`) are
//! ignored, and symbolic links to directories are not followed (symbolic links to files are).
//!
//! One module per mechanism: `walk` finds the files, `read` reads and hashes one, `document`
//! parses and checks its documents, `cache` applies a batch of reads (generations, conflicts),
//! and [`watch`] is the debounced watcher, which also watches the plugin directory.

mod cache;
mod document;
mod raw;
mod read;
mod walk;
pub mod watch;

#[cfg(test)]
mod test_support;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::health::{Conditions, RESOURCES_READABLE};
use crate::model::ObjectKey;
use cache::State;
use read::FileRead;
use walk::{gather, is_ignored_rel, is_under};
use watch::{DirWatch, Root, WatchError, WatchOptions, WatchTarget};

/// Where the resources are and how changes are detected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsOptions {
    /// The resources directory, watched recursively.
    pub dir: PathBuf,
    /// Quiet time after the last event for a file before it is read.
    pub debounce: Duration,
    /// Longest wait after the first event for a file before it is read, however busy it is.
    pub debounce_max: Duration,
    /// Interval of the periodic full scan of the watcher; zero turns it off.
    pub scan_interval: Duration,
}

impl FsOptions {
    /// The options the host config asks for: its resources directory and queue debounce, and a
    /// full scan at least every minute (sooner when the resync interval is shorter). The host and
    /// `steward check` both read the resources this way.
    pub fn for_config(cfg: &crate::config::Config) -> Self {
        Self {
            dir: cfg.resources.clone(),
            debounce: cfg.queue.debounce,
            debounce_max: cfg.queue.debounce_max,
            scan_interval: cfg.resync.min(Duration::from_secs(60)),
        }
    }

    /// Options for `dir` with a 200 ms debounce, at most 2 s, and a full scan every 5 minutes.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            debounce: Duration::from_millis(200),
            debounce_max: Duration::from_secs(2),
            scan_interval: Duration::from_secs(300),
        }
    }
}

pub use super::{FileProblem, SourceEvent, SourceObject};

/// Why [`FsSource::watch`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The watcher could not be created or could not watch the directory.
    #[error("cannot watch the resources directory {dir}: {source}")]
    Watch {
        /// The directory.
        dir: String,
        /// Why.
        #[source]
        source: notify::Error,
    },
    /// `watch` was called outside a tokio runtime.
    #[error("watching the resources directory {dir} needs a tokio runtime")]
    NoRuntime {
        /// The directory.
        dir: String,
    },
}

/// Keeps a watch running; dropping it stops the watcher, the debounce and the periodic scan.
#[derive(Debug)]
pub struct WatchHandle {
    inner: DirWatch,
}

impl WatchHandle {
    /// Waits until the watcher is live and its initial scan is done (changes from then on are seen).
    pub async fn ready(&self) {
        self.inner.ready().await;
    }
}

/// The filesystem source: a cache of the objects under a directory and the problems of its files.
pub struct FsSource {
    opts: FsOptions,
    /// `opts.dir`, and its canonical form to relativize paths a watcher reports that way.
    root: Root,
    state: RwLock<State>,
    /// Kinds whose objects have no namespace (see [`FsSource::set_cluster_scoped`]).
    cluster_scoped: RwLock<Arc<BTreeSet<String>>>,
    /// Serializes scans and reloads: each reads files and then applies what it read.
    io: tokio::sync::Mutex<()>,
    files_read: AtomicU64,
    /// Where the full scans report `ResourcesReadable`, once given ([`FsSource::report_to`]).
    conditions: OnceLock<Conditions>,
}

impl fmt::Debug for FsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsSource").field("dir", &self.opts.dir).field("objects", &self.len()).finish()
    }
}

impl FsSource {
    /// A source for `opts.dir` with an empty cache. `known` holds, per key, the generation and
    /// spec hash the host persisted, so that a restart does not bump generations.
    pub fn new(opts: FsOptions, known: HashMap<ObjectKey, (u64, u64)>) -> Arc<Self> {
        Arc::new(Self {
            root: Root::new(&opts.dir),
            opts,
            state: RwLock::new(State::with_known(known)),
            cluster_scoped: RwLock::new(Arc::new(BTreeSet::new())),
            io: tokio::sync::Mutex::new(()),
            files_read: AtomicU64::new(0),
            conditions: OnceLock::new(),
        })
    }

    /// Reports the condition `ResourcesReadable` to `conditions` at every full scan from now
    /// on: `False` while the directory is missing, not a directory or unreadable (the objects
    /// read before are kept meanwhile, not deleted), `True` once a scan reads it again. Only
    /// the first registry given is kept.
    pub fn report_to(&self, conditions: &Conditions) {
        let _ = self.conditions.set(conditions.clone());
    }

    /// The options it was made with.
    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    /// Reads every file, updates the cache, and returns every difference from the cache: the
    /// first scan reports `Changed` for every object. Files the cache knows that are gone are
    /// reported `Deleted`; a directory that cannot be read keeps what the cache has from it.
    pub async fn scan(&self) -> Vec<SourceEvent> {
        self.rescan(vec![String::new()], &[]).await
    }

    /// Re-reads one file, absolute or relative to the directory. A directory (or a path that
    /// was one) re-reads the files under it. Paths outside the directory, hidden paths and
    /// editor leftovers are ignored.
    pub async fn reload_file(&self, path: &Path) -> Vec<SourceEvent> {
        match self.relative(path) {
            Some(rel) if !is_ignored_rel(&rel) => self.rescan(vec![rel], &[]).await,
            _ => Vec::new(),
        }
    }

    /// Starts watching: a recursive `notify` watcher, a per-file debounce, and a full scan every
    /// `scan_interval`. The watch begins with a full scan that reports differences from the
    /// cache (nothing, right after [`FsSource::scan`], unless a file changed in between).
    /// Needs a tokio runtime; the events end when the [`WatchHandle`] is dropped.
    pub fn watch(self: &Arc<Self>) -> Result<(mpsc::UnboundedReceiver<SourceEvent>, WatchHandle), SourceError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let opts = WatchOptions {
            debounce: self.opts.debounce,
            debounce_max: self.opts.debounce_max,
            scan_interval: self.opts.scan_interval,
            recursive: true,
        };
        let target = Target { src: Arc::clone(self), tx };
        let inner =
            watch::watch_dir(&self.opts.dir, "the resources directory", &opts, target).map_err(|e| match e {
                WatchError::Watch { dir, source, .. } => SourceError::Watch { dir, source },
                WatchError::NoRuntime { dir, .. } => SourceError::NoRuntime { dir },
            })?;
        Ok((rx, WatchHandle { inner }))
    }

    /// Sets the kinds whose objects are cluster-scoped: by the namespace rule
    /// ([`crate::model::namespace_for`]) their objects have the empty namespace, whatever a
    /// document says; every other kind is namespaced and defaults to
    /// [`crate::model::DEFAULT_NAMESPACE`]. Until this is called every kind is namespaced.
    /// When the set changes, the next scan reads every file again, so that an object whose
    /// kind changed scope is reported `Deleted` under its old key and `Changed` under its new one.
    /// Returns whether the set changed.
    pub async fn set_cluster_scoped(&self, kinds: BTreeSet<String>) -> bool {
        // No scan is in flight while the rule changes: none can record bytes read under the old one.
        let _io = self.io.lock().await;
        let mut current = self.cluster_scoped.write().unwrap_or_else(|e| e.into_inner());
        if **current == kinds {
            return false;
        }
        *current = Arc::new(kinds);
        drop(current);
        self.write().forget_contents();
        true
    }

    /// The object with this key, if a file defines it.
    pub fn get(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.read().object(key)
    }

    /// The objects of `kind`, in `namespace` or all namespaces, sorted by (namespace, name).
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<SourceObject> {
        let state = self.read();
        let from = ObjectKey::new(kind, namespace.unwrap_or(""), "");
        state
            .objects
            .range(from..)
            .take_while(|(k, _)| k.kind() == kind && namespace.is_none_or(|ns| k.namespace() == ns))
            .filter_map(|(_, o)| state.object_of(o))
            .collect()
    }

    /// Drops the generation kept for `key` while no file defines it (see [`Source::forget`]);
    /// a key a file defines again is left as it is.
    ///
    /// [`Source::forget`]: crate::source::Source::forget
    pub fn forget(&self, key: &ObjectKey) {
        self.write().forget(key);
    }

    /// The generation of the object with this key, if a file defines it.
    pub fn generation(&self, key: &ObjectKey) -> Option<u64> {
        self.read().generation(key)
    }

    /// Every key in the cache, sorted.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read().objects.keys().cloned().collect()
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// True when the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.read().objects.is_empty()
    }

    /// The current problems of every file, sorted by file, then position.
    pub fn problems(&self) -> Vec<FileProblem> {
        self.read().problems.values().flatten().cloned().collect()
    }

    /// The current problems of one file (relative path), sorted by position.
    pub fn file_problems(&self, file: &str) -> Vec<FileProblem> {
        self.read().problems.get(file).cloned().unwrap_or_default()
    }

    /// What is wrong around this object, if anything: it is defined in more than one file, or
    /// its file currently fails to parse and its last good version is used.
    pub fn object_problem(&self, key: &ObjectKey) -> Option<String> {
        self.read().object_problems.get(key).cloned()
    }

    /// The keys a file defines (as of its last good read), in the order of its documents.
    pub fn objects_in_file(&self, file: &str) -> Vec<ObjectKey> {
        self.read().files.get(file).map(|f| f.docs.iter().map(|d| d.key.clone()).collect()).unwrap_or_default()
    }

    /// Every file currently known (read successfully at least once, or failing), sorted.
    pub fn files(&self) -> Vec<String> {
        self.read().files.keys().cloned().collect()
    }

    /// How many file reads were done so far (a file whose bytes did not change is not parsed again).
    pub fn files_read(&self) -> u64 {
        self.files_read.load(Ordering::Relaxed)
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// `path` relative to the directory, `/`-separated; `""` is the directory itself.
    fn relative(&self, path: &Path) -> Option<String> {
        self.root.relative(path)
    }

    /// Re-reads the files at or under each relative path (`""`: everything) and applies the
    /// results in one step, so that a file renamed within one batch is not seen as deleted.
    /// A file of `busy` (still being written) may add and change objects but removes none.
    async fn rescan(&self, rels: Vec<String>, busy: &[String]) -> Vec<SourceEvent> {
        let _io = self.io.lock().await;
        let (known_files, hashes) = {
            let state = self.read();
            let known: Vec<String> =
                state.files.keys().filter(|f| rels.iter().any(|r| is_under(f, r))).cloned().collect();
            let hashes: HashMap<String, (u64, u64)> =
                known.iter().filter_map(|f| state.files[f].content.map(|h| (f.clone(), h))).collect();
            (known, hashes)
        };
        let dir = self.opts.dir.clone();
        if rels.iter().any(String::is_empty) {
            let checked = dir.clone();
            let problem = tokio::task::spawn_blocking(move || root_problem(&checked)).await.ok().flatten();
            self.report_root(problem.as_deref());
            if problem.is_some() {
                // Nothing is read, so nothing the cache holds is reported deleted.
                return Vec::new();
            }
        }
        let scopes = Arc::clone(&self.cluster_scoped.read().unwrap_or_else(|e| e.into_inner()));
        let gathered = tokio::task::spawn_blocking(move || gather(&dir, &rels, known_files, &hashes, &scopes)).await;
        let updates = match gathered {
            Ok(u) => u,
            Err(e) => {
                tracing::error!(dir = %self.opts.dir.display(), "reading the resources failed: {e}");
                return Vec::new();
            }
        };
        let reads = updates.iter().filter(|(_, r)| !matches!(r, FileRead::Missing)).count();
        self.files_read.fetch_add(reads as u64, Ordering::Relaxed);
        let mut events = Vec::new();
        self.write().apply(updates, busy, &mut events);
        events
    }
}

impl FsSource {
    /// Sets `ResourcesReadable` from a full scan's look at the directory (`problem`: why it cannot be read).
    fn report_root(&self, problem: Option<&str>) {
        let Some(c) = self.conditions.get() else { return };
        let dir = self.opts.dir.display();
        match problem {
            None => c.ok(RESOURCES_READABLE, None, "Read", format!("the resources directory {dir} is read")),
            Some(why) => {
                tracing::warn!(dir = %dir, "the resources directory cannot be read; keeping the objects read before: {why}");
                c.fail(
                    RESOURCES_READABLE,
                    None,
                    "DirectoryUnreadable",
                    format!(
                        "the resources directory {dir} cannot be read ({why}); the objects read before are kept \
                         and not reconciled for changes; restore the directory (setting `resources`), it is read \
                         again at the next scan"
                    ),
                )
            }
        }
    }
}

/// Why `dir` cannot be read as the resources directory, or `None` when it can.
fn root_problem(dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return Some("it is not a directory".into()),
        Ok(_) => {}
        Err(e) => return Some(e.to_string()),
    }
    std::fs::read_dir(dir).err().map(|e| e.to_string())
}

/// What the watcher drives: re-reads of the source, whose differences go to the event channel.
struct Target {
    src: Arc<FsSource>,
    tx: mpsc::UnboundedSender<SourceEvent>,
}

impl WatchTarget for Target {
    fn relative(&self, path: &Path) -> Option<String> {
        self.src.relative(path).filter(|rel| !is_ignored_rel(rel))
    }

    async fn rescan(&mut self, rels: Vec<String>, busy: &[String]) -> bool {
        self.src.rescan(rels, busy).await.into_iter().all(|e| self.tx.send(e).is_ok())
    }

    async fn closed(&self) {
        self.tx.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::test_support::*;
    use super::*;

    #[tokio::test]
    async fn multi_document_files_default_namespace_labels_and_listing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(
            dir,
            "servers.yaml",
            "# two servers\n---\napiVersion: steward.dev/v1\nkind: MCPServer\nmetadata:\n  name: git\n  labels:\n    team: core\n  annotations:\n    note: hi\nspec:\n  command: git-mcp\n  args: [a, b]\n---\n\n---\napiVersion: steward.dev/v1\nkind: MCPServer\nmetadata:\n  name: fs\n  namespace: tools\n",
        );
        write(dir, "sub/dir/wf.yml", &doc("Workflow", "nightly", "steps: []"));
        write(dir, "sub/zz.yaml", &doc("MCPServer", "alpha", "x: 1"));
        let src = FsSource::new(opts(dir), HashMap::new());
        let events = src.scan().await;
        let git = key("MCPServer", "default", "git");
        let fs = key("MCPServer", "tools", "fs");
        let alpha = key("MCPServer", "default", "alpha");
        let nightly = key("Workflow", "default", "nightly");
        assert_eq!(set(&events), set(&[changed(&git), changed(&fs), changed(&alpha), changed(&nightly)]));
        assert_eq!(events.len(), 4);
        assert_eq!(src.len(), 4);
        assert!(src.problems().is_empty(), "{:?}", src.problems());

        let o = src.get(&git).unwrap();
        assert_eq!(o.location.file, "servers.yaml");
        assert_eq!(o.location.line, 3, "the document starts after the comment and `---`");
        assert_eq!(o.raw.api_version, "steward.dev/v1");
        assert_eq!(o.raw.generation, 1);
        assert_eq!(o.raw.labels, BTreeMap::from([("team".to_string(), "core".to_string())]));
        assert_eq!(o.raw.annotations, BTreeMap::from([("note".to_string(), "hi".to_string())]));
        assert_eq!(o.raw.spec, r#"{"args":["a","b"],"command":"git-mcp"}"#);
        assert_eq!(o.raw.status, None);
        assert!(!o.raw.deleting);
        let f = src.get(&fs).unwrap();
        assert_eq!((f.raw.namespace.as_str(), f.raw.spec.as_str(), f.location.line), ("tools", "{}", 17));
        assert_eq!(src.get(&nightly).unwrap().location.file, "sub/dir/wf.yml");

        let names = |v: Vec<SourceObject>| {
            v.into_iter().map(|o| format!("{}/{}", o.raw.namespace, o.raw.name)).collect::<Vec<_>>()
        };
        assert_eq!(names(src.list("MCPServer", None)), ["default/alpha", "default/git", "tools/fs"]);
        assert_eq!(names(src.list("MCPServer", Some("tools"))), ["tools/fs"]);
        assert_eq!(names(src.list("MCPServer", Some("nope"))), Vec::<String>::new());
        assert_eq!(names(src.list("Workflow", None)), ["default/nightly"]);
        assert_eq!(names(src.list("Workflo", None)), Vec::<String>::new());
        assert_eq!(src.keys(), vec![alpha.clone(), git.clone(), fs.clone(), nightly.clone()]);
        assert_eq!(src.objects_in_file("servers.yaml"), vec![git, fs]);

        // Nothing changed: a second scan reports nothing and does not parse again.
        assert_eq!(src.scan().await, vec![]);
    }

    #[test]
    fn the_source_and_its_futures_can_be_shared_across_tasks() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>(_: &T) {}
        send_sync::<FsSource>();
        send_sync::<SourceError>();
        send::<Option<WatchHandle>>(&None);
        let src = FsSource::new(opts(Path::new("/nonexistent")), HashMap::new());
        send(&src.scan());
        send(&src.reload_file(Path::new("a.yaml")));
        // Outside a runtime, watch is an error, not a panic.
        assert!(matches!(src.watch(), Err(SourceError::NoRuntime { .. })));
    }

    #[tokio::test]
    async fn watching_a_missing_directory_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let src = FsSource::new(opts(&tmp.path().join("missing")), HashMap::new());
        let e = src.watch().unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        assert_eq!(src.scan().await, vec![]);
    }

    #[test]
    fn paths_relative_to_the_directory() {
        let src = FsSource::new(opts(Path::new("/res")), HashMap::new());
        assert_eq!(src.relative(Path::new("/res/a/b.yaml")).as_deref(), Some("a/b.yaml"));
        assert_eq!(src.relative(Path::new("/res")).as_deref(), Some(""));
        assert_eq!(src.relative(Path::new("a/./b.yaml")).as_deref(), Some("a/b.yaml"));
        assert_eq!(src.relative(Path::new("/other/a.yaml")), None);
        assert_eq!(src.relative(Path::new("../a.yaml")), None);
    }

    #[tokio::test]
    async fn cluster_scoped_kinds_have_no_namespace_and_a_change_of_scope_re_keys_their_objects() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let in_team = "apiVersion: v1\nkind: Cluster\nmetadata:\n  name: d\n  namespace: team\n";
        write(dir, "a.yaml", &[doc("Cluster", "c", "v: 1"), in_team.to_string(), doc("K", "k", "v: 1")].join("---\n"));
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;
        // Until told otherwise every kind is namespaced: no namespace is `default`.
        let (c, d, k) = (key("Cluster", "default", "c"), key("Cluster", "team", "d"), key("K", "default", "k"));
        assert_eq!(src.keys(), vec![c.clone(), d.clone(), k.clone()]);

        assert!(src.set_cluster_scoped(BTreeSet::from(["Cluster".to_string()])).await);
        let (c2, d2) = (key("Cluster", "", "c"), key("Cluster", "", "d"));
        let events = src.scan().await;
        assert_eq!(set(&events), set(&[deleted(&c), deleted(&d), changed(&c2), changed(&d2)]));
        assert_eq!(src.keys(), vec![c2.clone(), d2, k.clone()]);
        assert_eq!(src.get(&c2).unwrap().raw.namespace, "");
        assert_eq!(src.list("Cluster", Some("")).len(), 2);
        assert_eq!(src.get(&k).unwrap().raw.namespace, "default", "a namespaced kind still defaults");

        // The same set again changes nothing.
        assert!(!src.set_cluster_scoped(BTreeSet::from(["Cluster".to_string()])).await);
        assert_eq!(src.scan().await, vec![]);
        assert_eq!(src.get(&c2).unwrap().raw.generation, 1);
    }
}
