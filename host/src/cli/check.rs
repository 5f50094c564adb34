//! `steward check`: the config, the plugins and every resource, checked without running the host.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::config::{Config, Mode};
use crate::plugin::{PluginSet, PluginSettings, PluginState, Runtime, RuntimeOptions};
use crate::source::fs::FsSource;

/// Loads the config and its plugins as the host does, then (in filesystem mode) reads every
/// resource and has its plugin validate it. Prints each problem with its file and line; fails
/// if there is any.
pub(super) async fn check(config: &Path) -> Result<ExitCode> {
    let cfg = Config::load(config)?;
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cfg.cache_dir.clone()), ..Default::default() })?;
    let set = PluginSet::new(runtime, &cfg.plugin_dir, cfg.plugins.clone(), PluginSettings::default());
    let statuses =
        set.load_all().await.with_context(|| format!("cannot read plugin_dir {}", cfg.plugin_dir.display()))?;
    // The plugins of the registries too, as the host loads them (issue 17).
    let _sources = crate::oci::follow(set.clone(), &cfg.plugin_sources, &cfg.cache_dir).await;
    let statuses = if cfg.plugin_sources.is_empty() { statuses } else { set.statuses() };
    let mut problems = 0;
    for s in &statuses {
        if s.state != PluginState::Ready {
            problems += 1;
            println!("{}: {}", s.file, s.message.clone().unwrap_or_else(|| format!("{:?}", s.state)));
        }
    }
    if cfg.mode == Mode::Kubernetes {
        // The objects live in the cluster, where the CRDs' schemas check them.
        return Ok(if problems == 0 {
            println!(
                "ok: {} plugins, no problems (mode: kubernetes: objects are checked by the cluster)",
                statuses.len()
            );
            ExitCode::SUCCESS
        } else {
            eprintln!("{problems} problem(s)");
            ExitCode::FAILURE
        });
    }
    let source = FsSource::new(crate::source::fs::FsOptions::for_config(&cfg), Default::default());
    if !cfg.resources.is_dir() {
        bail!("resources directory {} does not exist", cfg.resources.display());
    }
    source.scan().await;
    for p in source.problems() {
        problems += 1;
        println!("{p}");
    }
    for key in source.keys() {
        let Some(obj) = source.get(&key) else { continue };
        let at = format!("{}:1", obj.location);
        match set.resolve(&key.kind) {
            Err(e) => {
                problems += 1;
                println!("{at}: {key}: {e}");
            }
            Ok(plugin) => match plugin.validate(&obj.raw).await.result {
                Ok(errs) => {
                    for e in errs {
                        problems += 1;
                        println!("{at}: {key}: {}: {}", e.path, e.message);
                    }
                }
                Err(e) => {
                    problems += 1;
                    println!("{at}: {key}: validate failed: {e}");
                }
            },
        }
    }
    if problems == 0 {
        println!("ok: {} plugins, {} objects, no problems", statuses.len(), source.len());
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{problems} problem(s)");
        Ok(ExitCode::FAILURE)
    }
}
