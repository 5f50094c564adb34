//! `workflow_<name>` calls: one WorkflowRun object per call, named after the call, followed until it ends.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use steward_sdk::RawObject;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, RequestError, ResourceView};
use crate::model::{ObjectKey, Phase};
use crate::store::Change;
use crate::tools::CallError;

/// The kind of a workflow's run.
pub use crate::model::WORKFLOW_RUN_KIND as RUN_KIND;

/// The API version runs are created with.
pub const API_VERSION: &str = "steward.dev/v1alpha1";

/// The label a run gets with the name of the object whose call started it.
pub const PARENT_LABEL: &str = "steward.dev/parent-run";

/// How far a call is: for a run, steps done of how many; for a server's tool, the server's
/// `progress` and `total` as it sent them.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Steps that ended (succeeded, failed or skipped), or the server's progress.
    pub done: f64,
    /// All steps, when the run (or the server) says.
    pub total: Option<f64>,
    /// The run's phase (or the server's message), for people.
    pub message: Option<String>,
}

/// The name of the run a call `id` of `caller` starts: `<caller name>-<16 hex>`, the hex from a
/// hash of the caller's key and the id. The same call always gets the same name (a repeated
/// attempt after a host restart finds its run); the name is a DNS label of at most 63 characters.
pub fn run_name(caller: &ObjectKey, id: &str) -> String {
    let mut h = Sha256::new();
    h.update(caller.to_string().as_bytes());
    h.update([0]);
    h.update(id.as_bytes());
    let digest = h.finalize();
    // 64 bits: names of runs that are kept for ever must not collide (32 bits would, around
    // 77,000 runs of one caller).
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let base: String = caller
        .name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(63 - 17)
        .collect();
    let base = base.trim_matches('-');
    if base.is_empty() { format!("run-{hex}") } else { format!("{base}-{hex}") }
}

/// Creates the run of `workflow` with `arguments` for call `id` of `caller` in the caller's
/// namespace, or finds the one an earlier attempt created. `parent` labels it with the caller's name.
pub async fn start(
    engine: &Engine,
    caller: &ObjectKey,
    id: &str,
    workflow: &str,
    arguments: &Map<String, Value>,
    parent: bool,
) -> Result<ObjectKey, CallError> {
    let name = run_name(caller, id);
    let key = ObjectKey::new(RUN_KIND, caller.namespace(), &name);
    if engine.cached(&key).is_some() {
        return Ok(key);
    }
    let mut labels = BTreeMap::new();
    if parent {
        labels.insert(PARENT_LABEL.to_string(), caller.name().to_string());
    }
    let obj = RawObject {
        api_version: API_VERSION.into(),
        kind: RUN_KIND.into(),
        name,
        namespace: caller.namespace().to_string(),
        generation: 1,
        labels,
        annotations: BTreeMap::new(),
        spec: json!({"workflow": workflow, "args": arguments}).to_string(),
        status: None,
        deleting: false,
    };
    match engine.create_object(obj).await {
        Ok(k) => Ok(k),
        Err(RequestError::Exists(_)) => Ok(key),
        Err(RequestError::UnknownKind(_)) => Err(CallError::NotOffered(format!(
            "workflow_{workflow} cannot run: no plugin serves kind {RUN_KIND} (add the workflowrun plugin)"
        ))),
        Err(RequestError::Refused(m)) => Err(CallError::Refused(format!("cannot create {key}: {m}"))),
        Err(e) => Err(CallError::Transport(format!("cannot create {key}: {e}"))),
    }
}

/// Follows the run `key` until it ends and answers its result; reports each new [`Progress`] on
/// `progress`. Past `timeout` or once `cancel` fires, deletes the run and answers
/// [`CallError::Timeout`] or [`CallError::Cancelled`] — unless `host_stop` fired (the host
/// stops, and will make the call again): then the run is kept, to be followed again.
pub async fn follow(
    engine: &Engine,
    key: &ObjectKey,
    timeout: Duration,
    cancel: &CancellationToken,
    host_stop: &CancellationToken,
    progress: Option<&tokio::sync::mpsc::UnboundedSender<Progress>>,
) -> Result<Value, CallError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changes = engine.changes();
    let wanted = key.to_string();
    let mut seen = false;
    let mut last: Option<Progress> = None;
    loop {
        match engine.view(key) {
            Some(view) => {
                seen = true;
                // The message names the run, so an agent can look it up (or find it after a restart).
                // It is sent before the result too, so that the final step is reported.
                let now = view.status.as_ref().and_then(progress_of).map(|p| Progress {
                    message: Some(format!("{key}: {}", p.message.as_deref().unwrap_or("Pending"))),
                    ..p
                });
                if let (Some(tx), Some(p)) = (progress, &now)
                    && last.as_ref() != Some(p)
                {
                    let _ = tx.send(p.clone());
                }
                last = now.or(last);
                if let Some(result) = outcome(&view) {
                    return Ok(to_json(result));
                }
            }
            None if seen => {
                return Ok(to_json(CallToolResult::error(vec![ContentBlock::text(format!(
                    "{key} was deleted before it ended"
                ))])));
            }
            None => {}
        }
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Ok(Change::Record(k)) if k == wanted => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => {
                        return Err(CallError::Transport("the host is stopping".into()));
                    }
                },
                () = cancel.cancelled() => {
                    // A host that stops makes the call again later, and it follows this same run:
                    // only a caller that gave up has the run deleted.
                    if !host_stop.is_cancelled() {
                        abandon(engine, key, "the call was cancelled").await;
                    }
                    return Err(CallError::Cancelled);
                }
                () = tokio::time::sleep_until(deadline) => {
                    abandon(engine, key, "the call timed out").await;
                    return Err(CallError::Timeout(timeout));
                }
            }
        }
    }
}

