//! The reconcile engine: workers take keys from the queue, call the kind's plugin, `decide` (pure) and apply the effects through the mode's driver.
//!
//! The rest of the engine lives beside this worker loop: `startup` (building and starting it),
//! `events` (what queues a key), `decide` (the pure decisions), `effects` (applying them),
//! `control` (the API's requests), `error` (why it could not start or refused a request).

mod control;
mod decide;
mod deps;
mod effects;
mod error;
mod events;
mod fields;
mod journal;
mod kinds_seen;
mod manage;
mod reads;
mod reason;
mod span;
mod startup;
mod summary;
mod view;
mod world;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use steward_sdk::RawObject;
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use deps::Deps;
pub use error::{EngineError, RequestError};
pub use journal::{JOURNAL_LEN, Journal, RecordedEvent};
pub use reads::EngineReads;
pub use summary::{ColumnValue, Readiness, Summary, Verdict, summarize};
pub use view::{KindOverview, Overview, ResourceView};
pub use world::WORLD_ROUNDS;

use crate::config::Config;
use crate::driver::{Driver, KindState, Lifecycle, Presence};
use crate::driver::{Source, SourceObject};
use crate::metrics::{KindLabel, Metrics};
use crate::model::{KeySet, ObjectKey, Reason, StatusRecord, now_millis};
use crate::plugin::{PluginSet, ReconcileRequest};
use crate::queue::{Taken, WorkQueue};
use crate::store::Store;
use decide::{CallOutcome, Decision, Facts, PluginId, Prepared, Unserved};

/// The running host: plugins, the mode's driver (and through it the source), store, queue and workers.
pub struct Engine {
    cfg: Config,
    plugins: Arc<PluginSet>,
    driver: Arc<dyn Driver>,
    store: Arc<Store<StatusRecord>>,
    queue: Arc<WorkQueue<ObjectKey, Reason>>,
    /// The capability units as they run.
    units: crate::capabilities::Started,
    metrics: Arc<Metrics>,
    /// The host's own conditions (store, sources, watches, webhook).
    conditions: crate::health::Conditions,
    deps: Mutex<Deps>,
    disabled: RwLock<BTreeSet<String>>,
    running: Mutex<KeySet>,
    ready: AtomicBool,
    /// Reconciles and finalizes running now (a lost lease waits for them).
    in_flight: AtomicUsize,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    keep: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
    /// The events recorded about objects, in both modes.
    journal: Journal,
    /// The worlds of the plugins that reconcile one, and the outcomes their rounds left.
    worlds: world::Worlds,
}

impl Engine {
    /// The source of desired state, as the driver holds it.
    fn source(&self) -> Arc<dyn Source> {
        self.driver.source()
    }

    /// The facts a decision about `key` needs, as they are now.
    fn facts(&self, key: &ObjectKey) -> Facts {
        Facts {
            now: now_millis(),
            max_retries: self.cfg.queue.max_retries,
            resync: self.resync_for(key.kind()),
            plugin: self.plugins.resolve(key.kind()).map(|p| PluginId::of(&p)).map_err(|e| e.to_string()),
            finalizer: self.driver.finalizer(),
            status_unwritten: self.driver.status_unwritten(key),
        }
    }

    async fn worker(self: Arc<Self>, _id: usize) {
        let mut leader = self.driver.leadership();
        loop {
            // A standby replica (Kubernetes mode) takes no work; its queue waits for leadership.
            if leader.wait_for(|l| *l).await.is_err() {
                return;
            }
            let Some(Taken { key, reason, waited, ready_left }) = self.queue.get().await else { return };
            if !self.driver.leads() {
                self.queue.done(&key);
                self.queue.add(key, reason);
                continue;
            }
            self.metrics.queue_latency.observe(waited.as_secs_f64());
            self.metrics.queue_depth.set(ready_left as i64);
            let span = span::reconcile(&key, reason);
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            self.process(&key, reason).instrument(span).await;
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.queue.done(&key);
        }
    }

