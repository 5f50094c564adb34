//! The filesystem mode's driver: YAML files under a directory, status in the store only, always the leader.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use steward_sdk::{KindInfo, RawObject};
use tokio::sync::{mpsc, watch};

use super::{
    Driver, DriverError, KindState, Lifecycle, ObjectId, ObjectKind, Presence, Selected, Selector, Started, Written,
    file_objects,
};
use crate::model::{ObjectKey, SourceLocation, StatusRecord};
use crate::source::fs::{FsOptions, FsSource};
use crate::source::{Source, SourceEvent, SourceObject};

/// Filesystem mode: the files are the whole truth, nothing holds an object, every write is the store's.
pub struct FilesDriver {
    fs: Arc<FsSource>,
    /// The resources directory; objects the host creates go under it ([`created_path`]).
    dir: std::path::PathBuf,
    source: Arc<dyn Source>,
    leader: watch::Receiver<bool>,
    _leader: watch::Sender<bool>,
    /// Each kind's scope as its plugin last described it (`true`: namespaced). A kind whose
    /// plugin goes keeps its last scope, so its objects keep their keys.
    scopes: Mutex<BTreeMap<String, bool>>,
    /// Once started: where a rescan after a change of scope sends its events.
    events: Mutex<Option<mpsc::UnboundedSender<SourceEvent>>>,
    /// The kinds served now (enabled kinds of the loaded plugins), by name.
    served: Mutex<HashMap<String, KindInfo>>,
}

impl FilesDriver {
    /// A driver over the resources directory; `known` are the generations and spec hashes the
    /// store remembers, so an unchanged file keeps its generation across restarts.
    pub fn new(opts: FsOptions, known: HashMap<ObjectKey, (u64, u64)>) -> Self {
        let dir = opts.dir.clone();
        let fs = FsSource::new(opts, known);
        let (tx, rx) = watch::channel(true);
        let source: Arc<dyn Source> = fs.clone();
        Self {
            dir,
            source,
            fs,
            leader: rx,
            _leader: tx,
            scopes: Mutex::new(BTreeMap::new()),
            events: Mutex::new(None),
            served: Mutex::default(),
        }
    }

    /// Reports the condition `ResourcesReadable` to `conditions` (see [`FsSource::report_to`]).
    pub fn report_to(&self, conditions: &crate::health::Conditions) {
        self.fs.report_to(conditions);
    }

    /// The served kind called `kind`, if any.
    fn served_kind(&self, kind: &str) -> Option<KindInfo> {
        self.served.lock().unwrap_or_else(|p| p.into_inner()).get(kind).cloned()
    }

    /// The kinds whose objects have no namespace (the namespace rule, [`crate::model::namespace_for`]).
    fn cluster_scoped(&self) -> BTreeSet<String> {
        let scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        scopes.iter().filter(|(_, namespaced)| !**namespaced).map(|(k, _)| k.clone()).collect()
    }
}

/// Where the host writes an object it creates (`steward workflow run`, the API, `/mcp`):
/// `<resources>/<plural>/<namespace>/<name>.yaml`, so a user sees it, and removes it by
/// deleting the file or through the API.
pub fn created_path(dir: &std::path::Path, kind: &KindInfo, namespace: &str, name: &str) -> std::path::PathBuf {
    let ns = if namespace.is_empty() { "_cluster" } else { namespace };
    dir.join(&kind.plural).join(ns).join(format!("{name}.yaml"))
}

/// The first words of every file the host creates; only such a file can be deleted through the API.
pub(super) const CREATED_MARK: &str = "# Created by steward through its API.";

/// The YAML document of `obj` as the host writes it.
fn document(kind: &KindInfo, obj: &RawObject) -> Result<String, DriverError> {
    let yaml = document_body(kind, obj)?;
    Ok(format!("{CREATED_MARK} Delete this file (or the object through the API) to remove it.\n{yaml}"))
}

/// The YAML of `obj` alone (`apiVersion`, `kind`, `metadata`, `spec`), without the host's mark.
pub(super) fn document_body(kind: &KindInfo, obj: &RawObject) -> Result<String, DriverError> {
    let spec: serde_json::Value =
        serde_json::from_str(&obj.spec).map_err(|e| DriverError::Refused(format!("the spec is not JSON: {e}")))?;
    let mut metadata = serde_json::json!({"name": obj.name});
    if kind.namespaced {
        metadata["namespace"] = obj.namespace.clone().into();
    }
    if !obj.labels.is_empty() {
        metadata["labels"] = serde_json::to_value(&obj.labels).unwrap_or_default();
    }
    if !obj.annotations.is_empty() {
        metadata["annotations"] = serde_json::to_value(&obj.annotations).unwrap_or_default();
    }
    let doc = serde_json::json!({
        "apiVersion": format!("{}/{}", kind.group, kind.version),
        "kind": kind.kind,
        "metadata": metadata,
        "spec": spec,
    });
    serde_saphyr::to_string(&doc).map_err(|e| DriverError::Refused(format!("cannot write YAML: {e}")))
}

