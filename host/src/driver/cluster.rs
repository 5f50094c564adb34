//! The Kubernetes mode's driver: custom resources, the status subresource, the host's finalizer, Events and the lease.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use steward_sdk::{KindInfo, RawObject};
use tokio::sync::{mpsc, watch};

use super::{
    Driver, DriverError, KindState, Lifecycle, ObjectId, ObjectKind, Presence, Selected, Selector, Started, Written,
};
use crate::config::Config;
use crate::kubernetes::cluster::{Cluster, ClusterError};
use crate::kubernetes::finalizer::{self, Step};
use crate::kubernetes::objects::KubeObjects;
use crate::kubernetes::writer::StatusWrite;
use crate::kubernetes::{FINALIZER, HOST_STATUS_KEY, source::KubeSource};
use crate::metrics::Metrics;
use crate::model::{ObjectKey, SourceLocation, StatusRecord};
use crate::readiness::Reported;
use crate::source::{Source, SourceEvent, SourceObject};

/// Kubernetes mode: the cluster is the truth; objects are held by the host's finalizer; status
/// goes to the status subresource; one replica leads.
pub struct ClusterDriver {
    cluster: Cluster,
    /// The same source as `cluster.source`, as the engine reads it.
    source: Arc<dyn Source>,
    events: Mutex<Option<mpsc::UnboundedReceiver<SourceEvent>>>,
    /// Objects whose last status did not reach the cluster yet.
    unwritten: Mutex<HashSet<ObjectKey>>,
    /// Kinds whose watch has listed at least once since it was (re)started.
    listed_once: Mutex<HashSet<String>>,
    /// The watched selections of objects of any kind ([`Driver::watch_selected`]).
    objects: KubeObjects,
    selected: Mutex<Option<mpsc::UnboundedReceiver<Selected>>>,
}

impl ClusterDriver {
    /// Connects with `client`, prepares the watches (no kinds yet) and starts competing for the lease.
    pub async fn start(client: kube::Client, cfg: &Config, metrics: Arc<Metrics>) -> Result<Self, ClusterError> {
        let (objects, selected) = KubeObjects::new(client.clone(), metrics.clone(), cfg.kubernetes.namespaces.clone());
        let (cluster, events) = Cluster::start(client, cfg, metrics).await?;
        Ok(Self {
            source: cluster.source.clone(),
            cluster,
            events: Mutex::new(Some(events)),
            unwritten: Mutex::default(),
            listed_once: Mutex::default(),
            objects,
            selected: Mutex::new(Some(selected)),
        })
    }

    /// Reports the condition `WatchesHealthy` to `conditions` (see [`KubeSource::report_to`]).
    pub fn report_to(&self, conditions: &crate::health::Conditions) {
        self.kube().report_to(conditions);
    }

    fn kube(&self) -> &Arc<KubeSource> {
        &self.cluster.source
    }
}

