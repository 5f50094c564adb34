//! The on-disk cache of compiled components, keyed by content hash and engine compatibility.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The default bound of a compile cache's entries, in bytes (wasmtime's own cache has the same
/// default): a few dozen compiled plugins (a Rust plugin compiles to 1–3 MB, a Python one to
/// about 35 MB).
pub const DEFAULT_LIMIT: u64 = 1024 * 1024 * 1024;

/// How old a temporary file must be before a prune takes it for the leftover of a write that
/// was interrupted (a write lasts milliseconds: it starts after the compile).
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// A directory of precompiled components (`<sha256>-<engine hash>.cwasm`), bounded in size.
///
/// The directory must be private to the host: loading a cached file maps
/// native code into the process. Files are written atomically (temp file,
/// then rename), so a crash never leaves a half-written entry under a valid name.
/// Every new entry is followed by a [`prune`](Self::prune): the entries used least recently
/// (a load from the cache counts as a use) are removed until the rest fit the limit. Entries
/// are read into memory, never mapped, so removing one that a running host loaded is safe.
#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
    limit: u64,
}

/// What a [`CompileCache::prune`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed, the least recently used first.
    pub entries: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Temporary files left by writes that were interrupted.
    pub temps: usize,
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
    /// A cache in `dir`, created (mode 0700) when missing, bounded by [`DEFAULT_LIMIT`].
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self { dir, limit: DEFAULT_LIMIT })
    }

    /// The same cache bounded by `limit` bytes of entries instead (the entry just written is
    /// kept even when it alone is larger).
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }

    /// The bound of the entries' size, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
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

    /// Loads the component for `bytes` from the cache, or compiles and stores it.
    ///
    /// A cache entry that cannot be loaded (corrupt, truncated, from another
    /// engine) is recompiled and replaced; a cache that cannot be written only
    /// costs the next start a compile. A load from the cache marks the entry used (its
    /// modification time); a new entry prunes the cache to its limit.
    pub fn load_or_compile(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<(Component, Origin)> {
        let path = self.path_for(engine, bytes);
        // Entries are read into memory rather than mapped: a mapped file that
        // something truncates in place would crash the host with SIGBUS.
        if let Ok(cached) = read_and_mark_used(&path) {
            // SAFETY: the file was written by `precompile_component` of an engine with the
            // same compatibility hash, into a directory private to this host; wasmtime
            // checks its header and compatibility before using it.
            match unsafe { Component::deserialize(engine, &cached) } {
                Ok(c) => return Ok((c, Origin::Cached)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "compile cache entry unusable; recompiling")
                }
            }
        }
        let compiled = engine.precompile_component(bytes)?;
        match self.store(&path, &compiled) {
            Ok(()) => self.prune_logged(&path),
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the compile cache"),
        }
        // SAFETY: `compiled` comes from `precompile_component` of this very engine.
        let c = unsafe { Component::deserialize(engine, &compiled)? };
        Ok((c, Origin::Compiled))
    }

    fn store(&self, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(compiled)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, path)
    }

    /// Removes the entries used least recently until the others add up to no more than the
    /// limit, never `keep` (the entry just written), and temporary files older than an hour.
    /// Only files named as this cache names them are touched; a file that another process
    /// removed first is not an error.
    pub fn prune(&self, keep: &Path) -> std::io::Result<Pruned> {
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
            if name.starts_with(TEMP_PREFIX) {
                let stale = now.duration_since(modified).is_ok_and(|age| age > STALE_TEMP);
                if stale && removed(&item.path())? {
                    pruned.temps += 1;
                }
            } else if is_entry_name(name) {
                entries.push((modified, item.path(), meta.len()));
            }
        }
        let mut total: u64 = entries.iter().map(|(_, _, len)| len).sum();
        // Least recently used first; the name breaks ties so that every process agrees.
        entries.sort();
        for (_, path, len) in entries {
            if total <= self.limit {
                break;
            }
            if path == keep {
                continue;
            }
            if removed(&path)? {
                pruned.entries += 1;
                pruned.bytes += len;
            }
            total -= len;
        }
        Ok(pruned)
    }

    /// [`prune`](Self::prune), saying what it removed (or why it could not) in the log.
    fn prune_logged(&self, keep: &Path) {
        match self.prune(keep) {
            Ok(p) if p.entries > 0 || p.temps > 0 => tracing::info!(
                dir = %self.dir.display(),
                removed = p.entries,
                removed_bytes = p.bytes,
                temporary_files = p.temps,
                limit = self.limit,
                "compile cache pruned: the entries used least recently were over its limit"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e, "cannot prune the compile cache"),
        }
    }
}

