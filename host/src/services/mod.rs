//! The owned-services driver: converges each owner's services to what its plugin wants, supervises them, and reports what it observes.
//!
//! A stdio service is a child process speaking MCP over its stdin/stdout; a
//! remote one (`streamable-http`, `sse`) is a URL. [`ServiceManager::ensure`]
//! takes the wanted [`ServiceSpec`]s of one owner and starts, restarts (spec
//! changed) or stops services to match; one task per service supervises it,
//! probes it with the MCP handshake, restarts it with exponential backoff, and
//! updates its [`ServiceStatus`]. Every change of an observed field sends the
//! owner's key on the channel [`ServiceManager::start`] returns.
//!
//! No child outlives the host: each runs in its own process group with
//! `PR_SET_PDEATHSIG=SIGKILL` (forked from one long-lived thread), groups are
//! recorded in `services.json` in the state directory, and the next start
//! kills the groups a `kill -9`ed run left behind.

mod forward;
mod framing;
mod http;
mod live;
mod logtail;
mod offered;
mod orphans;
mod probe;
mod process;
mod raw;
mod redact;
mod remote;
mod secrets;
mod status;
mod stdio;
mod supervisor;
mod taken;
#[cfg(test)]
mod tests;
mod watched;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use steward_sdk::{ServiceSpec, ServiceStatus};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::metrics::ServiceLabel;
use crate::model::ObjectKey;

pub use forward::{Asker, Relay, Reservation, Subscription, asker, asking};
pub use live::LiveSession;
pub use offered::{MAX_ITEMS as MAX_OFFERED, Offered, ResourceUpdate};
pub(crate) use probe::{error_text, request_failure};
pub use raw::{RELATED_TASK, Raw};
pub use secrets::{ReadFuture, SecretReadError, SecretReader, Secrets};
pub(crate) use supervisor::human;

/// How the driver supervises; [`ServiceOptions::new`] gives the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceOptions {
    /// Where the driver records its live children (`services.json`), so a later run can reap them.
    pub state_dir: PathBuf,
    /// Time between health probes of a running service (default 30s).
    pub health_interval: Duration,
    /// Wait before the first restart or reconnect (default 1s); doubles on each failure in a row.
    pub initial_backoff: Duration,
    /// The longest wait between restarts or reconnects (default 60s).
    pub max_backoff: Duration,
    /// Time a process gets between SIGTERM and SIGKILL (default 5s).
    pub stop_grace: Duration,
    /// Failed health probes in a row after which a stdio process is restarted (default 3).
    pub max_failed_probes: u32,
}

impl ServiceOptions {
    /// The defaults, recording children in `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            health_interval: Duration::from_secs(30),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            stop_grace: Duration::from_secs(5),
            max_failed_probes: 3,
        }
    }
}

/// Why the driver cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// It was called outside a tokio runtime.
    #[error("the services driver must be started inside a tokio runtime")]
    NoRuntime,
    /// The state directory cannot be created or written.
    #[error("services state directory `{path}`: {source}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// One supervised service.
