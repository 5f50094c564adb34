//! The run as a pure function: (Workflow snapshot, args, the host's call records) → step
//! records, the calls wanted now, and whether and how the run ended.
//!
//! It replays the workflow from the top on every reconcile, as muster's executor runs it, with
//! one difference: where muster waits for a tool call, this stops at a call that has not ended
//! and asks for it. Since each call's id is fixed by the step structure and an ended call's
//! record never changes, the replay is deterministic and reaches the same point again.
//! An ended call the host no longer holds (its store was lost) is read from the step record
//! of the run's last status instead, which is as final: the same inputs (Workflow, args, call
//! records, last status) give the same calls and the same status.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use steward_sdk::{CallRecord, CallRequest, CallState};
use workflow::{DEFAULT_LOOP_VAR, Expectation, ForEach, Step, StepCondition, SubStep, WorkflowSpec};

use crate::limit::{self, STEP_VALUE_LIMIT, STEPS_BUDGET, STEPS_BUDGET_NOTE};
use crate::policy::{Gate, TOOL_DENIED};
use crate::render;
use crate::results::{self, Ended};
use crate::status::{ConditionRecord, StepRecord, StepState};

/// How a replay ended, when it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Every step succeeded, was skipped or was allowed to fail, and the output rendered.
    Succeeded,
    /// A step failed (after `onFailure` ran), or the output template failed: why.
    Failed(String),
}

/// What a replay found.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// One record per step reached, in the order reached, values cut to the size limit, and
    /// dropped from the oldest ended records past the budget ([`STEPS_BUDGET`]).
    pub steps: Vec<StepRecord>,
    /// The calls the run wants now: every call reached that has not ended (new or in flight).
    pub calls: Vec<CallRequest>,
    /// `None` while the run goes on.
    pub end: Option<End>,
    /// What the run returns, once it succeeded.
    pub output: Option<Value>,
    /// What the run waits for, while it goes on.
    pub message: String,
}

/// Replays `spec` (whose JSON form is `source`) with `input` (the resolved args) over the
/// host's `calls` and, for a call the host holds no record of, over `previous`, the step
/// records of the run's last status (see [`Run::recorded`]). `gate` decides whether a call the
/// host holds no record of may be asked for: a refused step fails with reason `ToolDenied`
/// (durably: its record in the status keeps it failed), a refused `tool` condition fails its step.
pub fn plan(
    spec: &WorkflowSpec,
    source: &Value,
    input: &Map<String, Value>,
    calls: &[CallRecord],
    previous: &[StepRecord],
    gate: &dyn Gate,
) -> Plan {
    let mut run = Run {
        input,
        gate,
        calls: calls.iter().map(|c| (c.id.as_str(), c)).collect(),
        recorded: previous
            .iter()
            .filter(|r| !matches!(r.state, StepState::Pending | StepState::Running))
            .filter_map(|r| Some((r.call_id.as_deref()?, r)))
            .collect(),
        decided: previous
            .iter()
            .filter_map(|r| {
                let c = r.condition.as_ref().filter(|c| c.holds.is_some())?;
                let id = match &r.call_id {
                    Some(call) => format!("{call}:condition"),
                    // A `forEach` or `parallel` step (always a top-level one) has no call of its own.
                    None => format!("steps/{}:condition", r.id),
                };
                Some((id, c))
            })
            .collect(),
        records: Vec::new(),
        wanted: Vec::new(),
        outputs: Map::new(),
        copied: BTreeSet::new(),
        providers: BTreeMap::new(),
        marked: BTreeSet::new(),
    };
    let (end, output, message) = run.all(spec);
    let keep = run.needed(spec, source);
    let copied = std::mem::take(&mut run.copied);
    let mut steps: Vec<StepRecord> = run
        .records
        .into_iter()
        .enumerate()
        // A record taken from the status was cut already; cutting its cut values again would
        // change them (a cut value is a string whose JSON text is over the limit again).
        .map(|(i, r)| if copied.contains(&i) { r } else { cut_record(r) })
        .collect();
    fit_budget(&mut steps, &keep, STEPS_BUDGET);
    Plan { steps, calls: run.wanted, end, output, message }
}

/// What a step did to the flow of the run.
enum Flow {
    /// Done (succeeded, skipped or allowed to fail): go on.
    Continue,
    /// A call it needs has not ended: the run waits here.
    Blocked,
    /// The run must stop.
    Stop(Stop),
}

