//! What queues a key: source changes, plugin loads, service changes, leadership, readers of a changed object.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;

use super::{Engine, key_of};
use crate::driver::SourceEvent;
use crate::model::{ObjectKey, Reason};
use crate::plugin::PluginEvent;

impl Engine {
    /// Queues `key` now, for `reason` (merged with a pending one as the queue's rule says).
    pub fn enqueue(&self, key: &ObjectKey, reason: Reason) {
        self.queue.add(key.clone(), reason);
        self.metrics.queue_adds.inc();
    }

    /// Queues `key` after `delay`, for `reason` (merged with a pending one as the queue's rule says).
    pub fn schedule(&self, key: &ObjectKey, delay: Duration, reason: Reason) {
        self.queue.add_after(key.clone(), reason, delay);
    }

    pub(super) fn notify_readers(&self, changed: &ObjectKey) {
        self.touch_worlds_reading(changed.kind());
        let readers = self.deps.lock().unwrap_or_else(|p| p.into_inner()).readers_of(changed);
        for r in readers {
            self.enqueue(&r, Reason::DependencyChanged);
        }
    }

    pub(super) fn on_source_event(&self, ev: SourceEvent) {
        match ev {
            SourceEvent::Changed(key) => {
                self.touch_worlds(key.kind());
                let reason = if self.store.get(&key.text()).is_some() { Reason::SpecChanged } else { Reason::Created };
                self.enqueue(&key, reason);
                self.notify_readers(&key);
            }
            SourceEvent::Deleted(key) => {
                self.touch_worlds(key.kind());
                self.enqueue(&key, Reason::Deleted);
                self.notify_readers(&key);
            }
            SourceEvent::FileOk { file } => {
                // Objects a failing file held at start, and that are gone now it parses, are deletes.
                let source = self.source();
                let mut gone = Vec::new();
                self.store.for_each(|k, rec| {
                    if rec.source.as_ref().is_some_and(|at| at.file == file)
                        && let Some(key) = ObjectKey::parse(k).filter(|key| source.generation(key).is_none())
                    {
                        gone.push(key);
                    }
                });
                for key in gone {
                    self.enqueue(&key, Reason::Deleted);
                }
            }
            SourceEvent::KindSynced { kind } => {
                self.touch_worlds(&kind);
                // A (re)list: new and changed objects came as events; what vanished is found here.
                if self.driver.listed(&kind) {
                    self.schedule_startup(Some(&kind));
                } else {
                    let source = self.source();
                    for k in self.store.keys() {
                        if let Some(key) = ObjectKey::parse(&k).filter(|key| *key.kind() == kind)
                            && source.get(&key).is_none()
                        {
                            self.enqueue(&key, Reason::Deleted);
                        }
                    }
                }
            }
            SourceEvent::FileProblem { file } => {
                if let Some(p) = self.source().problems().into_iter().find(|p| p.file == file) {
                    tracing::warn!(problem = %p, "resource file not loaded; its objects keep their last good state");
                }
            }
        }
    }

    pub(super) fn keys_of_kinds(&self, kinds: &[String]) -> Vec<ObjectKey> {
        let mut keys: BTreeSet<ObjectKey> = BTreeSet::new();
        let source = self.source();
        for k in kinds {
            keys.extend(source.list(k, None).into_iter().map(|o| key_of(&o.raw)));
        }
        for k in self.store.keys() {
            if let Some(key) = ObjectKey::parse(&k).filter(|key| kinds.iter().any(|k| *key.kind() == **k)) {
                keys.insert(key);
            }
        }
        keys.into_iter().collect()
    }

    pub(super) fn on_plugin_event(&self, ev: PluginEvent) {
        self.sync_watches();
        self.sync_worlds();
        let kinds = match ev {
            PluginEvent::Loaded { kinds, .. } => kinds,
            PluginEvent::Updated { mut kinds, removed, .. } => {
                kinds.extend(removed);
                kinds
            }
            PluginEvent::Unloaded { kinds, .. } => kinds,
            // Objects waiting for a registry source hear why it runs nothing (kinds of a file: none).
            PluginEvent::Failed { kinds, .. } if !kinds.is_empty() => kinds,
            PluginEvent::Failed { .. } => return,
        };
        for key in self.keys_of_kinds(&kinds) {
            self.enqueue(&key, Reason::PluginReloaded);
        }
    }

    pub(super) fn requeue_all(&self, reason: Reason) {
        for key in self.source().keys() {
            self.enqueue(&key, reason);
        }
    }

    /// The driver watches exactly the enabled kinds of the loaded plugins.
    pub(super) fn sync_watches(&self) {
        let mut kinds = Vec::new();
        for p in self.plugins.plugins() {
            let served = crate::plugin::served_kinds(&p);
            kinds.extend(
                p.info().kinds.iter().filter(|k| served.contains(&k.kind) && !self.is_disabled(&k.kind)).cloned(),
            );
        }
        self.driver.set_kinds(&kinds);
        let plugins = self.plugins.plugins();
        for unit in &self.units.effects {
            unit.plugins_changed(&plugins);
        }
    }

    /// Leadership changed: taking it schedules every object; losing it stops what the units run
    /// for the objects (the new leader runs it: services, tool calls) and leaves the queue to wait.
    pub(super) async fn on_leadership(&self, leads: bool) {
        self.metrics.leader.set(i64::from(leads));
        if leads {
            for key in self.source().keys() {
                self.enqueue(&key, Reason::LeaderElected);
            }
        } else {
            // Reconciles already running finish first (they skip their writes and services now),
            // so none restarts a service after this stops them.
            let deadline = Instant::now() + Duration::from_secs(60);
            while self.in_flight.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for unit in &self.units.effects {
                unit.lost_lead();
            }
        }
    }

    /// Whether objects of `kind` are reconciled at start whatever their state (they may own
    /// something a unit starts again, such as services).
    pub(super) fn reconcile_at_start(&self, kind: &str) -> bool {
        self.plugins.resolve(kind).is_ok_and(|p| self.units.reconcile_at_start(p.settings()))
    }

    pub(super) fn resync_for(&self, kind: &str) -> Duration {
        self.plugins
            .resolve(kind)
            .ok()
            .and_then(|p| p.info().kinds.iter().find(|k| k.kind == kind).map(|k| k.resync_seconds))
            .filter(|s| *s > 0)
            .map_or(self.cfg.resync, |s| Duration::from_secs(s.into()))
    }
}
