//! The plugin directory: loads every `*.wasm`, maps kinds to plugins, and swaps in new versions atomically.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use super::cache::Origin;
use super::error::LoadError;
use super::instance::Plugin;
use super::runtime::Runtime;
use super::settings::PluginSettings;

mod remote;
pub use remote::{Awaited, Fetched, RemoteLoad, SourceInfo};

/// A change to the set of loaded plugins, for whoever reconciles their kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum PluginEvent {
    /// A plugin was loaded and serves `kinds`.
    Loaded {
        /// Plugin name.
        name: String,
        /// Its version.
        version: String,
        /// Kinds it serves now.
        kinds: Vec<String>,
    },
    /// A new version replaced the running one.
    Updated {
        /// Plugin name.
        name: String,
        /// The version that ran before.
        from: String,
        /// The version that runs now.
        to: String,
        /// Kinds it serves now.
        kinds: Vec<String>,
        /// Kinds the old version served that the new one does not.
        removed: Vec<String>,
    },
    /// A plugin's file went away; its kinds are no longer served.
    Unloaded {
        /// Plugin name.
        name: String,
        /// Kinds it served.
        kinds: Vec<String>,
    },
    /// A file could not be loaded; if an older version was running, it still is.
    Failed {
        /// File name.
        file: String,
        /// Why.
        error: String,
        /// Kinds whose objects wait for this plugin and are to say why (a registry source that
        /// runs nothing, whose kinds are known); empty for a file.
        kinds: Vec<String>,
    },
}

/// The state of one plugin file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PluginState {
    /// Loaded; its kinds are served.
    Ready,
    /// Loaded, but it needs a capability the config does not grant; its kinds are not served.
    Blocked,
    /// Not loaded.
    Failed,
}

/// What `steward plugin check` and the API show of one plugin file.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The file name within the plugin directory (for a registry plugin: its `oci://` reference).
    pub file: String,
    /// The plugin's name, once described.
    pub name: Option<String>,
    /// The running version.
    pub version: Option<String>,
    /// Ready, Blocked or Failed.
    pub state: PluginState,
    /// Kinds it serves (or would serve when unblocked).
    pub kinds: Vec<String>,
    /// Capabilities it may use: those it declares, then those its component imports that are
    /// granted (an ungranted import is not listed: calling it fails, naming the grant).
    pub capabilities: Vec<String>,
    /// Capabilities it declares or is granted but never imports, one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Compiled now or loaded from the compile cache.
    pub origin: Option<Origin>,
    /// Why it is blocked or failed, or why the last reload was refused.
    pub message: Option<String>,
    /// Where it came from, for a plugin of a registry (`plugin_sources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceInfo>,
}

/// Why a kind cannot be reconciled right now.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KindUnavailable {
    /// No loaded plugin serves the kind.
    #[error("no plugin serves kind {kind}; put a plugin for it in the plugin directory")]
    NoPlugin {
        /// The kind.
        kind: String,
    },
    /// No loaded plugin serves the kind; it is to come from a plugin source that runs nothing
    /// yet (still being fetched, or its artifact was refused).
    #[error("no plugin serves kind {kind} yet: it comes from the plugin source {reference}, which {why}")]
    FromSource {
        /// The kind.
        kind: String,
        /// The source's reference.
        reference: String,
        /// Why it runs nothing, and what to do.
        why: String,
    },
    /// No loaded plugin serves the kind; plugin sources that run nothing yet, whose kinds are
    /// not known, may serve it.
    #[error(
        "no plugin serves kind {kind}; it may come from {}; else put a plugin for it in the plugin directory",
        .sources.iter().map(|(r, why)| format!("the plugin source {r}, which {why}")).collect::<Vec<_>>().join(", or ")
    )]
    MaybeFromSource {
        /// The kind.
        kind: String,
        /// Each source's reference and why it runs nothing.
        sources: Vec<(String, String)>,
    },
    /// Its plugin is blocked.
    #[error("kind {kind} is served by plugin {plugin}, which is blocked: {message}")]
    Blocked {
        /// The kind.
        kind: String,
        /// The plugin.
        plugin: String,
        /// What to do.
        message: String,
    },
}

struct Entry {
    hash: [u8; 32],
    plugin: Option<Arc<Plugin>>,
    error: Option<LoadError>,
}

