//! Child objects in filesystem mode: each child of a served kind is a file the host owns in the resources directory, read back as an object of the host, and removed with its owner.
//!
//! A child is written where the host writes the objects it creates
//! ([`super::files::created_path`]), under a first line that names its owner, so a user sees
//! it, and the source reads, reconciles and shows it like any object (the API names its owner
//! as its source). A child of a kind no plugin serves has nowhere to go in this mode and is an
//! error on the owner.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use steward_sdk::{Child, KindInfo, ObservedChild};

use super::DriverError;
use super::files::created_path;
use crate::children::{self as marks, OWNER_ANNOTATION};
use crate::model::ObjectKey;
use crate::source::Source;

/// The first words of every child file: `# Child of <Kind>/<namespace>/<name>, ...`.
const CHILD_MARK: &str = "# Child of ";

/// The children the host made, by owner.
pub struct FileChildren {
    dir: PathBuf,
    source: Arc<dyn Source>,
    /// Owner → its children's keys; `None` until built from the source on first use.
    index: Mutex<Option<HashMap<ObjectKey, BTreeSet<ObjectKey>>>>,
}

impl FileChildren {
    /// Children under `dir`, read back through `source`.
    pub fn new(dir: PathBuf, source: Arc<dyn Source>) -> Self {
        Self { dir, source, index: Mutex::new(None) }
    }

    /// The keys of `owner`'s children (made by the host, whether or not their file is still there).
    pub fn keys(&self, owner: &ObjectKey) -> Vec<ObjectKey> {
        self.with_index(|idx| idx.get(owner).map(|s| s.iter().cloned().collect()).unwrap_or_default())
    }

    /// Writes each of `children` that is not on disk as desired, deletes `owner`'s other
    /// children, and records them. `served` finds the kind a plugin serves.
    pub async fn apply(
        &self,
        owner: &ObjectKey,
        children: &[Child],
        served: impl Fn(&str) -> Option<KindInfo>,
    ) -> Result<(), DriverError> {
        let mut wanted = BTreeSet::new();
        for c in children {
            let what = format!("child {}/{} {}", c.api_version, c.kind, c.name);
            let kind = served(&c.kind).filter(|k| api_version(k) == c.api_version).ok_or_else(|| {
                DriverError::Refused(format!(
                    "{what}: no plugin serves {}/{} here; in filesystem mode a child must be of a kind a \
                     plugin serves (the host reconciles it as one of its objects): load that plugin, or run \
                     in Kubernetes mode",
                    c.api_version, c.kind
                ))
            })?;
            if !kind.namespaced {
                return Err(DriverError::Refused(format!(
                    "{what}: {} is cluster-scoped; a child lives in its owner's namespace",
                    c.kind
                )));
            }
            let key = ObjectKey::new(&c.kind, owner.namespace(), &c.name);
            let path = created_path(&self.dir, &kind, owner.namespace(), &c.name);
            let rel = path.strip_prefix(&self.dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            if let Some(o) = self.source.get(&key).filter(|o| o.location.file != rel) {
                return Err(DriverError::Refused(format!(
                    "{what}: {key} is defined already, in {}; rename the child or that object",
                    o.location
                )));
            }
            let text = document(c, owner)?;
            write_child(&path, owner, text).await.map_err(|e| DriverError::Refused(format!("{what}: {e}")))?;
            wanted.insert(key);
        }
        let made: Vec<ObjectKey> = self.keys(owner);
        for key in made.iter().filter(|k| !wanted.contains(*k)) {
            self.remove(owner, key, &served).await?;
        }
        self.with_index(|idx| {
            if wanted.is_empty() {
                idx.remove(owner);
            } else {
                idx.insert(owner.clone(), wanted);
            }
        });
        Ok(())
    }

    /// Deletes every child of `owner`.
    pub async fn delete_all(
        &self,
        owner: &ObjectKey,
        served: impl Fn(&str) -> Option<KindInfo>,
    ) -> Result<(), DriverError> {
        for key in self.keys(owner) {
            self.remove(owner, &key, &served).await?;
        }
        self.with_index(|idx| idx.remove(owner));
        Ok(())
    }

    /// `owner`'s children as the source holds them (without status: the engine adds the
    /// host's record of each).
    pub fn observed(&self, owner: &ObjectKey) -> Vec<ObservedChild> {
        self.keys(owner)
            .into_iter()
            .map(|key| {
                let obj = self.source.get(&key);
                let api_version = obj.as_ref().map(|o| o.raw.api_version.clone()).unwrap_or_default();
                let object = obj.map(|o| {
                    json!({
                        "apiVersion": o.raw.api_version,
                        "kind": o.raw.kind,
                        "metadata": {
                            "name": o.raw.name,
                            "namespace": o.raw.namespace,
                            "generation": o.raw.generation,
                            "labels": o.raw.labels,
                            "annotations": o.raw.annotations,
                        },
                        "spec": serde_json::from_str::<Value>(&o.raw.spec).unwrap_or(Value::Null),
                    })
                });
                ObservedChild { api_version, kind: key.kind().to_string(), name: key.name().to_string(), object }
            })
            .collect()
    }

    /// Removes one child's file, if it is still the one the host wrote for `owner`.
    async fn remove(
        &self,
        owner: &ObjectKey,
        key: &ObjectKey,
        served: &impl Fn(&str) -> Option<KindInfo>,
    ) -> Result<(), DriverError> {
        // A kind whose plugin went away: its scope is unknown here; its file is found by the source.
        let path = match served(key.kind()) {
            Some(kind) => created_path(&self.dir, &kind, key.namespace(), key.name()),
            None => match self.source.get(key) {
                Some(o) => self.dir.join(o.location.file.as_str()),
                None => return Ok(()),
            },
        };
        match tokio::fs::read_to_string(&path).await {
            Ok(text) if is_child_of(&text, owner) => {}
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(DriverError::Refused(format!("cannot read {}: {e}", path.display()))),
        }
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(DriverError::Refused(format!("cannot delete the child {key} ({}): {e}", path.display()))),
        }
    }

