//! An example Steward plugin that manages something real over HTTP: kind `EtcdKey` (`examples.steward.dev/v1alpha1`), a key in etcd.
//!
//! An EtcdKey names an etcd endpoint, a key and the value it should hold. Its plugin talks to
//! etcd's v3 JSON gateway through the SDK's HTTP client (`steward_sdk::http`, capability
//! `http`): each reconcile reads the key, writes the value when etcd holds anything else, and
//! reads it back; the object is Ready only when etcd holds the desired value. A value changed
//! behind its back (drift) is put back at the next reconcile (each resync), and the status
//! says what was found. When etcd cannot be reached, Ready is False with etcd's or the host's
//! words and the plugin asks to be reconciled again soon. Deleting the object deletes the key
//! (the host holds the object, through a finalizer in a cluster, until that succeeds).
//!
//! The host config must grant `http` with a rule that allows POST to the endpoint; see this
//! crate's README.

pub mod etcd;

use std::time::Duration;

use steward_sdk::EventType;
use steward_sdk::http::ErrorKind;
use steward_sdk::prelude::*;

use etcd::Etcd;

/// How soon a key whose etcd could not be reached is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// A key in etcd, and the value it should hold.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdKeySpec {
    /// etcd's client URL, `http://host:2379` (its JSON gateway is at `/v3/kv/...`).
    pub endpoint: String,
    /// The key.
    pub key: String,
    /// The value the key should hold.
    pub value: String,
}

/// What an EtcdKey reports: what etcd held when the host last looked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdKeyStatus {
    /// `InSync` (etcd holds the desired value), `Unreachable` (etcd could not be asked, or the
    /// host refused the request) or `Unknown`.
    pub state: String,
    /// The value etcd held after this reconcile; none when the key is missing or etcd could not
    /// be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_value: Option<String>,
    /// etcd's revision of the key when it was last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mod_revision: Option<i64>,
    /// The value this object last made etcd hold (to tell drift from a spec change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_value: Option<String>,
    /// Times etcd was found holding something else than what this object had made it hold,
    /// and was put back.
    #[serde(default)]
    pub drift_repairs: u32,
    /// What the last drift was, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift: Option<String>,
}

/// The `EtcdKey` kind.
pub struct EtcdKey;

impl Kind for EtcdKey {
    type Spec = EtcdKeySpec;
    type Status = EtcdKeyStatus;
    const GROUP: &'static str = "examples.steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "EtcdKey";
    const PLURAL: &'static str = "etcdkeys";

    fn columns() -> Vec<PrinterColumn> {
        vec![
            PrinterColumn::new("Key", ".spec.key", ColumnType::String),
            PrinterColumn::new("State", ".status.state", ColumnType::String),
            PrinterColumn::new("Repairs", ".status.driftRepairs", ColumnType::Integer),
        ]
    }

    fn validate(obj: &Object<EtcdKeySpec, EtcdKeyStatus>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let e = &obj.spec.endpoint;
        if !(e.starts_with("http://") || e.starts_with("https://")) || e.split("://").nth(1).is_none_or(str::is_empty) {
            errs.push(FieldError::new(
                "spec.endpoint",
                "an http:// or https:// URL of etcd's client port, for example http://127.0.0.1:2379",
            ));
        }
        if obj.spec.key.is_empty() {
            errs.push(FieldError::new("spec.key", "the key cannot be empty"));
        }
        errs
    }

