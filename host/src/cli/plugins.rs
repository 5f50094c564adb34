//! `steward plugins`: the running host's plugins, from the API.

use std::process::ExitCode;

use anyhow::Result;

use crate::client::Client;

use super::Output;
use super::table::{plugin_table, print_json};

/// Lists the host's plugin files and their state.
pub(super) async fn plugins(client: &Client, output: Output) -> Result<ExitCode> {
    let plugins = client.plugins().await?;
    match output {
        Output::Json => print_json(&plugins)?,
        Output::Table => print!("{}", plugin_table(&plugins)),
    }
    Ok(ExitCode::SUCCESS)
}
