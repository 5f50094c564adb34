//! The kinds a set of plugin files serves, for the manifests (`crds`, `rbac`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use steward_sdk::KindInfo;

use crate::config::Config;
use crate::plugin::{Plugin, PluginSet, PluginSettings, PluginState, Runtime, served_kinds};

/// The kinds to serve: those `plugins` describe, or, without any, those of the plugins in the
/// config's `plugin_dir` (loaded as the host loads them), each narrowed by its `kinds:` in the
/// config. A plugin that does not load, and a kind two plugins describe, are errors naming the
/// files.
pub(super) async fn enabled_kinds(plugins: &[PathBuf], config: &Path) -> Result<Vec<KindInfo>> {
    Ok(enabled(plugins, config).await?.0)
}

/// [`enabled_kinds`], and the plugins that serve one of them.
pub(super) async fn enabled(plugins: &[PathBuf], config: &Path) -> Result<(Vec<KindInfo>, Vec<Arc<Plugin>>)> {
    let mut serving = Vec::new();
    let runtime = super::plugin::standalone_runtime()?;
    let loaded =
        if plugins.is_empty() { from_config(runtime, config).await? } else { from_files(runtime, plugins).await? };
    let mut kinds = Vec::new();
    for (file, plugin) in &loaded {
        if let Some(allowed) = &plugin.settings().kinds {
            for k in allowed.iter().filter(|k| !plugin.info().kinds.iter().any(|i| &i.kind == *k)) {
                eprintln!(
                    "warning: plugins.{}.kinds in {} names {k}, which {} does not describe",
                    plugin.name(),
                    config.display(),
                    file.display()
                );
            }
        }
        let served = served_kinds(plugin);
        let before = kinds.len();
        kinds.extend(plugin.info().kinds.iter().filter(|k| served.contains(&k.kind)).cloned());
        if kinds.len() > before {
            serving.push(plugin.clone());
        }
    }
    Ok((kinds, serving))
}

/// The plugins of the config's `plugin_dir`, loaded by a [`PluginSet`] as the host loads them
/// (with the config's settings, refusing a kind or name claimed twice); any file that does
/// not load is an error.
async fn from_config(runtime: Arc<Runtime>, config: &Path) -> Result<Vec<(PathBuf, Arc<Plugin>)>> {
    if !config.exists() {
        bail!(
            "no --plugin given and no config file {} to find the plugins in: pass --plugin FILE.wasm (repeatable) or --config FILE",
            config.display()
        );
    }
    let cfg = Config::load(config)?;
    let dir = &cfg.plugin_dir;
    let set = PluginSet::new(runtime, dir, cfg.plugins.clone(), PluginSettings::default());
    let statuses = set
        .load_all()
        .await
        .with_context(|| format!("cannot read plugin_dir {} (set in {})", dir.display(), config.display()))?;
    // The plugins of the registries too, as the host loads them (issue 17).
    let _sources = crate::oci::follow(set.clone(), &cfg.plugin_sources, &cfg.cache_dir, Default::default()).await;
    let statuses = if cfg.plugin_sources.is_empty() { statuses } else { set.statuses() };
    if statuses.is_empty() {
        bail!("there are no *.wasm plugins in {} (plugin_dir of {})", dir.display(), config.display());
    }
    if let Some(failed) = statuses.iter().find(|s| s.state == PluginState::Failed) {
        bail!("{}", failed.message.clone().unwrap_or_else(|| format!("{}: not loaded", failed.file)));
    }
    // Blocked plugins count: their kinds are served once the config grants what they need.
    Ok(set.plugins().into_iter().map(|p| (dir.join(p.file()), p)).collect())
}

/// The plugins of `files`, each loaded with default settings, in parallel; the first of two
/// plugins describing one kind is an error naming both files.
async fn from_files(runtime: Arc<Runtime>, files: &[PathBuf]) -> Result<Vec<(PathBuf, Arc<Plugin>)>> {
    let mut loads = Vec::new();
    for file in files.iter().cloned() {
        let runtime = runtime.clone();
        loads.push(tokio::spawn(async move {
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read the plugin {}", file.display()))?;
            let plugin = Plugin::load(runtime, &file, bytes, |_| PluginSettings::default()).await?;
            anyhow::Ok((file, Arc::new(plugin)))
        }));
    }
    let mut loaded = Vec::new();
    for load in loads {
        loaded.push(load.await.context("a plugin load task failed")??);
    }
    if let Some((kind, first, second)) = PluginSet::kind_claimed_twice(&loaded) {
        bail!(
            "kind {kind} is described by both {} and {}; a host serves each kind from one plugin: leave one out, or narrow one with `kinds:` under its plugins section in the config",
            first.display(),
            second.display()
        );
    }
    Ok(loaded)
}
