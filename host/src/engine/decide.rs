//! The worker's decisions as pure functions: from the record, the object, the reason and the call's outcome to the new record, the next run and the effects.
//!
//! Nothing here reads a clock, a lock or the network: every fact comes in as an argument, so
//! each outcome is a row in the table tests at the bottom of this file.

use std::time::Duration;

use steward_sdk::RawOutcome;

use super::reason::waits_for_change;
use crate::driver::SourceObject;
use crate::model::{FieldWarning, HistoryEntry, Millis, Name, Phase, Reason, StatusRecord};
use crate::plugin::PluginError;
use crate::readiness::Reported;
use crate::sanitize::sanitize;

/// A plugin as far as a decision cares: which one, and which version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginId {
    /// Its name.
    pub name: Name,
    /// Its version.
    pub version: Name,
}

impl PluginId {
    /// The plugin's name and version, shared with it (no text is copied).
    pub fn of(plugin: &crate::plugin::Plugin) -> Self {
        let (name, version) = plugin.names();
        Self { name: name.clone(), version: version.clone() }
    }
}

/// What the worker knows besides the record, the object and the reason.
#[derive(Clone, Debug)]
pub struct Facts {
    /// Now, in milliseconds since the epoch.
    pub now: Millis,
    /// Retries before an erroring object is `Failed` (`queue.max_retries`).
    pub max_retries: u32,
    /// The kind's resync interval; a plugin's `requeue-after` is clamped to it.
    pub resync: Duration,
    /// The plugin that serves the kind now, or why none does.
    pub plugin: Result<PluginId, String>,
    /// The finalizer the mode holds its objects with (Kubernetes mode), named in messages about
    /// objects it cannot let go yet; `None` in filesystem mode.
    pub finalizer: Option<&'static str>,
    /// The record's last status did not reach the mode's status store yet (Kubernetes mode).
    pub status_unwritten: bool,
}

/// When the key runs next, and why.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// Not scheduled: it waits for a change (or there is nothing left to do).
    Idle,
    /// At once, for the reason.
    Now(Reason),
    /// After the delay, for the reason.
    After(Duration, Reason),
    /// After the queue's backoff for one more consecutive failure, as a [`Reason::Retry`]; the
    /// worker sets the record's `next_attempt_time` from the delay the queue picks.
    Backoff,
}

/// One thing the worker does after a decision, in order; holding or releasing the object, or
/// forgetting it, that fails stops the rest and retries the key with backoff (a failed status
/// write retries too, but the rest still applies).
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Reset the key's consecutive-failure count in the queue.
    ForgetFailures,
    /// Make sure the mode holds the object (its finalizer) before the plugin is called.
    EnsureFinalizer,
    /// Persist the record and write it through the driver (status subresource); once written, a
    /// `Synced` object's failure count resets.
    Persist,
    /// Only write the status again through the driver (it did not reach the cluster before).
    RewriteStatus,
    /// Hand what is left of a successful reconcile's answer (what the capability units folded
    /// into it: desired services, tool calls, …) to every unit, which takes its part.
    HandOver(Box<RawOutcome>),
    /// Every unit lets go of what the owner owns through it (it is gone).
    Release,
    /// Record an event about the object (the plugin's own, or one of [`status_events`]): the
    /// host's log, its event journal, and the mode's events (Kubernetes Events).
    Publish {
        /// A warning rather than a normal event.
        warning: bool,
        /// Its reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Let the object go in the mode (remove its finalizer), once it is finalized.
    RemoveFinalizer,
    /// Forget the object: its record, its dependencies, what is scheduled for it.
    Forget,
    /// Queue again every reconcile that read the object.
    NotifyReaders,
    /// Count a reconcile outcome (`success`, `error`, `failed`) for the kind.
    CountResult(&'static str),
    /// Count one more failed call for the kind.
    CountError,
}

/// What to do with one key: the record to keep (`None`: keep none, or leave it as it is when
/// nothing is persisted), when to run next, and the effects.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The new record.
    pub record: Option<StatusRecord>,
    /// When to run next.
    pub schedule: Schedule,
    /// What to do, in order.
    pub effects: Vec<Effect>,
}

impl Decision {
    /// Nothing to do.
    pub fn nothing() -> Self {
        Self { record: None, schedule: Schedule::Idle, effects: Vec::new() }
    }

    fn persist(record: StatusRecord) -> Self {
        Self { record: Some(record), schedule: Schedule::Idle, effects: vec![Effect::Persist] }
    }
}

