//! Leader election with a coordination Lease, watched: one replica reconciles, the others stand by and take over at once.
//!
//! Each replica watches the one Lease object. A standby acquires it (a replace guarded by the
//! Lease's `resourceVersion`, so of two contenders exactly one wins) as soon as the watch shows
//! it free: its holder cleared by a stopping leader, or not renewed within its duration by this
//! replica's clock (counted from when this replica last saw it change, so clock skew between
//! replicas does not matter). The holder renews it every `leaseDuration - renewGrace`.
//!
//! A replica counts itself leader only while its last successful acquire or renew is younger
//! than the lease's duration less a margin: a leader cut off from the API server steps down
//! before any standby may take the lease over, so two replicas never reconcile at once.

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
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

/// A replica's place in leader election, as the API and the page show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The identity this replica competes under.
    pub identity: String,
    /// The identity the Lease names as holder as last seen; `None` when it is free or not seen yet.
    pub holder: Option<String>,
}

/// This replica's standing: `true` while it may reconcile. Dropping it stops competing (without
/// releasing; [`Leadership::release`] gives the lease up).
pub struct Leadership {
    rx: watch::Receiver<bool>,
    holder: watch::Receiver<Option<String>>,
    identity: String,
    release: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Keeps an election-less standing's channels open.
    _fixed: Option<(watch::Sender<bool>, watch::Sender<Option<String>>)>,
}

impl Leadership {
    /// A standing that is always leader (election turned off); it names no holder.
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        let (htx, holder) = watch::channel(None);
        Self { rx, holder, identity: String::new(), release: None, task: None, _fixed: Some((tx, htx)) }
    }

    /// Watches the standing; the value is `true` while this replica leads.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Watches the Lease's holder as this replica last saw it (`None`: free, or not seen yet).
    pub fn holder(&self) -> watch::Receiver<Option<String>> {
        self.holder.clone()
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// The identity this replica holds the lease under (empty when election is off).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Stops leading, then clears the Lease's holder if this replica holds it (so a standby
    /// watching it takes over at once); waits for that up to `grace`. Call it once nothing
    /// reconciles any more.
    pub async fn release(&mut self, grace: Duration) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(grace, &mut task).await.is_err()
        {
            tracing::warn!(?grace, "the lease was not released within the grace period; it lapses by itself");
            task.abort();
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

/// The timings of one election, from the config.
#[derive(Clone, Copy, Debug)]
struct Timing {
    /// `leaseDurationSeconds` written on the Lease.
    duration: Duration,
    /// How often the holder renews.
    renew_every: Duration,
    /// How long before its lease would lapse a holder that could not renew stops leading.
    margin: Duration,
}

impl Timing {
    fn of(cfg: &LeaderElectionConfig) -> Self {
        let duration = Duration::from_secs(cfg.lease_duration.as_secs_f64().ceil().max(1.0) as u64);
        let grace = cfg.renew_grace.min(duration.saturating_sub(Duration::from_millis(500)));
        let renew_every = duration.saturating_sub(grace).max(Duration::from_millis(200));
        let margin = (grace / 2).max(Duration::from_millis(500)).min(duration / 2);
        Self { duration, renew_every, margin }
    }
}

/// What this replica decides to do next about the Lease, given what it saw.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Create the Lease, naming this replica (none exists).
    Create,
    /// Take it (free, lapsed, or already naming this replica after a restart).
    Acquire,
    /// Renew it (this replica holds it and the renewal is due).
    Renew,
    /// Nothing until this much time passes or the Lease changes.
    Wait(Duration),
}

/// The next step of replica `me`: `seen` is the Lease as last seen (`None`: absent) and
/// `seen_at` when it last changed; `renewed` when this replica last acquired or renewed it.
fn next_step(me: &str, seen: Option<&Lease>, seen_at: Instant, renewed: Option<Instant>, t: Timing) -> Step {
    let Some(lease) = seen else { return Step::Create };
    let spec = lease.spec.clone().unwrap_or_default();
    let now = Instant::now();
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        None => Step::Acquire,
        Some(h) if h == me => match renewed {
            Some(r) if now < r + t.renew_every => Step::Wait(r + t.renew_every - now),
            Some(_) => Step::Renew,
            // Named by a previous run with this identity: take it at once.
            None => Step::Acquire,
        },
        Some(_) => {
            let secs = spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).unwrap_or(t.duration.as_secs());
            let lapses = seen_at + Duration::from_secs(secs.max(1));
            if now >= lapses { Step::Acquire } else { Step::Wait(lapses - now) }
        }
    }
}

