//! What the API and the command line ask of a running engine: state, readiness, triggers, kinds on and off, shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::startup::DISABLED_KINDS;
use super::{Engine, EngineError, RequestError};
use crate::config::Config;
use crate::driver::DriverError;
use crate::driver::SourceObject;
use crate::metrics::Metrics;
use crate::model::{ObjectKey, Reason};
use crate::plugin::PluginSet;
use steward_sdk::RawObject;

impl Engine {
    /// The config it runs with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The plugins.
    pub fn plugins(&self) -> &Arc<PluginSet> {
        &self.plugins
    }

    /// The capability units as they run (the faces reach their executors through it).
    pub fn units(&self) -> &crate::capabilities::Started {
        &self.units
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The host's own conditions (store, resources directory, plugin sources, watches, webhook).
    pub fn conditions(&self) -> &crate::health::Conditions {
        &self.conditions
    }

    /// Waits at most `within` for everything written so far to be durably committed.
    ///
    /// # Errors
    ///
    /// [`EngineError::Store`] naming the store file when a commit failed or is still failing
    /// (disk full, I/O error) after `within`.
    pub async fn flush_store(&self, within: Duration) -> Result<(), EngineError> {
        match tokio::time::timeout(within, self.store.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(EngineError::Store(e.to_string())),
            Err(_) => Err(EngineError::Store(format!(
                "the state store {} could not commit its last {} write(s) within {within:?}: {}",
                self.store.path().display(),
                self.store.stats().pending,
                self.conditions
                    .get(crate::health::STORE_WRITABLE, None)
                    .map_or_else(|| "its commits fail".to_string(), |c| c.message)
            ))),
        }
    }

    /// True once the first full scan and the plugin load are done (Kubernetes mode: and every
    /// watched kind has listed, and this replica leads).
    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// Ready, or why not, in words for `/readyz`.
    pub fn readiness(&self) -> Result<(), String> {
        // The host's own conditions first: a store that cannot write means the host cannot do its job.
        if let Some(why) = self.conditions.readiness_problem() {
            return Err(why);
        }
        if !self.ready.load(Ordering::Acquire) {
            return Err("plugins or the first full scan are still loading".into());
        }
        let kinds: Vec<String> = self
            .plugins
            .plugins()
            .iter()
            .flat_map(|p| crate::plugin::served_kinds(p))
            .filter(|k| !self.is_disabled(k))
            .collect();
        self.driver.readiness(&kinds)
    }

    /// The object as the source's cache holds it now (the files, or the cluster's watch).
    pub fn cached(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.source().get(key)
    }

    /// The running mode: `kubernetes` or `filesystem`.
    pub fn mode(&self) -> &'static str {
        self.driver.mode()
    }

    /// Whether this replica may reconcile now: always in filesystem mode or with leader election
    /// off; in Kubernetes mode while it holds the lease.
    pub fn is_leader(&self) -> bool {
        self.driver.leads()
    }

    /// Keys ready for a worker.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Keys ready, running, or waiting for a retry or resync deadline that is already due.
    pub fn busy(&self) -> usize {
        self.queue.len() + self.queue.processing_len()
    }

    /// Whether `kind` is disabled.
    pub fn is_disabled(&self, kind: &str) -> bool {
        self.disabled.read().unwrap_or_else(|p| p.into_inner()).contains(kind)
    }

    /// Queues `key` now as a manual trigger (a `Failed` object is retried).
    pub fn trigger(&self, key: &ObjectKey) -> Result<(), RequestError> {
        if self.source().get(key).is_none() && self.store.get(&key.text()).is_none() {
            return Err(RequestError::NotFound(key.clone()));
        }
        self.enqueue(key, Reason::ManualTrigger);
        Ok(())
    }

    /// Creates `obj` (with `spec` JSON text), of a kind the host creates itself
    /// ([`crate::model::HOST_CREATED_KINDS`]: WorkflowRun), where the mode keeps desired state: in filesystem
    /// mode a YAML file the host writes under the resources directory
    /// (`<plural>/<namespace>/<name>.yaml`), in Kubernetes mode the custom resource in the
    /// cluster. The object is queued like any other once the source sees it. Refused for a kind
    /// no loaded plugin serves, and for a key that exists.
    pub async fn create_object(&self, obj: RawObject) -> Result<ObjectKey, RequestError> {
        let key = ObjectKey::new(&obj.kind, &obj.namespace, &obj.name);
        // Only the kinds the host itself creates: anything else (an MCPServer names a command the
        // host runs) is for files and `kubectl`, where its author is who wrote it.
        if !crate::model::HOST_CREATED_KINDS.contains(&obj.kind.as_str()) {
            return Err(RequestError::Refused(format!(
                "the API creates and deletes objects of kind {} only; write a {} as a file of the resources \
                 directory (filesystem mode) or apply it to the cluster",
                crate::model::HOST_CREATED_KINDS.join(", "),
                obj.kind
            )));
        }
        let info = self
            .plugins
            .plugins()
            .iter()
            .find_map(|p| p.info().kinds.iter().find(|k| k.kind == obj.kind).cloned())
            .ok_or_else(|| RequestError::UnknownKind(obj.kind.clone()))?;
        if !info.namespaced {
            return Err(RequestError::Refused(format!(
                "kind {} is cluster-scoped; the API creates namespaced objects only",
                obj.kind
            )));
        }
        if self.source().get(&key).is_some() {
            return Err(RequestError::Exists(key));
        }
        self.driver.create(&info, &obj).await.map_err(request_error)?;
        Ok(key)
    }

