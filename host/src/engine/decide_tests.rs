//! One table, one row per outcome the worker can decide.

use std::time::Duration;

use steward_sdk::{Event, EventType, FieldError, RawObject, RawOutcome};

use super::*;
use crate::driver::SourceObject;
use crate::model::{Phase, Reason, StatusRecord};
use crate::plugin::PluginError;

const NOW: Millis = 1_000_000;
const STARTED: Millis = 999_000;
/// The trace the calls of these tables ran in.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const RESYNC: Duration = Duration::from_secs(600);
const MAX_RETRIES: u32 = 3;
const FINALIZER: &str = "steward.dev/finalizer";

/// What a row feeds the decisions with.
enum Input {
    /// A reconcile of the object at `generation`; `call` is the plugin's answer, `None` when the
    /// row expects no call.
    Reconcile { before: Option<StatusRecord>, generation: u64, call: Option<Result<RawOutcome, PluginError>> },
    /// A finalize of a deleted object.
    Finalize { before: StatusRecord, call: Option<Result<RawOutcome, PluginError>> },
    /// An object the mode holds whose kind is not served.
    Unserved { before: Option<StatusRecord>, why: Unserved },
}

/// The mode and plugin facts a row changes from the defaults.
#[derive(Clone, Copy)]
struct Env {
    kube: bool,
    /// The plugin served now: `Some(version)`, or none.
    served: Option<&'static str>,
    unwritten: bool,
}

const FS: Env = Env { kube: false, served: Some("1.0"), unwritten: false };
const KUBE: Env = Env { kube: true, served: Some("1.0"), unwritten: false };

struct Row {
    name: &'static str,
    env: Env,
    reason: Reason,
    input: Input,
    /// The record's phase and retry count after, or `None` when no record is kept.
    want: Option<(Phase, u32)>,
    schedule: Schedule,
    effects: Vec<Effect>,
}

fn rec(phase: Phase, generation: u64, retries: u32) -> StatusRecord {
    StatusRecord {
        phase,
        generation,
        observed_generation: Some(generation),
        retry_count: retries,
        status: Some(serde_json::json!({"ready": true}).to_string()),
        ..StatusRecord::default()
    }
}

fn answer(status: &str, requeue_after_ms: Option<u64>, events: Vec<Event>) -> Result<RawOutcome, PluginError> {
    Ok(RawOutcome {
        status: status.into(),
        conditions: vec![],
        services: vec![],
        requeue_after_ms,
        events,
        calls: None,
        children: None,
    })
}

/// What a plain successful answer leaves for the units.
fn handed() -> Effect {
    Effect::HandOver(Box::new(RawOutcome {
        status: String::new(),
        conditions: vec![],
        services: vec![],
        requeue_after_ms: None,
        events: vec![],
        calls: None,
        children: None,
    }))
}

