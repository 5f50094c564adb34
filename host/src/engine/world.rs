//! World rounds: for each plugin that reconciles a world, a snapshot of its kinds, the topology, one `reconcile-world` call, and each own object's outcome handed to the worker loop to apply like a reconcile's answer.
//!
//! One task runs the rounds of every world, one round at a time. A change to an object of a
//! world's kinds, a new status of an object of another plugin's kind in it, or anything that
//! would queue one of its own objects, marks the world dirty;
//! the round runs after the queue's debounce, so a burst of changes is one round. Each round is
//! built from the source's cache as it is then (in Kubernetes mode the watch caches, which a
//! periodic relist replaces whole), and its changes are the difference from the last successful
//! round's snapshot: an event the host missed is still a change. A round that fails is run again
//! whole, with the queue's backoff; its error shows on the host's `WorldRounds` condition and on
//! every own object. The plugin's own objects are never reconciled one by one: the worker applies
//! the outcome the last round left for each (see [`Worlds::take`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward_sdk::{RawObject, RawOutcome};

use super::decide::PluginId;
use super::{Engine, EngineReads};
use crate::metrics::{WorldLabel, WorldRoundLabel};
use crate::model::{ObjectKey, Reason, now_millis};
use crate::plugin::{Plugin, PluginError, RoundRequest};
use crate::world::changes::{Fingerprints, between, fingerprint, fingerprints};
use crate::world::topology::{self, Bounds};

/// The host condition that says whether each world's rounds run (its subject is the plugin).
pub const WORLD_ROUNDS: &str = "WorldRounds";

/// What a round decided for one own object, waiting for the worker to apply it.
pub(super) struct Pending {
    /// The object's fingerprint in the round's snapshot: an outcome for an object that changed
    /// since is stale (the next round answers for it).
    fingerprint: u64,
    /// The plugin that ran the round.
    pub(super) ran: PluginId,
    /// When the round started.
    pub(super) started: u64,
    /// How long its call took.
    pub(super) elapsed_ms: u64,
    /// The outcome, or the object's error (the round's own, when the round failed).
    pub(super) result: Result<RawOutcome, PluginError>,
}

/// Where one world stands.
struct WorldState {
    /// The plugin version whose world this is (a reload starts over with a first round).
    version: String,
    /// When the next round runs; `None` when nothing asks for one.
    due: Option<Instant>,
    /// Rounds failed in a row.
    failures: u32,
    /// The last successful round's snapshot; `None` before the first.
    last: Option<Fingerprints>,
}

/// Every world's state and the outcomes its rounds left.
#[derive(Default)]
pub(super) struct Worlds {
    states: Mutex<HashMap<String, WorldState>>,
    pending: Mutex<HashMap<ObjectKey, Pending>>,
    wake: tokio::sync::Notify,
}

impl Worlds {
    /// Takes the outcome the last round left for `obj` (keyed `key`), if it is for the object as
    /// it is now.
    pub(super) fn take(&self, key: &ObjectKey, obj: &RawObject) -> Option<Pending> {
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(key)?;
        (p.fingerprint == fingerprint(obj)).then_some(p)
    }

    /// Asks for a round of `plugin`'s world within `delay` (sooner if one is due sooner).
    fn touch(&self, plugin: &str, delay: Duration) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = states.get_mut(plugin) {
            let at = Instant::now() + delay;
            s.due = Some(s.due.map_or(at, |d| d.min(at)));
            drop(states);
            self.wake.notify_one();
        }
    }
}

impl Engine {
    /// The world plugin serving `kind` as one of its own kinds, if its plugin reconciles a world.
    pub(super) fn world_plugin_of(&self, kind: &str) -> Option<Arc<Plugin>> {
        self.plugins.resolve(kind).ok().filter(|p| p.world().is_some())
    }

    /// Something happened to an object of `kind`: every world holding the kind runs a round
    /// after the debounce.
    pub(super) fn touch_worlds(&self, kind: &str) {
        for p in self.plugins.plugins() {
            if p.world().is_some_and(|w| w.holds(kind)) {
                self.worlds.touch(p.name(), self.cfg.queue.debounce);
            }
        }
    }

