//! `steward new plugin`: write a plugin for one kind, in Rust or Python.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::scaffold::NewPlugin;

/// Writes plugin `new` under `dir`, and says how to build and test it.
pub(super) fn plugin(new: &NewPlugin, dir: &Path, sdk: Option<&Path>) -> Result<ExitCode> {
    let generated = new.write(dir, sdk)?;
    let shown = generated.dir.strip_prefix(".").unwrap_or(&generated.dir).display().to_string();
    println!("created {shown}: plugin `{}`, kind {} ({}/{})", new.name, new.kind, new.group, new.version);
    println!();
    println!("build it, then run its scenarios against the component:");
    println!("  cd {shown}");
    for c in generated.build_commands() {
        println!("  {c}");
    }
    println!("  {}", generated.scenario_command());
    println!();
    println!("then copy {} into the plugin_dir of a Steward host,", generated.artifact.display());
    println!("and {shown}/resource.yaml into its resources.");
    Ok(ExitCode::SUCCESS)
}
