//! One reconcile of a WorkflowRun: take (or keep) the snapshot, replay, and apply cancel and timeout.

use std::time::Duration;

use serde_json::{Map, Value};
use steward_sdk::EventType;
use steward_sdk::prelude::*;
use workflow::{WORKFLOW_KIND, WorkflowSpec};

use crate::args;
use crate::engine::{self, End};
use crate::limit::{self, OUTPUT_LIMIT};
use crate::policy::{Gate, Open, Policies, TOOL_DENIED};
use crate::spec::WorkflowRunSpec;
use crate::status::{RunPhase, StepState, WorkflowRunStatus};

/// Why a reconcile runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// An ordinary reconcile.
    Reconcile,
    /// The run is being deleted: cancel what is in flight.
    Finalize,
}

/// The outcome of reconciling `obj` at `now` (seconds after the epoch): the status, the
/// conditions, the calls wanted now (always the whole set), events on a change of phase,
/// and a wake-up at the deadline. Errors only when the args do not fit the Workflow.
pub fn outcome(
    ctx: &Context,
    obj: &Object<WorkflowRunSpec, WorkflowRunStatus>,
    mode: Mode,
    now: u64,
) -> Result<Outcome<WorkflowRunStatus>, Error> {
    let prev = obj.status.clone().unwrap_or_default();
    if prev.phase.is_final() {
        // An ended run never changes; it wants no calls (its ended calls stay recorded).
        return Ok(finish(prev.phase, prev, Vec::new(), None));
    }
    let cancel = match mode {
        Mode::Finalize => Some("cancelled: the run is being deleted"),
        Mode::Reconcile if obj.spec.cancel => Some("cancelled through spec.cancel"),
        Mode::Reconcile => None,
    };
    let mut status = WorkflowRunStatus { started_at: prev.started_at.clone(), ..Default::default() };
    let (snapshot, spec, input) = match (&prev.workflow, &prev.args) {
        (Some(snapshot), Some(args)) => {
            let spec: WorkflowSpec = serde_json::from_value(snapshot.clone()).map_err(|e| {
                Error::fatal(format!("the run's snapshot of Workflow {:?} no longer parses: {e}", obj.spec.workflow))
            })?;
            status.workflow_generation = prev.workflow_generation;
            (snapshot.clone(), spec, args.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Map<_, _>>())
        }
        _ => {
            if let Some(reason) = cancel {
                status.phase = RunPhase::Cancelled;
                status.message = format!("{reason} before it started");
                status.finished_at = Some(steward_sdk::time::rfc3339(now));
                return Ok(finish(prev.phase, status, Vec::new(), None));
            }
            match start(ctx, obj)? {
                Ok(started) => {
                    status.workflow_generation = Some(started.generation);
                    (started.snapshot, started.spec, started.input)
                }
                Err(message) => {
                    status.message = message;
                    return Ok(finish(prev.phase, status, Vec::new(), None));
                }
            }
        }
    };
    let started = status.started_at.get_or_insert_with(|| steward_sdk::time::rfc3339(now)).clone();
    status.args = Some(input.clone().into_iter().collect());
    // The host's call records, and the last status's step records for calls the host no longer
    // holds (after a failover in Kubernetes mode, the new leader's store is empty).
    // Before a new call, the EffectiveToolPolicy of the tool's server (read through the host, so
    // a change of it reconciles the run again); a run being cancelled asks for no call.
    let policies = Policies::new(ctx, steward_sdk::settings::mcp_prefix());
    let gate: &dyn Gate = if cancel.is_some() { &Open } else { &policies };
    let plan = engine::plan(&spec, &snapshot, &input, &ctx.calls(), &prev.steps, gate);
    status.workflow = Some(snapshot);
    status.steps = plan.steps;
    let deadline =
        obj.spec.timeout.as_deref().and_then(|t| steward_sdk::time::parse_duration(t).ok()).and_then(|limit| {
            let start = steward_sdk::time::parse_rfc3339(&started)?;
            Some(start.saturating_add(limit.as_secs_f64().ceil() as u64))
        });
    let mut calls = Vec::new();
    let mut requeue = None;
    match plan.end {
        Some(End::Succeeded) => {
            status.phase = RunPhase::Succeeded;
            status.message = succeeded_message(&status);
            if let Some(out) = plan.output {
                let (out, size) = limit::cut(out, OUTPUT_LIMIT);
                status.output_truncated = size.is_some();
                status.output = Some(out);
            }
        }
        Some(End::Failed(message)) => {
            status.phase = RunPhase::Failed;
            status.message = message;
        }
        None => match (cancel, deadline) {
            (Some(reason), _) => {
                stop_in_flight(&mut status, StepState::Cancelled, reason);
                status.phase = RunPhase::Cancelled;
                status.message = reason.to_string();
            }
            (None, Some(at)) if now >= at => {
                let message =
                    format!("timed out after {} (spec.timeout)", obj.spec.timeout.as_deref().unwrap_or_default());
                stop_in_flight(&mut status, StepState::Cancelled, &message);
                status.phase = RunPhase::Failed;
                status.message = message;
            }
            (None, deadline) => {
                status.phase = RunPhase::Running;
                status.message = plan.message;
                calls = plan.calls;
                requeue = deadline.map(|at| Duration::from_secs(at - now));
            }
        },
    }
    if status.phase.is_final() {
        status.finished_at = Some(steward_sdk::time::rfc3339(now));
    }
    Ok(finish(prev.phase, status, calls, requeue))
}

