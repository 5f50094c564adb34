//! `steward status`: objects and where they stand, from the API.

use std::process::ExitCode;

use anyhow::Result;

use crate::client::Client;
use crate::engine::{Readiness, ResourceView, Verdict};
use crate::health::HostCondition;
use steward_sdk::ConditionStatus;

use super::Output;
use super::client::parse_key;
use super::table::{format_rows, print_json};

/// Longest message shown in a table cell; the JSON output has it whole.
const MESSAGE_CHARS: usize = 80;

/// Shows one object (`KIND/NAMESPACE/NAME`, as JSON), one kind, or every object.
pub(super) async fn status(client: &Client, target: Option<&str>, output: Output) -> Result<ExitCode> {
    if let Some(t) = target.filter(|t| t.contains('/')) {
        let view = client.resource(&parse_key(t)?).await?;
        // A workflow run (a status with steps) reads best as its steps; `-o json` has it whole.
        match &view.status {
            Some(s) if output == Output::Table && s["steps"].is_array() => super::workflow::print_run(t, s),
            _ => print_json(&view)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let views = client.resources(target).await?;
    match output {
        Output::Json => print_json(&views)?,
        Output::Table => {
            // What is wrong with the host itself comes first; nothing when all is well.
            let conditions = client.host_conditions().await?;
            print!("{}", host_rows(&conditions).map(|r| format_rows(&r) + "\n").unwrap_or_default());
            print!("{}", format_rows(&rows(&views)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The table of the host's conditions that are not `True`, with a header; `None` when every
/// condition holds.
fn host_rows(conditions: &[HostCondition]) -> Option<Vec<[String; 4]>> {
    let bad: Vec<&HostCondition> = conditions.iter().filter(|c| c.status != ConditionStatus::True).collect();
    if bad.is_empty() {
        return None;
    }
    let mut rows = vec![["HOST CONDITION", "STATUS", "REASON", "MESSAGE"].map(String::from)];
    rows.extend(bad.into_iter().map(|c| [c.name(), format!("{:?}", c.status), c.reason.clone(), c.message.clone()]));
    Some(rows)
}

/// The status table: a header, then one row per object, in the API's order. Each row shows the
/// object's summary (phase, Ready, reason); when every object is of one kind, that kind's printer
/// columns (priority 0) follow, as the API's summary has them.
fn rows(views: &[ResourceView]) -> Vec<Vec<String>> {
    let one_kind = views.first().filter(|first| views.iter().all(|v| v.kind == first.kind));
    let extra: Vec<String> =
        one_kind.map(|v| v.summary.columns.iter().map(|c| c.name.clone()).collect()).unwrap_or_default();
    let mut header: Vec<String> = ["NAMESPACE", "KIND", "NAME", "PHASE", "READY", "REASON"].map(String::from).to_vec();
    header.extend(extra.iter().map(|c| c.to_ascii_uppercase()));
    header.extend(["GEN", "OBSERVED", "MESSAGE"].map(String::from));
    let mut rows = vec![header];
    rows.extend(views.iter().map(|v| {
        let s = &v.summary;
        let ready = match s.ready {
            Readiness::Absent => "-".to_string(),
            r => format!("{r:?}"),
        };
        let warned = v.warnings.first().map(|w| format!("{} warning(s): {w}", v.warnings.len()));
        // A failure's message first; otherwise what the user should fix (a file problem, a
        // warning) before the Ready condition's message, which says all is well.
        let message = if s.verdict == Verdict::Failing {
            s.message.as_deref().or(v.source_problem.as_deref()).or(warned.as_deref())
        } else {
            v.source_problem.as_deref().or(warned.as_deref()).or(s.message.as_deref())
        };
        let message = message.unwrap_or("");
        let mut row = vec![
            v.namespace.clone(),
            v.kind.clone(),
            v.name.clone(),
            s.phase.to_string(),
            ready,
            s.reason.clone().unwrap_or_else(|| "-".into()),
        ];
        row.extend(extra.iter().map(|name| {
            s.columns.iter().find(|c| &c.name == name).and_then(|c| c.value.clone()).unwrap_or_else(|| "<none>".into())
        }));
        row.extend([
            v.generation.to_string(),
            v.observed_generation.map_or("-".into(), |g| g.to_string()),
            message.chars().take(MESSAGE_CHARS).collect(),
        ]);
        row
    }));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_host_conditions_that_do_not_hold_head_the_table() {
        let c = crate::health::Conditions::new();
        c.ok(crate::health::RESOURCES_READABLE, None, "Read", "");
        assert!(host_rows(&c.list()).is_none());
        c.fail(crate::health::STORE_WRITABLE, None, "DiskFull", "free space on /var/lib/steward");
        let text = format_rows(&host_rows(&c.list()).unwrap());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("HOST CONDITION") && lines.len() == 2, "{text}");
        assert!(
            lines[1].contains("StoreWritable") && lines[1].contains("DiskFull") && lines[1].contains("free space"),
            "{text}"
        );
    }
    use crate::client::{ClientError, decode};

    /// `GET /api/v1/resources` as a host answers it: one synced object, one failed one whose
    /// error is longer than a cell.
    fn answer() -> serde_json::Value {
        serde_json::json!([
            {
                "kind": "Noop", "namespace": "default", "name": "a",
                "generation": 2, "observedGeneration": 2, "phase": "Synced",
                "summary": {"phase": "Synced", "ready": "True", "reason": "Done", "message": null, "verdict": "ok"},
                "lastReconcileTime": "2026-11-23T21:00:00Z", "lastSuccessTime": "2026-11-23T21:00:00Z",
                "retryCount": 0, "nextAttemptTime": null, "lastError": null,
                "status": {"value": "hello"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "Done", "message": ""}],
                "plugin": "noop", "pluginVersion": "0.1.0", "source": "a.yaml:1",
                "sourceProblem": null, "deleting": false, "disabled": false,
                "history": [
                    {"time": "2026-11-23T21:00:00Z", "reason": "Created", "outcome": "Synced", "durationMs": 3,
                     "traceId": "4bf92f3577b34da6a3ce929d0e0e4736"}
                ]
            },
            {
                "kind": "Misbehave", "namespace": "team-a", "name": "m",
                "generation": 1, "observedGeneration": null, "phase": "Failed",
                "summary": {"phase": "Failed", "ready": "Absent", "reason": "Failed", "message": "x".repeat(100), "verdict": "failing"},
                "lastReconcileTime": null, "lastSuccessTime": null,
                "retryCount": 5, "nextAttemptTime": null, "lastError": "x".repeat(100),
                "status": null, "conditions": [],
                "plugin": null, "pluginVersion": null, "source": "m.yaml:3",
                "sourceProblem": null, "deleting": false, "disabled": false, "history": []
            }
        ])
    }

    #[test]
    fn an_api_answer_becomes_one_row_per_object() {
        let views: Vec<ResourceView> = decode("/api/v1/resources", answer()).expect("the API's shape");
        let rows = rows(&views);
        assert_eq!(rows[0], ["NAMESPACE", "KIND", "NAME", "PHASE", "READY", "REASON", "GEN", "OBSERVED", "MESSAGE"]);
        assert_eq!(rows[1], ["default", "Noop", "a", "Synced", "True", "Done", "2", "2", ""]);
        assert_eq!(rows[2][..8], ["team-a", "Misbehave", "m", "Failed", "-", "Failed", "1", "-"]);
        assert_eq!(rows[2][8], "x".repeat(MESSAGE_CHARS), "a long error is cut to the cell");
        // One object's detail (`steward status KIND/NS/NAME`) is the view itself: its history
        // names the trace of each reconcile.
        let detail = serde_json::to_value(&views[0]).unwrap();
        assert_eq!(detail["history"][0]["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(serde_json::to_value(&views[1]).unwrap()["history"].as_array().unwrap().is_empty());
    }

    #[test]
    fn a_source_problem_shows_when_there_is_no_error() {
        let mut answer = answer();
        answer[1]["lastError"] = serde_json::Value::Null;
        answer[1]["summary"]["message"] = serde_json::Value::Null;
        answer[1]["sourceProblem"] = "m.yaml:3:7: mapping values are not allowed here".into();
        let views: Vec<ResourceView> = decode("/api/v1/resources", answer).unwrap();
        assert_eq!(rows(&views)[2][8], "m.yaml:3:7: mapping values are not allowed here");
    }

    #[test]
    fn warnings_show_before_a_ready_message_but_never_before_a_failure() {
        let mut answer = answer();
        answer[0]["summary"]["message"] = "the server is Running and healthy".into();
        answer[1]["warnings"] =
            serde_json::json!([{"path": "spec.x", "message": "unknown field, ignored", "source": "schema"}]);
        answer[0]["warnings"] = serde_json::json!([
            {"path": "spec.extra", "message": "unknown field, ignored", "source": "schema"},
            {"path": "spec.url", "message": "ignored on a stdio server", "source": "plugin"}
        ]);
        answer[0]["history"][0]["warnings"] = serde_json::json!(["spec.extra: unknown field, ignored"]);
        let views: Vec<ResourceView> = decode("/api/v1/resources", answer).unwrap();
        assert_eq!(rows(&views)[1][8], "2 warning(s): spec.extra: unknown field, ignored");
        assert_eq!(rows(&views)[2][8], "x".repeat(MESSAGE_CHARS), "a failing object shows why it fails");
        assert_eq!(views[0].history[0].warnings, ["spec.extra: unknown field, ignored"]);
    }

    #[test]
    fn an_answer_of_another_shape_is_a_clear_error_not_a_panic() {
        for (what, change, expect) in [
            ("missing", ("phase", None), "missing field `phase`"),
            ("unknown field", ("colour", Some(serde_json::json!("red"))), "unknown field `colour`"),
            ("unknown phase", ("phase", Some(serde_json::json!("Sleeping"))), "Sleeping"),
            ("wrong type", ("generation", Some(serde_json::json!("two"))), "invalid type"),
        ] {
            let mut answer = answer();
            let obj = answer[0].as_object_mut().unwrap();
            match change {
                (field, None) => drop(obj.remove(field)),
                (field, Some(v)) => drop(obj.insert(field.to_string(), v)),
            }
            let e = decode::<Vec<ResourceView>>("/api/v1/resources", answer).unwrap_err();
            assert!(matches!(&e, ClientError::Shape { path, .. } if path == "/api/v1/resources"), "{what}: {e}");
            assert!(e.to_string().contains(expect), "{what}: {e}");
        }
        let e = decode::<Vec<ResourceView>>("/api/v1/resources", serde_json::json!({"error": "x"})).unwrap_err();
        assert!(e.to_string().contains("/api/v1/resources"), "{e}");
    }

    #[test]
    fn an_unready_object_shows_false_with_its_reason_and_one_kinds_columns_follow() {
        let answer = serde_json::json!([{
            "kind": "MCPServer", "namespace": "default", "name": "broken",
            "generation": 1, "observedGeneration": 1, "phase": "Synced",
            "summary": {"phase": "Synced", "ready": "False", "reason": "Failed",
                        "message": "cannot start `/nope/prog`", "verdict": "failing",
                        "columns": [{"name": "State", "value": "Failed"}, {"name": "Tools", "value": null}]},
            "lastReconcileTime": null, "lastSuccessTime": null, "retryCount": 0, "nextAttemptTime": null,
            "lastError": null, "status": {"state": "Failed"},
            "conditions": [{"type": "Ready", "status": "False", "reason": "Failed", "message": "cannot start `/nope/prog`"}],
            "plugin": "mcpserver", "pluginVersion": "0.1.0", "source": "s.yaml:1",
            "sourceProblem": null, "deleting": false, "disabled": false, "history": []
        }]);
        let views: Vec<ResourceView> = decode("/api/v1/resources", answer).unwrap();
        let rows = rows(&views);
        assert_eq!(rows[0][3..8], ["PHASE", "READY", "REASON", "STATE", "TOOLS"]);
        assert_eq!(rows[1][3..8], ["Synced", "False", "Failed", "Failed", "<none>"]);
        assert_eq!(rows[1][10], "cannot start `/nope/prog`");
    }
}
