//! Building and starting the engine: the store, the plugins, the mode's driver, the startup schedule, the background tasks and the workers.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::journal::Journal;
use super::{Deps, Engine, EngineError};
use crate::capabilities;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::{KeySet, ObjectKey, Phase, Reason, StatusRecord, now_millis};
use crate::plugin::{PluginSet, PluginSettings, Runtime, RuntimeOptions};
use crate::queue::{QueueOptions, WorkQueue};
use crate::store::{RecordForm, Store};

/// How often the host checks whether a burst of work is over (see `Engine::trim_when_idle`).
const IDLE_TRIM_CHECK: Duration = Duration::from_secs(5);

/// Store meta key of the disabled kinds (a JSON array).
pub(super) const DISABLED_KINDS: &str = "disabledKinds";

/// Returns freed heap memory to the system (glibc keeps it otherwise); a no-op elsewhere.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Engine {
    /// Opens the store, loads the plugins, scans the resources, schedules what is not
    /// converged (deletes that happened while down included), and starts the workers and watchers.
    pub async fn start(cfg: Config) -> Result<Arc<Self>, EngineError> {
        let client = crate::driver::mode::connect(&cfg).await?;
        Self::start_with(cfg, client).await
    }

    /// Starts in Kubernetes mode with `client` when given (whatever `cfg.mode` says), else in filesystem mode.
    pub async fn start_with(cfg: Config, client: Option<kube::Client>) -> Result<Arc<Self>, EngineError> {
        for (what, dir) in crate::driver::mode::dirs(&cfg, client.is_some()) {
            std::fs::read_dir(&dir).map_err(|e| EngineError::Dir { what, message: e.to_string(), dir })?;
        }
        let form = match cfg.state_format {
            crate::config::StateFormat::Binary => RecordForm::Binary,
            crate::config::StateFormat::Json => RecordForm::Json,
        };
        let store =
            Arc::new(Store::<StatusRecord>::open_as(&cfg.state, form).map_err(|e| EngineError::Store(e.to_string()))?);
        let conditions = crate::health::Conditions::new();
        store.report_to(&conditions);
        let runtime = Runtime::new(RuntimeOptions {
            cache_dir: Some(cfg.cache_dir.clone()),
            cache_limit: cfg.cache_limit,
            plugin_env: cfg.plugin_env(),
            ..Default::default()
        })?;
        runtime.report_to(&conditions);
        let plugins = PluginSet::new(runtime, &cfg.plugin_dir, cfg.plugins.clone(), PluginSettings::default());
        let mut metrics = Metrics::new();
        capabilities::register_metrics(metrics.registry_mut());
        let metrics = Arc::new(metrics);
        let mode = crate::driver::mode::start(&cfg, client, &store, metrics.clone(), &conditions).await?;
        let (driver, secrets) = (mode.driver, mode.secrets);
        // A kind whose calls are slow (or run into their deadline every time) may not hold every
        // worker while other kinds have work: it gets at most all workers but one.
        let queue = Arc::new(
            WorkQueue::new(QueueOptions {
                initial_backoff: cfg.queue.initial_backoff,
                max_backoff: cfg.queue.max_backoff,
                jitter: 0.1,
            })
            .with_fair_share(|k: &ObjectKey| k.kind().to_string(), cfg.queue.workers.saturating_sub(1)),
        );
        // Each capability unit starts its executor; what it asks to reconcile comes on `requeues`.
        let (requeue, mut requeues) = capabilities::Requeue::channel();
        let host = capabilities::HostContext {
            cfg: cfg.clone(),
            driver: driver.clone(),
            store: store.clone(),
            metrics: metrics.clone(),
            secrets,
            requeue,
        };
        let units = capabilities::start(&host).map_err(EngineError::Unit)?;
        let disabled: BTreeSet<String> =
            store.get_meta(DISABLED_KINDS).and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
        let engine = Arc::new(Self {
            cfg,
            plugins: plugins.clone(),
            driver,
            store,
            queue,
            units,
            metrics,
            conditions,
            deps: Mutex::new(Deps::default()),
            disabled: RwLock::new(disabled),
            running: Mutex::new(KeySet::default()),
            ready: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            workers: Mutex::new(Vec::new()),
            keep: Mutex::new(Vec::new()),
            journal: Journal::default(),
            worlds: Default::default(),
        });

        // Plugins first (in parallel), then the full scan: nothing is reconciled before both.
        // The initial load's events are not needed: the startup schedule covers every object.
        plugins.load_all().await.map_err(|e| EngineError::Dir {
            what: "plugin_dir",
            dir: engine.cfg.plugin_dir.clone(),
            message: e.to_string(),
        })?;
        // Plugins of the registries (issue 17): pulled or read from the cache, then followed.
        let sources = crate::oci::follow(
            plugins.clone(),
            &engine.cfg.plugin_sources,
            &engine.cfg.cache_dir,
            crate::oci::follow::Observers {
                conditions: Some(engine.conditions.clone()),
                metrics: Some(engine.metrics.clone()),
            },
        )
        .await;
        engine.hold(sources);
        for w in
            crate::plugin::settings_without_plugin(engine.cfg.plugins.keys().map(String::as_str), &plugins.statuses())
        {
            tracing::warn!("host config: {w}");
        }
        let mut plugin_events = plugins.subscribe();
        let watch = crate::plugin::watch(plugins.clone()).map_err(|e| EngineError::Watch(e.to_string()))?;
        engine.hold(watch);
        engine.sync_watches();
        engine.sync_worlds();
        let mut started = engine.driver.start().await.map_err(|e| EngineError::Watch(e.to_string()))?;
        for unit in &engine.units.effects {
            unit.mode_started(&mut started);
        }
        if let Some(keep) = started.keep {
            engine.keep.lock().unwrap_or_else(|p| p.into_inner()).push(keep);
        }
        if started.schedule_all {
            engine.schedule_startup(None);
        }
        let mut source_events = started.events;
        let mut leader = engine.driver.leadership();
        engine.metrics.leader.set(i64::from(*leader.borrow_and_update()));
        let e = engine.clone();
        engine.spawn(async move {
            while leader.changed().await.is_ok() {
                let leads = *leader.borrow_and_update();
                e.on_leadership(leads).await;
            }
        });
        let e = engine.clone();
        engine.spawn(async move {
            while let Some(ev) = source_events.recv().await {
                e.on_source_event(ev);
            }
        });
        let e = engine.clone();
        engine.spawn(async move {
            while let Some((owner, reason)) = requeues.recv().await {
                e.enqueue(&owner, reason);
            }
        });
        // Work a unit left unfinished at the last stop goes on (tool calls cut short).
        for owner in engine.units.effects.iter().flat_map(|u| u.startup_owners()) {
            engine.enqueue(&owner, Reason::Startup);
        }
        let e = engine.clone();
        engine.spawn(async move {
            loop {
                match plugin_events.recv().await {
                    Ok(ev) => e.on_plugin_event(ev),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => e.requeue_all(Reason::PluginReloaded),
                    Err(_) => return,
                }
            }
        });
        let e = engine.clone();
        engine.spawn(async move { e.trim_when_idle().await });
        let e = engine.clone();
        engine.spawn(async move { e.run_worlds().await });
        for i in 0..engine.cfg.queue.workers {
            let e = engine.clone();
            let h = tokio::spawn(async move { e.worker(i).await });
            engine.workers.lock().unwrap_or_else(|p| p.into_inner()).push(h);
        }
        engine.ready.store(true, Ordering::Release);
        tracing::info!(
            objects = engine.source().len(),
            plugins = engine.plugins.plugins().len(),
            workers = engine.cfg.queue.workers,
            "steward is ready"
        );
        Ok(engine)
    }

    /// After a burst of work, once the queue is empty, hands the allocator's freed memory back to
    /// the system: a converge of thousands of objects frees far more than the host keeps, and
    /// glibc would otherwise keep it in the process. Checks every few seconds; costs nothing idle.
    async fn trim_when_idle(&self) {
        let mut seen = self.metrics.queue_adds.get();
        let mut tick = tokio::time::interval(IDLE_TRIM_CHECK);
        loop {
            tick.tick().await;
            let adds = self.metrics.queue_adds.get();
            if adds != seen && self.queue.is_empty() && self.queue.processing_len() == 0 {
                seen = adds;
                release_free_memory();
            }
        }
    }

    fn hold(&self, thing: impl std::any::Any + Send) {
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).push(Box::new(thing));
    }

    fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).push(tokio::spawn(f));
    }

    /// Schedules what is not converged: every object (or those of `kind`), and the deletes that happened meanwhile.
    ///
    /// Reads each record and object in place (a million of them at a restart: a copy of each
    /// would double the memory and the time), and asks the plugin about a kind once, not once
    /// per object.
    pub(super) fn schedule_startup(&self, kind: Option<&str>) {
        let now = now_millis();
        let spread_ms = (self.cfg.resync.as_millis() as u64 / 10).clamp(1, 30_000);
        let source = self.source();
        let keys = match kind {
            Some(k) => source.list(k, None).iter().map(|o| o.key()).collect(),
            None => source.keys(),
        };
        // (kind, reconciled at start, resync interval) of the last kind seen: keys come sorted by kind.
        let mut per_kind: Option<(crate::model::Name, bool, Duration)> = None;
        let mut name = String::new();
        for key in &keys {
            let Some(generation) = source.generation(key) else { continue };
            name.clear();
            std::fmt::Write::write_fmt(&mut name, format_args!("{key}")).unwrap_or_default();
            let Some(rec) = self.store.get_with(&name, StartFacts::of) else {
                self.enqueue(key, Reason::Created);
                continue;
            };
            if per_kind.as_ref().is_none_or(|(k, ..)| k != key.kind()) {
                per_kind = Some((key.kind().clone(), self.reconcile_at_start(key.kind()), self.resync_for(key.kind())));
            }
            let Some((_, at_start, resync)) = &per_kind else { continue };
            match rec {
                rec if rec.generation != generation || rec.deleting => self.enqueue(key, Reason::SpecChanged),
                rec if rec.phase == Phase::Failed => {}
                // Objects that may own what a unit starts anew (services) are reconciled at once.
                _ if *at_start => self.enqueue(key, Reason::Startup),
                rec if rec.phase == Phase::Synced && rec.observed_generation == Some(rec.generation) => {
                    // Resync at least every interval since the last success, restart or not;
                    // overdue ones are spread instead of all at once.
                    let due = rec.last_success_time.unwrap_or(0) + resync.as_millis() as u64;
                    let delay = match due.checked_sub(now).filter(|d| *d > 0) {
                        Some(d) => super::decide::on_resync_grid(now, Duration::from_millis(d)),
                        None => Duration::from_millis(fastrand::u64(0..spread_ms)),
                    };
                    self.schedule(key, delay, Reason::Resync);
                }
                _ => self.enqueue(key, Reason::Startup),
            }
        }
        drop(keys);
        // Records whose object is gone: deleted while the host was down.
        let failing: HashSet<String> = source.problems().into_iter().map(|p| p.file).collect();
        let prefix = kind.map(|want| format!("{want}/"));
        let mut deleted = Vec::new();
        self.store.for_each(|k, rec| {
            if prefix.as_deref().is_some_and(|p| !k.starts_with(p)) {
                return;
            }
            // Objects of a file that does not parse right now are not taken for deleted.
            if rec.source.as_ref().is_some_and(|at| failing.contains(at.file.as_str())) {
                return;
            }
            if let Some(key) = ObjectKey::parse(k).filter(|key| source.generation(key).is_none()) {
                deleted.push(key);
            }
        });
        for key in deleted {
            self.enqueue(&key, Reason::Deleted);
        }
    }
}

/// What [`Engine::schedule_startup`] reads of a record, copied out under the store's lock.
struct StartFacts {
    generation: u64,
    deleting: bool,
    phase: Phase,
    observed_generation: Option<u64>,
    last_success_time: Option<u64>,
}

impl StartFacts {
    fn of(rec: &StatusRecord) -> Self {
        Self {
            generation: rec.generation,
            deleting: rec.deleting,
            phase: rec.phase,
            observed_generation: rec.observed_generation,
            last_success_time: rec.last_success_time,
        }
    }
}
