//! The host's plugin sources: each pulled (or read from the cache) into the plugin set at start, and its tag polled.
//!
//! A new digest goes through [`PluginSet::load_remote`], the same path as a changed file of the
//! plugin directory: compiled beside the running version, swapped in only if it loads and
//! describes itself; otherwise the running version stays and the failure is reported. A digest
//! that was refused is not tried again until the tag moves on (except for its signature, which
//! can be added without moving the tag, and a name or kind another plugin held).
//!
//! Every message names the source's reference once, in front, then what happened, naming the
//! artifact's digest: `oci://…: refused: the artifact sha256:… has no signature; …`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::cache::{ArtifactCache, Recorded};
use super::client::{Access, Pulled, Registry};
use super::reference::OciRef;
use super::signature::TrustKey;
use super::{OciError, layout};
use crate::config::PluginSource;
use crate::health::{Conditions, PLUGIN_CACHED, PLUGIN_SOURCE};
use crate::metrics::{Metrics, PluginSourceLabel, PluginSourceReason, PluginSourceResult};
use crate::plugin::{Awaited, Fetched, PluginSet, RemoteLoad, SourceInfo};

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

/// Where the followers report besides the plugin set.
#[derive(Clone, Default)]
pub struct Observers {
    /// Where each source's condition `PluginSource` goes (its subject the reference).
    pub conditions: Option<Conditions>,
    /// Where the `steward_plugin_source_*` metrics are counted.
    pub metrics: Option<Arc<Metrics>>,
}

/// Loads every source into `set` (in parallel; a source the registry cannot give is read from
/// the cache under `cache_dir/oci`, and said so), then polls each tag at its interval.
/// Returns once every source has been tried once. Needs a tokio runtime.
///
/// With `observers.conditions`, each source reports the condition `PluginSource` (its subject
/// the reference): `False` while it runs from the cache, while the artifact its tag names was
/// refused (for as long as the tag names it, with the same message, not only at the poll that
/// saw it), while it is not loaded, or while the registry cannot be reached; `True` once it runs
/// what its tag names (saying so when the tag moved to another manifest of the same component).
/// With `observers.metrics`, fetches, refusals, cache use and digest changes are counted.
pub async fn follow(
    set: Arc<PluginSet>,
    sources: &[PluginSource],
    cache_dir: &Path,
    observers: Observers,
) -> FollowHandle {
    let cache = ArtifactCache::new(cache_dir.join("oci"));
    // What stores since the last start left behind within their hour.
    cache.prune_logged();
    let mut first = Vec::new();
    for source in sources {
        let mut f = Follower::new(set.clone(), source.clone(), cache.clone(), observers.clone());
        first.push((
            source.clone(),
            tokio::spawn(async move {
                f.start().await;
                f
            }),
        ));
    }
    let mut tasks = Vec::new();
    for (source, t) in first {
        let mut f = match t.await {
            Ok(f) => f,
            // A bug, not input: the source is still followed, from a fresh start at its next poll.
            Err(e) => {
                tracing::error!(source = %source.reference, "the first look at the plugin source failed: {e}; trying again at its next poll");
                Follower::new(set.clone(), source, cache.clone(), observers.clone())
            }
        };
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(f.source.poll).await;
                f.poll().await;
            }
        }));
    }
    FollowHandle { tasks }
}

/// An artifact refused while its source names it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    /// Its manifest digest.
    digest: String,
    /// What happened, without the reference: `refused: the artifact sha256:… …`.
    why: String,
    /// Whether it is pulled again at every poll: a signature can be added without moving the
    /// tag, and a plugin holding its name or kind can go away.
    retry: bool,
}

/// What became of one try at the artifact a source names.
enum Tried {
    /// It runs now.
    Running,
    /// It was refused (see [`Follower::refused`]).
    Refused,
    /// The registry did not give it.
    Failed(OciError),
}

/// Why what a source runs is not in the cache.
enum Uncached {
    /// It cannot be written there.
    WriteFailed(std::io::Error),
    /// The cache lost it while the host runs, and the registry did not give it again.
    Lost(OciError),
}

