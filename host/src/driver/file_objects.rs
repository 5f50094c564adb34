//! Objects the host applies in filesystem mode: each is a file the host owns in the resources directory, read back by the source as an object of the host.
//!
//! An object is written where the host writes the objects it creates
//! ([`super::files::created_path`]), under a first line that names the object it was made for
//! (or the host's mark of a created object), so a user sees it, and the source reads,
//! reconciles and shows it like any object. Only a kind a plugin serves has somewhere to go in
//! this mode. A file the host did not write, or wrote for another owner, is never written over
//! nor deleted.

use std::path::Path;

use serde_json::Value;
use steward_sdk::KindInfo;

use super::files::{CREATED_MARK, created_path};
use super::{DriverError, ObjectId, ObjectKind, Selected, Selector};
use crate::model::ObjectKey;
use crate::source::{Source, SourceObject};

/// The first words of every file the host writes for an owner: `# Child of <Kind>/<namespace>/<name>, ...`.
const OWNED_MARK: &str = "# Child of ";

/// Writes `obj` (a whole object of the served kind `kind`, or of no served kind: `None`) as a
/// file of the host under `dir`, unless the file holds that text already. `owner` is the object
/// it is made for (its file says so); without one it is marked as created by the host.
pub(super) async fn apply(
    dir: &Path,
    source: &dyn Source,
    kind: Option<KindInfo>,
    obj: &Value,
    owner: Option<&ObjectKey>,
) -> Result<Value, DriverError> {
    let wanted =
        ObjectKind::of(obj).ok_or_else(|| DriverError::Refused("the object has no apiVersion or kind".into()))?;
    let kind = kind.filter(|k| api_version(k) == wanted.api_version).ok_or_else(|| {
        DriverError::Refused(format!(
            "no plugin serves {wanted} here; in filesystem mode an object the host makes must be of a kind a \
             plugin serves (the host reconciles it as one of its objects): load that plugin, or run in Kubernetes mode"
        ))
    })?;
    let meta = |k: &str| obj.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default();
    let (name, namespace) = (meta("name"), meta("namespace"));
    if name.is_empty() {
        return Err(DriverError::Refused("the object has no metadata.name".into()));
    }
    if !kind.namespaced && !namespace.is_empty() {
        return Err(DriverError::Refused(format!(
            "{wanted} is cluster-scoped; it cannot be made in the namespace {namespace}"
        )));
    }
    let key = ObjectKey::new(&kind.kind, namespace, name);
    let path = created_path(dir, &kind, namespace, name);
    let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
    if let Some(o) = source.get(&key).filter(|o| o.location.file != rel) {
        return Err(DriverError::Refused(format!("{key} is defined already, in {}; rename one of them", o.location)));
    }
    let yaml = serde_saphyr::to_string(obj).map_err(|e| DriverError::Refused(format!("cannot write YAML: {e}")))?;
    let text = format!("{}{yaml}", header(owner));
    write(&path, owner, text).await.map_err(DriverError::Refused)?;
    Ok(obj.clone())
}

/// Deletes the file of object `id` (of the served kind `kind`, if one serves it), if it is still
/// the one the host wrote for `owner`; a file that is gone, or is not the host's, is left.
pub(super) async fn delete(
    dir: &Path,
    source: &dyn Source,
    kind: Option<KindInfo>,
    id: &ObjectId,
    owner: Option<&ObjectKey>,
) -> Result<(), DriverError> {
    let key = ObjectKey::new(&id.kind.kind, &id.namespace, &id.name);
    // A kind whose plugin went away: its scope is unknown here; its file is found by the source.
    let path = match kind {
        Some(kind) => created_path(dir, &kind, &id.namespace, &id.name),
        None => match source.get(&key) {
            Some(o) => dir.join(o.location.file.as_str()),
            None => return Ok(()),
        },
    };
    match tokio::fs::read_to_string(&path).await {
        Ok(text) if made_for(&text, owner) => {}
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(DriverError::Refused(format!("cannot read {}: {e}", path.display()))),
    }
    match tokio::fs::remove_file(&path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DriverError::Refused(format!("cannot delete {key} ({}): {e}", path.display()))),
    }
}

