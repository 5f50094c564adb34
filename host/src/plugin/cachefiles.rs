//! The files of the host's on-disk caches: atomic writes, the temporary files they leave when
//! interrupted, and removals that another process may have made first.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How old a file a cache no longer needs must be before a prune removes it: a temporary file
/// (a write lasts milliseconds), or a pulled component that no reference points to (so that one
/// another process has just written, before its reference, stays).
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(3600);

/// How the names of temporary files begin ([`write_atomic`]).
const TEMP_PREFIX: &str = ".tmp-";

/// Writes `bytes` to `path` atomically: a temporary file in `dir` (on the same file system),
/// written and synced, then renamed over `path`. A crash leaves at most a temporary file.
pub(crate) fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!("{TEMP_PREFIX}{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all()).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether `name` is that of a temporary file [`write_atomic`] makes: `.tmp-<pid>-<n>`.
pub(crate) fn is_temp_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix(TEMP_PREFIX).and_then(|rest| rest.split_once('-')).is_some_and(|(a, b)| digits(a) && digits(b))
}

/// Whether a file last modified at `modified` is older than [`STALE_AFTER`] at `now`.
pub(crate) fn stale(modified: SystemTime, now: SystemTime) -> bool {
    now.duration_since(modified).is_ok_and(|age| age > STALE_AFTER)
}

/// Removes `path`; `false` when it was gone already (another process pruned it first).
pub(crate) fn remove_if_present(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_write_atomic_makes_are_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        write_atomic(dir.path(), &path, b"one").unwrap();
        write_atomic(dir.path(), &path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, ["file"], "no temporary file is left behind");
        assert!(is_temp_name(".tmp-123-0") && is_temp_name(&format!(".tmp-{}-7", std::process::id())));
        for name in [".tmp-", ".tmp-1", ".tmp-1-", ".tmp-a-1", ".tmp-1-2.wasm", "x.tmp-1-2", ".tmp-editor-swap"] {
            assert!(!is_temp_name(name), "{name}");
        }
    }

    #[test]
    fn a_file_is_stale_an_hour_after_it_was_written_and_never_when_from_the_future() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert!(stale(now - STALE_AFTER - Duration::from_secs(1), now));
        assert!(!stale(now - STALE_AFTER + Duration::from_secs(1), now));
        assert!(!stale(now + Duration::from_secs(60), now));
        let dir = tempfile::tempdir().unwrap();
        assert!(!remove_if_present(&dir.path().join("gone")).unwrap());
    }
}
