//! The WorkflowRun status: the run's phase, its snapshot of the Workflow, and one record per step.

use std::collections::BTreeMap;

use serde_json::Value;
use steward_sdk::prelude::*;

/// Where a run stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunPhase {
    /// Not started: the Workflow is missing or invalid (see the message).
    #[default]
    Pending,
    /// Steps are being run (or, after a failure, the `onFailure` steps).
    Running,
    /// Every step succeeded, was skipped or was allowed to fail.
    Succeeded,
    /// A step that does not allow failure failed (after `onFailure` ran), the output template
    /// failed, or the run timed out.
    Failed,
    /// Cancelled through `spec.cancel` or by deleting the run.
    Cancelled,
}

impl RunPhase {
    /// Whether the run has ended: it will not change again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// The phase's name, as the status shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
        }
    }
}

/// Where one step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepState {
    /// Reached; its call (or its condition's call) is asked for and not started yet.
    Pending,
    /// Its call is under way (for a `forEach` or `parallel` step: some of its sub-steps are).
    Running,
    /// Its call succeeded (a group: all its sub-steps ended without stopping the run).
    Succeeded,
    /// Its call failed: the tool answered with `isError`, the host gave up, or it was cancelled.
    Failed,
    /// Its condition did not hold, so it did not run.
    Skipped,
    /// The run was cancelled or timed out while the step was pending or running.
    Cancelled,
}

/// What was recorded of a step's condition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRecord {
    /// What decided: `template`, `fromStep:<id>`, or the condition's tool.
    pub source: String,
    /// Whether it held; absent while the condition's call is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds: Option<bool>,
    /// What the check looked at: the rendered template, the referenced step's result, or the
    /// condition tool's parsed result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// What the run recorded of one step, sub-step or `onFailure` step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// Where the step is: `deploy`, `each[1].one` (iteration 1 of loop `each`), `both.a`
    /// (sub-step `a` of group `both`), `onFailure.alert`.
    pub id: String,
    /// Where it stands.
    pub state: StepState,
    /// The tool called; absent for a `forEach` or `parallel` step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The id of the step's tool call among the run's calls (see the crate doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Attempts the host started for the call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// RFC 3339 time the call's first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339 time the call ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The call's arguments, templates rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The result as later templates read it (`.results.<id>`): the tool's text answer parsed
    /// as JSON when it is JSON, else the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why the step failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// CamelCase reason of a step refused before any call: `ToolDenied` when the tool's
    /// EffectiveToolPolicy denies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the step may fail without failing the run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_failure: bool,
    /// What decided whether the step runs, when it has a condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionRecord>,
    /// Whether a recorded value was cut to the size limit (by this plugin or by the host).
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// What was cut, and how big it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl StepRecord {
    /// A record of step `id` in `state`, with nothing else known yet.
    pub fn new(id: impl Into<String>, state: StepState) -> Self {
        Self {
            id: id.into(),
            state,
            tool: None,
            call_id: None,
            attempts: 0,
            started_at: None,
            finished_at: None,
            arguments: None,
            result: None,
            error: None,
            reason: None,
            allow_failure: false,
            condition: None,
            truncated: false,
            note: None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The status a WorkflowRun reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRunStatus {
    /// Where the run stands.
    pub phase: RunPhase,
    /// A sentence for people: what the run waits for, or how it ended.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The generation of the Workflow when the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_generation: Option<u64>,
    /// The Workflow's spec as it was when the run started; the run follows this snapshot,
    /// never the live Workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<Value>,
    /// The args the run started with: the spec's, completed with the Workflow's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<BTreeMap<String, Value>>,
    /// RFC 3339 time the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339 time the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// One record per step reached so far, in the order they were reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
    /// What the run returns, once it succeeded: the Workflow's `output` template rendered, or
    /// else the results of the steps marked `output` (see the crate doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Whether `output` was cut to its size limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub output_truncated: bool,
    /// The step running now (the first, when several run), while the run is Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
}