/// The objects of `kinds` in `namespace` that `selector` selects, as the source holds them
/// (without status: the host's store keeps it), ordered by kind and name.
pub(super) fn list(source: &dyn Source, kinds: &[ObjectKind], namespace: &str, selector: &Selector) -> Vec<Selected> {
    let mut out: Vec<Selected> = source
        .keys()
        .into_iter()
        .filter(|k| k.namespace() == namespace && kinds.iter().any(|w| w.kind == **k.kind()))
        .filter_map(|k| source.get(&k))
        .filter_map(|o| {
            let kind = kinds.iter().find(|w| w.kind == o.raw.kind && w.api_version == o.raw.api_version)?;
            let object = as_value(&o);
            selector.matches(object.pointer("/metadata/labels")).then(|| Selected::new(kind.clone(), object))
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// An object of the source as a whole object: `apiVersion`, `kind`, `metadata` (name,
/// namespace, generation, labels, annotations) and `spec`.
fn as_value(o: &SourceObject) -> Value {
    serde_json::json!({
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
}

/// `group/version` of a served kind (`version` alone for the core group).
fn api_version(k: &KindInfo) -> String {
    if k.group.is_empty() { k.version.clone() } else { format!("{}/{}", k.group, k.version) }
}

/// The first line of the file of an object made for `owner` (or created by the host).
fn header(owner: Option<&ObjectKey>) -> String {
    match owner {
        Some(o) => {
            format!("{OWNED_MARK}{o}, made by steward: it is rewritten as its owner wants and removed with it.\n")
        }
        None => format!("{CREATED_MARK} Delete this file (or the object through the API) to remove it.\n"),
    }
}

/// Whether the file text is one the host wrote for `owner` (or created, without one).
fn made_for(text: &str, owner: Option<&ObjectKey>) -> bool {
    match owner {
        Some(o) => text.strip_prefix(OWNED_MARK).is_some_and(|rest| rest.starts_with(&format!("{o},"))),
        None => text.starts_with(CREATED_MARK),
    }
}

/// Writes the file unless it holds `text` already; refuses to replace a file the host did not
/// write for `owner`. Written beside under a hidden name, then renamed into place, so the
/// watcher never reads half a file.
async fn write(path: &Path, owner: Option<&ObjectKey>, text: String) -> Result<(), String> {
    match tokio::fs::read_to_string(path).await {
        Ok(old) if old == text => return Ok(()),
        Ok(old) if !made_for(&old, owner) => {
            let whose = owner.map_or_else(|| "through its API".to_string(), |o| format!("for {o}"));
            return Err(format!(
                "{} exists and steward did not write it {whose}; move that file or rename the object",
                path.display()
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
    fn only_the_owners_own_files_are_made_for_it() {
        let owner = ObjectKey::new("Site", "default", "web");
        let text = format!("{}apiVersion: example.dev/v1\n", header(Some(&owner)));
        assert!(text.starts_with("# Child of Site/default/web,"), "{text}");
        assert!(made_for(&text, Some(&owner)), "{text}");
        assert!(!made_for(&text, Some(&ObjectKey::new("Site", "default", "we"))));
        assert!(!made_for(&text, None));
        assert!(!made_for("apiVersion: v1\nkind: Page\n", Some(&owner)));
        assert!(made_for(&header(None), None));
    }

    #[tokio::test]
    async fn a_file_is_written_once_and_never_over_a_users() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x/y.yaml");
        let owner = ObjectKey::new("Site", "default", "web");
        let text = format!("{}a: 1\n", header(Some(&owner)));
        write(&path, Some(&owner), text.clone()).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let other = ObjectKey::new("Site", "default", "other");
        let e = write(&path, Some(&other), format!("{}a: 2\n", header(Some(&other)))).await.unwrap_err();
        assert!(e.contains("for Site/default/other"), "{e}");
        std::fs::write(&path, "a: mine\n").unwrap();
        assert!(write(&path, Some(&owner), text).await.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a: mine\n");
    }
}