    /// The status of an object of `kind` changed: every world that holds the kind without owning
    /// it runs a round after the debounce (its topology carries statuses; a world's own statuses
    /// are what its rounds write, so they start none).
    pub(super) fn touch_worlds_reading(&self, kind: &str) {
        for p in self.plugins.plugins() {
            if p.world().is_some_and(|w| w.holds(kind) && !w.own.iter().any(|k| k == kind)) {
                self.worlds.touch(p.name(), self.cfg.queue.debounce);
            }
        }
    }

    /// Makes the worlds those of the loaded plugins: a new world, or one whose plugin changed,
    /// starts with a first round now; a world whose plugin left is forgotten.
    pub(super) fn sync_worlds(&self) {
        let plugins = self.plugins.plugins();
        let mut states = self.worlds.states.lock().unwrap_or_else(|e| e.into_inner());
        states.retain(|name, _| plugins.iter().any(|p| p.name() == name && p.world().is_some()));
        for p in plugins.iter().filter(|p| p.world().is_some()) {
            let version = format!("{}@{}", p.info().version, p.file().display());
            let fresh = states.get(p.name()).is_none_or(|s| s.version != version);
            if fresh {
                states.insert(
                    p.name().to_string(),
                    WorldState { version, due: Some(Instant::now()), failures: 0, last: None },
                );
            }
        }
        let gone: Vec<String> = self
            .conditions
            .list()
            .into_iter()
            .filter(|c| c.type_ == WORLD_ROUNDS)
            .filter_map(|c| c.subject)
            .filter(|s| !states.contains_key(s))
            .collect();
        drop(states);
        if !gone.is_empty() {
            // What the rounds of a world that left decided is not applied any more.
            let worlds: Vec<_> = plugins.iter().filter_map(|p| p.world()).collect();
            let mut pending = self.worlds.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.retain(|k, _| worlds.iter().any(|w| w.own.iter().any(|o| **k.kind() == **o)));
        }
        for s in gone {
            self.conditions.remove(WORLD_ROUNDS, Some(&s));
        }
        self.worlds.wake.notify_one();
    }

