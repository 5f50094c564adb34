//! What an object last told people: the host's phase, its last error, its `Ready` condition and its spec's warnings, read from a status record or from a cluster's status object.

use serde_json::Value;
use steward_sdk::{Condition, ConditionStatus};

use crate::model::{FieldWarning, Phase, StatusRecord};

/// The part of an object's status that its events follow. Two equal values tell people the same
/// thing, so a reconcile that leaves it equal records no event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reported {
    /// The host's phase; `None` when the status does not say (never written, or not by a host).
    pub phase: Option<Phase>,
    /// The host's last error, as the status shows it.
    pub error: Option<String>,
    /// The object's `Ready` condition, if it reports one.
    pub ready: Option<Condition>,
    /// The spec's warnings, as the status lists them.
    pub warnings: Vec<FieldWarning>,
}

impl Reported {
    /// What `rec` tells: its phase, last error and `Ready` condition.
    pub fn of_record(rec: &StatusRecord) -> Self {
        Self {
            phase: Some(rec.phase),
            error: rec.last_error.clone(),
            ready: rec.conditions.iter().find(|c| c.type_ == "Ready").cloned(),
            warnings: rec.warnings.clone(),
        }
    }

    /// What a status object written by a host (under `host_key`, see
    /// [`crate::kubernetes::writer::status_object`]) tells. Fields it lacks or that do not parse
    /// are `None`: such a status is taken for one that told nothing yet.
    pub fn of_status(status: &Value, host_key: &str) -> Self {
        let host = status.get(host_key);
        let phase = host.and_then(|h| h.get("phase")).and_then(|p| serde_json::from_value::<Phase>(p.clone()).ok());
        let error = host.and_then(|h| h.get("lastError")).and_then(Value::as_str).map(str::to_string);
        let ready = status
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|all| all.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")))
            .and_then(condition_of);
        let warnings = host
            .and_then(|h| h.get("warnings"))
            .and_then(|w| serde_json::from_value::<Vec<FieldWarning>>(w.clone()).ok())
            .unwrap_or_default();
        Self { phase, error, ready, warnings }
    }
}

/// A condition as a status object holds it (`type`, `status`, `reason`, `message`).
fn condition_of(c: &Value) -> Option<Condition> {
    let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let status = match c.get("status").and_then(Value::as_str)? {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    };
    Some(Condition { type_: text("type"), status, reason: text("reason"), message: text("message") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_object_and_the_record_it_was_written_from_tell_the_same() {
        let rec = StatusRecord {
            phase: Phase::Error,
            last_error: Some("boom".into()),
            conditions: vec![Condition::new("Other", true, "X", "x"), Condition::new("Ready", false, "Failed", "no")],
            warnings: vec![FieldWarning {
                path: "spec.x".into(),
                message: "unknown field, ignored".into(),
                source: crate::model::WarningSource::Schema,
            }],
            ..StatusRecord::default()
        };
        let status = crate::kubernetes::writer::status_object(&rec, None, 0);
        assert_eq!(Reported::of_status(&status, crate::kubernetes::HOST_STATUS_KEY), Reported::of_record(&rec));
    }

    #[test]
    fn a_status_no_host_wrote_tells_nothing() {
        let told = Reported::of_status(&serde_json::json!({"state": "Running"}), "steward");
        assert_eq!(told, Reported::default());
        let odd = serde_json::json!({"steward": {"phase": "Sideways"}, "conditions": [{"type": "Ready"}]});
        assert_eq!(Reported::of_status(&odd, "steward"), Reported::default(), "no status: not a condition");
    }
}