#[derive(Default)]
struct Inner {
    files: BTreeMap<PathBuf, Entry>,
    /// The registry plugins among `files` (keyed by their reference), and where each came from.
    sources: BTreeMap<PathBuf, SourceInfo>,
    /// The registry sources that run nothing, and why (see [`PluginSet::await_remote`]).
    awaited: BTreeMap<PathBuf, Awaited>,
}

/// All plugins of one directory.
///
/// Readers ([`PluginSet::resolve`]) never wait on a load: a new version is
/// compiled and described beside the running one and swapped in under a
/// short write lock; calls already running finish on the version they started with.
pub struct PluginSet {
    runtime: Arc<Runtime>,
    dir: PathBuf,
    settings: BTreeMap<String, PluginSettings>,
    defaults: PluginSettings,
    inner: RwLock<Inner>,
    events: broadcast::Sender<PluginEvent>,
    loading: tokio::sync::Mutex<()>,
}

impl PluginSet {
    /// An empty set over `dir`; `settings` are by plugin name, `defaults` for plugins not named.
    pub fn new(
        runtime: Arc<Runtime>,
        dir: impl Into<PathBuf>,
        settings: BTreeMap<String, PluginSettings>,
        defaults: PluginSettings,
    ) -> Arc<Self> {
        let (events, _) = broadcast::channel(256);
        Arc::new(Self {
            runtime,
            dir: dir.into(),
            settings,
            defaults,
            inner: RwLock::new(Inner::default()),
            events,
            loading: tokio::sync::Mutex::new(()),
        })
    }