    /// Runs `f` on the index, building it from the source the first time: every object whose
    /// owner annotation names an owner (the files the host wrote carry it).
    fn with_index<T>(&self, f: impl FnOnce(&mut HashMap<ObjectKey, BTreeSet<ObjectKey>>) -> T) -> T {
        let mut guard = self.index.lock().unwrap_or_else(|p| p.into_inner());
        let idx = guard.get_or_insert_with(|| {
            let mut idx: HashMap<ObjectKey, BTreeSet<ObjectKey>> = HashMap::new();
            for key in self.source.keys() {
                let Some(o) = self.source.get(&key) else { continue };
                if let Some(owner) = o.raw.annotations.get(OWNER_ANNOTATION).and_then(|v| marks::owner_of_annotation(v))
                {
                    idx.entry(owner).or_default().insert(key);
                }
            }
            idx
        });
        f(idx)
    }
}

/// `group/version` of a served kind (`version` alone for the core group).
fn api_version(k: &KindInfo) -> String {
    if k.group.is_empty() { k.version.clone() } else { format!("{}/{}", k.group, k.version) }
}

/// Whether the file text is a child the host wrote for `owner`.
fn is_child_of(text: &str, owner: &ObjectKey) -> bool {
    text.strip_prefix(CHILD_MARK).is_some_and(|rest| rest.starts_with(&format!("{},", marks::owner_id(owner))))
}

/// The child's file: the mark naming its owner, then the manifest as YAML.
fn document(c: &Child, owner: &ObjectKey) -> Result<String, DriverError> {
    let manifest = marks::manifest(c, owner, None);
    let yaml =
        serde_saphyr::to_string(&manifest).map_err(|e| DriverError::Refused(format!("cannot write YAML: {e}")))?;
    Ok(format!(
        "{CHILD_MARK}{}, made by steward: it is rewritten as its owner wants and removed with it.\n{yaml}",
        marks::owner_id(owner)
    ))
}

/// Writes the child's file unless it holds `text` already; refuses to replace a file that is
/// not a child of `owner`. Written beside under a hidden name, then renamed into place, so the
/// watcher never reads half a file.
async fn write_child(path: &Path, owner: &ObjectKey, text: String) -> Result<(), String> {
    match tokio::fs::read_to_string(path).await {
        Ok(old) if old == text => return Ok(()),
        Ok(old) if !is_child_of(&old, owner) => {
            return Err(format!(
                "{} exists and steward did not write it for {}; move that file or rename the child",
                path.display(),
                marks::owner_id(owner)
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let parent = path.parent().unwrap_or(&path).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = parent.join(format!(".{}-{n}.steward-tmp", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })
    })
    .await
    .map_err(|e| format!("the file write did not finish: {e}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owners_own_child_files_are_its_children() {
        let owner = ObjectKey::new("Site", "default", "web");
        let c = Child::new("example.dev/v1", "Page", "home", json!({"spec": {"title": "Home"}}));
        let text = document(&c, &owner).unwrap();
        assert!(is_child_of(&text, &owner), "{text}");
        assert!(!is_child_of(&text, &ObjectKey::new("Site", "default", "we")));
        assert!(!is_child_of("apiVersion: v1\nkind: Page\n", &owner));
        assert!(text.contains("steward.dev/owner: Site/default/web"), "{text}");
    }
}
