//! The host's plugin sources: each pulled (or read from the cache) into the plugin set at start, and its tag polled.
//!
//! A new digest goes through [`PluginSet::load_remote`], the same path as a changed file of the
//! plugin directory: compiled beside the running version, swapped in only if it loads and
//! describes itself; otherwise the running version stays and the failure is reported. A digest
//! that was refused is not tried again until the tag moves on.

use std::path::Path;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::cache::{ArtifactCache, Recorded};
use super::client::{Access, Pulled, Registry};
use super::reference::OciRef;
use super::signature::TrustKey;
use super::{OciError, layout};
use crate::config::PluginSource;
use crate::plugin::{Fetched, PluginSet, RemoteLoad, SourceInfo};

/// Keeps the sources followed; dropping it stops polling.
#[derive(Debug)]
pub struct FollowHandle {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FollowHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Loads every source into `set` (in parallel; a source the registry cannot give is read from
/// the cache under `cache_dir/oci`, and said so), then polls each tag at its interval.
/// Returns once every source has been tried once. Needs a tokio runtime.
pub async fn follow(set: Arc<PluginSet>, sources: &[PluginSource], cache_dir: &Path) -> FollowHandle {
    let cache = match ArtifactCache::new(cache_dir.join("oci")) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(dir = %cache_dir.display(), "cannot use the plugin cache; a restart will need the registry: {e}");
            None
        }
    };
    let mut first = Vec::new();
    for source in sources {
        let mut f = Follower::new(set.clone(), source.clone(), cache.clone());
        first.push(tokio::spawn(async move {
            f.start().await;
            f
        }));
    }
    let mut tasks = Vec::new();
    for t in first {
        let Ok(mut f) = t.await else { continue };
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(f.source.poll).await;
                f.poll().await;
            }
        }));
    }
    FollowHandle { tasks }
}

/// One source and what was last seen of it.
struct Follower {
    set: Arc<PluginSet>,
    source: PluginSource,
    cache: Option<ArtifactCache>,
    /// The digest last refused for its content, not tried again until the tag moves on.
    refused: Option<String>,
    /// The digest last refused for its signature and why: tried again at every poll (a signature
    /// can be added without moving the tag), reported again only when the reason changes.
    unsigned: Option<(String, String)>,
    /// Whether the registry's last answer was a failure already noted.
    noted: bool,
}

impl Follower {
    fn new(set: Arc<PluginSet>, source: PluginSource, cache: Option<ArtifactCache>) -> Self {
        Self { set, source, cache, refused: None, unsigned: None, noted: false }
    }

    fn reference(&self) -> Result<OciRef, OciError> {
        OciRef::parse(&self.source.reference).map_err(|e| OciError::Config(e.to_string()))
    }

    fn registry(&self, reference: &OciRef) -> Result<Registry, OciError> {
        let s = &self.source;
        let access = Access {
            ca_file: s.ca_file.clone(),
            plain_http: s.plain_http,
            insecure: s.insecure,
            docker_config: s.docker_config.clone(),
            token_file: s.token_file.clone(),
        };
        Registry::new(reference, &access)
    }

    fn key(&self) -> Result<Option<TrustKey>, OciError> {
        match &self.source.key {
            Some(k) => TrustKey::load(k).map(Some).map_err(|e| OciError::Config(e.to_string())),
            None => Ok(None),
        }
    }

    async fn fetch(&self, at: Option<&str>) -> Result<Pulled, OciError> {
        let reference = self.reference()?;
        let reference = at.map_or_else(|| reference.clone(), |d| reference.at_digest(d));
        let key = self.key()?;
        self.registry(&reference)?.pull(&reference, key.as_ref()).await
    }

    /// The digest the source names now.
    async fn resolve(&self) -> Result<String, OciError> {
        let r = self.reference()?;
        self.registry(&r)?.resolve(&r).await
    }

    /// Remembers why `digest` was refused, so that polls do not report it again and again.
    fn remember(&mut self, digest: &str, e: &OciError) {
        match e {
            OciError::Unreachable { .. } => {}
            OciError::Unsigned(why) => self.unsigned = Some((digest.to_string(), why.clone())),
            _ => self.refused = Some(digest.to_string()),
        }
    }

    /// The first load: from the registry; when the registry cannot give a plugin that loads,
    /// the last good one from the cache.
    async fn start(&mut self) {
        let reference = self.source.reference.clone();
        let (failure, reported) = match self.resolve().await {
            Err(e) => (e, false),
            Ok(digest) => match self.fetch(Some(&digest)).await {
                Ok(pulled) => {
                    if self.install(pulled).await {
                        return;
                    }
                    let why = self
                        .set
                        .statuses()
                        .into_iter()
                        .find(|s| s.file == reference)
                        .and_then(|s| s.message)
                        .unwrap_or_else(|| format!("{digest} did not load"));
                    (OciError::Refused(why), true)
                }
                Err(e) => {
                    self.remember(&digest, &e);
                    (e, false)
                }
            },
        };
        if !self.start_from_cache(&failure).await && !reported {
            tracing::warn!(%reference, "plugin source not loaded: {failure}");
            self.set.refuse_remote(&reference, failure.to_string()).await;
        }
    }

