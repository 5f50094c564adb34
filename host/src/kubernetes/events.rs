//! Kubernetes Events for what people should see on an object: failures, phase changes, and the plugin's own events.

use std::sync::Arc;

use kube::Resource as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::source::{KubeSource, api_resource};
use crate::metrics::{KubeOpLabel, KubeWriteLabel, Metrics};
use crate::model::ObjectKey;
use crate::sanitize::cut_at;

/// Publishes Events (`events.k8s.io/v1`) about objects, in the background and best-effort: a
/// failed publish is counted and logged at debug level, and never holds up a reconcile.
pub struct EventSink {
    recorder: Recorder,
    source: Arc<KubeSource>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// A sink reporting as controller `steward`, instance `instance` (the replica's identity).
    pub fn new(source: Arc<KubeSource>, metrics: Arc<Metrics>, instance: &str) -> Self {
        let reporter =
            Reporter { controller: "steward".into(), instance: (!instance.is_empty()).then(|| instance.to_string()) };
        Self { recorder: Recorder::new(source.client().clone(), reporter), source, metrics }
    }

    /// Records an Event on `key` (if the object is in the cache): `warning` for failures.
    pub fn publish(&self, key: &ObjectKey, warning: bool, reason: &str, action: &str, note: String) {
        let Some(obj) = self.source.object(key) else { return };
        let Some(info) = self.source.kind_info(key.kind()) else { return };
        let reference = obj.object_ref(&api_resource(&info));
        let ev = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: cut_at(reason, 128).to_string(),
            note: Some(cut_at(&note, 1024).to_string()),
            action: cut_at(action, 128).to_string(),
            secondary: None,
        };
        let recorder = self.recorder.clone();
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
}
