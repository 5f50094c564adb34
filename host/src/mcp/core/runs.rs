//! `core_workflow_execution_list` and `core_workflow_execution_get`: the namespace's WorkflowRuns as muster's workflow executions (the run's name is the `execution_id`).

use std::time::SystemTime;

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use super::{CoreTool, bool_arg, count_arg, failed, name_arg, of_namespace, ok, spec_of, str_arg};
use crate::engine::{Engine, ResourceView};
use crate::model::{ObjectKey, WORKFLOW_RUN_KIND};
use crate::tools::CallError;

/// muster's default page of executions.
const DEFAULT_LIMIT: usize = 50;

/// The description of `tool`, when it is one of this group's.
pub(super) fn description(tool: CoreTool) -> Option<&'static str> {
    Some(match tool {
        CoreTool::WorkflowExecutionList => {
            "Lists the workflow executions of this namespace (each a WorkflowRun, newest first): \
             execution_id, workflow_name, status (inprogress, completed, failed), times, duration and \
             step count; filter by `workflow_name` and `status`, page with `limit` and `offset`."
        }
        CoreTool::WorkflowExecutionGet => {
            "Gets one workflow execution (a WorkflowRun) by `execution_id`: its input, result or error, \
             and each step's tool, status, input and result (`include_steps`), or one step (`step_id`)."
        }
        _ => return None,
    })
}

/// The input schema of `tool`, when it is one of this group's.
pub(super) fn schema(tool: CoreTool) -> Option<Value> {
    Some(match tool {
        CoreTool::WorkflowExecutionList => json!({"type": "object", "properties": {
            "workflow_name": {"type": "string", "description": "Filter by workflow name"},
            "status": {"type": "string", "enum": ["inprogress", "completed", "failed"], "description": "Filter by execution status"},
            "limit": {"type": "number", "description": "Maximum number of executions to return", "default": DEFAULT_LIMIT},
            "offset": {"type": "number", "description": "Number of executions to skip", "default": 0},
        }}),
        CoreTool::WorkflowExecutionGet => json!({"type": "object", "properties": {
            "execution_id": {"type": "string", "description": "ID of the execution (the WorkflowRun's name)"},
            "include_steps": {"type": "boolean", "description": "Include step details", "default": true},
            "step_id": {"type": "string", "description": "Get one step's details"},
        }, "required": ["execution_id"]}),
        _ => return None,
    })
}

/// Runs `core_workflow_execution_list` or `core_workflow_execution_get`.
pub(super) fn call(
    engine: &Engine,
    namespace: &str,
    tool: CoreTool,
    args: &JsonObject,
) -> Result<CallToolResult, CallError> {
    if tool == CoreTool::WorkflowExecutionGet {
        return get(engine, namespace, args);
    }
    let workflow = str_arg(args, "workflow_name")?;
    let status = str_arg(args, "status")?;
    if let Some(s) = status.filter(|s| !["inprogress", "completed", "failed"].contains(s)) {
        return Err(CallError::Refused(format!(
            "argument `status`: {s:?} is not one of inprogress, completed, failed"
        )));
    }
    let limit = count_arg(args, "limit", DEFAULT_LIMIT)?;
    let offset = count_arg(args, "offset", 0)?;
    let mut all: Vec<Value> = of_namespace(engine, WORKFLOW_RUN_KIND, namespace)
        .map(|v| execution(engine, &v))
        .filter(|e| workflow.is_none_or(|w| e["workflow_name"] == w))
        .filter(|e| status.is_none_or(|s| e["status"] == s))
        .collect();
    // Newest first, as muster lists them; a run not started yet counts as newest.
    all.sort_by(|a, b| b["started_at"].as_str().unwrap_or("~").cmp(a["started_at"].as_str().unwrap_or("~")));
    let total = all.len();
    let page: Vec<Value> = all
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|mut e| {
            let steps = e["steps"].as_array().map_or(0, Vec::len);
            if let Value::Object(m) = &mut e {
                for k in ["steps", "input", "result", "error", "truncated"] {
                    m.remove(k);
                }
                m.insert("step_count".into(), steps.into());
            }
            e
        })
        .collect();
    let has_more = offset.saturating_add(page.len()) < total;
    Ok(ok(json!({"executions": page, "total": total, "limit": limit, "offset": offset, "has_more": has_more})))
}