    /// The plugin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The runtime the plugins run on.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Changes to the set, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<PluginEvent> {
        self.events.subscribe()
    }

    fn settings_for(&self, name: &str) -> PluginSettings {
        self.settings.get(name).cloned().unwrap_or_else(|| self.defaults.clone())
    }

    /// Loads every `*.wasm` in the directory, compiling them in parallel and
    /// registering them in file-name order (so the first of two files claiming
    /// one kind wins, and the second is reported). A missing directory is an error.
    pub async fn load_all(self: &Arc<Self>) -> std::io::Result<Vec<PluginStatus>> {
        let _guard = self.loading.lock().await;
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_plugin_file(p))
            .collect();
        files.sort();
        let mut tasks = Vec::new();
        for file in files {
            let set = self.clone();
            tasks.push(tokio::spawn(async move {
                let loaded = set.load_file(&file).await;
                (file, loaded)
            }));
        }
        for t in tasks {
            let (file, loaded) = t.await.map_err(std::io::Error::other)?;
            self.install(&file, loaded);
        }
        Ok(self.statuses())
    }

    /// Loads (or reloads) one file. The running version, if any, keeps running unless the new one is good.
    pub async fn reload(self: &Arc<Self>, file: &Path) {
        let _guard = self.loading.lock().await;
        if !file.exists() {
            self.unload(file);
            return;
        }
        let loaded = self.load_file(file).await;
        self.install(file, loaded);
        self.retry_conflicts().await;
    }

    /// Forgets a file whose plugin was removed; its kinds are no longer served.
    pub async fn remove(self: &Arc<Self>, file: &Path) {
        let _guard = self.loading.lock().await;
        self.unload(file);
        self.retry_conflicts().await;
    }

    async fn load_file(&self, file: &Path) -> Result<([u8; 32], Option<Plugin>), LoadError> {
        // Errors and statuses name the file as it stands in the plugin directory, never the host path.
        let shown = PathBuf::from(file_name(file));
        let bytes =
            tokio::fs::read(file).await.map_err(|e| LoadError::Read { file: shown.clone(), message: e.to_string() })?;
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        let unchanged = {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            inner.files.get(file).is_some_and(|e| e.hash == hash && e.plugin.is_some())
        };
        if unchanged {
            return Ok((hash, None));
        }
        let plugin = Plugin::load(self.runtime.clone(), &shown, bytes, |name| self.settings_for(name)).await?;
        Ok((hash, Some(plugin)))
    }

    fn install(&self, file: &Path, loaded: Result<([u8; 32], Option<Plugin>), LoadError>) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        self.install_in(&mut inner, file, loaded);
    }

    /// [`Self::install`] under a lock the caller holds, so that what it records beside the
    /// plugin (a remote source's digest) is seen together with it.
    fn install_in(&self, inner: &mut Inner, file: &Path, loaded: Result<([u8; 32], Option<Plugin>), LoadError>) {
        let old = inner.files.get(file).and_then(|e| e.plugin.clone());
        let (hash, plugin) = match loaded {
            Ok((_, None)) => {
                // The file holds what runs: a refusal of other bytes seen meanwhile (a file read
                // half-written, then finished as it was) is over.
                if let Some(e) = inner.files.get_mut(file) {
                    e.error = None;
                }
                return;
            }
            Ok((hash, Some(p))) => (hash, p),
            Err(error) => return self.refuse(inner, file, error),
        };
        if let Err(error) = check_conflicts(inner, file, &plugin) {
            return self.refuse(inner, file, error);
        }
        let kinds = served_kinds(&plugin);
        let name = plugin.name().to_string();
        let version = plugin.info().version.clone();
        tracing::info!(plugin = %name, %version, kinds = ?kinds, origin = ?plugin.origin(), "plugin loaded");
        if plugin.is_blocked() {
            tracing::warn!(plugin = %name, "{}", blocked_message(&plugin));
        }
        for w in plugin.capability_warnings() {
            tracing::warn!(plugin = %name, "{w}");
        }
        inner.files.insert(file.to_path_buf(), Entry { hash, plugin: Some(Arc::new(plugin)), error: None });
        let event = match old {
            Some(o) => {
                let now: BTreeSet<_> = kinds.iter().collect();
                let removed = served_kinds(&o).into_iter().filter(|k| !now.contains(k)).collect();
                PluginEvent::Updated { name, from: o.info().version.clone(), to: version, kinds, removed }
            }
            None => PluginEvent::Loaded { name, version, kinds },
        };
        self.send(event);
    }

    /// Records why `file` was not (re)loaded; a running older version stays.
    fn refuse(&self, inner: &mut Inner, file: &Path, error: LoadError) {
        tracing::warn!(%error, "plugin not loaded");
        self.send(PluginEvent::Failed { file: file_name(file), error: error.to_string(), kinds: Vec::new() });
        let entry = inner.files.entry(file.to_path_buf()).or_insert(Entry { hash: [0; 32], plugin: None, error: None });
        entry.error = Some(error);
    }

    fn unload(&self, file: &Path) {
        let removed = self.inner.write().unwrap_or_else(|e| e.into_inner()).files.remove(file);
        if let Some(Entry { plugin: Some(p), .. }) = removed {
            tracing::info!(plugin = %p.name(), "plugin removed");
            self.send(PluginEvent::Unloaded { name: p.name().to_string(), kinds: served_kinds(&p) });
        }
    }

    /// Files refused because another file held their kind or name get another chance.
    async fn retry_conflicts(self: &Arc<Self>) {
        let waiting: Vec<PathBuf> = {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            inner
                .files
                .iter()
                .filter(|(_, e)| {
                    e.plugin.is_none()
                        && matches!(e.error, Some(LoadError::KindConflict { .. } | LoadError::DuplicateName { .. }))
                })
                // A registry plugin is not a file: its source tries again at its next poll.
                .filter(|(f, _)| !inner.sources.contains_key(*f))
                .map(|(f, _)| f.clone())
                .collect()
        };
        for file in waiting {
            let loaded = self.load_file(&file).await;
            self.install(&file, loaded);
        }
    }

    fn send(&self, e: PluginEvent) {
        let _ = self.events.send(e);
    }

    /// The plugin that reconciles `kind`, if one is loaded and not blocked.
    pub fn resolve(&self, kind: &str) -> Result<Arc<Plugin>, KindUnavailable> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        for e in inner.files.values() {
            let Some(p) = &e.plugin else { continue };
            if serves(p, kind) {
                if !p.is_blocked() {
                    return Ok(p.clone());
                }
                return Err(KindUnavailable::Blocked {
                    kind: kind.to_string(),
                    plugin: p.name().to_string(),
                    message: blocked_message(p),
                });
            }
        }
        let kind = kind.to_string();
        let (mut serving, unknown) = Self::awaited_for(&inner, &kind);
        if !serving.is_empty() {
            let (reference, why) = serving.swap_remove(0);
            return Err(KindUnavailable::FromSource { kind, reference, why });
        }
        if !unknown.is_empty() {
            return Err(KindUnavailable::MaybeFromSource { kind, sources: unknown });
        }
        Err(KindUnavailable::NoPlugin { kind })
    }

    /// Whether objects of `kind` live in namespaces, as the loaded plugin (ready or blocked)
    /// that describes the kind says; `None` when no loaded plugin describes it.
    pub fn namespaced(&self, kind: &str) -> Option<bool> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .files
            .values()
            .filter_map(|e| e.plugin.as_ref())
            .find_map(|p| p.info().kinds.iter().find(|k| k.kind == kind).map(|k| k.namespaced))
    }

    /// The printer columns `kind` declares, as the loaded plugin (ready or blocked) that describes
    /// it says; none when no loaded plugin describes it or it declares none.
    pub fn columns(&self, kind: &str) -> Vec<steward_sdk::PrinterColumn> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .files
            .values()
            .filter_map(|e| e.plugin.as_ref())
            .find_map(|p| p.info().kinds.iter().find(|k| k.kind == kind).map(|k| k.columns.clone()))
            .unwrap_or_default()
    }

    /// The loaded plugins (ready or blocked), in file order.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.files.values().filter_map(|e| e.plugin.clone()).collect()
    }

    /// Every plugin file's state, in file order.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .files
            .iter()
            .map(|(file, e)| match &e.plugin {
                Some(p) => {
                    let blocked = p.is_blocked();
                    let message = if blocked {
                        Some(blocked_message(p))
                    } else {
                        e.error.as_ref().map(|err| match inner.sources.get(file).and_then(|s| s.digest.as_deref()) {
                            // A registry plugin's error names the source and the artifact refused.
                            Some(digest) => format!("{err}; the running version stays ({digest})"),
                            None => format!("the running version stays; the new file was refused: {err}"),
                        })
                    };
                    PluginStatus {
                        file: file_name(file),
                        name: Some(p.name().to_string()),
                        version: Some(p.info().version.clone()),
                        state: if blocked { PluginState::Blocked } else { PluginState::Ready },
                        kinds: served_kinds(p),
                        capabilities: p.needed_capabilities(),
                        warnings: p.capability_warnings().to_vec(),
                        origin: Some(p.origin()),
                        message,
                        source: inner.sources.get(file).cloned(),
                    }
                }
                None => PluginStatus {
                    file: file_name(file),
                    name: None,
                    version: None,
                    state: PluginState::Failed,
                    kinds: Vec::new(),
                    capabilities: Vec::new(),
                    warnings: Vec::new(),
                    origin: None,
                    message: e.error.as_ref().map(ToString::to_string),
                    source: inner.sources.get(file).cloned(),
                },
            })
            .collect()
    }
}

