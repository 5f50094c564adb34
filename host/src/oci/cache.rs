//! The on-disk cache of pulled plugins, by digest, beside the compile cache: what a restart uses when the registry is down.
//!
//! `<dir>/blobs/sha256-<hex>.wasm` holds a component whose digest was verified when pulled (and
//! is verified again when read); `<dir>/refs/<sha256 of the reference>.json` records, per
//! configured reference, the manifest digest last loaded, its component's digest, and the key
//! its signature was verified with. Files are written atomically (temp file, then rename).
//! A component no recorded reference points to any more (its tag moved on) is removed at a
//! start or a store (a pull) at least an hour after it was last stored.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::layout::sha256_digest;
use crate::plugin::cachefiles::{is_temp_name, remove_if_present, stale, write_atomic};

/// What the cache remembers of one reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// The reference as configured.
    pub reference: String,
    /// The manifest digest last loaded.
    pub digest: String,
    /// Its component's digest.
    pub layer: String,
    /// The fingerprint of the key its signature was verified with.
    #[serde(default)]
    pub key: Option<String>,
}

/// A directory of pulled components and of what each reference last resolved to.
#[derive(Clone, Debug)]
pub struct ArtifactCache {
    dir: PathBuf,
}

impl ArtifactCache {
    /// A cache in `dir`. Nothing is created here: each [`store`](Self::store) makes what is
    /// missing, so a directory removed or made unusable while the host runs is used again once
    /// repaired.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory, mode 0700, with its `blobs` and `refs`.
    fn make_dirs(&self) -> std::io::Result<()> {
        for sub in ["blobs", "refs"] {
            std::fs::create_dir_all(self.dir.join(sub))?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }

    fn blob_path(&self, layer: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{}.wasm", layer.replace(':', "-")))
    }

    fn ref_path(&self, reference: &str) -> PathBuf {
        let key = sha256_digest(reference.as_bytes());
        self.dir.join("refs").join(format!("{}.json", &key[7..]))
    }

    /// Stores `wasm` (whose digest is `record.layer`) and records `record` for its reference,
    /// then [prunes](Self::prune) what no reference needs (a failed prune is only logged). The
    /// component is written even when stored before (a tag moved back): it is then new, so no
    /// prune takes it before its reference is written, and a damaged copy is replaced.
    pub fn store(&self, record: &Recorded, wasm: &[u8]) -> std::io::Result<()> {
        self.make_dirs()?;
        write_atomic(&self.dir, &self.blob_path(&record.layer), wasm)?;
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        write_atomic(&self.dir, &self.ref_path(&record.reference), &json)?;
        self.prune_logged();
        Ok(())
    }

    /// [`prune`](Self::prune), saying in the log what it removed or why it could not.
    pub fn prune_logged(&self) {
        match self.prune() {
            Ok(0) => {}
            Ok(n) => tracing::info!(dir = %self.dir.display(), removed = n, "plugin cache: removed unused files"),
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e, "cannot prune the plugin cache"),
        }
    }

    /// Removes, once an hour old, the components that no recorded reference points to and the
    /// temporary files of interrupted writes; returns how many files went. When a reference
    /// cannot be read, no component goes (what it points to is not known).
    pub fn prune(&self) -> std::io::Result<usize> {
        let mut candidates = Vec::new();
        // None when a reference cannot be read (`referenced` names it in the log).
        if let Some(used) = self.referenced()? {
            for item in read_dir_or_none(&self.dir.join("blobs"))? {
                let path = item?.path();
                if !used.contains(&path) {
                    candidates.push(path);
                }
            }
        }
        for item in read_dir_or_none(&self.dir)? {
            let item = item?;
            if item.file_name().to_str().is_some_and(is_temp_name) {
                candidates.push(item.path());
            }
        }
        let now = SystemTime::now();
        let mut removed = 0;
        for path in candidates {
            // Gone since the listing (another follower's prune or write): nothing to do.
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            if !meta.is_file() || !meta.modified().is_ok_and(|m| stale(m, now)) {
                continue;
            }
            match remove_if_present(&path) {
                Ok(by_us) => removed += usize::from(by_us),
                Err(e) => tracing::warn!(file = %path.display(), error = %e, "cannot remove a plugin cache file"),
            }
        }
        Ok(removed)
    }

