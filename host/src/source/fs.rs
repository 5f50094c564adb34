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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use notify::Watcher as _;
use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;
use steward_sdk::RawObject;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::model::{ObjectKey, is_dns_label, is_dns_subdomain, is_kind};
use crate::yaml::{self, MAX_FILE_BYTES, YamlError};

/// The namespace of an object whose `metadata.namespace` is not set.
pub const DEFAULT_NAMESPACE: &str = "default";

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
pub struct WatchHandle {
    task: tokio::task::JoinHandle<()>,
    ready: watch::Receiver<bool>,
    _watcher: notify::RecommendedWatcher,
}

impl WatchHandle {
    /// Waits until the watcher is live and its initial scan is done (changes from then on are seen).
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }
}

impl fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchHandle").field("running", &!self.task.is_finished()).finish()
    }
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The filesystem source: a cache of the objects under a directory and the problems of its files.
pub struct FsSource {
    opts: FsOptions,
    /// `opts.dir` canonicalized, to relativize paths a watcher reports in canonical form.
    canonical_dir: Option<PathBuf>,
    state: RwLock<State>,
    /// Serializes scans and reloads: each reads files and then applies what it read.
    io: tokio::sync::Mutex<()>,
    files_read: AtomicU64,
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
        let canonical_dir = std::fs::canonicalize(&opts.dir).ok().filter(|c| *c != opts.dir);
        Arc::new(Self {
            opts,
            canonical_dir,
            state: RwLock::new(State { known, ..State::default() }),
            io: tokio::sync::Mutex::new(()),
            files_read: AtomicU64::new(0),
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    /// Reads every file, updates the cache, and returns every difference from the cache: the
    /// first scan reports `Changed` for every object. Files the cache knows that are gone are
    /// reported `Deleted`; a directory that cannot be read keeps what the cache has from it.
    pub async fn scan(&self) -> Vec<SourceEvent> {
        self.rescan(vec![String::new()]).await
    }

    /// Re-reads one file, absolute or relative to the directory. A directory (or a path that
    /// was one) re-reads the files under it. Paths outside the directory, hidden paths and
    /// editor leftovers are ignored.
    pub async fn reload_file(&self, path: &Path) -> Vec<SourceEvent> {
        match self.relative(path) {
            Some(rel) if !is_ignored_rel(&rel) => self.rescan(vec![rel]).await,
            _ => Vec::new(),
        }
    }

    /// Starts watching: a recursive `notify` watcher, a per-file debounce, and a full scan every
    /// `scan_interval`. The watch begins with a full scan that reports differences from the
    /// cache (nothing, right after [`FsSource::scan`], unless a file changed in between).
    /// Needs a tokio runtime; the events end when the [`WatchHandle`] is dropped.
    pub fn watch(self: &Arc<Self>) -> Result<(mpsc::UnboundedReceiver<SourceEvent>, WatchHandle), SourceError> {
        let dir = self.opts.dir.display().to_string();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| SourceError::NoRuntime { dir: dir.clone() })?;
        let (raw_tx, raw_rx) = mpsc::unbounded_channel::<notify::Result<notify::Event>>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            let _ = raw_tx.send(ev);
        })
        .map_err(|source| SourceError::Watch { dir: dir.clone(), source })?;
        watcher
            .watch(&self.opts.dir, notify::RecursiveMode::Recursive)
            .map_err(|source| SourceError::Watch { dir: dir.clone(), source })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready) = watch::channel(false);
        let task = runtime.spawn(watch_loop(Arc::clone(self), raw_rx, tx, ready_tx));
        Ok((rx, WatchHandle { task, ready, _watcher: watcher }))
    }

    /// The object with this key, if a file defines it.
    pub fn get(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.read().objects.get(key).cloned()
    }

    /// The objects of `kind`, in `namespace` or all namespaces, sorted by (namespace, name).
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<SourceObject> {
        let state = self.read();
        let from = ObjectKey::new(kind, namespace.unwrap_or(""), "");
        state
            .objects
            .range(from..)
            .take_while(|(k, _)| k.kind == kind && namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, o)| o.clone())
            .collect()
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
        let rel = match path.strip_prefix(&self.opts.dir) {
            Ok(p) => p,
            Err(_) => match self.canonical_dir.as_deref().and_then(|c| path.strip_prefix(c).ok()) {
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

    /// Re-reads the files at or under each relative path (`""`: everything) and applies the
    /// results in one step, so that a file renamed within one batch is not seen as deleted.
    async fn rescan(&self, rels: Vec<String>) -> Vec<SourceEvent> {
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
        let gathered = tokio::task::spawn_blocking(move || gather(&dir, &rels, known_files, &hashes)).await;
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
        self.write().apply(updates, &mut events);
        events
    }
}

// ---------------------------------------------------------------------------------------------
// The cache and how a batch of file reads changes it.

/// One valid document of a file.
#[derive(Clone, Debug, PartialEq)]
struct Doc {
    key: ObjectKey,
    api_version: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    spec: String,
    spec_hash: u64,
    /// Where the document starts.
    line: u64,
    /// Where `metadata.name` is.
    name_line: Option<u64>,
    name_column: Option<u64>,
}

/// What a file held at its last read.
#[derive(Debug, Default)]
struct FileState {
    /// The documents of the last good read (empty if it never parsed).
    docs: Vec<Doc>,
    /// Why the last read failed, if it did.
    error: Option<FileProblem>,
    /// (length, hash) of the bytes last read, to skip parsing the same bytes again.
    content: Option<(u64, u64)>,
}

/// The result of reading one file.
#[derive(Debug)]
enum FileRead {
    /// Gone (or not a file any more).
    Missing,
    /// The same bytes as at the last read.
    Unchanged,
    /// It could not be read or is invalid.
    Failed { problem: FileProblem, content: Option<(u64, u64)> },
    /// Every document is valid.
    Parsed { docs: Vec<Doc>, content: (u64, u64) },
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<String, FileState>,
    objects: BTreeMap<ObjectKey, SourceObject>,
    /// (generation, spec hash) of keys not present now: seeded by the host, added on deletes.
    known: HashMap<ObjectKey, (u64, u64)>,
    problems: BTreeMap<String, Vec<FileProblem>>,
    object_problems: HashMap<ObjectKey, String>,
    /// The files defining each key (a file defines a key at most once), kept in step with `files`
    /// so that a change costs what it touches, not what the directory holds.
    index: HashMap<ObjectKey, Vec<String>>,
    /// Keys defined in more than one file.
    multi: BTreeSet<ObjectKey>,
    /// Files whose last read failed.
    errored: BTreeSet<String>,
}

impl State {
    fn index_add(&mut self, key: &ObjectKey, file: &str) {
        // A sorted Vec, not a set: almost every key lives in one file, and a set's node
        // would cost more than the object itself.
        let files = self.index.entry(key.clone()).or_default();
        if let Err(at) = files.binary_search_by(|f| f.as_str().cmp(file)) {
            files.insert(at, file.to_string());
        }
        if files.len() > 1 {
            self.multi.insert(key.clone());
        }
    }

    fn index_remove(&mut self, key: &ObjectKey, file: &str) {
        if let Some(files) = self.index.get_mut(key) {
            if let Ok(at) = files.binary_search_by(|f| f.as_str().cmp(file)) {
                files.remove(at);
            }
            match files.len() {
                0 => {
                    self.index.remove(key);
                    self.multi.remove(key);
                }
                1 => {
                    self.multi.remove(key);
                }
                _ => {}
            }
        }
    }
}

/// A definition of a key in a file.
struct Def<'a> {
    file: &'a str,
    doc: &'a Doc,
}