/// The Lease `seen` (or a new one named `name`) with `me` as holder, renewed now; `acquire`
/// also sets the acquire time and counts a transition.
fn claimed(seen: Option<&Lease>, name: &str, me: &str, t: Timing, acquire: bool) -> Lease {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let mut lease = seen.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta { name: Some(name.to_string()), ..ObjectMeta::default() },
        ..Lease::default()
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if acquire {
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + i32::from(seen.is_some()));
    }
    spec.holder_identity = Some(me.to_string());
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(i32::try_from(t.duration.as_secs()).unwrap_or(i32::MAX));
    lease
}

/// Starts competing for the lease. Returns at once; the standing starts `false`. While the API
/// server cannot be reached the replica keeps trying (with backoff) and stays a standby.
pub async fn elect(client: Client, cfg: &LeaderElectionConfig) -> Result<Leadership, LeaderError> {
    let namespace = cfg.namespace.clone().unwrap_or_else(|| own_namespace(&client));
    let identity = identity(cfg);
    if !crate::model::is_dns_subdomain(&namespace) {
        return Err(LeaderError {
            namespace,
            name: cfg.lease_name.clone(),
            message: "the namespace is not a valid name; set kubernetes.leaderElection.namespace".into(),
        });
    }
    let (tx, rx) = watch::channel(false);
    let (holder_tx, holder) = watch::channel(None);
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let election = Election {
        leases: Api::namespaced(client, &namespace),
        name: cfg.lease_name.clone(),
        me: identity.clone(),
        timing: Timing::of(cfg),
        tx,
        holder_tx,
    };
    let task = tokio::spawn(election.run(release_rx));
    Ok(Leadership { rx, holder, identity, release: Some(release_tx), task: Some(task), _fixed: None })
}

/// One replica's election loop and what it reports.
struct Election {
    leases: Api<Lease>,
    name: String,
    me: String,
    timing: Timing,
    tx: watch::Sender<bool>,
    holder_tx: watch::Sender<Option<String>>,
}

