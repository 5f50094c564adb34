//! The running host: serve the API, start the engine, and stop both cleanly on a signal.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::api::{EngineSlot, router_with_oauth};
use crate::config::Config;
use crate::engine::{Engine, EngineError};
use crate::kubernetes::webhook::{ServedKind, Validates, Webhook, WebhookError, WebhookHost};
use crate::mcp::sessions::CappedSessions;
use crate::metrics::http::HttpMetrics;
use crate::serve::{CappedTcp, Server};

/// How long running reconciles get to finish once the host is asked to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The longest a stop takes, from the signal to the return of [`run_until`] (and so to the
/// exit of `steward run`), whatever clients hold open: running reconciles get
/// [`SHUTDOWN_GRACE`], the Lease is given up, services and tool calls are stopped and the store
/// flushed, all within this; past it the host returns [`HostError::ShutdownTimeout`]. Keep a
/// pod's `terminationGracePeriodSeconds` above it.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(20);

/// How long the API gets, once the engine is stopped, to finish the answers it is writing.
/// Event streams end as soon as the stop begins; a connection still open after this (an MCP
/// client's stream, a slow reader) is closed.
pub const API_DRAIN: Duration = Duration::from_secs(2);

/// How long the host, once stopped, waits again for the state store's last writes (after the
/// engine's own flush, bounded by [`SHUTDOWN_GRACE`]) before it gives up and exits non-zero.
pub const FINAL_FLUSH_WAIT: Duration = Duration::from_secs(1);

/// Why the host could not run.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The API token file (`api.token_file`) cannot be read or is empty.
    #[error("{0}")]
    Token(#[from] TokenError),
    /// The API address (`api.listen`) cannot be bound.
    #[error("cannot listen on {addr} (api.listen)")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The engine did not start (directories, store, plugins, cluster).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The admission webhook (`kubernetes.webhook`) did not start.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// Stopping took longer than [`SHUTDOWN_LIMIT`]: reconciles, services or the store's final
    /// write may not have finished.
    #[error(
        "the host did not stop within {0:?} (running reconciles, services, tool calls or the store's final write); it exits anyway"
    )]
    ShutdownTimeout(Duration),
}

/// Why an API token file gives no token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("cannot read the API token file {}: {message}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The file holds nothing but whitespace.
    #[error("the API token file {} is empty", .file.display())]
    Empty {
        /// The file.
        file: PathBuf,
    },
}

/// The bearer token in `file`, without surrounding whitespace; never empty.
pub fn read_token(file: &Path) -> Result<String, TokenError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| TokenError::Read { file: file.to_path_buf(), message: e.to_string() })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::Empty { file: file.to_path_buf() });
    }
    Ok(token.to_string())
}

/// Runs the host of `cfg` until SIGINT or SIGTERM, then lets running reconciles finish (up to
/// [`SHUTDOWN_GRACE`]) and stops within [`SHUTDOWN_LIMIT`]; a second signal exits the process
/// at once with status 130.
///
/// This is `steward run`. See [`run_until`] for what happens in between.
pub async fn run(cfg: Config) -> Result<(), HostError> {
    run_until(cfg, async {
        wait_for_signal().await;
        tracing::info!("signal received (a second signal exits at once)");
        tokio::spawn(async {
            wait_for_signal().await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(130);
        });
    })
    .await
}

/// Runs the host of `cfg` until `stop` resolves.
///
/// Returns [`HostError::Engine`] when the state store could not commit everything at the end
/// (disk full, I/O error): the final flush failed, and `steward run` exits non-zero.
///
/// The API listens on `api.listen` before anything else, answering `/healthz` (and 503 on the
/// engine's routes) while plugins compile and the first scan runs. If `stop` resolves during
/// start-up, the host returns at once. Otherwise, once `stop` resolves, the API's event streams
/// end, the engine finishes its running reconciles (up to [`SHUTDOWN_GRACE`]) and gives its
/// Lease up, and only then does the API stop (within [`API_DRAIN`]); all of it within
/// [`SHUTDOWN_LIMIT`].
pub async fn run_until(cfg: Config, stop: impl Future<Output = ()>) -> Result<(), HostError> {
    let token = cfg.api.token_file.as_deref().map(read_token).transpose()?;
    let listen = cfg.api.listen;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|source| HostError::Listen { addr: listen, source })?;
    let slot: EngineSlot = Default::default();
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let closing = CancellationToken::new();
    // The API counts its connections and MCP sessions from the start; the engine's registry
    // renders these same metrics once it exists.
    let http = HttpMetrics::default();
    let server = Server { name: "api", limits: cfg.api.limits, metrics: http.clone() };
    let listener = CappedTcp::new(listener, server.slots());
    let sessions = Arc::new(CappedSessions::new(cfg.api.mcp_max_sessions, &http));
    let oauth = cfg.api.mcp.authorization_servers.clone();
    let router = router_with_oauth(slot.clone(), token, oauth, closing.clone(), sessions);
    let api = tokio::spawn(server.serve(listener, router, async {
        let _ = api_stopped.await;
    }));
    let mut stop = std::pin::pin!(stop);
    // Biased: a stop that has come is seen before a start that is done.
    let engine = tokio::select! {
        biased;
        _ = &mut stop => {
            tracing::info!("stopped during start-up");
            return Ok(());
        }
        e = Engine::start(cfg) => e?,
    };
    engine.metrics().use_http(http);
    let _ = slot.set(engine.clone());
    // Tool calls (capability `tools`) go through the host's aggregator of MCP servers and workflows.
    engine.units().tools().set_router(crate::mcp::Aggregator::with_engine(&engine));
    tracing::info!(%listen, "API listening");
    let webhook = match webhook_of(&engine).await {
        Ok(w) => w,
        Err(e) => {
            engine.shutdown(SHUTDOWN_GRACE).await;
            let _ = stop_api.send(());
            let _ = api.await;
            return Err(e);
        }
    };
    stop.await;
    tracing::info!(limit = ?SHUTDOWN_LIMIT, "shutting down: finishing running reconciles");
    closing.cancel();
    let stopped = tokio::time::timeout(SHUTDOWN_LIMIT.saturating_sub(API_DRAIN), async {
        engine.shutdown(SHUTDOWN_GRACE).await;
        // The final flush decides the exit status: writes that never reached the disk are an error.
        let flushed = engine.flush_store(FINAL_FLUSH_WAIT).await;
        drop(webhook);
        flushed
    })
    .await;
    let _ = stop_api.send(());
    if tokio::time::timeout(API_DRAIN, api).await.is_err() {
        tracing::info!(drain = ?API_DRAIN, "API connections still open after the drain time; closing them");
    }
    match stopped {
        Err(_) => return Err(HostError::ShutdownTimeout(SHUTDOWN_LIMIT)),
        Ok(flushed) => flushed?,
    }
    tracing::info!("stopped");
    Ok(())
}