fn ok() -> Result<RawOutcome, PluginError> {
    answer(r#"{"ready":true}"#, None, vec![])
}

fn ok_requeue(ms: u64) -> Result<RawOutcome, PluginError> {
    answer(r#"{"ready":true}"#, Some(ms), vec![])
}

fn ok_new_status() -> Result<RawOutcome, PluginError> {
    answer(r#"{"ready":false}"#, None, vec![])
}

fn ok_with_event() -> Result<RawOutcome, PluginError> {
    let slow = Event { type_: EventType::Warning, reason: "Slow".into(), message: "took long".into() };
    answer(r#"{"ready":true}"#, None, vec![slow])
}

fn err(e: PluginError) -> Result<RawOutcome, PluginError> {
    Err(e)
}

fn retry() -> PluginError {
    PluginError::Retry("not yet".into())
}

fn facts(env: Env) -> Facts {
    Facts {
        now: NOW,
        max_retries: MAX_RETRIES,
        resync: RESYNC,
        plugin: env
            .served
            .map(|v| PluginId { name: "p".into(), version: v.into() })
            .ok_or_else(|| "no plugin serves kind Thing".to_string()),
        finalizer: env.kube.then_some(FINALIZER),
        status_unwritten: env.unwritten,
    }
}

fn object(generation: u64) -> SourceObject {
    SourceObject {
        raw: RawObject {
            api_version: "x/v1".into(),
            kind: "Thing".into(),
            name: "a".into(),
            namespace: "default".into(),
            generation,
            spec: "{}".into(),
            ..RawObject::default()
        },
        location: crate::model::SourceLocation::new("a.yaml", 1),
        spec_hash: 7,
        warnings: Vec::new(),
    }
}

/// The call came back from version 1.0 of plugin `p`.
fn outcome(result: Result<RawOutcome, PluginError>) -> CallOutcome {
    CallOutcome {
        ran: PluginId { name: "p".into(), version: "1.0".into() },
        started: STARTED,
        elapsed_ms: 5,
        result,
        trace_id: Some(TRACE.into()),
        warnings: Vec::new(),
        warnings_for: None,
    }
}

/// Runs a row through the decisions as the worker does: prepare, then (if a call is made) decide
/// on its outcome. The prepare step's effects come first.
fn run(row: Row) -> (Decision, Row) {
    let facts = facts(row.env);
    let decision = match &row.input {
        Input::Reconcile { before, generation, call } => {
            match (prepare_reconcile(before.as_ref(), &object(*generation), row.reason, &facts), call) {
                (Prepared::Decided(d), None) => d,
                (Prepared::Call { record, mut effects }, Some(result)) => {
                    let d = reconciled(before.as_ref(), record, row.reason, outcome(clone(result)), &facts);
                    effects.extend(d.effects);
                    Decision { effects, ..d }
                }
                (Prepared::Decided(_), Some(_)) => panic!("{}: expected a call, decided without one", row.name),
                (Prepared::Call { .. }, None) => panic!("{}: expected no call", row.name),
            }
        }
        Input::Finalize { before, call } => match (prepare_finalize(before.clone(), row.reason, &facts), call) {
            (Prepared::Decided(d), None) => d,
            (Prepared::Call { record, mut effects }, Some(result)) => {
                let d = finalized(record, row.reason, outcome(clone(result)), &facts);
                effects.extend(d.effects);
                Decision { effects, ..d }
            }
            (Prepared::Decided(_), Some(_)) => panic!("{}: expected a call, decided without one", row.name),
            (Prepared::Call { .. }, None) => panic!("{}: expected no call", row.name),
        },
        Input::Unserved { before, why } => unserved("Thing", before.as_ref(), *why, &facts),
    };
    (decision, row)
}

fn clone(r: &Result<RawOutcome, PluginError>) -> Result<RawOutcome, PluginError> {
    r.clone()
}

use Effect::*;

fn table() -> Vec<Row> {
    let after_success = |extra: Vec<Effect>| {
        let mut v = vec![EnsureFinalizer];
        v.extend(extra);
        v.extend([handed(), CountResult("success"), Persist]);
        v
    };
    let after_error = |first: Vec<Effect>, failed: bool| {
        let mut v = first;
        v.extend([EnsureFinalizer, CountError]);
        if failed {
            v.push(ForgetFailures);
        }
        v.extend([CountResult(if failed { "failed" } else { "error" }), Persist]);
        v
    };
    vec![
        Row {
            name: "a new object reconciled: Synced, next run at the resync",
            env: FS,
            reason: Reason::Created,
            input: Input::Reconcile { before: None, generation: 1, call: Some(ok()) },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(RESYNC, Reason::Resync),
            effects: {
                let mut v = vec![ForgetFailures];
                v.extend(after_success(vec![]));
                v.push(NotifyReaders);
                v
            },
        },
        Row {
            name: "an unchanged status notifies no reader",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile { before: Some(rec(Phase::Synced, 1, 0)), generation: 1, call: Some(ok()) },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(RESYNC, Reason::Resync),
            effects: after_success(vec![]),
        },
        Row {
            name: "a changed status notifies the readers",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(ok_new_status()),
            },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(RESYNC, Reason::Resync),
            effects: {
                let mut v = after_success(vec![]);
                v.push(NotifyReaders);
                v
            },
        },
        Row {
            name: "the plugin's events are published",
            env: KUBE,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(ok_with_event()),
            },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(RESYNC, Reason::Resync),
            effects: after_success(vec![Publish { warning: true, reason: "Slow".into(), message: "took long".into() }]),
        },
        Row {
            name: "requeue-after is honoured",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(ok_requeue(5_000)),
            },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(Duration::from_secs(5), Reason::Requeue),
            effects: after_success(vec![]),
        },
        Row {
            name: "requeue-after is clamped to the resync",
            env: FS,
            reason: Reason::Requeue,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(ok_requeue(3_600_000)),
            },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(RESYNC, Reason::Requeue),
            effects: after_success(vec![]),
        },
        Row {
            name: "retry: Error, one more retry, backoff",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile { before: Some(rec(Phase::Synced, 1, 0)), generation: 1, call: Some(err(retry())) },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![], false),
        },
        Row {
            name: "fatal: Failed at once, waits for a change",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(err(PluginError::Fatal("no".into()))),
            },
            want: Some((Phase::Failed, 1)),
            schedule: Schedule::Idle,
            effects: after_error(vec![], true),
        },
        Row {
            name: "invalid: Failed at once",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(err(PluginError::Invalid(vec![FieldError::new("spec.port", "too big")]))),
            },
            want: Some((Phase::Failed, 1)),
            schedule: Schedule::Idle,
            effects: after_error(vec![], true),
        },
        Row {
            name: "timeout: Error with backoff",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(err(PluginError::Timeout { limit: Duration::from_secs(5) })),
            },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![], false),
        },
        Row {
            name: "trap: Error with backoff",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(err(PluginError::Trap { message: "unreachable".into() })),
            },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![], false),
        },
        Row {
            name: "capability denied: Error with backoff (a config change may grant it)",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(err(PluginError::CapabilityDenied {
                    plugin: "p".into(),
                    capability: "services".into(),
                    used: "called it".into(),
                })),
            },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![], false),
        },
        Row {
            name: "the last allowed retry is still Error",
            env: FS,
            reason: Reason::Retry,
            input: Input::Reconcile { before: Some(rec(Phase::Error, 1, 2)), generation: 1, call: Some(err(retry())) },
            want: Some((Phase::Error, 3)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![], false),
        },
        Row {
            name: "retries used up: Failed",
            env: FS,
            reason: Reason::Retry,
            input: Input::Reconcile { before: Some(rec(Phase::Error, 1, 3)), generation: 1, call: Some(err(retry())) },
            want: Some((Phase::Failed, 4)),
            schedule: Schedule::Idle,
            effects: after_error(vec![], true),
        },
        Row {
            name: "a spec change while failing resets the retries and runs",
            env: FS,
            reason: Reason::SpecChanged,
            input: Input::Reconcile { before: Some(rec(Phase::Error, 1, 3)), generation: 2, call: Some(err(retry())) },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![ForgetFailures], false),
        },
        Row {
            name: "a spec change brings a Failed object back",
            env: FS,
            reason: Reason::SpecChanged,
            input: Input::Reconcile { before: Some(rec(Phase::Failed, 1, 4)), generation: 2, call: Some(ok()) },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::After(RESYNC, Reason::Resync),
            effects: {
                let mut v = vec![ForgetFailures];
                v.extend(after_success(vec![]));
                v
            },
        },
        Row {
            name: "Failed waits on a resync",
            env: FS,
            reason: Reason::Resync,
            input: Input::Reconcile { before: Some(rec(Phase::Failed, 1, 4)), generation: 1, call: None },
            want: Some((Phase::Failed, 4)),
            schedule: Schedule::Idle,
            effects: vec![],
        },
        Row {
            name: "Failed waits on a dependency change",
            env: FS,
            reason: Reason::DependencyChanged,
            input: Input::Reconcile { before: Some(rec(Phase::Failed, 1, 4)), generation: 1, call: None },
            want: Some((Phase::Failed, 4)),
            schedule: Schedule::Idle,
            effects: vec![],
        },
        Row {
            name: "Failed whose status did not reach the cluster: written again, no call",
            env: Env { unwritten: true, ..KUBE },
            reason: Reason::Retry,
            input: Input::Reconcile { before: Some(rec(Phase::Failed, 1, 4)), generation: 1, call: None },
            want: Some((Phase::Failed, 4)),
            schedule: Schedule::Idle,
            effects: vec![RewriteStatus],
        },
        Row {
            name: "Failed reruns on a manual trigger, retries reset",
            env: FS,
            reason: Reason::ManualTrigger,
            input: Input::Reconcile { before: Some(rec(Phase::Failed, 1, 4)), generation: 1, call: Some(err(retry())) },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: after_error(vec![ForgetFailures], false),
        },
        Row {
            name: "a missing plugin: Pending with the reason, no call",
            env: Env { served: None, ..FS },
            reason: Reason::Created,
            input: Input::Reconcile { before: Some(rec(Phase::Synced, 1, 0)), generation: 1, call: None },
            want: Some((Phase::Pending, 0)),
            schedule: Schedule::Idle,
            effects: vec![Persist],
        },
        Row {
            name: "a plugin replaced mid-call: the old answer is kept, the new version runs at once",
            env: Env { served: Some("2.0"), ..FS },
            reason: Reason::Resync,
            input: Input::Reconcile { before: Some(rec(Phase::Synced, 1, 0)), generation: 1, call: Some(ok()) },
            want: Some((Phase::Synced, 0)),
            schedule: Schedule::Now(Reason::PluginReloaded),
            effects: after_success(vec![]),
        },
        Row {
            name: "a plugin replaced mid-call: its fatal error neither counts nor fails the object",
            env: Env { served: Some("2.0"), ..FS },
            reason: Reason::Resync,
            input: Input::Reconcile {
                before: Some(rec(Phase::Synced, 1, 0)),
                generation: 1,
                call: Some(err(PluginError::Fatal("old bug".into()))),
            },
            want: Some((Phase::Error, 0)),
            schedule: Schedule::Now(Reason::PluginReloaded),
            effects: vec![EnsureFinalizer, CountError, CountResult("error"), Persist],
        },
        Row {
            name: "finalize without a plugin, filesystem mode: Pending",
            env: Env { served: None, ..FS },
            reason: Reason::Resync,
            input: Input::Finalize { before: rec(Phase::Synced, 1, 0), call: None },
            want: Some((Phase::Pending, 0)),
            schedule: Schedule::Idle,
            effects: vec![Persist],
        },
        Row {
            name: "finalize succeeds: services stop, the mode lets go, the host forgets",
            env: KUBE,
            reason: Reason::Deleted,
            input: Input::Finalize { before: rec(Phase::Synced, 1, 0), call: Some(ok()) },
            want: None,
            schedule: Schedule::Idle,
            effects: vec![Release, RemoveFinalizer, Forget, CountResult("success"), NotifyReaders],
        },
        Row {
            name: "finalize fails: Error with backoff, still deleting",
            env: KUBE,
            reason: Reason::Deleted,
            input: Input::Finalize { before: rec(Phase::Synced, 1, 0), call: Some(err(retry())) },
            want: Some((Phase::Error, 1)),
            schedule: Schedule::Backoff,
            effects: vec![CountError, Persist],
        },
        Row {
            name: "finalize fails for good: Failed",
            env: FS,
            reason: Reason::Deleted,
            input: Input::Finalize {
                before: rec(Phase::Synced, 1, 0),
                call: Some(err(PluginError::Fatal("cannot".into()))),
            },
            want: Some((Phase::Failed, 1)),
            schedule: Schedule::Idle,
            effects: vec![CountError, ForgetFailures, Persist],
        },
        Row {
            name: "a Failed finalize waits on a retry",
            env: FS,
            reason: Reason::Retry,
            input: Input::Finalize { before: rec(Phase::Failed, 1, 4), call: None },
            want: None,
            schedule: Schedule::Idle,
            effects: vec![],
        },
        Row {
            name: "a Failed finalize reruns on a manual trigger",
            env: FS,
            reason: Reason::ManualTrigger,
            input: Input::Finalize { before: rec(Phase::Failed, 1, 4), call: Some(ok()) },
            want: None,
            schedule: Schedule::Idle,
            effects: vec![Release, RemoveFinalizer, Forget, CountResult("success"), NotifyReaders],
        },
        Row {
            name: "finalize without a plugin, Kubernetes mode: Pending, the finalizer stays",
            env: Env { served: None, ..KUBE },
            reason: Reason::Deleted,
            input: Input::Finalize { before: rec(Phase::Synced, 1, 0), call: None },
            want: Some((Phase::Pending, 0)),
            schedule: Schedule::Idle,
            effects: vec![Persist],
        },
        Row {
            name: "a disabled kind, Kubernetes mode: Pending, says how to enable it",
            env: KUBE,
            reason: Reason::KindDisabled,
            input: Input::Unserved { before: Some(rec(Phase::Synced, 1, 0)), why: Unserved::Disabled },
            want: Some((Phase::Pending, 0)),
            schedule: Schedule::Idle,
            effects: vec![Persist],
        },
        Row {
            name: "a disabled kind, filesystem mode: left alone",
            env: FS,
            reason: Reason::KindDisabled,
            input: Input::Unserved { before: Some(rec(Phase::Synced, 1, 0)), why: Unserved::Disabled },
            want: None,
            schedule: Schedule::Idle,
            effects: vec![],
        },
        Row {
            name: "an unserved kind, Kubernetes mode, object never recorded: left alone",
            env: KUBE,
            reason: Reason::Created,
            input: Input::Unserved { before: None, why: Unserved::NoPlugin },
            want: None,
            schedule: Schedule::Idle,
            effects: vec![],
        },
    ]
}

