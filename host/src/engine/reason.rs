//! How urgent each reconcile reason is, for the queue's one merge rule.

use crate::model::Reason;
use crate::queue::Urgency;

/// Reasons that rerun a `Failed` object outrank those that wait for a change, so merging two
/// reasons never turns a run that must happen into one that is skipped; a manual trigger, which
/// also resets the retry count, outranks everything.
impl Urgency for Reason {
    fn urgency(&self) -> u8 {
        match self {
            // Wait for a change: a Failed object is not run again for these.
            Reason::Resync => 0,
            Reason::Retry => 1,
            Reason::Requeue => 2,
            Reason::Startup => 3,
            // Something owned through a capability changed (the unit names it).
            Reason::Unit(_) => 4,
            Reason::DependencyChanged => 5,
            // Rerun whatever the phase.
            Reason::LeaderElected => 6,
            // A world round decided something for the object.
            Reason::World => 7,
            Reason::PluginReloaded => 8,
            Reason::KindDisabled => 9,
            Reason::KindEnabled => 10,
            Reason::Created => 11,
            Reason::SpecChanged => 12,
            Reason::Deleted => 13,
            Reason::ManualTrigger => 14,
        }
    }
}

/// Whether `reason` leaves a `Failed` object (or a failed finalize) alone until its spec changes
/// or someone triggers it.
pub fn waits_for_change(reason: Reason) -> bool {
    reason.urgency() <= Reason::DependencyChanged.urgency()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_that_rerun_a_failed_object_outrank_those_that_wait() {
        let waiting = [
            Reason::Resync,
            Reason::Retry,
            Reason::Requeue,
            Reason::Startup,
            Reason::Unit("serviceChanged"),
            Reason::Unit("childChanged"),
            Reason::DependencyChanged,
        ];
        let rerunning = [
            Reason::LeaderElected,
            Reason::PluginReloaded,
            Reason::KindDisabled,
            Reason::KindEnabled,
            Reason::Created,
            Reason::SpecChanged,
            Reason::Deleted,
            Reason::ManualTrigger,
        ];
        for w in waiting {
            assert!(waits_for_change(w), "{w}");
            for r in rerunning {
                assert!(!waits_for_change(r), "{r}");
                assert_eq!(crate::queue::merge(w, r), r);
                assert_eq!(crate::queue::merge(r, w), r);
            }
        }
        for r in rerunning {
            assert_eq!(crate::queue::merge(r, Reason::ManualTrigger), Reason::ManualTrigger);
        }
    }
}
