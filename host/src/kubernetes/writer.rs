//! Writes to the cluster: the status subresource with conflict retries, and the categorized, counted failures of every write (the finalizer's included).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use tracing::Instrument;

use super::HOST_STATUS_KEY;
use super::source::{KubeSource, api_resource};
use crate::metrics::{KubeOpLabel, KubeWriteLabel, Metrics};
use crate::model::{Millis, ObjectKey, StatusRecord};

/// Why a write to the cluster failed, as metrics and logs name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// 409 Conflict on every attempt.
    Conflict,
    /// The resource is not served: its CustomResourceDefinition is not installed.
    CrdNotFound,
    /// No connection to the API server.
    Unreachable,
    /// The request timed out.
    Timeout,
    /// 403: RBAC does not allow it.
    Forbidden,
    /// 401: the credentials were refused.
    Unauthorized,
    /// 429: the API server throttled it (after the client's own Retry-After retries).
    Throttled,
    /// 422 or 400: the API server refused the content.
    Invalid,
    /// 5xx.
    Server,
    /// Anything else.
    Other,
}

impl Category {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::CrdNotFound => "crd_not_found",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Forbidden => "forbidden",
            Self::Unauthorized => "unauthorized",
            Self::Throttled => "throttled",
            Self::Invalid => "invalid",
            Self::Server => "server",
            Self::Other => "other",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Self::Conflict => "the object kept changing; it will be retried",
            Self::CrdNotFound => "install the CustomResourceDefinitions with `steward crds --apply`",
            Self::Unreachable => "the API server cannot be reached; it will be retried",
            Self::Timeout => "the API server did not answer in time; it will be retried",
            Self::Forbidden => "grant the service account the RBAC from `steward rbac`",
            Self::Unauthorized => "check the service account token or kubeconfig credentials",
            Self::Throttled => "the API server is throttling; it will be retried",
            Self::Invalid => "the API server refused the content; check the CustomResourceDefinition is current",
            Self::Server => "the API server failed; it will be retried",
            Self::Other => "it will be retried",
        }
    }
}

/// A failed write: its category and a message that says what failed and what to do.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{op} write failed ({}): {message}; {}", .category.label(), .category.hint())]
pub struct WriteError {
    /// What kind of failure.
    pub category: Category,
    /// `status`, `finalizer` or `read`.
    pub op: &'static str,
    /// The API server's or client's message.
    pub message: String,
}

fn api_resource_of(source: &KubeSource, key: &ObjectKey) -> String {
    source.kind_info(key.kind()).map(|i| api_resource(&i).api_version).unwrap_or_default()
}

/// Sorts a kube client error into a [`Category`].
pub fn categorize(e: &kube::Error) -> Category {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => Category::Conflict,
            404 => Category::CrdNotFound,
            403 => Category::Forbidden,
            401 => Category::Unauthorized,
            429 => Category::Throttled,
            400 | 415 | 422 => Category::Invalid,
            504 | 408 => Category::Timeout,
            c if c >= 500 => Category::Server,
            _ => Category::Other,
        },
        other => {
            let text = format!("{other:?}").to_ascii_lowercase();
            if text.contains("timed out") || text.contains("timeout") || text.contains("elapsed") {
                Category::Timeout
            } else if matches!(other, kube::Error::HyperError(_) | kube::Error::Service(_))
                || text.contains("connect")
                || text.contains("connection")
            {
                Category::Unreachable
            } else {
                Category::Other
            }
        }
    }
}

pub(super) fn is_gone(e: &kube::Error, name: &str) -> bool {
    // The object itself is gone (its Status names it); a 404 without a name means the resource is not served.
    matches!(e, kube::Error::Api(s) if s.code == 404
        && (s.details.as_ref().is_some_and(|d| d.name == name) || s.message.contains(&format!("\"{name}\" not found"))))
}

