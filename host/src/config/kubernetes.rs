//! The `kubernetes` section: namespaces, label selector, leader election and status retries (its `webhook` is in `webhook`).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::values::Positive;
use super::webhook::{self, RawWebhook, WebhookConfig};
use crate::plugin::HumanDuration;

/// Leader election among replicas (Kubernetes mode): one holds a coordination Lease and reconciles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Whether replicas elect a leader; when off, every replica reconciles (run one only).
    pub enabled: bool,
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease; `None` means the pod's own namespace (or `default` outside a cluster).
    pub namespace: Option<String>,
    /// This replica's identity; `None` means `$POD_NAME`, else the host name, plus a random suffix.
    pub identity: Option<String>,
    /// How long a lease lasts without renewal before another replica may take it.
    pub lease_duration: Duration,
    /// How long before expiry the holder renews.
    pub renew_grace: Duration,
}

/// Kubernetes mode: which objects this replica serves, and how replicas share the work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// Namespaces to watch; empty means all.
    pub namespaces: Vec<String>,
    /// A label selector (`shard=a`, `tier in (x,y)`) that limits the objects this replica serves.
    pub label_selector: Option<String>,
    /// Leader election.
    pub leader_election: LeaderElectionConfig,
    /// Attempts of a status write that meets a conflict before it counts as failed.
    pub status_retries: u32,
    /// The validating admission webhook served from the plugins' `validate`.
    pub webhook: WebhookConfig,
    /// How often every watch lists its objects anew, the reflector's cache replaced whole at the
    /// end of the list, so that changes whose events were lost are seen; `None` never.
    pub relist: Option<Duration>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            label_selector: None,
            leader_election: LeaderElectionConfig {
                enabled: true,
                lease_name: "steward".into(),
                namespace: None,
                identity: None,
                lease_duration: Duration::from_secs(15),
                renew_grace: Duration::from_secs(5),
            },
            status_retries: 5,
            webhook: WebhookConfig::default(),
            relist: Some(Duration::from_secs(600)),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawKubernetes {
    #[serde(default)]
    namespaces: Vec<String>,
    label_selector: Option<String>,
    #[serde(default)]
    leader_election: RawLeaderElection,
    status_retries: Option<Positive>,
    #[serde(default)]
    webhook: RawWebhook,
    relist: Option<HumanDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLeaderElection {
    enabled: Option<bool>,
    lease_name: Option<String>,
    namespace: Option<String>,
    identity: Option<String>,
    lease_duration: Option<HumanDuration>,
    renew_grace: Option<HumanDuration>,
}

/// The `kubernetes` section, with relative paths resolved against `base`; the error names the setting.
pub(super) fn kubernetes_config(raw: RawKubernetes, base: &Path) -> Result<KubernetesConfig, String> {
    let mut k = KubernetesConfig::default();
    for ns in &raw.namespaces {
        if !crate::model::is_dns_label(ns) {
            return Err(format!("kubernetes.namespaces: `{ns}` is not a namespace name (a DNS-1123 label)"));
        }
    }
    k.namespaces = raw.namespaces;
    k.label_selector = raw.label_selector.filter(|s| !s.trim().is_empty());
    if let Some(sel) = &k.label_selector
        && let Err(e) = crate::selector::check(sel)
    {
        return Err(format!("kubernetes.labelSelector `{sel}`: {e}"));
    }
    let le = raw.leader_election;
    let d = &mut k.leader_election;
    d.enabled = le.enabled.unwrap_or(true);
    if let Some(name) = le.lease_name {
        if !crate::model::is_dns_subdomain(&name) {
            return Err(format!("kubernetes.leaderElection.leaseName: `{name}` is not a DNS-1123 subdomain"));
        }
        d.lease_name = name;
    }
    d.namespace = le.namespace;
    d.identity = le.identity.filter(|s| !s.is_empty());
    if let Some(x) = le.lease_duration {
        d.lease_duration = x.0;
    }
    if let Some(x) = le.renew_grace {
        d.renew_grace = x.0;
    }
    // Whole seconds, as a Lease counts them: the holder renews `renewGrace` before expiry.
    let secs = |d: Duration| d.as_secs_f64().ceil() as u64;
    if secs(d.lease_duration) < 2 || secs(d.renew_grace) >= secs(d.lease_duration) {
        return Err(format!(
            "kubernetes.leaderElection: leaseDuration ({}) must be at least 2s and at least a whole second longer than renewGrace ({})",
            humantime::format_duration(d.lease_duration),
            humantime::format_duration(d.renew_grace)
        ));
    }
    if let Some(n) = raw.status_retries {
        k.status_retries = n.0;
    }
    k.webhook = webhook::webhook_config(raw.webhook, base)?;
    if let Some(r) = raw.relist {
        k.relist = (!r.0.is_zero()).then_some(r.0);
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Mode;
    use crate::config::test_support::{err, parse};

    #[test]
    fn the_kubernetes_section_parses_and_checks_its_values() {
        let c = parse(
            "mode: kubernetes\nkubernetes:\n  namespaces: [team-a, team-b]\n  labelSelector: shard=a\n  leaderElection: { leaseName: steward-a, leaseDuration: 10s, renewGrace: 3s }\n",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Kubernetes);
        assert_eq!(c.kubernetes.namespaces, ["team-a", "team-b"]);
        assert_eq!(c.kubernetes.label_selector.as_deref(), Some("shard=a"));
        assert_eq!(c.kubernetes.leader_election.lease_name, "steward-a");
        assert_eq!(c.kubernetes.leader_election.lease_duration, Duration::from_secs(10));
        assert!(c.kubernetes.leader_election.enabled);
        let e = err("kubernetes: { namespaces: [Team_A] }\n");
        assert!(e.contains("kubernetes.namespaces") && e.contains("Team_A"), "{e}");
        let e = err("kubernetes: { labelSelector: 'a in b' }\n");
        assert!(e.contains("kubernetes.labelSelector"), "{e}");
        let e = err("kubernetes: { leaderElection: { leaseDuration: 2s, renewGrace: 5s } }\n");
        assert!(e.contains("longer than renewGrace"), "{e}");
        let e = err("kubernetes: { leader_election: {} }\n");
        assert!(e.contains("leader_election"), "{e}");
    }
}
