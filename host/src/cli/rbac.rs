//! `steward rbac`: the RBAC objects the host needs at run time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;
use crate::kubernetes::rbac::{RbacOptions, SecretAccess, WebhookAccess, rbac_for, rbac_yaml};

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
        child_kinds: Vec::new(),
        webhook: None,
    };
    opts.validate()?;
    let (kinds, owns_services) = enabled(plugins, config).await?;
    if owns_services {
        let watched = if config.exists() { Config::load(config)?.kubernetes.namespaces } else { Vec::new() };
        opts.secrets = if watched.is_empty() { SecretAccess::AllNamespaces } else { SecretAccess::Namespaces(watched) };
    }
    if config.exists() {
        // The child kinds the config grants: the host applies, watches and deletes them.
        let cfg = Config::load(config)?;
        let mut kinds: Vec<_> = cfg
            .plugins
            .values()
            .filter(|s| s.grants(crate::capabilities::CHILDREN))
            .flat_map(|s| s.sections.get_or_default::<crate::plugin::ChildrenSettings>().kinds())
            .collect();
        kinds.sort();
        kinds.dedup();
        opts.child_kinds = kinds;
    }
    if config.exists() {
        opts.webhook = webhook_access(&Config::load(config)?, namespace);
    }
    print!("{}", rbac_yaml(&rbac_for(&kinds, &opts)));
    Ok(ExitCode::SUCCESS)
}

/// What the admission webhook writes, when the config enables it: its configuration, and the
/// Secret of a self-managed certificate (in `kubernetes.webhook.namespace`, else Steward's own
/// namespace `namespace`).
fn webhook_access(cfg: &Config, namespace: &str) -> Option<WebhookAccess> {
    let w = &cfg.kubernetes.webhook;
    w.enabled.then(|| WebhookAccess {
        configuration: w.configuration_name.clone(),
        secret: match &w.certificate {
            crate::config::WebhookCertificate::Secret(name) => {
                Some((w.namespace.clone().unwrap_or_else(|| namespace.to_string()), name.clone()))
            }
            crate::config::WebhookCertificate::Files { .. } => None,
        },
    })
}
