//! `steward new plugin`: write a plugin crate for one kind.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::scaffold::{Generated, NewPlugin};

/// Writes the crate of plugin `name` for `kind` under `dir`, and says how to test and build it.
pub(super) fn plugin(
    name: &str,
    kind: &str,
    group: &str,
    version: &str,
    dir: &Path,
    sdk: Option<&Path>,
) -> Result<ExitCode> {
    let generated = NewPlugin::new(name, kind, group, version)?.write(dir, sdk)?;
    let shown = generated.dir.strip_prefix(".").unwrap_or(&generated.dir).display().to_string();
    println!("created {shown}: plugin `{name}`, kind {kind} ({group}/{version})");
    println!();
    println!("test it natively, then build it:");
    println!("  cd {shown}");
    println!("  {}", Generated::TEST);
    println!("  rustup target add wasm32-wasip2    # once");
    println!("  {}", Generated::BUILD);
    println!();
    println!("then copy {} into the plugin_dir of a Steward host,", generated.artifact.display());
    println!("and {shown}/resource.yaml into its resources.");
    Ok(ExitCode::SUCCESS)
}
