//! Plugins whose bytes come from a registry instead of a file: the same load, swap and refusal path as the directory's files.

use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{LoadError, Plugin, PluginSet, PluginSettings};

/// Where a registry plugin's running bytes were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fetched {
    /// Pulled from the registry (and verified) by this process.
    Registry,
    /// Read from the on-disk cache, because the registry could not give it.
    Cache,
}

/// What `steward plugins` and the API show of a plugin that came from a registry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceInfo {
    /// The reference as configured (`oci://registry/repository:tag` or `…@sha256:…`).
    pub reference: String,
    /// The manifest digest of the running artifact; `None` until one has loaded.
    pub digest: Option<String>,
    /// Where the running bytes were read from.
    pub fetched: Option<Fetched>,
    /// The key the running artifact's signature was verified with (`FILE (sha256:…)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// What the last look at the registry found, when it did not go well (for example that it
    /// was unreachable and the cache stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl SourceInfo {
    /// A source of which nothing is loaded yet.
    pub fn unloaded(reference: &str) -> Self {
        Self { reference: reference.into(), digest: None, fetched: None, signed_by: None, note: None }
    }
}

/// What became of bytes handed to [`PluginSet::load_remote`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteLoad {
    /// They run now.
    Running,
    /// Refused for what they are (they do not compile, describe or fit the contract); the
    /// running version, if any, stays. Says why, naming the artifact's digest (`refused: the
    /// artifact sha256:… does not load: …`), without the reference.
    Refused(String),
    /// Refused because another plugin holds their name or one of their kinds: worth trying
    /// again later, once that changes. Says why (`refused: the artifact sha256:… cannot run: …`),
    /// without the reference.
    Conflict(String),
}

/// A registry source that runs nothing: its reference, and why (see [`Awaited::why`]).
pub(super) type Waiting = (String, String);

/// Why a registry source runs nothing, for the messages of the objects of the kinds it is to
/// serve (see [`PluginSet::resolve`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Awaited {
    /// The kinds it is to serve (as its settings or its artifact's annotation say); empty when
    /// not known yet.
    pub kinds: Vec<String>,
    /// Why it runs nothing, as a clause that follows "which": `is still being fetched (…)`,
    /// `was refused: the artifact sha256:… has no signature; …`.
    pub why: String,
}

impl PluginSet {
    /// Loads `bytes` as the plugin of the registry source `info.reference`, exactly as a changed
    /// file of the directory is loaded: compiled and described beside the running version,
    /// swapped in only if that succeeds, else the running version stays and the failure is
    /// reported. `settings`, when given, apply instead of the `plugins.<name>` section.
    /// Says whether `bytes` are what runs now, and if not, why.
    pub async fn load_remote(
        self: &Arc<Self>,
        bytes: Vec<u8>,
        info: SourceInfo,
        settings: Option<PluginSettings>,
    ) -> RemoteLoad {
        let _guard = self.loading.lock().await;
        let key = PathBuf::from(&info.reference);
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        let unchanged = {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            inner.files.get(&key).is_some_and(|e| e.hash == hash && e.plugin.is_some())
        };
        let loaded = if unchanged {
            Ok((hash, None))
        } else {
            let settings_for = |name: &str| settings.clone().unwrap_or_else(|| self.settings_for(name));
            Plugin::load(self.runtime.clone(), &key, bytes, settings_for).await.map(|p| (hash, Some(p)))
        };
        let outcome = {
            // One lock for the plugin and its source: a reader never sees the new version with
            // the digest of the one before.
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            self.install_in(&mut inner, &key, loaded);
            let artifact = info.digest.as_deref().unwrap_or("pulled");
            let outcome = match inner.files.get_mut(&key) {
                Some(e) => {
                    if unchanged {
                        // What the source names now is what runs: an earlier refusal is over.
                        e.error = None;
                    }
                    match &e.error {
                        None if e.hash == hash && e.plugin.is_some() => RemoteLoad::Running,
                        Some(err @ (LoadError::KindConflict { .. } | LoadError::DuplicateName { .. })) => {
                            RemoteLoad::Conflict(format!(
                                "refused: the artifact {artifact} cannot run: {}",
                                without_file(err, &info.reference)
                            ))
                        }
                        Some(err) => {
                            let why = format!(
                                "refused: the artifact {artifact} does not load: {}",
                                without_file(err, &info.reference)
                            );
                            // The status names the artifact refused, not only the source.
                            e.error = Some(LoadError::Source { file: key.clone(), message: why.clone() });
                            RemoteLoad::Refused(why)
                        }
                        None => RemoteLoad::Refused(format!("refused: the artifact {artifact} did not load")),
                    }
                }
                None => RemoteLoad::Refused(format!("refused: the artifact {artifact} did not load")),
            };
            if outcome == RemoteLoad::Running {
                inner.awaited.remove(&key);
                inner.sources.insert(key.clone(), info);
            } else {
                inner.sources.entry(key).or_insert_with(|| SourceInfo::unloaded(&info.reference));
            }
            outcome
        };
        self.retry_conflicts().await;
        outcome
    }

