//! Child objects in Kubernetes mode: server-side apply under the host's field manager with a controller owner reference, pruning, a watch per child kind that queues the owner, and removal with the owner.
//!
//! The cluster may have no garbage collector (the test API server has none), so the host
//! deletes a deleted owner's children itself, before it lets the owner go.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use steward_sdk::{Child, ObservedChild};
use tokio::sync::mpsc;

use super::FIELD_MANAGER;
use crate::children::{self as marks, OWNER_ANNOTATION, OWNER_KIND_LABEL, OWNER_NAME_LABEL};
use crate::metrics::{KubeOpLabel, Metrics};
use crate::model::ObjectKey;
use crate::plugin::ChildKind;

/// One child as last seen, by (apiVersion, kind, name).
type ChildId = (String, String, String);
/// Every owner's children as the watches last saw them.
type Seen = HashMap<ObjectKey, BTreeMap<ChildId, Arc<DynamicObject>>>;

/// Why children could not be made as desired; the message is for the owner's status.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChildError(pub String);

/// The children of every owner: their watches, what they last saw, and the writes that make
/// them as desired.
pub struct KubeChildren {
    client: kube::Client,
    metrics: Arc<Metrics>,
    /// The resources of the child kinds, found through discovery once.
    resources: Mutex<HashMap<ChildKind, ApiResource>>,
    /// The namespaces the host serves (all when empty): children live in their owners'.
    namespaces: Vec<String>,
    /// The watches of each granted child kind (one per served namespace, or one for all).
    watches: Mutex<HashMap<ChildKind, Vec<tokio::task::JoinHandle<()>>>>,
    seen: Arc<Mutex<Seen>>,
    owners: mpsc::UnboundedSender<ObjectKey>,
}

impl Drop for KubeChildren {
    fn drop(&mut self) {
        for (_, tasks) in self.watches.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            tasks.iter().for_each(|t| t.abort());
        }
    }
}

impl KubeChildren {
    /// No kinds watched yet; children are watched in `namespaces` (all when empty), and owners
    /// whose children change are sent on the returned channel.
    pub fn new(
        client: kube::Client,
        metrics: Arc<Metrics>,
        namespaces: Vec<String>,
    ) -> (Self, mpsc::UnboundedReceiver<ObjectKey>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let me = Self {
            client,
            metrics,
            namespaces,
            resources: Mutex::default(),
            watches: Mutex::default(),
            seen: Arc::default(),
            owners: tx,
        };
        (me, rx)
    }

    /// Watches exactly `kinds` (the child kinds granted to the loaded plugins), each for the
    /// objects that carry the owner label.
    pub fn set_kinds(&self, kinds: &[ChildKind]) {
        let wanted: BTreeSet<&ChildKind> = kinds.iter().collect();
        let mut watches = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches.retain(|k, tasks| {
            let keep = wanted.contains(k);
            if !keep {
                tasks.iter().for_each(|t| t.abort());
                tracing::info!(kind = %k, "stopping the watch of child kind");
            }
            keep
        });
        for k in wanted {
            if watches.contains_key(k) {
                continue;
            }
            let scopes: Vec<Option<String>> = if self.namespaces.is_empty() {
                vec![None]
            } else {
                self.namespaces.iter().cloned().map(Some).collect()
            };
            let tasks = scopes
                .into_iter()
                .map(|ns| {
                    let (client, seen, owners) = (self.client.clone(), self.seen.clone(), self.owners.clone());
                    tokio::spawn(watch_kind(client, k.clone(), ns, seen, owners))
                })
                .collect();
            tracing::info!(kind = %k, "watching child kind");
            watches.insert(k.clone(), tasks);
        }
    }