#[derive(Debug)]
struct Entry {
    desired: watch::Sender<Option<ServiceSpec>>,
    status: Arc<status::StatusCell>,
    live: Arc<live::LiveCell>,
    task: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Inner {
    owners: BTreeMap<ObjectKey, BTreeMap<String, Entry>>,
    /// Supervisors of services no longer wanted, still stopping their process.
    retiring: Vec<JoinHandle<()>>,
    closed: bool,
}

/// The owned-services driver. Share it as `Arc<ServiceManager>`; every method but
/// [`ServiceManager::shutdown`] is cheap and never blocks on a service.
#[derive(Debug)]
pub struct ServiceManager {
    opts: Arc<ServiceOptions>,
    state: Arc<orphans::StateFile>,
    notify: mpsc::UnboundedSender<ObjectKey>,
    runtime: tokio::runtime::Handle,
    secrets: Secrets,
    restarts: supervisor::RestartCounter,
    /// Where live sessions say that what they offer changed, and relay resource updates.
    hub: Arc<offered::Hub>,
    inner: Mutex<Inner>,
}

impl ServiceManager {
    /// Starts the driver inside the current tokio runtime, after killing what an earlier run left in
    /// `opts.state_dir`. The receiver yields the owner of every service whose observed status changed.
    /// `secrets` says where the values of services' secret references may be read (the mode).
    pub fn start(
        opts: ServiceOptions,
        secrets: Secrets,
    ) -> Result<(Arc<Self>, mpsc::UnboundedReceiver<ObjectKey>), ServiceError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ServiceError::NoRuntime)?;
        let dir_err = |source| ServiceError::StateDir { path: opts.state_dir.clone(), source };
        std::fs::create_dir_all(&opts.state_dir).map_err(dir_err)?;
        match orphans::reap_orphans(&opts.state_dir) {
            Ok(groups) if !groups.is_empty() => {
                tracing::warn!(?groups, "killed service process groups left by an earlier run");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(dir = %opts.state_dir.display(), error = %e, "cannot read the services state file")
            }
        }
        let state = orphans::StateFile::create(&opts.state_dir).map_err(dir_err)?;
        let (notify, rx) = mpsc::unbounded_channel();
        let manager = Self {
            opts: Arc::new(opts),
            state: Arc::new(state),
            notify,
            runtime,
            secrets,
            restarts: Default::default(),
            hub: Arc::default(),
            inner: Mutex::default(),
        };
        Ok((Arc::new(manager), rx))
    }

    /// Counts every restart of a service from now on in `family` (the host's
    /// `steward_service_restarts_total`), labelled with the owner and the service's name. The
    /// first call wins; without one, restarts are only in each service's status.
    pub fn count_restarts_in(&self, family: Family<ServiceLabel, Counter>) {
        let _ = self.restarts.set(family);
    }

    /// Converges `owner`'s services to exactly `desired`, by name: starts the new ones, restarts those
    /// whose spec changed, stops the others. Idempotent, and cheap when nothing changed.
    ///
    /// A service whose spec changed is stopped, then started again with a fresh status (`restarts`
    /// and `consecutive_failures` from 0). When two specs share a name the first wins. Removing a
    /// service is not notified (the caller asked for it); everything the supervisors observe is.
    pub fn ensure(&self, owner: &ObjectKey, desired: Vec<ServiceSpec>) {
        let mut inner = self.lock();
        if inner.closed {
            tracing::warn!(%owner, "services driver is shut down; ignoring the wanted services");
            return;
        }
        // Most objects own no service: nothing to start, stop or look at.
        if desired.is_empty() && !inner.owners.contains_key(owner) {
            return;
        }
        let mut wanted: BTreeMap<String, ServiceSpec> = BTreeMap::new();
        for spec in desired {
            if wanted.contains_key(&spec.name) {
                tracing::warn!(%owner, service = %spec.name, "two services share this name; the first wins");
                continue;
            }
            wanted.insert(spec.name.clone(), spec);
        }
        let Inner { owners, retiring, .. } = &mut *inner;
        let services = owners.entry(owner.clone()).or_default();
        let unwanted: Vec<String> = services.keys().filter(|n| !wanted.contains_key(*n)).cloned().collect();
        for name in unwanted {
            if let Some(entry) = services.remove(&name) {
                tracing::info!(%owner, service = %name, "service no longer wanted; stopping it");
                retire(retiring, entry);
            }
        }
        for (name, spec) in wanted {
            match services.get_mut(&name) {
                Some(entry) if !entry.task.is_finished() => {
                    entry.desired.send_if_modified(|cur| {
                        if cur.as_ref() == Some(&spec) {
                            return false;
                        }
                        tracing::info!(%owner, service = %name, "service spec changed; restarting it");
                        *cur = Some(spec);
                        true
                    });
                }
                _ => {
                    let entry = self.spawn_supervisor(owner, spec);
                    if let Some(old) = services.insert(name, entry) {
                        retire(retiring, old);
                    }
                }
            }
        }
        if services.is_empty() {
            owners.remove(owner);
        }
    }

    fn spawn_supervisor(&self, owner: &ObjectKey, spec: ServiceSpec) -> Entry {
        let status = Arc::new(status::StatusCell::new(owner.clone(), &spec, self.notify.clone()));
        // A root span: the supervisor outlives the reconcile that started it, which must not
        // stay open (nor unexported) for as long; the first start joins that reconcile's trace.
        let span = tracing::info_span!(parent: None, "service", %owner, service = %spec.name);
        let cause = crate::telemetry::current_context();
        let ties = offered::Ties::new(owner.clone(), spec.name.clone(), self.hub.clone());
        let (desired, rx) = watch::channel(Some(spec));
        let live = Arc::new(live::LiveCell::new(ties));
        let ctx = supervisor::Ctx {
            owner: owner.clone(),
            opts: self.opts.clone(),
            state: self.state.clone(),
            status: status.clone(),
            secrets: self.secrets.clone(),
            cause,
            hidden: Default::default(),
            hidden_everywhere: Default::default(),
            live: live.clone(),
            command: Default::default(),
            notices: Default::default(),
            notices_shown: Default::default(),
            restarts: self.restarts.clone(),
        };
        let task = self.runtime.spawn(supervisor::supervise(ctx, rx).instrument(span));
        Entry { desired, status, live, task }
    }

    /// What is observed of `owner`'s services, sorted by name; empty for an unknown owner.
    pub fn observed(&self, owner: &ObjectKey) -> Vec<ServiceStatus> {
        let inner = self.lock();
        inner.owners.get(owner).map(|s| s.values().map(|e| e.status.snapshot()).collect()).unwrap_or_default()
    }

    /// Stops all of `owner`'s services (its object is gone); nothing more is notified for them.
    pub fn remove_owner(&self, owner: &ObjectKey) {
        let mut inner = self.lock();
        let Inner { owners, retiring, .. } = &mut *inner;
        if let Some(services) = owners.remove(owner) {
            for entry in services.into_values() {
                retire(retiring, entry);
            }
        }
    }

    /// The open MCP session of `owner`'s service `service`, while it is up: from the end of its
    /// handshake until it breaks, is restarted (a stdio process) or replaced by the next probe
    /// (a remote endpoint), or the service is no longer wanted. `None` otherwise.
    pub fn session(&self, owner: &ObjectKey, service: &str) -> Option<LiveSession> {
        let inner = self.lock();
        let entry = inner.owners.get(owner)?.get(service)?;
        if entry.task.is_finished() {
            return None;
        }
        entry.live.get()
    }

    /// A receiver whose value changes whenever what a live session offers besides tools
    /// (its prompts, resources and templates, see [`LiveSession::offered`]) changed, or a
    /// session came or went. The count itself means nothing.
    pub fn offered_changes(&self) -> watch::Receiver<u64> {
        self.hub.changes()
    }

    /// Every `notifications/resources/updated` a server sends from now on, with the service it
    /// came from (see [`LiveSession::subscribe`]).
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<ResourceUpdate> {
        self.hub.updates()
    }

    /// The owners that have services.
    pub fn owners(&self) -> Vec<ObjectKey> {
        self.lock().owners.keys().cloned().collect()
    }

    /// Stops every service, each gracefully (SIGTERM, SIGKILL after `stop_grace`), all at once, and
    /// returns when they are stopped. Later calls to [`ServiceManager::ensure`] are ignored.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut inner = self.lock();
            inner.closed = true;
            let owners = std::mem::take(&mut inner.owners);
            let mut tasks = std::mem::take(&mut inner.retiring);
            for entry in owners.into_values().flat_map(BTreeMap::into_values) {
                entry.live.clear();
                entry.desired.send_replace(None);
                tasks.push(entry.task);
            }
            tasks
        };
        let count = tasks.len();
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        // SIGKILL follows SIGTERM after stop_grace; the margin covers the reaping after it.
        let limit = self.opts.stop_grace + Duration::from_secs(2);
        let all = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("services did not stop in time; killing them");
            // Aborting drops each process handle, which SIGKILLs its group.
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        tracing::info!(services = count, "services stopped");
    }

    /// Every status `owner`'s service `name` went through, oldest first.
    #[cfg(test)]
    fn history(&self, owner: &ObjectKey, name: &str) -> Vec<ServiceStatus> {
        let inner = self.lock();
        inner.owners.get(owner).and_then(|s| s.get(name)).map(|e| e.status.history()).unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Tells a supervisor its service is no longer wanted; it stops the process in the background.
fn retire(retiring: &mut Vec<JoinHandle<()>>, entry: Entry) {
    entry.status.mute();
    entry.live.clear();
    entry.desired.send_replace(None);
    retiring.retain(|t| !t.is_finished());
    retiring.push(entry.task);
}