    /// One run of `key`: the kind's state, then the object's lifecycle as the driver sees it.
    async fn process(&self, key: &ObjectKey, reason: Reason) {
        let skey = key.text();
        if self.is_disabled(key.kind()) {
            let before = self.store.get(&skey);
            let d = decide::unserved(key.kind(), before.as_ref(), Unserved::Disabled, &self.facts(key));
            self.apply(key, before.as_ref(), d).await;
            return;
        }
        match self.driver.kind_state(key.kind()) {
            KindState::Served => {}
            KindState::Unwatched => {
                let before = self.store.get(&skey);
                let d = decide::unserved(key.kind(), before.as_ref(), Unserved::NoPlugin, &self.facts(key));
                self.apply(key, before.as_ref(), d).await;
                return;
            }
            // Not listed yet: a missing object is not taken for deleted; `KindSynced` schedules it.
            KindState::Unlisted => return,
        }
        let record = self.store.get(&skey);
        // The record's status is what the plugin is given when there is one (see `reconcile`).
        let obj = if record.as_ref().is_some_and(|r| r.status.is_some()) {
            self.source().get_without_status(key)
        } else {
            self.source().get(key)
        };
        match (obj, record) {
            (Some(obj), record) => match self.driver.lifecycle(key, &obj, record.is_some()) {
                Lifecycle::Reconcile if self.world_plugin_of(key.kind()).is_some() => {
                    self.apply_round(key, obj, record, reason).await
                }
                Lifecycle::Reconcile => self.reconcile(key, obj, record, reason).await,
                Lifecycle::Finalize => self.finalize(key, record.unwrap_or_default(), Some(obj), reason).await,
                Lifecycle::Ignore => {}
            },
            (None, Some(rec)) => match self.driver.presence(key).await {
                Ok(Presence::Gone) => self.finalize(key, rec, None, reason).await,
                Ok(Presence::OutOfScope) => {
                    tracing::info!("left this replica's scope (labels or namespace); let go without finalize");
                    self.apply(key, Some(&rec), decide::out_of_scope()).await;
                }
                Err(e) => self.retry_later(key, &e),
            },
            (None, None) => {
                self.deps.lock().unwrap_or_else(|p| p.into_inner()).forget(key);
                self.queue.forget(key);
            }
        }
    }

    async fn reconcile(&self, key: &ObjectKey, obj: SourceObject, before: Option<StatusRecord>, reason: Reason) {
        let facts = self.facts(key);
        let record = match decide::prepare_reconcile(before.as_ref(), &obj, reason, &facts) {
            Prepared::Decided(d) => {
                self.apply(key, before.as_ref(), d).await;
                return;
            }
            Prepared::Call { record, effects } => {
                // Its effects (forget failures, hold the object) need no record.
                let first = Decision { record: None, schedule: decide::Schedule::Idle, effects };
                if !self.apply(key, before.as_ref(), first).await {
                    return;
                }
                record
            }
        };
        let Ok(plugin) = self.plugins.resolve(key.kind()) else {
            // Unloaded since the facts were read: the unload queued the key again.
            return;
        };
        span::called(plugin.info(), record.retry_count);
        let mut raw = obj.raw;
        raw.status = record.status.as_ref().map(|s| s.to_string()).or(raw.status);
        let started = now_millis();
        let clock = Instant::now();
        let mut checked = fields::check(self.cfg.field_validation, &plugin, raw, obj.spec_hash, before.as_ref());
        let (asked, result) = if checked.errors.is_empty() {
            // The plugin's warnings, when they must be asked, come from the reconcile's instance.
            self.call_reconcile(&plugin, key, std::mem::take(&mut checked.raw), checked.ask).await
        } else {
            // `field_validation: strict`: unknown fields make the spec invalid; the plugin is not
            // called for a reconcile, only for its warnings.
            let asked = if checked.ask { plugin.warnings(&checked.raw).await } else { None };
            (
                self.observe_warnings(&plugin, asked),
                Err(crate::plugin::PluginError::Invalid(std::mem::take(&mut checked.errors))),
            )
        };
        let (warnings, warnings_for) = checked.finish(asked);
        let out = CallOutcome {
            ran: PluginId::of(&plugin),
            started,
            elapsed_ms: clock.elapsed().as_millis() as u64,
            result,
            trace_id: crate::telemetry::current_trace_id(),
            // The source's own warnings (filesystem leniencies) first, then the spec's.
            warnings: crate::schema::bounded(obj.warnings.into_iter().chain(warnings).collect()),
            warnings_for,
        };
        let d = decide::reconciled(before.as_ref(), record, reason, out, &self.facts(key));
        span::decided(d.record.as_ref());
        self.metrics
            .reconcile_time
            .get_or_create(&KindLabel { kind: key.kind().clone() })
            .observe(clock.elapsed().as_secs_f64());
        self.apply(key, before.as_ref(), d).await;
    }