/// RFC 3339 time of `millis` since the epoch.
pub fn rfc3339(millis: Millis) -> String {
    let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(millis);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The status object the cluster gets for `rec`: the plugin's fields, `conditions` (each with a
/// `lastTransitionTime` kept from `current` while its status holds), `observedGeneration`, and
/// the host's fields under [`HOST_STATUS_KEY`].
pub fn status_object(rec: &StatusRecord, current: Option<&Value>, now: Millis) -> Value {
    let mut status = match rec.status_value() {
        Some(v @ Value::Object(_)) => v,
        _ => json!({}),
    };
    let old_conditions = current.and_then(|c| c.get("conditions")).and_then(Value::as_array);
    let conditions: Vec<Value> = rec
        .conditions
        .iter()
        .map(|c| {
            let status_text = serde_json::to_value(c.status).unwrap_or(Value::Null);
            let kept = old_conditions
                .and_then(|old| old.iter().find(|o| o.get("type").and_then(Value::as_str) == Some(c.type_.as_str())))
                .filter(|o| o.get("status") == Some(&status_text))
                .and_then(|o| o.get("lastTransitionTime").cloned());
            json!({
                "type": c.type_,
                "status": status_text,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": kept.unwrap_or_else(|| Value::String(rfc3339(now))),
            })
        })
        .collect();
    if let Value::Object(m) = &mut status {
        m.insert("conditions".into(), Value::Array(conditions));
        match rec.observed_generation {
            Some(g) => m.insert("observedGeneration".into(), json!(g)),
            None => m.remove("observedGeneration"),
        };
        let mut host = json!({
            "phase": rec.phase.to_string(),
            "retryCount": rec.retry_count,
        });
        if let Some(t) = rec.last_reconcile_time {
            host["lastReconcileTime"] = json!(rfc3339(t));
        }
        if let Some(e) = &rec.last_error {
            host["lastError"] = json!(e);
        }
        if !rec.warnings.is_empty() {
            host["warnings"] = json!(rec.warnings);
        }
        m.insert(HOST_STATUS_KEY.into(), host);
    }
    status
}

/// Whether writing `desired` over `current` would change anything but the host's `lastReconcileTime`.
pub fn status_differs(current: Option<&Value>, desired: &Value) -> bool {
    let Some(current) = current else { return true };
    // Compared in place, without copies: every field equal, the host's own object but for
    // `lastReconcileTime`.
    let same_host = |a: &Value, b: &Value| match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let other = |k: &&String| k.as_str() != "lastReconcileTime";
            a.keys().filter(other).count() == b.keys().filter(other).count()
                && a.iter().filter(|(k, _)| other(k)).all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    };
    match (current.as_object(), desired.as_object()) {
        (Some(c), Some(d)) => {
            c.len() != d.len()
                || c.iter().any(|(k, v)| match d.get(k) {
                    None => true,
                    Some(dv) if k == HOST_STATUS_KEY => !same_host(v, dv),
                    Some(dv) => v != dv,
                })
        }
        _ => current != desired,
    }
}

/// What [`ClusterWriter::write_status`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusWrite {
    /// Nothing written: the status already said the same, or the object is gone.
    Skipped,
    /// Written over `before`, the status the object had (`None`: it had none).
    Written {
        /// The status object replaced.
        before: Option<Value>,
    },
}

impl StatusWrite {
    /// Whether it wrote.
    pub fn wrote(&self) -> bool {
        matches!(self, Self::Written { .. })
    }
}

/// Writes status (and, through [`super::finalizer`], finalizers) for the engine; counts and categorizes failures, and logs a
/// failing object on its 1st, 2nd, 4th, 8th… failure in a row rather than on every attempt.
pub struct ClusterWriter {
    source: Arc<KubeSource>,
    metrics: Arc<Metrics>,
    retries: u32,
    failing: Mutex<HashMap<(ObjectKey, &'static str), u32>>,
    /// The resourceVersion each object had after this host's last status write: while the
    /// cache shows another, it may not have seen that write yet and is not trusted to compare.
    written: Mutex<HashMap<ObjectKey, String>>,
    /// The object as this host's finalizer patch answered it, until the status write that follows
    /// (in the same reconcile) takes it: the cache may not show that patch yet, and a status write
    /// naming the cache's resourceVersion would only meet a conflict, a read and a retry.
    held: Mutex<HashMap<ObjectKey, DynamicObject>>,
}

impl ClusterWriter {
    /// A writer over `source`'s client; a conflict is retried `retries` times with a fresh read.
    pub fn new(source: Arc<KubeSource>, metrics: Arc<Metrics>, retries: u32) -> Self {
        Self {
            source,
            metrics,
            retries: retries.max(1),
            failing: Mutex::default(),
            written: Mutex::default(),
            held: Mutex::default(),
        }
    }

