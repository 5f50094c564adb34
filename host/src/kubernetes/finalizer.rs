//! The host's finalizer on each object it reconciles, as one state machine: hold before the first reconcile, finalize on delete, then let go.
//!
//! # The states and their steps
//!
//! An object is *live* (no deletion timestamp) or *deleting*, and *held* (it carries
//! [`FINALIZER`]) or not. [`step`] says what the host does next in each state:
//!
//! | state                                  | step                                  |
//! |----------------------------------------|---------------------------------------|
//! | live, not held                         | [`Step::Hold`]: add the finalizer, then reconcile |
//! | live, held                             | [`Step::Reconcile`]                   |
//! | deleting, held (or known to the host)  | [`Step::Finalize`]: call `finalize`, then [`release`] |
//! | deleting, not held and never recorded  | [`Step::Ignore`]: not ours to finalize |
//!
//! # Guarantees
//!
//! - **No reconcile without the finalizer.** The engine calls [`hold`] before every reconcile and
//!   does not call the plugin when it fails, so a delete of an object the plugin has seen always
//!   waits for its `finalize`.
//! - **A deleting object is never held anew.** Kubernetes refuses new finalizers on an object being
//!   deleted; [`hold`] does not try, and an object deleted before it was ever held is not finalized.
//! - **The finalizer goes only after a successful `finalize`.** [`release`] is the last step of a
//!   finalize that succeeded, and it reads the object fresh (the cache may lag the deletion).
//! - **At least once, not exactly once.** A crash between `finalize` and [`release`], or a release
//!   that fails, runs `finalize` again: it must be idempotent.
//! - **Out of scope is not deleted.** An object that left this replica's scope (labels, namespace)
//!   is let go without `finalize`, keeping its finalizer for the replica that now serves it; an object
//!   whose kind is disabled or has no plugin keeps its finalizer until it is served again or an
//!   operator removes it.
//! - **Writes are safe under concurrency.** Each edit is a merge patch that names the
//!   `resourceVersion` it read; a conflict reads again and retries, up to the writer's retries.

use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::writer::{Category, ClusterWriter, WriteError, categorize, is_gone};
use super::{FIELD_MANAGER, FINALIZER};
use crate::model::ObjectKey;

/// What the host does next with an object, from its state (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Live and not held: add the finalizer, then reconcile.
    Hold,
    /// Live and held: reconcile.
    Reconcile,
    /// Being deleted and ours: call `finalize`, then release the finalizer.
    Finalize,
    /// Being deleted and never ours: nothing to do.
    Ignore,
}

/// The next step for an object that is `deleting` or not, `held` by the host's finalizer or not,
/// and `known` to the host (it has a record of it) or not.
pub fn step(deleting: bool, held: bool, known: bool) -> Step {
    match (deleting, held || known) {
        (false, _) if held => Step::Reconcile,
        (false, _) => Step::Hold,
        (true, true) => Step::Finalize,
        (true, false) => Step::Ignore,
    }
}

