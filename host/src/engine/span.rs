//! The reconcile span: one per run of a key, with the object's fields up front and the plugin, attempt and outcome recorded as they become known.

use steward_sdk::PluginInfo;
use tracing::field::Empty;

use crate::model::{ObjectKey, Phase, Reason, StatusRecord};

/// The span of one run of `key` for `reason`. Its fields are the same in the log (text or JSON)
/// and in an exported trace: `kind`, `namespace`, `object` (the name: `name` is the span's own
/// in JSON logs), `reason`, then `plugin`,
/// `plugin.version` and `attempt` (failed attempts before this one) once a plugin is called, and
/// `outcome` (`success`, `error`, `failed`, `finalized`) once decided; in an exported trace, any
/// outcome but a success is also the span's error status, with the sanitized error as its message.
pub(super) fn reconcile(key: &ObjectKey, reason: Reason) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        kind = %key.kind(),
        namespace = %key.namespace(),
        object = %key.name(),
        %reason,
        plugin = Empty,
        plugin.version = Empty,
        attempt = Empty,
        outcome = Empty,
    )
}

/// Records on the current reconcile span the plugin about to be called and the attempt.
pub(super) fn called(plugin: &PluginInfo, attempt: u32) {
    let span = tracing::Span::current();
    span.record("plugin", plugin.name.as_str());
    span.record("plugin.version", plugin.version.as_str());
    // As a signed number: the trace exporter writes unsigned ones as text.
    span.record("attempt", i64::from(attempt));
}

/// Records on the current reconcile span what the call's decision made of the object: a
/// record (`None` once a finalized object is forgotten) in its new phase.
pub(super) fn decided(record: Option<&StatusRecord>) {
    let span = tracing::Span::current();
    let outcome = outcome(record);
    span.record("outcome", outcome);
    if outcome != "success" && outcome != "finalized" {
        crate::telemetry::set_error(&span, record.and_then(|r| r.last_error.as_deref()).unwrap_or(outcome));
    }
}

/// The span's `outcome` for a decided record.
fn outcome(record: Option<&StatusRecord>) -> &'static str {
    match record.map(|r| r.phase) {
        None => "finalized",
        Some(Phase::Synced) => "success",
        Some(Phase::Failed) => "failed",
        Some(_) => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcome_follows_the_decided_phase() {
        let rec = |phase| StatusRecord { phase, ..StatusRecord::default() };
        assert_eq!(outcome(Some(&rec(Phase::Synced))), "success");
        assert_eq!(outcome(Some(&rec(Phase::Error))), "error");
        assert_eq!(outcome(Some(&rec(Phase::Failed))), "failed");
        assert_eq!(outcome(None), "finalized");
    }
}