    pub(super) fn api(&self, key: &ObjectKey) -> Option<Api<DynamicObject>> {
        let info = self.source.kind_info(key.kind())?;
        let ar = api_resource(&info);
        let client = self.source.client().clone();
        Some(if info.namespaced {
            Api::namespaced_with(client, key.namespace(), &ar)
        } else {
            Api::all_with(client, &ar)
        })
    }

    /// The object as the cache has it now (shared, not copied).
    pub(super) fn cached(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        self.source.object(key)
    }

    pub(super) async fn current(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
    ) -> Result<Option<DynamicObject>, kube::Error> {
        if let Some(o) = self.source.object(key) {
            return Ok(Some((*o).clone()));
        }
        match api.get(key.name()).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if is_gone(&e, key.name()) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the object from the API server (not the cache): `None` when it does not exist.
    pub async fn lookup(&self, key: &ObjectKey) -> Result<Option<DynamicObject>, WriteError> {
        let Some(api) = self.api(key) else { return Ok(None) };
        let out = match api.get(key.name()).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if is_gone(&e, key.name()) => Ok(None),
            Err(e) => Err(WriteError { category: categorize(&e), op: "read", message: e.to_string() }),
        };
        if let Err(e) = &out {
            tracing::debug!(object = %key, "cannot read the object: {e}");
        }
        out
    }

    /// Writes `rec` to the object's status subresource unless that would change nothing.
    /// Returns whether it wrote, and over what status (read fresh when the cache may not have
    /// seen this host's last write). A vanished object is not an error (there is nothing to write to).
    /// Runs in a `status_write` span: each conflict that is retried is an event in it, and
    /// `attempts`, `written` or the failure's `category` are recorded on it.
    pub async fn write_status(&self, key: &ObjectKey, rec: &StatusRecord) -> Result<StatusWrite, WriteError> {
        let span = tracing::info_span!(
            "status_write",
            phase = %rec.phase,
            attempts = tracing::field::Empty,
            written = tracing::field::Empty,
            category = tracing::field::Empty,
        );
        let out = self.try_write_status(key, rec).instrument(span.clone()).await;
        match &out {
            Ok(done) => {
                span.record("written", done.wrote());
            }
            Err(e) => {
                span.record("category", e.category.label());
                crate::telemetry::set_error(&span, e.category.label());
            }
        };
        self.account(key, "status", &out.as_ref().map(StatusWrite::wrote).map_err(Clone::clone));
        out
    }

    /// Whether the cache shows that writing `rec` would change nothing, with no copy of the
    /// object and no request built: the cached object is current (neither this host's last
    /// status write nor its finalizer patch is newer) and its status is what `rec` makes.
    fn unchanged_in_cache(&self, key: &ObjectKey, rec: &StatusRecord) -> bool {
        let Some(obj) = self.cached(key) else { return false };
        let rv = &obj.metadata.resource_version;
        let newer_held = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .is_some_and(|h| h.metadata.resource_version != *rv);
        let newer_written =
            self.written.lock().unwrap_or_else(|p| p.into_inner()).get(key).is_some_and(|w| Some(w) != rv.as_ref());
        if newer_held || newer_written {
            return false;
        }
        let current = obj.data.get("status").filter(|v| !v.is_null());
        !status_differs(current, &status_object(rec, current, crate::model::now_millis()))
    }

    /// A status write skipped because it would change nothing, counted.
    fn skipped_unchanged(&self, key: &ObjectKey) -> StatusWrite {
        self.metrics.kube_status_skipped.get_or_create(&crate::metrics::KindLabel { kind: key.kind().clone() }).inc();
        StatusWrite::Skipped
    }

