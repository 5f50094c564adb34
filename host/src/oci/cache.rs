//! The on-disk cache of pulled plugins, by digest, beside the compile cache: what a restart uses when the registry is down.
//!
//! `<dir>/blobs/sha256-<hex>.wasm` holds a component whose digest was verified when pulled (and
//! is verified again when read); `<dir>/refs/<sha256 of the reference>.json` records, per
//! configured reference, the manifest digest last loaded, its component's digest, and the key
//! its signature was verified with. Files are written atomically (temp file, then rename).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::layout::sha256_digest;

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
    /// A cache in `dir` (created, mode 0700, when missing).
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        for sub in ["blobs", "refs"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self { dir })
    }

    fn blob_path(&self, layer: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{}.wasm", layer.replace(':', "-")))
    }

    fn ref_path(&self, reference: &str) -> PathBuf {
        let key = sha256_digest(reference.as_bytes());
        self.dir.join("refs").join(format!("{}.json", &key[7..]))
    }

    /// Stores `wasm` (whose digest is `record.layer`) and records `record` for its reference.
    pub fn store(&self, record: &Recorded, wasm: &[u8]) -> std::io::Result<()> {
        let blob = self.blob_path(&record.layer);
        if self.read_blob(&record.layer).is_none() {
            write_atomic(&self.dir, &blob, wasm)?;
        }
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        write_atomic(&self.dir, &self.ref_path(&record.reference), &json)
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

fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_plugin_loads_back_and_a_corrupt_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("oci")).unwrap();
        let wasm = b"component".to_vec();
        let record = Recorded {
            reference: "oci://localhost:5000/p:1".into(),
            digest: "sha256:m".into(),
            layer: sha256_digest(&wasm),
            key: None,
        };
        assert!(cache.load(&record.reference).is_none());
        cache.store(&record, &wasm).unwrap();
        assert_eq!(cache.load(&record.reference), Some((record.clone(), wasm)));
        assert!(cache.load("oci://localhost:5000/p:2").is_none());
        std::fs::write(cache.blob_path(&record.layer), b"tampered").unwrap();
        assert!(cache.load(&record.reference).is_none());
    }
}