/// Why the run stops.
struct Stop {
    message: String,
    /// An error of the workflow itself (a template that fails, a condition that cannot be
    /// evaluated), which muster does not let `allowFailure` of an enclosing group absorb.
    fatal: bool,
}

/// What muster remembers of a finished step, for `fromStep` conditions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Meta {
    Completed,
    Failed,
    Skipped,
}

/// What steps can read: results so far, the loop variables, and which steps finished how.
#[derive(Clone, Default)]
struct Scope {
    results: Map<String, Value>,
    vars: Map<String, Value>,
    meta: Vec<(String, Meta)>,
}

/// The common shape of a tool step: a plain step, a sub-step or an `onFailure` step.
struct ToolStep<'s> {
    id: &'s str,
    tool: &'s str,
    args: Option<&'s BTreeMap<String, Value>>,
    condition: Option<&'s StepCondition>,
    allow_failure: bool,
    output: bool,
}

impl<'s> ToolStep<'s> {
    fn sub(s: &'s SubStep) -> Self {
        Self {
            id: &s.id,
            tool: &s.tool,
            args: s.args.as_ref(),
            condition: s.condition.as_ref(),
            allow_failure: s.allow_failure,
            output: s.output_enabled(),
        }
    }
}

/// How a condition came out.
enum Cond {
    Blocked(ConditionRecord),
    Error(String),
    /// Its tool call is refused by a policy: why.
    Denied(String),
    Decided(bool, ConditionRecord),
}

struct Run<'a> {
    input: &'a Map<String, Value>,
    /// Whether a new call may be asked for.
    gate: &'a dyn Gate,
    /// The host's call records, by call id. They win over [`Run::recorded`].
    calls: BTreeMap<&'a str, &'a CallRecord>,
    /// The step records of the last status that ended (succeeded, failed, skipped, cancelled),
    /// by call id: the durable outcome of a call the host no longer holds (its records live
    /// in a replica's local store, empty after a failover), so that it is not made again.
    recorded: BTreeMap<&'a str, &'a StepRecord>,
    /// Conditions the last status records as decided, by the call id of a `tool` condition.
    decided: BTreeMap<String, &'a ConditionRecord>,
    records: Vec<StepRecord>,
    wanted: Vec<CallRequest>,
    /// Results of the steps marked `output`, by record id.
    outputs: Map<String, Value>,
    /// Indexes of the records copied from the last status.
    copied: BTreeSet<usize>,
    /// For each key of `.results`, the index of the record whose value it holds now.
    providers: BTreeMap<String, usize>,
    /// Indexes of the records of steps marked `output`.
    marked: BTreeSet<usize>,
}