impl State {
    fn apply(&mut self, updates: Vec<(String, FileRead)>, out: &mut Vec<SourceEvent>) {
        let mut affected = BTreeSet::new();
        for (rel, read) in updates {
            match read {
                FileRead::Unchanged => {}
                FileRead::Missing => {
                    self.errored.remove(&rel);
                    if let Some(f) = self.files.remove(&rel) {
                        for d in &f.docs {
                            self.index_remove(&d.key, &rel);
                        }
                        affected.extend(f.docs.into_iter().map(|d| d.key));
                    }
                }
                FileRead::Failed { problem, content } => {
                    self.errored.insert(rel.clone());
                    let f = self.files.entry(rel).or_default();
                    f.error = Some(problem);
                    f.content = content;
                }
                FileRead::Parsed { docs, content } => {
                    self.errored.remove(&rel);
                    let old = std::mem::take(&mut self.files.entry(rel.clone()).or_default().docs);
                    for d in &old {
                        self.index_remove(&d.key, &rel);
                    }
                    for d in &docs {
                        self.index_add(&d.key, &rel);
                    }
                    affected.extend(old.into_iter().map(|d| d.key));
                    affected.extend(docs.iter().map(|d| d.key.clone()));
                    let f = self.files.entry(rel).or_default();
                    f.docs = docs;
                    f.error = None;
                    f.content = Some(content);
                }
            }
        }

        let State { files, objects, known, problems, object_problems, index, multi, errored } = self;
        // Every definition of a key, files in path order.
        let defs = |key: &ObjectKey| -> Vec<Def<'_>> {
            let Some(in_files) = index.get(key) else { return Vec::new() };
            in_files
                .iter()
                .filter_map(|file| {
                    let (file, f) = files.get_key_value(file)?;
                    f.docs.iter().find(|d| d.key == *key).map(|doc| Def { file, doc })
                })
                .collect()
        };

        for key in &affected {
            let here = defs(key);
            let owner = match objects.get(key) {
                Some(o) if here.iter().any(|d| d.file == o.file) => here.iter().find(|d| d.file == o.file),
                _ => here.first(),
            };
            let Some(def) = owner else {
                if let Some(gone) = objects.remove(key) {
                    // Remembered so that the key keeps counting generations if it comes back.
                    known.insert(key.clone(), (gone.raw.generation, gone.spec_hash));
                    out.push(SourceEvent::Deleted(key.clone()));
                }
                continue;
            };
            let doc = def.doc;
            let prev = objects.get(key);
            let generation = match prev {
                Some(p) if p.spec_hash == doc.spec_hash => p.raw.generation,
                Some(p) => p.raw.generation.saturating_add(1),
                None => match known.get(key) {
                    Some(&(g, h)) if h == doc.spec_hash => g.max(1),
                    Some(&(g, _)) => g.saturating_add(1),
                    None => 1,
                },
            };
            let changed = match prev {
                None => true,
                Some(p) => {
                    p.spec_hash != doc.spec_hash
                        || p.raw.spec != doc.spec
                        || p.raw.api_version != doc.api_version
                        || p.raw.labels != doc.labels
                        || p.raw.annotations != doc.annotations
                        || p.file != def.file
                }
            };
            if changed || prev.is_some_and(|p| p.line != doc.line) {
                objects.insert(key.clone(), make_object(def.file, doc, generation));
            }
            // A present object's generation lives in `objects`; `known` holds only absent keys.
            known.remove(key);
            if changed {
                out.push(SourceEvent::Changed(key.clone()));
            }
        }

        // Problems are derived from scratch: file errors, then conflicts.
        let mut new_problems: BTreeMap<String, Vec<FileProblem>> = BTreeMap::new();
        let mut new_object_problems: HashMap<ObjectKey, String> = HashMap::new();
        for (file, f) in errored.iter().filter_map(|file| files.get_key_value(file)) {
            if let Some(e) = &f.error {
                new_problems.entry(file.clone()).or_default().push(e.clone());
                for doc in &f.docs {
                    if objects.get(&doc.key).is_some_and(|o| o.file == *file) {
                        new_object_problems.insert(
                            doc.key.clone(),
                            format!("{e} (the last good version of {} from this file is used)", doc.key),
                        );
                    }
                }
            }
        }
        for key in multi.iter() {
            let here = defs(key);
            if here.len() < 2 {
                continue;
            }
            let Some(owner) = objects.get(key).and_then(|o| here.iter().find(|d| d.file == o.file)) else {
                continue;
            };
            let at = |d: &Def<'_>| format!("{}:{}", d.file, d.doc.line);
            let others: Vec<String> = here.iter().filter(|d| d.file != owner.file).map(at).collect();
            for d in here.iter() {
                let message = if d.file == owner.file {
                    format!("{key} is also defined in {}; the definition here is used", others.join(", "))
                } else {
                    format!("{key} is already defined in {}; this definition is ignored", at(owner))
                };
                new_problems.entry(d.file.to_string()).or_default().push(FileProblem {
                    file: d.file.to_string(),
                    line: d.doc.name_line.or(Some(d.doc.line)),
                    column: d.doc.name_column,
                    message,
                });
            }
            let conflict =
                format!("{key} is defined in more than one file: {} is used, {} ignored", at(owner), others.join(", "));
            new_object_problems.entry(key.clone()).and_modify(|m| *m = format!("{conflict}; {m}")).or_insert(conflict);
        }
        for list in new_problems.values_mut() {
            list.sort_by(|a, b| (a.line, a.column, &a.message).cmp(&(b.line, b.column, &b.message)));
            list.dedup();
        }

        let all_files: BTreeSet<&String> = problems.keys().chain(new_problems.keys()).collect();
        for file in all_files {
            let (before, after) = (problems.get(file), new_problems.get(file));
            if before != after {
                out.push(match after {
                    Some(_) => SourceEvent::FileProblem { file: file.clone() },
                    None => SourceEvent::FileOk { file: file.clone() },
                });
            }
        }
        *problems = new_problems;
        *object_problems = new_object_problems;
    }
}

fn make_object(file: &str, doc: &Doc, generation: u64) -> SourceObject {
    SourceObject {
        raw: RawObject {
            api_version: doc.api_version.clone(),
            kind: doc.key.kind.clone(),
            name: doc.key.name.clone(),
            namespace: doc.key.namespace.clone(),
            generation,
            labels: doc.labels.clone(),
            annotations: doc.annotations.clone(),
            spec: doc.spec.clone(),
            status: None,
            deleting: false,
        },
        file: file.to_string(),
        line: doc.line,
        spec_hash: doc.spec_hash,
    }
}

// ---------------------------------------------------------------------------------------------
// Finding and reading files (blocking; run on the blocking pool).

/// True for `file` at or under the relative directory `rel` (`""` is the root).
fn is_under(file: &str, rel: &str) -> bool {
    rel.is_empty() || file == rel || (file.starts_with(rel) && file.as_bytes().get(rel.len()) == Some(&b'/'))
}

/// Names that never count, whether file or directory: hidden ones and editor leftovers.
fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with('~') || [".swp", ".swo", ".swx"].iter().any(|s| name.ends_with(s))
}

/// True when some component of the relative path is ignored.
fn is_ignored_rel(rel: &str) -> bool {
    !rel.is_empty() && rel.split('/').any(is_ignored_name)
}