    async fn try_write_status(&self, key: &ObjectKey, rec: &StatusRecord) -> Result<StatusWrite, WriteError> {
        let err = |e: &kube::Error| WriteError { category: categorize(e), op: "status", message: e.to_string() };
        if self.unchanged_in_cache(key, rec) {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
            return Ok(self.skipped_unchanged(key));
        }
        let Some(api) = self.api(key) else { return Ok(StatusWrite::Skipped) };
        let mut obj = match self.current(&api, key).await.map_err(|e| err(&e))? {
            Some(o) => o,
            None => return Ok(StatusWrite::Skipped),
        };
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        if let Some(h) = held.filter(|h| h.metadata.resource_version != obj.metadata.resource_version) {
            // The cache has not seen the finalizer this host just added.
            obj = h;
        }
        let ours = self.written.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned();
        if ours.is_some() && ours != obj.metadata.resource_version {
            // The cache may not have seen our last write: compare with the object as it is now.
            obj = match api.get(key.name()).await {
                Ok(o) => o,
                Err(e) if is_gone(&e, key.name()) => return Ok(StatusWrite::Skipped),
                Err(e) => return Err(err(&e)),
            };
        }
        let now = crate::model::now_millis();
        for attempt in 1..=self.retries {
            let current = obj.data.get("status").filter(|v| !v.is_null());
            let desired = status_object(rec, current, now);
            if !status_differs(current, &desired) {
                return Ok(self.skipped_unchanged(key));
            }
            let mut body = obj.clone();
            body.metadata.managed_fields = None;
            // List items may come without apiVersion and kind; a write needs them.
            body.types = Some(kube::api::TypeMeta {
                api_version: api_resource_of(&self.source, key),
                kind: key.kind().to_string(),
            });
            body.data["status"] = desired;
            tracing::Span::current().record("attempts", attempt);
            match api.replace_status(key.name(), &PostParams::default(), &body).await {
                Ok(done) => {
                    let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
                    match done.metadata.resource_version {
                        Some(rv) => written.insert(key.clone(), rv),
                        None => written.remove(key),
                    };
                    return Ok(StatusWrite::Written {
                        before: obj.data.get("status").filter(|v| !v.is_null()).cloned(),
                    });
                }
                Err(e) if is_gone(&e, key.name()) => return Ok(StatusWrite::Skipped),
                Err(e) if categorize(&e) == Category::Conflict && attempt < self.retries => {
                    tracing::debug!(attempt, "status write conflict; reading the object again and retrying");
                    self.conflict(key, "status");
                    obj = match api.get(key.name()).await {
                        Ok(o) => o,
                        Err(e) if is_gone(&e, key.name()) => return Ok(StatusWrite::Skipped),
                        Err(e) => return Err(err(&e)),
                    };
                }
                Err(e) => {
                    if categorize(&e) == Category::Conflict {
                        self.conflict(key, "status");
                    }
                    return Err(err(&e));
                }
            }
        }
        Err(WriteError { category: Category::Conflict, op: "status", message: "conflict on every attempt".into() })
    }

    /// How many times a conflicting write is tried, each after a fresh read.
    pub(super) fn retries(&self) -> u32 {
        self.retries
    }

