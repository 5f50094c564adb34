//! The running host: serve the API, start the engine, and stop both cleanly on a signal.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::{EngineSlot, router_for};
use crate::config::Config;
use crate::engine::{Engine, EngineError};

/// How long running reconciles get to finish once the host is asked to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

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
/// [`SHUTDOWN_GRACE`]); a second signal exits the process at once with status 130.
///
/// This is `steward run`. See [`run_until`] for what happens in between.
pub async fn run(cfg: Config) -> Result<(), HostError> {
    run_until(cfg, async {
        wait_for_signal().await;
        tracing::info!("signal received (a second signal exits at once)");
        tokio::spawn(async {
            wait_for_signal().await;
            eprintln!("second signal: exiting now");
            std::process::exit(130);
        });
    })
    .await
}

/// Runs the host of `cfg` until `stop` resolves.
///
/// The API listens on `api.listen` before anything else, answering `/healthz` (and 503 on the
/// engine's routes) while plugins compile and the first scan runs. If `stop` resolves during
/// start-up, the host returns at once. Otherwise, once `stop` resolves, the engine finishes
/// its running reconciles (up to [`SHUTDOWN_GRACE`]), and only then does the API stop.
pub async fn run_until(cfg: Config, stop: impl Future<Output = ()>) -> Result<(), HostError> {
    let token = cfg.api.token_file.as_deref().map(read_token).transpose()?;
    let listen = cfg.api.listen;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|source| HostError::Listen { addr: listen, source })?;
    let slot: EngineSlot = Default::default();
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let api = tokio::spawn(
        axum::serve(listener, router_for(slot.clone(), token))
            .with_graceful_shutdown(async {
                let _ = api_stopped.await;
            })
            .into_future(),
    );
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
    let _ = slot.set(engine.clone());
    // Tool calls (capability `tools`) go through the host's aggregator of MCP servers and workflows.
    engine.tools().set_router(crate::mcp::Aggregator::with_engine(&engine));
    tracing::info!(%listen, "API listening");
    stop.await;
    tracing::info!("shutting down: finishing running reconciles");
    engine.shutdown(SHUTDOWN_GRACE).await;
    let _ = stop_api.send(());
    let _ = api.await;
    tracing::info!("stopped");
    Ok(())
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