    /// Runs the rounds of every world as they come due, one at a time, while this replica leads.
    pub(super) async fn run_worlds(self: Arc<Self>) {
        let mut leader = self.driver.leadership();
        loop {
            if leader.wait_for(|l| *l).await.is_err() {
                return;
            }
            let now = Instant::now();
            let (due, next) = {
                let states = self.worlds.states.lock().unwrap_or_else(|e| e.into_inner());
                let due: Vec<String> =
                    states.iter().filter(|(_, s)| s.due.is_some_and(|d| d <= now)).map(|(n, _)| n.clone()).collect();
                let next = states.values().filter_map(|s| s.due).min();
                (due, next)
            };
            for name in due {
                self.round(&name).await;
            }
            if next.is_some_and(|n| n <= Instant::now()) {
                continue;
            }
            let sleep = async {
                match next {
                    Some(n) => tokio::time::sleep_until(n.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {}
                _ = self.worlds.wake.notified() => {}
            }
        }
    }

    /// One round of the world of plugin `name`.
    async fn round(&self, name: &str) {
        let Some(plugin) = self.plugins.plugins().into_iter().find(|p| p.name() == name) else { return };
        let Some(world) = plugin.world().cloned() else { return };
        let last = {
            let mut states = self.worlds.states.lock().unwrap_or_else(|e| e.into_inner());
            let Some(s) = states.get_mut(name) else { return };
            s.due = None;
            s.last.clone()
        };
        let source = self.source();
        // Every kind must be served and listed: a round over a partial world would tell the
        // plugin that objects it cannot see are gone.
        for kind in world.all_kinds() {
            let served = self.plugins.resolve(&kind).is_ok() && !self.is_disabled(&kind);
            if !served {
                let why = format!(
                    "kind {kind} of the world is served by no loaded plugin (or is disabled); load the plugin that \
                     serves it, or take it out of the world"
                );
                let own: Vec<ObjectKey> = world
                    .own
                    .iter()
                    .flat_map(|k| source.list(k, None))
                    .map(|o| ObjectKey::new(&o.raw.kind, &o.raw.namespace, &o.raw.name))
                    .collect();
                return self.round_failed(&plugin, PluginError::Host(why), &own).await;
            }
            if !source.is_synced(&kind) {
                // Listed soon: the sync event touches the world again.
                self.worlds.touch(name, self.cfg.queue.debounce);
                return;
            }
        }
        let reads = EngineReads::new(source.clone(), self.store.clone()).with_plugins(self.plugins.clone());
        let mut objects = Vec::new();
        for kind in world.all_kinds() {
            objects.extend(source.list(&kind, None).into_iter().filter(|o| !o.raw.deleting).map(|o| {
                let mut raw = o.raw;
                let key = ObjectKey::new(&raw.kind, &raw.namespace, &raw.name);
                raw.status = self.store.get_with(&key.text(), |r| r.status.as_ref().map(|s| s.to_string())).flatten();
                raw
            }));
        }
        let own: Vec<ObjectKey> = objects
            .iter()
            .filter(|o| world.own.contains(&o.kind))
            .map(|o| ObjectKey::new(&o.kind, &o.namespace, &o.name))
            .collect();
        let now_prints = fingerprints(&objects);
        let limits = &plugin.settings().limits;
        let bounds = Bounds { objects: limits.world_objects, bytes: limits.world_bytes };
        let topology = match topology::build(&world, objects, bounds) {
            Ok(t) => t,
            Err(e) => return self.round_failed(&plugin, PluginError::Host(e.to_string()), &own).await,
        };
        let changes = between(last.as_ref().unwrap_or(&Fingerprints::new()), &now_prints);
        let nodes = topology.nodes.len();
        let edges = topology.edges.len();
        let n_changes = changes.len();
        let req = RoundRequest {
            changes,
            first: last.is_none(),
            topology,
            targets: own.iter().map(|k| (k.clone(), self.units.inputs(&plugin, k))).collect(),
        };
        let started = now_millis();
        let span = tracing::info_span!("world_round", plugin = %name, objects = nodes, changes = n_changes);
        let report = tracing::Instrument::instrument(plugin.reconcile_world(req, Arc::new(reads)), span).await;
        self.observe_call(
            plugin.names().0,
            "reconcile-world",
            report.elapsed,
            report.cpu,
            report.result.as_ref().err(),
        );
        self.metrics.world_objects.get_or_create(&WorldLabel { plugin: name.to_string() }).set(nodes as i64);
        let answer = match report.result {
            Ok(a) => a,
            Err(e) => return self.round_failed(&plugin, e, &own).await,
        };
        self.metrics.world_rounds.get_or_create(&WorldRoundLabel { plugin: name.into(), result: "ok".into() }).inc();
        let ran = PluginId::of(&plugin);
        let elapsed_ms = report.elapsed.as_millis() as u64;
        let answered: Vec<ObjectKey> = answer.outcomes.iter().map(|(k, _)| k.clone()).collect();
        {
            let mut pending = self.worlds.pending.lock().unwrap_or_else(|e| e.into_inner());
            for (key, result) in answer.outcomes {
                let Some(&fingerprint) = now_prints.get(&key) else { continue };
                pending.insert(key, Pending { fingerprint, ran: ran.clone(), started, elapsed_ms, result });
            }
        }
        for key in &answered {
            self.enqueue(key, Reason::World);
        }
        self.conditions.ok(
            WORLD_ROUNDS,
            Some(name),
            "RoundSucceeded",
            format!(
                "the last round saw {nodes} objects and {edges} edges, {n_changes} changed, and answered for {} object(s)",
                answered.len()
            ),
        );
        let resync = world.own.first().map_or(self.cfg.resync, |k| self.resync_for(k));
        let next = answer.requeue_after.map_or(resync, |r| r.min(resync));
        let mut states = self.worlds.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = states.get_mut(name) {
            s.failures = 0;
            s.last = Some(now_prints);
            let at = Instant::now() + next;
            s.due = Some(s.due.map_or(at, |d| d.min(at)));
        }
    }

    /// A round of `plugin` failed as a whole with `error`: the `WorldRounds` condition and each
    /// own object (`own`) say so, and the round runs again after the queue's backoff.
    async fn round_failed(&self, plugin: &Plugin, error: PluginError, own: &[ObjectKey]) {
        let name = plugin.name();
        self.metrics.world_rounds.get_or_create(&WorldRoundLabel { plugin: name.into(), result: "error".into() }).inc();
        let failures = {
            let states = self.worlds.states.lock().unwrap_or_else(|e| e.into_inner());
            states.get(name).map_or(0, |s| s.failures) + 1
        };
        let backoff = self.cfg.queue.initial_backoff.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
        let backoff = backoff.min(self.cfg.queue.max_backoff);
        tracing::warn!(plugin = %name, failures, retry_in = ?backoff, "world round failed: {error}");
        self.conditions.fail(
            WORLD_ROUNDS,
            Some(name),
            "RoundFailed",
            format!(
                "round failed ({failures} in a row), nothing of it was applied: {error}; the host runs it again in {}",
                humantime::format_duration(Duration::from_secs(backoff.as_secs().max(1)))
            ),
        );
        let ran = PluginId::of(plugin);
        let source = self.source();
        {
            let mut pending = self.worlds.pending.lock().unwrap_or_else(|e| e.into_inner());
            for key in own {
                let Some(obj) = source.get(key) else { continue };
                let p = Pending {
                    fingerprint: fingerprint(&obj.raw),
                    ran: ran.clone(),
                    started: now_millis(),
                    elapsed_ms: 0,
                    result: Err(error.clone()),
                };
                pending.insert(key.clone(), p);
            }
        }
        for key in own {
            self.enqueue(key, Reason::World);
        }
        let mut states = self.worlds.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = states.get_mut(name) {
            s.failures = failures;
            let at = Instant::now() + backoff;
            s.due = Some(s.due.map_or(at, |d| d.min(at)));
        }
    }
}

/// Whether a run of a world's own object for `reason`, with no outcome waiting, asks for a round:
/// what would have made the object reconcile again (something it owns changed, someone triggered
/// it, the host started or took the lease) does; the host's own timers do not (the world has its
/// own resync and backoff).
fn asks_for_round(reason: Reason) -> bool {
    !matches!(reason, Reason::World | Reason::Retry | Reason::Requeue | Reason::Resync)
}

impl Engine {
    /// Applies to a world's own object `key` (`obj` now) the outcome its world's last round
    /// left, through the same decision, units and status as a reconcile's answer; with none
    /// waiting, asks for a round when `reason` would have reconciled it.
    pub(super) async fn apply_round(
        &self,
        key: &ObjectKey,
        obj: crate::driver::SourceObject,
        before: Option<crate::model::StatusRecord>,
        reason: Reason,
    ) {
        let Some(plugin) = self.world_plugin_of(key.kind()) else { return };
        let Some(pending) = self.worlds.take(key, &obj.raw) else {
            if asks_for_round(reason) {
                self.worlds.touch(plugin.name(), self.cfg.queue.debounce);
            }
            return;
        };
        let facts = self.facts(key);
        let record = match super::decide::prepare_reconcile(before.as_ref(), &obj, reason, &facts) {
            super::decide::Prepared::Decided(d) => {
                self.apply(key, before.as_ref(), d).await;
                return;
            }
            super::decide::Prepared::Call { record, effects } => {
                let first = super::decide::Decision {
                    record: Some(record.clone()),
                    schedule: super::decide::Schedule::Idle,
                    effects,
                };
                if !self.apply(key, before.as_ref(), first).await {
                    return;
                }
                record
            }
        };
        let mut result = pending.result;
        if let Ok(out) = &mut result
            && let Err(e) = self.units.settle(&plugin, key, out).await
        {
            result = Err(e);
        }
        self.record_reads(key, self.units.reads(&plugin, key), None);
        let out = super::decide::CallOutcome {
            ran: pending.ran,
            started: pending.started,
            elapsed_ms: pending.elapsed_ms,
            result,
            trace_id: crate::telemetry::current_trace_id(),
            warnings: crate::schema::bounded(obj.warnings),
            warnings_for: None,
        };
        let d = super::decide::reconciled(before.as_ref(), record, reason, out, &self.facts(key));
        self.apply(key, before.as_ref(), d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_would_reconcile_an_object_asks_its_world_for_a_round() {
        for r in [Reason::World, Reason::Retry, Reason::Requeue, Reason::Resync] {
            assert!(!asks_for_round(r), "{r:?}");
        }
        for r in [Reason::Unit("childChanged"), Reason::ManualTrigger, Reason::Startup, Reason::LeaderElected] {
            assert!(asks_for_round(r), "{r:?}");
        }
    }
}
