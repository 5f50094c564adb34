//! One driver per mode: what the engine asks of the filesystem or of the cluster, behind one trait.
//!
//! The engine has no mode branches: reading objects, holding and releasing them (the finalizer),
//! writing status, telling "gone" from "out of scope", events, leadership, readiness, startup
//! and shutdown all go through [`Driver`].

pub mod cluster;
mod file_manage;
mod file_objects;
pub mod files;
pub mod mode;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use steward_sdk::{KindInfo, RawObject};
use tokio::sync::{mpsc, watch};

use crate::kubernetes::writer::WriteError;
use crate::model::{ObjectKey, SourceLocation, StatusRecord};
pub use crate::objects::{ObjectId, ObjectKind, Selected, Selector};
use crate::readiness::Reported;
pub use crate::source::{FileProblem, Source, SourceEvent, SourceObject};

/// Why a driver could not do what the engine asked.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A write to (or read from) the cluster failed; the writer has counted and logged it.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// This replica lost the lease: it writes nothing more.
    #[error("this replica does not lead")]
    NotLeader,
    /// The source could not start watching.
    #[error("cannot watch the resources directory: {0}")]
    Watch(String),
    /// An object of that key exists already.
    #[error("{0} exists already")]
    Exists(ObjectKey),
    /// The mode refuses to create or delete the object; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
}

/// What the mode says to do with an object its source holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Reconcile it (the driver holds it first when the mode needs to).
    Reconcile,
    /// It is being deleted and is the host's to finalize.
    Finalize,
    /// It is being deleted and was never the host's: nothing to do.
    Ignore,
}

/// Where the mode stands with the objects of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindState {
    /// Watched and listed: the source's view of the kind is complete.
    Served,
    /// Not watched (no plugin serves it, or it is disabled).
    Unwatched,
    /// Watched but not listed yet: a missing object is not taken for deleted.
    Unlisted,
}

/// An object that the source no longer holds but the host has a record of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Deleted: finalize it.
    Gone,
    /// Still there but outside this replica's scope: let it go without finalize.
    OutOfScope,
}

/// What starting the driver gives the engine.
pub struct Started {
    /// Changes from the source.
    pub events: mpsc::UnboundedReceiver<SourceEvent>,
    /// Whether every object is to be scheduled now (a full scan is done); otherwise each kind is
    /// scheduled when its watch has listed ([`SourceEvent::KindSynced`]).
    pub schedule_all: bool,
    /// What must live as long as the engine (a file watcher).
    pub keep: Option<Box<dyn Any + Send>>,
    /// Objects of the watched selections ([`Driver::watch_selected`]) that changed or vanished,
    /// each as last seen. `None` when every object the mode holds is an object of the source
    /// (filesystem mode): a change to one reaches the readers that declared it as a read.
    pub selected: Option<mpsc::UnboundedReceiver<Selected>>,
}

pub use crate::kubernetes::leader::Standing;

/// One mode of the host. Implementations: [`files::FilesDriver`] and [`cluster::ClusterDriver`].
/// What a status write found, for the events of the change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The mode keeps no status of its own (filesystem mode): the host's store is the record to
    /// compare with.
    NotKept,
    /// The status the mode holds already says the same: nothing was written, nothing changed.
    Unchanged,
    /// Written over what the status told before (`None`: the object had no status yet). This is
    /// the durable truth a new leader or a restarted host finds, not this replica's memory.
    Changed(Option<Reported>),
}

#[async_trait::async_trait]
pub trait Driver: Send + Sync {
    /// `filesystem` or `kubernetes`.
    fn mode(&self) -> &'static str;

    /// The source of desired state; the engine holds it only through the driver.
    fn source(&self) -> Arc<dyn Source>;

    /// The finalizer the mode holds its objects with, named in messages; `None` when it holds none.
    fn finalizer(&self) -> Option<&'static str>;

    /// Starts watching; called once, after the plugins are loaded and the watched kinds are set.
    async fn start(&self) -> Result<Started, DriverError>;

    /// Watches exactly `kinds` (the enabled kinds of the loaded plugins). A kind watched again
    /// lists again and is scheduled as at start.
    fn set_kinds(&self, kinds: &[KindInfo]);

    /// A kind's watch has (re)listed: true the first time since it is watched (schedule it as at
    /// start), false for a relist (look for what vanished).
    fn listed(&self, kind: &str) -> bool;

    /// Where the mode stands with `kind`.
    fn kind_state(&self, kind: &str) -> KindState;

    /// Ready to serve `kinds`, or why not, in words.
    fn readiness(&self, kinds: &[String]) -> Result<(), String>;

    /// Whether this replica leads now (always in filesystem mode).
    fn leads(&self) -> bool;

    /// Leadership as it changes; `true` at once and for ever in filesystem mode.
    fn leadership(&self) -> watch::Receiver<bool>;

    /// This replica's place in leader election; `None` when no election runs (filesystem
    /// mode, or `kubernetes.leaderElection.enabled: false`).
    fn standing(&self) -> Option<Standing> {
        None
    }

    /// What to do with `obj`, which the host has a record of (`known`) or not.
    fn lifecycle(&self, key: &ObjectKey, obj: &SourceObject, known: bool) -> Lifecycle;

