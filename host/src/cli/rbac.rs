//! `steward rbac`: the RBAC objects the host needs at run time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use crate::kubernetes::rbac::{RbacOptions, rbac_for, rbac_yaml};

use super::served::enabled_kinds;

/// Prints (YAML) the ServiceAccount, roles and bindings for the enabled kinds of `plugins`
/// (or the config's plugins), named `name`, for the ServiceAccount `service_account` of `namespace`.
pub(super) async fn rbac(
    plugins: &[PathBuf],
    config: &Path,
    namespace: &str,
    service_account: &str,
    name: &str,
) -> Result<ExitCode> {
    let opts = RbacOptions {
        name: name.to_string(),
        namespace: namespace.to_string(),
        service_account: service_account.to_string(),
    };
    opts.validate()?;
    let kinds = enabled_kinds(plugins, config).await?;
    print!("{}", rbac_yaml(&rbac_for(&kinds, &opts)));
    Ok(ExitCode::SUCCESS)
}