/// Deletes a run nobody waits for any more.
async fn abandon(engine: &Engine, key: &ObjectKey, why: &str) {
    match engine.delete_object(key).await {
        Ok(()) => tracing::info!(run = %key, "{why}; deleted the run"),
        Err(e) => tracing::warn!(run = %key, error = %e, "{why}; cannot delete the run"),
    }
}

/// The result of a run that ended, as MCP's `CallToolResult`; `None` while it runs.
///
/// The run's status `phase` says: `Succeeded` answers its `output` (as JSON text, and as
/// structured content when it is an object); `Failed` and `Cancelled` answer `isError` with its
/// `message` (or `error`). A run the host gave up on (its phase `Failed` before the run said
/// anything final) answers `isError` with the host's last error.
pub fn outcome(view: &ResourceView) -> Option<CallToolResult> {
    let key = format!("{}/{}/{}", RUN_KIND, view.namespace, view.name);
    let named = |mut r: CallToolResult| {
        // `_meta` names the run the answer comes from: its steps and history are there.
        r.meta = Some(rmcp::model::MetaObject(serde_json::Map::from_iter([(
            RUN_META.to_string(),
            Value::String(key.clone()),
        )])));
        r
    };
    answer(view).map(named)
}

/// The `_meta` key of a workflow call's answer that names its run (`WorkflowRun/NS/NAME`).
pub const RUN_META: &str = "steward.dev/run";

fn answer(view: &ResourceView) -> Option<CallToolResult> {
    let status = view.status.clone().unwrap_or(Value::Null);
    let output = status.get("output").cloned().unwrap_or(Value::Null);
    let message = ["message", "error"].iter().find_map(|f| status[*f].as_str()).map(str::to_string);
    match status["phase"].as_str() {
        Some("Succeeded") => {
            let text = match &output {
                Value::String(s) => s.clone(),
                other => serde_json::to_string(other).unwrap_or_default(),
            };
            let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
            if output.is_object() {
                r.structured_content = Some(output);
            }
            Some(r)
        }
        Some(phase @ ("Failed" | "Cancelled")) => {
            let why = message.unwrap_or_else(|| format!("the run {}", phase.to_ascii_lowercase()));
            let mut r =
                CallToolResult::error(vec![ContentBlock::text(format!("{}/{} {phase}: {why}", RUN_KIND, view.name))]);
            if output.is_object() {
                r.structured_content = Some(output);
            }
            Some(r)
        }
        _ if view.phase == Phase::Failed => Some(CallToolResult::error(vec![ContentBlock::text(format!(
            "{}/{} failed: {}",
            RUN_KIND,
            view.name,
            view.last_error.as_deref().unwrap_or("the host gave up on it")
        ))])),
        _ => None,
    }
}

/// How far a run is, from its status `steps`: a list of the steps reached (each with a `phase`,
/// `state` or `status`; the total is the step count of the Workflow snapshot in `workflow` when
/// there is one) or an object with `done`/`completed` and `total`. `None` when it says nothing.
pub fn progress_of(status: &Value) -> Option<Progress> {
    let message = status["phase"].as_str().map(str::to_string);
    match &status["steps"] {
        Value::Array(steps) => {
            // Top-level steps only (a sub-step's record id has a `.` or a `[`: `each[0].say`,
            // `both.a`, `onFailure.x`), so that `done` counts what `total` counts.
            let top = |s: &&Value| s["id"].as_str().is_none_or(|id| !id.contains(['.', '[']));
            let reached: Vec<&Value> = steps.iter().filter(top).collect();
            let done = reached
                .iter()
                .filter(|s| {
                    ["phase", "state", "status"].iter().filter_map(|f| s[*f].as_str()).any(|p| {
                        matches!(
                            p.to_ascii_lowercase().as_str(),
                            "succeeded" | "failed" | "skipped" | "completed" | "done" | "cancelled"
                        )
                    })
                })
                .count() as u64;
            // The steps reached so far; all of them, when the run shows the Workflow it follows.
            let all = status["workflow"]["steps"].as_array().map_or(reached.len(), Vec::len).max(reached.len());
            Some(Progress { done: done as f64, total: Some(all as f64), message })
        }
        Value::Object(m) => {
            let done = m.get("done").or_else(|| m.get("completed")).and_then(Value::as_f64)?;
            Some(Progress { done, total: m.get("total").and_then(Value::as_f64), message })
        }
        _ => None,
    }
}

