//! The on-disk cache of compiled components, keyed by content hash and engine compatibility,
//! bounded in size with the entries used least recently removed first.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::cachefiles::{is_temp_name, remove_if_present, stale, write_atomic};

/// The bound of a compile cache's entries unless configured, in bytes: 1 GiB, the default of
/// wasmtime's own cache; a few dozen compiled plugins (a Rust plugin compiles to 1–3 MB, a
/// Python one to about 35 MB).
pub const DEFAULT_CACHE_LIMIT: u64 = 1024 * 1024 * 1024;

/// A directory of precompiled components (`<sha256>-<engine hash>.cwasm`), bounded in size.
///
/// The directory must be private to the host: loading a cached file maps
/// native code into the process. Files are written atomically (temp file,
/// then rename), so a crash never leaves a half-written entry under a valid name.
/// Every new entry is followed by a [`prune`](Self::prune): the entries used least recently
/// (a load from the cache counts as a use) are removed until the rest fit the limit, except
/// those of components this process holds loaded ([`InUse`]), so a host whose plugins alone
/// are over the limit keeps them all rather than compiling them again at every start.
/// Entries are read into memory, never mapped, so removing one that another process loaded
/// is safe.
#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
    limit: u64,
    in_use: Holds,
    failures: Arc<Mutex<Failures>>,
    retry: Duration,
    /// How a prune removes a file ([`remove_if_present`]; tests make it fail).
    remove: fn(&Path) -> std::io::Result<bool>,
}

/// How often the components a cache could not write are written again: [`COMPILE_CACHE_RETRY`].
pub const COMPILE_CACHE_RETRY: Duration = Duration::from_secs(10);

/// What a cache failed to do and retries every [`CompileCache::with_retry`]: the components
/// compiled that it could not write (each start would compile them again) until they are
/// written (or no longer loaded), and why it could not be pruned to its limit, while it cannot;
/// and where to say so.
#[derive(Default)]
struct Failures {
    /// The components not written, by their entry's path.
    entries: BTreeMap<PathBuf, Component>,
    /// Why the last write failed.
    error: String,
    /// Why the last prune left the cache over its limit, while it did (pruned again every retry).
    prune_error: Option<String>,
    /// Whether a thread is retrying them.
    retrying: bool,
    conditions: Option<crate::health::Conditions>,
}

impl std::fmt::Debug for Failures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failures")
            .field("entries", &self.entries.len())
            .field("error", &self.error)
            .field("prune_error", &self.prune_error)
            .finish()
    }
}

impl Failures {
    /// Says on [`crate::health::COMPILE_CACHE_WRITABLE`] whether every component compiled and
    /// loaded is written and the cache could be pruned to its limit, once either has failed
    /// (before, nothing is listed). A component not written is said first: it costs every start.
    fn report(&self, dir: &Path, retry: Duration) {
        let Some(c) = &self.conditions else { return };
        let ty = crate::health::COMPILE_CACHE_WRITABLE;
        let retry = retry.as_secs().max(1);
        if !self.entries.is_empty() {
            c.fail(
                ty,
                None,
                "CannotWrite",
                format!(
                    "{} compiled plugin(s) cannot be written to the compile cache {} ({}): the host runs them, \
                     but every start compiles them again (seconds of CPU each); make `cache_dir` writable or \
                     free space: they are written again every {retry}s",
                    self.entries.len(),
                    dir.display(),
                    self.error,
                ),
            );
        } else if let Some(why) = &self.prune_error {
            c.fail(
                ty,
                None,
                "CannotPrune",
                format!(
                    "the compile cache {} cannot be pruned to its limit: {why}. It grows past `cache_limit` \
                     with every plugin compiled; make the files in it removable, or remove the oldest by \
                     hand; it is pruned again every {retry}s",
                    dir.display(),
                ),
            );
        } else if c.get(ty, None).is_some() {
            c.ok(ty, None, "Written", "every plugin the host runs is in the compile cache, and it is pruned");
        }
    }
}

/// The entries of the components loaded now, with how many hold each.
type Holds = Arc<Mutex<HashMap<PathBuf, usize>>>;