/// Before a call: either a decision that needs no call, or the call to make.
#[derive(Clone, Debug, PartialEq)]
pub enum Prepared {
    /// No call: apply this.
    Decided(Decision),
    /// Call the plugin with this record (its last status goes into the request), after these effects.
    Call {
        /// The record the call starts from.
        record: StatusRecord,
        /// What to do first: effects that need no record (forget failures, hold the object).
        effects: Vec<Effect>,
    },
}

/// What one call came back with.
#[derive(Debug)]
pub struct CallOutcome {
    /// The plugin (and version) that answered.
    pub ran: PluginId,
    /// When the call started.
    pub started: Millis,
    /// How long it took, in milliseconds.
    pub elapsed_ms: u64,
    /// Its answer.
    pub result: Result<RawOutcome, PluginError>,
    /// The trace it ran in, when traces are exported.
    pub trace_id: Option<String>,
    /// The spec's warnings, found before the call: fields its schema does not know (dropped) and
    /// the plugin's own. A finalize's are ignored: the record keeps the warnings it had.
    pub warnings: Vec<FieldWarning>,
    /// What the plugin's warnings were asked for (see [`StatusRecord::plugin_warnings_for`]);
    /// `None` when they could not be read, so they are asked again next time.
    pub warnings_for: Option<String>,
}

/// Longest event message about warnings; the rest is cut (the status holds them all).
const MAX_WARNING_EVENT: usize = 1024;

/// The event that says the object's warnings changed: a warning naming them, or a normal event
/// when the last one went; `None` when they did not change.
fn warnings_event(before: &[FieldWarning], after: &[FieldWarning]) -> Option<Effect> {
    if before == after {
        return None;
    }
    if after.is_empty() {
        return Some(Effect::Publish {
            warning: false,
            reason: "WarningsCleared".into(),
            message: "the spec has no warnings any more".into(),
        });
    }
    let listed: Vec<String> = after.iter().map(ToString::to_string).collect();
    let mut message = format!("{} warning(s): {}", after.len(), listed.join("; "));
    if message.len() > MAX_WARNING_EVENT {
        let mut end = MAX_WARNING_EVENT;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    Some(Effect::Publish { warning: true, reason: "SpecWarnings".into(), message })
}

/// Whether an object in `phase` needs a person: the host could not reconcile it (or cannot yet).
fn failing(phase: Phase) -> bool {
    matches!(phase, Phase::Error | Phase::Failed | Phase::Pending)
}

/// The events that tell people how an object's state changed from what it last told them
/// (`before`: the durable record, or the object's last status in the cluster; `None` when it
/// told nothing yet) to `after`. Equal states record nothing, so a resync, a restart or a new
/// leader that finds the state it left records nothing either.
///
/// - The `Ready` condition turned `False` (or `Unknown`), or kept that status with another
///   reason: a Warning with the condition's reason and message. It turned `True` (or changed its
///   reason while `True`): a Normal event, the same way.
/// - The phase turned `Error`, `Failed` or `Pending`: a Warning named after the phase, with the
///   error. It turned `Synced` after one of those: a Normal `Synced`. A first `Synced` says so
///   only for an object without a `Ready` condition (the condition's event speaks for the others).
/// - The spec's warnings changed: a Warning `SpecWarnings` naming them, or a Normal
///   `WarningsCleared` when the last one went.
pub fn status_events(before: Option<&Reported>, after: &Reported) -> Vec<Effect> {
    let mut events = Vec::new();
    let was = before.and_then(|b| b.phase);
    if let Some(phase) = after.phase.filter(|p| was != Some(*p)) {
        if failing(phase) {
            let message = match &after.error {
                Some(e) => format!("{phase}: {e}"),
                None => format!("phase {phase}"),
            };
            events.push(Effect::Publish { warning: true, reason: phase.to_string(), message });
        } else if phase == Phase::Synced && (was.is_some_and(failing) || after.ready.is_none()) {
            let message = match was {
                Some(w) if failing(w) => format!("reconciled again after {w}"),
                _ => "phase Synced".to_string(),
            };
            events.push(Effect::Publish { warning: false, reason: "Synced".into(), message });
        }
    }
    events.extend(warnings_event(before.map_or(&[][..], |b| &b.warnings), &after.warnings));
    if let Some(ready) = &after.ready {
        use steward_sdk::ConditionStatus;
        let was = before.and_then(|b| b.ready.as_ref());
        let told = was.map(|c| (c.status, c.reason.as_str()));
        // Unknown says nothing is known yet (a server on its way up): told only where it follows
        // True, as an object no longer known to work; otherwise what it turns into is told.
        let quiet = ready.status == ConditionStatus::Unknown && was.is_none_or(|c| c.status != ConditionStatus::True);
        if told != Some((ready.status, ready.reason.as_str())) && !quiet {
            let holds = ready.status == steward_sdk::ConditionStatus::True;
            let reason = match ready.reason.as_str() {
                "" if holds => "Ready".to_string(),
                "" => "NotReady".to_string(),
                r => r.to_string(),
            };
            let message = match ready.message.as_str() {
                "" => format!("Ready is {:?}", ready.status),
                m => m.to_string(),
            };
            events.push(Effect::Publish { warning: !holds, reason, message });
        }
    }
    events
}

/// Adds the reconcile that started at `started` and ended in `outcome` to `rec`'s history,
/// with the object's warnings as they stand (counted into the last entry if it repeats it).
fn push_run(
    rec: &mut StatusRecord,
    reason: Reason,
    outcome: Name,
    started: Millis,
    elapsed_ms: u64,
    trace_id: Option<String>,
) {
    let warnings = rec.warnings.iter().map(ToString::to_string).collect();
    rec.push_history(HistoryEntry {
        time: started,
        reason,
        outcome,
        duration_ms: elapsed_ms,
        warnings,
        trace_id,
        count: 1,
        first_time: None,
    });
}

/// Why an object is not served here although the mode holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unserved {
    /// Its kind is disabled on this host.
    Disabled,
    /// No plugin serves its kind.
    NoPlugin,
}