#[async_trait::async_trait]
impl Driver for FilesDriver {
    async fn create(&self, kind: &KindInfo, obj: &RawObject) -> Result<(), DriverError> {
        let path = created_path(&self.dir, kind, &obj.namespace, &obj.name);
        let text = document(kind, obj)?;
        let key = ObjectKey::new(&obj.kind, &obj.namespace, &obj.name);
        tokio::task::spawn_blocking(move || -> Result<(), DriverError> {
            let refused = |e: std::io::Error, what: &str| DriverError::Refused(format!("cannot {what}: {e}"));
            let parent = path.parent().unwrap_or(&path).to_path_buf();
            std::fs::create_dir_all(&parent).map_err(|e| refused(e, "create the directory for created objects"))?;
            // Written beside under a hidden name (never read), then linked into place: an
            // existing file is never replaced, and the watcher never sees a half-written one.
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = parent.join(format!(".{}-{n}.steward-tmp", std::process::id()));
            std::fs::write(&tmp, text).map_err(|e| refused(e, "write the object's file"))?;
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(DriverError::Exists(key)),
                Err(e) => Err(refused(e, "write the object's file")),
            }
        })
        .await
        .map_err(|e| DriverError::Refused(format!("the file write did not finish: {e}")))?
    }

    async fn delete(&self, kind: &KindInfo, key: &ObjectKey) -> Result<(), DriverError> {
        let path = created_path(&self.dir, kind, key.namespace(), key.name());
        let not_ours = || {
            DriverError::Refused(format!(
                "{key} is defined in a file of the resources directory that steward did not create; \
                 delete it from that file"
            ))
        };
        // A file the user wrote at the same path stays theirs: only the host's own carry its mark.
        match tokio::fs::read_to_string(&path).await {
            Ok(text) if text.starts_with(CREATED_MARK) => {}
            Ok(_) => return Err(not_ours()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_ours()),
            Err(e) => return Err(DriverError::Refused(format!("cannot read {}: {e}", path.display()))),
        }
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(DriverError::Refused(format!("cannot delete {}: {e}", path.display()))),
        }
    }

    async fn replace(&self, kind: &KindInfo, obj: &RawObject, from: &SourceLocation) -> Result<(), DriverError> {
        let text = if super::file_manage::is_created(&self.dir, from).await {
            document(kind, obj)?
        } else {
            document_body(kind, obj)?
        };
        super::file_manage::rewrite(&self.dir, from, &obj.name, text).await
    }

    async fn remove(&self, _kind: &KindInfo, key: &ObjectKey, from: &SourceLocation) -> Result<(), DriverError> {
        super::file_manage::remove(&self.dir, from, key).await
    }

    fn mode(&self) -> &'static str {
        "filesystem"
    }

    fn source(&self) -> Arc<dyn Source> {
        self.source.clone()
    }

    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    /// The full scan first (with the kinds' scopes known), then the watcher: every object is
    /// scheduled at once.
    async fn start(&self) -> Result<Started, DriverError> {
        self.fs.set_cluster_scoped(self.cluster_scoped()).await;
        self.fs.scan().await;
        let (mut watched, handle) = self.fs.watch().map_err(|e| DriverError::Watch(e.to_string()))?;
        let (tx, events) = mpsc::unbounded_channel();
        *self.events.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
        let forward = tokio::spawn(async move {
            while let Some(ev) = watched.recv().await {
                if tx.send(ev).is_err() {
                    return;
                }
            }
        });
        let keep: Box<dyn std::any::Any + Send> = Box::new((handle, AbortOnDrop(forward)));
        Ok(Started { events, schedule_all: true, keep: Some(keep), selected: None })
    }

    /// Learns the kinds' scopes: a kind that turns out cluster-scoped (or namespaced again)
    /// re-keys its objects, so the files are read again and the changes reported.
    fn set_kinds(&self, kinds: &[KindInfo]) {
        *self.served.lock().unwrap_or_else(|p| p.into_inner()) =
            kinds.iter().map(|k| (k.kind.clone(), k.clone())).collect();
        let changed = {
            let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
            let mut changed = false;
            for k in kinds {
                changed |= scopes.insert(k.kind.clone(), k.namespaced) != Some(k.namespaced);
            }
            changed
        };
        let Some(tx) = self.events.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
        if !changed {
            return;
        }
        let (fs, scoped) = (self.fs.clone(), self.cluster_scoped());
        tokio::spawn(async move {
            if fs.set_cluster_scoped(scoped).await {
                for ev in fs.scan().await {
                    let _ = tx.send(ev);
                }
            }
        });
    }

    fn listed(&self, _kind: &str) -> bool {
        false
    }

    fn kind_state(&self, _kind: &str) -> KindState {
        KindState::Served
    }

    fn readiness(&self, _kinds: &[String]) -> Result<(), String> {
        Ok(())
    }

    fn leads(&self) -> bool {
        true
    }

    fn leadership(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// A file never says "being deleted"; an object gone from its file is finalized from its record.
    fn lifecycle(&self, _key: &ObjectKey, obj: &SourceObject, known: bool) -> Lifecycle {
        match (obj.raw.deleting, known) {
            (false, _) => Lifecycle::Reconcile,
            (true, true) => Lifecycle::Finalize,
            (true, false) => Lifecycle::Ignore,
        }
    }

    async fn hold(&self, _key: &ObjectKey) -> Result<(), DriverError> {
        Ok(())
    }

    async fn release(&self, _key: &ObjectKey) -> Result<(), DriverError> {
        Ok(())
    }

    async fn write_status(&self, _: &ObjectKey, _: &StatusRecord) -> Result<Written, DriverError> {
        Ok(Written::NotKept)
    }

    fn status_unwritten(&self, _key: &ObjectKey) -> bool {
        false
    }

    async fn presence(&self, _key: &ObjectKey) -> Result<Presence, DriverError> {
        Ok(Presence::Gone)
    }

    fn publish(&self, _key: &ObjectKey, _warning: bool, _reason: &str, _action: &str, _note: &str) {}

    /// No ids in this mode.
    fn uid(&self, _key: &ObjectKey) -> Result<Option<String>, DriverError> {
        Ok(None)
    }

    /// Every object here is one of the source's, which reads the whole resources directory:
    /// nothing more to watch.
    fn watch_selected(&self, _kinds: &[ObjectKind], _selector: &Selector) {}

    fn list_selected(&self, kinds: &[ObjectKind], namespace: &str, selector: &Selector) -> Vec<Selected> {
        file_objects::list(&*self.source, kinds, namespace, selector)
    }

    /// The source's view, once the directories the host writes objects of `kinds` in are read
    /// again (a file written a moment ago is there); what the reading found is reported as
    /// the watcher would.
    async fn list_selected_now(
        &self,
        kinds: &[ObjectKind],
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<Selected>, DriverError> {
        for kind in kinds.iter().filter_map(|k| self.served_kind(&k.kind)) {
            let path = created_path(&self.dir, &kind, namespace, "_");
            let Some(folder) = path.parent().filter(|f| f.is_dir()) else { continue };
            let events = self.fs.reload_file(folder).await;
            if let Some(tx) = self.events.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                for ev in events {
                    let _ = tx.send(ev);
                }
            }
        }
        Ok(self.list_selected(kinds, namespace, selector))
    }

    /// A file of the host (see [`file_objects`]); the object must be of a kind a plugin serves.
    async fn apply_object(&self, obj: &Value, owner: Option<&ObjectKey>) -> Result<Value, DriverError> {
        let kind = obj.get("kind").and_then(Value::as_str).and_then(|k| self.served_kind(k));
        file_objects::apply(&self.dir, &*self.source, kind, obj, owner).await
    }

    async fn delete_object(&self, id: &ObjectId, owner: Option<&ObjectKey>) -> Result<(), DriverError> {
        let kind = self.served_kind(&id.kind.kind);
        file_objects::delete(&self.dir, &*self.source, kind, id, owner).await
    }

    async fn shutdown(&self, _grace: Duration) {}
}