impl Election {
    async fn run(self, mut release: tokio::sync::oneshot::Receiver<()>) {
        let lease_ref = format!("{}/{}", self.leases.namespace().unwrap_or_default(), self.name);
        let wc = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut events = std::pin::pin!(watcher::watcher(self.leases.clone(), wc).default_backoff());
        // The Lease as last seen (by the watch or a write's answer), and when it last changed.
        let mut seen: Option<Lease> = None;
        let mut seen_at = Instant::now();
        // While the watch (re)lists: what the list holds so far.
        let mut listing: Option<Option<Lease>> = None;
        let mut listed = false;
        // When this replica last acquired or renewed the lease, as the request was sent.
        let mut renewed: Option<Instant> = None;
        let mut backoff = Duration::from_millis(200);
        loop {
            let holds = seen.as_ref().is_some_and(|l| holder_of(l).as_deref() == Some(self.me.as_str()));
            let leads = holds && renewed.is_some_and(|r| r.elapsed() + self.timing.margin < self.timing.duration);
            self.report(leads, seen.as_ref().and_then(holder_of));
            // A leader wakes up to step down in time even when nothing else happens.
            let step_down = renewed
                .filter(|_| leads)
                .map(|r| (r + self.timing.duration).saturating_duration_since(Instant::now() + self.timing.margin))
                .unwrap_or(Duration::from_secs(3600));
            let step = if listed {
                next_step(&self.me, seen.as_ref(), seen_at, renewed, self.timing)
            } else {
                Step::Wait(Duration::from_secs(3600))
            };
            if let Step::Wait(d) = step {
                tokio::select! {
                    biased;
                    _ = &mut release => break,
                    ev = events.next() => match ev {
                        Some(Ok(watcher::Event::Apply(l))) => {
                            if changed(seen.as_ref(), &l) {
                                seen_at = Instant::now();
                            }
                            seen = Some(l);
                        }
                        Some(Ok(watcher::Event::Delete(_))) => seen = None,
                        Some(Ok(watcher::Event::Init)) => listing = Some(None),
                        Some(Ok(watcher::Event::InitApply(l))) => listing = Some(Some(l)),
                        Some(Ok(watcher::Event::InitDone)) => {
                            let now = listing.take().flatten();
                            if now.as_ref().is_none_or(|l| changed(seen.as_ref(), l)) {
                                seen_at = Instant::now();
                            }
                            seen = now;
                            listed = true;
                        }
                        Some(Err(e)) => tracing::debug!(lease = %lease_ref, error = %e, "lease watch error; retrying"),
                        None => break,
                    },
                    _ = tokio::time::sleep(d.min(step_down)) => {}
                }
                continue;
            }
            // A write races only the release and the step-down: the watch waits meanwhile, so
            // its echo of this write cannot cancel it.
            let began = Instant::now();
            let limit = self.timing.renew_every.max(Duration::from_secs(1));
            tokio::select! {
                biased;
                _ = &mut release => break,
                _ = tokio::time::sleep(step_down) => {}
                written = tokio::time::timeout(limit, self.write(&step, seen.as_ref())) => match written {
                    Ok(Ok(l)) => {
                        renewed = Some(began);
                        seen_at = Instant::now();
                        seen = Some(l);
                        backoff = Duration::from_millis(200);
                    }
                    // Another replica was first: this is the Lease it wrote.
                    Ok(Err(Lost(now))) => {
                        let now = now.map(|l| *l);
                        if now.as_ref().is_none_or(|l| changed(seen.as_ref(), l)) {
                            seen_at = Instant::now();
                        }
                        seen = now;
                    }
                    Ok(Err(Failed(e))) => {
                        tracing::warn!(lease = %lease_ref, error = %e, retry_in = ?backoff, "cannot write the Lease");
                        tokio::select! {
                            _ = &mut release => break,
                            _ = tokio::time::sleep(backoff.min(step_down)) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                    Err(_) => tracing::warn!(lease = %lease_ref, ?limit, "the API server did not answer a Lease write in time"),
                }
            }
        }
        self.report(false, seen.as_ref().and_then(holder_of));
        self.give_up(&lease_ref, seen).await;
    }

    /// Publishes the standing, saying so in the log when it changes.
    fn report(&self, leads: bool, holder: Option<String>) {
        if *self.tx.borrow() != leads {
            if leads {
                tracing::info!(identity = %self.me, lease = %self.name, "this replica leads: reconciling");
            } else {
                tracing::warn!(identity = %self.me, lease = %self.name, "this replica does not lead: reconciling stopped");
            }
            let _ = self.tx.send(leads);
        }
        self.holder_tx.send_if_modified(|h| {
            let changed = *h != holder;
            *h = holder;
            changed
        });
    }

    /// Does `step`: the Lease as written.
    async fn write(&self, step: &Step, seen: Option<&Lease>) -> Result<Lease, WriteError> {
        let pp = PostParams::default();
        let result = match step {
            Step::Create => self.leases.create(&pp, &claimed(None, &self.name, &self.me, self.timing, true)).await,
            Step::Acquire | Step::Renew | Step::Wait(_) => {
                let lease = claimed(seen, &self.name, &self.me, self.timing, *step == Step::Acquire);
                self.leases.replace(&self.name, &pp, &lease).await
            }
        };
        match result {
            Ok(l) => Ok(l),
            // Another write came first (409), or the Lease to update is gone (404; a 404 of a
            // create is the namespace missing, an error): read what is there now.
            Err(kube::Error::Api(e)) if e.code == 409 || (e.code == 404 && *step != Step::Create) => {
                Err(self.leases.get_opt(&self.name).await.map_or_else(Failed, |l| Lost(l.map(Box::new))))
            }
            Err(e) => Err(Failed(e)),
        }
    }

    /// Clears the holder of the Lease if it names this replica (a replace guarded by the
    /// version last seen, read again once on a conflict).
    async fn give_up(&self, lease_ref: &str, mut seen: Option<Lease>) {
        for _ in 0..2 {
            let Some(mut lease) = seen.take().filter(|l| holder_of(l).as_deref() == Some(self.me.as_str())) else {
                return;
            };
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
                spec.acquire_time = None;
                spec.renew_time = None;
            }
            match self.leases.replace(&self.name, &PostParams::default(), &lease).await {
                Ok(_) => {
                    tracing::info!(lease = %lease_ref, identity = %self.me, "lease released");
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => match self.leases.get_opt(&self.name).await {
                    Ok(now) => seen = now,
                    Err(e) => return tracing::warn!(lease = %lease_ref, error = %e, "cannot release the lease"),
                },
                Err(e) => return tracing::warn!(lease = %lease_ref, error = %e, "cannot release the lease"),
            }
        }
    }
}

/// Why a write of the Lease did not take.
enum WriteError {
    /// Another replica's write came first; the Lease as it is now (`None`: absent).
    Lost(Option<Box<Lease>>),
    /// The API server refused or could not be reached.
    Failed(kube::Error),
}
use WriteError::{Failed, Lost};

/// The Lease's holder, when it names one.
fn holder_of(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone().filter(|h| !h.is_empty())
}

/// Whether `new` differs from `old` in what says the holder is alive (holder or renew time).
fn changed(old: Option<&Lease>, new: &Lease) -> bool {
    let key = |l: &Lease| l.spec.as_ref().map(|s| (s.holder_identity.clone(), s.renew_time.clone()));
    old.is_none_or(|o| key(o) != key(new))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::of(&LeaderElectionConfig {
            lease_duration: Duration::from_secs(10),
            renew_grace: Duration::from_secs(4),
            ..crate::config::KubernetesConfig::default().leader_election
        })
    }

    fn lease(holder: Option<&str>) -> Lease {
        let mut l = claimed(None, "steward", holder.unwrap_or("x"), timing(), true);
        if holder.is_none() {
            l.spec.as_mut().unwrap().holder_identity = None;
        }
        l
    }

    #[test]
    fn the_timing_renews_before_the_grace_and_steps_down_before_the_lease_lapses() {
        let t = timing();
        assert_eq!(t.duration, Duration::from_secs(10));
        assert_eq!(t.renew_every, Duration::from_secs(6));
        assert_eq!(t.margin, Duration::from_secs(2));
        let odd = Timing::of(&LeaderElectionConfig {
            lease_duration: Duration::from_millis(1500),
            renew_grace: Duration::from_secs(30),
            ..crate::config::KubernetesConfig::default().leader_election
        });
        assert!(odd.renew_every > Duration::ZERO && odd.renew_every < odd.duration, "{odd:?}");
        assert!(odd.margin < odd.duration, "{odd:?}");
    }

    #[test]
    fn a_free_or_missing_lease_is_taken_at_once_and_a_held_one_when_it_lapses() {
        let t = timing();
        let now = Instant::now();
        assert_eq!(next_step("a", None, now, None, t), Step::Create);
        assert_eq!(next_step("a", Some(&lease(None)), now, None, t), Step::Acquire);
        assert!(matches!(next_step("a", Some(&lease(Some("b"))), now, None, t), Step::Wait(d) if d <= t.duration));
        let long_ago = now - Duration::from_secs(11);
        assert_eq!(next_step("a", Some(&lease(Some("b"))), long_ago, None, t), Step::Acquire);
        // Its own name from an earlier run: taken at once; its own lease: renewed when due.
        assert_eq!(next_step("a", Some(&lease(Some("a"))), now, None, t), Step::Acquire);
        assert!(matches!(next_step("a", Some(&lease(Some("a"))), now, Some(now), t), Step::Wait(_)));
        assert_eq!(next_step("a", Some(&lease(Some("a"))), now, Some(now - Duration::from_secs(7)), t), Step::Renew);
    }

    #[test]
    fn a_claim_names_the_replica_and_counts_a_transition_only_when_taken_over() {
        let t = timing();
        let first = claimed(None, "steward", "a", t, true);
        let spec = first.spec.as_ref().unwrap();
        assert_eq!((spec.holder_identity.as_deref(), spec.lease_transitions), (Some("a"), Some(0)));
        assert_eq!(spec.lease_duration_seconds, Some(10));
        let taken = claimed(Some(&first), "steward", "b", t, true);
        assert_eq!(taken.spec.as_ref().unwrap().lease_transitions, Some(1));
        let renewed = claimed(Some(&taken), "steward", "b", t, false);
        assert_eq!(renewed.spec.as_ref().unwrap().lease_transitions, Some(1));
        assert!(changed(Some(&first), &taken) && !changed(Some(&taken), &taken.clone()));
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
