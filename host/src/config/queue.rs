//! The `queue` section: workers, retries and their backoff, and the debounce of file changes.

use std::time::Duration;

use serde::Deserialize;

use super::values::Positive;
use crate::plugin::HumanDuration;

/// The work queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Reconciles that run at once.
    pub workers: usize,
    /// Failed attempts before an object is `Failed`.
    pub max_retries: u32,
    /// First retry delay.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Quiet time after a file change before it is read.
    pub debounce: Duration,
    /// Longest a continuously written file waits before it is read anyway. That read takes the
    /// documents a `---` closes; the last (which may be cut mid-value) waits for the quiet read.
    pub debounce_max: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
    workers: Option<Positive>,
    max_retries: Option<u32>,
    initial_backoff: Option<HumanDuration>,
    max_backoff: Option<HumanDuration>,
    debounce: Option<HumanDuration>,
    debounce_max: Option<HumanDuration>,
}

/// The `queue` section with its defaults; the error names the two settings that disagree.
pub(super) fn queue_config(q: &RawQueue) -> Result<QueueConfig, String> {
    let queue = QueueConfig {
        workers: q.workers.as_ref().map_or(4, |w| w.0 as usize),
        max_retries: q.max_retries.unwrap_or(5),
        initial_backoff: q.initial_backoff.map_or(Duration::from_secs(1), |d| d.0),
        max_backoff: q.max_backoff.map_or(Duration::from_secs(300), |d| d.0),
        debounce: q.debounce.map_or(Duration::from_millis(200), |d| d.0),
        debounce_max: q.debounce_max.map_or(Duration::from_secs(2), |d| d.0),
    };
    if queue.max_backoff < queue.initial_backoff {
        return Err(format!(
            "queue.max_backoff ({}) must be at least queue.initial_backoff ({})",
            humantime::format_duration(queue.max_backoff),
            humantime::format_duration(queue.initial_backoff)
        ));
    }
    if queue.debounce_max < queue.debounce {
        return Err(format!(
            "queue.debounce_max ({}) must be at least queue.debounce ({})",
            humantime::format_duration(queue.debounce_max),
            humantime::format_duration(queue.debounce)
        ));
    }
    Ok(queue)
}
