//! One object's summary as every list shows it: the host's phase, its Ready condition, and its kind's columns.

use serde::{Deserialize, Serialize};
use steward_sdk::{Condition, ConditionStatus, PrinterColumn};

use crate::model::Phase;

/// The object's Ready condition, as the plugin last reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Readiness {
    /// Ready is `True`.
    True,
    /// Ready is `False`.
    False,
    /// Ready is `Unknown`.
    Unknown,
    /// The plugin reports no Ready condition.
    Absent,
}

/// How a list colours the object: the one verdict every surface shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Synced, and Ready is `True` or absent: green.
    Ok,
    /// Pending, reconciling, or Ready `Unknown`: neither green nor red.
    Progressing,
    /// An error, a failure, or Ready `False`: red, with the reason.
    Failing,
}

/// The value of one of the kind's printer columns on the object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ColumnValue {
    /// The column's name, as its kind declares it.
    pub name: String,
    /// The value as text; `None` when the object has none there.
    pub value: Option<String>,
}

/// What every list shows of one object, computed in one place ([`summarize`]): a list never shows
/// green ([`Verdict::Ok`]) for an object whose Ready condition is not `True` or absent, or whose
/// last reconcile did not succeed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Summary {
    /// The host's phase.
    pub phase: Phase,
    /// The object's Ready condition.
    pub ready: Readiness,
    /// Why: the Ready condition's reason, else the phase when it is Error or Failed.
    pub reason: Option<String>,
    /// The Ready condition's message, else the host's last error.
    pub message: Option<String>,
    /// Green, red or neither.
    pub verdict: Verdict,
    /// The kind's printer columns, in declared order; empty for a kind that declares none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<ColumnValue>,
}

/// The summary of an object in `phase` with these `conditions` and `last_error`, and the values of
/// `columns` read from its `spec` and `status`.
pub fn summarize(
    phase: Phase,
    conditions: &[Condition],
    last_error: Option<&str>,
    columns: &[PrinterColumn],
    spec: Option<&serde_json::Value>,
    status: Option<&serde_json::Value>,
) -> Summary {
    let cond = conditions.iter().find(|c| c.type_ == "Ready");
    let ready = match cond.map(|c| c.status) {
        Some(ConditionStatus::True) => Readiness::True,
        Some(ConditionStatus::False) => Readiness::False,
        Some(ConditionStatus::Unknown) => Readiness::Unknown,
        None => Readiness::Absent,
    };
    let failed = matches!(phase, Phase::Error | Phase::Failed);
    let verdict = if failed || ready == Readiness::False {
        Verdict::Failing
    } else if phase == Phase::Synced && ready != Readiness::Unknown {
        Verdict::Ok
    } else {
        Verdict::Progressing
    };
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    // A failed reconcile's error is newer than the condition the last success reported.
    let (reason, message) = match (failed, cond) {
        (true, _) => (Some(phase.to_string()), last_error.and_then(non_empty)),
        (false, Some(c)) => (non_empty(&c.reason), non_empty(&c.message).or_else(|| last_error.and_then(non_empty))),
        (false, None) => (None, last_error.and_then(non_empty)),
    };
    Summary {
        phase,
        ready,
        reason,
        message,
        verdict,
        columns: columns
            .iter()
            .map(|c| ColumnValue { name: c.name.clone(), value: crate::columns::value(c, spec, status) })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_sdk::ColumnType;

    fn ready(status: ConditionStatus, reason: &str, message: &str) -> Vec<Condition> {
        vec![Condition { type_: "Ready".into(), status, reason: reason.into(), message: message.into() }]
    }

    #[test]
    fn synced_is_green_only_when_ready_is_true_or_absent() {
        let s = summarize(Phase::Synced, &ready(ConditionStatus::True, "Running", ""), None, &[], None, None);
        assert_eq!((s.ready, s.verdict, s.reason.as_deref()), (Readiness::True, Verdict::Ok, Some("Running")));
        let s = summarize(Phase::Synced, &[], None, &[], None, None);
        assert_eq!((s.ready, s.verdict), (Readiness::Absent, Verdict::Ok));
        let s = summarize(Phase::Synced, &ready(ConditionStatus::Unknown, "Starting", ""), None, &[], None, None);
        assert_eq!((s.ready, s.verdict), (Readiness::Unknown, Verdict::Progressing));
    }

    #[test]
    fn ready_false_is_red_with_its_reason_and_message_even_when_synced() {
        let conds = ready(ConditionStatus::False, "Failed", "cannot start `/nope/prog`: no such file");
        let s = summarize(Phase::Synced, &conds, None, &[], None, None);
        assert_eq!(s.ready, Readiness::False);
        assert_eq!(s.verdict, Verdict::Failing);
        assert_eq!(s.reason.as_deref(), Some("Failed"));
        assert_eq!(s.message.as_deref(), Some("cannot start `/nope/prog`: no such file"));
    }

    #[test]
    fn a_failed_reconcile_is_red_with_the_error_even_when_an_old_condition_says_ready() {
        let conds = ready(ConditionStatus::True, "Running", "");
        let s = summarize(Phase::Error, &conds, Some("plugin trapped"), &[], None, None);
        assert_eq!(s.verdict, Verdict::Failing);
        assert_eq!((s.reason.as_deref(), s.message.as_deref()), (Some("Error"), Some("plugin trapped")));
        let s = summarize(Phase::Pending, &[], None, &[], None, None);
        assert_eq!((s.verdict, s.reason, s.message), (Verdict::Progressing, None, None));
    }

    #[test]
    fn the_kinds_columns_are_read_from_spec_and_status() {
        let columns = [
            PrinterColumn::new("State", ".status.state", ColumnType::String),
            PrinterColumn::new("Tools", ".status.toolCount", ColumnType::Integer),
            PrinterColumn::new("Command", ".spec.command", ColumnType::String),
        ];
        let status = json!({"state": "Failed"});
        let spec = json!({"command": "prog"});
        let s = summarize(Phase::Synced, &[], None, &columns, Some(&spec), Some(&status));
        let values: Vec<(&str, Option<&str>)> =
            s.columns.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
        assert_eq!(values, [("State", Some("Failed")), ("Tools", None), ("Command", Some("prog"))]);
    }
}
