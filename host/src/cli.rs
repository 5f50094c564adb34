//! The `steward` command line: argument parsing and the commands that need no running host.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Config;
use crate::plugin::{
    Plugin, PluginSet, PluginSettings, PluginState, PluginStatus, Runtime, RuntimeOptions, WIT_VERSION,
};

/// Steward keeps the world the way its resources say it should be.
#[derive(Debug, Parser)]
#[command(name = "steward", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Work with plugin files.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

/// `steward plugin ...`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Print what a plugin describes (kinds, versions, schemas, capabilities) as JSON, without a running host.
    Inspect {
        /// The plugin file.
        file: PathBuf,
    },
    /// Load a plugin directory and report every plugin's state; exits 1 if any is failed or blocked.
    Check {
        /// The plugin directory (default: `plugin_dir` of the config).
        dir: Option<PathBuf>,
        /// Host config whose `plugins:` settings (capabilities, kinds, limits) apply.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Runs the command line; the binary's `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEWARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plugin(PluginCommand::Inspect { file }) => inspect(&file).await,
        Command::Plugin(PluginCommand::Check { dir, config, output }) => check(dir, config, output).await,
    }
}

async fn inspect(file: &Path) -> Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let runtime = Runtime::new(RuntimeOptions { pooling: false, ..Default::default() })?;
    let started = std::time::Instant::now();
    let plugin = Plugin::load(runtime, file, bytes.clone(), |_| PluginSettings::default()).await?;
    let load_ms = started.elapsed().as_secs_f64() * 1000.0;
    let info = plugin.info();
    let kinds: Vec<serde_json::Value> = info
        .kinds
        .iter()
        .map(|k| {
            serde_json::json!({
                "group": k.group,
                "version": k.version,
                "kind": k.kind,
                "plural": k.plural,
                "namespaced": k.namespaced,
                "resyncSeconds": k.resync_seconds,
                "specSchema": serde_json::from_str::<serde_json::Value>(&k.spec_schema).unwrap_or_default(),
            })
        })
        .collect();
    let out = serde_json::json!({
        "name": info.name,
        "version": info.version,
        "contract": format!("steward:plugin@{WIT_VERSION}"),
        "capabilities": info.capabilities,
        "kinds": kinds,
        "sizeBytes": bytes.len(),
        "loadMs": (load_ms * 10.0).round() / 10.0,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

async fn check(dir: Option<PathBuf>, config: Option<PathBuf>, output: Output) -> Result<ExitCode> {
    let config = match &config {
        Some(path) => Config::load(path)?,
        None => {
            let default = Path::new("steward.yaml");
            if default.exists() { Config::load(default)? } else { Config::defaults(&std::env::current_dir()?) }
        }
    };
    let dir = dir.unwrap_or_else(|| config.plugin_dir.clone());
    if !dir.is_dir() {
        bail!("plugin directory {} does not exist", dir.display());
    }
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(config.cache_dir.clone()), ..Default::default() })?;
    let set: Arc<PluginSet> = PluginSet::new(runtime, &dir, config.plugins.clone(), PluginSettings::default());
    let statuses = set.load_all().await.with_context(|| format!("cannot read {}", dir.display()))?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&statuses)?),
        Output::Table => print_table(&statuses),
    }
    let bad = statuses.iter().any(|s| s.state != PluginState::Ready);
    if statuses.is_empty() {
        eprintln!("no *.wasm plugins in {}", dir.display());
    }
    Ok(if bad { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn print_table(statuses: &[PluginStatus]) {
    let rows: Vec<[String; 5]> = statuses
        .iter()
        .map(|s| {
            [
                s.file.clone(),
                s.name.clone().unwrap_or_else(|| "-".into()),
                s.version.clone().unwrap_or_else(|| "-".into()),
                format!("{:?}", s.state),
                if s.kinds.is_empty() { "-".into() } else { s.kinds.join(",") },
            ]
        })
        .collect();
    let header = ["FILE", "NAME", "VERSION", "STATE", "KINDS"];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            s.push_str(&format!("{:<w$}   ", c, w = widths[i]));
        }
        println!("{}", s.trim_end());
    };
    line(header);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4]]);
    }
    for s in statuses {
        if let Some(m) = &s.message {
            println!("\n{}: {m}", s.file);
        }
    }
}
