//! `steward run`: load the config and run the host until a signal.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;

/// Runs the host of the config file `config` (see [`crate::host::run`]).
pub(super) async fn run(config: &Path) -> Result<ExitCode> {
    crate::host::run(Config::load(config)?).await?;
    Ok(ExitCode::SUCCESS)
}
