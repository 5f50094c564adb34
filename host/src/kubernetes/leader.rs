//! Leader election with a coordination Lease (kube-lease-manager): one replica reconciles, the others stand by.
//!
//! kube-lease-manager acquires and renews the Lease. On top of it, this replica counts itself
//! leader only while the Lease it last saw names it and has not expired by its own clock: a
//! leader cut off from the API server steps down when its lease runs out, before a standby
//! replica can take the lease over, so two replicas never reconcile at once.

use std::time::{Duration, SystemTime};

use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::config::LeaderElectionConfig;

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
#[error("leader election with Lease {namespace}/{name}: {message}")]
pub struct LeaderError {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// What failed.
    pub message: String,
}

/// This replica's standing: `true` while it may reconcile. Dropping it releases the lease.
pub struct Leadership {
    rx: watch::Receiver<bool>,
    identity: String,
    release: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Keeps an election-less standing's channel open.
    _fixed: Option<watch::Sender<bool>>,
}

impl Leadership {
    /// A standing that is always leader (election turned off).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        Self { rx, identity: String::new(), release: None, task: None, _fixed: Some(tx) }
    }

    /// Watches the standing; the value is `true` while this replica leads.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// The identity this replica holds the lease under.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Gives the lease up (so a standby takes over at once) and waits for that, up to `grace`.
    pub async fn release(&mut self, grace: Duration) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(grace, task).await;
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// The namespace the host runs in: `$POD_NAMESPACE`, the service account's namespace file, or the client's default.
pub fn own_namespace(client: &Client) -> String {
    if let Ok(ns) = std::env::var("POD_NAMESPACE")
        && !ns.is_empty()
    {
        return ns;
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_string())
}

/// This replica's identity: the configured one, `$POD_NAME`, or the host name with a random suffix.
pub fn identity(cfg: &LeaderElectionConfig) -> String {
    if let Some(id) = &cfg.identity {
        return id.clone();
    }
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default();
    let suffix: String = std::iter::repeat_with(fastrand::alphanumeric).take(6).collect();
    format!("{}-{}", if host.is_empty() { "steward" } else { &host }, suffix.to_ascii_lowercase())
}

/// Starts competing for the lease. Returns at once; the standing starts `false`. While the API
/// server cannot be reached the replica keeps trying (with backoff) and stays a standby.
pub async fn elect(client: Client, cfg: &LeaderElectionConfig) -> Result<Leadership, LeaderError> {
    let namespace = cfg.namespace.clone().unwrap_or_else(|| own_namespace(&client));
    let identity = identity(cfg);
    let secs = |d: Duration| d.as_secs_f64().ceil().max(1.0) as u64;
    let duration = secs(cfg.lease_duration);
    let grace = secs(cfg.renew_grace).min(duration.saturating_sub(1)).max(1);
    let margin = Duration::from_secs(grace).div_f64(2.0).max(Duration::from_millis(500));
    if !crate::model::is_dns_subdomain(&namespace) {
        return Err(LeaderError {
            namespace,
            name: cfg.lease_name.clone(),
            message: "the namespace is not a valid name; set kubernetes.leaderElection.namespace".into(),
        });
    }
    let (tx, rx) = watch::channel(false);
    let (release_tx, mut release_rx) = tokio::sync::oneshot::channel::<()>();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let name = cfg.lease_name.clone();
    let me = identity.clone();
    let task = tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        let manager = loop {
            let built = LeaseManagerBuilder::new(client.clone(), &name)
                .with_namespace(&namespace)
                .with_identity(&me)
                .with_duration(duration)
                .with_grace(grace)
                .build();
            tokio::select! {
                _ = &mut release_rx => return,
                m = built => match m {
                    Ok(m) => break m,
                    Err(e) => {
                        tracing::warn!(lease = %format!("{namespace}/{name}"), error = %e, retry_in = ?backoff, "cannot set up leader election");
                        tokio::select! {
                            _ = &mut release_rx => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                },
            }
        };
        let (mut held, manager_task) = manager.watch().await;
        let wc = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut lease_events = std::pin::pin!(watcher::watcher(leases, wc).default_backoff());
        let mut seen: Option<Lease> = None;
        loop {
            // Step down a margin before the lease runs out, so a standby that takes it over at
            // expiry by its own clock finds this replica stopped even with some clock skew.
            let valid_until = seen.as_ref().and_then(|l| valid_until(l, &me)).map(|t| t - margin);
            let leads = *held.borrow() && valid_until.is_some_and(|t| t > SystemTime::now());
            if *tx.borrow() != leads {
                if leads {
                    tracing::info!(identity = %me, lease = %name, "this replica leads: reconciling");
                } else {
                    tracing::warn!(identity = %me, lease = %name, "this replica does not lead: reconciling stopped");
                }
                let _ = tx.send(leads);
            }
            let wake = valid_until
                .filter(|_| leads)
                .and_then(|t| t.duration_since(SystemTime::now()).ok())
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                _ = &mut release_rx => break,
                changed = held.changed() => if changed.is_err() { break },
                ev = lease_events.next() => match ev {
                    Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => seen = Some(l),
                    Some(Ok(watcher::Event::Delete(_))) => seen = None,
                    Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => {}
                    Some(Err(e)) => tracing::debug!(error = %e, "lease watch error; retrying"),
                    None => break,
                },
                _ = tokio::time::sleep(wake) => {}
            }
        }
        let _ = tx.send(false);
        // Dropping the manager's receiver makes it release the lease; wait for that.
        drop(held);
        let _ = manager_task.await;
    });
    Ok(Leadership { rx, identity, release: Some(release_tx), task: Some(task), _fixed: None })
}

/// Until when `lease` makes `me` the leader, by this replica's clock; `None` if it names another holder.
fn valid_until(lease: &Lease, me: &str) -> Option<SystemTime> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(me) {
        return None;
    }
    let renew = spec.renew_time.as_ref()?;
    let secs = u64::try_from(spec.lease_duration_seconds?).ok()?;
    let renewed = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(renew.0.as_millisecond()).ok()?);
    Some(renewed + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: &str, renewed_ago: Duration, secs: i32) -> Lease {
        let t = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::try_from(renewed_ago).unwrap();
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(t)),
                lease_duration_seconds: Some(secs),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_counts_only_for_its_holder_and_until_it_expires() {
        let now = SystemTime::now();
        assert!(valid_until(&lease("a", Duration::from_secs(1), 10), "a").unwrap() > now);
        assert!(valid_until(&lease("b", Duration::from_secs(1), 10), "a").is_none());
        assert!(valid_until(&lease("a", Duration::from_secs(20), 10), "a").unwrap() < now);
    }

    #[test]
    fn the_identity_prefers_the_config_then_the_pod_name() {
        let mut cfg = crate::config::KubernetesConfig::default().leader_election;
        cfg.identity = Some("replica-1".into());
        assert_eq!(identity(&cfg), "replica-1");
        cfg.identity = None;
        let id = identity(&cfg);
        assert!(!id.is_empty() && crate::model::is_dns_subdomain(&id.to_ascii_lowercase()), "{id}");
    }
}