/// A loaded component's hold on its cache entry: [`CompileCache::prune`] keeps the entry until
/// every hold on it is dropped (a plugin keeps its own for as long as it is loaded).
#[derive(Debug)]
pub struct InUse {
    path: PathBuf,
    in_use: Holds,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut held = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.path) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.path);
            }
        }
    }
}

/// What a [`CompileCache::prune`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed, the least recently used first.
    pub entries: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Temporary files left by writes that were interrupted.
    pub temps: usize,
    /// The bytes of the entries left (those of this process's components included).
    pub left_bytes: u64,
    /// Files that could not be removed (each logged); the prune went on past them.
    pub failed: usize,
    /// Why the last of them could not be removed.
    pub error: Option<String>,
}

/// How a component was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// Compiled now (and stored when a cache is configured).
    Compiled,
    /// Loaded from the cache without compiling.
    Cached,
}

impl CompileCache {
    /// A cache in `dir`, created (mode 0700) when missing, bounded by [`DEFAULT_CACHE_LIMIT`].
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self {
            dir,
            limit: DEFAULT_CACHE_LIMIT,
            in_use: Arc::default(),
            failures: Arc::default(),
            retry: COMPILE_CACHE_RETRY,
            remove: remove_if_present,
        })
    }

    /// The same cache removing files with `remove` when it prunes (tests: a removal that fails).
    #[cfg(test)]
    fn with_remove(mut self, remove: fn(&Path) -> std::io::Result<bool>) -> Self {
        self.remove = remove;
        self
    }

    /// The same cache writing what it could not write again every `retry` (tests; the default
    /// is [`COMPILE_CACHE_RETRY`]).
    pub fn with_retry(mut self, retry: Duration) -> Self {
        self.retry = retry;
        self
    }

    /// Reports to `conditions`, from the first write or prune that fails on:
    /// [`crate::health::COMPILE_CACHE_WRITABLE`] is `False` while a component compiled and still
    /// loaded is not written (the next start would compile it again), or while files that a
    /// prune must remove cannot be (the cache grows past its limit), and `True` again once both
    /// are done (or the component is no longer loaded).
    pub fn report_to(&self, conditions: &crate::health::Conditions) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        failures.conditions = Some(conditions.clone());
        if !failures.entries.is_empty() || failures.prune_error.is_some() {
            failures.report(&self.dir, self.retry);
        }
    }

    /// Keeps `component` (compiled for `path`, whose write failed with `error`) to be written
    /// again every [`Self::with_retry`] by a thread of its own while it is loaded ([`InUse`]);
    /// the thread ends once nothing waits.
    fn unsaved(&self, path: PathBuf, component: Component, error: &std::io::Error) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        failures.entries.insert(path, component);
        failures.error = error.to_string();
        failures.report(&self.dir, self.retry);
        self.keep_retrying(&mut failures);
    }

    /// Starts the thread that retries what failed, unless it runs.
    fn keep_retrying(&self, failures: &mut Failures) {
        if failures.retrying {
            return;
        }
        let cache = self.clone();
        let spawned =
            std::thread::Builder::new().name("steward-cache".into()).spawn(move || while cache.retry_failed() {});
        failures.retrying = spawned.is_ok();
    }

    /// Records whether the last prune left the cache over its limit because files could not be
    /// removed (`why`), says so, and has it pruned again until it can be.
    fn prune_failed(&self, why: Option<String>) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if failures.prune_error == why {
            return;
        }
        let failing = why.is_some();
        failures.prune_error = why;
        failures.report(&self.dir, self.retry);
        if failing {
            self.keep_retrying(&mut failures);
        }
    }

    /// After a pause, writes again what could not be written and is still loaded, and prunes
    /// again a cache that could not be pruned; returns whether either still fails.
    fn retry_failed(&self) -> bool {
        std::thread::sleep(self.retry);
        let entries: Vec<(PathBuf, Component)> = {
            let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            // A component no longer loaded (its plugin replaced or removed) is not needed at the
            // next start, and its memory goes.
            let held = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
            failures.entries.retain(|path, _| held.contains_key(path));
            drop(held);
            failures.entries.iter().map(|(p, c)| (p.clone(), c.clone())).collect()
        };
        let mut written = Vec::new();
        let mut failed = None;
        for (path, component) in entries {
            match component.serialize().map_err(std::io::Error::other).and_then(|b| write_atomic(&self.dir, &path, &b))
            {
                Ok(()) => written.push(path),
                Err(e) => failed = Some(e.to_string()),
            }
        }
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        for path in &written {
            failures.entries.remove(path);
        }
        if let Some(e) = failed {
            failures.error = e;
        }
        failures.report(&self.dir, self.retry);
        let prune = !written.is_empty() || failures.prune_error.is_some();
        drop(failures);
        if !written.is_empty() {
            tracing::info!(dir = %self.dir.display(), written = written.len(), "compiled plugins written to the compile cache");
        }
        if prune {
            self.prune_logged();
        }
        // Decided under the lock that `unsaved` and `prune_failed` take: a failure recorded
        // after this finds the thread gone and starts another.
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let more = !failures.entries.is_empty() || failures.prune_error.is_some();
        failures.retrying = more;
        more
    }

    /// The same cache bounded by `limit` bytes of entries instead.
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache file for `bytes` under `engine`.
    pub fn path_for(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let digest = Sha256::digest(bytes);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}-{:016x}.cwasm", h.finish()))
    }

    /// Loads the component for `bytes` from the cache, or compiles and stores it, with the hold
    /// that keeps its entry from being pruned while the caller keeps it.
    ///
    /// A cache entry that cannot be loaded (corrupt, truncated, from another
    /// engine) is recompiled and replaced; a component that cannot be written is returned all
    /// the same, and written again every [`Self::with_retry`] while it is loaded (see
    /// [`Self::report_to`]). A load from the cache marks the entry used (its modification
    /// time); a new entry prunes the cache to its limit.
    pub fn load_or_compile(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<(Component, Origin, InUse)> {
        let path = self.path_for(engine, bytes);
        let held = self.hold(&path);
        // Entries are read into memory rather than mapped: a mapped file that
        // something truncates in place would crash the host with SIGBUS.
        if let Ok(cached) = read_and_mark_used(&path) {
            // SAFETY: the file was written by `precompile_component` of an engine with the
            // same compatibility hash, into a directory private to this host; wasmtime
            // checks its header and compatibility before using it.
            match unsafe { Component::deserialize(engine, &cached) } {
                Ok(c) => return Ok((c, Origin::Cached, held)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "compile cache entry unusable; recompiling")
                }
            }
        }
        let compiled = engine.precompile_component(bytes)?;
        // SAFETY: `compiled` comes from `precompile_component` of this very engine.
        let c = unsafe { Component::deserialize(engine, &compiled)? };
        match write_atomic(&self.dir, &path, &compiled) {
            Ok(()) => {
                // Written now, it no longer waits to be written again.
                let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
                if failures.entries.remove(&path).is_some() {
                    failures.report(&self.dir, self.retry);
                }
                drop(failures);
                self.prune_logged();
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the compile cache");
                self.unsaved(path, c.clone(), &e);
            }
        }
        Ok((c, Origin::Compiled, held))
    }

    fn hold(&self, path: &Path) -> InUse {
        *self.in_use.lock().unwrap_or_else(PoisonError::into_inner).entry(path.to_path_buf()).or_default() += 1;
        InUse { path: path.to_path_buf(), in_use: self.in_use.clone() }
    }

    /// Removes the entries used least recently until the others add up to no more than the
    /// limit, never one this process holds ([`InUse`]), and temporary files of interrupted
    /// writes once an hour old. Only files named as this cache names them are touched; a file
    /// another process removed first is not an error, and one that cannot be removed is logged
    /// and passed over.
    pub fn prune(&self) -> std::io::Result<Pruned> {
        self.prune_with(self.remove)
    }

    /// [`prune`](Self::prune) removing files with `remove` ([`remove_if_present`]).
    fn prune_with(&self, remove: impl Fn(&Path) -> std::io::Result<bool>) -> std::io::Result<Pruned> {
        let now = SystemTime::now();
        let mut pruned = Pruned::default();
        let mut entries = Vec::new();
        for item in std::fs::read_dir(&self.dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(meta) = item.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let modified = meta.modified().unwrap_or(now);
            if is_temp_name(name) {
                if stale(modified, now) && removed(&remove, &item.path(), &mut pruned) == Some(true) {
                    pruned.temps += 1;
                }
            } else if is_entry_name(name) {
                entries.push((modified, item.path(), meta.len()));
            }
        }
        pruned.left_bytes = entries.iter().map(|(_, _, len)| len).sum();
        // Least recently used first; the name breaks ties so that every process agrees.
        entries.sort();
        for (_, path, len) in entries {
            if pruned.left_bytes <= self.limit {
                break;
            }
            // Held across the check and the removal: a load that takes its hold after the check
            // finds the file gone and compiles it again, rather than losing it after its read.
            let held = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
            if held.contains_key(&path) {
                continue;
            }
            if let Some(by_us) = removed(&remove, &path, &mut pruned) {
                if by_us {
                    pruned.entries += 1;
                    pruned.bytes += len;
                }
                pruned.left_bytes -= len;
            }
        }
        Ok(pruned)
    }

    /// [`prune`](Self::prune), saying in the log what it removed, or that the components this
    /// process holds are alone over the limit, or why it could not prune; a cache left over its
    /// limit because files could not be removed (or not read) is said on the host condition too.
    fn prune_logged(&self) {
        let failure = match self.prune() {
            Ok(p) => {
                if p.entries > 0 || p.temps > 0 {
                    tracing::info!(
                        dir = %self.dir.display(),
                        removed = p.entries,
                        removed_bytes = p.bytes,
                        temporary_files = p.temps,
                        limit = self.limit,
                        "compile cache pruned: the entries used least recently were over its limit"
                    );
                }
                if p.left_bytes > self.limit && p.failed == 0 {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        bytes = p.left_bytes,
                        limit = self.limit,
                        "the compiled plugins loaded now are over the compile cache's limit; they are kept, \
                         and every other entry goes: raise cache_limit"
                    );
                }
                (p.failed > 0 && p.left_bytes > self.limit).then(|| {
                    format!(
                        "{} file(s) could not be removed ({}); it holds {} bytes against a limit of {}",
                        p.failed,
                        p.error.as_deref().unwrap_or("no error given"),
                        p.left_bytes,
                        self.limit
                    )
                })
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot prune the compile cache");
                Some(format!("cannot read it: {e}"))
            }
        };
        self.prune_failed(failure);
    }
}

