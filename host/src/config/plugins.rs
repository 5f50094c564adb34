//! The `plugins` section (settings by plugin name) and `plugin_sources` (plugins pulled from OCI registries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::capabilities::RawPluginSettings;
use crate::plugin::{HumanDuration, PluginSettings};

/// The `plugins` section: each plugin's settings, checked, by its name (a DNS-1123 label).
pub(super) fn plugin_settings(
    raw: &BTreeMap<String, RawPluginSettings>,
) -> Result<BTreeMap<String, PluginSettings>, String> {
    let mut plugins = BTreeMap::new();
    for (name, raw) in raw {
        if !crate::plugin::is_dns_label(name) {
            return Err(format!("plugins.{name}: a plugin name is a DNS-1123 label (lower-case letters, digits, '-')"));
        }
        plugins.insert(name.clone(), raw.resolve(name)?);
    }
    Ok(plugins)
}

/// One plugin pulled from an OCI registry (`plugin_sources:`), followed while the host runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSource {
    /// `oci://registry/repository:tag` (polled) or `oci://registry/repository@sha256:<hex>` (fixed).
    pub reference: String,
    /// How often a tag is looked at for a new digest.
    pub poll: Duration,
    /// A PEM ECDSA P-256 public key (cosign's `cosign.pub`): when set, only artifacts signed with
    /// it are loaded.
    pub key: Option<PathBuf>,
    /// PEM CA certificates trusted for the registry, besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Speak plain HTTP (allowed for a loopback registry; any other needs `insecure`).
    pub plain_http: bool,
    /// Allow plain HTTP to a registry that is not this machine.
    pub insecure: bool,
    /// A Docker `config.json` holding the registry's credentials.
    pub docker_config: Option<PathBuf>,
    /// A file holding a bearer token for the registry.
    pub token_file: Option<PathBuf>,
    /// Settings of this plugin; when absent, `plugins.<name>` applies as for a file.
    pub settings: Option<PluginSettings>,
}

/// The default interval between two looks at a tag.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPluginSource {
    #[serde(rename = "ref")]
    reference: String,
    poll: Option<HumanDuration>,
    key: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    plain_http: bool,
    #[serde(default)]
    insecure: bool,
    docker_config: Option<PathBuf>,
    token_file: Option<PathBuf>,
    settings: Option<RawPluginSettings>,
}

/// The `plugin_sources` list, with relative paths resolved against `base`; the error names the entry.
pub(super) fn plugin_sources(raw: Vec<RawPluginSource>, base: &Path) -> Result<Vec<PluginSource>, String> {
    let abs = |p: Option<PathBuf>| p.map(|p| if p.is_absolute() { p } else { base.join(p) });
    let mut out: Vec<PluginSource> = Vec::new();
    for (i, s) in raw.into_iter().enumerate() {
        let at = format!("plugin_sources[{i}]");
        let parsed = crate::oci::OciRef::parse(&s.reference).map_err(|e| format!("{at}.ref: {e}"))?;
        let reference = parsed.to_string();
        if out.iter().any(|o| o.reference == reference) {
            return Err(format!("{at}.ref: {reference} is listed twice; list each reference once"));
        }
        if s.plain_http && !s.insecure && !parsed.is_loopback() {
            return Err(format!(
                "{at}: plain_http to {}, which is not this machine, sends plugins and credentials in the clear; use HTTPS (ca_file for a private CA), or also set `insecure: true` if you mean it",
                parsed.registry
            ));
        }
        if s.docker_config.is_some() && s.token_file.is_some() {
            return Err(format!("{at}: set docker_config or token_file, not both"));
        }
        let settings = match &s.settings {
            Some(raw) => Some(raw.resolve("<name>").map_err(|e| format!("{at}.settings: {e}"))?),
            None => None,
        };
        out.push(PluginSource {
            reference,
            poll: s.poll.map_or(DEFAULT_POLL, |d| d.0),
            key: abs(s.key),
            ca_file: abs(s.ca_file),
            plain_http: s.plain_http,
            insecure: s.insecure,
            docker_config: abs(s.docker_config),
            token_file: abs(s.token_file),
            settings,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::test_support::{err, parse};

    #[test]
    fn plugin_sources_parse_and_check_their_values() {
        let c = parse(
            "plugin_sources:\n  - ref: oci://127.0.0.1:5000/steward/mcpserver:1\n    plain_http: true\n    poll: 30s\n    key: keys/cosign.pub\n    settings: { capabilities: [services] }\n  - ref: oci://ghcr.io/acme/wf@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
        )
        .unwrap();
        let s = &c.plugin_sources[0];
        assert_eq!(s.poll, Duration::from_secs(30));
        assert_eq!(s.key.as_deref(), Some(Path::new("/srv/steward/keys/cosign.pub")));
        assert_eq!(s.settings.as_ref().unwrap().capabilities, ["services"]);
        assert_eq!(c.plugin_sources[1].poll, DEFAULT_POLL);
        assert!(c.plugin_sources[1].settings.is_none());
        let e = err("plugin_sources:\n  - ref: ghcr.io/acme/wf:1\n");
        assert!(e.contains("plugin_sources[0].ref") && e.contains("oci://"), "{e}");
        let e = err("plugin_sources:\n  - ref: oci://ghcr.io/acme/wf:1\n    plain_http: true\n");
        assert!(e.contains("insecure: true"), "{e}");
        let e = err("plugin_sources:\n  - { ref: 'oci://r/a:1' }\n  - { ref: 'oci://r/a:1' }\n");
        assert!(e.contains("listed twice"), "{e}");
        let e = err("plugin_sources:\n  - ref: oci://r/a:1\n    keys: x\n");
        assert!(e.starts_with("steward.yaml:3:") && e.contains("keys"), "{e}");
    }
}