/// Whether `path` names a plugin file (`*.wasm`, not hidden).
pub fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm")
        && !path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'))
}

fn file_name(p: &Path) -> String {
    // A registry plugin's key is its reference, shown whole.
    if let Some(reference) = p.to_str().filter(|s| s.starts_with("oci://")) {
        return reference.to_string();
    }
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A warning for each name under `plugins:` in the host config that no loaded plugin has, naming
/// the plugins found (settings for a plugin that is not there apply to nothing, most often a
/// typo). Says nothing while a plugin file failed to load before it told its name: the settings
/// may be for it.
pub fn settings_without_plugin<'a>(
    configured: impl IntoIterator<Item = &'a str>,
    statuses: &[PluginStatus],
) -> Vec<String> {
    if statuses.iter().any(|s| s.name.is_none()) {
        return Vec::new();
    }
    let found: std::collections::BTreeSet<&str> = statuses.iter().filter_map(|s| s.name.as_deref()).collect();
    let list = if found.is_empty() { "none".to_string() } else { found.iter().copied().collect::<Vec<_>>().join(", ") };
    configured
        .into_iter()
        .filter(|name| !found.contains(name))
        .map(|name| {
            format!("plugins.{name}: no plugin is named `{name}`, so these settings apply to nothing (plugins found: {list})")
        })
        .collect()
}

/// The kinds `p` serves: all it describes, or those its settings allow.
pub fn served_kinds(p: &Plugin) -> Vec<String> {
    p.info()
        .kinds
        .iter()
        .map(|k| k.kind.clone())
        .filter(|k| p.settings().kinds.as_ref().is_none_or(|allowed| allowed.contains(k)))
        .collect()
}

/// Whether `p` serves `kind` (it is among [`served_kinds`]), answered without building that
/// list: the engine asks this several times per reconcile.
pub fn serves(p: &Plugin, kind: &str) -> bool {
    p.info().kinds.iter().any(|k| k.kind == kind)
        && p.settings().kinds.as_ref().is_none_or(|allowed| allowed.iter().any(|k| k == kind))
}