/// What a run starts from.
struct Started {
    /// The Workflow's spec as JSON, kept in the status.
    snapshot: Value,
    /// Its parsed form.
    spec: WorkflowSpec,
    /// The args, defaults applied.
    input: Map<String, Value>,
    /// The Workflow's generation.
    generation: u64,
}

/// Reads the Workflow and checks it and the args: what the run starts from, or why it waits
/// (`Ok(Err(message))`); args that do not fit are field errors of the run.
fn start(ctx: &Context, obj: &Object<WorkflowRunSpec, WorkflowRunStatus>) -> Result<Result<Started, String>, Error> {
    let name = &obj.spec.workflow;
    let Some(raw) = ctx.get(WORKFLOW_KIND, &obj.namespace, name) else {
        return Ok(Err(format!(
            "Workflow {name:?} not found in namespace {:?}; the run starts when it exists",
            obj.namespace
        )));
    };
    let spec: WorkflowSpec = match raw.spec_as() {
        Ok(spec) => spec,
        Err(e) => return Ok(Err(format!("Workflow {name:?} does not parse ({e}); the run starts when it is fixed"))),
    };
    let errors = workflow::validate::validate(&spec);
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Ok(Err(format!("Workflow {name:?} is invalid ({}); the run starts when it is fixed", list.join("; "))));
    }
    let input = args::resolve(&spec.args, &obj.spec.args, name).map_err(Error::Invalid)?;
    let snapshot = serde_json::from_str(&raw.spec).map_err(|e| Error::retry(format!("Workflow {name:?}: {e}")))?;
    Ok(Ok(Started { snapshot, spec, input, generation: raw.generation }))
}

/// Marks every step still pending or running as `state`, saying why.
fn stop_in_flight(status: &mut WorkflowRunStatus, state: StepState, why: &str) {
    for r in &mut status.steps {
        if matches!(r.state, StepState::Pending | StepState::Running) {
            r.state = state;
            if r.call_id.is_some() {
                r.error = Some(why.to_string());
            }
        }
    }
}

fn succeeded_message(status: &WorkflowRunStatus) -> String {
    let calls: Vec<_> = status.steps.iter().filter(|r| r.call_id.is_some()).collect();
    let count = |s: StepState| calls.iter().filter(|r| r.state == s).count();
    let (ok, skipped, failed) = (count(StepState::Succeeded), count(StepState::Skipped), count(StepState::Failed));
    let mut msg = format!("completed: {ok} succeeded");
    if skipped > 0 {
        msg.push_str(&format!(", {skipped} skipped"));
    }
    if failed > 0 {
        msg.push_str(&format!(", {failed} failed and allowed to"));
    }
    msg
}

/// The outcome of `status`: conditions `Complete` and `Succeeded`, an event when the phase
/// changed from `prev`, and the calls (the whole wanted set).
fn finish(
    prev: RunPhase,
    status: WorkflowRunStatus,
    calls: Vec<CallRequest>,
    requeue: Option<Duration>,
) -> Outcome<WorkflowRunStatus> {
    let phase = status.phase;
    // A run that failed because a policy refused one of its steps says so.
    let denied = phase == RunPhase::Failed
        && status.steps.iter().any(|s| s.reason.as_deref() == Some(TOOL_DENIED) && !s.allow_failure);
    let reason = if denied { TOOL_DENIED } else { phase.as_str() };
    let mut status = status;
    status.current_step = match phase {
        RunPhase::Running => status.steps.iter().find(|s| s.state == StepState::Running).map(|s| s.id.clone()),
        _ => None,
    };
    // Ready is what every list shows: True once the run succeeded, False once it failed or was
    // cancelled, Unknown while it has not ended.
    let mut ready = Condition::new("Ready", phase == RunPhase::Succeeded, reason, &status.message);
    if !phase.is_final() {
        ready.status = steward_sdk::ConditionStatus::Unknown;
    }
    let mut out = Outcome::status(status.clone())
        .condition(ready)
        .condition(Condition::new("Complete", phase.is_final(), reason, &status.message))
        .condition(Condition::new("Succeeded", phase == RunPhase::Succeeded, reason, &status.message))
        .with_calls(calls);
    if let Some(after) = requeue {
        out = out.requeue_after(after);
    }
    if phase != prev {
        let event = match phase {
            RunPhase::Pending => None,
            RunPhase::Running => Some((EventType::Normal, "Started")),
            RunPhase::Succeeded => Some((EventType::Normal, "Succeeded")),
            RunPhase::Failed => Some((EventType::Warning, "Failed")),
            RunPhase::Cancelled => Some((EventType::Normal, "Cancelled")),
        };
        if let Some((type_, reason)) = event {
            let message =
                if phase == RunPhase::Running { "the run started".to_string() } else { status.message.clone() };
            out = out.event(type_, reason, message);
        }
    }
    out
}
