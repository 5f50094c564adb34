//! `core_events`: the events the host recorded about this namespace's objects (its journal, the same in both modes), filtered as muster filters them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use super::{CoreTool, bool_arg, count_arg, ok_saying, str_arg};
use crate::engine::{Engine, RecordedEvent};
use crate::tools::CallError;

/// muster's default number of events.
const DEFAULT_LIMIT: usize = 50;

/// The description of `tool`, when it is one of this group's.
pub(super) fn description(tool: CoreTool) -> Option<&'static str> {
    (tool == CoreTool::Events).then_some(
        "Lists the events the host recorded about this namespace's objects since it started, newest \
         first: timestamp, resource_type, resource_name, namespace, reason, message and type (Normal or \
         Warning). Filter by resourceType, resourceName, eventType, since (a duration such as 1h, or an \
         RFC 3339 time) and until; at most `limit` (50).",
    )
}

/// The input schema of `tool`, when it is one of this group's.
pub(super) fn schema(tool: CoreTool) -> Option<Value> {
    (tool == CoreTool::Events).then(|| {
        json!({"type": "object", "properties": {
            "resourceType": {"type": "string", "description": "Filter by resource type (MCPServer, Workflow, WorkflowRun, ...)"},
            "resourceName": {"type": "string", "description": "Filter by resource name"},
            "namespace": {"type": "string", "description": "Filter by namespace (this endpoint's only)"},
            "eventType": {"type": "string", "description": "Filter by event type (Normal, Warning)"},
            "since": {"type": "string", "description": "Events after this time (a duration such as 1h, or an RFC 3339 time)"},
            "until": {"type": "string", "description": "Events before this time (RFC 3339)"},
            "limit": {"type": "number", "description": "Maximum number of events to return", "default": DEFAULT_LIMIT},
            "follow": {"type": "boolean", "description": "Not supported by Steward: must be false", "default": false},
        }})
    })
}

fn time_arg(args: &JsonObject, arg: &str, durations: bool) -> Result<Option<u64>, CallError> {
    let Some(text) = str_arg(args, arg)?.filter(|s| !s.is_empty()) else { return Ok(None) };
    let millis = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(Some(millis(t)));
    }
    if durations && let Ok(d) = humantime::parse_duration(text) {
        return Ok(Some(millis(SystemTime::now().checked_sub(d).unwrap_or(UNIX_EPOCH))));
    }
    let what = if durations { "a duration such as 1h, or an RFC 3339 time" } else { "an RFC 3339 time" };
    Err(CallError::Refused(format!("argument `{arg}`: {text:?} is not {what}")))
}

/// One event as muster shows it; `None` for an event of another namespace.
fn shown(e: &RecordedEvent) -> Option<(String, String, String, Value)> {
    let mut parts = e.object.splitn(3, '/');
    let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
    let at = UNIX_EPOCH + Duration::from_millis(e.time);
    let stamp = humantime::format_rfc3339_seconds(at).to_string().replace('T', " ").replace('Z', "");
    let v = json!({
        "timestamp": stamp,
        "resource_type": kind,
        "resource_name": name,
        "namespace": namespace,
        "reason": e.reason,
        "message": e.message,
        "type": e.type_,
    });
    Some((kind.to_string(), namespace.to_string(), name.to_string(), v))
}

/// Runs `core_events` in `namespace`.
pub(super) fn call(engine: &Engine, namespace: &str, args: &JsonObject) -> Result<CallToolResult, CallError> {
    if bool_arg(args, "follow", false)? {
        return Err(CallError::Refused(
            "`follow` is not supported by this host: call core_events again with `since` to see newer events".into(),
        ));
    }
    if let Some(ns) = str_arg(args, "namespace")?.filter(|ns| !ns.is_empty() && *ns != namespace) {
        return Err(CallError::Refused(format!(
            "this endpoint serves namespace {namespace}; connect to /mcp?namespace={ns} for the events of {ns}"
        )));
    }
    let kind = str_arg(args, "resourceType")?.filter(|s| !s.is_empty());
    let name = str_arg(args, "resourceName")?.filter(|s| !s.is_empty());
    let type_ = str_arg(args, "eventType")?.filter(|s| !s.is_empty());
    let since = time_arg(args, "since", true)?;
    let until = time_arg(args, "until", false)?;
    let limit = count_arg(args, "limit", DEFAULT_LIMIT)?;
    let limit = if limit == 0 { DEFAULT_LIMIT } else { limit };
    let events: Vec<Value> = engine
        .recorded_events()
        .iter()
        .rev()
        .filter(|e| since.is_none_or(|s| e.time >= s) && until.is_none_or(|u| e.time <= u))
        .filter(|e| type_.is_none_or(|t| e.type_.eq_ignore_ascii_case(t)))
        .filter_map(shown)
        .filter(|(k, ns, n, _)| {
            ns == namespace && kind.is_none_or(|want| k.eq_ignore_ascii_case(want)) && name.is_none_or(|want| n == want)
        })
        .take(limit)
        .map(|(_, _, _, v)| v)
        .collect();
    let text = serde_json::to_string(&events).unwrap_or_default();
    Ok(ok_saying(text, json!({"events": events, "total": events.len()})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_as_musters() {
        let e = RecordedEvent {
            time: 1_700_000_000_000,
            object: "MCPServer/default/git".into(),
            type_: "Warning".into(),
            reason: "Failed".into(),
            action: "Reconcile".into(),
            message: "boom".into(),
        };
        let (kind, ns, name, v) = shown(&e).unwrap();
        assert_eq!((kind.as_str(), ns.as_str(), name.as_str()), ("MCPServer", "default", "git"));
        assert_eq!(v["timestamp"], "2023-11-14 22:13:20");
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["resource_type"], "MCPServer");
    }

    #[test]
    fn times_are_rfc3339_or_durations_back_from_now() {
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            time_arg(&args(json!({"since": "2023-11-14T22:13:20Z"})), "since", true),
            Ok(Some(1_700_000_000_000))
        );
        assert!(time_arg(&args(json!({"since": "1h"})), "since", true).unwrap().is_some());
        assert!(time_arg(&args(json!({"until": "1h"})), "until", false).is_err());
        assert!(time_arg(&args(json!({"since": "soon"})), "since", true).is_err());
        assert_eq!(time_arg(&args(json!({})), "since", true), Ok(None));
    }
}
