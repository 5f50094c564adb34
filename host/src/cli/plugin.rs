//! `steward plugin inspect|check`: plugin files, without a running host.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::client::PluginView;
use crate::config::Config;
use crate::plugin::{Plugin, PluginSet, PluginSettings, PluginState, Runtime, RuntimeOptions, WIT_VERSION};

use super::Output;
use super::table::{plugin_table, print_json};

/// What `steward plugin inspect` prints: what a plugin describes, and what loading it cost.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspected {
    name: String,
    version: String,
    /// The WIT package the plugin was built against, `steward:plugin@VERSION`.
    contract: String,
    /// The capabilities it declares: without their grant it is blocked.
    capabilities: Vec<String>,
    /// The capabilities whose interfaces its component imports: it loads without their grant,
    /// and a call into one that is not granted fails naming the grant.
    imports: Vec<&'static str>,
    kinds: Vec<InspectedKind>,
    size_bytes: usize,
    /// Compile and describe, in milliseconds to one decimal.
    load_ms: f64,
    /// For an artifact of a registry: the reference asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
    /// For an artifact of a registry: its manifest digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    /// For an artifact of a registry, with --key: the key its signature was verified with.
    #[serde(skip_serializing_if = "Option::is_none")]
    signed_by: Option<String>,
}

/// One kind as `steward plugin inspect` prints it, with its spec schema as JSON.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InspectedKind {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    resync_seconds: u32,
    /// The schema, or `null` if the plugin's text is not JSON.
    spec_schema: serde_json::Value,
}

/// The runtime of a command that loads plugins without a host: no instance pool, and the
/// user's compile cache ([`crate::plugin::user_cache_dir`]), so a plugin is compiled once per
/// version rather than at every run (a Python component costs about 17 s of CPU to compile). A
/// cache directory that cannot be made costs only the compile: the command says so and goes on.
pub(super) fn standalone_runtime() -> Result<std::sync::Arc<Runtime>> {
    let opts = RuntimeOptions { pooling: false, ..Default::default() };
    if let Some(dir) = crate::plugin::user_cache_dir() {
        match Runtime::new(RuntimeOptions { cache_dir: Some(dir), ..opts.clone() }) {
            Ok(runtime) => return Ok(runtime),
            Err(e @ crate::plugin::RuntimeError::Cache { .. }) => eprintln!(
                "warning: {e}; compiling without a cache (set {} to a writable directory, or to nothing for no cache)",
                crate::plugin::CACHE_ENV
            ),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Runtime::new(opts)?)
}

/// Prints what the plugin `file` describes (kinds, versions, schemas, capabilities) as JSON,
/// with its size and how long it took to load. `file` may be an `oci://` reference, pulled
/// (and verified with `key` when given) from its registry.
pub(super) async fn inspect(
    file: &Path,
    key: Option<&Path>,
    registry: &super::plugin_oci::RegistryArgs,
) -> Result<ExitCode> {
    let (bytes, pulled) = if super::plugin_oci::is_reference(file) {
        let (r, pulled) = super::plugin_oci::pull_verified(&file.to_string_lossy(), key, registry).await?;
        (pulled.wasm.clone(), Some((r, pulled)))
    } else {
        (std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?, None)
    };
    let runtime = standalone_runtime()?;
    let started = std::time::Instant::now();
    let plugin = Plugin::load(runtime, file, bytes.clone(), |_| PluginSettings::default()).await?;
    let load_ms = started.elapsed().as_secs_f64() * 1000.0;
    let info = plugin.info();
    print_json(&Inspected {
        name: info.name.clone(),
        version: info.version.clone(),
        contract: format!("steward:plugin@{WIT_VERSION}"),
        capabilities: info.capabilities.clone(),
        imports: plugin.imported_capabilities(),
        kinds: info
            .kinds
            .iter()
            .map(|k| InspectedKind {
                group: k.group.clone(),
                version: k.version.clone(),
                kind: k.kind.clone(),
                plural: k.plural.clone(),
                namespaced: k.namespaced,
                resync_seconds: k.resync_seconds,
                spec_schema: serde_json::from_str(&k.spec_schema).unwrap_or_default(),
            })
            .collect(),
        size_bytes: bytes.len(),
        load_ms: (load_ms * 10.0).round() / 10.0,
        reference: pulled.as_ref().map(|(r, _)| r.to_string()),
        digest: pulled.as_ref().map(|(_, p)| p.digest.clone()),
        signed_by: pulled.and_then(|(_, p)| p.signed_by),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Loads the plugin directory `dir` (default: the config's `plugin_dir`) as the host does and
/// reports every file's state; fails if any is not ready.
pub(super) async fn check(dir: Option<PathBuf>, config: &Path, output: Output) -> Result<ExitCode> {
    let config = if config.exists() { Config::load(config)? } else { Config::defaults(&std::env::current_dir()?) };
    let dir = dir.unwrap_or_else(|| config.plugin_dir.clone());
    if !dir.is_dir() {
        bail!("plugin directory {} does not exist", dir.display());
    }
    let runtime = Runtime::new(RuntimeOptions {
        cache_dir: Some(config.cache_dir.clone()),
        cache_limit: config.cache_limit,
        ..Default::default()
    })?;
    let set = PluginSet::new(runtime, &dir, config.plugins.clone(), PluginSettings::default());
    let statuses = set.load_all().await.with_context(|| format!("cannot read {}", dir.display()))?;
    let bad = statuses.iter().any(|s| s.state != PluginState::Ready);
    let empty = statuses.is_empty();
    let views: Vec<PluginView> = statuses.into_iter().map(PluginView::from).collect();
    match output {
        Output::Json => print_json(&views)?,
        Output::Table => print!("{}", plugin_table(&views)),
    }
    if empty {
        eprintln!("no *.wasm plugins in {}", dir.display());
    }
    Ok(if bad { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
