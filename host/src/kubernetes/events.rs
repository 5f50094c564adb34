//! Kubernetes Events for what people should see on an object: readiness and phase changes, finalizing, and the plugin's own events.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::source::{KubeSource, api_resource};
use crate::metrics::{KubeOpLabel, KubeWriteLabel, Metrics};
use crate::model::ObjectKey;
use crate::sanitize::cut_at;

/// How many recorders an [`EventSink`] spreads objects over. kube-runtime's `Recorder` drops
/// expired entries of its cache of recent Events by walking the whole cache at every publish:
/// with one recorder for every object, converging 10,000 objects that each get an Event walked
/// 50 million entries and took a quarter of the host's CPU. An object always goes to the same
/// recorder, so its repeated Events still fold into one series; each walk is 1/256 as long.
const RECORDERS: usize = 256;

/// Publishes Events (`events.k8s.io/v1`) about objects, in the background and best-effort: a
/// failed publish is counted and logged at debug level, and never holds up a reconcile.
pub struct EventSink {
    recorders: Vec<Recorder>,
    source: Arc<KubeSource>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// A sink reporting as controller `steward`, instance `instance` (the replica's identity).
    pub fn new(source: Arc<KubeSource>, metrics: Arc<Metrics>, instance: &str) -> Self {
        let reporter =
            Reporter { controller: "steward".into(), instance: (!instance.is_empty()).then(|| instance.to_string()) };
        let recorders = (0..RECORDERS).map(|_| Recorder::new(source.client().clone(), reporter.clone())).collect();
        Self { recorders, source, metrics }
    }

    /// The recorder of `key`: the same one for every Event about the object.
    fn recorder(&self, key: &ObjectKey) -> &Recorder {
        use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        &self.recorders[(hash % self.recorders.len() as u64) as usize]
    }

    /// Records an Event on `key`: `warning` for failures. An object already gone (a finalized
    /// one) gets its Event too, regarding it by kind, namespace and name; only a kind this host
    /// never served has none.
    pub fn publish(&self, key: &ObjectKey, warning: bool, reason: &str, action: &str, note: &str) {
        let Some(reference) = self.reference(key) else { return };
        let ev = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: cut_at(reason, 128).to_string(),
            note: Some(cut_at(note, 1024).to_string()),
            action: cut_at(action, 128).to_string(),
            secondary: None,
        };
        let recorder = self.recorder(key).clone();
        let metrics = self.metrics.clone();
        let kind = key.kind().clone();
        tokio::spawn(async move {
            match recorder.publish(&ev, &reference).await {
                Ok(()) => {
                    metrics
                        .kube_writes
                        .get_or_create(&KubeOpLabel { kind: kind.to_string(), op: "event".into() })
                        .inc();
                }
                Err(e) => {
                    let category = super::writer::categorize(&e).label().to_string();
                    metrics
                        .kube_write_errors
                        .get_or_create(&KubeWriteLabel { kind: kind.to_string(), op: "event".into(), category })
                        .inc();
                    tracing::debug!(error = %e, "cannot record a Kubernetes Event");
                }
            }
        });
    }

    /// The reference of `key`: the cached object's (with its uid) while the cache holds it, else
    /// one built from the key and its kind's description. Without a resourceVersion, so that the
    /// recorder folds a repeat of the same event into a series (its count) instead of a new Event.
    fn reference(&self, key: &ObjectKey) -> Option<ObjectReference> {
        let info = self.source.kind_info(key.kind())?;
        let ar = api_resource(&info);
        if let Some(obj) = self.source.object(key) {
            return Some(ObjectReference { resource_version: None, ..obj.object_ref(&ar) });
        }
        Some(ObjectReference {
            api_version: Some(ar.api_version),
            kind: Some(ar.kind),
            name: Some(key.name().to_string()),
            namespace: info.namespaced.then(|| key.namespace().to_string()),
            ..ObjectReference::default()
        })
    }
}
