//! Objects of any kind in Kubernetes mode, chosen by label selector: a watch per kind that keeps a cache and reports each change, server-side apply under the host's field manager, listing and deleting.
//!
//! The driver's generic object primitives ([`crate::driver::Driver::watch_selected`] and the
//! rest) are these in Kubernetes mode. Nothing here knows what the objects are for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::mpsc;

use super::FIELD_MANAGER;
use crate::metrics::{KubeOpLabel, Metrics};
use crate::model::ObjectKey;
use crate::objects::{ObjectId, ObjectKind, Selected, Selector};

/// Each watched kind's objects by (namespace, name), as the watches last saw them.
type Cache = HashMap<ObjectKind, BTreeMap<(String, String), Arc<Selected>>>;

/// Why an object could not be listed, applied or deleted; the message says why and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ObjectError(pub String);

/// What is watched: one selector, and the watch tasks of each kind (one per served namespace,
/// or one for all).
#[derive(Default)]
struct Watched {
    selector: Selector,
    tasks: HashMap<ObjectKind, Vec<tokio::task::JoinHandle<()>>>,
}

/// The selected objects of the watched kinds: their watches, what they last saw, and the writes.
pub struct KubeObjects {
    client: kube::Client,
    metrics: Arc<Metrics>,
    /// Each kind's resource and whether it is namespaced, found through discovery once.
    resources: Mutex<HashMap<ObjectKind, (ApiResource, bool)>>,
    /// The namespaces the host serves (all when empty): the watches look there only.
    namespaces: Vec<String>,
    watched: Mutex<Watched>,
    cache: Arc<Mutex<Cache>>,
    changes: mpsc::UnboundedSender<Selected>,
}

impl Drop for KubeObjects {
    fn drop(&mut self) {
        for (_, tasks) in self.watched.lock().unwrap_or_else(|p| p.into_inner()).tasks.drain() {
            tasks.iter().for_each(|t| t.abort());
        }
    }
}

impl KubeObjects {
    /// Nothing watched yet; objects are watched in `namespaces` (all when empty), and each one
    /// that changes or vanishes is sent, as last seen, on the returned channel.
    pub fn new(
        client: kube::Client,
        metrics: Arc<Metrics>,
        namespaces: Vec<String>,
    ) -> (Self, mpsc::UnboundedReceiver<Selected>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let me = Self {
            client,
            metrics,
            namespaces,
            resources: Mutex::default(),
            watched: Mutex::default(),
            cache: Arc::default(),
            changes: tx,
        };
        (me, rx)
    }

    /// Watches exactly `kinds`, each for the objects `selector` selects. A kind no longer
    /// watched stops; its cache stays as last seen (a watch of it started again relists and
    /// drops what vanished), so a plugin reloaded does not make every object look new. A new
    /// selector starts every watch again from an empty cache.
    pub fn watch(&self, kinds: &[ObjectKind], selector: &Selector) {
        let wanted: BTreeSet<&ObjectKind> = kinds.iter().collect();
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        let same = watched.selector == *selector;
        if !same {
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        watched.selector = selector.clone();
        watched.tasks.retain(|k, tasks| {
            let keep = same && wanted.contains(k);
            if !keep {
                tasks.iter().for_each(|t| t.abort());
                tracing::info!(kind = %k, "stopping the watch of kind");
            }
            keep
        });
        for k in wanted {
            if watched.tasks.contains_key(k) {
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
                    let w = KindWatch {
                        client: self.client.clone(),
                        kind: k.clone(),
                        namespace: ns,
                        selector: selector.clone(),
                        cache: self.cache.clone(),
                        changes: self.changes.clone(),
                    };
                    tokio::spawn(w.run())
                })
                .collect();
            tracing::info!(kind = %k, selector = %selector.to_query(), "watching kind");
            watched.tasks.insert(k.clone(), tasks);
        }
    }