    /// The children of `owner` as the watches last saw them.
    pub fn observed(&self, owner: &ObjectKey) -> Vec<ObservedChild> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let Some(children) = seen.get(owner) else { return Vec::new() };
        children
            .iter()
            .map(|((api_version, kind, name), obj)| {
                let value = serde_json::to_value(&**obj).unwrap_or(Value::Null);
                ObservedChild {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    name: name.clone(),
                    object: Some(value),
                }
            })
            .collect()
    }

    /// Makes the children of `owner` exactly `children`: each one that the watch does not show
    /// as desired already is applied (server-side apply, forced, under the host's field
    /// manager, with a controller owner reference to `owner_obj`), and each one seen for the
    /// owner that is not desired any more is deleted. The first failure stops the rest and says
    /// which child and why.
    pub async fn apply(
        &self,
        owner: &ObjectKey,
        owner_obj: &DynamicObject,
        children: &[Child],
    ) -> Result<(), ChildError> {
        let owner_ref = owner_reference(owner, owner_obj)?;
        let seen: BTreeMap<ChildId, Arc<DynamicObject>> =
            self.seen.lock().unwrap_or_else(|p| p.into_inner()).get(owner).cloned().unwrap_or_default();
        let mut wanted = BTreeSet::new();
        for c in children {
            let id = (c.api_version.clone(), c.kind.clone(), c.name.clone());
            let manifest = marks::with_applied_hash(marks::manifest(c, owner, Some(owner_ref.clone())));
            wanted.insert(id.clone());
            if let Some(live) = seen.get(&id) {
                let live = serde_json::to_value(&**live).unwrap_or(Value::Null);
                if marks::covers(&live, &manifest) {
                    continue;
                }
            }
            let what = format!("child {}/{} {}", c.api_version, c.kind, c.name);
            let api = self.api(&kind_of(c), owner.namespace()).await.map_err(|e| ChildError(format!("{what}: {e}")))?;
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(&c.name, &params, &Patch::Apply(&manifest)).await.map_err(|e| refused(&what, "apply", e))?;
            self.count(owner, "child_apply");
        }
        for (id, obj) in &seen {
            if wanted.contains(id) {
                continue;
            }
            let (api_version, kind, name) = id;
            let what = format!("child {api_version}/{kind} {name}");
            let ck = ChildKind { api_version: api_version.clone(), kind: kind.clone() };
            let api = self.api(&ck, owner.namespace()).await.map_err(|e| ChildError(format!("{what}: {e}")))?;
            delete_child(&api, name, obj.metadata.uid.as_deref()).await.map_err(|e| refused(&what, "delete", e))?;
            self.count(owner, "child_delete");
        }
        Ok(())
    }

    /// Deletes every child of `owner`, of every watched kind, as the API server lists them now
    /// (not only as the watches saw them), so a deleted owner leaves nothing behind.
    pub async fn delete_all(&self, owner: &ObjectKey) -> Result<(), ChildError> {
        let kinds: Vec<ChildKind> = self.watches.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        let selector =
            format!("{OWNER_KIND_LABEL}={},{OWNER_NAME_LABEL}={}", owner.kind(), marks::owner_name_label(owner.name()));
        let id = marks::owner_id(owner);
        for k in kinds {
            let what = format!("children {k} of {id}");
            let api = self.api(&k, owner.namespace()).await.map_err(|e| ChildError(format!("{what}: {e}")))?;
            let list =
                api.list(&ListParams::default().labels(&selector)).await.map_err(|e| refused(&what, "list", e))?;
            for obj in list.items.iter().filter(|o| annotation_owner(o).as_ref() == Some(owner)) {
                let name = obj.metadata.name.clone().unwrap_or_default();
                delete_child(&api, &name, obj.metadata.uid.as_deref())
                    .await
                    .map_err(|e| refused(&format!("child {k} {name}"), "delete", e))?;
                self.count(owner, "child_delete");
            }
        }
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).remove(owner);
        Ok(())
    }

    /// The API of child kind `k` in `namespace`; the kind is looked up through discovery once.
    async fn api(&self, k: &ChildKind, namespace: &str) -> Result<Api<DynamicObject>, String> {
        let known = self.resources.lock().unwrap_or_else(|p| p.into_inner()).get(k).cloned();
        let ar = match known {
            Some(ar) => ar,
            None => {
                let ar = resolve(&self.client, k).await?;
                self.resources.lock().unwrap_or_else(|p| p.into_inner()).insert(k.clone(), ar.clone());
                ar
            }
        };
        if namespace.is_empty() {
            return Err("a cluster-scoped owner cannot own children (they live in the owner's namespace)".into());
        }
        Ok(Api::namespaced_with(self.client.clone(), namespace, &ar))
    }

    fn count(&self, owner: &ObjectKey, op: &str) {
        self.metrics.kube_writes.get_or_create(&KubeOpLabel { kind: owner.kind().to_string(), op: op.into() }).inc();
    }
}

