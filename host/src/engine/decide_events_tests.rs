//! What a change of an object's status tells people: one row per change, and nothing told twice.

use super::*;

fn state(phase: Phase, ready: Option<(bool, &str, &str)>) -> Reported {
    Reported {
        phase: Some(phase),
        error: None,
        ready: ready.map(|(holds, reason, message)| steward_sdk::Condition::new("Ready", holds, reason, message)),
        warnings: Vec::new(),
    }
}

#[test]
fn events_follow_the_ready_condition_and_the_phase_and_nothing_is_told_twice() {
    let healthy = Some((true, "Healthy", "the server is Running and healthy"));
    let failed = Some((false, "Failed", "cannot start `/no/such/prog`: not found"));
    let starting = Some((false, "Starting", "the server is Starting"));
    let mut error = state(Phase::Error, healthy);
    error.error = Some("plugin trapped".into());
    let w = |reason: &str, message: &str| (true, reason.to_string(), message.to_string());
    let n = |reason: &str, message: &str| (false, reason.to_string(), message.to_string());
    // (row, told before, state now, events)
    let table: Vec<(&str, Option<Reported>, Reported, Told)> = vec![
        (
            "Ready True→False: a Warning with the condition's reason and message",
            Some(state(Phase::Synced, healthy)),
            state(Phase::Synced, failed),
            vec![w("Failed", "cannot start `/no/such/prog`: not found")],
        ),
        (
            "Ready False→True: a Normal event with the condition's reason and message",
            Some(state(Phase::Synced, failed)),
            state(Phase::Synced, healthy),
            vec![n("Healthy", "the server is Running and healthy")],
        ),
        (
            "still False, another reason: a Warning naming the new one",
            Some(state(Phase::Synced, starting)),
            state(Phase::Synced, failed),
            vec![w("Failed", "cannot start `/no/such/prog`: not found")],
        ),
        (
            "unchanged (same phase, same Ready status and reason, another message): nothing",
            Some(state(Phase::Synced, failed)),
            state(Phase::Synced, Some((false, "Failed", "a new message"))),
            vec![],
        ),
        (
            "unchanged without a Ready condition: nothing",
            Some(state(Phase::Synced, None)),
            state(Phase::Synced, None),
            vec![],
        ),
        (
            "a new object that is not ready: a Warning, no Normal Synced beside it",
            None,
            state(Phase::Synced, starting),
            vec![w("Starting", "the server is Starting")],
        ),
        (
            "a new object without a Ready condition: a Normal Synced",
            None,
            state(Phase::Synced, None),
            vec![n("Synced", "phase Synced")],
        ),
        (
            "a status no host wrote yet counts as nothing told",
            Some(Reported::default()),
            state(Phase::Synced, healthy),
            vec![n("Healthy", "the server is Running and healthy")],
        ),
        (
            "the host fails: a Warning named after the phase with the error; Ready is unchanged",
            Some(state(Phase::Synced, healthy)),
            error.clone(),
            vec![w("Error", "Error: plugin trapped")],
        ),
        (
            "the host reconciles again: a Normal Synced",
            Some(error.clone()),
            state(Phase::Synced, healthy),
            vec![n("Synced", "reconciled again after Error")],
        ),
        (
            "both change: the phase's event, then the condition's",
            Some(error),
            state(Phase::Synced, failed),
            vec![n("Synced", "reconciled again after Error"), w("Failed", "cannot start `/no/such/prog`: not found")],
        ),
        (
            "Ready True turning Unknown is no longer known to work: a Warning; an empty reason is named",
            Some(state(Phase::Synced, healthy)),
            Reported {
                ready: Some(steward_sdk::Condition {
                    type_: "Ready".into(),
                    status: steward_sdk::ConditionStatus::Unknown,
                    reason: String::new(),
                    message: String::new(),
                }),
                ..state(Phase::Synced, None)
            },
            vec![w("NotReady", "Ready is Unknown")],
        ),
        (
            "Ready Unknown on the way up (nothing learnt yet) tells nothing; what it turns into is told",
            Some(state(Phase::Synced, None)),
            Reported {
                ready: Some(steward_sdk::Condition {
                    type_: "Ready".into(),
                    status: steward_sdk::ConditionStatus::Unknown,
                    reason: "Starting".into(),
                    message: "the server is Starting".into(),
                }),
                ..state(Phase::Synced, None)
            },
            vec![],
        ),
    ];
    for (row, before, after, want) in table {
        assert_eq!(told(before.as_ref(), &after), want, "{row}");
    }
}

#[test]
fn nothing_is_told_again_after_a_restart_or_a_leader_change() {
    let f = facts(KUBE);
    let mut before = rec(Phase::Synced, 1, 0);
    before.conditions = vec![steward_sdk::Condition::new("Ready", false, "Failed", "cannot start")];
    let mut again = answer(r#"{"ready":false}"#, None, vec![]).unwrap();
    again.conditions = before.conditions.clone();
    let Prepared::Call { record, .. } = prepare_reconcile(Some(&before), &object(1), Reason::LeaderElected, &f) else {
        panic!("a new leader calls the plugin")
    };
    let d = reconciled(Some(&before), record, Reason::LeaderElected, outcome(Ok(again)), &f);
    let now = Reported::of_record(d.record.as_ref().unwrap());

    // A restarted host compares with its store's record, as the store gives it back.
    let stored: StatusRecord = serde_json::from_str(&serde_json::to_string(&before).unwrap()).unwrap();
    assert_eq!(told(Some(&Reported::of_record(&stored)), &now), [], "after a restart");
    // A new leader compares with the status the old one wrote to the cluster.
    let written = crate::kubernetes::writer::status_object(&before, None, NOW);
    let in_cluster = Reported::of_status(&written, crate::kubernetes::HOST_STATUS_KEY);
    assert_eq!(told(Some(&in_cluster), &now), [], "after a leader change");
    // Whereas a replica's empty memory would have told it all again.
    assert_eq!(told(None, &now).len(), 1);
}