#[async_trait::async_trait]
impl Driver for ClusterDriver {
    fn mode(&self) -> &'static str {
        "kubernetes"
    }

    fn source(&self) -> Arc<dyn Source> {
        self.source.clone()
    }

    async fn create(&self, kind: &KindInfo, obj: &RawObject) -> Result<(), DriverError> {
        use kube::api::{Api, DynamicObject, PostParams};
        let ar = crate::kubernetes::source::api_resource(kind);
        let api: Api<DynamicObject> = Api::namespaced_with(self.kube().client().clone(), &obj.namespace, &ar);
        let spec: serde_json::Value = serde_json::from_str(&obj.spec).unwrap_or_else(|_| serde_json::json!({}));
        let body = serde_json::json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": {"name": obj.name, "namespace": obj.namespace, "labels": obj.labels, "annotations": obj.annotations},
            "spec": spec,
        });
        let dynamic: DynamicObject =
            serde_json::from_value(body).map_err(|e| DriverError::Refused(format!("cannot build the object: {e}")))?;
        match api.create(&PostParams::default(), &dynamic).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Err(DriverError::Exists(ObjectKey::new(&obj.kind, &obj.namespace, &obj.name)))
            }
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 || s.code == 403 => {
                Err(DriverError::Refused(format!("the API server refused the object: {}", s.message)))
            }
            Err(e) => Err(DriverError::Refused(format!("cannot create the object in the cluster: {e}"))),
        }
    }

    async fn delete(&self, kind: &KindInfo, key: &ObjectKey) -> Result<(), DriverError> {
        use kube::api::{Api, DeleteParams, DynamicObject};
        let ar = crate::kubernetes::source::api_resource(kind);
        let api: Api<DynamicObject> = Api::namespaced_with(self.kube().client().clone(), key.namespace(), &ar);
        match api.delete(key.name(), &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(DriverError::Refused(format!("cannot delete {key} in the cluster: {e}"))),
        }
    }

    async fn replace(&self, kind: &KindInfo, obj: &RawObject, _from: &SourceLocation) -> Result<(), DriverError> {
        use kube::api::{Api, DynamicObject, PostParams};
        let ar = crate::kubernetes::source::api_resource(kind);
        let api: Api<DynamicObject> = Api::namespaced_with(self.kube().client().clone(), &obj.namespace, &ar);
        let key = ObjectKey::new(&obj.kind, &obj.namespace, &obj.name);
        let spec: serde_json::Value = serde_json::from_str(&obj.spec)
            .map_err(|e| DriverError::Refused(format!("the spec of {key} is not JSON: {e}")))?;
        // Read, change the spec, write back with the read's resourceVersion: a concurrent
        // writer makes this a 409, never a lost update.
        let mut current = match api.get(&obj.name).await {
            Ok(o) => o,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(DriverError::Refused(format!("{key} is not in the cluster")));
            }
            Err(e) => return Err(DriverError::Refused(format!("cannot read {key} in the cluster: {e}"))),
        };
        current.data["spec"] = spec;
        match api.replace(&obj.name, &PostParams::default(), &current).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(DriverError::Refused(format!(
                "{key} changed in the cluster while it was being replaced; read it and try again"
            ))),
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 || s.code == 403 => {
                Err(DriverError::Refused(format!("the API server refused the object: {}", s.message)))
            }
            Err(e) => Err(DriverError::Refused(format!("cannot replace {key} in the cluster: {e}"))),
        }
    }

    async fn remove(&self, kind: &KindInfo, key: &ObjectKey, _from: &SourceLocation) -> Result<(), DriverError> {
        self.delete(kind, key).await
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    /// The watches run already; each kind is scheduled once it has listed.
    async fn start(&self) -> Result<Started, DriverError> {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner()).take();
        let events = events.unwrap_or_else(|| mpsc::unbounded_channel().1);
        let selected = self.selected.lock().unwrap_or_else(|p| p.into_inner()).take();
        Ok(Started { events, schedule_all: false, keep: None, selected })
    }

    fn set_kinds(&self, kinds: &[KindInfo]) {
        self.kube().set_kinds(kinds);
        // A kind watched again lists again, and is scheduled as at start.
        self.listed_once.lock().unwrap_or_else(|p| p.into_inner()).retain(|k| kinds.iter().any(|i| &i.kind == k));
    }

    fn listed(&self, kind: &str) -> bool {
        self.listed_once.lock().unwrap_or_else(|p| p.into_inner()).insert(kind.to_string())
    }

    fn kind_state(&self, kind: &str) -> KindState {
        if !self.kube().is_watched(kind) {
            KindState::Unwatched
        } else if !self.kube().is_synced(kind) {
            KindState::Unlisted
        } else {
            KindState::Served
        }
    }

    fn readiness(&self, kinds: &[String]) -> Result<(), String> {
        let unsynced: Vec<&str> = kinds.iter().filter(|k| !self.kube().is_synced(k)).map(String::as_str).collect();
        if !unsynced.is_empty() {
            return Err(format!("the caches of {} have not listed yet", unsynced.join(", ")));
        }
        // A standby is ready too: readiness says the caches serve, leadership is shown apart
        // (the overview, `steward_leader`), so a rolling update sees every replica Ready.
        Ok(())
    }

    fn leads(&self) -> bool {
        self.cluster.leads()
    }

    fn leadership(&self) -> watch::Receiver<bool> {
        self.cluster.leader.clone()
    }

    fn standing(&self) -> Option<super::Standing> {
        self.cluster.standing()
    }

    fn lifecycle(&self, key: &ObjectKey, obj: &SourceObject, known: bool) -> Lifecycle {
        let held = self.kube().object(key).is_some_and(|o| finalizer::holds(o.metadata.finalizers.as_deref()));
        match finalizer::step(obj.raw.deleting, held, known) {
            Step::Hold | Step::Reconcile => Lifecycle::Reconcile,
            Step::Finalize => Lifecycle::Finalize,
            Step::Ignore => Lifecycle::Ignore,
        }
    }

    async fn hold(&self, key: &ObjectKey) -> Result<(), DriverError> {
        finalizer::hold(&self.cluster.writer, key).await?;
        Ok(())
    }

    async fn release(&self, key: &ObjectKey) -> Result<(), DriverError> {
        if !self.leads() {
            return Err(DriverError::NotLeader);
        }
        finalizer::release(&self.cluster.writer, key).await?;
        Ok(())
    }

    /// Skipped when nothing would change, or when this replica no longer leads. What the status
    /// told before comes from the cluster (the status this write replaced), so a new leader
    /// compares with what the old one wrote.
    async fn write_status(&self, key: &ObjectKey, rec: &StatusRecord) -> Result<Written, DriverError> {
        if !self.leads() {
            return Err(DriverError::NotLeader);
        }
        match self.cluster.writer.write_status(key, rec).await {
            Ok(done) => {
                self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
                Ok(match done {
                    StatusWrite::Skipped => Written::Unchanged,
                    StatusWrite::Written { before } => {
                        Written::Changed(before.map(|b| Reported::of_status(&b, HOST_STATUS_KEY)))
                    }
                })
            }
            Err(e) => {
                self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone());
                Err(e.into())
            }
        }
    }

    fn status_unwritten(&self, key: &ObjectKey) -> bool {
        self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).contains(key)
    }

    /// Asks the API server (not the cache): an object that still exists left this replica's
    /// scope (its labels or namespace); if it came back into scope the cache would hold it.
    async fn presence(&self, key: &ObjectKey) -> Result<Presence, DriverError> {
        match self.cluster.writer.lookup(key).await? {
            None => Ok(Presence::Gone),
            Some(_) => Ok(Presence::OutOfScope),
        }
    }

    fn publish(&self, key: &ObjectKey, warning: bool, reason: &str, action: &str, note: &str) {
        self.cluster.events.publish(key, warning, reason, action, note);
    }

    /// From the cache of the source's watches; an object not in it (yet) has no uid to give.
    fn uid(&self, key: &ObjectKey) -> Result<Option<String>, DriverError> {
        let Some(obj) = self.kube().object(key) else {
            return Err(DriverError::Refused(format!("{key} is not in the cache yet")));
        };
        match obj.metadata.uid.clone() {
            Some(uid) => Ok(Some(uid)),
            None => Err(DriverError::Refused(format!("{key} has no uid yet"))),
        }
    }

    fn watch_selected(&self, kinds: &[ObjectKind], selector: &Selector) {
        self.objects.watch(kinds, selector);
    }

    fn list_selected(&self, kinds: &[ObjectKind], namespace: &str, selector: &Selector) -> Vec<Selected> {
        self.objects.cached(kinds, namespace, selector)
    }

    async fn list_selected_now(
        &self,
        kinds: &[ObjectKind],
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<Selected>, DriverError> {
        self.objects.list(kinds, namespace, selector).await.map_err(|e| DriverError::Refused(e.0))
    }

    async fn apply_object(&self, obj: &Value, owner: Option<&ObjectKey>) -> Result<Value, DriverError> {
        if !self.leads() {
            return Err(DriverError::NotLeader);
        }
        self.objects.apply(obj, owner).await.map_err(|e| DriverError::Refused(e.0))
    }

    async fn delete_object(&self, id: &ObjectId, owner: Option<&ObjectKey>) -> Result<(), DriverError> {
        if !self.leads() {
            return Err(DriverError::NotLeader);
        }
        self.objects.delete(id, owner).await.map_err(|e| DriverError::Refused(e.0))
    }

    async fn shutdown(&self, grace: Duration) {
        self.cluster.release(grace).await;
    }
}
