//! Kubernetes mode: CRDs and RBAC from plugins, watches, status subresource, finalizers, leader election.

pub mod cluster;
pub mod crd;
pub mod events;
pub mod finalizer;
pub mod leader;
pub mod objects;
pub mod rbac;
pub mod secrets;
pub mod selector;
pub mod source;
pub mod webhook;
pub mod writer;

/// The key under `.status` where the host keeps its own fields (phase, lastReconcileTime,
/// retryCount, lastError), beside the plugin's status fields, `conditions` and `observedGeneration`.
pub const HOST_STATUS_KEY: &str = "steward";

/// The finalizer the host puts on every object it reconciles, so a delete waits for the plugin's `finalize`.
pub const FINALIZER: &str = "steward.dev/finalizer";

/// The field manager the host names in its writes.
pub const FIELD_MANAGER: &str = "steward";