fn is_resource_name(name: &str) -> bool {
    !is_ignored_name(name) && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

fn join_rel(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

/// Reads what is at or under each of `rels`: the files found on disk plus the `known` ones
/// (which read as `Missing` when they are gone). Files under a directory that cannot be listed
/// are left out, so that the cache keeps them.
fn gather(
    dir: &Path,
    rels: &[String],
    known: Vec<String>,
    hashes: &HashMap<String, (u64, u64)>,
) -> Vec<(String, FileRead)> {
    let mut candidates: BTreeSet<String> = known.into_iter().collect();
    let mut unreadable: Vec<String> = Vec::new();
    for rel in rels {
        let abs = if rel.is_empty() { dir.to_path_buf() } else { dir.join(rel) };
        let meta = if rel.is_empty() { std::fs::metadata(&abs) } else { std::fs::symlink_metadata(&abs) };
        match meta {
            Ok(m) if m.is_dir() => walk(&abs, rel, &mut candidates, &mut unreadable),
            Ok(m) if m.file_type().is_symlink() => {
                // A link to a file counts; a link to a directory is not followed.
                if std::fs::metadata(&abs).is_ok_and(|t| !t.is_dir())
                    && rel.rsplit('/').next().is_some_and(is_resource_name)
                {
                    candidates.insert(rel.clone());
                }
            }
            Ok(_) => {
                if rel.rsplit('/').next().is_some_and(is_resource_name) {
                    candidates.insert(rel.clone());
                }
            }
            Err(e) if is_gone(&e) => {}
            Err(e) => {
                tracing::warn!(path = %abs.display(), "cannot inspect: {e}");
                if rel.rsplit('/').next().is_some_and(is_resource_name) {
                    candidates.insert(rel.clone());
                } else {
                    unreadable.push(rel.clone());
                }
            }
        }
    }
    candidates
        .into_iter()
        .filter(|c| !unreadable.iter().any(|u| is_under(c, u)))
        .map(|rel| {
            let read = read_file(&dir.join(&rel), &rel, hashes.get(&rel).copied());
            (rel, read)
        })
        .collect()
}

/// Collects the resource files under `abs` (whose relative path is `rel`).
fn walk(abs: &Path, rel: &str, out: &mut BTreeSet<String>, unreadable: &mut Vec<String>) {
    let mut stack = vec![(abs.to_path_buf(), rel.to_string())];
    while let Some((dir_abs, dir_rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir_abs) {
            Ok(e) => e,
            Err(e) if is_gone(&e) => continue,
            Err(e) => {
                tracing::warn!(dir = %dir_abs.display(), "cannot list the directory; keeping what was read from it: {e}");
                unreadable.push(dir_rel);
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(dir = %dir_abs.display(), "cannot list the directory; keeping what was read from it: {e}");
                    unreadable.push(dir_rel.clone());
                    break;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                tracing::warn!(path = %entry.path().display(), "ignoring a name that is not UTF-8");
                continue;
            };
            if is_ignored_name(name) {
                continue;
            }
            let child_rel = join_rel(&dir_rel, name);
            let Ok(ty) = entry.file_type() else { continue };
            if ty.is_dir() {
                stack.push((entry.path(), child_rel));
            } else if is_resource_name(name)
                && (!ty.is_symlink() || std::fs::metadata(entry.path()).is_ok_and(|m| !m.is_dir()))
            {
                // Anything but a directory, links followed: read_file reports what is not a regular file.
                out.insert(child_rel);
            }
        }
    }
}

/// The path does not exist (any more), or a component of it is not a directory any more.
fn is_gone(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
}

/// FNV-1a, 64 bits: stable across platforms and Rust versions (the spec hash of every source).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn problem(file: &str, line: Option<u64>, column: Option<u64>, message: impl Into<String>) -> FileProblem {
    FileProblem { file: file.to_string(), line, column, message: message.into() }
}

fn read_file(abs: &Path, rel: &str, previous: Option<(u64, u64)>) -> FileRead {
    let failed = |message: String| FileRead::Failed { problem: problem(rel, None, None, message), content: None };
    let meta = match std::fs::metadata(abs) {
        Ok(m) => m,
        Err(e) if is_gone(&e) => return FileRead::Missing,
        Err(e) => return failed(format!("cannot read the file: {e}")),
    };
    if meta.is_dir() {
        return FileRead::Missing;
    }
    if !meta.is_file() {
        return failed("not a regular file".to_string());
    }
    if meta.len() > MAX_FILE_BYTES {
        return failed(too_large(meta.len()));
    }
    let file = match std::fs::File::open(abs) {
        Ok(f) => f,
        Err(e) if is_gone(&e) => return FileRead::Missing,
        Err(e) => return failed(format!("cannot read the file: {e}")),
    };
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    if let Err(e) = file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        return failed(format!("cannot read the file: {e}"));
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return failed(too_large(bytes.len() as u64));
    }
    let content = (bytes.len() as u64, fnv1a(&bytes));
    if previous == Some(content) {
        return FileRead::Unchanged;
    }
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse_file(&bytes))).unwrap_or_else(|_| {
        Err(DocError { line: None, column: None, message: "internal error while parsing this file".into() })
    });
    match parsed {
        Ok(docs) => FileRead::Parsed { docs, content },
        Err(e) => FileRead::Failed { problem: problem(rel, e.line, e.column, e.message), content: Some(content) },
    }
}

fn too_large(len: u64) -> String {
    format!("the file is {len} bytes, larger than the limit of {MAX_FILE_BYTES} bytes")
}

// ---------------------------------------------------------------------------------------------
// Parsing and validating documents.

/// Why a file is invalid, with the position when known.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DocError {
    line: Option<u64>,
    column: Option<u64>,
    message: String,
}

impl DocError {
    fn at(loc: &serde_saphyr::Location, message: impl Into<String>) -> Self {
        let (line, column) = (loc.line(), loc.column());
        Self { line: (line > 0).then_some(line), column: (column > 0).then_some(column), message: message.into() }
    }
}

impl From<YamlError> for DocError {
    fn from(e: YamlError) -> Self {
        Self { line: e.line, column: e.column, message: clean_message(&e.message) }
    }
}