#[test]
fn every_outcome_decides_the_record_the_schedule_and_the_effects() {
    for row in table() {
        let (d, row) = run(row);
        let got = d.record.as_ref().map(|r| (r.phase, r.retry_count));
        assert_eq!(got, row.want, "{}: phase and retries", row.name);
        assert_eq!(d.schedule, row.schedule, "{}: schedule", row.name);
        assert_eq!(d.effects, row.effects, "{}: effects", row.name);
    }
}

#[test]
fn the_record_says_what_happened() {
    let f = facts(FS);
    let before = rec(Phase::Synced, 1, 0);
    // Success: observed generation, times, the plugin's status and who produced it.
    let Prepared::Call { record, .. } = prepare_reconcile(Some(&before), &object(2), Reason::SpecChanged, &f) else {
        panic!("a spec change calls the plugin")
    };
    let d = reconciled(Some(&before), record, Reason::SpecChanged, outcome(ok_new_status()), &f);
    let r = d.record.unwrap();
    assert_eq!(r.observed_generation, Some(2));
    assert_eq!(r.last_reconcile_time, Some(STARTED));
    assert_eq!(r.last_success_time, Some(NOW));
    assert_eq!(r.next_attempt_time, Some(NOW + RESYNC.as_millis() as u64));
    assert_eq!(r.status_value(), Some(serde_json::json!({"ready": false})));
    assert_eq!((r.plugin.as_deref(), r.plugin_version.as_deref()), (Some("p"), Some("1.0")));
    assert_eq!(r.source.as_ref().map(ToString::to_string).as_deref(), Some("a.yaml:1"));
    let h = r.history.back().unwrap();
    assert_eq!((h.reason, h.outcome.as_str(), h.time), (Reason::SpecChanged, "Synced", STARTED));
    assert_eq!(h.trace_id.as_deref(), Some(TRACE), "the history links the reconcile to its trace");

    // A plugin replaced mid-call: the record names the version that answered.
    let Prepared::Call { record, .. } = prepare_reconcile(Some(&before), &object(1), Reason::Resync, &f) else {
        panic!("a resync of a Synced object calls the plugin")
    };
    let d = reconciled(Some(&before), record, Reason::Resync, outcome(ok()), &facts(Env { served: Some("2.0"), ..FS }));
    assert_eq!(d.record.unwrap().plugin_version.as_deref(), Some("1.0"));

    // Errors are sanitized and labelled in the history.
    let Prepared::Call { record, .. } = prepare_reconcile(Some(&before), &object(1), Reason::Resync, &f) else {
        panic!("a resync of a Synced object calls the plugin")
    };
    let d = reconciled(Some(&before), record, Reason::Resync, outcome(err(PluginError::Fatal("no".into()))), &f);
    let r = d.record.unwrap();
    assert_eq!(r.next_attempt_time, None);
    assert!(r.last_error.as_deref().is_some_and(|e| e.contains("no")));
    assert_eq!(r.history.back().unwrap().outcome, "Failed: fatal");
    assert_eq!(r.history.back().unwrap().trace_id.as_deref(), Some(TRACE), "a failed call's trace too");

    // Messages of a mode that holds objects name the finalizer.
    let d = unserved("Thing", Some(&before), Unserved::Disabled, &facts(KUBE));
    let e = d.record.unwrap().last_error.unwrap();
    assert!(e.contains("steward kinds enable Thing") && e.contains(FINALIZER), "{e}");
    let Prepared::Decided(d) = prepare_finalize(before.clone(), Reason::Deleted, &facts(Env { served: None, ..KUBE }))
    else {
        panic!("no plugin: no call")
    };
    let r = d.record.unwrap();
    assert!(r.deleting);
    assert!(r.last_error.unwrap().contains(FINALIZER));
}

