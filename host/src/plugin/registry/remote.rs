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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteLoad {
    /// They run now.
    Running,
    /// Refused for what they are (they do not compile, describe or fit the contract); the
    /// running version, if any, stays.
    Refused,
    /// Refused because another plugin holds their name or one of their kinds: worth trying
    /// again later, once that changes.
    Conflict,
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
        self.install(&key, loaded);
        let outcome = {
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            let outcome = match inner.files.get_mut(&key) {
                Some(e) => {
                    if unchanged {
                        // What the source names now is what runs: an earlier refusal is over.
                        e.error = None;
                    }
                    match &e.error {
                        None if e.hash == hash && e.plugin.is_some() => RemoteLoad::Running,
                        Some(LoadError::KindConflict { .. } | LoadError::DuplicateName { .. }) => RemoteLoad::Conflict,
                        _ => RemoteLoad::Refused,
                    }
                }
                None => RemoteLoad::Refused,
            };
            if outcome == RemoteLoad::Running {
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
    pub async fn refuse_remote(self: &Arc<Self>, reference: &str, message: String) {
        let _guard = self.loading.lock().await;
        let key = PathBuf::from(reference);
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        self.refuse(&mut inner, &key, LoadError::Read { file: key.clone(), message });
        inner.sources.entry(key).or_insert_with(|| SourceInfo::unloaded(reference));
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