/// The parser's message without a leading `error: line X column Y: ` (the position is kept
/// apart) and without control characters.
fn clean_message(message: &str) -> String {
    let mut m = message.trim();
    m = m.strip_prefix("error: ").unwrap_or(m);
    if let Some(rest) = m.strip_prefix("line ")
        && let Some((pos, tail)) = rest.split_once(": ")
        && pos.split(" column ").all(|n| n.trim().chars().all(|c| c.is_ascii_digit()))
    {
        m = tail;
    }
    m.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// What is written where the object has a string: text, or what else it is. The check is left
/// to [`validate`], which knows the field and where its value is: a plain scalar that YAML
/// reads as a number or a boolean (`name: 123`, `apiVersion: 1`, a label `version: 2`) is not
/// taken as text, as the Kubernetes API server does not take it; quoted, it is text.
enum Text {
    Text(String),
    /// What was found instead, for the message.
    Not(String),
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text::Text(v))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text::Not(format!("the boolean {v}")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text::Not(format!("the number {v}")))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Text, E> {
                Ok(Text::Not("null".into()))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Text, E> {
                Ok(Text::Not("null".into()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Text, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text::Not("a sequence".into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Text, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text::Not("a mapping".into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The text of `field`, or an error at its value that says what was found instead.
fn text(field: &str, v: Spanned<Text>) -> Result<String, DocError> {
    match v.value {
        Text::Text(t) => Ok(t),
        Text::Not(found) => {
            let hint = if found.starts_with("the ") { " (quote it to make it text)" } else { "" };
            Err(DocError::at(&v.referenced, format!("{field} must be a string, not {found}{hint}")))
        }
    }
}

/// The labels or annotations, each value checked by [`text`].
fn texts(field: &str, map: Option<BTreeMap<String, Spanned<Text>>>) -> Result<BTreeMap<String, String>, DocError> {
    map.unwrap_or_default().into_iter().map(|(k, v)| Ok((k.clone(), text(&format!("{field}.{k}"), v)?))).collect()
}

/// A document as written. `status` is accepted and ignored; any other unknown key is an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDoc {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<Spanned<Text>>,
    #[serde(default)]
    kind: Option<Spanned<Text>>,
    #[serde(default)]
    metadata: Option<Spanned<RawMeta>>,
    #[serde(default)]
    spec: Option<Spanned<serde_json::Value>>,
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<IgnoredAny>,
}

/// `metadata`. Fields a Kubernetes server fills in are accepted and ignored, so that objects
/// exported from a cluster load; anything else unknown (a typo like `lables`) is an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawMeta {
    #[serde(default)]
    name: Option<Spanned<Text>>,
    #[serde(default)]
    namespace: Option<Spanned<Text>>,
    #[serde(default)]
    labels: Option<BTreeMap<String, Spanned<Text>>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, Spanned<Text>>>,
    #[serde(default)]
    uid: Option<IgnoredAny>,
    #[serde(default)]
    resource_version: Option<IgnoredAny>,
    #[serde(default)]
    generation: Option<IgnoredAny>,
    #[serde(default)]
    creation_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<IgnoredAny>,
    #[serde(default)]
    managed_fields: Option<IgnoredAny>,
    #[serde(default)]
    self_link: Option<IgnoredAny>,
    #[serde(default)]
    finalizers: Option<IgnoredAny>,
    #[serde(default)]
    owner_references: Option<IgnoredAny>,
}

/// Parses and validates every document of a file; the first problem fails the whole file.
fn parse_file(bytes: &[u8]) -> Result<Vec<Doc>, DocError> {
    // The valid UTF-8 prefix is checked for characters YAML does not allow first, so that the
    // first problem in the file is the one reported.
    let (text, utf8_error) = match std::str::from_utf8(bytes) {
        Ok(t) => (t, false),
        Err(e) => (std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(), true),
    };
    if let Some((at, c)) = text.char_indices().find(|(_, c)| !is_yaml_printable(*c)) {
        let (line, column) = position_after(&text[..at]);
        return Err(DocError {
            line: Some(line),
            column: Some(column),
            message: format!(
                "the file holds the control character U+{:04X}, which YAML does not allow (is it a binary file?)",
                u32::from(c)
            ),
        });
    }
    if utf8_error {
        let (line, column) = position_after(text);
        let message = if bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]) {
            "the file is not valid UTF-8 (it is UTF-16: save it as UTF-8)"
        } else {
            "the file is not valid UTF-8"
        };
        return Err(DocError { line: Some(line), column: Some(column), message: message.into() });
    }
    let raw: Vec<Spanned<RawDoc>> = yaml::from_multiple(text).map_err(DocError::from)?;
    let mut docs: Vec<Doc> = Vec::with_capacity(raw.len());
    for d in raw {
        let doc = validate(d)?;
        if let Some(first) = docs.iter().find(|o| o.key == doc.key) {
            return Err(DocError {
                line: doc.name_line.or(Some(doc.line)),
                column: doc.name_column,
                message: format!("{} is already defined at line {} of this file", doc.key, first.line),
            });
        }
        docs.push(doc);
    }
    Ok(docs)
}

/// YAML 1.2's printable characters (`c-printable`): tab, line breaks and printable Unicode; no
/// other control character may appear raw, not even in a comment or a quoted string.
fn is_yaml_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || c >= '\u{10000}'
}

/// The 1-based (line, column) just after `prefix`, the column counted in characters.
fn position_after(prefix: &str) -> (u64, u64) {
    let line = prefix.bytes().filter(|b| *b == b'\n').count() as u64 + 1;
    let line_start = prefix.rfind('\n').map_or(0, |i| i + 1);
    (line, prefix[line_start..].chars().count() as u64 + 1)
}

fn validate(d: Spanned<RawDoc>) -> Result<Doc, DocError> {
    let start = d.referenced;
    let raw = d.value;
    let api_version = raw.api_version.ok_or_else(|| DocError::at(&start, "apiVersion is missing"))?;
    let api_version_at = api_version.referenced;
    let api_version = text("apiVersion", api_version)?;
    if !is_api_version(&api_version) {
        return Err(DocError::at(
            &api_version_at,
            format!(
                "apiVersion {} is not valid: expected `version` or `group/version`, for example `steward.dev/v1`",
                shown(&api_version)
            ),
        ));
    }
    let kind = raw.kind.ok_or_else(|| DocError::at(&start, "kind is missing"))?;
    let kind_at = kind.referenced;
    let kind = text("kind", kind)?;
    if !is_kind(&kind) {
        return Err(DocError::at(
            &kind_at,
            format!(
                "kind {} is not valid: expected CamelCase letters and digits starting with an upper-case letter, at most 63",
                shown(&kind)
            ),
        ));
    }
    let meta = raw.metadata.ok_or_else(|| DocError::at(&start, "metadata is missing (metadata.name is required)"))?;
    let meta_at = meta.referenced;
    let meta = meta.value;
    let name = meta.name.ok_or_else(|| DocError::at(&meta_at, "metadata.name is missing"))?;
    let name_at = name.referenced;
    let name = text("metadata.name", name)?;
    if !is_dns_subdomain(&name) {
        return Err(DocError::at(&name_at, format!("metadata.name {} is not valid: {DNS_RULE}", shown(&name))));
    }
    let namespace = match meta.namespace {
        Some(ns) => {
            let ns_at = ns.referenced;
            let ns = text("metadata.namespace", ns)?;
            if !is_dns_subdomain(&ns) {
                return Err(DocError::at(
                    &ns_at,
                    format!("metadata.namespace {} is not valid: {DNS_RULE}", shown(&ns)),
                ));
            }
            ns
        }
        None => DEFAULT_NAMESPACE.to_string(),
    };
    let labels = texts("metadata.labels", meta.labels)?;
    let annotations = texts("metadata.annotations", meta.annotations)?;
    let spec = match raw.spec {
        None => serde_json::Value::Object(serde_json::Map::new()),
        Some(s) => match s.value {
            serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
            v @ serde_json::Value::Object(_) => v,
            _ => return Err(DocError::at(&s.referenced, "spec must be a mapping")),
        },
    };
    let mut spec_text = String::new();
    canonical_json(&spec, &mut spec_text);
    let (name_line, name_column) = (name_at.line(), name_at.column());
    Ok(Doc {
        key: ObjectKey::new(kind, namespace, name),
        api_version,
        labels,
        annotations,
        spec_hash: fnv1a(spec_text.as_bytes()),
        spec: spec_text,
        line: start.line().max(1),
        name_line: (name_line > 0).then_some(name_line),
        name_column: (name_column > 0).then_some(name_column),
    })
}

const DNS_RULE: &str = "expected lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";

/// A value quoted for a message: escaped, and cut when long.
fn shown(s: &str) -> String {
    let mut v: String = s.chars().take(64).collect();
    if v.len() < s.len() {
        v.push('…');
    }
    format!("\"{}\"", v.escape_debug())
}

/// `version` or `group/version`: the group a DNS-1123 subdomain, the version a DNS-1123 label.
fn is_api_version(s: &str) -> bool {
    match s.split_once('/') {
        Some((group, version)) => is_dns_subdomain(group) && is_dns_label(version),
        None => is_dns_label(s),
    }
}

/// JSON text with object keys sorted at every level, whatever the map type's own order.
fn canonical_json(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                canonical_json(v, out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&serde_json::to_string(scalar).unwrap_or_else(|_| "null".into())),
    }
}

// ---------------------------------------------------------------------------------------------
// Watching.

/// Per-path debounce: a path is due `debounce` after its last event, and never later than
/// `debounce_max` after its first one.
#[derive(Debug)]
struct Debouncer {
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
    fn new(debounce: Duration, debounce_max: Duration) -> Self {
        Self { debounce, debounce_max, pending: HashMap::new() }
    }

    fn note(&mut self, rel: String, now: Instant, structural: bool) {
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

    fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| self.due_at(p)).min()
    }

    /// Removes and returns the paths due at `now` (with the structural ones, when any is due), sorted.
    fn take_due(&mut self, now: Instant) -> Vec<String> {
        if !self.pending.values().any(|p| self.due_at(p) <= now) {
            return Vec::new();
        }
        let mut due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.structural || self.due_at(p) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        due.sort();
        for k in &due {
            self.pending.remove(k);
        }
        due
    }
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

fn send_all(tx: &mpsc::UnboundedSender<SourceEvent>, events: Vec<SourceEvent>) -> bool {
    events.into_iter().all(|e| tx.send(e).is_ok())
}

async fn watch_loop(
    src: Arc<FsSource>,
    mut raw: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    tx: mpsc::UnboundedSender<SourceEvent>,
    ready: watch::Sender<bool>,
) {
    let dir = src.opts.dir.display().to_string();
    // The watcher is live: whatever changed since the caller's scan is seen from here on.
    if !send_all(&tx, src.scan().await) {
        return;
    }
    let _ = ready.send(true);
    let mut debouncer = Debouncer::new(src.opts.debounce, src.opts.debounce_max);
    // Capped so that tokio's own `deadline + period` cannot overflow.
    let interval = src.opts.scan_interval.min(FAR_FUTURE);
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
                note_event(&src, &mut debouncer, ev, now);
                // Take whatever else is queued without waking up again for each.
                while let Ok(ev) = raw.try_recv() {
                    note_event(&src, &mut debouncer, ev, now);
                }
            }
            _ = sleep_until_opt(deadline) => {
                let due = debouncer.take_due(Instant::now());
                if !due.is_empty() {
                    tracing::debug!(%dir, paths = ?due, "re-reading");
                    if !send_all(&tx, src.rescan(due).await) {
                        return;
                    }
                }
            }
            _ = tick_opt(&mut ticker) => {
                tracing::debug!(%dir, "periodic full scan");
                if !send_all(&tx, src.scan().await) {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}

fn note_event(src: &FsSource, debouncer: &mut Debouncer, ev: notify::Result<notify::Event>, now: Instant) {
    match ev {
        Err(e) => {
            tracing::warn!(dir = %src.opts.dir.display(), "file watcher error, rescanning everything: {e}");
            debouncer.note(String::new(), now, false);
        }
        Ok(ev) if ev.need_rescan() => debouncer.note(String::new(), now, false),
        Ok(ev) if !is_relevant(&ev.kind) => {}
        Ok(ev) => {
            let structural = is_structural(&ev.kind);
            for path in &ev.paths {
                if let Some(rel) = src.relative(path)
                    && !is_ignored_rel(&rel)
                {
                    debouncer.note(rel, now, structural);
                }
            }
        }
    }
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
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;

    fn key(kind: &str, ns: &str, name: &str) -> ObjectKey {
        ObjectKey::new(kind, ns, name)
    }

    fn opts(dir: &Path) -> FsOptions {
        FsOptions {
            dir: dir.to_path_buf(),
            debounce: Duration::from_millis(100),
            debounce_max: Duration::from_secs(1),
            scan_interval: Duration::from_secs(3600),
        }
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn doc(kind: &str, name: &str, spec: &str) -> String {
        format!("apiVersion: steward.dev/v1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  {spec}\n")
    }

    fn set(events: &[SourceEvent]) -> HashSet<SourceEvent> {
        events.iter().cloned().collect()
    }

    fn changed(k: &ObjectKey) -> SourceEvent {
        SourceEvent::Changed(k.clone())
    }

    fn deleted(k: &ObjectKey) -> SourceEvent {
        SourceEvent::Deleted(k.clone())
    }

    fn file_problem(f: &str) -> SourceEvent {
        SourceEvent::FileProblem { file: f.into() }
    }

    fn file_ok(f: &str) -> SourceEvent {
        SourceEvent::FileOk { file: f.into() }
    }

    fn spec_of(src: &FsSource, k: &ObjectKey) -> serde_json::Value {
        serde_json::from_str(&src.get(k).expect("object in the cache").raw.spec).unwrap()
    }

    const DEADLINE: Duration = Duration::from_secs(20);

    /// Receives events until `done` holds for the cache, failing at the deadline; returns what came.
    async fn events_until(
        rx: &mut mpsc::UnboundedReceiver<SourceEvent>,
        what: &str,
        mut done: impl FnMut(&[SourceEvent]) -> bool,
    ) -> Vec<SourceEvent> {
        let end = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        while !done(&seen) {
            match tokio::time::timeout_at(end, rx.recv()).await {
                Ok(Some(ev)) => seen.push(ev),
                Ok(None) => panic!("the event channel closed while waiting for {what}; seen {seen:?}"),
                Err(_) => panic!("timed out waiting for {what}; seen {seen:?}"),
            }
        }
        seen
    }

    // ----- parsing, cache and generations -----------------------------------------------------

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
        assert_eq!(o.file, "servers.yaml");
        assert_eq!(o.line, 3, "the document starts after the comment and `---`");
        assert_eq!(o.raw.api_version, "steward.dev/v1");
        assert_eq!(o.raw.generation, 1);
        assert_eq!(o.raw.labels, BTreeMap::from([("team".to_string(), "core".to_string())]));
        assert_eq!(o.raw.annotations, BTreeMap::from([("note".to_string(), "hi".to_string())]));
        assert_eq!(o.raw.spec, r#"{"args":["a","b"],"command":"git-mcp"}"#);
        assert_eq!(o.raw.status, None);
        assert!(!o.raw.deleting);
        let f = src.get(&fs).unwrap();
        assert_eq!((f.raw.namespace.as_str(), f.raw.spec.as_str(), f.line), ("tools", "{}", 17));
        assert_eq!(src.get(&nightly).unwrap().file, "sub/dir/wf.yml");

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

    #[tokio::test]
    async fn generation_bumps_only_when_the_spec_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("MCPServer", "default", "git");
        write(dir, "a.yaml", "apiVersion: v1\nkind: MCPServer\nmetadata: {name: git}\nspec: {a: 1, b: [1, 2]}\n");
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await, vec![changed(&k)]);
        let first = src.get(&k).unwrap();
        assert_eq!(first.raw.generation, 1);

        // Same content, other key order and layout: no event, same hash.
        write(
            dir,
            "a.yaml",
            "# reformatted\napiVersion: v1\nkind: MCPServer\nmetadata:\n  name: git\nspec:\n  b:\n    - 1\n    - 2\n  a: 1\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![]);
        assert_eq!(src.get(&k).unwrap().spec_hash, first.spec_hash);
        assert_eq!(src.get(&k).unwrap().line, 2, "the line follows the document");

        // Labels: Changed, same generation.
        write(
            dir,
            "a.yaml",
            "apiVersion: v1\nkind: MCPServer\nmetadata: {name: git, labels: {x: y}}\nspec: {a: 1, b: [1, 2]}\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
        // apiVersion: Changed, same generation.
        write(
            dir,
            "a.yaml",
            "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git, labels: {x: y}}\nspec: {a: 1, b: [1, 2]}\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
        // Spec: Changed, generation + 1.
        write(
            dir,
            "a.yaml",
            "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git, labels: {x: y}}\nspec: {a: 2, b: [1, 2]}\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![changed(&k)]);
        let o = src.get(&k).unwrap();
        assert_eq!(o.raw.generation, 2);
        assert_ne!(o.spec_hash, first.spec_hash);

        // Deleted and re-created: the generation goes on instead of going back.
        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        assert_eq!(src.scan().await, vec![deleted(&k)]);
        write(dir, "b.yaml", "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git}\nspec: {a: 3}\n");
        assert_eq!(src.scan().await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 3);
    }

    #[tokio::test]
    async fn generations_are_preserved_from_what_the_host_knows() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(
            dir,
            "a.yaml",
            &[doc("Kind", "same", "x: 1"), doc("Kind", "edited", "x: 1"), doc("Kind", "new", "x: 1")].join("---\n"),
        );
        // What a first run computed is what the host persisted.
        let first = FsSource::new(opts(dir), HashMap::new());
        first.scan().await;
        let hash = first.get(&key("Kind", "default", "same")).unwrap().spec_hash;
        let known = HashMap::from([
            (key("Kind", "default", "same"), (7, hash)),
            (key("Kind", "default", "edited"), (4, hash ^ 1)),
            (key("Kind", "default", "gone"), (9, 1)),
        ]);
        let src = FsSource::new(opts(dir), known);
        let events = src.scan().await;
        assert_eq!(events.len(), 3, "every object is reported and nothing is deleted: {events:?}");
        let generation = |n: &str| src.get(&key("Kind", "default", n)).unwrap().raw.generation;
        assert_eq!(generation("same"), 7);
        assert_eq!(generation("edited"), 5);
        assert_eq!(generation("new"), 1);
    }

    #[tokio::test]
    async fn status_is_ignored_and_yaml_1_1_booleans_stay_strings() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(
            dir,
            "a.yaml",
            "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  labels: {on: yes}\nspec:\n  on: push\n  yes: no\n  off: [y, n, true]\n  1: one\nstatus:\n  phase: Synced\n",
        );
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        let k = key("K", "default", "a");
        assert_eq!(
            spec_of(&src, &k),
            serde_json::json!({"on": "push", "yes": "no", "off": ["y", "n", true], "1": "one"})
        );
        let o = src.get(&k).unwrap();
        assert_eq!(o.raw.labels["on"], "yes");
        assert_eq!(o.raw.status, None);
    }

    // ----- broken files ------------------------------------------------------------------------

    #[tokio::test]
    async fn a_broken_file_keeps_its_last_good_objects_and_recovers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, b) = (key("K", "default", "a"), key("K", "default", "b"));
        write(dir, "f.yaml", &format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "b", "v: 1")));
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await.len(), 2);

        // A syntax error on line 4, column 9: nothing changes in the cache.
        write(dir, "f.yaml", "apiVersion: v1\nkind: K\nmetadata:\n  name: [a\nspec: {v: 2}\n");
        assert_eq!(src.reload_file(Path::new("f.yaml")).await, vec![file_problem("f.yaml")]);
        assert_eq!(src.len(), 2);
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 1}));
        let problems = src.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert_eq!((p.file.as_str(), p.line.is_some(), p.column.is_some()), ("f.yaml", true, true), "{p:?}");
        assert!(p.line.unwrap() >= 4, "{p:?}");
        assert!(p.to_string().starts_with(&format!("f.yaml:{}:{}: ", p.line.unwrap(), p.column.unwrap())), "{p}");
        assert!(!p.message.starts_with("error:"), "the position is not repeated: {p}");
        assert!(src.object_problem(&a).unwrap().contains("last good version"), "{:?}", src.object_problem(&a));
        // The same broken bytes again: nothing new to say.
        assert_eq!(src.scan().await, vec![]);

        // A different error: the problem is reported again, with its own position.
        write(
            dir,
            "f.yaml",
            &format!("{}---\napiVersion: v1\nkind: K\nmetadata:\n  name: Bad_Name\n", doc("K", "a", "v: 2")),
        );
        assert_eq!(src.reload_file(Path::new("f.yaml")).await, vec![file_problem("f.yaml")]);
        let p = src.problems().remove(0);
        assert_eq!((p.line, p.column), (Some(11), Some(9)), "{p}");
        assert!(p.message.contains("metadata.name \"Bad_Name\""), "{p}");
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 1}), "still the last good version");

        // Fixed, with `b` removed and `a` edited: the problem clears and the differences come.
        write(dir, "f.yaml", &doc("K", "a", "v: 2"));
        let events = src.reload_file(&dir.join("f.yaml")).await;
        assert_eq!(set(&events), set(&[changed(&a), deleted(&b), file_ok("f.yaml")]));
        assert!(src.problems().is_empty());
        assert_eq!(src.object_problem(&a), None);
        assert_eq!(src.get(&a).unwrap().raw.generation, 2);
    }

    #[tokio::test]
    async fn a_file_broken_at_its_first_read_contributes_nothing_until_fixed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "ok.yaml", &doc("K", "ok", "v: 1"));
        write(dir, "bad.yaml", &format!("{}---\nkind: K\nmetadata: {{name: x}}\n", doc("K", "good-part", "v: 1")));
        let src = FsSource::new(opts(dir), HashMap::new());
        let events = src.scan().await;
        assert_eq!(set(&events), set(&[changed(&key("K", "default", "ok")), file_problem("bad.yaml")]));
        assert_eq!(src.keys(), vec![key("K", "default", "ok")]);
        let p = src.problems().remove(0);
        assert_eq!(p.to_string(), "bad.yaml:8:1: apiVersion is missing");
        assert_eq!(src.files(), vec!["bad.yaml".to_string(), "ok.yaml".to_string()]);

        // Deleting a broken file clears its problem.
        std::fs::remove_file(dir.join("bad.yaml")).unwrap();
        assert_eq!(src.scan().await, vec![file_ok("bad.yaml")]);
        assert!(src.problems().is_empty());
    }

    /// A name, the file text, the expected (line, column) of the problem, a fragment of its message.
    type Case = (&'static str, String, Option<(u64, u64)>, &'static str);

    #[tokio::test]
    async fn invalid_documents_are_file_problems_with_positions() {
        let mut bomb = String::from(
            "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
        );
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!(
                "  a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let deep = format!(
            "apiVersion: v1\nkind: K\nmetadata: {{name: a}}\nspec: {{x: {}1{}}}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let cases: Vec<Case> = vec![
            (
                "upper-case name",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: MyName\n".into(),
                Some((4, 9)),
                "metadata.name \"MyName\" is not valid",
            ),
            (
                "underscore name",
                "apiVersion: v1\nkind: K\nmetadata: {name: a_b}\n".into(),
                Some((3, 18)),
                "metadata.name",
            ),
            (
                "name ending in a dash",
                "apiVersion: v1\nkind: K\nmetadata: {name: a-}\n".into(),
                Some((3, 18)),
                "metadata.name",
            ),
            (
                "empty label in a name",
                "apiVersion: v1\nkind: K\nmetadata: {name: a..b}\n".into(),
                Some((3, 18)),
                "metadata.name",
            ),
            (
                "name too long",
                format!("apiVersion: v1\nkind: K\nmetadata: {{name: {}}}\n", "a".repeat(254)),
                Some((3, 18)),
                "at most 253",
            ),
            (
                "bad namespace",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  namespace: Prod\n".into(),
                Some((5, 14)),
                "metadata.namespace \"Prod\"",
            ),
            ("missing kind", "apiVersion: v1\nmetadata: {name: a}\n".into(), Some((1, 1)), "kind is missing"),
            (
                "lower-case kind",
                "apiVersion: v1\nkind: mcpServer\nmetadata: {name: a}\n".into(),
                Some((2, 7)),
                "kind \"mcpServer\" is not valid",
            ),
            (
                "kind with a dash",
                "apiVersion: v1\nkind: Mcp-Server\nmetadata: {name: a}\n".into(),
                Some((2, 7)),
                "kind",
            ),
            ("missing apiVersion", "kind: K\nmetadata: {name: a}\n".into(), Some((1, 1)), "apiVersion is missing"),
            ("bad apiVersion", "apiVersion: a/b/c\nkind: K\nmetadata: {name: a}\n".into(), Some((1, 13)), "apiVersion"),
            ("missing metadata", "apiVersion: v1\nkind: K\n".into(), Some((1, 1)), "metadata is missing"),
            (
                "missing name",
                "apiVersion: v1\nkind: K\nmetadata:\n  namespace: x\n".into(),
                Some((4, 3)),
                "metadata.name is missing",
            ),
            (
                "unknown top-level key",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspecs: {}\n".into(),
                Some((4, 1)),
                "unknown field `specs`",
            ),
            (
                "unknown metadata key",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  lables: {}\n".into(),
                Some((5, 3)),
                "unknown field `lables`",
            ),
            (
                "spec not a mapping",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec: [1]\n".into(),
                Some((4, 7)),
                "spec must be a mapping",
            ),
            (
                "label value not a string",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  labels: {a: {b: c}}\n".into(),
                None,
                "",
            ),
            (
                "duplicate key",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nkind: J\n".into(),
                Some((4, 1)),
                "duplicate",
            ),
            (
                "duplicate key in spec",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec:\n  x: 1\n  x: 2\n".into(),
                Some((6, 3)),
                "duplicate",
            ),
            (
                "same object twice",
                format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "a", "v: 2")),
                Some((11, 9)),
                "already defined at line 1 of this file",
            ),
            ("not a mapping", "- a\n- b\n".into(), Some((1, 1)), ""),
            (
                "a number for a name",
                "apiVersion: v1\nkind: K\nmetadata: {name: 123}\n".into(),
                Some((3, 18)),
                "metadata.name must be a string, not the number 123 (quote it to make it text)",
            ),
            (
                "a boolean for a label",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  labels: {x: true}\n".into(),
                Some((5, 15)),
                "metadata.labels.x must be a string, not the boolean true (quote it to make it text)",
            ),
            (
                "a control character",
                "apiVersion: v1\n# \u{7}\nkind: K\n".into(),
                Some((2, 3)),
                "the control character U+0007",
            ),
            ("syntax error", "apiVersion: v1\nkind: [K\n".into(), None, ""),
            ("tab indentation", "apiVersion: v1\nkind: K\nmetadata:\n\tname: a\n".into(), None, ""),
            ("alias bomb", bomb, None, ""),
            ("deep nesting", deep, None, ""),
        ];
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for (i, (_, text, _, _)) in cases.iter().enumerate() {
            write(dir, &format!("case{i:02}.yaml"), text);
        }
        // Invalid UTF-8 on line 2, column 8; a file over the size limit.
        std::fs::write(dir.join("utf8.yaml"), b"kind: K\nname: a\xff\n").unwrap();
        let big = std::fs::File::create(dir.join("big.yaml")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();

        let src = FsSource::new(opts(dir), HashMap::new());
        let started = std::time::Instant::now();
        let events = src.scan().await;
        assert!(started.elapsed() < Duration::from_secs(30), "bounded time");
        assert_eq!(src.len(), 0, "no invalid document enters the cache: {:?}", src.keys());
        assert_eq!(events.len(), cases.len() + 2, "{events:?}");
        assert!(events.iter().all(|e| matches!(e, SourceEvent::FileProblem { .. })), "{events:?}");
        for (i, (what, _, at, fragment)) in cases.iter().enumerate() {
            let problems = src.file_problems(&format!("case{i:02}.yaml"));
            assert_eq!(problems.len(), 1, "{what}: {problems:?}");
            let p = &problems[0];
            assert!(p.line.is_some(), "{what}: a line is known: {p}");
            if let Some((line, column)) = at {
                assert_eq!((p.line, p.column), (Some(*line), Some(*column)), "{what}: {p}");
            }
            assert!(p.message.contains(fragment), "{what}: {p}");
            assert!(!p.message.is_empty() && !p.message.contains('\n'), "{what}: {p}");
        }
        let p = src.file_problems("utf8.yaml").remove(0);
        assert_eq!(p.to_string(), "utf8.yaml:2:8: the file is not valid UTF-8");
        let p = src.file_problems("big.yaml").remove(0);
        assert_eq!((p.line, p.column), (None, None));
        assert!(p.to_string().starts_with("big.yaml: the file is 8388609 bytes, larger than the limit"), "{p}");
    }

    #[tokio::test]
    async fn only_yaml_files_count_and_hidden_or_editor_files_are_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "a.yaml", &doc("K", "a", "v: 1"));
        write(dir, "b.yml", &doc("K", "b", "v: 1"));
        write(dir, "c.json", &doc("K", "c", "v: 1"));
        write(dir, "README.md", "# not yaml: [\n");
        write(dir, ".hidden.yaml", &doc("K", "d", "v: 1"));
        write(dir, ".git/x.yaml", &doc("K", "e", "v: 1"));
        write(dir, "a.yaml~", &doc("K", "f", "v: 1"));
        write(dir, ".a.yaml.swp", "binary junk [");
        write(dir, "x.yaml.swp", "binary junk [");
        write(dir, "nested/deeper/g.yaml", &doc("K", "g", "v: 1"));
        std::fs::create_dir_all(dir.join("dir.yaml")).unwrap();
        write(dir, "dir.yaml/h.yaml", &doc("K", "h", "v: 1"));
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;
        let names: Vec<String> = src.keys().into_iter().map(|k| k.name).collect();
        assert_eq!(names, ["a", "b", "g", "h"]);
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        assert_eq!(src.get(&key("K", "default", "g")).unwrap().file, "nested/deeper/g.yaml");
        // Ignored and outside paths are refused by reload_file too.
        assert_eq!(src.reload_file(&dir.join(".hidden.yaml")).await, vec![]);
        assert_eq!(src.reload_file(Path::new("/somewhere/else.yaml")).await, vec![]);
        assert_eq!(src.reload_file(Path::new("../escape.yaml")).await, vec![]);
        assert_eq!(src.reload_file(Path::new("no-such.yaml")).await, vec![]);
    }

    // ----- conflicts and deletes ---------------------------------------------------------------

    #[tokio::test]
    async fn a_name_conflict_is_reported_on_both_files_and_cleared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("K", "default", "x");
        write(dir, "b.yaml", &doc("K", "x", "from: b"));
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;

        // a.yaml sorts first but b.yaml had the object first: b.yaml keeps it.
        write(dir, "a.yaml", &format!("{}---\n{}", doc("K", "other", "v: 1"), doc("K", "x", "from: a")));
        let events = src.scan().await;
        assert_eq!(
            set(&events),
            set(&[changed(&key("K", "default", "other")), file_problem("a.yaml"), file_problem("b.yaml")])
        );
        assert_eq!(src.get(&k).unwrap().file, "b.yaml");
        assert_eq!(spec_of(&src, &k), serde_json::json!({"from": "b"}));
        let problems: Vec<String> = src.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "a.yaml:11:9: K/default/x is already defined in b.yaml:1; this definition is ignored",
                "b.yaml:4:9: K/default/x is also defined in a.yaml:8; the definition here is used",
            ]
        );
        let op = src.object_problem(&k).unwrap();
        assert!(op.contains("b.yaml:1 is used") && op.contains("a.yaml:8"), "{op}");
        assert_eq!(src.object_problem(&key("K", "default", "other")), None);

        // Editing the ignored definition changes nothing.
        write(dir, "a.yaml", &format!("{}---\n{}", doc("K", "other", "v: 1"), doc("K", "x", "from: a2")));
        assert_eq!(src.reload_file(Path::new("a.yaml")).await, vec![]);
        assert_eq!(spec_of(&src, &k), serde_json::json!({"from": "b"}));

        // The conflict goes away: both problems clear, the object stays.
        write(dir, "a.yaml", &doc("K", "other", "v: 1"));
        let events = src.reload_file(Path::new("a.yaml")).await;
        assert_eq!(set(&events), set(&[file_ok("a.yaml"), file_ok("b.yaml")]));
        assert!(src.problems().is_empty());
        assert_eq!(src.object_problem(&k), None);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
    }

    #[tokio::test]
    async fn when_both_are_new_the_first_path_wins_and_the_other_takes_over_after_a_delete() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("K", "default", "x");
        write(dir, "b.yaml", &doc("K", "x", "from: b"));
        write(dir, "a/z.yaml", &doc("K", "x", "from: a/z"));
        write(dir, "a.yaml", &doc("K", "x", "from: a"));
        let src = FsSource::new(opts(dir), HashMap::new());
        let events = src.scan().await;
        assert_eq!(
            set(&events),
            set(&[changed(&k), file_problem("a.yaml"), file_problem("a/z.yaml"), file_problem("b.yaml")])
        );
        assert_eq!(src.get(&k).unwrap().file, "a.yaml");
        assert!(src.file_problems("a.yaml")[0].message.contains("a/z.yaml:1, b.yaml:1"), "{:?}", src.problems());

        // The winner is deleted: the next file takes over, no Deleted.
        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        let events = src.scan().await;
        assert_eq!(
            set(&events),
            set(&[changed(&k), file_ok("a.yaml"), file_problem("a/z.yaml"), file_problem("b.yaml")])
        );
        let o = src.get(&k).unwrap();
        assert_eq!((o.file.as_str(), o.raw.generation), ("a/z.yaml", 2));
        std::fs::remove_file(dir.join("a/z.yaml")).unwrap();
        let events = src.scan().await;
        assert_eq!(set(&events), set(&[changed(&k), file_ok("a/z.yaml"), file_ok("b.yaml")]));
        assert_eq!(spec_of(&src, &k), serde_json::json!({"from": "b"}));
    }

    #[tokio::test]
    async fn deleting_a_file_or_removing_a_document_deletes_its_objects() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, b, c) = (key("K", "default", "a"), key("K", "default", "b"), key("K", "default", "c"));
        write(dir, "ab.yaml", &format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "b", "v: 1")));
        write(dir, "sub/c.yaml", &doc("K", "c", "v: 1"));
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await.len(), 3);

        write(dir, "ab.yaml", &doc("K", "a", "v: 1"));
        assert_eq!(src.reload_file(Path::new("ab.yaml")).await, vec![deleted(&b)]);
        std::fs::remove_file(dir.join("ab.yaml")).unwrap();
        assert_eq!(src.reload_file(Path::new("ab.yaml")).await, vec![deleted(&a)]);
        // A directory replaced by a file, then removed, reloaded by its path.
        std::fs::remove_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub"), "not a directory").unwrap();
        assert_eq!(src.reload_file(&dir.join("sub")).await, vec![deleted(&c)]);
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        std::fs::remove_file(dir.join("sub")).unwrap();
        assert_eq!(src.reload_file(&dir.join("sub")).await, vec![]);
        assert!(src.is_empty());
        assert!(src.files().is_empty());
        // An emptied file defines nothing.
        write(dir, "e.yaml", &doc("K", "e", "v: 1"));
        src.scan().await;
        write(dir, "e.yaml", "# nothing here\n");
        assert_eq!(src.scan().await, vec![deleted(&key("K", "default", "e"))]);
    }

    // ----- pure helpers --------------------------------------------------------------------------

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
    fn names_kinds_and_api_versions() {
        for ok in ["a", "a-b", "a.b", "0", "a1.b-2.c", &"a".repeat(63)] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "a_b",
            "-a",
            "a-",
            ".a",
            "a.",
            "a..b",
            "a.-b",
            "a b",
            "é",
            &"a".repeat(64),
            &format!("{}.a", "a".repeat(252)),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        for ok in ["K", "MCPServer", "Workflow2"] {
            assert!(is_kind(ok), "{ok}");
        }
        for bad in ["", "k", "mcpServer", "A-B", "A_B", "1A", "Ä"] {
            assert!(!is_kind(bad), "{bad}");
        }
        for ok in ["v1", "steward.dev/v1alpha1", "apps/v1"] {
            assert!(is_api_version(ok), "{ok}");
        }
        for bad in ["", "/v1", "a/", "a/b/c", "V1", "a b/v1"] {
            assert!(!is_api_version(bad), "{bad}");
        }
    }

    #[test]
    fn spec_hash_and_text_do_not_depend_on_key_order() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [true, null, "s\"q"]}, "a": 1.5}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a": 1.5, "b": {"x": [true, null, "s\"q"], "y": 1}}"#).unwrap();
        let (mut ta, mut tb) = (String::new(), String::new());
        canonical_json(&a, &mut ta);
        canonical_json(&b, &mut tb);
        assert_eq!(ta, r#"{"a":1.5,"b":{"x":[true,null,"s\"q"],"y":1}}"#);
        assert_eq!(ta, tb);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&ta).unwrap(), a);
        // FNV-1a reference values: the hash is stable across builds.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn problems_display_as_file_line_column() {
        let p = problem("a/b.yaml", Some(3), Some(7), "bad");
        assert_eq!(p.to_string(), "a/b.yaml:3:7: bad");
        assert_eq!(problem("a.yaml", Some(3), None, "bad").to_string(), "a.yaml:3: bad");
        assert_eq!(problem("a.yaml", None, None, "bad").to_string(), "a.yaml: bad");
        assert_eq!(clean_message("error: line 13 column 6: non-finite float"), "non-finite float");
        assert_eq!(clean_message("unclosed bracket '['"), "unclosed bracket '['");
        assert_eq!(clean_message("a\u{1b}[31mb"), "a [31mb");
    }

    #[test]
    fn paths_relative_to_the_directory() {
        let src = FsSource::new(opts(Path::new("/res")), HashMap::new());
        assert_eq!(src.relative(Path::new("/res/a/b.yaml")).as_deref(), Some("a/b.yaml"));
        assert_eq!(src.relative(Path::new("/res")).as_deref(), Some(""));
        assert_eq!(src.relative(Path::new("a/./b.yaml")).as_deref(), Some("a/b.yaml"));
        assert_eq!(src.relative(Path::new("/other/a.yaml")), None);
        assert_eq!(src.relative(Path::new("../a.yaml")), None);
        assert!(is_under("a/b.yaml", "a") && is_under("a", "a") && is_under("x", ""));
        assert!(!is_under("ab/c.yaml", "a") && !is_under("a.yaml", "a"));
        assert!(is_ignored_rel("a/.git/x.yaml") && is_ignored_rel("a.yaml~") && is_ignored_rel("d/.a.yaml.swp"));
        assert!(!is_ignored_rel("a/b.yaml") && !is_ignored_rel(""));
    }

    #[test]
    fn debounce_waits_for_quiet_but_not_longer_than_the_maximum() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(200), ms(1000));
        d.note("a.yaml".into(), t0, false);
        assert_eq!(d.next_deadline(), Some(t0 + ms(200)));
        assert!(d.take_due(t0 + ms(199)).is_empty());
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
        assert_eq!(d.take_due(t0 + ms(999)), vec!["b.yaml".to_string()]);
        assert_eq!(d.take_due(t0 + ms(1000)), vec!["a.yaml".to_string()], "a.yaml at its maximum");
        assert_eq!(d.next_deadline(), None);
        // A rename's other side goes along with whatever is due.
        d.note("old.yaml".into(), t0, false);
        d.note("old.yaml".into(), t0 + ms(150), true);
        d.note("new.yaml".into(), t0 + ms(150), true);
        d.note("slow.yaml".into(), t0 + ms(150), false);
        assert_eq!(
            d.take_due(t0 + ms(350)),
            vec!["new.yaml".to_string(), "old.yaml".to_string(), "slow.yaml".to_string()]
        );
        d.note("x.yaml".into(), t0, false);
        d.note("y.yaml".into(), t0 + ms(100), true);
        assert_eq!(d.take_due(t0 + ms(200)), vec!["x.yaml".to_string(), "y.yaml".to_string()]);
        // Absurd settings do not overflow.
        let mut d = Debouncer::new(Duration::MAX, Duration::MAX);
        d.note("a.yaml".into(), t0, false);
        assert!(d.next_deadline().unwrap() > t0 + Duration::from_secs(86_400 * 365));
        assert!(d.take_due(t0 + ms(1000)).is_empty());
    }

    // ----- the watcher ---------------------------------------------------------------------------

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
        let seen = events_until(&mut rx, "the delete", |seen| {
            seen.contains(&deleted(&k)) && seen.contains(&file_ok("a.yaml"))
        })
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
        write(&dir, "busy.yaml", &doc("K", "busy", "n: 0"));
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
                    write(&dir, "busy.yaml", &doc("K", "busy", &format!("n: {n}")));
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
        events_until(&mut rx, "the last write", |_| spec_of(&src, &k) == serde_json::json!({"n": 80})).await;
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
        let seen =
            events_until(&mut rx, "the renamed content", |_| spec_of(&src, &k) == serde_json::json!({"v": 3})).await;
        assert!(!seen.contains(&deleted(&k)), "{seen:?}");
        assert!(src.problems().is_empty(), "{:?}", src.problems());

        // `mv a.yaml b.yaml`: the object moves file, it is not deleted and re-created.
        std::fs::rename(dir.join("a.yaml"), dir.join("b.yaml")).unwrap();
        let seen = events_until(&mut rx, "the move", |_| src.get(&k).is_some_and(|o| o.file == "b.yaml")).await;
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
        assert_eq!(src.get(&b).unwrap().file, "pack/inner/b.yaml");

        // The moved-in directory is watched: an edit inside it is seen.
        write(&dir, "pack/inner/b.yaml", &doc("K", "b", "v: 2"));
        events_until(&mut rx, "the edit in the moved-in directory", |_| {
            src.get(&b).is_some_and(|o| o.raw.generation == 2)
        })
        .await;

        std::fs::rename(dir.join("pack"), outside.join("pack2")).unwrap();
        events_until(&mut rx, "the moved-out files", |seen| seen.contains(&deleted(&a)) && seen.contains(&deleted(&b)))
            .await;
        assert!(src.is_empty());

        // And in again, under another name.
        std::fs::rename(outside.join("pack2"), dir.join("again")).unwrap();
        events_until(&mut rx, "the files moved in again", |_| {
            src.get(&a).is_some_and(|o| o.file == "again/a.yaml") && src.get(&b).is_some()
        })
        .await;
        assert_eq!(src.get(&b).unwrap().raw.generation, 2, "same spec as when it left");
        drop(handle);
    }
}