/// An object the mode holds (by its finalizer) whose kind is disabled or has no plugin: its
/// status says so and what to do. In a mode that holds nothing, or for an object this host never
/// recorded, nothing happens.
pub fn unserved(kind: &str, before: Option<&StatusRecord>, why: Unserved, facts: &Facts) -> Decision {
    let (Some(finalizer), Some(before)) = (facts.finalizer, before) else { return Decision::nothing() };
    let mut rec = before.clone();
    rec.phase = Phase::Pending;
    let why = match why {
        Unserved::Disabled => format!("kind {kind} is disabled on this host (`steward kinds enable {kind}`)"),
        Unserved::NoPlugin => format!("no plugin serves kind {kind}"),
    };
    rec.last_error = Some(format!(
        "{why}; the object keeps its finalizer {finalizer} until the kind is served again or an operator removes it"
    ));
    Decision::persist(rec)
}

/// An object the host has a record of that left this replica's scope (Kubernetes mode: its
/// labels or namespace no longer match): its services stop and the host forgets it, without
/// `finalize` — it was not deleted, and the replica whose scope it joined takes it over.
pub fn out_of_scope() -> Decision {
    Decision { record: None, schedule: Schedule::Idle, effects: vec![Effect::Release, Effect::Forget] }
}

/// Before a reconcile of `obj`: a `Failed` object waits for a spec change or a manual trigger
/// (its status is written again if it did not reach the cluster); a new generation or a manual
/// trigger resets the retries; a kind without a plugin is `Pending` with the reason.
pub fn prepare_reconcile(before: Option<&StatusRecord>, obj: &SourceObject, reason: Reason, facts: &Facts) -> Prepared {
    let mut rec = before.cloned().unwrap_or_default();
    let new_generation = rec.generation != obj.raw.generation || rec.deleting;
    rec.generation = obj.raw.generation;
    rec.spec_hash = obj.spec_hash;
    rec.source = Some(obj.location.clone());
    if rec.api_version != *obj.raw.api_version {
        rec.api_version = Name::interned(&obj.raw.api_version);
    }
    rec.spec = Some(obj.raw.spec.clone());
    rec.deleting = false;
    if rec.phase == Phase::Failed && !new_generation && waits_for_change(reason) {
        let effects = if facts.status_unwritten { vec![Effect::RewriteStatus] } else { Vec::new() };
        return Prepared::Decided(Decision { record: Some(rec), schedule: Schedule::Idle, effects });
    }
    let mut effects = Vec::new();
    if reason == Reason::ManualTrigger || new_generation {
        rec.retry_count = 0;
        effects.push(Effect::ForgetFailures);
    }
    if let Err(why) = &facts.plugin {
        rec.phase = Phase::Pending;
        rec.last_error = Some(why.clone());
        rec.next_attempt_time = None;
        effects.push(Effect::Persist);
        return Prepared::Decided(Decision { record: Some(rec), schedule: Schedule::Idle, effects });
    }
    effects.push(Effect::EnsureFinalizer);
    Prepared::Call { record: rec, effects }
}

