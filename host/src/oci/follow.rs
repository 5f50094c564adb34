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
use crate::health::{Conditions, PLUGIN_SOURCE};
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
///
/// With `conditions`, each source reports the condition `PluginSource` (its subject the
/// reference): `False` while it runs from the cache, while the artifact its tag names was
/// refused (for as long as the tag names it, not only at the poll that saw it), while it is
/// not loaded, or while the registry cannot be reached; `True` once it runs what its tag names.
pub async fn follow(
    set: Arc<PluginSet>,
    sources: &[PluginSource],
    cache_dir: &Path,
    conditions: Option<Conditions>,
) -> FollowHandle {
    let cache = match ArtifactCache::new(cache_dir.join("oci")) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(dir = %cache_dir.display(), "cannot use the plugin cache; a restart will need the registry: {e}");
            None
        }
    };
    let mut first = Vec::new();
    for source in sources {
        let mut f = Follower::new(set.clone(), source.clone(), cache.clone(), conditions.clone());
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
    /// Where the condition `PluginSource` of this source goes, if anywhere.
    conditions: Option<Conditions>,
    /// Whether what runs came from the cache (not the registry) at start.
    from_cache: bool,
}

impl Follower {
    fn new(
        set: Arc<PluginSet>,
        source: PluginSource,
        cache: Option<ArtifactCache>,
        conditions: Option<Conditions>,
    ) -> Self {
        Self { set, source, cache, refused: None, unsigned: None, noted: false, conditions, from_cache: false }
    }

    /// `PluginSource` holds: the source runs what its tag names.
    fn report_current(&self, digest: &str) {
        if let Some(c) = &self.conditions {
            let reference = &self.source.reference;
            c.ok(PLUGIN_SOURCE, Some(reference), "Current", format!("{reference} runs {digest}, as its tag names"));
        }
    }

    /// `PluginSource` does not hold, for `reason`; `what` says what happened, the message adds
    /// what runs meanwhile and what to do.
    fn report_problem(&self, reason: &str, what: &str) {
        let Some(c) = &self.conditions else { return };
        let reference = &self.source.reference;
        let running = match self.set.remote_digest(reference) {
            Some(d) => format!("{d} keeps running"),
            None => "no version of it runs, so its kinds are not served".to_string(),
        };
        let fix = match reason {
            "ArtifactRefused" => "push a fixed (or signed) artifact to the tag; it is loaded at the next poll",
            "RunningFromCache" | "RegistryUnreachable" => {
                "check that the registry is reachable and the credentials of the source; the tag is polled again"
            }
            _ => "check the source's settings (`plugin_sources`) and the registry; the tag is polled again",
        };
        c.fail(PLUGIN_SOURCE, Some(reference), reason, format!("{reference}: {what}; {running}; {fix}"));
    }

    /// What the plugin set says of the source (why its last artifact was refused), or `fallback`.
    fn refusal(&self, fallback: String) -> String {
        self.set
            .statuses()
            .into_iter()
            .find(|s| s.file == self.source.reference)
            .and_then(|s| s.message)
            .unwrap_or(fallback)
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
                        self.report_current(&digest);
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
        let refused = reported || matches!(failure, OciError::Unsigned(_) | OciError::Refused(_));
        if self.start_from_cache(&failure).await {
            let what =
                format!("runs from the cache, because the registry did not give a plugin that loads ({failure})");
            self.report_problem(if refused { "ArtifactRefused" } else { "RunningFromCache" }, &what);
            return;
        }
        if !reported {
            tracing::warn!(%reference, "plugin source not loaded: {failure}");
            self.set.refuse_remote(&reference, failure.to_string()).await;
        }
        let reason = if refused { "ArtifactRefused" } else { "NotLoaded" };
        self.report_problem(reason, &format!("not loaded ({failure})"));
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
        self.from_cache = self.set.load_remote(wasm, info, self.source.settings.clone()).await == RemoteLoad::Running;
        self.from_cache
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
            self.from_cache = false;
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
                let (reason, what) = if self.from_cache {
                    ("RunningFromCache", format!("runs from the cache; the registry cannot be read ({e})"))
                } else {
                    ("RegistryUnreachable", format!("the registry cannot be read ({e})"))
                };
                self.report_problem(reason, &what);
                return;
            }
        };
        if running.as_deref() == Some(digest.as_str()) {
            if self.noted {
                self.set.note_remote(&reference, None);
                self.noted = false;
            }
            self.report_current(&digest);
            return;
        }
        if self.refused.as_deref() == Some(digest.as_str()) {
            // The tag still names the refused artifact: the condition stays as it was reported.
            return;
        }
        tracing::info!(%reference, %digest, "plugin source moved; pulling");
        match self.fetch(Some(&digest)).await {
            Ok(pulled) => {
                if self.install(pulled).await {
                    self.report_current(&digest);
                } else {
                    let why = self.refusal(format!("{digest} did not load"));
                    self.report_problem("ArtifactRefused", &format!("the artifact {digest} was refused ({why})"));
                }
            }
            Err(e @ OciError::Unreachable { .. }) => {
                self.set.note_remote(&reference, Some(format!("pulling {digest} failed ({e})")));
                self.noted = true;
                self.report_problem("RegistryUnreachable", &format!("pulling {digest} failed ({e})"));
            }
            Err(OciError::Unsigned(why)) => {
                let seen = Some((digest.clone(), why.clone()));
                if self.unsigned != seen {
                    tracing::warn!(%reference, %digest, "plugin source refused: {why}");
                    self.set.refuse_remote(&reference, why.clone()).await;
                    self.unsigned = seen;
                }
                self.report_problem("ArtifactRefused", &format!("the artifact {digest} was refused ({why})"));
            }
            Err(e) => {
                tracing::warn!(%reference, %digest, "plugin source refused: {e}");
                self.set.refuse_remote(&reference, format!("{digest}: {e}")).await;
                self.report_problem("ArtifactRefused", &format!("the artifact {digest} was refused ({e})"));
                self.refused = Some(digest);
            }
        }
    }
}
