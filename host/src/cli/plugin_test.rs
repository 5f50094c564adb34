//! `steward plugin test PLUGIN.wasm SCENARIOS…`: the conformance kit's command, for a plugin in any language.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::capabilities::RawPluginSettings;
use crate::conformance::{self, ScenarioFile, ScenarioReport, Verdict};
use crate::plugin::{Plugin, PluginSettings, Runtime};

use super::Output;
use super::table::print_json;

/// What `--output json` prints for one scenario file.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileReport {
    file: String,
    /// Why the file could not be run, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    scenarios: Vec<ScenarioReport>,
}

/// Runs every scenario of `scenarios` against the component `file` with the host's runtime and
/// limits; prints each verdict (and every difference of a failed one) and exits 1 if any failed
/// or a file could not be read.
pub(super) async fn test(file: &Path, scenarios: &[PathBuf], output: Output) -> Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let runtime = super::plugin::standalone_runtime()?;
    let mut loaded = Loaded { runtime, file: file.to_path_buf(), bytes, plugins: BTreeMap::new() };
    let mut reports = Vec::new();
    for path in scenarios {
        let name = path.display().to_string();
        let parsed = std::fs::read_to_string(path)
            .map_err(|e| format!("{name}: cannot read it: {e}"))
            .and_then(|text| conformance::parse(&name, &text).map_err(|e| e.to_string()));
        let report = match parsed {
            Ok(f) => match loaded.plugin_for(&f).await {
                Ok(plugin) => {
                    FileReport { file: name, error: None, scenarios: conformance::run_file(&plugin, &f).await }
                }
                Err(e) => FileReport { error: Some(format!("{name}: {e:#}")), file: name, scenarios: Vec::new() },
            },
            Err(e) => FileReport { file: name, error: Some(e), scenarios: Vec::new() },
        };
        if output == Output::Table {
            print_text(&report);
        }
        reports.push(report);
    }
    let failed = reports.iter().any(|r| r.error.is_some() || r.scenarios.iter().any(|s| s.verdict != Verdict::Pass));
    match output {
        Output::Json => print_json(&reports)?,
        Output::Table => {
            let count = |pass: bool| {
                reports.iter().flat_map(|r| &r.scenarios).filter(|s| (s.verdict == Verdict::Pass) == pass).count()
            };
            let broken = reports.iter().filter(|r| r.error.is_some()).count();
            let files = if broken > 0 { format!(", {broken} file(s) not run") } else { String::new() };
            println!("{} passed, {} failed{files}", count(true), count(false));
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The component, loaded once per distinct set of settings the files ask for.
struct Loaded {
    runtime: Arc<Runtime>,
    file: PathBuf,
    bytes: Vec<u8>,
    plugins: BTreeMap<String, Arc<Plugin>>,
}

impl Loaded {
    /// The plugin with the settings `f` gives it (`plugin:`, as in a host config); a file that
    /// gives none grants every capability the plugin declares.
    async fn plugin_for(&mut self, f: &ScenarioFile) -> Result<Arc<Plugin>> {
        let key = format!("{:?}", f.plugin);
        if let Some(p) = self.plugins.get(&key) {
            return Ok(p.clone());
        }
        let mut plugin = self.load(f.plugin.clone(), Vec::new()).await?;
        if f.plugin.is_none() && plugin.is_blocked() {
            plugin = self.load(None, plugin.needed_capabilities()).await?;
        }
        let missing = plugin.missing_capabilities();
        if !missing.is_empty() {
            anyhow::bail!(
                "the plugin needs capabilities the scenario file does not grant: {}; add them to `plugin.capabilities`",
                missing.join(", ")
            );
        }
        let plugin = Arc::new(plugin);
        self.plugins.insert(key, plugin.clone());
        Ok(plugin)
    }

    /// Loads the component with `raw` settings (resolved as a host config's are), or, without
    /// them, with default limits and `capabilities` granted.
    async fn load(&self, raw: Option<RawPluginSettings>, capabilities: Vec<String>) -> Result<Plugin> {
        let error = Arc::new(std::sync::Mutex::new(None));
        let seen = error.clone();
        let plugin = Plugin::load(self.runtime.clone(), &self.file, self.bytes.clone(), move |name| match raw {
            Some(raw) => raw.resolve(name).unwrap_or_else(|e| {
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                PluginSettings::default()
            }),
            None => PluginSettings { capabilities, ..PluginSettings::default() },
        })
        .await?;
        match error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(anyhow::anyhow!("the scenario file's `plugin` settings: {e}")),
            None => Ok(plugin),
        }
    }
}

/// One line per scenario, and the differences of each failed one under it.
fn print_text(r: &FileReport) {
    if let Some(e) = &r.error {
        println!("ERROR {e}");
        return;
    }
    for s in &r.scenarios {
        let at = s.line.map(|l| format!(":{l}")).unwrap_or_default();
        match &s.verdict {
            Verdict::Pass => println!("ok    {} ({}{at})", s.name, r.file),
            Verdict::Fail(mismatches) => {
                println!("FAIL  {} ({}{at})", s.name, r.file);
                for m in mismatches {
                    println!("        {m}");
                }
                if let Some(message) = s.actual.get("message").and_then(|m| m.as_str()) {
                    println!("        the call: {message}");
                }
                for line in s.logs.iter().take(10) {
                    println!("        log: {line}");
                }
            }
        }
    }
}