/// Stops the forwarding task with the driver's watcher.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str, namespaced: bool) -> KindInfo {
        KindInfo {
            group: "test.steward.dev".into(),
            version: "v1".into(),
            kind: name.into(),
            plural: name.to_lowercase() + "s",
            namespaced,
            spec_schema: "{}".into(),
            resync_seconds: 0,
            columns: Vec::new(),
        }
    }

    #[tokio::test]
    async fn cluster_scoped_kinds_have_no_namespace_and_a_change_of_scope_re_keys_their_objects() {
        let dir = tempfile::tempdir().unwrap();
        let doc = |kind: &str, name: &str| {
            format!("apiVersion: test.steward.dev/v1\nkind: {kind}\nmetadata:\n  name: {name}\nspec: {{}}\n")
        };
        std::fs::write(dir.path().join("a.yaml"), format!("{}---\n{}", doc("Shared", "s"), doc("Local", "l"))).unwrap();
        let driver = FilesDriver::new(FsOptions::new(dir.path()), HashMap::new());
        driver.set_kinds(&[kind("Shared", false), kind("Local", true)]);
        let mut started = driver.start().await.unwrap();
        let source = driver.source();
        assert!(source.get(&ObjectKey::new("Shared", "", "s")).is_some(), "{:?}", source.keys());
        assert!(source.get(&ObjectKey::new("Local", "default", "l")).is_some(), "{:?}", source.keys());

        // A new version of the plugin says Local is cluster-scoped: its object moves to the empty namespace.
        driver.set_kinds(&[kind("Local", false)]);
        let (old, new) = (ObjectKey::new("Local", "default", "l"), ObjectKey::new("Local", "", "l"));
        let mut seen = Vec::new();
        let wait = async {
            while !(seen.contains(&SourceEvent::Deleted(old.clone()))
                && seen.contains(&SourceEvent::Changed(new.clone())))
            {
                seen.push(started.events.recv().await.expect("the driver's events"));
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait).await.unwrap_or_else(|_| panic!("events: {seen:?}"));
        assert!(source.get(&new).is_some() && source.get(&old).is_none(), "{:?}", source.keys());
        // Shared kept its scope although this call did not name it.
        assert!(source.get(&ObjectKey::new("Shared", "", "s")).is_some(), "{:?}", source.keys());
    }

    #[tokio::test]
    async fn created_objects_are_files_the_source_reads_and_only_those_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let driver = FilesDriver::new(FsOptions::new(dir.path()), HashMap::new());
        let run = kind("Run", true);
        driver.set_kinds(std::slice::from_ref(&run));
        let obj = RawObject {
            kind: "Run".into(),
            name: "r1".into(),
            namespace: "team-a".into(),
            labels: [("a".to_string(), "b".to_string())].into(),
            spec: r#"{"workflow":"w","args":{"n":1}}"#.into(),
            ..RawObject::default()
        };
        driver.create(&run, &obj).await.unwrap();
        let path = dir.path().join("runs/team-a/r1.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(CREATED_MARK), "{text}");
        let _started = driver.start().await.unwrap();
        let key = ObjectKey::new("Run", "team-a", "r1");
        let got = driver.source().get(&key).expect("the source reads the created file");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&got.raw.spec).unwrap()["args"]["n"], 1);
        assert_eq!(got.raw.labels.get("a").map(String::as_str), Some("b"));
        // The same key again is refused, and the file is left as it was.
        assert!(matches!(driver.create(&run, &obj).await, Err(DriverError::Exists(k)) if k == key));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        driver.delete(&run, &key).await.unwrap();
        assert!(!path.exists());
        // A file the user wrote at that path is theirs.
        std::fs::write(&path, "apiVersion: test.steward.dev/v1\nkind: Run\nmetadata: {name: r1, namespace: team-a}\n")
            .unwrap();
        let e = driver.delete(&run, &key).await.unwrap_err().to_string();
        assert!(e.contains("did not create"), "{e}");
        assert!(path.exists());
    }

    #[tokio::test]
    async fn applied_objects_are_files_of_their_owner_listed_by_selector_and_deleted_only_by_it() {
        let dir = tempfile::tempdir().unwrap();
        let driver = FilesDriver::new(FsOptions::new(dir.path()), HashMap::new());
        driver.set_kinds(&[kind("Page", true)]);
        let owner = ObjectKey::new("Site", "team-a", "web");
        let page = |name: &str, title: &str| {
            serde_json::json!({
                "apiVersion": "test.steward.dev/v1", "kind": "Page",
                "metadata": {"name": name, "namespace": "team-a", "labels": {"owner": "web"}},
                "spec": {"title": title},
            })
        };
        driver.apply_object(&page("home", "Home"), Some(&owner)).await.unwrap();
        let path = dir.path().join("pages/team-a/home.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Child of Site/team-a/web,"), "{text}");
        // Not a kind a plugin serves: nowhere to go in this mode.
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}});
        let e = driver.apply_object(&cm, Some(&owner)).await.unwrap_err().to_string();
        assert!(e.contains("no plugin serves v1/ConfigMap"), "{e}");

        let _started = driver.start().await.unwrap();
        let pages = [ObjectKind::new("test.steward.dev/v1", "Page")];
        let listed = driver.list_selected(&pages, "team-a", &Selector::default().equals("owner", "web"));
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].object["spec"]["title"], "Home");
        assert!(driver.list_selected(&pages, "team-a", &Selector::default().equals("owner", "other")).is_empty());
        assert!(driver.list_selected(&pages, "elsewhere", &Selector::default()).is_empty());

        // Another owner neither writes over it nor deletes it; its own owner does.
        let other = ObjectKey::new("Site", "team-a", "blog");
        assert!(driver.apply_object(&page("home", "Blog"), Some(&other)).await.is_err());
        driver.delete_object(&listed[0].id, Some(&other)).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        driver.delete_object(&listed[0].id, Some(&owner)).await.unwrap();
        assert!(!path.exists());
        driver.fs.scan().await;
        assert!(driver.list_selected(&pages, "team-a", &Selector::default()).is_empty());
    }
}