/// The admission webhook of a host in Kubernetes mode with `kubernetes.webhook.enabled`, started
/// with a client of the cluster the engine uses; `None` otherwise.
async fn webhook_of(engine: &Arc<Engine>) -> Result<Option<Webhook>, HostError> {
    if engine.mode() != "kubernetes" || !engine.config().kubernetes.webhook.enabled {
        return Ok(None);
    }
    let client = crate::kubernetes::cluster::connect().await.map_err(|source| {
        EngineError::Mode(crate::driver::mode::ModeError { file: engine.config().file.clone(), source })
    })?;
    Ok(Some(start_webhook(engine, client).await?))
}

/// Starts the admission webhook of `engine`'s config (`kubernetes.webhook`) through `client`:
/// it validates the kinds `engine` serves now, and its configuration is applied again whenever
/// a kind is enabled or disabled or a plugin is loaded, replaced or removed.
pub async fn start_webhook(engine: &Arc<Engine>, client: kube::Client) -> Result<Webhook, WebhookError> {
    let webhook = Webhook::start(engine.config(), client, Arc::new(EngineKinds(engine.clone()))).await?;
    // The disabled kinds are a store setting (a `Meta` change); plugins announce themselves.
    let (mut changes, mut plugins) = (engine.changes(), engine.plugins().subscribe());
    let changed = webhook.on_kinds_changed();
    webhook.hold(tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            tokio::select! {
                c = changes.recv() => match c {
                    Ok(crate::store::Change::Meta(_)) | Err(RecvError::Lagged(_)) => changed(),
                    Ok(crate::store::Change::Record(_)) => {}
                    Err(RecvError::Closed) => return,
                },
                p = plugins.recv() => match p {
                    Ok(_) | Err(RecvError::Lagged(_)) => changed(),
                    Err(RecvError::Closed) => return,
                },
            }
        }
    }));
    Ok(webhook)
}

/// The engine as the webhook sees it.
struct EngineKinds(Arc<Engine>);

impl WebhookHost for EngineKinds {
    /// The enabled kinds of the loaded plugins that are not blocked, as the engine watches them
    /// (a cluster-scoped kind is not served by a replica limited to namespaces without a selector).
    fn served(&self) -> Vec<ServedKind> {
        let k8s = &self.0.config().kubernetes;
        let shard_skips =
            |k: &steward_sdk::KindInfo| !k.namespaced && !k8s.namespaces.is_empty() && k8s.label_selector.is_none();
        let mut out = Vec::new();
        for p in self.0.plugins().plugins().into_iter().filter(|p| !p.is_blocked()) {
            let served = crate::plugin::served_kinds(&p);
            for k in p.info().kinds.iter() {
                if served.contains(&k.kind) && !self.0.is_disabled(&k.kind) && !shard_skips(k) {
                    let plugin: Arc<dyn Validates> = p.clone();
                    out.push(ServedKind { info: k.clone(), plugin });
                }
            }
        }
        out
    }

    fn leads(&self) -> bool {
        self.0.is_leader()
    }

    fn conditions(&self) -> Option<crate::health::Conditions> {
        Some(self.0.conditions().clone())
    }

    fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        Some(self.0.metrics().clone())
    }
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_gives_its_trimmed_token_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "  s3cret\n").unwrap();
        assert_eq!(read_token(&file).unwrap(), "s3cret");
        std::fs::write(&file, " \n").unwrap();
        assert!(matches!(read_token(&file), Err(TokenError::Empty { .. })));
        let e = read_token(&dir.path().join("missing")).unwrap_err().to_string();
        assert!(e.starts_with("cannot read the API token file") && e.contains("missing"), "{e}");
    }

    #[tokio::test]
    async fn a_busy_api_address_is_an_error_naming_it_and_the_setting() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults(dir.path());
        cfg.api.listen = addr;
        let e = run_until(cfg, std::future::pending()).await.unwrap_err();
        assert!(matches!(e, HostError::Listen { addr: a, .. } if a == addr), "{e}");
        assert!(e.to_string().contains("(api.listen)"), "{e}");
    }

    #[tokio::test]
    async fn a_stop_during_start_up_returns_without_starting_the_engine() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults(dir.path());
        cfg.api.listen = "127.0.0.1:0".parse().unwrap();
        // The resources directory does not exist: had the engine started, this would be an error.
        cfg.resources = dir.path().join("missing");
        assert!(run_until(cfg, std::future::ready(())).await.is_ok());
    }
}
