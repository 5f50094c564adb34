//! The on-disk cache of compiled components, keyed by content hash and engine compatibility.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of precompiled components (`<sha256>-<engine hash>.cwasm`).
///
/// The directory must be private to the host: loading a cached file maps
/// native code into the process. Files are written atomically (temp file,
/// then rename), so a crash never leaves a half-written entry under a valid name.
#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
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
    /// A cache in `dir`, created (mode 0700) when missing.
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self { dir })
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
    /// costs the next start a compile.
    pub fn load_or_compile(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<(Component, Origin)> {
        let path = self.path_for(engine, bytes);
        // Entries are read into memory rather than mapped: a mapped file that
        // something truncates in place would crash the host with SIGBUS.
        if let Ok(cached) = std::fs::read(&path) {
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
        if let Err(e) = self.store(&path, &compiled) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the compile cache");
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

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(".tmp-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    Ok((path, f))
}

#[cfg(test)]
mod tests {
    use super::*;

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