/// Whether `finalizers` holds the host's finalizer.
pub fn holds(finalizers: Option<&[String]>) -> bool {
    finalizers.is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// The finalizer list to write to hold (`add`) or release the object, or `None` when nothing is
/// to be written: it is already so, or (to hold) the object is being deleted.
pub fn edited(finalizers: &[String], deleting: bool, add: bool) -> Option<Vec<String>> {
    let has = finalizers.iter().any(|f| f == FINALIZER);
    if has == add || (add && deleting) {
        return None;
    }
    let mut list = finalizers.to_vec();
    if add {
        list.push(FINALIZER.to_string());
    } else {
        list.retain(|f| f != FINALIZER);
    }
    Some(list)
}

/// Adds the host's finalizer unless the object has it, is being deleted, or is gone. Returns
/// whether it wrote.
pub async fn hold(writer: &ClusterWriter, key: &ObjectKey) -> Result<bool, WriteError> {
    let out = edit(writer, key, true).await;
    writer.account(key, "finalizer", &out);
    out
}

/// Removes the host's finalizer, letting a finalized object go. Returns whether it wrote.
pub async fn release(writer: &ClusterWriter, key: &ObjectKey) -> Result<bool, WriteError> {
    let out = edit(writer, key, false).await;
    writer.account(key, "finalizer", &out);
    out
}

async fn edit(writer: &ClusterWriter, key: &ObjectKey, add: bool) -> Result<bool, WriteError> {
    let err = |e: &kube::Error| WriteError { category: categorize(e), op: "finalizer", message: e.to_string() };
    // An object the cache shows held (or being deleted) needs nothing: no copy, no request built.
    if add
        && let Some(cached) = writer.cached(key)
        && edited(
            cached.metadata.finalizers.as_deref().unwrap_or_default(),
            cached.metadata.deletion_timestamp.is_some(),
            true,
        )
        .is_none()
    {
        return Ok(false);
    }
    let Some(api) = writer.api(key) else { return Ok(false) };
    // Release reads fresh: the cache may lag behind the deletion that asks for it.
    let mut obj = if add {
        match writer.current(&api, key).await.map_err(|e| err(&e))? {
            Some(o) => o,
            None => return Ok(false),
        }
    } else {
        match api.get(key.name()).await {
            Ok(o) => o,
            Err(e) if is_gone(&e, key.name()) => return Ok(false),
            Err(e) => return Err(err(&e)),
        }
    };
    for attempt in 1..=writer.retries() {
        let current = obj.metadata.finalizers.clone().unwrap_or_default();
        let Some(list) = edited(&current, obj.metadata.deletion_timestamp.is_some(), add) else {
            return Ok(false);
        };
        if !add {
            writer.forget_written(key);
        }
        let patch = json!({
            "metadata": { "finalizers": list, "resourceVersion": obj.metadata.resource_version }
        });
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        match api.patch(key.name(), &params, &Patch::Merge(&patch)).await {
            Ok(done) => {
                if add {
                    writer.remember_held(key, done);
                }
                return Ok(true);
            }
            Err(e) if is_gone(&e, key.name()) => return Ok(false),
            Err(e) if categorize(&e) == Category::Conflict && attempt < writer.retries() => {
                writer.conflict(key, "finalizer");
                obj = match api.get(key.name()).await {
                    Ok(o) => o,
                    Err(e) if is_gone(&e, key.name()) => return Ok(false),
                    Err(e) => return Err(err(&e)),
                };
            }
            Err(e) => return Err(err(&e)),
        }
    }
    Err(WriteError { category: Category::Conflict, op: "finalizer", message: "conflict on every attempt".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_has_one_step() {
        // (deleting, held, known) -> step
        let table = [
            ((false, false, false), Step::Hold),
            ((false, false, true), Step::Hold),
            ((false, true, false), Step::Reconcile),
            ((false, true, true), Step::Reconcile),
            ((true, true, false), Step::Finalize),
            ((true, true, true), Step::Finalize),
            ((true, false, true), Step::Finalize),
            ((true, false, false), Step::Ignore),
        ];
        for ((deleting, held, known), want) in table {
            assert_eq!(step(deleting, held, known), want, "deleting={deleting} held={held} known={known}");
        }
    }

    #[test]
    fn holding_adds_the_finalizer_once_and_never_to_a_deleting_object() {
        let other = vec!["other.io/keep".to_string()];
        assert_eq!(edited(&other, false, true), Some(vec!["other.io/keep".to_string(), FINALIZER.to_string()]));
        let held = vec!["other.io/keep".to_string(), FINALIZER.to_string()];
        assert_eq!(edited(&held, false, true), None, "already held: no write");
        assert_eq!(edited(&other, true, true), None, "a deleting object is not held anew");
    }

    #[test]
    fn releasing_removes_only_the_hosts_finalizer() {
        let held = vec!["a.io/x".to_string(), FINALIZER.to_string(), "b.io/y".to_string()];
        assert_eq!(edited(&held, true, false), Some(vec!["a.io/x".to_string(), "b.io/y".to_string()]));
        assert_eq!(edited(&["a.io/x".to_string()], true, false), None, "not held: nothing to release");
        assert!(holds(Some(&held)));
        assert!(!holds(Some(&["a.io/x".to_string()])));
        assert!(!holds(None));
    }
}