/// A result as the JSON the router answers.
pub fn to_json(result: CallToolResult) -> Value {
    serde_json::to_value(result).unwrap_or_else(|e| json!({"content": [], "isError": true, "error": e.to_string()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_stable_dns_labels() {
        let caller = ObjectKey::new("WorkflowRun", "default", "deploy-1");
        let a = run_name(&caller, "step-1");
        assert_eq!(a, run_name(&caller, "step-1"), "the same call, the same run");
        assert_ne!(a, run_name(&caller, "step-2"));
        assert_ne!(a, run_name(&ObjectKey::new("WorkflowRun", "other", "deploy-1"), "step-1"));
        assert!(a.starts_with("deploy-1-") && a.len() == "deploy-1-".len() + 16, "64 bits of hash: {a}");
        let long = ObjectKey::new("WorkflowRun", "default", format!("{}.x", "a".repeat(250)));
        for name in [run_name(&long, "i"), run_name(&ObjectKey::new("K", "d", "-.-"), "i"), run_name(&caller, "")] {
            assert!(name.len() <= 63, "{name}");
            assert!(crate::model::is_dns_subdomain(&name) && !name.contains('.'), "{name}");
        }
    }

    fn view(phase: Phase, status: Value) -> ResourceView {
        serde_json::from_value(json!({
            "kind": RUN_KIND, "namespace": "default", "name": "r", "generation": 1,
            "observedGeneration": 1, "phase": phase, "lastReconcileTime": null, "lastSuccessTime": null,
            "summary": {"phase": phase, "ready": "Absent", "reason": null, "message": null, "verdict": "progressing"},
            "retryCount": 0, "nextAttemptTime": null, "lastError": "boom", "status": status,
            "conditions": [], "plugin": null, "pluginVersion": null, "source": null, "sourceProblem": null,
            "deleting": false, "disabled": false, "history": [],
            "summary": {"phase": phase, "ready": "Absent", "reason": null, "message": "boom", "verdict": "ok"},
        }))
        .unwrap()
    }

    #[test]
    fn a_run_ends_with_its_output_or_its_message() {
        let ok = outcome(&view(Phase::Synced, json!({"phase": "Succeeded", "output": {"n": 1}}))).unwrap();
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(ok.structured_content, Some(json!({"n": 1})));
        assert_eq!(serde_json::to_value(&ok.content).unwrap()[0]["text"], r#"{"n":1}"#);
        let failed = outcome(&view(Phase::Synced, json!({"phase": "Failed", "message": "step s1 failed"}))).unwrap();
        assert_eq!(failed.is_error, Some(true));
        assert!(serde_json::to_string(&failed.content).unwrap().contains("step s1 failed"));
        let cancelled = outcome(&view(Phase::Synced, json!({"phase": "Cancelled"}))).unwrap();
        assert_eq!(cancelled.is_error, Some(true));
        assert!(outcome(&view(Phase::Synced, json!({"phase": "Running"}))).is_none());
        assert!(outcome(&view(Phase::Pending, Value::Null)).is_none());
        let gave_up = outcome(&view(Phase::Failed, json!({"phase": "Running"}))).unwrap();
        assert!(serde_json::to_string(&gave_up.content).unwrap().contains("boom"));
    }

    #[test]
    fn progress_is_steps_done_of_all() {
        let table = [
            (
                json!({"phase": "Running", "steps": [{"id": "a", "phase": "Succeeded"}, {"id": "b", "phase": "Running"}, {"id": "c"}]}),
                Some((1, Some(3))),
            ),
            (json!({"steps": [{"state": "skipped"}, {"status": "Failed"}]}), Some((2, Some(2)))),
            (json!({"steps": [{"state": "Succeeded"}], "workflow": {"steps": [{}, {}, {}]}}), Some((1, Some(3)))),
            (
                // Sub-steps (`each[0].say`, `both.a`) are not counted beside their step.
                json!({"steps": [
                    {"id": "each", "state": "Succeeded"}, {"id": "each[0].say", "state": "Succeeded"},
                    {"id": "each[1].say", "state": "Succeeded"}, {"id": "both", "state": "Running"},
                    {"id": "both.a", "state": "Succeeded"}
                ], "workflow": {"steps": [{}, {}, {}]}}),
                Some((1, Some(3))),
            ),
            (json!({"steps": {"done": 4, "total": 9}}), Some((4, Some(9)))),
            (json!({"steps": {"completed": 1}}), Some((1, None))),
            (json!({"phase": "Running"}), None),
        ];
        for (status, want) in table {
            assert_eq!(progress_of(&status).map(|p| (p.done as u64, p.total.map(|t| t as u64))), want, "{status}");
        }
    }
}
