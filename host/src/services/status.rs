//! The observed state of one service, shared by its supervisor and readers, with change notification.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use steward_sdk::{ServiceSpec, ServiceStatus, Transport};
use tokio::sync::mpsc::UnboundedSender;

use crate::model::ObjectKey;

/// The phases of the contract, by their short name here.
pub(crate) use steward_sdk::ServicePhase as Phase;

/// The phase a service of `transport` reports before anything happened.
pub(crate) fn initial_phase(transport: Transport) -> Phase {
    match transport {
        Transport::Stdio => Phase::Starting,
        Transport::StreamableHttp | Transport::Sse => Phase::Connecting,
    }
}

/// A fresh status for `spec`: nothing observed yet.
pub(crate) fn fresh(spec: &ServiceSpec) -> ServiceStatus {
    ServiceStatus {
        name: spec.name.clone(),
        phase: initial_phase(spec.transport),
        pid: None,
        restarts: 0,
        consecutive_failures: 0,
        next_retry_at: None,
        last_exit: None,
        healthy: None,
        last_connected: None,
        tools: Vec::new(),
        message: None,
        auth_required: false,
    }
}

/// One service's observed status; every change notifies the owner.
#[derive(Debug)]
pub(crate) struct StatusCell {
    owner: ObjectKey,
    status: Mutex<ServiceStatus>,
    notify: UnboundedSender<ObjectKey>,
    muted: AtomicBool,
    /// Every status it went through, for tests to check transitions they may not catch live.
    #[cfg(test)]
    history: Mutex<Vec<ServiceStatus>>,
}

impl StatusCell {
    /// A cell for `owner`'s service `spec`, reporting changes on `notify`.
    pub(crate) fn new(owner: ObjectKey, spec: &ServiceSpec, notify: UnboundedSender<ObjectKey>) -> Self {
        Self {
            owner,
            status: Mutex::new(fresh(spec)),
            notify,
            muted: AtomicBool::new(false),
            #[cfg(test)]
            history: Mutex::new(vec![fresh(spec)]),
        }
    }

    /// A copy of the current status.
    pub(crate) fn snapshot(&self) -> ServiceStatus {
        self.lock().clone()
    }

    /// Changes the status; when anything differs afterwards, queues the owner.
    pub(crate) fn update(&self, f: impl FnOnce(&mut ServiceStatus)) {
        let mut status = self.lock();
        let before = status.clone();
        f(&mut status);
        if *status == before {
            return;
        }
        if status.phase != before.phase {
            tracing::info!(
                owner = %self.owner,
                service = %status.name,
                from = %before.phase,
                to = %status.phase,
                detail = status.message.as_deref().unwrap_or(""),
                "service phase changed"
            );
        }
        #[cfg(test)]
        self.history.lock().unwrap_or_else(|e| e.into_inner()).push(status.clone());
        drop(status);
        if !self.muted.load(Ordering::Relaxed) {
            // The receiver is gone only when the engine stopped; nothing to tell then.
            let _ = self.notify.send(self.owner.clone());
        }
    }

    /// Every status so far, oldest first.
    #[cfg(test)]
    pub(crate) fn history(&self) -> Vec<ServiceStatus> {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops notifying: the owner no longer has this service.
    pub(crate) fn mute(&self) {
        self.muted.store(true, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ServiceStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }
}
