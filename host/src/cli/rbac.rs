//! `steward rbac`: the RBAC objects the host needs at run time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;
use crate::kubernetes::rbac::{RbacOptions, SecretAccess, WebhookAccess, rbac_for, rbac_yaml};
use crate::plugin::PluginSettings;

use super::served::enabled;

/// Prints (YAML) the ServiceAccount, roles and bindings for the enabled kinds of `plugins`
/// (or the config's plugins), named `name`, for the ServiceAccount `service_account` of `namespace`,
/// with what the capability units the serving plugins use need ([`crate::capabilities::access`]):
/// `get` on Secrets in the namespaces the config watches (`kubernetes.namespaces`; all when it
/// lists none or there is no config file), and the kinds of objects the host manages.
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
        managed_kinds: Vec::new(),
        webhook: None,
    };
    opts.validate()?;
    let (kinds, serving) = enabled(plugins, config).await?;
    let cfg = if config.exists() { Some(Config::load(config)?) } else { None };
    // Each serving plugin with the settings the host runs it with: the config's, when it has
    // them (plugin files given alone are loaded without), else its own.
    let settings: Vec<(Vec<String>, PluginSettings)> = serving
        .iter()
        .map(|p| {
            let s = cfg.as_ref().and_then(|c| c.plugins.get(p.name())).unwrap_or(p.settings()).clone();
            // What it may use: what it declares, and what it imports that the settings grant.
            let imported = p.imported_capabilities();
            let mut caps = p.needed_capabilities();
            let granted = s.capabilities.iter().filter(|c| imported.contains(&c.as_str()) && !caps.contains(c));
            caps.extend(granted.cloned().collect::<Vec<_>>());
            (caps, s)
        })
        .collect();
    let access = crate::capabilities::access(&settings.iter().map(|(c, s)| (c.clone(), s)).collect::<Vec<_>>());
    if access.read_secrets {
        let watched = cfg.as_ref().map(|c| c.kubernetes.namespaces.clone()).unwrap_or_default();
        opts.secrets = if watched.is_empty() { SecretAccess::AllNamespaces } else { SecretAccess::Namespaces(watched) };
    }
    opts.managed_kinds = access.manage;
    if let Some(cfg) = &cfg {
        opts.webhook = webhook_access(cfg, namespace);
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
