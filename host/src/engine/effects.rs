//! Applying a decision: the schedule, then each effect in order, through the queue, the store, the capability units and the mode's driver.

use std::collections::BTreeSet;
use std::time::Duration;

use super::Engine;
use super::decide::{self, Decision, Effect, Schedule};
use crate::driver::{DriverError, Written};
use crate::metrics::{KindLabel, KindResult, PluginErrorLabel, PluginOp};
use crate::model::{Name, ObjectKey, Phase, Reason, StatusRecord, now_millis};
use crate::plugin::{PluginError, Read};
use crate::readiness::Reported;

impl Engine {
    /// Applies `d` for `key` (`before` is the stored record): the schedule first (a backoff sets
    /// the record's `next_attempt_time`), then the effects in order. Holding or releasing the
    /// object through the driver, or forgetting it, that fails stops the rest and retries the key
    /// with backoff; a status write that fails is retried with backoff too, but what follows it
    /// still applies (the store has the record). Returns whether every effect was applied.
    pub(super) async fn apply(&self, key: &ObjectKey, before: Option<&StatusRecord>, d: Decision) -> bool {
        let mut record = d.record;
        match d.schedule {
            Schedule::Idle => {}
            Schedule::Now(reason) => self.enqueue(key, reason),
            Schedule::After(delay, reason) => self.schedule(key, delay, reason),
            Schedule::Backoff => {
                let delay = self.backoff(key);
                if let Some(r) = &mut record {
                    r.next_attempt_time = Some(now_millis() + delay.as_millis() as u64);
                    tracing::info!(error = r.last_error.as_deref().unwrap_or_default(), retry_in = ?delay, "reconcile error; will retry");
                }
            }
        }
        if let Some(r) = &record
            && r.phase == Phase::Failed
            && before.is_none_or(|b| b.phase != Phase::Failed || b.retry_count != r.retry_count)
        {
            tracing::warn!(
                error = r.last_error.as_deref().unwrap_or_default(),
                retries = r.retry_count,
                "reconcile failed; waiting for a spec change or a manual trigger"
            );
        }
        for effect in d.effects {
            if !self.apply_one(key, before, record.as_ref(), effect).await {
                return false;
            }
        }
        true
    }

    async fn apply_one(
        &self,
        key: &ObjectKey,
        before: Option<&StatusRecord>,
        record: Option<&StatusRecord>,
        effect: Effect,
    ) -> bool {
        match effect {
            Effect::ForgetFailures => self.queue.forget(key),
            Effect::EnsureFinalizer => {
                if let Err(e) = self.driver.hold(key).await {
                    self.retry_later(key, &e);
                    return false;
                }
            }
            Effect::Persist => {
                let Some(rec) = record else { return true };
                self.persist(key, rec.clone(), before);
                self.write_status(key, rec, before).await;
            }
            Effect::RewriteStatus => {
                let Some(rec) = record else { return true };
                self.write_status(key, rec, before).await;
            }
            Effect::HandOver(mut outcome) => {
                let Ok(plugin) = self.plugins.resolve(key.kind()) else { return true };
                for unit in &self.units.effects {
                    unit.reconciled(&plugin, key, &mut outcome);
                }
            }
            Effect::Release => {
                for unit in &self.units.effects {
                    unit.forget(key).await;
                }
            }
            Effect::Publish { warning, reason, message } => {
                self.record_event(key, warning, reason, "Reconcile", message);
            }
            // Recorded from the outcome itself: the object may be gone from the cache already.
            Effect::RemoveFinalizer => match self.driver.release(key).await {
                Ok(()) => self.record_event(
                    key,
                    false,
                    "Finalized".into(),
                    "Finalize",
                    "finalized; the host let the object go".into(),
                ),
                // A replica that lost the lease lets the new leader finish.
                Err(DriverError::NotLeader) => return false,
                Err(e) => {
                    self.retry_later(key, &e);
                    return false;
                }
            },
            Effect::Forget => {
                if let Err(e) = self.store.remove(&key.text()).await {
                    tracing::error!(error = %e, "cannot forget the object; it will be finalized again");
                    return false;
                }
                self.deps.lock().unwrap_or_else(|p| p.into_inner()).forget(key);
                self.source().forget(key);
                // Not `remove`: if the object came back meanwhile, that change was queued and must still run.
                self.queue.unschedule(key);
            }
            Effect::NotifyReaders => self.notify_readers(key),
            Effect::CountResult(result) => {
                self.metrics.reconcile_total.get_or_create(&KindResult { kind: key.kind().clone(), result }).inc();
            }
            Effect::CountError => {
                self.metrics.reconcile_errors.get_or_create(&KindLabel { kind: key.kind().clone() }).inc();
            }
        }
        true
    }

