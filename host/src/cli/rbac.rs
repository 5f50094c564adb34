//! `steward rbac`: the RBAC objects the host needs at run time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;
use crate::kubernetes::rbac::{RbacOptions, SecretAccess, rbac_for, rbac_yaml};

use super::served::enabled;

/// Prints (YAML) the ServiceAccount, roles and bindings for the enabled kinds of `plugins`
/// (or the config's plugins), named `name`, for the ServiceAccount `service_account` of `namespace`.
/// When a plugin owns services, `get` on Secrets in the namespaces the config watches
/// (`kubernetes.namespaces`; all when it lists none or there is no config file).
pub(super) async fn rbac(
    plugins: &[PathBuf],
    config: &Path,
    namespace: &str,
    service_account: &str,
    name: &str,
) -> Result<ExitCode> {
    let mut opts = RbacOptions {
        name: name.to_string(),
        namespace: namespace.to_string(),
        service_account: service_account.to_string(),
        secrets: SecretAccess::None,
    };
    opts.validate()?;
    let (kinds, owns_services) = enabled(plugins, config).await?;
    if owns_services {
        let watched = if config.exists() { Config::load(config)?.kubernetes.namespaces } else { Vec::new() };
        opts.secrets = if watched.is_empty() { SecretAccess::AllNamespaces } else { SecretAccess::Namespaces(watched) };
    }
    print!("{}", rbac_yaml(&rbac_for(&kinds, &opts)));
    Ok(ExitCode::SUCCESS)
}