#[test]
fn warnings_are_recorded_kept_in_the_history_and_announced_when_they_change() {
    use crate::model::{FieldWarning, WarningSource};
    let f = facts(FS);
    let unknown = FieldWarning {
        path: "spec.extra".into(),
        message: "unknown field, ignored".into(),
        source: WarningSource::Schema,
    };
    let with = |warnings: Vec<FieldWarning>, result| CallOutcome {
        warnings,
        warnings_for: Some("7/p@1.0".into()),
        ..outcome(result)
    };
    let call = |before: &StatusRecord| match prepare_reconcile(Some(before), &object(1), Reason::Resync, &f) {
        Prepared::Call { record, .. } => record,
        Prepared::Decided(_) => panic!("a resync calls the plugin"),
    };
    // Told when the status is written, against what the status told before.
    let published = |before: &StatusRecord, d: &Decision| -> Vec<(bool, String)> {
        let after = Reported::of_record(d.record.as_ref().unwrap());
        told(Some(&Reported::of_record(before)), &after).into_iter().map(|(w, reason, _)| (w, reason)).collect()
    };

    // New warnings: recorded, in the history, announced by a Warning event naming them.
    let before = rec(Phase::Synced, 1, 0);
    let d = reconciled(Some(&before), call(&before), Reason::Resync, with(vec![unknown.clone()], ok()), &f);
    let r = d.record.clone().unwrap();
    assert_eq!(
        (r.phase, r.warnings.clone()),
        (Phase::Synced, vec![unknown.clone()]),
        "a warning does not stop the object"
    );
    assert_eq!(r.plugin_warnings_for.as_deref(), Some("7/p@1.0"));
    assert_eq!(r.history.back().unwrap().warnings, ["spec.extra: unknown field, ignored"]);
    assert_eq!(published(&before, &d), [(true, "SpecWarnings".to_string())]);
    let message = told(Some(&Reported::of_record(&before)), &Reported::of_record(&r)).pop().map(|(_, _, m)| m);
    assert_eq!(message.as_deref(), Some("1 warning(s): spec.extra: unknown field, ignored"));
    assert!(!d.effects.iter().any(|e| matches!(e, Effect::Publish { .. })), "told at the write, not before");

    // The same warnings again: no event.
    let d = reconciled(Some(&r), call(&r), Reason::Resync, with(vec![unknown.clone()], ok()), &f);
    assert!(published(&r, &d).is_empty());

    // Gone from the spec: cleared, with a normal event.
    let d = reconciled(Some(&r), call(&r), Reason::SpecChanged, with(Vec::new(), ok()), &f);
    let cleared = d.record.clone().unwrap();
    assert!(cleared.warnings.is_empty() && cleared.history.back().unwrap().warnings.is_empty());
    assert_eq!(published(&r, &d), [(false, "WarningsCleared".to_string())]);

    // Unknown fields under `strict` come as an invalid answer: Failed, naming the field.
    let invalid = err(PluginError::Invalid(vec![FieldError::new("spec.extra", "unknown field")]));
    let d = reconciled(Some(&before), call(&before), Reason::SpecChanged, with(Vec::new(), invalid), &f);
    let r = d.record.unwrap();
    assert_eq!(r.phase, Phase::Failed);
    assert!(r.last_error.unwrap().contains("spec.extra"));
}