impl Run<'_> {
    fn data(&self, scope: &Scope) -> Value {
        render::data(self.input, &scope.results, &scope.vars)
    }

    /// The whole workflow: the steps, then `onFailure` after a stop, then the output.
    fn all(&mut self, spec: &WorkflowSpec) -> (Option<End>, Option<Value>, String) {
        let mut scope = Scope::default();
        let mut stop = None;
        for step in &spec.steps {
            match self.step(step, &mut scope) {
                Flow::Continue => {}
                Flow::Blocked => return (None, None, self.waiting("")),
                Flow::Stop(s) => {
                    stop = Some(s);
                    break;
                }
            }
        }
        if let Some(stop) = stop {
            // Best effort, in order, each allowed to fail, as muster runs them.
            for sub in &spec.on_failure {
                let view = ToolStep { allow_failure: true, ..ToolStep::sub(sub) };
                let flow =
                    self.tool_step(&view, format!("onFailure/{}", sub.id), format!("onFailure.{}", sub.id), &mut scope);
                if let Flow::Blocked = flow {
                    return (None, None, self.waiting(&format!("{}; running onFailure: ", stop.message)));
                }
            }
            return (Some(End::Failed(stop.message)), None, String::new());
        }
        match &spec.output {
            Some(template) => {
                let doc = Value::Object(template.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
                match render::render_typed_value(&doc, &self.data(&scope), "output") {
                    Ok(out) => (Some(End::Succeeded), Some(out), String::new()),
                    Err(e) => (Some(End::Failed(format!("the output template failed: {e}"))), None, String::new()),
                }
            }
            None => (Some(End::Succeeded), self.default_output(spec, &scope), String::new()),
        }
    }

    /// muster's default answer, less its bookkeeping: the results of the steps marked `output`
    /// under `steps`, and the fields of the last step's object result when that step is a tool
    /// step not marked `output`.
    fn default_output(&self, spec: &WorkflowSpec, scope: &Scope) -> Option<Value> {
        let mut out = Map::new();
        if !self.outputs.is_empty() {
            out.insert("steps".into(), Value::Object(self.outputs.clone()));
        }
        if let Some(last) = spec.steps.last()
            && last.tool.is_some()
            && last.for_each.is_none()
            && last.parallel.is_none()
            && !last.output_enabled()
            && let Some(Value::Object(fields)) = self.last_answer(last, scope)
        {
            out.extend(fields);
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    /// The parsed answer of a plain step's call, when it ran (from the status when the host
    /// no longer holds the call).
    fn last_answer(&self, step: &Step, scope: &Scope) -> Option<Value> {
        scope.meta.iter().any(|(id, m)| id == &step.id && *m != Meta::Skipped).then_some(())?;
        let id = format!("steps/{}", step.id);
        match self.calls.get(id.as_str()) {
            Some(call) => call.result.as_ref().map(results::parse),
            None => self.recorded.get(id.as_str())?.result.clone(),
        }
    }

    /// The records whose values a replay may still read: those `.results` holds now under a key
    /// the workflow's templates (or a `fromStep`) name, all of them when a template reads
    /// `.results` whole, and, for the default output, the marked steps and the last step.
    fn needed(&mut self, spec: &WorkflowSpec, source: &Value) -> BTreeSet<usize> {
        let mut keep = BTreeSet::new();
        match referenced_results(source) {
            None => keep.extend(self.providers.values().copied()),
            Some(keys) => keep.extend(keys.iter().filter_map(|k| self.providers.get(k).copied())),
        }
        if spec.output.is_none() {
            keep.append(&mut self.marked);
            if let Some(last) = spec.steps.last() {
                let id = format!("steps/{}", last.id);
                keep.extend(self.records.iter().position(|r| r.call_id.as_deref() == Some(id.as_str())));
            }
        }
        keep
    }

    /// The message of a run that waits: `prefix` then the steps it waits for.
    fn waiting(&self, prefix: &str) -> String {
        let ids: Vec<&str> = self
            .records
            .iter()
            .filter(|r| r.call_id.is_some() && matches!(r.state, StepState::Pending | StepState::Running))
            .map(|r| r.id.as_str())
            .collect();
        format!("{prefix}waiting for {}", if ids.is_empty() { "steps".to_string() } else { ids.join(", ") })
    }

    fn step(&mut self, step: &Step, scope: &mut Scope) -> Flow {
        if let Some(each) = &step.for_each {
            return self.for_each(step, each, scope);
        }
        if let Some(group) = &step.parallel {
            return self.parallel(step, group, scope);
        }
        let Some(tool) = step.tool.as_deref() else {
            let msg = format!("step {:?} has none of tool, forEach or parallel", step.id);
            self.records.push(StepRecord { error: Some(msg.clone()), ..StepRecord::new(&step.id, StepState::Failed) });
            return Flow::Stop(Stop { message: msg, fatal: true });
        };
        let view = ToolStep {
            id: &step.id,
            tool,
            args: step.args.as_ref(),
            condition: step.condition.as_ref(),
            allow_failure: step.allow_failure,
            output: step.output_enabled(),
        };
        self.tool_step(&view, format!("steps/{}", step.id), step.id.clone(), scope)
    }

    /// Pushes the record of a `forEach` or `parallel` step and evaluates its condition:
    /// `Some(flow)` when the group does not run now (skipped, waiting, or failed).
    fn open_group(&mut self, step: &Step, scope: &mut Scope) -> (usize, Option<Flow>) {
        let at = self.records.len();
        self.records
            .push(StepRecord { allow_failure: step.allow_failure, ..StepRecord::new(&step.id, StepState::Running) });
        let Some(cond) = &step.condition else { return (at, None) };
        let flow = match self.condition(cond, &format!("steps/{}", step.id), scope) {
            Cond::Blocked(c) => {
                self.records[at].condition = Some(c);
                self.records[at].state = StepState::Pending;
                Some(Flow::Blocked)
            }
            Cond::Error(e) => Some(self.fail_record(at, format!("step {:?}: {e}", step.id), true)),
            Cond::Denied(why) => {
                self.records[at].reason = Some(TOOL_DENIED.to_string());
                Some(self.fail_record(at, format!("step {:?}: condition: {why}", step.id), true))
            }
            Cond::Decided(holds, c) => {
                self.records[at].condition = Some(c);
                (!holds).then(|| {
                    self.records[at].state = StepState::Skipped;
                    scope.meta.push((step.id.clone(), Meta::Skipped));
                    Flow::Continue
                })
            }
        };
        (at, flow)
    }

    fn fail_record(&mut self, at: usize, message: String, fatal: bool) -> Flow {
        self.records[at].state = StepState::Failed;
        self.records[at].error = Some(message.clone());
        Flow::Stop(Stop { message, fatal })
    }

    /// Closes a group's record after its body: a failure is absorbed when the group allows it.
    fn close_group(&mut self, at: usize, flow: Flow, allow_failure: bool) -> Flow {
        match flow {
            Flow::Continue => {
                self.records[at].state = StepState::Succeeded;
                Flow::Continue
            }
            Flow::Blocked => Flow::Blocked,
            Flow::Stop(s) => {
                let absorbed = allow_failure && !s.fatal;
                let flow = self.fail_record(at, s.message, s.fatal);
                if absorbed { Flow::Continue } else { flow }
            }
        }
    }

    /// A loop: its body once per item, sequentially, the item as `.vars.<as>` and its index as
    /// `.vars.<as>_index`; each sub-step's result also as `.results.<id>_<index>`.
    fn for_each(&mut self, step: &Step, each: &ForEach, scope: &mut Scope) -> Flow {
        let (at, early) = self.open_group(step, scope);
        if let Some(flow) = early {
            return flow;
        }
        let items = match render::resolve(&each.items, &self.data(scope)) {
            Ok(Value::Array(items)) => items,
            Ok(Value::Null) => {
                return self.fail_record(
                    at,
                    format!("step {:?}: forEach items {:?} resolved to null", step.id, each.items),
                    true,
                );
            }
            Ok(other) => {
                let msg = format!(
                    "step {:?}: forEach items {:?} resolved to {}, not a list",
                    step.id,
                    each.items,
                    kind(&other)
                );
                return self.fail_record(at, msg, true);
            }
            Err(e) => return self.fail_record(at, format!("step {:?}: forEach items: {e}", step.id), true),
        };
        let var = if each.as_.is_empty() { DEFAULT_LOOP_VAR } else { each.as_.as_str() };
        let index_var = format!("{var}_index");
        let saved = (scope.vars.get(var).cloned(), scope.vars.get(&index_var).cloned());
        let mut flow = Flow::Continue;
        'items: for (i, item) in items.into_iter().enumerate() {
            scope.vars.insert(var.to_string(), item);
            scope.vars.insert(index_var.clone(), json!(i));
            for sub in &each.steps {
                let call_id = format!("steps/{}/{i}/{}", step.id, sub.id);
                let record_id = format!("{}[{i}].{}", step.id, sub.id);
                match self.tool_step(&ToolStep::sub(sub), call_id, record_id, scope) {
                    Flow::Continue => {
                        if let Some(v) = scope.results.get(&sub.id).cloned() {
                            let key = format!("{}_{i}", sub.id);
                            if let Some(&from) = self.providers.get(&sub.id) {
                                self.providers.insert(key.clone(), from);
                            }
                            scope.results.insert(key, v);
                        }
                    }
                    other => {
                        flow = other;
                        break 'items;
                    }
                }
            }
        }
        restore(&mut scope.vars, var, saved.0);
        restore(&mut scope.vars, &index_var, saved.1);
        self.close_group(at, flow, step.allow_failure)
    }

    /// A group: every sub-step at once, each over the results before the group (not each
    /// other's); the group ends when all have, and their results are merged in order.
    fn parallel(&mut self, step: &Step, group: &[SubStep], scope: &mut Scope) -> Flow {
        let (at, early) = self.open_group(step, scope);
        if let Some(flow) = early {
            return flow;
        }
        let mut ran = Vec::with_capacity(group.len());
        for sub in group {
            let mut local = Scope { results: scope.results.clone(), vars: scope.vars.clone(), meta: Vec::new() };
            let call_id = format!("steps/{}/{}", step.id, sub.id);
            let flow = self.tool_step(&ToolStep::sub(sub), call_id, format!("{}.{}", step.id, sub.id), &mut local);
            ran.push((sub, local, flow));
        }
        if ran.iter().any(|(_, _, f)| matches!(f, Flow::Blocked)) {
            return Flow::Blocked;
        }
        let mut fatal = None;
        let mut failed = None;
        for (sub, local, flow) in ran {
            if let Some(v) = local.results.get(&sub.id) {
                scope.results.insert(sub.id.clone(), v.clone());
            }
            scope.meta.extend(local.meta);
            if let Flow::Stop(s) = flow {
                let slot = if s.fatal { &mut fatal } else { &mut failed };
                slot.get_or_insert(s);
            }
        }
        let flow = fatal.or(failed).map_or(Flow::Continue, Flow::Stop);
        self.close_group(at, flow, step.allow_failure)
    }

    /// One tool call: its condition, its arguments, its call, and what its end means.
    fn tool_step(&mut self, s: &ToolStep, call_id: String, record_id: String, scope: &mut Scope) -> Flow {
        if !self.calls.contains_key(call_id.as_str())
            && let Some(prev) = self.recorded.get(call_id.as_str()).copied()
            && self.durable(prev, &call_id, &record_id)
        {
            return self.replay_recorded(s, prev, record_id, scope);
        }
        let at = self.records.len();
        self.records.push(StepRecord {
            tool: Some(s.tool.to_string()),
            call_id: Some(call_id.clone()),
            allow_failure: s.allow_failure,
            ..StepRecord::new(&record_id, StepState::Pending)
        });
        if let Some(cond) = s.condition {
            match self.condition(cond, &call_id, scope) {
                Cond::Blocked(c) => {
                    self.records[at].condition = Some(c);
                    return Flow::Blocked;
                }
                Cond::Error(e) => return self.fail_record(at, format!("step {record_id:?}: {e}"), true),
                Cond::Denied(why) => {
                    self.records[at].reason = Some(TOOL_DENIED.to_string());
                    return self.fail_record(at, format!("step {record_id:?}: condition: {why}"), true);
                }
                Cond::Decided(holds, c) => {
                    self.records[at].condition = Some(c);
                    if !holds {
                        self.records[at].state = StepState::Skipped;
                        scope.meta.push((s.id.to_string(), Meta::Skipped));
                        return Flow::Continue;
                    }
                }
            }
        }
        let args = match self.arguments(s.args, scope) {
            Ok(args) => args,
            Err(e) => return self.fail_record(at, format!("step {record_id:?}: arguments: {e}"), true),
        };
        self.records[at].arguments = Some(args.clone());
        let call = self.calls.get(call_id.as_str()).copied();
        if let Some(call) = call {
            let r = &mut self.records[at];
            r.attempts = call.attempts;
            r.started_at = call.started_at.clone();
            r.finished_at = call.finished_at.clone();
            if call.truncated {
                r.truncated = true;
                r.note = Some("the host cut the tool's answer to its size limit".into());
            }
        }
        if call.is_none()
            && let Some(why) = self.gate.denial(s.tool)
        {
            return self.deny(s, at, &record_id, why, scope);
        }
        let Some(ended) = call.and_then(Ended::of) else {
            if call.is_some_and(|c| c.state == CallState::Running) {
                self.records[at].state = StepState::Running;
            }
            self.wanted.push(CallRequest::new(call_id, s.tool, args));
            return Flow::Blocked;
        };
        let (value, error) = match ended {
            Ended::Succeeded(v) => {
                self.records[at].state = StepState::Succeeded;
                self.records[at].result = Some(v.clone());
                scope.meta.push((s.id.to_string(), Meta::Completed));
                self.finish(s, at, scope, v);
                return Flow::Continue;
            }
            Ended::ErrorResult(v, text) => {
                self.records[at].result = Some(v.clone());
                // muster keeps the tool's answer for a step that stops the run, and the failure
                // shape for one allowed to fail.
                (if s.allow_failure { results::failure_value(&text) } else { v }, text)
            }
            Ended::NoResult(text) => (results::failure_value(&text), text),
        };
        self.records[at].state = StepState::Failed;
        self.records[at].error = Some(error.clone());
        scope.meta.push((s.id.to_string(), Meta::Failed));
        self.finish(s, at, scope, value);
        if s.allow_failure {
            Flow::Continue
        } else {
            Flow::Stop(Stop { message: format!("step {record_id:?} failed: {error}"), fatal: false })
        }
    }

    /// A step whose call a policy refuses: failed with reason `ToolDenied` before any call. Its
    /// error does not start with the step's id, so a replay keeps it as recorded
    /// ([`Run::durable`]) even when the policy changes later.
    fn deny(&mut self, s: &ToolStep, at: usize, record_id: &str, why: String, scope: &mut Scope) -> Flow {
        let r = &mut self.records[at];
        r.state = StepState::Failed;
        r.error = Some(why.clone());
        r.reason = Some(TOOL_DENIED.to_string());
        scope.meta.push((s.id.to_string(), Meta::Failed));
        self.finish(s, at, scope, results::failure_value(&why));
        if s.allow_failure {
            Flow::Continue
        } else {
            Flow::Stop(Stop { message: format!("step {record_id:?} failed: {why}"), fatal: false })
        }
    }

    /// Whether `prev`, the last status's record of the ended call `call_id` that the host
    /// holds no record of, tells how the call ended. Not for a step skipped by a `tool`
    /// condition whose call the host holds (the host's record decides), nor for a step that
    /// failed before any call (a template or condition error of the workflow: the replay
    /// finds that error again).
    fn durable(&self, prev: &StepRecord, call_id: &str, record_id: &str) -> bool {
        match prev.state {
            StepState::Skipped => !self.calls.contains_key(format!("{call_id}:condition").as_str()),
            StepState::Failed => {
                let workflow_error = prev.attempts == 0
                    && prev.started_at.is_none()
                    && prev.finished_at.is_none()
                    && prev.error.as_deref().is_some_and(|e| e.starts_with(&format!("step {record_id:?}: ")));
                !workflow_error
            }
            StepState::Succeeded | StepState::Cancelled => true,
            StepState::Pending | StepState::Running => false,
        }
    }

    /// A step whose call ended as the last status records (`prev`): its record is kept as it
    /// was, and its result (as templates read it) and flow are what they were.
    fn replay_recorded(&mut self, s: &ToolStep, prev: &StepRecord, record_id: String, scope: &mut Scope) -> Flow {
        let at = self.records.len();
        self.records.push(StepRecord { id: record_id.clone(), allow_failure: s.allow_failure, ..prev.clone() });
        self.copied.insert(at);
        match prev.state {
            StepState::Skipped => {
                scope.meta.push((s.id.to_string(), Meta::Skipped));
                Flow::Continue
            }
            StepState::Succeeded => {
                scope.meta.push((s.id.to_string(), Meta::Completed));
                self.finish(s, at, scope, prev.result.clone().unwrap_or(Value::Null));
                Flow::Continue
            }
            _ => {
                let error = prev.error.clone().unwrap_or_else(|| "the call failed".to_string());
                // As for a host record: the tool's answer for a step that stops the run, the
                // failure shape for one allowed to fail (or one without an answer).
                let value = match &prev.result {
                    Some(v) if !s.allow_failure => v.clone(),
                    _ => results::failure_value(&error),
                };
                scope.meta.push((s.id.to_string(), Meta::Failed));
                self.finish(s, at, scope, value);
                if s.allow_failure {
                    Flow::Continue
                } else {
                    Flow::Stop(Stop { message: format!("step {record_id:?} failed: {error}"), fatal: false })
                }
            }
        }
    }

    /// Records a step's result (of record `at`) for later templates and, when marked, for the output.
    fn finish(&mut self, s: &ToolStep, at: usize, scope: &mut Scope, value: Value) {
        if s.output {
            self.outputs.insert(self.records[at].id.clone(), value.clone());
            self.marked.insert(at);
        }
        self.providers.insert(s.id.to_string(), at);
        scope.results.insert(s.id.to_string(), value);
    }

    fn arguments(&self, args: Option<&BTreeMap<String, Value>>, scope: &Scope) -> Result<Value, String> {
        let data = self.data(scope);
        let mut out = Map::new();
        for (k, v) in args.into_iter().flatten() {
            out.insert(k.clone(), render::resolve_value(v, &data).map_err(|e| format!("{k}: {e}"))?);
        }
        Ok(Value::Object(out))
    }

    /// Evaluates a condition; a `tool` condition is a call `<call_id>:condition`.
    fn condition(&mut self, cond: &StepCondition, call_id: &str, scope: &Scope) -> Cond {
        let data = self.data(scope);
        if let Some(template) = &cond.template {
            return match render::render_text(template, &data) {
                Ok(text) => {
                    let holds = text == "true";
                    Cond::Decided(
                        holds,
                        ConditionRecord {
                            source: "template".into(),
                            holds: Some(holds),
                            result: Some(Value::String(text)),
                        },
                    )
                }
                Err(e) => Cond::Error(format!("condition: {e}")),
            };
        }
        let (source, success, answer) = if let Some(from) = &cond.from_step {
            let Some(referenced) = from_step(scope, from) else {
                return Cond::Error(format!(
                    "condition fromStep {from:?}: that step has no result (it was skipped or did not run before)"
                ));
            };
            let success = !referenced.get("isError").and_then(Value::as_bool).unwrap_or(false);
            (format!("fromStep:{from}"), success, Some(referenced))
        } else if let Some(tool) = &cond.tool {
            let args = match self.arguments(cond.args.as_ref(), scope) {
                Ok(args) => args,
                Err(e) => return Cond::Error(format!("condition arguments: {e}")),
            };
            let id = format!("{call_id}:condition");
            if !self.calls.contains_key(id.as_str())
                && let Some(recorded) = self.decided.get(&id).filter(|c| c.source == *tool)
                && let Some(holds) = recorded.holds
            {
                // The host no longer holds the condition's call: the status recorded what it decided.
                return Cond::Decided(holds, (*recorded).clone());
            }
            let record = ConditionRecord { source: tool.clone(), holds: None, result: None };
            if !self.calls.contains_key(id.as_str())
                && let Some(why) = self.gate.denial(tool)
            {
                return Cond::Denied(why);
            }
            match self.calls.get(id.as_str()).and_then(|c| Ended::of(c)) {
                None => {
                    self.wanted.push(CallRequest::new(id, tool, args));
                    return Cond::Blocked(record);
                }
                // muster: a condition call that errors makes the condition false.
                Some(Ended::NoResult(e)) => {
                    return Cond::Decided(
                        false,
                        ConditionRecord { holds: Some(false), result: Some(Value::String(e)), ..record },
                    );
                }
                Some(Ended::Succeeded(v)) => (tool.clone(), true, Some(v)),
                Some(Ended::ErrorResult(v, _)) => (tool.clone(), false, Some(v)),
            }
        } else {
            return Cond::Error("condition has none of template, tool or fromStep".into());
        };
        let matches = |e: &Expectation| expectation_matches(e, success, answer.as_ref(), &data);
        let holds = cond.expect.as_ref().is_none_or(matches) && !cond.expect_not.as_ref().is_some_and(matches);
        Cond::Decided(holds, ConditionRecord { source, holds: Some(holds), result: answer })
    }
}

/// What muster's `fromStep` reads: the step's recorded result, else a summary of how it ended;
/// `None` when it was skipped or has not run.
fn from_step(scope: &Scope, id: &str) -> Option<Value> {
    let runs = || scope.meta.iter().filter(|(m, _)| m == id);
    if runs().any(|(_, m)| *m != Meta::Skipped)
        && let Some(v) = scope.results.get(id).filter(|v| !v.is_null())
    {
        return Some(v.clone());
    }
    runs().find_map(|(_, m)| match m {
        Meta::Failed => {
            Some(json!({"error": format!("Step {id} failed"), "success": false, "isError": true, "status": "failed"}))
        }
        Meta::Completed => Some(json!({"success": true, "status": "completed"})),
        Meta::Skipped => None,
    })
}

/// Whether a result looks like `e`: `success` (when given) equals the call's, and each
/// `jsonPath` entry finds its expected value (a path into the answer, or a template over the
/// run's data with the answer as `.result`; the expected value may be a template too).
/// Values of different types compare by their text (`3` equals `"3"`), as muster compares them.
fn expectation_matches(e: &Expectation, success: bool, answer: Option<&Value>, data: &Value) -> bool {
    if e.success.is_some_and(|want| want != success) {
        return false;
    }
    e.json_path.iter().all(|(path, expected)| {
        let Some(answer) = answer else { return false };
        let Ok(expected) = render::resolve_value(expected, data) else { return false };
        let actual = if path.contains("{{") {
            let mut with_result = data.clone();
            if let Value::Object(m) = &mut with_result {
                m.insert("result".into(), answer.clone());
            }
            render::render_typed(path, &with_result).ok()
        } else {
            render::lookup(answer, path).cloned()
        };
        actual.is_some_and(|actual| loose_eq(&actual, &expected))
    })
}

/// Equal as JSON, or equal as text (muster's `%v` comparison of values of different types).
fn loose_eq(a: &Value, b: &Value) -> bool {
    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
                _ => n.to_string(),
            },
            other => other.to_string(),
        }
    }
    a == b || text(a) == text(b)
}

