//! `steward kinds enable|disable`: switch reconciling a kind on or off.

use std::process::ExitCode;

use anyhow::Result;

use crate::client::Client;

use super::KindAction;

/// Enables or disables `kind` on the host and says which it is now.
pub(super) async fn kinds(client: &Client, action: KindAction, kind: &str) -> Result<ExitCode> {
    let state = client.set_kind_enabled(kind, action == KindAction::Enable).await?;
    println!("{} {}", state.kind, if state.enabled { "enabled" } else { "disabled" });
    Ok(ExitCode::SUCCESS)
}