/// Removes `path` with `remove`: `Some(true)` when this call removed it, `Some(false)` when
/// another process had, `None` (logged, counted in `failed`) when it could not be removed.
fn removed(remove: impl Fn(&Path) -> std::io::Result<bool>, path: &Path, pruned: &mut Pruned) -> Option<bool> {
    match remove(path) {
        Ok(by_us) => Some(by_us),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot remove a compile cache file");
            pruned.failed += 1;
            pruned.error = Some(e.to_string());
            None
        }
    }
}

/// Reads a cache entry and marks it used now (its modification time, which [`CompileCache::prune`]
/// orders by); an entry whose time cannot be set (a read-only disk) is still read.
fn read_and_mark_used(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let _ = file.set_modified(SystemTime::now());
    Ok(bytes)
}

/// Whether `name` is an entry's: 64 hex digits, `-`, 16 hex digits, `.cwasm`.
fn is_entry_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".cwasm") else { return false };
    let Some((digest, engine)) = stem.split_once('-') else { return false };
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    hex(digest, 64) && hex(engine, 16)
}

/// The environment variable that names the compile cache of the commands that load a plugin
/// without a host ([`user_cache_dir`]); set and empty, they compile every time.
pub const CACHE_ENV: &str = "STEWARD_COMPILE_CACHE";