/// The kind of `c`, as a grant names it.
fn kind_of(c: &Child) -> ChildKind {
    ChildKind { api_version: c.api_version.clone(), kind: c.kind.clone() }
}

/// Finds the resource of `k` through discovery; only namespaced kinds can be children.
async fn resolve(client: &kube::Client, k: &ChildKind) -> Result<ApiResource, String> {
    let gvk = GroupVersionKind::gvk(k.group(), k.version(), &k.kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((ar, caps)) if caps.scope == Scope::Namespaced => Ok(ar),
        Ok(_) => Err(format!("{k} is cluster-scoped; a child lives in its owner's namespace")),
        Err(e) => Err(format!("the cluster does not serve {k} ({e}); install its CRD or fix the apiVersion")),
    }
}

/// The controller owner reference to `owner_obj` (its apiVersion, kind, name and uid).
fn owner_reference(owner: &ObjectKey, owner_obj: &DynamicObject) -> Result<Value, ChildError> {
    let uid = owner_obj.metadata.uid.clone().ok_or_else(|| ChildError(format!("{owner} has no uid yet")))?;
    let api_version = owner_obj.types.as_ref().map(|t| t.api_version.clone()).unwrap_or_default();
    Ok(json!({
        "apiVersion": api_version,
        "kind": owner.kind(),
        "name": owner.name(),
        "uid": uid,
        "controller": true,
    }))
}

/// The owner a child's annotation names, if it carries one.
fn annotation_owner(obj: &DynamicObject) -> Option<ObjectKey> {
    obj.metadata.annotations.as_ref()?.get(OWNER_ANNOTATION).and_then(|v| marks::owner_of_annotation(v))
}

