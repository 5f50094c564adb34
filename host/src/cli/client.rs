//! The API client of the client commands: which API, and with which token.

use anyhow::Result;

use crate::client::Client;
use crate::config::Config;
use crate::host::read_token;
use crate::model::ObjectKey;

use super::Cli;

/// The API client for the client commands: `--api`, else the config's `api.listen`, else
/// `127.0.0.1:7878`; with the config's token file, else `STEWARD_TOKEN`.
pub(super) fn connect(cli: &Cli) -> Result<Client> {
    let config = if cli.config.exists() { Some(Config::load(&cli.config)?) } else { None };
    let base = match (&cli.api, &config) {
        (Some(a), _) => a.clone(),
        (None, Some(c)) => format!("http://{}", c.api.listen),
        (None, None) => "http://127.0.0.1:7878".to_string(),
    };
    let token = match config.as_ref().and_then(|c| c.api.token_file.clone()) {
        Some(f) => Some(read_token(&f)?),
        None => std::env::var("STEWARD_TOKEN").ok(),
    };
    Ok(Client::new(&base, token))
}

/// `target` as an object key, or an error saying the form expected.
pub(super) fn parse_key(target: &str) -> Result<ObjectKey> {
    ObjectKey::parse(target).ok_or_else(|| anyhow::anyhow!("`{target}` is not KIND/NAMESPACE/NAME"))
}
