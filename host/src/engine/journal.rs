//! The host's own history of the events it recorded about objects, the same in both modes, for the API (`GET /api/v1/resources/KIND/NS/NAME/events`).

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::model::{Millis, Name, ObjectKey};

/// How many events the host keeps, all objects together; the oldest go first.
pub const JOURNAL_LEN: usize = 4096;

/// One event the host recorded about an object: the same that went to the log and, in
/// Kubernetes mode, to a Kubernetes Event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedEvent {
    /// When, in milliseconds since the epoch.
    pub time: Millis,
    /// The object, `KIND/NAMESPACE/NAME`.
    pub object: String,
    /// `Normal` or `Warning`, as Kubernetes has it.
    #[serde(rename = "type")]
    pub type_: Name,
    /// Why, in CamelCase (`Failed`, `Healthy`, `Finalized`, …).
    pub reason: String,
    /// What the host was doing: `Reconcile` or `Finalize`.
    pub action: Name,
    /// The sentence for people.
    pub message: String,
}

/// The last [`JOURNAL_LEN`] events, oldest first. It lives as long as the process: a restarted
/// host starts empty, and records nothing again for objects whose state did not change.
#[derive(Default)]
pub struct Journal(Mutex<VecDeque<RecordedEvent>>);

impl Journal {
    /// Keeps `event`, letting the oldest go beyond [`JOURNAL_LEN`].
    pub fn record(&self, event: RecordedEvent) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= JOURNAL_LEN {
            all.pop_front();
        }
        all.push_back(event);
    }

    /// Every event kept, oldest first.
    pub fn all(&self) -> Vec<RecordedEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// The events about `object` (`KIND/NAMESPACE/NAME`), oldest first.
    pub fn of(&self, object: &str) -> Vec<RecordedEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|e| e.object == object).cloned().collect()
    }
}

impl Engine {
    /// Records an event about `key`: the host's log, its [`Journal`], and the mode's own events
    /// (Kubernetes Events; filesystem mode keeps only the journal).
    pub(super) fn record_event(
        &self,
        key: &ObjectKey,
        warning: bool,
        reason: String,
        action: &'static str,
        message: String,
    ) {
        if warning {
            tracing::warn!(reason = %reason, "event: {message}");
        } else {
            tracing::info!(reason = %reason, "event: {message}");
        }
        self.driver.publish(key, warning, &reason, action, &message);
        self.journal.record(RecordedEvent {
            time: crate::model::now_millis(),
            object: key.text(),
            type_: Name::word(if warning { "Warning" } else { "Normal" }),
            reason,
            action: Name::word(action),
            message,
        });
    }

    /// Every event this host recorded since it started (the last [`JOURNAL_LEN`]), oldest first.
    pub fn recorded_events(&self) -> Vec<RecordedEvent> {
        self.journal.all()
    }

    /// The events this host recorded about `key` since it started, oldest first; they outlive
    /// the object (its `Finalized` event is the last).
    pub fn events_of(&self, key: &ObjectKey) -> Vec<RecordedEvent> {
        self.journal.of(&key.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(object: &str, reason: &str) -> RecordedEvent {
        RecordedEvent {
            time: 1,
            object: object.into(),
            type_: Name::word("Normal"),
            reason: reason.into(),
            action: Name::word("Reconcile"),
            message: String::new(),
        }
    }

    #[test]
    fn the_journal_keeps_the_newest_events_per_object_in_order() {
        let j = Journal::default();
        j.record(event("A/ns/a", "One"));
        j.record(event("A/ns/b", "Other"));
        j.record(event("A/ns/a", "Two"));
        let reasons: Vec<String> = j.of("A/ns/a").into_iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["One", "Two"]);
        for _ in 0..JOURNAL_LEN {
            j.record(event("A/ns/c", "Many"));
        }
        assert!(j.of("A/ns/a").is_empty(), "the oldest went first");
        assert_eq!(j.of("A/ns/c").len(), JOURNAL_LEN);
    }

    #[test]
    fn an_events_fixed_words_are_shared_and_others_kept_as_given() {
        let (a, b) = (Name::word("Warning"), Name::word("Warning"));
        assert!(std::ptr::eq(a.as_str(), b.as_str()), "one allocation for a word every event repeats");
        assert_eq!(Name::word("Finalize").as_str(), "Finalize");
        assert_eq!(Name::word("Other").as_str(), "Other");
        let e = event("A/ns/a", "One");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!((json["type"].as_str(), json["action"].as_str()), (Some("Normal"), Some("Reconcile")));
        assert_eq!(serde_json::from_value::<RecordedEvent>(json).unwrap(), e, "it reads back as it was written");
    }
}