/// Deletes one child (only the one with `uid`, when known); a child already gone is fine.
async fn delete_child(api: &Api<DynamicObject>, name: &str, uid: Option<&str>) -> Result<(), kube::Error> {
    let mut params = DeleteParams::background();
    if let Some(uid) = uid {
        params = params.preconditions(kube::api::Preconditions { uid: Some(uid.to_string()), resource_version: None });
    }
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The message for the owner's status when the API server refused a child write.
fn refused(what: &str, op: &str, e: kube::Error) -> ChildError {
    match e {
        kube::Error::Api(s) if s.code == 403 => ChildError(format!(
            "{what}: the API server forbids the host to {op} it ({}); give the host's service account \
             the verbs `steward rbac` prints for this config",
            s.message
        )),
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => {
            ChildError(format!("{what}: the API server refused it: {}", s.message))
        }
        e => ChildError(format!("{what}: cannot {op} it: {e}")),
    }
}

/// Watches the objects of child kind `k` that carry the owner label, in `namespace` (or all),
/// keeping `seen` and sending each changed or vanished child's owner.
async fn watch_kind(
    client: kube::Client,
    k: ChildKind,
    namespace: Option<String>,
    seen: Arc<Mutex<Seen>>,
    owners: mpsc::UnboundedSender<ObjectKey>,
) {
    let mut delay = std::time::Duration::from_millis(500);
    let ar = loop {
        match resolve(&client, &k).await {
            Ok(ar) => break ar,
            Err(e) => {
                tracing::warn!(kind = %k, error = %e, retry_in = ?delay, "cannot watch child kind");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    };
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    };
    let cfg = watcher::Config::default().labels(OWNER_KIND_LABEL);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut listing: Option<BTreeSet<(ObjectKey, ChildId)>> = None;
    let id_of = |obj: &DynamicObject| -> Option<(ObjectKey, ChildId)> {
        let owner = controller_owner(obj)?;
        let id = (k.api_version.clone(), k.kind.clone(), obj.metadata.name.clone()?);
        Some((owner, id))
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => listing = Some(BTreeSet::new()),
            Ok(Event::InitApply(mut obj)) | Ok(Event::Apply(mut obj)) => {
                let Some((owner, id)) = id_of(&obj) else { continue };
                // Kept for the owner's next reconcile, which never sees the field managers.
                obj.metadata.managed_fields = None;
                if let Some(l) = listing.as_mut() {
                    l.insert((owner.clone(), id.clone()));
                }
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(owner.clone())
                    .or_default()
                    .insert(id, Arc::new(obj));
                let _ = owners.send(owner);
            }
            Ok(Event::Delete(obj)) => {
                let Some((owner, id)) = id_of(&obj) else { continue };
                forget(&seen, &owner, &id);
                let _ = owners.send(owner);
            }
            Ok(Event::InitDone) => {
                // A relist: what it lacks of this kind vanished while the watch was down.
                let Some(listed) = listing.take() else { continue };
                let gone: Vec<(ObjectKey, ChildId)> = {
                    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
                    s.iter()
                        .flat_map(|(o, ids)| ids.keys().map(move |id| (o.clone(), id.clone())))
                        .filter(|(o, id)| {
                            id.0 == k.api_version
                                && id.1 == k.kind
                                && namespace.as_ref().is_none_or(|ns| *ns == **o.namespace())
                                && !listed.contains(&(o.clone(), id.clone()))
                        })
                        .collect()
                };
                for (owner, id) in gone {
                    forget(&seen, &owner, &id);
                    let _ = owners.send(owner);
                }
            }
            Err(e) => tracing::debug!(kind = %k, error = %e, "child watch error; retrying"),
        }
    }
}

fn forget(seen: &Mutex<Seen>, owner: &ObjectKey, id: &ChildId) {
    let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ids) = s.get_mut(owner) {
        ids.remove(id);
        if ids.is_empty() {
            s.remove(owner);
        }
    }
}

/// The owner of a child: its controller owner reference, in the child's namespace, when the
/// child carries the host's owner annotation for the same owner (an object someone else owns
/// is not the host's child).
fn controller_owner(obj: &DynamicObject) -> Option<ObjectKey> {
    let r = obj.metadata.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true))?;
    let owner = ObjectKey::new(&r.kind, obj.metadata.namespace.as_deref().unwrap_or_default(), &r.name);
    (annotation_owner(obj).as_ref() == Some(&owner)).then_some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child_obj(owner_kind: &str, owner: &str, annotation: Option<&str>) -> DynamicObject {
        let mut annotations = serde_json::Map::new();
        if let Some(a) = annotation {
            annotations.insert(OWNER_ANNOTATION.into(), a.into());
        }
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "cm",
                "namespace": "ns",
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "example.dev/v1", "kind": owner_kind, "name": owner, "uid": "u", "controller": true}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_child_belongs_to_its_controller_when_the_host_marked_it_so() {
        let owner = ObjectKey::new("Site", "ns", "web");
        assert_eq!(controller_owner(&child_obj("Site", "web", Some("Site/ns/web"))), Some(owner));
        // Owned by someone else's controller, or not marked by the host: not the host's child.
        assert_eq!(controller_owner(&child_obj("Site", "web", None)), None);
        assert_eq!(controller_owner(&child_obj("Site", "web", Some("Site/ns/other"))), None);
    }

    #[test]
    fn the_owner_reference_names_the_owner_and_its_uid() {
        let owner: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.dev/v1", "kind": "Site", "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}
        }))
        .unwrap();
        let r = owner_reference(&ObjectKey::new("Site", "ns", "web"), &owner).unwrap();
        assert_eq!(
            r,
            json!({"apiVersion": "example.dev/v1", "kind": "Site", "name": "web", "uid": "u-1", "controller": true})
        );
        let no_uid: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "example.dev/v1", "kind": "Site", "metadata": {"name": "web"}}),
        )
        .unwrap();
        assert!(owner_reference(&ObjectKey::new("Site", "ns", "web"), &no_uid).is_err());
    }
}
