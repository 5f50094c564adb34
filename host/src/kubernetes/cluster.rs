//! The cluster side of a running host: client, watches, writer, Events and leadership, started together.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use tokio::sync::{mpsc, watch};

use super::events::EventSink;
use super::leader::{self, Leadership};
use super::source::{KubeSource, Scope};
use super::writer::ClusterWriter;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::source::SourceEvent;

/// Why Kubernetes mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No kubeconfig or in-cluster config could be loaded.
    #[error(
        "cannot load a Kubernetes config (in-cluster service account, $KUBECONFIG or ~/.kube/config): {0}; run in a pod with a service account, or point KUBECONFIG at a kubeconfig"
    )]
    Config(String),
    /// The client could not be built from the config.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(String),
    /// Leader election could not start.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
}

/// Whether a cluster config is at hand: in a pod (`KUBERNETES_SERVICE_HOST`), or a kubeconfig
/// at `$KUBECONFIG` or `~/.kube/config`. `mode: auto` picks Kubernetes mode when it is.
pub fn config_found() -> bool {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return true;
    }
    if let Some(k) = std::env::var_os("KUBECONFIG") {
        return std::env::split_paths(&k).any(|p| p.is_file());
    }
    std::env::var_os("HOME").is_some_and(|h| PathBuf::from(h).join(".kube/config").is_file())
}

/// A client from the in-cluster config or the kubeconfig (`kube::Config::infer`).
pub async fn connect() -> Result<Client, ClusterError> {
    Ok(connect_to_server().await?.0)
}

/// [`connect`], with the URL of the API server the client talks to, for messages that name it.
pub async fn connect_to_server() -> Result<(Client, String), ClusterError> {
    let config = kube::Config::infer().await.map_err(|e| ClusterError::Config(e.to_string()))?;
    let server = config.cluster_url.to_string();
    tracing::info!(%server, "Kubernetes mode: connecting");
    let client = Client::try_from(config).map_err(|e| ClusterError::Client(e.to_string()))?;
    Ok((client, server))
}

/// Everything the engine uses to talk to the cluster.
pub struct Cluster {
    /// The watches and their caches.
    pub source: Arc<KubeSource>,
    /// Status and finalizer writes.
    pub writer: ClusterWriter,
    /// Kubernetes Events.
    pub events: EventSink,
    /// Whether this replica leads; `true` at once when election is off.
    pub leader: watch::Receiver<bool>,
    /// The Lease's holder as last seen; `None` when free, not seen yet, or election is off.
    holder: watch::Receiver<Option<String>>,
    /// This replica's identity in the election; `None` when election is off.
    identity: Option<String>,
    leadership: Mutex<Option<Leadership>>,
}

impl Cluster {
    /// Connects with `client`, prepares the watches (no kinds yet) and starts competing for the lease.
    pub async fn start(
        client: Client,
        cfg: &Config,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, mpsc::UnboundedReceiver<SourceEvent>), ClusterError> {
        let k = &cfg.kubernetes;
        let scope =
            Scope { namespaces: k.namespaces.clone(), label_selector: k.label_selector.clone(), relist: k.relist };
        let (source, events_rx) = KubeSource::new(client.clone(), scope);
        let leadership = if k.leader_election.enabled {
            leader::elect(client, &k.leader_election).await?
        } else {
            Leadership::always()
        };
        let writer = ClusterWriter::new(source.clone(), metrics.clone(), k.status_retries);
        let events = EventSink::new(source.clone(), metrics, leadership.identity());
        let identity = k.leader_election.enabled.then(|| leadership.identity().to_string());
        let cluster = Self {
            source,
            writer,
            events,
            leader: leadership.subscribe(),
            holder: leadership.holder(),
            identity,
            leadership: Mutex::new(Some(leadership)),
        };
        Ok((cluster, events_rx))
    }

    /// Whether this replica leads now.
    pub fn leads(&self) -> bool {
        *self.leader.borrow()
    }

    /// This replica's identity and the Lease's holder as last seen; `None` when election is off.
    pub fn standing(&self) -> Option<leader::Standing> {
        let identity = self.identity.clone()?;
        Some(leader::Standing { identity, holder: self.holder.borrow().clone() })
    }

    /// Gives up the lease so a standby takes over at once (waits up to `grace`).
    pub async fn release(&self, grace: Duration) {
        let l = self.leadership.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut l) = l {
            l.release(grace).await;
        }
    }
}