    fn reconcile(_ctx: &Context, obj: &Object<EtcdKeySpec, EtcdKeyStatus>) -> Result<Outcome<EtcdKeyStatus>, Error> {
        let spec = &obj.spec;
        let last = obj.status.clone().unwrap_or_default();
        let etcd = Etcd::new(&spec.endpoint);
        let unreachable = |e: steward_sdk::http::Error| unreachable(&spec.endpoint, &last, e);
        let before = match etcd.get(&spec.key) {
            Ok(h) => h,
            Err(e) => return Ok(unreachable(e)),
        };
        let mut status = EtcdKeyStatus { state: "Unknown".into(), ..last.clone() };
        let mut outcome_events = Vec::new();
        if before.value.as_deref() != Some(spec.value.as_str()) {
            // Someone else changed (or deleted) what this object had made etcd hold.
            let drifted = last.applied_value.as_deref() == Some(spec.value.as_str()) && last.state == "InSync";
            if drifted {
                let found = match &before.value {
                    Some(v) => format!("etcd held {v:?} instead of {:?}", spec.value),
                    None => format!("the key was deleted behind Steward's back (it should hold {:?})", spec.value),
                };
                status.drift_repairs += 1;
                status.last_drift = Some(found.clone());
                outcome_events.push(("DriftRepaired", found));
            }
            if let Err(e) = etcd.put(&spec.key, &spec.value) {
                return Ok(unreachable(e));
            }
        }
        let after = match etcd.get(&spec.key) {
            Ok(h) => h,
            Err(e) => return Ok(unreachable(e)),
        };
        status.remote_value = after.value.clone();
        status.mod_revision = after.mod_revision;
        let ready = after.value.as_deref() == Some(spec.value.as_str());
        let (reason, message) = if ready {
            status.state = "InSync".into();
            status.applied_value = Some(spec.value.clone());
            ("InSync", format!("etcd at {} holds the value under {:?}", spec.endpoint, spec.key))
        } else {
            status.state = "Unknown".into();
            ("Pending", format!("etcd did not hold the value after it was written (it holds {:?})", after.value))
        };
        let mut outcome = Outcome::status(status).condition(Condition::new("Ready", ready, reason, message));
        for (reason, message) in outcome_events {
            outcome = outcome.event(EventType::Warning, reason, message);
        }
        if !ready {
            outcome = outcome.requeue_after(RETRY_AFTER);
        }
        Ok(outcome)
    }

    fn finalize(_ctx: &Context, obj: &Object<EtcdKeySpec, EtcdKeyStatus>) -> Result<Outcome<EtcdKeyStatus>, Error> {
        Etcd::new(&obj.spec.endpoint).delete(&obj.spec.key).map_err(|e| {
            Error::retry(format!("cannot delete {:?} from etcd at {}: {e}", obj.spec.key, obj.spec.endpoint))
        })?;
        Ok(Outcome::keep_status())
    }
}

/// The outcome when etcd could not be asked: not ready, with the words of whoever refused, and
/// a reconcile again soon (a refusal by the host waits for its config to change instead).
fn unreachable(endpoint: &str, last: &EtcdKeyStatus, e: steward_sdk::http::Error) -> Outcome<EtcdKeyStatus> {
    let status = EtcdKeyStatus { state: "Unreachable".into(), remote_value: None, ..last.clone() };
    let (reason, message) = match e.kind {
        ErrorKind::Denied => ("RequestDenied", format!("the host refused the request to {endpoint}: {e}")),
        _ => ("EtcdUnreachable", format!("cannot reach etcd at {endpoint}: {e}")),
    };
    let outcome = Outcome::status(status).condition(Condition::new("Ready", false, reason, message));
    if e.kind == ErrorKind::Denied { outcome } else { outcome.requeue_after(RETRY_AFTER) }
}

steward_sdk::export_plugin!(
    name: "etcdkey",
    version: env!("CARGO_PKG_VERSION"),
    capabilities: ["http"],
    kinds: [EtcdKey],
);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::testing::object;

    use super::*;

    #[test]
    fn describes_the_kind_and_the_capability() {
        let info = __steward_plugin().info();
        assert_eq!(info.name, "etcdkey");
        assert_eq!(info.capabilities, ["http"]);
        assert_eq!(info.kinds[0].kind, "EtcdKey");
    }

    #[test]
    fn validate_names_the_field() {
        let raw = object("EtcdKey", "k", json!({"endpoint": "127.0.0.1:2379", "key": "", "value": "v"}));
        let errs = steward_sdk::testing::validate::<EtcdKey>(&raw);
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["spec.endpoint", "spec.key"]);
    }
}