    /// Holds the object (its finalizer) before a reconcile; the plugin is not called when it fails.
    async fn hold(&self, key: &ObjectKey) -> Result<(), DriverError>;

    /// Lets a finalized object go (removes its finalizer). The engine records the `Finalized`
    /// event once this succeeds, whether the object is still there or already gone.
    async fn release(&self, key: &ObjectKey) -> Result<(), DriverError>;

    /// Writes `rec` where the mode keeps status beside the host's store (the status
    /// subresource), and says what the status told before, for the events of the change. A
    /// failed write is remembered ([`status_unwritten`](Self::status_unwritten)) until one succeeds.
    async fn write_status(&self, key: &ObjectKey, rec: &StatusRecord) -> Result<Written, DriverError>;

    /// Whether the last status of `key` did not reach the mode's status store yet.
    fn status_unwritten(&self, key: &ObjectKey) -> bool;

    /// Whether an object the source no longer holds is gone or only out of scope.
    async fn presence(&self, key: &ObjectKey) -> Result<Presence, DriverError>;

    /// Publishes an event about `key` for people (Kubernetes Events; nothing in filesystem mode).
    fn publish(&self, key: &ObjectKey, warning: bool, reason: &str, action: &str, note: &str);

    /// Creates `obj`, of kind `kind`, where the mode keeps desired state (a file the host owns,
    /// or the custom resource); the source then sees it as any other object.
    async fn create(&self, kind: &KindInfo, obj: &RawObject) -> Result<(), DriverError>;

    /// Deletes `key` where the mode keeps desired state; refused for what the host may not delete.
    async fn delete(&self, kind: &KindInfo, key: &ObjectKey) -> Result<(), DriverError>;

    /// Replaces the spec of the object `obj` where the mode keeps it,
    /// `from` where the source found it (the file, or the API path). Refused when the mode
    /// cannot rewrite it alone (a file that defines other objects too).
    async fn replace(&self, kind: &KindInfo, obj: &RawObject, from: &SourceLocation) -> Result<(), DriverError> {
        let _ = (kind, from);
        Err(DriverError::Refused(format!("the {} mode cannot replace {}", self.mode(), obj.name)))
    }

    /// Removes `key`, defined `from` (the file, or the API path), wherever the user put it: a
    /// file that defines only this object is deleted; one that defines others too is refused.
    async fn remove(&self, kind: &KindInfo, key: &ObjectKey, from: &SourceLocation) -> Result<(), DriverError> {
        let _ = (kind, from);
        Err(DriverError::Refused(format!("the {} mode cannot remove {key}", self.mode())))
    }

    /// The mode's unique id of the source's object `key` (Kubernetes' `metadata.uid`), for
    /// references to it; `Ok(None)` in a mode without ids (filesystem mode). An error when the
    /// mode has ids but does not hold `key` (yet).
    fn uid(&self, key: &ObjectKey) -> Result<Option<String>, DriverError>;

    /// Keeps a cache of the objects of exactly `kinds` that `selector` selects, in the namespaces
    /// this replica serves, replacing what was watched before. Each change of one (and each one
    /// that vanishes) is sent on [`Started::selected`] when the mode sends them there.
    fn watch_selected(&self, kinds: &[ObjectKind], selector: &Selector);

    /// The objects of `kinds` in `namespace` that `selector` selects, as last seen (the cache of
    /// [`watch_selected`](Self::watch_selected); only objects within the watched kinds and
    /// selector are there), in a stable order.
    fn list_selected(&self, kinds: &[ObjectKind], namespace: &str, selector: &Selector) -> Vec<Selected>;

    /// The objects of `kinds` in `namespace` that `selector` selects as the mode holds them now
    /// (Kubernetes: listed from the API server, not the cache), for what must leave nothing
    /// behind.
    async fn list_selected_now(
        &self,
        kinds: &[ObjectKind],
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<Selected>, DriverError>;

    /// Creates or updates the whole object `obj` (`apiVersion`, `kind`, `metadata.name`,
    /// `metadata.namespace`, the rest) so that the mode holds what it says. Kubernetes:
    /// server-side apply under the host's field manager, forced; the object itself says who
    /// owns it (its owner references), and the write is counted under `owner`'s kind. Filesystem:
    /// a file of the host, of a kind a plugin serves, written only when its text changes; its
    /// first line names `owner` (the object it is made for), and a file the host did not write
    /// for that owner is never written over. Returns the object as the mode holds it after the
    /// write, which [`list_selected`](Self::list_selected) shows at once where the mode caches.
    /// Only the leader writes ([`DriverError::NotLeader`]); a refusal says why, for the owner's
    /// status.
    async fn apply_object(&self, obj: &Value, owner: Option<&ObjectKey>) -> Result<Value, DriverError>;

    /// Deletes the object `id`; one already gone is fine. Kubernetes: only that very object when
    /// its `uid` is given (one made since in its place stays), counted under `owner`'s kind.
    /// Filesystem: only a file the host wrote for `owner` (or created, without one); any other
    /// is left alone. Only the leader deletes.
    async fn delete_object(&self, id: &ObjectId, owner: Option<&ObjectKey>) -> Result<(), DriverError>;

    /// Gives up what the mode holds (the lease), waiting up to `grace`.
    async fn shutdown(&self, grace: Duration);
}