    /// Deletes `key` where the mode keeps desired state: in filesystem mode only an object the
    /// host created ([`Engine::create_object`]) — a file the user wrote is theirs to delete;
    /// in Kubernetes mode the custom resource. Its finalize then runs as for any delete.
    pub async fn delete_object(&self, key: &ObjectKey) -> Result<(), RequestError> {
        if !crate::model::HOST_CREATED_KINDS.contains(&key.kind().as_str()) {
            return Err(RequestError::Refused(format!(
                "the API creates and deletes objects of kind {} only; delete a {} from its file or the cluster",
                crate::model::HOST_CREATED_KINDS.join(", "),
                key.kind()
            )));
        }
        if self.source().get(key).is_none() {
            return Err(RequestError::NotFound(key.clone()));
        }
        let info = self
            .plugins
            .plugins()
            .iter()
            .find_map(|p| p.info().kinds.iter().find(|k| k.kind == **key.kind()).cloned())
            .ok_or_else(|| RequestError::UnknownKind(key.kind().to_string()))?;
        self.driver.delete(&info, key).await.map_err(request_error)
    }

    /// Enables or disables `kind` (persisted). Enabling queues its objects; disabling queues them
    /// too, so that in a mode that holds them their status says the kind is disabled.
    pub async fn set_kind_enabled(&self, kind: &str, enabled: bool) -> Result<(), RequestError> {
        let known = self.plugins.plugins().iter().any(|p| p.info().kinds.iter().any(|k| k.kind == kind))
            || !self.source().list(kind, None).is_empty();
        if !known {
            return Err(RequestError::UnknownKind(kind.to_string()));
        }
        let list = {
            let mut d = self.disabled.write().unwrap_or_else(|p| p.into_inner());
            if enabled {
                d.remove(kind);
            } else {
                d.insert(kind.to_string());
            }
            serde_json::to_string(&*d).unwrap_or_else(|_| "[]".into())
        };
        if let Err(e) = self.store.put_meta(DISABLED_KINDS.into(), list).await {
            tracing::error!(error = %e, "cannot persist the enabled kinds");
        }
        // A disabled kind's watch stops (Kubernetes mode); enabling it starts the watch again.
        self.sync_watches();
        // A world holding the kind cannot round without it (and can again once it is back).
        self.touch_worlds(kind);
        let reason = if enabled { Reason::KindEnabled } else { Reason::KindDisabled };
        for key in self.keys_of_kinds(&[kind.to_string()]) {
            self.enqueue(&key, reason);
        }
        tracing::info!(kind, enabled, "kind switched");
        Ok(())
    }

    /// Stops taking new work, lets running reconciles finish for up to `grace`, flushes the store,
    /// and gives up what the mode holds (the lease) so a standby takes over at once.
    pub async fn shutdown(&self, grace: Duration) {
        self.queue.shutdown();
        let mut workers: Vec<_> = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        if !self.driver.leads() {
            // A standby's workers wait for the lease, not on work: nothing to let finish.
            for w in &workers {
                w.abort();
            }
        }
        if tokio::time::timeout(grace, join_all(&mut workers)).await.is_err() {
            tracing::warn!(?grace, "reconciles still running after the grace period; stopping them");
            // Stopped before the lease is given up, so they cannot write beside the new leader.
            for w in &workers {
                w.abort();
            }
        }
        let tasks: Vec<_> = self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for t in &tasks {
            t.abort();
        }
        // Each aborted task is gone (with what it held of the engine: the store above all) once
        // its handle answers, so a host started again at once finds the store free.
        for t in tasks {
            let _ = t.await;
        }
        // Nothing reconciles any more: give the lease up first, so a standby takes over while
        // this replica stops its services and flushes its store.
        self.driver.shutdown(grace).await;
        self.units.shutdown(grace).await;
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).clear();
        // Bounded: a store that cannot write (disk full) keeps its writes and retries; the host
        // checks again with `flush_store` and exits non-zero if they are still not committed.
        if let Err(e) = self.flush_store(grace).await {
            tracing::error!(error = %e, "cannot flush the state store");
        }
    }
}

/// What a driver's refusal means to the API.
fn request_error(e: DriverError) -> RequestError {
    match e {
        DriverError::Exists(key) => RequestError::Exists(key),
        DriverError::Refused(m) => RequestError::Refused(m),
        other => RequestError::Unavailable(other.to_string()),
    }
}

async fn join_all(handles: &mut [JoinHandle<()>]) {
    for h in handles {
        let _ = h.await;
    }
}
