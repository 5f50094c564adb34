//! The host's own conditions (store, resources directory, plugin sources, watches, webhook): set and cleared where each cause is observed.
//!
//! A [`Conditions`] registry is a cheap handle (clone it) that the engine creates and hands to
//! the parts that observe trouble; it imports nothing of them, so the store, the sources and
//! the Kubernetes side can report without knowing the engine. Every condition is positive
//! ("StoreWritable"): `True` when all is well, `False` with a reason and a message saying what
//! is wrong and what to do. Once a part has reported a condition, it stays listed; repairing
//! the cause sets it `True` again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use steward_sdk::ConditionStatus;
use tokio::sync::watch;

use crate::model::{now_millis, rfc3339};

/// The state store commits its writes (`False`: disk full or I/O error; writes are kept and retried).
pub const STORE_WRITABLE: &str = "StoreWritable";
/// The resources directory can be read (filesystem mode).
pub const RESOURCES_READABLE: &str = "ResourcesReadable";
/// A plugin that follows a registry runs its newest good artifact (`False`: from its cache, or a new artifact was refused).
pub const PLUGIN_SOURCE: &str = "PluginSource";
/// A plugin that follows a registry has what runs in the plugin cache, for a start while the registry cannot be read (`False`: it cannot be written, or was lost).
pub const PLUGIN_CACHED: &str = "PluginCached";
/// The compile cache holds every plugin the host runs, so that the next start need not compile it, and stays within its limit (`False`: one cannot be written, or files a prune must remove cannot be; both are retried every 10 s).
pub const COMPILE_CACHE_WRITABLE: &str = "CompileCacheWritable";
/// The Kubernetes API server answers and every watch is running (Kubernetes mode).
pub const WATCHES_HEALTHY: &str = "WatchesHealthy";
/// The admission webhook is serving (Kubernetes mode with `kubernetes.webhook.enabled`).
pub const WEBHOOK_SERVING: &str = "WebhookServing";

/// The condition types whose `False` means the host cannot do its job: `/readyz` answers 503.
pub const BLOCKS_READINESS: &[&str] = &[STORE_WRITABLE];

/// One condition of the host, as `GET /api/v1/overview` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostCondition {
    /// CamelCase type, one of the constants of this module.
    #[serde(rename = "type")]
    pub type_: String,
    /// What it concerns when a type has several (a plugin's name, a watched kind); `None` for the host as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// `True` when all is well.
    pub status: ConditionStatus,
    /// CamelCase reason of the status.
    pub reason: String,
    /// What is wrong and what to do, in words (empty or a short note when `True`).
    pub message: String,
    /// When the status last changed, RFC 3339 UTC.
    pub last_transition_time: String,
    /// Whether `False` makes `/readyz` answer 503.
    pub blocks_readiness: bool,
}

impl HostCondition {
    /// `type` with its subject, as messages name it: `PluginSource (noop)`.
    pub fn name(&self) -> String {
        match &self.subject {
            Some(s) => format!("{} ({s})", self.type_),
            None => self.type_.clone(),
        }
    }
}

type Key = (String, Option<String>);

/// The registry of the host's conditions; clones share it.
#[derive(Clone, Debug)]
pub struct Conditions {
    inner: Arc<Mutex<BTreeMap<Key, HostCondition>>>,
    /// Bumped at every change of a status, reason or message.
    changed: Arc<watch::Sender<u64>>,
}

impl Default for Conditions {
    fn default() -> Self {
        Self { inner: Arc::default(), changed: Arc::new(watch::channel(0).0) }
    }
}