fn restore(vars: &mut Map<String, Value>, key: &str, saved: Option<Value>) {
    match saved {
        Some(v) => vars.insert(key.to_string(), v),
        None => vars.remove(key),
    };
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A record with its arguments, result and error cut to [`STEP_VALUE_LIMIT`], saying so.
fn cut_record(mut r: StepRecord) -> StepRecord {
    let mut notes: Vec<String> = r.note.take().into_iter().collect();
    let from_host = notes.len();
    if let Some(v) = r.arguments.take() {
        let (v, size) = limit::cut(v, STEP_VALUE_LIMIT);
        if let Some(size) = size {
            notes.push(format!("arguments cut: {size} bytes of JSON, over the {STEP_VALUE_LIMIT}-byte limit"));
        }
        r.arguments = Some(v);
    }
    if let Some(v) = r.result.take() {
        let (v, size) = limit::cut(v, STEP_VALUE_LIMIT);
        if let Some(size) = size {
            notes.push(format!("result cut: {size} bytes of JSON, over the {STEP_VALUE_LIMIT}-byte limit"));
        }
        r.result = Some(v);
    }
    if let Some(e) = r.error.take() {
        let (e, size) = limit::cut_text(e, STEP_VALUE_LIMIT);
        if let Some(size) = size {
            notes.push(format!("error cut: {size} bytes, over the {STEP_VALUE_LIMIT}-byte limit"));
        }
        r.error = Some(e);
    }
    if let Some(c) = r.condition.as_mut()
        && let Some(v) = c.result.take()
    {
        let (v, size) = limit::cut(v, STEP_VALUE_LIMIT);
        if let Some(size) = size {
            notes.push(format!("condition result cut: {size} bytes of JSON, over the {STEP_VALUE_LIMIT}-byte limit"));
        }
        c.result = Some(v);
    }
    r.truncated = r.truncated || notes.len() > from_host;
    r.note = (!notes.is_empty()).then(|| notes.join("; "));
    r
}

/// The keys of `.results` (or `.context`) that the templates of `doc` (a Workflow spec as JSON)
/// name, and the steps its `fromStep` conditions name; `None` when a template reads `.results`
/// whole (`{{ .results }}`, `{{ index .results "x" }}`) or cannot be scanned, so that any key may be read.
fn referenced_results(doc: &Value) -> Option<BTreeSet<String>> {
    fn scan(text: &str, keys: &mut BTreeSet<String>) -> bool {
        if !workflow::template::has_template(text) {
            return true;
        }
        let Ok(paths) = workflow::template::scan(text) else { return false };
        for path in paths {
            if matches!(path.first().map(String::as_str), Some("results" | "context")) {
                match path.get(1) {
                    Some(key) => keys.insert(key.clone()),
                    None => return false,
                };
            }
        }
        true
    }
    fn walk(v: &Value, keys: &mut BTreeSet<String>) -> bool {
        match v {
            Value::String(s) => scan(s, keys),
            Value::Array(items) => items.iter().all(|v| walk(v, keys)),
            Value::Object(map) => map.iter().all(|(k, v)| {
                if k == "fromStep"
                    && let Value::String(id) = v
                {
                    keys.insert(id.clone());
                }
                scan(k, keys) && walk(v, keys)
            }),
            _ => true,
        }
    }
    let mut keys = BTreeSet::new();
    walk(doc, &mut keys).then_some(keys)
}

/// Keeps the JSON text of `steps` within `budget` bytes where it can: drops the `arguments`,
/// `result` and condition `result` of the oldest ended records first, never those of records in
/// `keep` (values a replay may still read) nor of records still pending or running; each record
/// cut so says `truncated` and a note. Ids, states, tools, call ids, attempts, times, errors and
/// condition decisions stay. Past the budget when what stays is bigger than it.
fn fit_budget(steps: &mut [StepRecord], keep: &BTreeSet<usize>, budget: usize) {
    let size = |r: &StepRecord| serde_json::to_string(r).map_or(0, |t| t.len());
    // `[` and `]`, and a comma between records.
    let mut total = 2 + steps.len().saturating_sub(1) + steps.iter().map(size).sum::<usize>();
    for (i, r) in steps.iter_mut().enumerate() {
        if total <= budget {
            return;
        }
        let has_value =
            r.arguments.is_some() || r.result.is_some() || r.condition.as_ref().is_some_and(|c| c.result.is_some());
        if keep.contains(&i) || matches!(r.state, StepState::Pending | StepState::Running) || !has_value {
            continue;
        }
        let before = size(r);
        r.arguments = None;
        r.result = None;
        if let Some(c) = r.condition.as_mut() {
            c.result = None;
        }
        r.truncated = true;
        r.note = Some(match r.note.take() {
            Some(n) if !n.is_empty() => format!("{n}; {STEPS_BUDGET_NOTE}"),
            _ => STEPS_BUDGET_NOTE.to_string(),
        });
        total = total + size(r) - before;
    }
}