    /// Records that the registry source `reference` could not give a plugin (unreachable,
    /// refused, unsigned): reported like a file that failed to load; a running version stays.
    /// `message` says what happened without the reference (`refused: the artifact sha256:… has
    /// no signature; …`); the status shows it after the reference.
    pub async fn refuse_remote(self: &Arc<Self>, reference: &str, message: String) {
        let _guard = self.loading.lock().await;
        let key = PathBuf::from(reference);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        self.refuse(&mut inner, &key, LoadError::Source { file: key.clone(), message });
        inner.sources.entry(key).or_insert_with(|| SourceInfo::unloaded(reference));
    }

    /// Says why the registry source `reference` runs nothing (`None`: it runs, or is not
    /// waited for). While set, objects of `awaited.kinds` (or, when those are not known, of
    /// any kind no plugin serves) say so instead of asking for a file in the plugin directory.
    /// A change is sent as [`super::PluginEvent::Failed`] with those kinds, so that their
    /// objects say it at once.
    pub fn await_remote(&self, reference: &str, awaited: Option<Awaited>) {
        let key = PathBuf::from(reference);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let kinds = match &awaited {
            Some(a) if inner.awaited.get(&key) != Some(a) => Some((a.kinds.clone(), a.why.clone())),
            _ => None,
        };
        match awaited {
            Some(a) => inner.awaited.insert(key, a),
            None => inner.awaited.remove(&key),
        };
        drop(inner);
        if let Some((kinds, why)) = kinds.filter(|(k, _)| !k.is_empty()) {
            self.send(super::PluginEvent::Failed { file: reference.to_string(), error: why, kinds });
        }
    }

    /// The registry sources that run nothing and why, for [`PluginSet::resolve`]: those known
    /// to serve `kind` first, then those whose kinds are not known.
    pub(super) fn awaited_for(inner: &super::Inner, kind: &str) -> (Vec<Waiting>, Vec<Waiting>) {
        let mut serving = Vec::new();
        let mut unknown = Vec::new();
        for (key, a) in &inner.awaited {
            if inner.files.get(key).is_some_and(|e| e.plugin.is_some()) {
                continue;
            }
            let entry = (key.display().to_string(), a.why.clone());
            if a.kinds.iter().any(|k| k == kind) {
                serving.push(entry);
            } else if a.kinds.is_empty() {
                unknown.push(entry);
            }
        }
        (serving, unknown)
    }

    /// Sets (or clears) the note on the registry source `reference`.
    pub fn note_remote(&self, reference: &str, note: Option<String>) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = inner.sources.get_mut(&PathBuf::from(reference)) {
            s.note = note;
        }
    }

    /// The manifest digest running for the registry source `reference`.
    pub fn remote_digest(&self, reference: &str) -> Option<String> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let key = PathBuf::from(reference);
        inner.files.get(&key).and_then(|e| e.plugin.as_ref())?;
        inner.sources.get(&key).and_then(|s| s.digest.clone())
    }
}

/// `err`'s message without the `file: ` it starts with.
fn without_file(err: &LoadError, file: &str) -> String {
    let text = err.to_string();
    text.strip_prefix(&format!("{file}: ")).map_or_else(|| text.clone(), str::to_string)
}