impl Uncached {
    /// The condition's reason, what happened (after "<digest> runs but"), and what to do.
    fn describe(&self) -> (&'static str, String, &'static str) {
        match self {
            Self::WriteFailed(e) => (
                "CacheWriteFailed",
                format!("cannot be written to the plugin cache ({e})"),
                "make the directory `oci` under `cache_dir` writable (or free space), it is written again at the next poll",
            ),
            Self::Lost(e) => (
                "NotCached",
                format!("is no longer in the plugin cache, and pulling it again failed ({e})"),
                "it is pulled and written again at the next poll that reaches the registry",
            ),
        }
    }
}

/// One source and what was last seen of it.
struct Follower {
    set: Arc<PluginSet>,
    source: PluginSource,
    cache: ArtifactCache,
    observers: Observers,
    /// The artifact the source names, when it was refused.
    refused: Option<Refusal>,
    /// Whether the registry's last answer was a failure already noted on the source.
    noted: bool,
    /// Whether what runs came from the cache (not the registry) at start.
    from_cache: bool,
    /// The component digest of what runs.
    layer: Option<String>,
    /// The last change of the running artifact: the digest before, and whether the component
    /// stayed the same (then nothing was reloaded).
    moved: Option<(String, bool)>,
    /// The kinds the source is to serve, as its settings or its last artifact say.
    kinds: Vec<String>,
    /// What runs, when it could not be written to the cache: written again at each poll.
    uncached: Option<(Recorded, Vec<u8>)>,
}

impl Follower {
    fn new(set: Arc<PluginSet>, source: PluginSource, cache: ArtifactCache, observers: Observers) -> Self {
        let kinds = source.settings.as_ref().and_then(|s| s.kinds.clone()).unwrap_or_default();
        Self {
            set,
            source,
            cache,
            observers,
            refused: None,
            noted: false,
            from_cache: false,
            layer: None,
            moved: None,
            kinds,
            uncached: None,
        }
    }

    fn count_fetch(&self, result: &str) {
        if let Some(m) = &self.observers.metrics {
            let label = PluginSourceResult { source: self.source.reference.clone(), result: result.into() };
            m.plugin_source_fetches.get_or_create(&label).inc();
        }
    }

    fn count_cache(&self, hit: bool) {
        if let Some(m) = &self.observers.metrics {
            let result = if hit { "hit" } else { "miss" };
            let label = PluginSourceResult { source: self.source.reference.clone(), result: result.into() };
            m.plugin_source_cache.get_or_create(&label).inc();
        }
    }

    /// `PluginSource` holds: the source runs what its tag names (and says so when the tag moved
    /// to another manifest).
    fn report_current(&self, digest: &str) {
        let Some(c) = &self.observers.conditions else { return };
        let reference = &self.source.reference;
        let moved = match &self.moved {
            Some((from, true)) => format!(
                "; the tag moved from {from} to {digest}, a manifest of the same component, so nothing was reloaded"
            ),
            Some((from, false)) => format!("; the tag moved from {from} to {digest}, which was loaded"),
            None => String::new(),
        };
        c.ok(PLUGIN_SOURCE, Some(reference), "Current", format!("{reference} runs {digest}, as its tag names{moved}"));
    }

    /// `PluginSource` does not hold, for `reason`; `what` says what happened (without the
    /// reference), the message adds what runs meanwhile and what to do.
    fn report_problem(&self, reason: &str, what: &str) {
        let Some(c) = &self.observers.conditions else { return };
        let reference = &self.source.reference;
        let running = match self.set.remote_digest(reference) {
            Some(d) => format!("{d} keeps running"),
            None => "no version of it runs, so its kinds are not served".to_string(),
        };
        let fix = match reason {
            "ArtifactRefused" => "once the tag names an artifact that is not refused, it is loaded at the next poll",
            "RunningFromCache" | "RegistryUnreachable" => {
                "check that the registry is reachable and the credentials of the source; the tag is polled again"
            }
            _ => "check the source's settings (`plugin_sources`) and the registry; the tag is polled again",
        };
        c.fail(PLUGIN_SOURCE, Some(reference), reason, format!("{reference}: {what}; {running}; {fix}"));
    }

    /// `PluginSource` (and the objects waiting for the source) say the artifact the source names
    /// was refused, the same way at every poll while it names it.
    fn report_refused(&self) {
        let Some(r) = &self.refused else { return };
        self.report_awaited(&r.why);
        if self.from_cache {
            let what =
                format!("runs from the cache, because the registry did not give a plugin that loads ({})", r.why);
            self.report_problem("ArtifactRefused", &what);
        } else {
            self.report_problem("ArtifactRefused", &r.why);
        }
    }