/// After a reconcile: the new record, the next run and the effects.
///
/// Success: `Synced`, the status and conditions the plugin gave, its events published, its
/// services applied, the next run at its `requeue-after` (never later than the resync) or at the
/// resync. Failure: see [`failed`]. A call answered by a plugin version that is no longer the
/// one served (it was replaced or unloaded mid-call) is superseded: its record is kept, marked
/// with the version that produced it, but an error does not count as a retry and never makes the
/// object `Failed`, and the key runs again at once with the plugin served now.
pub fn reconciled(
    before: Option<&StatusRecord>,
    record: StatusRecord,
    reason: Reason,
    out: CallOutcome,
    facts: &Facts,
) -> Decision {
    let mut rec = record;
    let superseded = facts.plugin.as_ref().ok() != Some(&out.ran);
    rec.plugin = Some(out.ran.name.clone());
    rec.plugin_version = Some(out.ran.version.clone());
    rec.last_reconcile_time = Some(out.started);
    let mut effects = Vec::new();
    rec.warnings = out.warnings;
    rec.plugin_warnings_for = out.warnings_for;
    let (outcome, schedule) = match out.result {
        Ok(mut ok) => {
            rec.phase = Phase::Synced;
            rec.observed_generation = Some(rec.generation);
            rec.last_success_time = Some(facts.now);
            rec.retry_count = 0;
            rec.last_error = None;
            // The plugin layer refuses a status that is not a JSON object (`check_response`).
            rec.status = Some(std::mem::take(&mut ok.status));
            rec.conditions = std::mem::take(&mut ok.conditions);
            for ev in std::mem::take(&mut ok.events) {
                effects.push(Effect::Publish {
                    warning: matches!(ev.type_, steward_sdk::EventType::Warning),
                    reason: ev.reason,
                    message: ev.message,
                });
            }
            let requeue_after_ms = ok.requeue_after_ms.take();
            effects.push(Effect::HandOver(Box::new(ok)));
            let (delay, why) = match requeue_after_ms {
                Some(ms) => (Duration::from_millis(ms).min(facts.resync), Reason::Requeue),
                None => (on_resync_grid(facts.now, facts.resync), Reason::Resync),
            };
            rec.next_attempt_time = Some(facts.now + delay.as_millis() as u64);
            (Name::word("Synced"), Schedule::After(delay, why))
        }
        Err(e) => failed(&mut rec, &e, superseded, facts, &mut effects),
    };
    let schedule = if superseded { Schedule::Now(Reason::PluginReloaded) } else { schedule };
    effects.push(Effect::CountResult(match rec.phase {
        Phase::Synced => "success",
        Phase::Failed => "failed",
        _ => "error",
    }));
    push_run(&mut rec, reason, outcome, out.started, out.elapsed_ms, out.trace_id);
    let changed = before.is_none_or(|b| b.status != rec.status || b.conditions != rec.conditions);
    effects.push(Effect::Persist);
    if changed {
        effects.push(Effect::NotifyReaders);
    }
    Decision { record: Some(rec), schedule, effects }
}

/// A failed call: `Error` and a retry with backoff, or `Failed` (a fatal or invalid answer, or
/// retries used up: `retry_count > max_retries`), which waits for a spec change or a manual
/// trigger. A superseded call's error is `Error` without counting, and reruns at once. Returns the
/// history outcome and the schedule.
fn failed(
    rec: &mut StatusRecord,
    e: &PluginError,
    superseded: bool,
    facts: &Facts,
    effects: &mut Vec<Effect>,
) -> (Name, Schedule) {
    effects.push(Effect::CountError);
    rec.last_error = Some(sanitize(&e.to_string()));
    if superseded {
        rec.phase = Phase::Error;
        rec.next_attempt_time = Some(facts.now);
        return (Name::interned(&format!("Error: {}", e.label())), Schedule::Now(Reason::PluginReloaded));
    }
    if let PluginError::Invalid(errs) = e {
        mark_invalid(rec, errs);
    }
    let permanent = matches!(e, PluginError::Fatal(_) | PluginError::Invalid(_));
    rec.retry_count = rec.retry_count.saturating_add(1);
    if permanent || rec.retry_count > facts.max_retries {
        rec.phase = Phase::Failed;
        rec.next_attempt_time = None;
        effects.push(Effect::ForgetFailures);
        (Name::interned(&format!("Failed: {}", e.label())), Schedule::Idle)
    } else {
        rec.phase = Phase::Error;
        (Name::interned(&format!("Error: {}", e.label())), Schedule::Backoff)
    }
}