    /// The cached objects of `kinds` in `namespace` that `selector` selects, by kind and name.
    pub fn cached(&self, kinds: &[ObjectKind], namespace: &str, selector: &Selector) -> Vec<Selected> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Selected> = kinds
            .iter()
            .filter_map(|k| cache.get(k))
            .flat_map(|objs| objs.range((namespace.to_string(), String::new())..))
            .take_while(|((ns, _), _)| ns == namespace)
            .filter(|(_, o)| selector.matches(o.labels()))
            .map(|(_, o)| (**o).clone())
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// The objects of `kinds` in `namespace` that `selector` selects, listed from the API server now.
    pub async fn list(
        &self,
        kinds: &[ObjectKind],
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<Selected>, ObjectError> {
        let mut out = Vec::new();
        for k in kinds {
            let api = self.api(k, namespace).await?;
            let params = ListParams::default().labels(&selector.to_query());
            let list = api.list(&params).await.map_err(|e| ObjectError(format!("{k}: {}", refused("list", e))))?;
            out.extend(list.items.into_iter().map(|o| selected(k, o)));
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Server-side applies the whole object `obj` under the host's field manager, forced; the
    /// result is in the cache at once when its kind is watched and the selector selects it.
    /// The write is counted under `owner`'s kind (`child_apply`), or the object's (`apply`).
    pub async fn apply(&self, obj: &Value, owner: Option<&ObjectKey>) -> Result<Value, ObjectError> {
        let kind = ObjectKind::of(obj).ok_or_else(|| ObjectError("the object has no apiVersion or kind".into()))?;
        let meta = |k: &str| obj.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default();
        let (name, namespace) = (meta("name"), meta("namespace"));
        let api = self.api(&kind, namespace).await?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let out = api.patch(name, &params, &Patch::Apply(obj)).await.map_err(|e| ObjectError(refused("apply", e)))?;
        self.count(&kind, owner, "apply");
        let out = selected(&kind, out);
        let value = out.object.clone();
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if watched.tasks.contains_key(&kind) && watched.selector.matches(out.labels()) {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let key = (out.id.namespace.clone(), out.id.name.clone());
            cache.entry(kind).or_default().insert(key, Arc::new(out));
        }
        Ok(value)
    }

    /// Deletes the object `id` (only that one, when its uid is given; one already gone is fine),
    /// and drops it from the cache. Counted as for [`apply`](Self::apply).
    pub async fn delete(&self, id: &ObjectId, owner: Option<&ObjectKey>) -> Result<(), ObjectError> {
        let api = self.api(&id.kind, &id.namespace).await?;
        let mut params = DeleteParams::background();
        if let Some(uid) = &id.uid {
            params = params.preconditions(kube::api::Preconditions { uid: Some(uid.clone()), resource_version: None });
        }
        match api.delete(&id.name, &params).await {
            Ok(_) => self.count(&id.kind, owner, "delete"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(ObjectError(refused("delete", e))),
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(objs) = cache.get_mut(&id.kind) {
            let key = (id.namespace.clone(), id.name.clone());
            if objs.get(&key).is_some_and(|o| id.uid.is_none() || o.id.uid == id.uid) {
                objs.remove(&key);
            }
        }
        Ok(())
    }

    /// The API of kind `k` in `namespace` (all namespaces for a cluster-scoped kind, which
    /// must then name none); the kind is looked up through discovery once.
    async fn api(&self, k: &ObjectKind, namespace: &str) -> Result<Api<DynamicObject>, ObjectError> {
        let known = self.resources.lock().unwrap_or_else(|p| p.into_inner()).get(k).cloned();
        let (ar, namespaced) = match known {
            Some(r) => r,
            None => {
                let r = resolve(&self.client, k).await.map_err(ObjectError)?;
                self.resources.lock().unwrap_or_else(|p| p.into_inner()).insert(k.clone(), r.clone());
                r
            }
        };
        match (namespaced, namespace.is_empty()) {
            (true, false) => Ok(Api::namespaced_with(self.client.clone(), namespace, &ar)),
            (false, true) => Ok(Api::all_with(self.client.clone(), &ar)),
            (true, true) => Err(ObjectError(format!("{k} is namespaced; the object names no namespace"))),
            (false, false) => {
                Err(ObjectError(format!("{k} is cluster-scoped; it cannot be made in the namespace {namespace}")))
            }
        }
    }

    /// Counts a write the cluster accepted: under the owner's kind as `child_<op>` when it has
    /// one (an object with an owner is its child, as Kubernetes says), else under its own kind.
    fn count(&self, kind: &ObjectKind, owner: Option<&ObjectKey>, op: &str) {
        let label = match owner {
            Some(o) => KubeOpLabel { kind: o.kind().to_string(), op: format!("child_{op}") },
            None => KubeOpLabel { kind: kind.kind.clone(), op: op.to_string() },
        };
        self.metrics.kube_writes.get_or_create(&label).inc();
    }
}

/// `obj`, of kind `k`, as the driver hands objects out: without its field managers.
fn selected(k: &ObjectKind, mut obj: DynamicObject) -> Selected {
    obj.metadata.managed_fields = None;
    let mut value = serde_json::to_value(&obj).unwrap_or(Value::Null);
    // A listed item may lack its type; the object says it whole.
    value["apiVersion"] = k.api_version.clone().into();
    value["kind"] = k.kind.clone().into();
    Selected::new(k.clone(), value)
}

/// Finds the resource of `k`, and whether it is namespaced, through discovery.
async fn resolve(client: &kube::Client, k: &ObjectKind) -> Result<(ApiResource, bool), String> {
    let gvk = GroupVersionKind::gvk(k.group(), k.version(), &k.kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((ar, caps)) => Ok((ar, caps.scope == Scope::Namespaced)),
        Err(e) => Err(format!("the cluster does not serve {k} ({e}); install its CRD or fix the apiVersion")),
    }
}

/// The message when the API server refused a write or a read: what it said, and what to do.
fn refused(op: &str, e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "the API server forbids the host to {op} it ({}); give the host's service account \
             the verbs `steward rbac` prints for this config",
            s.message
        ),
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => format!("the API server refused it: {}", s.message),
        e => format!("cannot {op} it: {e}"),
    }
}

/// One watch: the selected objects of one kind in one namespace (or all).
struct KindWatch {
    client: kube::Client,
    kind: ObjectKind,
    namespace: Option<String>,
    selector: Selector,
    cache: Arc<Mutex<Cache>>,
    changes: mpsc::UnboundedSender<Selected>,
}

impl KindWatch {
    /// Keeps the cache of the kind and sends each object that changed or vanished, until aborted.
    async fn run(self) {
        let k = &self.kind;
        let mut delay = std::time::Duration::from_millis(500);
        let (ar, namespaced) = loop {
            match resolve(&self.client, k).await {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!(kind = %k, error = %e, retry_in = ?delay, "cannot watch kind");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(30));
                }
            }
        };
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) if namespaced => Api::namespaced_with(self.client.clone(), ns, &ar),
            _ => Api::all_with(self.client.clone(), &ar),
        };
        let cfg = watcher::Config::default().labels(&self.selector.to_query());
        let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
        let mut listing: Option<BTreeSet<(String, String)>> = None;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => listing = Some(BTreeSet::new()),
                Ok(Event::InitApply(obj)) | Ok(Event::Apply(obj)) => {
                    let obj = selected(k, obj);
                    let key = (obj.id.namespace.clone(), obj.id.name.clone());
                    if let Some(l) = listing.as_mut() {
                        l.insert(key.clone());
                    }
                    self.cache
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(k.clone())
                        .or_default()
                        .insert(key, Arc::new(obj.clone()));
                    let _ = self.changes.send(obj);
                }
                Ok(Event::Delete(obj)) => {
                    let obj = selected(k, obj);
                    self.forget(&(obj.id.namespace.clone(), obj.id.name.clone()));
                    let _ = self.changes.send(obj);
                }
                Ok(Event::InitDone) => {
                    // A relist: what it lacks of this watch's objects vanished while it was down.
                    let Some(listed) = listing.take() else { continue };
                    let gone: Vec<Arc<Selected>> = {
                        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                        let objs = cache.get(k).into_iter().flat_map(|m| m.iter());
                        objs.filter(|((ns, _), _)| self.namespace.as_ref().is_none_or(|n| n == ns))
                            .filter(|(key, _)| !listed.contains(*key))
                            .map(|(_, o)| o.clone())
                            .collect()
                    };
                    for obj in gone {
                        self.forget(&(obj.id.namespace.clone(), obj.id.name.clone()));
                        let _ = self.changes.send((*obj).clone());
                    }
                }
                Err(e) => tracing::debug!(kind = %k, error = %e, "watch error; retrying"),
            }
        }
    }

    fn forget(&self, key: &(String, String)) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(objs) = cache.get_mut(&self.kind) {
            objs.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_is_handed_out_whole_without_its_field_managers() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "metadata": {
                "name": "cm", "namespace": "ns", "uid": "u",
                "managedFields": [{"manager": "steward", "operation": "Apply"}]
            },
            "data": {"a": "1"}
        }))
        .unwrap();
        let s = selected(&ObjectKind::new("v1", "ConfigMap"), obj);
        assert_eq!(s.object["apiVersion"], "v1");
        assert_eq!(s.object["kind"], "ConfigMap");
        assert_eq!(s.object["data"]["a"], "1");
        assert!(s.object["metadata"].get("managedFields").is_none(), "{:#}", s.object);
        assert_eq!((s.id.name.as_str(), s.id.uid.as_deref()), ("cm", Some("u")));
    }

    fn config_map(name: &str, owner: &str, value: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": {"owner": owner}},
            "data": {"k": value},
        })
    }

    #[tokio::test]
    async fn an_applied_object_is_cached_at_once_listed_by_selector_and_deleted_only_as_it_was() {
        let server = steward_fake_apiserver::FakeApiServer::start().await;
        let metrics = Arc::new(Metrics::new());
        let (objects, _changes) = KubeObjects::new(server.client(), metrics.clone(), Vec::new());
        let cms = [ObjectKind::new("v1", "ConfigMap")];
        let mine = Selector::default().equals("owner", "web");
        objects.watch(&cms, &Selector::default().has("owner"));
        let owner = ObjectKey::new("Site", "default", "web");
        let out = objects.apply(&config_map("a", "web", "1"), Some(&owner)).await.unwrap();
        assert_eq!(out["data"]["k"], "1");
        assert!(out.pointer("/metadata/resourceVersion").is_some(), "{out:#}");
        // Read back at once, without waiting for the watch.
        let cached = objects.cached(&cms, "default", &mine);
        assert_eq!(cached.len(), 1);
        assert_eq!(cached[0].object["data"]["k"], "1");
        objects.apply(&config_map("b", "blog", "2"), None).await.unwrap();
        let now = objects.list(&cms, "default", &mine).await.unwrap();
        assert_eq!(now.iter().map(|o| o.id.name.as_str()).collect::<Vec<_>>(), ["a"]);
        assert!(objects.cached(&cms, "elsewhere", &mine).is_empty());

        // A delete of the object as it was leaves one made since in its place.
        let old = now[0].id.clone();
        objects.delete(&old, Some(&owner)).await.unwrap();
        objects.apply(&config_map("a", "web", "3"), Some(&owner)).await.unwrap();
        objects.delete(&old, Some(&owner)).await.unwrap();
        let now = objects.list(&cms, "default", &mine).await.unwrap();
        assert_eq!(now.len(), 1, "{now:?}");
        assert_eq!(now[0].object["data"]["k"], "3");
        let label = KubeOpLabel { kind: "Site".into(), op: "child_apply".into() };
        assert_eq!(metrics.kube_writes.get_or_create(&label).get(), 2);

        // A cluster-scoped kind cannot be made in a namespace; a kind the cluster does not serve is named.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "namespace": "default"}});
        let e = objects.apply(&ns, None).await.unwrap_err().to_string();
        assert!(e.contains("cluster-scoped"), "{e}");
        let bad =
            json!({"apiVersion": "nope.dev/v1", "kind": "Nope", "metadata": {"name": "x", "namespace": "default"}});
        let e = objects.apply(&bad, None).await.unwrap_err().to_string();
        assert!(e.contains("does not serve nope.dev/v1/Nope"), "{e}");
    }
}
