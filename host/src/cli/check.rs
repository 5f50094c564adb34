//! `steward check`: the config, the plugins and every resource, checked without running the host.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::config::{Config, Mode};
use crate::model::FieldWarning;
use crate::plugin::{PluginSet, PluginSettings, PluginState, Runtime, RuntimeOptions};
use crate::schema::{self, locate::Located};
use crate::source::fs::FsSource;

/// Loads the config and its plugins as the host does, then (in filesystem mode) reads every
/// resource, prunes its spec as the host would (`field_validation`), and has its plugin validate
/// it. Prints each problem with its file and line and each warning as
/// `file:line:column: warning: path: message`; fails if there is any problem, or, with `strict`,
/// any warning.
pub(super) async fn check(config: &Path, strict: bool) -> Result<ExitCode> {
    let cfg = Config::load(config)?;
    let runtime = Runtime::new(RuntimeOptions {
        cache_dir: Some(cfg.cache_dir.clone()),
        cache_limit: cfg.cache_limit,
        plugin_env: cfg.plugin_env(),
        ..Default::default()
    })?;
    let set = PluginSet::new(runtime, &cfg.plugin_dir, cfg.plugins.clone(), PluginSettings::default());
    let statuses =
        set.load_all().await.with_context(|| format!("cannot read plugin_dir {}", cfg.plugin_dir.display()))?;
    // The plugins of the registries too, as the host loads them (issue 17).
    let _sources = crate::oci::follow(set.clone(), &cfg.plugin_sources, &cfg.cache_dir, Default::default()).await;
    let statuses = if cfg.plugin_sources.is_empty() { statuses } else { set.statuses() };
    let mut problems = 0;
    let unused = crate::plugin::settings_without_plugin(cfg.plugins.keys().map(String::as_str), &statuses);
    for w in &unused {
        println!("{}: warning: {w}", config.display());
    }
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
    let mut files: HashMap<String, Option<Located>> = HashMap::new();
    let mut warned = unused.len();
    for key in source.keys() {
        let Some(mut obj) = source.get(&key) else { continue };
        let at = format!("{}:1", obj.location);
        let plugin = match set.resolve(key.kind()) {
            Err(e) => {
                problems += 1;
                println!("{at}: {key}: {e}");
                continue;
            }
            Ok(plugin) => plugin,
        };
        let checked = schema::check_spec(cfg.field_validation, plugin.spec_schema(key.kind()), &obj.raw.spec);
        obj.raw.spec = checked.spec;
        for e in &checked.errors {
            problems += 1;
            println!("{at}: {key}: {}: {}", e.path, e.message);
        }
        match plugin.validate(&obj.raw).await.result {
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
        }
        // The source's own warnings (filesystem leniencies) first, then the spec's.
        let mut warnings = std::mem::take(&mut obj.warnings);
        warnings.extend(checked.warnings);
        match plugin.warnings(&obj.raw).await.map(|r| r.result) {
            None => {}
            Some(Ok(found)) => warnings.extend(schema::plugin_warnings(found)),
            Some(Err(e)) => {
                problems += 1;
                println!("{at}: {key}: warnings failed: {e}");
            }
        }
        if warnings.is_empty() {
            continue;
        }
        let located = files.entry(obj.location.file.to_string()).or_insert_with(|| {
            std::fs::read_to_string(cfg.resources.join(obj.location.file.as_str()))
                .ok()
                .and_then(|t| Located::parse(&t))
        });
        warned += warnings.len();
        for line in warning_lines(&obj.location.file, obj.location.line, located.as_ref(), &warnings) {
            println!("{line}");
        }
    }
    let summary = format!("{} plugins, {} objects", statuses.len(), source.len());
    if problems > 0 {
        eprintln!("{problems} problem(s), {warned} warning(s)");
        Ok(ExitCode::FAILURE)
    } else if warned > 0 && strict {
        eprintln!("{warned} warning(s), and --strict makes warnings fail the check");
        Ok(ExitCode::FAILURE)
    } else if warned > 0 {
        println!("ok: {summary}, no problems, {warned} warning(s)");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("ok: {summary}, no problems");
        Ok(ExitCode::SUCCESS)
    }
}

/// `file:line:column: warning: path: message` for each warning of the document that starts at
/// `doc_line`, in the order the fields are written; a field the file does not show (a plugin's
/// warning about the spec as a whole) is placed at the document's start.
fn warning_lines(file: &str, doc_line: u64, located: Option<&Located>, warnings: &[FieldWarning]) -> Vec<String> {
    let mut placed: Vec<((u64, u64), &FieldWarning)> = warnings
        .iter()
        .map(|w| (located.and_then(|l| l.position(doc_line, &w.path)).unwrap_or((doc_line.max(1), 1)), w))
        .collect();
    placed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    placed.into_iter().map(|((l, c), w)| format!("{file}:{l}:{c}: warning: {}: {}", w.path, w.message)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WarningSource;

    #[test]
    fn warnings_are_printed_where_their_fields_are_written_in_file_order() {
        let text = "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec:\n  zeta: 1\n  alpha:\n    deep: 2\n";
        let located = Located::parse(text);
        let w = |path: &str, source| FieldWarning { path: path.into(), message: "m".into(), source };
        let lines = warning_lines(
            "a.yaml",
            1,
            located.as_ref(),
            &[
                w("spec.alpha.deep", WarningSource::Schema),
                w("spec.zeta", WarningSource::Schema),
                w("spec", WarningSource::Plugin),
            ],
        );
        assert_eq!(
            lines,
            [
                "a.yaml:4:1: warning: spec: m",
                "a.yaml:5:3: warning: spec.zeta: m",
                "a.yaml:7:5: warning: spec.alpha.deep: m"
            ]
        );
        let unplaced = warning_lines("a.yaml", 3, None, &[w("spec.x", WarningSource::Schema)]);
        assert_eq!(unplaced, ["a.yaml:3:1: warning: spec.x: m"]);
    }
}