    /// Loads what the cache holds for the source after `why` kept the registry from giving it.
    async fn start_from_cache(&mut self, why: &OciError) -> bool {
        let reference = self.source.reference.clone();
        let Some((record, wasm)) = self.cache.as_ref().and_then(|c| c.load(&reference)) else { return false };
        let key = match self.key() {
            Ok(k) => k,
            Err(_) => return false,
        };
        if let Some(k) = &key
            && record.key.as_deref() != Some(k.fingerprint())
        {
            tracing::warn!(%reference, "the cached plugin was not verified with the configured key; not using it");
            return false;
        }
        let note = format!("started from the cache: the registry did not give the plugin ({why})");
        tracing::warn!(%reference, digest = %record.digest, "plugin started from the cache: {why}");
        let info = SourceInfo {
            reference: reference.clone(),
            digest: Some(record.digest.clone()),
            fetched: Some(Fetched::Cache),
            signed_by: key.map(|k| k.describe()),
            note: Some(note),
        };
        self.noted = true;
        self.set.load_remote(wasm, info, self.source.settings.clone()).await == RemoteLoad::Running
    }

    /// Hands a pulled plugin to the set; caches it when it runs, remembers it when refused.
    /// Returns whether it runs.
    async fn install(&mut self, pulled: Pulled) -> bool {
        let reference = self.source.reference.clone();
        let info = SourceInfo {
            reference: reference.clone(),
            digest: Some(pulled.digest.clone()),
            fetched: Some(Fetched::Registry),
            signed_by: pulled.signed_by.clone(),
            note: None,
        };
        let layer = layout::sha256_digest(&pulled.wasm);
        let wasm = pulled.wasm.clone();
        let outcome = self.set.load_remote(pulled.wasm, info, self.source.settings.clone()).await;
        if outcome == RemoteLoad::Running {
            self.refused = None;
            self.unsigned = None;
            self.noted = false;
            let key = self.key().ok().flatten().map(|k| k.fingerprint().to_string());
            let record = Recorded { reference: reference.clone(), digest: pulled.digest, layer, key };
            if let Some(cache) = &self.cache
                && let Err(e) = cache.store(&record, &wasm)
            {
                tracing::warn!(%reference, "cannot cache the plugin; a restart will need the registry: {e}");
            }
            true
        } else {
            // A conflict with another plugin may end: the next poll tries again.
            if outcome == RemoteLoad::Refused {
                self.refused = Some(pulled.digest);
            }
            false
        }
    }

    /// One look at the registry: a new digest is pulled and loaded.
    async fn poll(&mut self) {
        let reference = self.source.reference.clone();
        let running = self.set.remote_digest(&reference);
        let digest = match self.resolve().await {
            Ok(d) => d,
            Err(e) => {
                if !self.noted {
                    tracing::warn!(%reference, "cannot look at the plugin source: {e}");
                    let note = match &running {
                        Some(d) => format!("the last look at the registry failed ({e}); {d} keeps running"),
                        None => format!("the last look at the registry failed ({e})"),
                    };
                    self.set.note_remote(&reference, Some(note));
                    self.noted = true;
                }
                return;
            }
        };
        if running.as_deref() == Some(digest.as_str()) || self.refused.as_deref() == Some(digest.as_str()) {
            if self.noted && running.is_some() {
                self.set.note_remote(&reference, None);
                self.noted = false;
            }
            return;
        }
        tracing::info!(%reference, %digest, "plugin source moved; pulling");
        match self.fetch(Some(&digest)).await {
            Ok(pulled) => {
                self.install(pulled).await;
            }
            Err(e @ OciError::Unreachable { .. }) => {
                self.set.note_remote(&reference, Some(format!("pulling {digest} failed ({e})")));
                self.noted = true;
            }
            Err(OciError::Unsigned(why)) => {
                let seen = Some((digest.clone(), why.clone()));
                if self.unsigned != seen {
                    tracing::warn!(%reference, %digest, "plugin source refused: {why}");
                    self.set.refuse_remote(&reference, why).await;
                    self.unsigned = seen;
                }
            }
            Err(e) => {
                tracing::warn!(%reference, %digest, "plugin source refused: {e}");
                self.set.refuse_remote(&reference, format!("{digest}: {e}")).await;
                self.refused = Some(digest);
            }
        }
    }
}
