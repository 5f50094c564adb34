//! The `workflowrun` plugin of Steward: kind `WorkflowRun`, one run of a Workflow, step by step,
//! through tool calls the host makes (capability `tools`).
//!
//! A run is a pure state machine. Each reconcile replays the Workflow from the top over the
//! call records the host holds for the run, stops where a call has not ended, and answers
//! with the whole set of calls it wants now; the host makes the new ones, leaves the others
//! alone, cancels those no longer listed, and reconciles the run again when a call ends.
//! Semantics are muster's: Go-template args over `.input`, `.results`, `.vars`; `forEach`
//! (sequential, `as`, `.vars.<as>_index`, results also as `.results.<id>_<index>`);
//! `parallel` groups (all calls at once, results merged in order); conditions (`template`,
//! `tool`, `fromStep` with `expect`/`expectNot`); `allowFailure`; `onFailure` (run in order,
//! best effort, after a step that does not allow failure fails; the run then fails); `output`.
//!
//! # Status
//!
//! - `phase`: `Pending` (the Workflow is missing or invalid; the message says which), `Running`,
//!   `Succeeded`, `Failed` (the message names the step and its error, or the timeout),
//!   `Cancelled` (`spec.cancel: true`, or the run was deleted).
//! - `workflowGeneration`, `workflow`, `args`: the snapshot taken when the run started: the
//!   Workflow's generation and spec, and the args with defaults applied. The run follows the
//!   snapshot; a later change of the Workflow (or of the run's `workflow`/`args`) does not
//!   change a started run.
//! - `startedAt`, `finishedAt` (RFC 3339), `message`.
//! - `steps`: one record per step reached, in order: `id`, `state` (`Pending`, `Running`,
//!   `Succeeded`, `Failed`, `Skipped`, `Cancelled`), `tool`, `callId`, `attempts`,
//!   `startedAt`, `finishedAt`, `arguments` (rendered), `result` (as templates read it),
//!   `error`, `reason` (`ToolDenied`), `allowFailure`, `condition` (`source`, `holds`, `result`),
//!   `truncated`, `note`.
//!   A `forEach` or `parallel` step has a record of its own before its sub-steps'.
//! - `output` (when the run succeeded): the Workflow's `output` template rendered over
//!   `.input`, `.results`, `.vars`; without one, muster's default answer less its
//!   bookkeeping: `steps` maps the record id of each step marked `output: true` (or the
//!   deprecated `store: true`) to its result, and when the last step is a tool step not
//!   so marked, the fields of its object result are merged in at the top.
//! - conditions `Complete` (True once the run ended) and `Succeeded` (True once it succeeded),
//!   both with the phase as reason and the message (`ToolDenied` instead of `Failed` when a
//!   step refused by a tool policy failed the run).
//!
//! # Tool policies
//!
//! Before asking for a call the host holds no record of (a step's tool or a `tool` condition),
//! the run reads the `EffectiveToolPolicy` of the MCPServer that serves the tool (named like the
//! server, in its namespace; see [`policy`]). A denied tool is never asked for: the step ends
//! `Failed` with `reason: ToolDenied` and an error naming the tool, the EffectiveToolPolicy and
//! its policies (a denied condition fails its step the same way), and the run fails unless the
//! step allows failure. The refusal is durable: a replay keeps the step's record even when the
//! policy changes later. Without an EffectiveToolPolicy every tool is called, as before. A call
//! already asked for is not checked again.
//!
//! Step record ids: `deploy` (a top-level step), `each[1].one` (sub-step `one` of loop
//! `each`, iteration 1), `both.a` (sub-step `a` of parallel group `both`), `onFailure.alert`.
//!
//! # Call ids
//!
//! Fixed by the step structure, so a replay asks for the same ids and a call is not made
//! twice (the host holds its record, or else the status does; see below): `steps/<id>` (a
//! top-level tool step), `steps/<id>/<i>/<sub>` (a loop's sub-step in iteration `i`),
//! `steps/<id>/<sub>` (a parallel sub-step), `onFailure/<id>`;
//! a `tool` condition is the step's call id followed by `:condition` (`steps/deploy:condition`),
//! which no step id can produce. Ids stay far below the host's 253 bytes (ids are at most 63
//! characters each).
//!
//! # When the host no longer holds the calls
//!
//! The status is a durable record of the calls too. In Kubernetes mode the host keeps call
//! records in the replica's local store, which is empty on a new leader after a failover,
//! while the run's status (in the cluster) still has every step record. A call the host holds
//! no record of, whose step record in the last status (same `callId`) ended (`Succeeded`,
//! `Failed`, `Skipped`, `Cancelled`), is not asked for again: the replay keeps that record as
//! it was and reads its outcome from it (`result` as templates read it, `error`; a failure
//! allowed or not as it was). A `tool` condition whose call the host holds no record of is
//! decided as the step record's `condition` says (`holds`). A call recorded as `Pending` or
//! `Running` is asked for again, so it may run twice: calls are made at least once. The host's
//! record wins whenever it has one. A step that failed before any call (a template or
//! condition error) is replayed, which finds the error again. What the replay reads from the
//! status is what the status kept: a result cut to its size limit (below) reads cut.
//!
//! # Results
//!
//! `.results.<id>` of a step is the first text content of the tool's answer parsed as JSON,
//! or the text itself when it is not JSON (without text content: `structuredContent`, else
//! null). A failed step reads as `{"success": false, "isError": true, "error": "..."}`.
//!
//! # Size limits
//!
//! Each recorded value of a step (arguments, result, error, condition result) is at most
//! 16 KiB of JSON text ([`limit::STEP_VALUE_LIMIT`]) and `output` at most 64 KiB
//! ([`limit::OUTPUT_LIMIT`]): a larger value is replaced by the first bytes of its JSON text
//! as a string, with `truncated: true` and a `note` giving its full size. Templates always
//! read the full results the host holds (which the host may itself have cut; the note says so).
//!
//! The status's `steps` have a budget of 512 KiB of JSON ([`limit::STEPS_BUDGET`]), for
//! Kubernetes (about 1.5 MB per object) and the cost of each reconcile. Past it, the
//! `arguments`, `result` and condition `result` of the oldest ended records are dropped, in
//! order, until it fits, each such record marked `truncated: true` with the note
//! `value dropped: the run's status is over its 512 KiB budget`; ids, states, tools, call
//! ids, attempts, times, errors and condition decisions stay. Kept whole: records still
//! pending or running, and the values a replay from the status may still read: for each key
//! of `.results` (`one`, `one_3`) that a template of the Workflow or a `fromStep` names, the
//! record whose value the key holds now (for a loop's sub-step, its last iteration), all of
//! them when a template reads `.results` whole (`{{ .results }}`, `index .results ...`), and,
//! without an `output` template, the steps marked `output` and the last step. What stays of a
//! record takes about 250 bytes, so the budget holds for a loop of about 2,000 iterations and
//! a longer loop (or kept values over the budget) goes past it.