    /// Tells the plugin set why the source runs nothing (when it does), for the objects of its kinds.
    fn report_awaited(&self, what: &str) {
        if self.set.remote_digest(&self.source.reference).is_some() {
            return;
        }
        let why = match what.strip_prefix("refused: ") {
            Some(rest) => format!("was refused: {rest}"),
            None => format!(
                "is still being fetched ({what}; it is tried again every {})",
                humantime::format_duration(self.source.poll)
            ),
        };
        self.set.await_remote(&self.source.reference, Some(Awaited { kinds: self.kinds.clone(), why }));
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

    async fn fetch(&self, digest: &str) -> Result<Pulled, OciError> {
        let reference = self.reference()?.at_digest(digest);
        let key = self.key()?;
        self.registry(&reference)?.pull(&reference, key.as_ref()).await
    }

    /// The digest the source names now.
    async fn resolve(&self) -> Result<String, OciError> {
        let r = self.reference()?;
        self.registry(&r)?.resolve(&r).await
    }

    /// Learns the kinds the source is to serve from an artifact's annotations, unless its
    /// settings list them.
    fn learn_kinds(&mut self, annotations: &BTreeMap<String, String>) {
        let listed = self.source.settings.as_ref().is_some_and(|s| s.kinds.is_some());
        if let Some(kinds) = annotations.get(layout::ANNOTATION_KINDS).filter(|_| !listed) {
            self.kinds = kinds.split(',').map(str::trim).filter(|k| !k.is_empty()).map(String::from).collect();
        }
    }

    /// Pulls the artifact `digest` and hands it to the set.
    async fn get(&mut self, digest: &str) -> Tried {
        let pulled = match self.fetch(digest).await {
            Ok(p) => p,
            Err(e) if e.is_refusal() => {
                let retry = matches!(e, OciError::NoSignature { .. } | OciError::Unsigned(_));
                if self.refused.as_ref().is_none_or(|r| r.digest != digest)
                    && let Ok(r) = self.reference()
                    && let Ok(registry) = self.registry(&r)
                    && let Ok(annotations) = registry.annotations(&r.at_digest(digest)).await
                {
                    self.learn_kinds(&annotations);
                }
                self.refuse(digest, e.to_string(), e.label(), retry, true).await;
                return Tried::Refused;
            }
            Err(e) => {
                self.count_fetch("failed");
                return Tried::Failed(e);
            }
        };
        self.learn_kinds(&pulled.manifest.annotations);
        match self.install(pulled).await {
            RemoteLoad::Running => {
                self.count_fetch("loaded");
                Tried::Running
            }
            RemoteLoad::Refused(why) => {
                self.refuse(digest, why, "does_not_load", false, false).await;
                Tried::Refused
            }
            RemoteLoad::Conflict(why) => {
                self.refuse(digest, why, "conflict", true, false).await;
                Tried::Refused
            }
        }
    }

    /// Records that `digest` was refused: counted at every fetch, reported (and its refusal
    /// counted) when it is new; `record` when the set does not know why yet.
    async fn refuse(&mut self, digest: &str, why: String, reason: &str, retry: bool, record: bool) {
        self.count_fetch("refused");
        let refusal = Refusal { digest: digest.to_string(), why, retry };
        if self.refused.as_ref() == Some(&refusal) {
            return;
        }
        let reference = self.source.reference.clone();
        tracing::warn!(%reference, %digest, "plugin source refused: {}", refusal.why);
        if let Some(m) = &self.observers.metrics {
            let label = PluginSourceReason { source: reference.clone(), reason: reason.into() };
            m.plugin_source_refusals.get_or_create(&label).inc();
        }
        if record {
            self.set.refuse_remote(&reference, refusal.why.clone()).await;
        }
        self.refused = Some(refusal);
    }

    /// The first load: from the registry; when the registry cannot give a plugin that loads,
    /// the last good one from the cache.
    async fn start(&mut self) {
        let reference = self.source.reference.clone();
        let failure = match self.resolve().await {
            Err(e) => {
                self.count_fetch("failed");
                e
            }
            Ok(digest) => match self.get(&digest).await {
                Tried::Running => {
                    self.report_current(&digest);
                    return;
                }
                Tried::Refused => {
                    let why = self.refused.as_ref().map(|r| r.why.clone()).unwrap_or_default();
                    self.start_from_cache(&why).await;
                    self.report_refused();
                    return;
                }
                Tried::Failed(e) => e,
            },
        };
        let what = format!("not loaded: {failure}");
        if self.start_from_cache(&failure.to_string()).await {
            let what = format!("runs from the cache, because the registry did not give a plugin ({failure})");
            self.report_problem("RunningFromCache", &what);
            return;
        }
        tracing::warn!(%reference, "plugin source not loaded: {failure}");
        self.set.refuse_remote(&reference, what.clone()).await;
        self.report_awaited(&failure.to_string());
        self.report_problem("NotLoaded", &what);
    }

    /// Loads what the cache holds for the source, when the registry did not give it at start
    /// (`why`: what happened instead).
    async fn start_from_cache(&mut self, why: &str) -> bool {
        let hit = self.load_cached(why).await;
        self.count_cache(hit);
        hit
    }

    async fn load_cached(&mut self, why: &str) -> bool {
        let reference = self.source.reference.clone();
        let Some((record, wasm)) = self.cache.load(&reference) else { return false };
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
        let note = format!("started from the cache: the registry did not give a plugin that loads ({why})");
        tracing::warn!(%reference, digest = %record.digest, "plugin started from the cache: {why}");
        let info = SourceInfo {
            reference: reference.clone(),
            digest: Some(record.digest.clone()),
            fetched: Some(Fetched::Cache),
            signed_by: key.map(|k| k.describe()),
            note: Some(note),
        };
        self.noted = true;
        let loaded = self.set.load_remote(wasm, info, self.source.settings.clone()).await;
        self.from_cache = loaded == RemoteLoad::Running;
        if self.from_cache {
            self.report_cached(&record.digest, None);
            self.layer = Some(record.layer);
        }
        self.from_cache
    }

    /// Hands a pulled plugin to the set; caches it when it runs. Notes a change of the running
    /// artifact's digest, also when the component is the same (then nothing is reloaded).
    async fn install(&mut self, pulled: Pulled) -> RemoteLoad {
        let reference = self.source.reference.clone();
        let before = self.set.remote_digest(&reference);
        let info = SourceInfo {
            reference: reference.clone(),
            digest: Some(pulled.digest.clone()),
            fetched: Some(Fetched::Registry),
            signed_by: pulled.signed_by.clone(),
            note: None,
        };
        let record = self.record_of(pulled.digest.clone(), &pulled.wasm);
        let wasm = pulled.wasm.clone();
        let outcome = self.set.load_remote(pulled.wasm, info, self.source.settings.clone()).await;
        if outcome != RemoteLoad::Running {
            return outcome;
        }
        if let Some(from) = before.filter(|b| *b != pulled.digest) {
            let same = self.layer.as_deref() == Some(record.layer.as_str());
            tracing::info!(%reference, %from, to = %pulled.digest, same_component = same, "plugin source: the artifact running changed");
            if let Some(m) = &self.observers.metrics {
                m.plugin_source_digest_changes.get_or_create(&PluginSourceLabel { source: reference.clone() }).inc();
            }
            self.moved = Some((from, same));
        }
        self.from_cache = false;
        self.refused = None;
        self.noted = false;
        self.layer = Some(record.layer.clone());
        self.keep(record, wasm, false);
        RemoteLoad::Running
    }

    /// What the cache records for the source when `wasm`, of manifest `digest`, runs.
    fn record_of(&self, digest: String, wasm: &[u8]) -> Recorded {
        let key = self.key().ok().flatten().map(|k| k.fingerprint().to_string());
        Recorded { reference: self.source.reference.clone(), digest, layer: layout::sha256_digest(wasm), key }
    }

    /// When the cache lost what runs (removed or emptied while the host runs), pulls it again
    /// by digest and writes it; `PluginCached` says so meanwhile.
    async fn check_cached(&mut self) {
        let reference = self.source.reference.clone();
        let Some(digest) = self.set.remote_digest(&reference) else { return };
        if self.cache.recorded(&reference).is_some_and(|r| r.digest == digest) {
            return;
        }
        tracing::warn!(%reference, %digest, "the plugin cache no longer holds the plugin that runs; pulling it again");
        match self.fetch(&digest).await {
            Ok(pulled) => {
                let record = self.record_of(digest, &pulled.wasm);
                self.keep(record, pulled.wasm, false);
            }
            Err(e) => self.report_cached(&digest, Some(&Uncached::Lost(e))),
        }
    }

    /// Writes what runs to the cache, and says on `PluginCached` whether it is there; what
    /// could not be written is tried again at the next poll (`again`: this is such a try, whose
    /// failure the log has said already).
    fn keep(&mut self, record: Recorded, wasm: Vec<u8>, again: bool) {
        match self.cache.store(&record, &wasm) {
            Ok(()) => {
                if again {
                    tracing::info!(reference = %record.reference, "the plugin is cached now");
                }
                self.report_cached(&record.digest, None);
                self.uncached = None;
            }
            Err(e) => {
                if !again {
                    tracing::warn!(reference = %record.reference, "cannot cache the plugin; a restart will need the registry: {e}");
                }
                self.report_cached(&record.digest, Some(&Uncached::WriteFailed(e)));
                self.uncached = Some((record, wasm));
            }
        }
    }

    /// `PluginCached`: whether `digest`, which runs, is in the cache (`failed`: why not).
    fn report_cached(&self, digest: &str, failed: Option<&Uncached>) {
        let Some(c) = &self.observers.conditions else { return };
        let reference = &self.source.reference;
        match failed {
            None => c.ok(
                PLUGIN_CACHED,
                Some(reference),
                "Cached",
                format!(
                    "{reference}: {digest} is in the plugin cache; a start while the registry cannot be read runs it"
                ),
            ),
            Some(why) => {
                let (reason, what, fix) = why.describe();
                let instead = match self.cache.recorded(reference) {
                    Some(r) => format!("would run {}, which ran before", r.digest),
                    None => "would run nothing of this source".to_string(),
                };
                c.fail(
                    PLUGIN_CACHED,
                    Some(reference),
                    reason,
                    format!("{reference}: {digest} runs but {what}; a start while the registry cannot be read {instead}; {fix}"),
                )
            }
        }
    }

    /// One look at the registry: a new digest is pulled and loaded.
    async fn poll(&mut self) {
        match self.uncached.take() {
            Some((record, wasm)) => self.keep(record, wasm, true),
            None => self.check_cached().await,
        }
        let reference = self.source.reference.clone();
        let running = self.set.remote_digest(&reference);
        let digest = match self.resolve().await {
            Ok(d) => d,
            Err(e) => {
                self.count_fetch("failed");
                self.unreachable(&e, running.as_deref(), "the last look at the registry failed");
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
            self.refused = None;
            self.report_current(&digest);
            return;
        }
        if let Some(r) = &self.refused
            && r.digest == digest
            && !r.retry
        {
            // The tag still names the refused artifact: the condition says so, as it did (the
            // registry may have been unreachable meanwhile).
            self.report_refused();
            return;
        }
        if self.refused.as_ref().is_none_or(|r| r.digest != digest) {
            tracing::info!(%reference, %digest, "plugin source moved; pulling");
        }
        match self.get(&digest).await {
            Tried::Running => self.report_current(&digest),
            Tried::Refused => self.report_refused(),
            Tried::Failed(e) => {
                let what = format!("pulling {digest} failed");
                self.unreachable(&e, running.as_deref(), &what);
                let reason = if e.is_unreachable() { "RegistryUnreachable" } else { "NotLoaded" };
                self.report_problem(reason, &format!("{what} ({e})"));
            }
        }
    }

    /// Notes on the source (once per outage) that `what` failed with `e`, and tells the set why
    /// the source runs nothing when it does.
    fn unreachable(&mut self, e: &OciError, running: Option<&str>, what: &str) {
        if !self.noted {
            let reference = &self.source.reference;
            tracing::warn!(%reference, "plugin source: {what}: {e}");
            let note = match running {
                Some(d) => format!("{what} ({e}); {d} keeps running"),
                None => format!("{what} ({e})"),
            };
            self.set.note_remote(reference, Some(note));
            self.noted = true;
        }
        self.report_awaited(&e.to_string());
    }
}