    /// The components the recorded references point to; `None` when one cannot be read.
    fn referenced(&self) -> std::io::Result<Option<HashSet<PathBuf>>> {
        let mut used = HashSet::new();
        for item in read_dir_or_none(&self.dir.join("refs"))? {
            let path = item?.path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(is_temp_name) {
                continue;
            }
            let record = match std::fs::read(&path) {
                Ok(text) => serde_json::from_slice::<Recorded>(&text).ok(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => None,
            };
            match record {
                Some(r) => used.insert(self.blob_path(&r.layer)),
                None => {
                    tracing::warn!(
                        file = %path.display(),
                        "cannot read this plugin cache reference, so no cached component is removed; \
                         delete the file if its source is no longer configured"
                    );
                    return Ok(None);
                }
            };
        }
        Ok(Some(used))
    }

    /// What is recorded for `reference`, when its component is there too (not read: see
    /// [`load`](Self::load) for that).
    pub fn recorded(&self, reference: &str) -> Option<Recorded> {
        let record: Recorded = serde_json::from_slice(&std::fs::read(self.ref_path(reference)).ok()?).ok()?;
        (record.reference == reference && self.blob_path(&record.layer).is_file()).then_some(record)
    }

    /// What was last loaded for `reference`, with its component; `None` when nothing is
    /// cached or the cached component no longer matches its digest.
    pub fn load(&self, reference: &str) -> Option<(Recorded, Vec<u8>)> {
        let text = std::fs::read(self.ref_path(reference)).ok()?;
        let record: Recorded = serde_json::from_slice(&text).ok()?;
        if record.reference != reference {
            return None;
        }
        let wasm = self.read_blob(&record.layer)?;
        Some((record, wasm))
    }

    fn read_blob(&self, layer: &str) -> Option<Vec<u8>> {
        let path = self.blob_path(layer);
        let bytes = std::fs::read(&path).ok()?;
        if sha256_digest(&bytes) == layer {
            Some(bytes)
        } else {
            tracing::warn!(file = %path.display(), "cached plugin does not match its digest; ignoring it");
            None
        }
    }
}

/// The entries of `dir`; none when it does not exist (nothing was stored yet).
fn read_dir_or_none(dir: &Path) -> std::io::Result<impl Iterator<Item = std::io::Result<std::fs::DirEntry>>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries).into_iter().flatten()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None.into_iter().flatten()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    /// What a store of `wasm` for `reference` records (manifest digest `sha256:m`).
    fn recorded(reference: &str, wasm: &[u8]) -> Recorded {
        Recorded { reference: reference.into(), digest: "sha256:m".into(), layer: sha256_digest(wasm), key: None }
    }

    #[test]
    fn a_stored_plugin_loads_back_and_a_corrupt_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("oci"));
        let wasm = b"component".to_vec();
        let record = recorded("oci://localhost:5000/p:1", &wasm);
        assert!(cache.load(&record.reference).is_none());
        cache.store(&record, &wasm).unwrap();
        assert_eq!(cache.load(&record.reference), Some((record.clone(), wasm)));
        assert!(cache.load("oci://localhost:5000/p:2").is_none());
        std::fs::write(cache.blob_path(&record.layer), b"tampered").unwrap();
        assert!(cache.load(&record.reference).is_none());
    }

    #[test]
    fn nothing_exists_until_a_store_and_a_store_makes_what_was_removed_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("oci"));
        assert!(!dir.path().join("oci").exists(), "nothing is created before a store");
        assert_eq!(cache.prune().unwrap(), 0, "a cache never stored to has nothing to prune");
        let wasm = b"component".to_vec();
        let record = recorded("oci://r/p:1", &wasm);

        // `refs` is a file: the store fails, saying why, and stores nothing.
        std::fs::create_dir_all(dir.path().join("oci")).unwrap();
        std::fs::write(dir.path().join("oci/refs"), "in the way").unwrap();
        let e = cache.store(&record, &wasm).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert!(cache.load(&record.reference).is_none());

        // Repaired, the same store works; removed while in use, the next store makes it again.
        std::fs::remove_file(dir.path().join("oci/refs")).unwrap();
        cache.store(&record, &wasm).unwrap();
        assert_eq!(cache.load(&record.reference), Some((record.clone(), wasm.clone())));
        assert_eq!(cache.recorded(&record.reference), Some(record.clone()));
        std::fs::remove_dir_all(dir.path().join("oci")).unwrap();
        assert!(cache.load(&record.reference).is_none() && cache.recorded(&record.reference).is_none());
        cache.store(&record, &wasm).unwrap();
        std::fs::remove_file(cache.blob_path(&record.layer)).unwrap();
        assert_eq!(cache.recorded(&record.reference), None, "a record without its component holds nothing");
        cache.store(&record, &wasm).unwrap();
        assert_eq!(cache.load(&record.reference), Some((record, wasm)));
    }

    /// Makes `path` look written two hours ago.
    fn age(path: &Path) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
    }

    #[test]
    fn a_component_left_behind_by_a_moved_tag_goes_and_those_in_use_stay() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("oci"));
        let record = |reference: &str, wasm: &[u8]| Recorded {
            reference: reference.into(),
            digest: format!("sha256:m-{}", wasm.len()),
            layer: sha256_digest(wasm),
            key: None,
        };
        let (v1, v2, other) = (b"version 1".to_vec(), b"version 2!".to_vec(), b"another plugin".to_vec());
        cache.store(&record("oci://r/p:1", &v1), &v1).unwrap();
        cache.store(&record("oci://r/q:1", &other), &other).unwrap();
        for wasm in [&v1, &other] {
            age(&cache.blob_path(&sha256_digest(wasm)));
        }
        let stale_temp = cache.dir.join(".tmp-1-0");
        std::fs::write(&stale_temp, b"half").unwrap();
        age(&stale_temp);
        // The tag moves: version 1 is no longer anyone's.
        cache.store(&record("oci://r/p:1", &v2), &v2).unwrap();
        assert!(!cache.blob_path(&sha256_digest(&v1)).exists(), "the old component went");
        assert!(!stale_temp.exists());
        assert_eq!(cache.load("oci://r/p:1").map(|(_, w)| w), Some(v2.clone()));
        assert_eq!(cache.load("oci://r/q:1").map(|(_, w)| w), Some(other), "another reference's old file stays");
        // A component nobody references yet, but written within the hour, stays.
        let young = cache.blob_path(&sha256_digest(b"just pulled"));
        std::fs::write(&young, b"just pulled").unwrap();
        assert_eq!(cache.prune().unwrap(), 0);
        assert!(young.exists());
    }

    #[test]
    fn a_tag_moved_back_refreshes_its_component_and_an_unreadable_reference_keeps_all() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("oci"));
        let (v1, v2) = (b"version 1".to_vec(), b"version 2!".to_vec());
        let record = |wasm: &[u8]| Recorded {
            reference: "oci://r/p:1".into(),
            digest: format!("sha256:m-{}", wasm.len()),
            layer: sha256_digest(wasm),
            key: None,
        };
        cache.store(&record(&v1), &v1).unwrap();
        cache.store(&record(&v2), &v2).unwrap();
        let old = cache.blob_path(&sha256_digest(&v1));
        age(&old);
        // Back to version 1, whose file is still there: it counts as written now.
        cache.store(&record(&v1), &v1).unwrap();
        let modified = std::fs::metadata(&old).unwrap().modified().unwrap();
        assert!(!stale(modified, SystemTime::now()), "a prune between its check and its reference would take it");
        age(&cache.blob_path(&sha256_digest(&v2)));
        // A reference that cannot be read: what it points to is not known, so no component goes.
        std::fs::write(cache.dir.join("refs").join("broken.json"), b"{ not json").unwrap();
        assert_eq!(cache.prune().unwrap(), 0);
        assert!(cache.blob_path(&sha256_digest(&v2)).exists());
        std::fs::remove_file(cache.dir.join("refs").join("broken.json")).unwrap();
        assert_eq!(cache.prune().unwrap(), 1, "once readable again, version 2 goes");
        assert_eq!(cache.load("oci://r/p:1").map(|(_, w)| w), Some(v1));
    }
}