/// Where the commands that load a plugin without a running host (`steward plugin test`,
/// `plugin inspect`, `plugin push`, `crds`, `rbac`, `webhook`) keep compiled components: `$STEWARD_COMPILE_CACHE`
/// if set (`None` when set and empty), else `$XDG_CACHE_HOME/steward/compiled`, else
/// `$HOME/.cache/steward/compiled`; `None` when none of these is set to an absolute path. A host
/// keeps its own cache (`cache_dir` of its config).
pub fn user_cache_dir() -> Option<PathBuf> {
    user_cache_dir_from(|name| std::env::var_os(name))
}

fn user_cache_dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(dir) = var(CACHE_ENV) {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    // The XDG base directory rules: a relative path is ignored.
    let absolute = |name: &str| var(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let base = absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|h| h.join(".cache")))?;
    Some(base.join("steward").join("compiled"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A file named as an entry (`n` repeated), `len` bytes, last used `age` seconds before a
    /// fixed day in the past (so that every test's times are apart and none is "now").
    fn entry(dir: &Path, n: u8, len: usize, age: u64) -> PathBuf {
        let path = dir.join(format!("{}-{:016x}.cwasm", format!("{n:02x}").repeat(32), 7));
        std::fs::write(&path, vec![0u8; len]).unwrap();
        set_age(&path, age);
        path
    }

    fn set_age(path: &Path, age: u64) {
        let day = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(day - Duration::from_secs(age)).unwrap();
    }

    /// A component with nothing in it but a custom section named `name`: valid, compiles in
    /// no time, and differs by name.
    fn component(name: &str) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
        bytes.extend([0, name.len() as u8 + 1, name.len() as u8]);
        bytes.extend(name.as_bytes());
        bytes
    }

    #[test]
    fn a_prune_removes_the_least_recently_used_entries_until_the_rest_fit() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(200);
        let oldest = entry(dir.path(), 1, 100, 40);
        let older = entry(dir.path(), 2, 100, 30);
        let newer = entry(dir.path(), 3, 100, 20);
        let new = entry(dir.path(), 4, 100, 10);
        let pruned = cache.prune().unwrap();
        assert_eq!(pruned, Pruned { entries: 2, bytes: 200, left_bytes: 200, ..Default::default() });
        assert!(!oldest.exists() && !older.exists(), "the two used least recently are gone");
        assert!(newer.exists() && new.exists(), "exactly at the limit is within it");
        assert_eq!(cache.prune().unwrap(), Pruned { left_bytes: 200, ..Default::default() });
    }

    #[test]
    fn a_prune_keeps_the_entries_of_loaded_components_even_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(50);
        let loaded = entry(dir.path(), 1, 100, 40);
        let other = entry(dir.path(), 2, 100, 10);
        let hold = cache.hold(&loaded);
        let twice = cache.hold(&loaded);
        assert_eq!(cache.prune().unwrap(), Pruned { entries: 1, bytes: 100, left_bytes: 100, ..Default::default() });
        assert!(loaded.exists() && !other.exists());
        drop(hold);
        assert!(cache.prune().unwrap().entries == 0 && loaded.exists(), "still held once");
        drop(twice);
        assert_eq!(cache.prune().unwrap().entries, 1);
        assert!(!loaded.exists(), "let go, it is pruned like any other");
    }

    #[test]
    fn a_file_that_cannot_be_removed_is_passed_over_and_one_gone_already_is_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(100);
        let stuck = entry(dir.path(), 1, 100, 30);
        let gone = entry(dir.path(), 2, 100, 20);
        let next = entry(dir.path(), 3, 100, 10);
        let pruned = cache
            .prune_with(|p| match p {
                p if p == stuck => Err(std::io::ErrorKind::PermissionDenied.into()),
                // Another process removed it between the listing and this removal.
                p if p == gone => Ok(false),
                p => remove_if_present(p),
            })
            .unwrap();
        let error = Some(std::io::Error::from(std::io::ErrorKind::PermissionDenied).to_string());
        assert_eq!(pruned, Pruned { entries: 1, bytes: 100, left_bytes: 100, failed: 1, error, ..Default::default() });
        assert!(stuck.exists() && !next.exists(), "the next one went in its place");
    }

    #[test]
    fn a_prune_removes_stale_temporary_files_and_nothing_it_did_not_name() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(1);
        let stale_temp = dir.path().join(".tmp-1-0");
        std::fs::write(&stale_temp, b"half").unwrap();
        set_age(&stale_temp, 0);
        let fresh_temp = dir.path().join(format!(".tmp-{}-999", std::process::id()));
        std::fs::write(&fresh_temp, b"being written").unwrap();
        let foreign = ["README", "notes.cwasm", "zz-0000000000000007.cwasm", ".tmp-editor"].map(|n| dir.path().join(n));
        for f in &foreign {
            std::fs::write(f, b"not ours").unwrap();
            set_age(f, 0);
        }
        std::fs::create_dir(dir.path().join("oci")).unwrap();
        let pruned = cache.prune().unwrap();
        assert_eq!(pruned, Pruned { temps: 1, ..Default::default() });
        assert!(!stale_temp.exists(), "a temporary file of an interrupted write goes after an hour");
        assert!(fresh_temp.exists(), "one being written stays");
        assert!(foreign.iter().all(|f| f.exists()) && dir.path().join("oci").is_dir());
    }

    #[test]
    fn new_entries_prune_the_cache_and_a_load_from_it_counts_as_a_use() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let (a, b, c) = (component("a"), component("b"), component("c"));
        let cache = CompileCache::new(dir.path()).unwrap();
        let (_, origin, _) = cache.load_or_compile(&engine, &a).unwrap();
        assert_eq!(origin, Origin::Compiled);
        let size = std::fs::metadata(cache.path_for(&engine, &a)).unwrap().len();
        // Room for two entries; the holds are dropped at once, as for a plugin unloaded.
        let cache = cache.with_limit(size * 5 / 2);
        let origin = |bytes: &[u8]| cache.load_or_compile(&engine, bytes).unwrap().1;
        assert_eq!(origin(&b), Origin::Compiled);
        set_age(&cache.path_for(&engine, &a), 20);
        set_age(&cache.path_for(&engine, &b), 10);
        assert_eq!(origin(&a), Origin::Cached, "a is used again");
        assert_eq!(origin(&c), Origin::Compiled);
        assert!(!cache.path_for(&engine, &b).exists(), "b, used least recently, made room for c");
        assert_eq!(origin(&a), Origin::Cached);
        assert_eq!(origin(&c), Origin::Cached);
        assert_eq!(origin(&b), Origin::Compiled, "b compiles again");
    }

    /// Waits (30 s at most, else fails saying `never`) until `CompileCacheWritable` is `True`.
    fn wait_true(conditions: &crate::health::Conditions, never: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let ty = crate::health::COMPILE_CACHE_WRITABLE;
        while conditions.get(ty, None).is_some_and(|c| c.status != steward_sdk::ConditionStatus::True) {
            assert!(std::time::Instant::now() < deadline, "{never}: {:?}", conditions.list());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_component_the_cache_cannot_write_is_reported_and_written_once_it_can_be() {
        use crate::health::{COMPILE_CACHE_WRITABLE, Conditions};
        use steward_sdk::ConditionStatus;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("compiled");
        let engine = Engine::default();
        let cache = CompileCache::new(&dir).unwrap().with_retry(Duration::from_millis(20));
        let conditions = Conditions::new();
        cache.report_to(&conditions);
        cache.load_or_compile(&engine, &component("a")).unwrap();
        assert_eq!(conditions.get(COMPILE_CACHE_WRITABLE, None), None, "nothing is listed while all is well");

        // A file where the directory was: every write fails, as root too (permissions would not).
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, "not a directory").unwrap();
        let (_, origin, _held) = cache.load_or_compile(&engine, &component("b")).unwrap();
        assert_eq!(origin, Origin::Compiled, "the plugin runs all the same");
        let c = conditions.get(COMPILE_CACHE_WRITABLE, None).expect("reported");
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "CannotWrite"));
        assert!(
            c.message.contains("1 compiled plugin(s) cannot be written") && c.message.contains("cache_dir"),
            "{c:?}"
        );
        assert!(!c.blocks_readiness, "the host can do its job");
        // One compiled and let go at once (a plugin replaced meanwhile) is not kept waiting.
        drop(cache.load_or_compile(&engine, &component("c")).unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !conditions.get(COMPILE_CACHE_WRITABLE, None).unwrap().message.contains("1 compiled plugin(s)") {
            assert!(std::time::Instant::now() < deadline, "c still waits: {:?}", conditions.list());
            std::thread::sleep(Duration::from_millis(10));
        }

        // Repaired, the component is written again by itself (not compiled again), and it says so.
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        wait_true(&conditions, "never written again");
        assert_eq!(conditions.get(COMPILE_CACHE_WRITABLE, None).unwrap().reason, "Written");
        assert_eq!(cache.load_or_compile(&engine, &component("b")).unwrap().1, Origin::Cached);
        assert!(!cache.path_for(&engine, &component("c")).exists());
    }

    /// While set, [`failing_remove`] fails as a file the host may not remove would.
    static REMOVAL_FAILS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    fn failing_remove(path: &Path) -> std::io::Result<bool> {
        if REMOVAL_FAILS.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        }
        remove_if_present(path)
    }

    #[test]
    fn a_cache_that_cannot_be_pruned_to_its_limit_is_reported_and_pruned_once_it_can_be() {
        use crate::health::{COMPILE_CACHE_WRITABLE, Conditions};
        use steward_sdk::ConditionStatus;
        let tmp = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        // One byte: any entry not loaded now must go.
        let cache = CompileCache::new(tmp.path())
            .unwrap()
            .with_limit(1)
            .with_retry(Duration::from_millis(20))
            .with_remove(failing_remove);
        let conditions = Conditions::new();
        cache.report_to(&conditions);
        drop(cache.load_or_compile(&engine, &component("a")).unwrap());
        assert_eq!(conditions.get(COMPILE_CACHE_WRITABLE, None), None, "nothing is listed while all is well");

        REMOVAL_FAILS.store(true, std::sync::atomic::Ordering::SeqCst);
        let (_, _, _b) = cache.load_or_compile(&engine, &component("b")).unwrap();
        let stale = cache.path_for(&engine, &component("a"));
        assert!(stale.exists(), "a could not be removed");
        let c = conditions.get(COMPILE_CACHE_WRITABLE, None).expect("reported");
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "CannotPrune"));
        assert!(c.message.contains("1 file(s) could not be removed") && c.message.contains("cache_limit"), "{c:?}");
        assert!(!c.blocks_readiness, "the host can do its job");

        // Once the file can be removed, the cache is pruned again by itself and says so.
        REMOVAL_FAILS.store(false, std::sync::atomic::Ordering::SeqCst);
        wait_true(&conditions, "never pruned again");
        assert_eq!(conditions.get(COMPILE_CACHE_WRITABLE, None).unwrap().reason, "Written");
        assert!(!stale.exists(), "a is gone");
        assert!(cache.path_for(&engine, &component("b")).exists(), "b, loaded, is kept over the limit");
    }

    fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.into())
    }

    #[test]
    fn the_user_cache_is_named_by_the_variable_then_xdg_then_home() {
        let dir = |vars: &[(&str, &str)]| user_cache_dir_from(env(vars));
        let all = [(CACHE_ENV, "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(dir(&all), Some(PathBuf::from("/c")));
        assert_eq!(dir(&all[1..]), Some(PathBuf::from("/x/steward/compiled")));
        assert_eq!(dir(&all[2..]), Some(PathBuf::from("/h/.cache/steward/compiled")));
        assert_eq!(dir(&[(CACHE_ENV, ""), ("HOME", "/h")]), None, "set and empty: no cache");
        assert_eq!(
            dir(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")]),
            Some(PathBuf::from("/h/.cache/steward/compiled"))
        );
        assert_eq!(dir(&[("HOME", "rel")]), None);
        assert_eq!(dir(&[]), None);
    }
}