/// What a blocked plugin's status says: what it needs, and the config line that grants it.
fn blocked_message(p: &Plugin) -> String {
    let missing = p.missing_capabilities();
    format!(
        "it needs capability {} which the host config does not grant; add `capabilities: [{}]` under plugins.{} in the host config",
        missing.join(", "),
        p.needed_capabilities().join(", "),
        p.name()
    )
}

fn check_conflicts(inner: &Inner, file: &Path, plugin: &Plugin) -> Result<(), LoadError> {
    let mine = served_kinds(plugin);
    for (other_file, e) in &inner.files {
        if other_file == file {
            continue;
        }
        let Some(other) = &e.plugin else { continue };
        if other.name() == plugin.name() {
            return Err(LoadError::DuplicateName {
                file: PathBuf::from(file_name(file)),
                name: plugin.name().to_string(),
                other_file: PathBuf::from(file_name(other_file)),
            });
        }
        let theirs = served_kinds(other);
        if let Some(kind) = mine.iter().find(|k| theirs.contains(k)) {
            return Err(LoadError::KindConflict {
                file: PathBuf::from(file_name(file)),
                kind: kind.clone(),
                other: other.name().to_string(),
                other_file: PathBuf::from(file_name(other_file)),
            });
        }
    }
    Ok(())
}

impl PluginSet {
    /// The first kind two of `plugins` both serve (as [`served_kinds`] says), with the files of
    /// the first and the second plugin claiming it; `None` when each kind has one plugin. This is
    /// the rule a set applies to the files of its directory, for plugins loaded from anywhere
    /// (`steward crds --plugin`), in the order given.
    pub fn kind_claimed_twice<'a, F>(plugins: &'a [(F, Arc<Plugin>)]) -> Option<(String, &'a F, &'a F)> {
        let mut owner: BTreeMap<String, &'a F> = BTreeMap::new();
        for (file, plugin) in plugins {
            for kind in served_kinds(plugin) {
                if let Some(first) = owner.get(&kind) {
                    return Some((kind, first, file));
                }
                owner.insert(kind, file);
            }
        }
        None
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    fn status(name: Option<&str>) -> PluginStatus {
        PluginStatus {
            file: "x.wasm".into(),
            name: name.map(Into::into),
            version: None,
            state: PluginState::Ready,
            kinds: Vec::new(),
            capabilities: Vec::new(),
            warnings: Vec::new(),
            origin: None,
            message: None,
            source: None,
        }
    }

    #[test]
    fn settings_for_a_plugin_that_is_not_there_are_named_with_the_plugins_found() {
        let found = [status(Some("workflow")), status(Some("mcpserver"))];
        assert_eq!(
            settings_without_plugin(["mcpserver", "mcpservr"], &found),
            [
                "plugins.mcpservr: no plugin is named `mcpservr`, so these settings apply to nothing (plugins found: mcpserver, workflow)"
            ]
        );
        assert!(settings_without_plugin(["mcpserver", "workflow"], &found).is_empty());
        assert!(settings_without_plugin(["x"], &[]).first().is_some_and(|w| w.ends_with("(plugins found: none)")));
        // A plugin that did not say its name may be the one the settings are for.
        assert!(settings_without_plugin(["x"], &[status(None)]).is_empty());
    }

    #[test]
    fn a_kind_waiting_for_a_plugin_source_names_the_source_and_why() {
        let from = KindUnavailable::FromSource {
            kind: "Noop".into(),
            reference: "oci://r/noop:1".into(),
            why: "was refused: the artifact sha256:ab has no signature".into(),
        };
        assert_eq!(
            from.to_string(),
            "no plugin serves kind Noop yet: it comes from the plugin source oci://r/noop:1, which was refused: the artifact sha256:ab has no signature"
        );
        let maybe = KindUnavailable::MaybeFromSource {
            kind: "Noop".into(),
            sources: vec![
                ("oci://r/a:1".into(), "is still being fetched (x)".into()),
                ("oci://r/b:1".into(), "was refused: y".into()),
            ],
        };
        assert_eq!(
            maybe.to_string(),
            "no plugin serves kind Noop; it may come from the plugin source oci://r/a:1, which is still being fetched (x), or the plugin source oci://r/b:1, which was refused: y; else put a plugin for it in the plugin directory"
        );
    }
}