#[test]
fn an_invalid_spec_turns_a_status_that_says_valid_into_valid_false_with_its_errors() {
    let f = facts(FS);
    let invalid = || err(PluginError::Invalid(vec![FieldError::new("spec.steps[0].id", "is required")]));
    let decide = |status: serde_json::Value| {
        let mut before = rec(Phase::Synced, 1, 0);
        before.status = Some(status.to_string());
        let Prepared::Call { record, .. } = prepare_reconcile(Some(&before), &object(2), Reason::SpecChanged, &f)
        else {
            panic!("a spec change calls the plugin")
        };
        reconciled(Some(&before), record, Reason::SpecChanged, outcome(invalid()), &f).record.unwrap()
    };
    // muster's Workflow status: `valid` goes false and the errors are listed, the rest is kept.
    let r = decide(serde_json::json!({"valid": true, "validationErrors": [], "stepCount": 2}));
    assert_eq!(r.phase, Phase::Failed);
    assert_eq!(
        r.status_value(),
        Some(
            serde_json::json!({"valid": false, "validationErrors": ["spec.steps[0].id: is required"], "stepCount": 2})
        )
    );
    // A status without a boolean `valid` is the plugin's own: untouched.
    let other = serde_json::json!({"state": "Running", "valid": "yes"});
    assert_eq!(decide(other.clone()).status_value(), Some(other));
}

