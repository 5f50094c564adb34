//! Choosing the mode: the config's `mode` (with `auto`, whether a cluster config is at hand), the mode's driver, and where secret references are read.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::Driver;
use super::cluster::ClusterDriver;
use super::files::FilesDriver;
use crate::config::{Config, Mode};
use crate::kubernetes::cluster::{self, ClusterError};
use crate::metrics::Metrics;
use crate::model::{ObjectKey, StatusRecord};
use crate::services::Secrets;
use crate::source::fs::FsOptions;
use crate::store::Store;

/// Why the mode the config asks for could not start.
#[derive(Debug, thiserror::Error)]
#[error("mode: kubernetes (from {}): {source}", .file.display())]
pub struct ModeError {
    /// The config file.
    pub file: PathBuf,
    /// Why the cluster could not be reached or watched.
    pub source: ClusterError,
}

/// A started mode: its driver, and where the values of secret references are read in it.
pub struct Started {
    /// The driver; everything the engine asks of the mode goes through it.
    pub driver: Arc<dyn Driver>,
    /// Filesystem mode: files and the environment; Kubernetes mode: Secrets of the cluster too.
    pub secrets: Secrets,
}

/// A client of the cluster when the config's mode is Kubernetes (or `auto` finds a cluster
/// config at hand); `None` for filesystem mode.
pub async fn connect(cfg: &Config) -> Result<Option<kube::Client>, ModeError> {
    let kube = match cfg.mode {
        Mode::Filesystem => false,
        Mode::Kubernetes => true,
        Mode::Auto => {
            let found = cluster::config_found();
            tracing::info!(
                "mode auto: {}",
                if found {
                    "a cluster config is at hand: Kubernetes mode"
                } else {
                    "no cluster config: filesystem mode"
                }
            );
            found
        }
    };
    if !kube {
        return Ok(None);
    }
    cluster::connect().await.map(Some).map_err(|source| ModeError { file: cfg.file.clone(), source })
}

/// Starts Kubernetes mode with `client` when given, else filesystem mode, reporting the mode's
/// conditions to `conditions`. The one place the mode is chosen: everything after goes through
/// the driver. In filesystem mode the generations `store` holds tell which files changed while
/// the host was down.
pub async fn start(
    cfg: &Config,
    client: Option<kube::Client>,
    store: &Store<StatusRecord>,
    metrics: Arc<Metrics>,
    conditions: &crate::health::Conditions,
) -> Result<Started, ModeError> {
    match client {
        None => {
            // Read in place: a copy of every record would double the store's memory at start.
            let mut known = HashMap::with_capacity(store.len());
            store.for_each(|k, r| {
                if let Some(key) = ObjectKey::parse(k) {
                    known.insert(key, (r.generation, r.spec_hash));
                }
            });
            let files = FilesDriver::new(FsOptions::for_config(cfg), known);
            files.report_to(conditions);
            Ok(Started { driver: Arc::new(files), secrets: Secrets::Files })
        }
        Some(client) => {
            let secrets =
                Secrets::Kubernetes(Arc::new(crate::kubernetes::secrets::ClusterSecrets::new(client.clone())));
            let cluster = ClusterDriver::start(client, cfg, metrics)
                .await
                .map_err(|source| ModeError { file: cfg.file.clone(), source })?;
            cluster.report_to(conditions);
            Ok(Started { driver: Arc::new(cluster), secrets })
        }
    }
}

/// The directories the mode reads at start, as `(setting, directory)`: the plugins always, the
/// resources in filesystem mode.
pub fn dirs(cfg: &Config, kubernetes: bool) -> Vec<(&'static str, PathBuf)> {
    let mut dirs = Vec::new();
    if !kubernetes {
        dirs.push(("resources", cfg.resources.clone()));
    }
    dirs.push(("plugin_dir", cfg.plugin_dir.clone()));
    dirs
}