impl Conditions {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes at every change of a condition's status, reason or message (not at a report that
    /// changes nothing), for the API's event stream.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Reports `type_` (about `subject`, if any) as holding or not, with a reason and a message.
    /// The transition time changes only when the status does; the reason and message always
    /// take the new values. The message is kept as [`crate::sanitize::sanitize`] makes it (no
    /// absolute host paths, no credentials), as every surface that shows it may be remote.
    pub fn set(&self, type_: &str, subject: Option<&str>, holds: bool, reason: &str, message: impl Into<String>) {
        let status = ConditionStatus::from(holds);
        let key = (type_.to_string(), subject.map(str::to_string));
        let message = crate::sanitize::sanitize(&message.into());
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get_mut(&key) {
            Some(c) if c.status == status && c.reason == reason && c.message == message => return,
            Some(c) => {
                if c.status != status {
                    c.status = status;
                    c.last_transition_time = rfc3339(now_millis());
                }
                c.reason = reason.to_string();
                c.message = message;
            }
            None => {
                map.insert(
                    key,
                    HostCondition {
                        type_: type_.to_string(),
                        subject: subject.map(str::to_string),
                        status,
                        reason: reason.to_string(),
                        message,
                        last_transition_time: rfc3339(now_millis()),
                        blocks_readiness: BLOCKS_READINESS.contains(&type_),
                    },
                );
            }
        }
        drop(map);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Reports `type_` as not holding: what is wrong and what to do.
    pub fn fail(&self, type_: &str, subject: Option<&str>, reason: &str, message: impl Into<String>) {
        self.set(type_, subject, false, reason, message);
    }

    /// Reports `type_` as holding again (or for the first time), with a short note.
    pub fn ok(&self, type_: &str, subject: Option<&str>, reason: &str, message: impl Into<String>) {
        self.set(type_, subject, true, reason, message);
    }

    /// Forgets `type_` about `subject` (its subject is gone: a plugin removed, a kind no longer watched).
    pub fn remove(&self, type_: &str, subject: Option<&str>) {
        let key = (type_.to_string(), subject.map(str::to_string));
        if self.inner.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).is_some() {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Every condition reported, sorted by type and subject.
    pub fn list(&self) -> Vec<HostCondition> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// The condition `type_` about `subject`, if reported.
    pub fn get(&self, type_: &str, subject: Option<&str>) -> Option<HostCondition> {
        let key = (type_.to_string(), subject.map(str::to_string));
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Why the host cannot do its job, in words for `/readyz`: every condition that blocks
    /// readiness and is not `True`; `None` when there is none.
    pub fn readiness_problem(&self) -> Option<String> {
        let bad: Vec<String> = self
            .list()
            .into_iter()
            .filter(|c| c.blocks_readiness && c.status != ConditionStatus::True)
            .map(|c| format!("{} is {:?} ({}): {}", c.name(), c.status, c.reason, c.message))
            .collect();
        (!bad.is_empty()).then(|| bad.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes_and_clears_when_repaired() {
        let c = Conditions::new();
        assert!(c.list().is_empty() && c.readiness_problem().is_none());
        c.fail(STORE_WRITABLE, None, "DiskFull", "no space left");
        let first = c.get(STORE_WRITABLE, None).unwrap();
        assert_eq!(first.status, ConditionStatus::False);
        assert!(first.blocks_readiness);
        let why = c.readiness_problem().unwrap();
        assert!(why.contains("StoreWritable is False (DiskFull): no space left"), "{why}");
        c.fail(STORE_WRITABLE, None, "DiskFull", "still no space on /var/lib/steward/state.redb");
        let again = c.get(STORE_WRITABLE, None).unwrap();
        assert_eq!(again.last_transition_time, first.last_transition_time);
        assert_eq!(again.message, "still no space on state.redb", "no host path leaves the host");
        c.ok(STORE_WRITABLE, None, "Committed", "");
        assert_eq!(c.get(STORE_WRITABLE, None).unwrap().status, ConditionStatus::True);
        assert!(c.readiness_problem().is_none());
    }

    #[test]
    fn subjects_are_separate_conditions_and_only_the_store_blocks_readiness() {
        let c = Conditions::new();
        c.fail(PLUGIN_SOURCE, Some("a"), "ArtifactRefused", "bad signature");
        c.ok(PLUGIN_SOURCE, Some("b"), "Current", "");
        assert_eq!(c.list().len(), 2);
        assert_eq!(c.get(PLUGIN_SOURCE, Some("a")).unwrap().name(), "PluginSource (a)");
        assert!(c.readiness_problem().is_none());
        c.remove(PLUGIN_SOURCE, Some("a"));
        assert_eq!(c.list().len(), 1);
    }
}