    /// Forgets the resourceVersion of this host's last status write to `key` (its object goes).
    pub(super) fn forget_written(&self, key: &ObjectKey) {
        self.written.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    /// Keeps `obj`, as this host's finalizer patch answered it, for the status write that follows.
    pub(super) fn remember_held(&self, key: &ObjectKey, obj: DynamicObject) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), obj);
    }

    pub(super) fn conflict(&self, key: &ObjectKey, op: &str) {
        self.metrics
            .kube_write_conflicts
            .get_or_create(&KubeOpLabel { kind: key.kind().to_string(), op: op.into() })
            .inc();
    }

    pub(super) fn account(&self, key: &ObjectKey, op: &'static str, out: &Result<bool, WriteError>) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match out {
            Ok(wrote) => {
                if *wrote {
                    self.metrics
                        .kube_writes
                        .get_or_create(&KubeOpLabel { kind: key.kind().to_string(), op: op.into() })
                        .inc();
                }
                if failing.remove(&(key.clone(), op)).is_some() {
                    tracing::info!(object = %key, op, "write to the cluster works again");
                }
            }
            Err(e) => {
                self.metrics
                    .kube_write_errors
                    .get_or_create(&KubeWriteLabel {
                        kind: key.kind().to_string(),
                        op: op.into(),
                        category: e.category.label().into(),
                    })
                    .inc();
                let n = failing.entry((key.clone(), op)).or_insert(0);
                *n = n.saturating_add(1);
                if n.is_power_of_two() {
                    tracing::warn!(object = %key, failures = *n, category = e.category.label(), "{e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Phase;
    use steward_sdk::Condition;

    fn rec() -> StatusRecord {
        StatusRecord {
            phase: Phase::Synced,
            observed_generation: Some(3),
            status: Some(json!({"url": "http://x", "tools": 2}).to_string()),
            conditions: vec![Condition::new("Ready", true, "Running", "up")],
            last_reconcile_time: Some(1_700_000_000_000),
            ..StatusRecord::default()
        }
    }

    #[test]
    fn the_status_object_has_plugin_fields_conditions_generation_and_host_fields_under_one_key() {
        let s = status_object(&rec(), None, 1_700_000_000_000);
        assert_eq!(s["url"], "http://x");
        assert_eq!(s["observedGeneration"], 3);
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "2023-11-14T22:13:20Z");
        assert_eq!(s[HOST_STATUS_KEY]["phase"], "Synced");
        assert_eq!(s[HOST_STATUS_KEY]["lastReconcileTime"], "2023-11-14T22:13:20Z");
        assert_eq!(s[HOST_STATUS_KEY]["retryCount"], 0);
        assert!(s[HOST_STATUS_KEY].get("lastError").is_none());
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let first = status_object(&rec(), None, 1_000);
        let later = status_object(&rec(), Some(&first), 9_000_000);
        assert_eq!(later["conditions"][0]["lastTransitionTime"], first["conditions"][0]["lastTransitionTime"]);
        let mut flipped = rec();
        flipped.conditions[0] = Condition::new("Ready", false, "Down", "down");
        let after = status_object(&flipped, Some(&first), 9_000_000);
        assert_ne!(after["conditions"][0]["lastTransitionTime"], first["conditions"][0]["lastTransitionTime"]);
    }

    #[test]
    fn only_a_new_reconcile_time_is_not_a_change() {
        let a = status_object(&rec(), None, 1_000);
        let mut r = rec();
        r.last_reconcile_time = Some(1_800_000_000_000);
        let b = status_object(&r, Some(&a), 2_000);
        assert!(!status_differs(Some(&a), &b));
        r.retry_count = 1;
        let c = status_object(&r, Some(&a), 2_000);
        assert!(status_differs(Some(&a), &c));
        assert!(status_differs(None, &a));
        // A reconcile time only one side has is no change either; any other field is.
        let mut without_time = a.clone();
        without_time[HOST_STATUS_KEY].as_object_mut().unwrap().remove("lastReconcileTime");
        assert!(!status_differs(Some(&without_time), &b));
        let mut extra = b.clone();
        extra["plugin"] = json!("field");
        assert!(status_differs(Some(&a), &extra));
        assert!(status_differs(Some(&extra), &b), "a field the desired status drops is a change");
        let mut host_extra = b.clone();
        host_extra[HOST_STATUS_KEY]["lastError"] = json!("boom");
        assert!(status_differs(Some(&a), &host_extra));
    }

    #[test]
    fn api_errors_fall_into_their_categories() {
        let api = |code: u16| kube::Error::Api(kube::core::Status::failure("x", "Reason").with_code(code).boxed());
        assert_eq!(categorize(&api(409)), Category::Conflict);
        assert_eq!(categorize(&api(404)), Category::CrdNotFound);
        assert_eq!(categorize(&api(403)), Category::Forbidden);
        assert_eq!(categorize(&api(401)), Category::Unauthorized);
        assert_eq!(categorize(&api(429)), Category::Throttled);
        assert_eq!(categorize(&api(503)), Category::Server);
        assert_eq!(categorize(&api(504)), Category::Timeout);
    }
}