    /// Writes `rec` through the driver; once it is written, a `Synced` object's failures are
    /// forgotten, and the change of what its status tells people is recorded as events
    /// ([`decide::status_events`]): against the status the write replaced where the mode keeps one
    /// (the cluster), else against `before`, the store's record. A failed write is retried with
    /// backoff, and records nothing until a write succeeds.
    async fn write_status(&self, key: &ObjectKey, rec: &StatusRecord, before: Option<&StatusRecord>) {
        let told = match self.driver.write_status(key, rec).await {
            Ok(written) => {
                if rec.phase == Phase::Synced {
                    self.queue.forget(key);
                }
                match written {
                    Written::NotKept => before.map(Reported::of_record),
                    Written::Changed(told) => told,
                    Written::Unchanged => return,
                }
            }
            // A replica that no longer leads writes nothing; the store has the record.
            Err(DriverError::NotLeader) => return,
            Err(e) => {
                self.retry_later(key, &e);
                return;
            }
        };
        for event in decide::status_events(told.as_ref(), &Reported::of_record(rec)) {
            if let Effect::Publish { warning, reason, message } = event {
                self.record_event(key, warning, reason, "Reconcile", message);
            }
        }
    }

    /// Stores `rec` unless it equals `before`. The store shows it at once; its durable commit is
    /// group-committed in the background, so a worker never waits for an fsync. A crash before
    /// that commit costs at most a repeated reconcile: the state is recomputed from the source.
    /// A record is put soon ([`crate::store::Store::put_soon`]), sharing the next commit, when
    /// losing it in a crash costs nothing but a repeated reconcile: when it differs from
    /// `before` only in its times and history (a resync of an unchanged object), and always in
    /// a mode whose objects are held by a finalizer (Kubernetes), where the cluster keeps the
    /// object, its status, and a deleted one until the host has finalized it. In filesystem
    /// mode any other record waits at most [`crate::store::LINGER`] for company
    /// ([`crate::store::Store::put_detached`]; longer only while commits fail): a file deleted
    /// while the host is down is finalized only if its record survived.
    fn persist(&self, key: &ObjectKey, rec: StatusRecord, before: Option<&StatusRecord>) {
        if before == Some(&rec) {
            return;
        }
        let _span = tracing::info_span!("store_write", phase = %rec.phase).entered();
        // The write is handed to the store before the call returns (queued, or waiting for
        // company); its acknowledgement is not awaited (the store's writer keeps a failing write
        // and retries it, reporting `StoreWritable`).
        if self.driver.finalizer().is_some() || before.is_some_and(|b| b.same_but_times(&rec)) {
            self.store.put_soon_detached(key.text(), rec);
        } else {
            self.store.put_detached(key.text(), rec);
        }
    }

    /// One more consecutive failure of `key`: it runs again after the queue's backoff.
    fn backoff(&self, key: &ObjectKey) -> Duration {
        self.metrics.queue_retries.inc();
        self.queue.add_rate_limited(key.clone(), Reason::Retry)
    }

    /// A driver operation failed: retry the key with backoff (the driver has counted and logged it).
    pub(super) fn retry_later(&self, key: &ObjectKey, e: &DriverError) {
        let delay = self.backoff(key);
        tracing::debug!(error = %e, retry_in = ?delay, "write to the mode failed; will retry");
    }

    /// Records what a call read, so a change to it queues `key` again. A call whose reads
    /// overflowed the sandbox's record (`overflow` holds every kind it read, or `None` for more
    /// kinds than are tracked) depends on whole kinds instead: no change it may have seen is missed.
    pub(super) fn record_reads(&self, key: &ObjectKey, reads: Vec<Read>, overflow: Option<Option<BTreeSet<String>>>) {
        let mut deps = self.deps.lock().unwrap_or_else(|p| p.into_inner());
        match overflow {
            None => deps.record(key, reads),
            Some(kinds) => {
                tracing::debug!(?kinds, "more distinct reads than are recorded; depends on whole kinds");
                deps.record_overflowed(key, kinds);
            }
        }
    }

    pub(super) fn observe_call(
        &self,
        plugin: &Name,
        op: &'static str,
        elapsed: Duration,
        cpu: Duration,
        err: Option<&PluginError>,
    ) {
        let label = PluginOp { plugin: plugin.clone(), op };
        self.metrics.plugin_call.get_or_create(&label).observe(elapsed.as_secs_f64());
        self.metrics.plugin_call_cpu.get_or_create(&label).inc_by(cpu.as_secs_f64());
        if let Some(e) = err {
            self.metrics
                .plugin_errors
                .get_or_create(&PluginErrorLabel { plugin: plugin.clone(), r#type: e.label() })
                .inc();
        }
    }
}