/// Reads a cache entry and marks it used now (its modification time, which [`CompileCache::prune`]
/// orders by); a cache on a read-only disk is still read.
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

/// Removes `path`; `false` when it was gone already.
fn removed(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// How the names of temporary files begin ([`tempfile_in`]).
const TEMP_PREFIX: &str = ".tmp-";

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

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!("{TEMP_PREFIX}{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    Ok((path, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file named as an entry (`n` repeated), `len` bytes, last used `age` before a fixed
    /// day in the past (so every test's times are apart and none is "now").
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
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(250);
        let oldest = entry(dir.path(), 1, 100, 40);
        let older = entry(dir.path(), 2, 100, 30);
        let newer = entry(dir.path(), 3, 100, 20);
        let new = entry(dir.path(), 4, 100, 10);
        let pruned = cache.prune(&new).unwrap();
        assert_eq!(pruned, Pruned { entries: 2, bytes: 200, temps: 0 });
        assert!(!oldest.exists() && !older.exists(), "the two used least recently are gone");
        assert!(newer.exists() && new.exists());
        assert_eq!(cache.prune(&new).unwrap(), Pruned::default(), "within the limit, nothing more goes");
    }

    #[test]
    fn a_prune_keeps_the_entry_just_written_even_when_it_alone_is_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(50);
        let kept = entry(dir.path(), 1, 100, 40);
        let other = entry(dir.path(), 2, 100, 10);
        assert_eq!(cache.prune(&kept).unwrap(), Pruned { entries: 1, bytes: 100, temps: 0 });
        assert!(kept.exists() && !other.exists());
    }

    #[test]
    fn a_prune_removes_stale_temporary_files_and_nothing_it_did_not_name() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_limit(1);
        let stale = dir.path().join(".tmp-1-0");
        std::fs::write(&stale, b"half").unwrap();
        set_age(&stale, 0);
        let fresh = tempfile_in(dir.path()).unwrap().0;
        let foreign = ["README", "notes.cwasm", "zz-0000000000000007.cwasm"].map(|n| dir.path().join(n));
        for f in &foreign {
            std::fs::write(f, b"not ours").unwrap();
        }
        std::fs::create_dir(dir.path().join("oci")).unwrap();
        let pruned = cache.prune(&dir.path().join("none")).unwrap();
        assert_eq!(pruned, Pruned { entries: 0, bytes: 0, temps: 1 });
        assert!(!stale.exists(), "a temporary file of an interrupted write goes after an hour");
        assert!(fresh.exists(), "one being written stays");
        assert!(foreign.iter().all(|f| f.exists()) && dir.path().join("oci").is_dir());
    }

    #[test]
    fn new_entries_prune_the_cache_and_a_load_from_it_counts_as_a_use() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let (a, b, c) = (component("a"), component("b"), component("c"));
        let cache = CompileCache::new(dir.path()).unwrap();
        assert_eq!(cache.load_or_compile(&engine, &a).unwrap().1, Origin::Compiled);
        let size = std::fs::metadata(cache.path_for(&engine, &a)).unwrap().len();
        // Room for two entries.
        let cache = cache.with_limit(size * 5 / 2);
        assert_eq!(cache.load_or_compile(&engine, &b).unwrap().1, Origin::Compiled);
        set_age(&cache.path_for(&engine, &a), 20);
        set_age(&cache.path_for(&engine, &b), 10);
        assert_eq!(cache.load_or_compile(&engine, &a).unwrap().1, Origin::Cached, "a is used again");
        assert_eq!(cache.load_or_compile(&engine, &c).unwrap().1, Origin::Compiled);
        assert!(!cache.path_for(&engine, &b).exists(), "b, used least recently, made room for c");
        assert_eq!(cache.load_or_compile(&engine, &a).unwrap().1, Origin::Cached);
        assert_eq!(cache.load_or_compile(&engine, &c).unwrap().1, Origin::Cached);
        assert_eq!(cache.load_or_compile(&engine, &b).unwrap().1, Origin::Compiled, "b compiles again");
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