fn get(engine: &Engine, namespace: &str, args: &JsonObject) -> Result<CallToolResult, CallError> {
    let id = name_arg(args, "execution_id")?;
    let include_steps = bool_arg(args, "include_steps", true)?;
    let step_id = str_arg(args, "step_id")?;
    let key = ObjectKey::new(WORKFLOW_RUN_KIND, namespace, &id);
    let Some(view) = engine.view(&key) else {
        return Ok(failed(format!("workflow execution {id} not found: no WorkflowRun {id} in namespace {namespace}")));
    };
    let mut e = execution(engine, &view);
    if let Some(step) = step_id {
        let found = e["steps"].as_array().and_then(|s| s.iter().find(|s| s["step_id"] == step)).cloned();
        return Ok(match found {
            Some(s) => ok(s),
            None => failed(format!("workflow execution {id} has no step {step:?}")),
        });
    }
    if !include_steps && let Value::Object(m) = &mut e {
        m.remove("steps");
    }
    Ok(ok(e))
}

/// muster's status of a run in `phase`.
fn status_of(phase: &str) -> &'static str {
    match phase {
        "Succeeded" => "completed",
        "Failed" | "Cancelled" => "failed",
        _ => "inprogress",
    }
}

fn millis_between(start: &Value, end: &Value) -> i64 {
    let at = |v: &Value| v.as_str().and_then(|s| humantime::parse_rfc3339_weak(s).ok());
    let Some(from) = at(start) else { return 0 };
    let to = at(end).unwrap_or_else(SystemTime::now);
    to.duration_since(from).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One run as muster's execution, its steps included.
fn execution(engine: &Engine, v: &ResourceView) -> Value {
    let status = v.status.clone().unwrap_or(Value::Null);
    let spec = spec_of(engine, &ObjectKey::new(&v.kind, &v.namespace, &v.name));
    let phase = status["phase"].as_str().unwrap_or("Pending");
    let steps: Vec<Value> = status["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    json!({
                        "step_id": s["id"],
                        "tool": s["tool"],
                        "status": match s["state"].as_str() {
                            Some("Succeeded" | "Skipped") => "completed",
                            Some("Failed" | "Cancelled") => "failed",
                            _ => "inprogress",
                        },
                        "state": s["state"],
                        "started_at": s["startedAt"],
                        "completed_at": s["finishedAt"],
                        "duration_ms": millis_between(&s["startedAt"], &s["finishedAt"]),
                        "input": s["arguments"],
                        "result": s["result"],
                        "error": s["error"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let error = match phase {
        "Failed" | "Cancelled" => status["message"].clone(),
        _ => Value::Null,
    };
    json!({
        "execution_id": v.name,
        "workflow_name": spec["workflow"],
        "status": status_of(phase),
        "phase": phase,
        "started_at": status["startedAt"],
        "completed_at": status["finishedAt"],
        "duration_ms": millis_between(&status["startedAt"], &status["finishedAt"]),
        "input": status.get("args").cloned().unwrap_or_else(|| spec["args"].clone()),
        "result": status["output"],
        "error": error,
        "truncated": status["outputTruncated"],
        "steps": steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_and_durations_read_as_musters() {
        assert_eq!(status_of("Succeeded"), "completed");
        assert_eq!(status_of("Cancelled"), "failed");
        assert_eq!(status_of("Running"), "inprogress");
        assert_eq!(status_of("Pending"), "inprogress");
        let d = millis_between(&json!("2026-11-22T10:00:00Z"), &json!("2026-11-22T10:00:01.500Z"));
        assert_eq!(d, 1500);
        assert_eq!(millis_between(&Value::Null, &Value::Null), 0);
    }
}