mod args;
mod engine;
pub mod limit;
pub mod policy;
mod reconcile;
mod render;
mod results;
mod spec;
mod status;

use steward_sdk::prelude::*;

pub use spec::WorkflowRunSpec;
pub use status::{ConditionRecord, RunPhase, StepRecord, StepState, WorkflowRunStatus};

/// The `WorkflowRun` kind (`steward.dev/v1alpha1`, plural `workflowruns`, namespaced).
pub struct WorkflowRun;

impl Kind for WorkflowRun {
    type Spec = WorkflowRunSpec;
    type Status = WorkflowRunStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "WorkflowRun";
    const PLURAL: &'static str = "workflowruns";

    fn columns() -> Vec<steward_sdk::PrinterColumn> {
        vec![
            steward_sdk::PrinterColumn::new("Run", ".status.phase", steward_sdk::ColumnType::String)
                .description("The run's own phase: Pending, Running, Succeeded, Failed or Cancelled"),
            steward_sdk::PrinterColumn::new("Step", ".status.currentStep", steward_sdk::ColumnType::String)
                .description("The step running now"),
            steward_sdk::PrinterColumn::new("Workflow", ".spec.workflow", steward_sdk::ColumnType::String)
                .description("The Workflow it runs")
                .priority(1),
            steward_sdk::PrinterColumn::new("Started", ".status.startedAt", steward_sdk::ColumnType::Date)
                .description("When the run started"),
        ]
    }

    fn validate(obj: &Object<WorkflowRunSpec, WorkflowRunStatus>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if obj.spec.workflow.trim().is_empty() {
            errors.push(FieldError::new("spec.workflow", "must name a Workflow in the run's namespace"));
        }
        if let Some(Err(e)) = obj.spec.timeout.as_deref().map(steward_sdk::time::parse_duration) {
            errors.push(FieldError::new("spec.timeout", e));
        }
        errors
    }

    /// Reads the Workflow only until the run started (the host re-queues the run when it changes).
    fn reconcile(
        ctx: &Context,
        obj: &Object<WorkflowRunSpec, WorkflowRunStatus>,
    ) -> Result<Outcome<WorkflowRunStatus>, Error> {
        reconcile::outcome(ctx, obj, reconcile::Mode::Reconcile, steward_sdk::time::now_secs())
    }

    /// Cancels the calls in flight; a run that had not ended reports `Cancelled`.
    fn finalize(
        ctx: &Context,
        obj: &Object<WorkflowRunSpec, WorkflowRunStatus>,
    ) -> Result<Outcome<WorkflowRunStatus>, Error> {
        reconcile::outcome(ctx, obj, reconcile::Mode::Finalize, steward_sdk::time::now_secs())
    }
}

steward_sdk::export_plugin!(
    name: "workflowrun",
    version: env!("CARGO_PKG_VERSION"),
    capabilities: ["tools"],
    kinds: [WorkflowRun],
);

#[cfg(test)]
mod tests;