    /// Runs the plugin's `finalize` for an object being deleted (`obj`) or gone from its source
    /// (`None`); on success its services stop, the driver lets it go and the host forgets it.
    async fn finalize(&self, key: &ObjectKey, rec: StatusRecord, obj: Option<SourceObject>, reason: Reason) {
        let before = rec.clone();
        let facts = self.facts(key);
        let record = match decide::prepare_finalize(rec, reason, &facts) {
            Prepared::Decided(d) => {
                self.apply(key, Some(&before), d).await;
                return;
            }
            Prepared::Call { record, .. } => record,
        };
        let Ok(plugin) = self.plugins.resolve(key.kind()) else { return };
        span::called(plugin.info(), record.retry_count);
        let raw = match obj {
            Some(o) => RawObject {
                status: record.status.as_ref().map(|s| s.to_string()).or(o.raw.status),
                deleting: true,
                ..o.raw
            },
            None => RawObject {
                api_version: record.api_version.to_string(),
                kind: key.kind().to_string(),
                name: key.name().to_string(),
                namespace: key.namespace().to_string(),
                generation: record.generation,
                spec: record.spec.clone().unwrap_or_else(|| "{}".into()),
                status: record.status.clone(),
                deleting: true,
                ..RawObject::default()
            },
        };
        // Finalize sees the spec as reconcile did, without the fields its schema does not know,
        // whatever `field_validation` says: an object is let go even if its spec was refused.
        let spec = crate::schema::check_spec(
            crate::config::FieldValidation::Ignore,
            plugin.spec_schema(key.kind()),
            &raw.spec,
        )
        .spec;
        let raw = RawObject { spec, ..raw };
        let started = now_millis();
        let (mut result, elapsed) = if plugin.world().is_some() {
            // A world's own objects are never called one by one: the round after this one
            // sees the object gone (a `deleted` change); the units let go of what it owned.
            self.touch_worlds(key.kind());
            (Ok(crate::plugin::convert::nothing()), std::time::Duration::ZERO)
        } else {
            let reads =
                Arc::new(EngineReads::new(self.source(), self.store.clone()).with_plugins(self.plugins.clone()));
            let req = ReconcileRequest { resource: raw, inputs: self.inputs_for(&plugin, key) };
            let report = plugin.finalize(&req, reads).await;
            self.observe_call(plugin.names().0, "finalize", report.elapsed, report.cpu, report.result.as_ref().err());
            (report.result, report.elapsed)
        };
        // The owner goes only once the units let go of what they made for it (its children).
        if result.is_ok()
            && let Err(e) = self.units.finalize(&plugin, key).await
        {
            result = Err(e);
        }
        let ok = result.is_ok();
        let out = CallOutcome {
            ran: PluginId::of(&plugin),
            started,
            elapsed_ms: elapsed.as_millis() as u64,
            result,
            trace_id: crate::telemetry::current_trace_id(),
            warnings: Vec::new(),
            warnings_for: None,
        };
        let d = decide::finalized(record, reason, out, &self.facts(key));
        span::decided(d.record.as_ref());
        if self.apply(key, Some(&before), d).await && ok {
            self.metrics.finalizations.get_or_create(&KindLabel { kind: key.kind().clone() }).inc();
            tracing::info!("finalized and forgotten");
        }
    }
}

impl Engine {
    /// Calls the plugin's `reconcile` for `key` with `resource` (and first, when `lint` is set,
    /// its warnings, in the same instance), lets the units settle what it wants (a refusal is the
    /// call's error: a child the mode refused), and records what it read: its `get`s and `list`s,
    /// and what it depends on through the units. Returns the warnings' answer (`None` when not
    /// asked, or the plugin has no `lint`), and the reconcile's.
    async fn call_reconcile(
        &self,
        plugin: &crate::plugin::Plugin,
        key: &ObjectKey,
        resource: RawObject,
        lint: bool,
    ) -> (
        Option<Result<Vec<steward_sdk::FieldError>, crate::plugin::PluginError>>,
        Result<steward_sdk::RawOutcome, crate::plugin::PluginError>,
    ) {
        let req = ReconcileRequest { resource, inputs: self.inputs_for(plugin, key) };
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone());
        let reads = Arc::new(kinds_seen::KindsSeen::new(Arc::new(
            EngineReads::new(self.source(), self.store.clone()).with_plugins(self.plugins.clone()),
        )));
        let (warned, report) = plugin.reconcile_linted(&req, reads.clone(), lint).await;
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        let asked = self.observe_warnings(plugin, warned);
        self.observe_call(plugin.names().0, "reconcile", report.elapsed, report.cpu, report.result.as_ref().err());
        let mut result = report.result;
        if let Ok(out) = &mut result
            && let Err(e) = self.units.settle(plugin, key, out).await
        {
            result = Err(e);
        }
        let mut read = report.reads;
        read.extend(self.units.reads(plugin, key));
        self.record_reads(key, read, report.reads_overflowed.then(|| reads.kinds()));
        (asked, result)
    }

    /// The answer of a call of `plugin`'s warnings (`None`: not asked, or no `lint`), counted in
    /// the metrics as the op `warnings`.
    fn observe_warnings(
        &self,
        plugin: &crate::plugin::Plugin,
        report: Option<crate::plugin::CallReport<Vec<steward_sdk::FieldError>>>,
    ) -> Option<Result<Vec<steward_sdk::FieldError>, crate::plugin::PluginError>> {
        let w = report?;
        self.observe_call(plugin.names().0, "warnings", w.elapsed, w.cpu, w.result.as_ref().err());
        Some(w.result)
    }

    /// What the units are given for a call of `plugin` about `key`.
    fn inputs_for(&self, plugin: &crate::plugin::Plugin, key: &ObjectKey) -> crate::plugin::Inputs {
        self.units.inputs(plugin, key)
    }
}

fn key_of(raw: &RawObject) -> ObjectKey {
    ObjectKey::new(&raw.kind, &raw.namespace, &raw.name)
}
