//! The field checks of the built-in types a Kubernetes controller writes, as the real server
//! makes them: `events.k8s.io/v1` Events (the strict validation of that API) and the `MicroTime`
//! fields of `coordination.k8s.io/v1` Leases.

use serde_json::Value;

use crate::resource::{ResourceDef, StorageKey};
use crate::status::{ApiError, Cause};

/// The longest `reason`, `action` and `reportingInstance` of an Event (bytes).
const SHORT_LIMIT: usize = 128;
/// The longest `note` of an Event (bytes).
const NOTE_LIMIT: usize = 1024;

fn is(def: &ResourceDef, group: &str, plural: &str) -> bool {
    def.storage_key() == StorageKey { group: group.into(), plural: plural.into() }
}

/// Checks an object of `def` about to be stored (created or updated).
pub(crate) fn check(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    if is(def, "events.k8s.io", "events") {
        return event(obj);
    }
    if is(def, "coordination.k8s.io", "leases") {
        return lease(obj);
    }
    Ok(())
}

/// An `events.k8s.io/v1` Event: what `ValidateEventCreate` / `ValidateEventUpdate` refuse.
fn event(obj: &Value) -> Result<(), ApiError> {
    let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut causes = Vec::new();
    let mut required = |field: &str| {
        if s(field).is_empty() {
            causes.push(Cause::field("FieldValueRequired", field, "Required value"));
        }
    };
    required("eventTime");
    required("reportingController");
    required("reportingInstance");
    required("action");
    required("reason");
    for (field, path, limit) in [
        ("reportingInstance", "reportingInstance", SHORT_LIMIT),
        ("action", "action", SHORT_LIMIT),
        ("reason", "reason", SHORT_LIMIT),
        ("note", "message", NOTE_LIMIT),
    ] {
        if s(field).len() > limit {
            causes.push(Cause::invalid(path, &Value::from(""), &format!("can have at most {limit} characters")));
        }
    }
    let kind = s("type");
    if kind != "Normal" && kind != "Warning" {
        causes.push(Cause::invalid("type", &Value::from(""), &format!("has invalid value: {kind}")));
    }
    for (field, path) in [("deprecatedFirstTimestamp", "firstTimestamp"), ("deprecatedLastTimestamp", "lastTimestamp")]
    {
        if !s(field).is_empty() {
            causes.push(Cause::invalid(path, &Value::from(""), "needs to be unset"));
        }
    }
    if obj.get("deprecatedCount").and_then(Value::as_i64).is_some_and(|c| c != 0) {
        causes.push(Cause::invalid("count", &Value::from(""), "needs to be unset"));
    }
    let namespace = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let regarding_ns = obj.pointer("/regarding/namespace").and_then(Value::as_str).unwrap_or_default();
    if regarding_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
        causes.push(Cause::invalid("involvedObject.namespace", &Value::from(""), "does not match event.namespace"));
    }
    if causes.is_empty() {
        return Ok(());
    }
    // Events are validated as the internal core type: the message names `Event`, no group.
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(ApiError::invalid("Event", "", name, causes))
}

/// A Lease: `acquireTime` and `renewTime` are `MicroTime`s, which decode only from RFC 3339 with
/// exactly six fractional digits (400 otherwise, as the decoder of the real server answers).
fn lease(obj: &Value) -> Result<(), ApiError> {
    for field in ["acquireTime", "renewTime"] {
        let Some(v) = obj.pointer(&format!("/spec/{field}")).filter(|v| !v.is_null()) else { continue };
        let text = v.as_str().unwrap_or_default();
        if !is_micro_time(text) {
            return Err(ApiError::bad_request(format!(
                "Lease in version \"v1\" cannot be handled as a Lease: spec.{field}: parsing time {v} as \"2006-01-02T15:04:05.000000Z07:00\": not a MicroTime"
            )));
        }
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff` then `Z` or `±HH:MM`.
fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let stamp = digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26);
    let zone = &b.get(26..).unwrap_or_default();
    let zone_ok = *zone == b"Z"
        || (zone.len() == 6
            && (zone[0] == b'+' || zone[0] == b'-')
            && zone[1..3].iter().all(u8::is_ascii_digit)
            && zone[3] == b':'
            && zone[4..6].iter().all(u8::is_ascii_digit));
    stamp && zone_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_times_are_told_apart() {
        assert!(is_micro_time("2020-01-01T00:00:00.000000Z"));
        assert!(is_micro_time("2020-01-01T00:00:00.123456+02:00"));
        assert!(!is_micro_time("2020-01-01T00:00:00Z"));
        assert!(!is_micro_time("2020-01-01T00:00:00.123Z"));
        assert!(!is_micro_time("2020-01-01T00:00:00.1234567Z"));
        assert!(!is_micro_time("yesterday"));
    }

    #[test]
    fn events_are_checked_as_the_events_api_does() {
        let ok = serde_json::json!({
            "metadata": {"name": "e", "namespace": "team"}, "eventTime": "2020-01-01T00:00:00.000000Z",
            "reportingController": "steward", "reportingInstance": "i", "action": "Reconcile", "reason": "Synced",
            "type": "Normal", "note": "fine", "regarding": {"kind": "Noop", "name": "a", "namespace": "team"},
        });
        assert!(event(&ok).is_ok());
        let mut bad = ok.clone();
        bad["note"] = Value::from("n".repeat(1025));
        bad["type"] = Value::from("Bogus");
        bad.as_object_mut().unwrap().remove("eventTime");
        let e = event(&bad).unwrap_err().to_status();
        assert_eq!(e["code"], 422);
        assert_eq!(
            e["message"],
            "Event \"e\" is invalid: [eventTime: Required value, message: Invalid value: \"\": can have at most 1024 characters, type: Invalid value: \"\": has invalid value: Bogus]"
        );
    }
}