/// What [`status_events`] publishes: `(warning, reason, message)`.
fn told(before: Option<&Reported>, after: &Reported) -> Told {
    status_events(before, after)
        .into_iter()
        .map(|e| match e {
            Effect::Publish { warning, reason, message } => (warning, reason, message),
            other => panic!("status events only publish, not {other:?}"),
        })
        .collect()
}

/// Events as [`told`] lists them: `(warning, reason, message)`.
type Told = Vec<(bool, String, String)>;

/// The events of a status change (`status_events`).
#[path = "decide_events_tests.rs"]
mod events;

#[test]
fn resyncs_due_close_together_come_due_together_and_never_early() {
    let second = Duration::from_secs(1);
    // Ten minutes: a one-second grid.
    let a = on_resync_grid(1_000_100, RESYNC);
    let b = on_resync_grid(1_000_900, RESYNC);
    assert_eq!(1_000_100 + a.as_millis() as u64, 1_601_000);
    assert_eq!(1_000_900 + b.as_millis() as u64, 1_601_000, "both come due at the same instant");
    assert!(a >= RESYNC && a < RESYNC + second);
    // Already on the grid: unchanged.
    assert_eq!(on_resync_grid(NOW, RESYNC), RESYNC);
    // A short interval gets a fine grid (a sixteenth of it), a tiny one none.
    let short = Duration::from_millis(160);
    let d = on_resync_grid(1_005, short);
    assert!(d >= short && d < short + Duration::from_millis(10), "{d:?}");
    assert_eq!(on_resync_grid(1_005, Duration::from_millis(20)), Duration::from_millis(20));
}