/// A status that reports the spec's validity in a boolean `valid` reads `valid: false` and its
/// `validationErrors` (`path: message`) once its spec is invalid, whatever the kind: the plugin
/// never saw the spec, so its last status would otherwise still say `valid: true`. Other
/// statuses are untouched.
fn mark_invalid(rec: &mut StatusRecord, errs: &[steward_sdk::FieldError]) {
    let Some(serde_json::Value::Object(mut status)) = rec.status_value() else { return };
    if !status.get("valid").is_some_and(serde_json::Value::is_boolean) {
        return;
    }
    let listed = errs.iter().map(|e| serde_json::Value::String(sanitize(&format!("{}: {}", e.path, e.message))));
    status.insert("valid".into(), serde_json::Value::Bool(false));
    status.insert("validationErrors".into(), serde_json::Value::Array(listed.collect()));
    rec.status = Some(serde_json::Value::Object(status).to_string());
}

/// Before a finalize: a `Failed` finalize waits for a change or a manual trigger like a
/// reconcile does; a kind without a plugin leaves the object `Pending` (in a mode that holds it,
/// the message names the finalizer it keeps).
pub fn prepare_finalize(record: StatusRecord, reason: Reason, facts: &Facts) -> Prepared {
    let mut rec = record;
    rec.deleting = true;
    if rec.phase == Phase::Failed && waits_for_change(reason) {
        return Prepared::Decided(Decision::nothing());
    }
    if let Err(e) = &facts.plugin {
        rec.phase = Phase::Pending;
        rec.last_error = Some(match facts.finalizer {
            Some(f) => format!(
                "cannot finalize: {e}; the object keeps its finalizer {f} until the plugin returns or an operator removes it"
            ),
            None => format!("cannot finalize: {e}"),
        });
        return Prepared::Decided(Decision::persist(rec));
    }
    Prepared::Call { record: rec, effects: Vec::new() }
}

/// After a finalize. Success: whatever the plugin asked for, an object that is gone owns
/// nothing: every unit lets go of what it owns (its services stop, its tool calls are cancelled),
/// the mode lets it go, the host forgets it and its readers run.
/// Failure: as a reconcile's (see [`failed`]), the object staying `deleting`.
pub fn finalized(record: StatusRecord, reason: Reason, out: CallOutcome, facts: &Facts) -> Decision {
    match out.result {
        Ok(_) => Decision {
            record: None,
            schedule: Schedule::Idle,
            effects: vec![
                Effect::Release,
                Effect::RemoveFinalizer,
                Effect::Forget,
                Effect::CountResult("success"),
                Effect::NotifyReaders,
            ],
        },
        Err(e) => {
            let superseded = facts.plugin.as_ref().ok() != Some(&out.ran);
            let mut rec = record;
            rec.last_reconcile_time = Some(out.started);
            let mut effects = Vec::new();
            let (outcome, schedule) = failed(&mut rec, &e, superseded, facts, &mut effects);
            push_run(&mut rec, reason, outcome, out.started, out.elapsed_ms, out.trace_id);
            effects.push(Effect::Persist);
            Decision { record: Some(rec), schedule, effects }
        }
    }
}

/// The longest a resync is put off to share its wake-up with others (see [`on_resync_grid`]).
pub const RESYNC_GRAIN_MAX: Duration = Duration::from_secs(1);

/// `delay` from `now` (milliseconds since the epoch), lengthened so that it ends on a grid of
/// a sixteenth of `delay` (at most [`RESYNC_GRAIN_MAX`]): resyncs that come due close together
/// come due at the same instant and run as one batch (one wake-up of the workers, one commit),
/// not one at a time. A resync runs at most that grain late, never early.
pub fn on_resync_grid(now: Millis, delay: Duration) -> Duration {
    let grain = (delay / 16).min(RESYNC_GRAIN_MAX).as_millis() as u64;
    if grain <= 1 {
        return delay;
    }
    let due = now.saturating_add(delay.as_millis() as u64);
    let late = (grain - due % grain) % grain;
    delay + Duration::from_millis(late)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
