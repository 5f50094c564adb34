//! `steward trigger`: reconcile one object now.

use std::process::ExitCode;

use anyhow::Result;

use crate::client::Client;

use super::client::parse_key;

/// Queues `target` (`KIND/NAMESPACE/NAME`) for a reconcile now; also retries a `Failed` object.
pub(super) async fn trigger(client: &Client, target: &str) -> Result<ExitCode> {
    let queued = client.trigger(&parse_key(target)?).await?;
    println!("queued {}", queued.queued);
    Ok(ExitCode::SUCCESS)
}
