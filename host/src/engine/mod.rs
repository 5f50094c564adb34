//! The reconcile engine: workers take keys from the queue, call the kind's plugin, store the outcome, and schedule the next run.

mod deps;
mod reads;
mod view;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use steward_sdk::RawObject;
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use deps::Deps;
pub use reads::EngineReads;
pub use view::{KindOverview, Overview, ResourceView};

use crate::config::Config;
use crate::kubernetes::cluster::{self, Cluster};
use crate::metrics::{KindLabel, KindResult, Metrics, PluginErrorLabel, PluginOp};
use crate::model::{HistoryEntry, ObjectKey, Phase, Reason, StatusRecord, now_millis};
use crate::plugin::{PluginError, PluginEvent, PluginSet, PluginSettings, ReconcileRequest, Runtime, RuntimeOptions};
use crate::queue::{QueueOptions, WorkQueue};
use crate::sanitize::sanitize;
use crate::services::{ServiceManager, ServiceOptions};
use crate::source::fs::{FsOptions, FsSource};
use crate::source::{Source, SourceEvent, SourceObject};
use crate::store::Store;

/// How often the host checks whether a burst of work is over (see `Engine::trim_when_idle`).
const IDLE_TRIM_CHECK: Duration = Duration::from_secs(5);

/// Returns freed heap memory to the system (glibc keeps it otherwise); a no-op elsewhere.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Store meta key of the disabled kinds (a JSON array).
const DISABLED_KINDS: &str = "disabledKinds";

/// Why the engine could not start. Each message names the path or setting.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The state store could not be opened.
    #[error("cannot open the state store: {0}")]
    Store(String),
    /// The plugin runtime could not start.
    #[error(transparent)]
    Runtime(#[from] crate::plugin::RuntimeError),
    /// A directory is missing or unreadable.
    #[error("{what} {} is not a readable directory: {message}", .dir.display())]
    Dir {
        /// Which setting.
        what: &'static str,
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The source could not be watched.
    #[error("cannot watch the resources directory: {0}")]
    Watch(String),
    /// Kubernetes mode could not start.
    #[error("mode: kubernetes (from {}): {source}", .file.display())]
    Cluster {
        /// The config file.
        file: PathBuf,
        /// Why.
        source: cluster::ClusterError,
    },
    /// The services driver could not start.
    #[error("cannot start the services driver: {0}")]
    Services(String),
}

/// Why an API request about one object or kind was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// No such object.
    #[error("no object {0}")]
    NotFound(ObjectKey),
    /// No plugin describes the kind.
    #[error("no plugin serves kind {0}")]
    UnknownKind(String),
}

/// The running host: plugins, source, store, queue and workers.
pub struct Engine {
    cfg: Config,
    plugins: Arc<PluginSet>,
    source: Arc<dyn Source>,
    cluster: Option<Arc<Cluster>>,
    store: Arc<Store<StatusRecord>>,
    queue: Arc<WorkQueue<ObjectKey>>,
    services: Arc<ServiceManager>,
    metrics: Arc<Metrics>,
    deps: Mutex<Deps>,
    disabled: RwLock<BTreeSet<String>>,
    reasons: Mutex<HashMap<ObjectKey, Reason>>,
    running: Mutex<HashSet<ObjectKey>>,
    ready: AtomicBool,
    /// Reconciles and finalizes running now (a lost lease waits for them).
    in_flight: std::sync::atomic::AtomicUsize,
    /// Kubernetes mode: objects whose last status did not reach the cluster yet.
    unwritten: Mutex<HashSet<ObjectKey>>,
    /// Kubernetes mode: kinds whose watch has listed at least once.
    synced_once: Mutex<HashSet<String>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    keep: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl Engine {
    /// Opens the store, loads the plugins, scans the resources, schedules what is not
    /// converged (deletes that happened while down included), and starts the workers and watchers.
    pub async fn start(cfg: Config) -> Result<Arc<Self>, EngineError> {
        let kube = match cfg.mode {
            crate::config::Mode::Filesystem => false,
            crate::config::Mode::Kubernetes => true,
            crate::config::Mode::Auto => {
                let found = cluster::config_found();
                tracing::info!(
                    "mode auto: {}",
                    if found {
                        "a cluster config is at hand: Kubernetes mode"
                    } else {
                        "no cluster config: filesystem mode"
                    }
                );
                found
            }
        };
        if kube {
            let client =
                cluster::connect().await.map_err(|source| EngineError::Cluster { file: cfg.file.clone(), source })?;
            Self::start_with(cfg, Some(client)).await
        } else {
            Self::start_with(cfg, None).await
        }
    }

    /// Starts in Kubernetes mode with `client` when given (whatever `cfg.mode` says), else in filesystem mode.
    pub async fn start_with(cfg: Config, client: Option<kube::Client>) -> Result<Arc<Self>, EngineError> {
        let dirs: &[(&'static str, &PathBuf)] = if client.is_some() {
            &[("plugin_dir", &cfg.plugin_dir)]
        } else {
            &[("resources", &cfg.resources), ("plugin_dir", &cfg.plugin_dir)]
        };
        for (what, dir) in dirs.iter().copied() {
            std::fs::read_dir(dir).map_err(|e| EngineError::Dir { what, dir: dir.clone(), message: e.to_string() })?;
        }
        let store = Arc::new(Store::<StatusRecord>::open(&cfg.state).map_err(|e| EngineError::Store(e.to_string()))?);
        let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cfg.cache_dir.clone()), ..Default::default() })?;
        let plugins = PluginSet::new(runtime, &cfg.plugin_dir, cfg.plugins.clone(), PluginSettings::default());
        let known = store
            .all()
            .into_iter()
            .filter_map(|(k, r)| ObjectKey::parse(&k).map(|key| (key, (r.generation, r.spec_hash))))
            .collect();
        let metrics = Arc::new(Metrics::new());
        let (source, fs, cluster, cluster_events): (Arc<dyn Source>, _, _, _) = match client {
            None => {
                let fs = FsSource::new(
                    FsOptions {
                        dir: cfg.resources.clone(),
                        debounce: cfg.queue.debounce,
                        debounce_max: cfg.queue.debounce_max,
                        scan_interval: cfg.resync.min(Duration::from_secs(60)),
                    },
                    known,
                );
                (fs.clone(), Some(fs), None, None)
            }
            Some(client) => {
                let (c, rx) = Cluster::start(client, &cfg, metrics.clone())
                    .await
                    .map_err(|source| EngineError::Cluster { file: cfg.file.clone(), source })?;
                (c.source.clone(), None, Some(Arc::new(c)), Some(rx))
            }
        };
        // A kind whose calls are slow (or run into their deadline every time) may not hold every
        // worker while other kinds have work: it gets at most all workers but one.
        let queue = Arc::new(
            WorkQueue::new(QueueOptions {
                initial_backoff: cfg.queue.initial_backoff,
                max_backoff: cfg.queue.max_backoff,
                jitter: 0.1,
            })
            .with_fair_share(|k: &ObjectKey| k.kind.clone(), cfg.queue.workers.saturating_sub(1)),
        );
        // Services of an earlier run that survived it (they should not) are reaped here.
        let state_dir = cfg.state.parent().map_or_else(|| PathBuf::from("."), PathBuf::from);
        let (services, mut service_events) = ServiceManager::start(ServiceOptions::new(state_dir.join("services")))
            .map_err(|e| EngineError::Services(e.to_string()))?;
        let disabled: BTreeSet<String> =
            store.get_meta(DISABLED_KINDS).and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
        let engine = Arc::new(Self {
            cfg,
            plugins: plugins.clone(),
            source: source.clone(),
            cluster: cluster.clone(),
            store,
            queue,
            services,
            metrics,
            deps: Mutex::new(Deps::default()),
            disabled: RwLock::new(disabled),
            reasons: Mutex::new(HashMap::new()),
            running: Mutex::new(HashSet::new()),
            ready: AtomicBool::new(false),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            unwritten: Mutex::new(HashSet::new()),
            synced_once: Mutex::new(HashSet::new()),
            tasks: Mutex::new(Vec::new()),
            workers: Mutex::new(Vec::new()),
            keep: Mutex::new(Vec::new()),
        });

        // Plugins first (in parallel), then the full scan: nothing is reconciled before both.
        // The initial load's events are not needed: the startup schedule covers every object.
        plugins.load_all().await.map_err(|e| EngineError::Dir {
            what: "plugin_dir",
            dir: engine.cfg.plugin_dir.clone(),
            message: e.to_string(),
        })?;
        let mut plugin_events = plugins.subscribe();
        let watch = crate::plugin::watch(plugins.clone()).map_err(|e| EngineError::Watch(e.to_string()))?;
        engine.hold(watch);
        let mut source_events = match (&fs, cluster_events) {
            // Each kind is scheduled once its watch has listed (`SourceEvent::KindSynced`).
            (_, Some(events)) => {
                engine.sync_watches();
                events
            }
            (fs, None) => {
                let fs = fs.as_ref().expect("filesystem mode has a filesystem source");
                fs.scan().await;
                engine.schedule_startup(None);
                let (events, handle) = fs.watch().map_err(|e| EngineError::Watch(e.to_string()))?;
                engine.hold(handle);
                events
            }
        };
        if let Some(c) = &cluster {
            engine.metrics.leader.set(i64::from(c.leads()));
            let e = engine.clone();
            let mut leader = c.leader.clone();
            engine.spawn(async move {
                while leader.changed().await.is_ok() {
                    let leads = *leader.borrow_and_update();
                    e.on_leadership(leads).await;
                }
            });
        }

        let e = engine.clone();
        engine.spawn(async move {
            while let Some(ev) = source_events.recv().await {
                e.on_source_event(ev);
            }
        });
        let e = engine.clone();
        engine.spawn(async move {
            while let Some(owner) = service_events.recv().await {
                e.enqueue(&owner, Reason::ServiceChanged);
            }
        });
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
        for i in 0..engine.cfg.queue.workers {
            let e = engine.clone();
            let h = tokio::spawn(async move { e.worker(i).await });
            engine.workers.lock().unwrap_or_else(|p| p.into_inner()).push(h);
        }
        engine.ready.store(true, Ordering::Release);
        tracing::info!(
            objects = engine.source.len(),
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

    /// The config it runs with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The plugins.
    pub fn plugins(&self) -> &Arc<PluginSet> {
        &self.plugins
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// True once the first full scan and the plugin load are done (Kubernetes mode: and every
    /// watched kind has listed, and this replica leads).
    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// Ready, or why not, in words for `/readyz`.
    pub fn readiness(&self) -> Result<(), String> {
        if !self.ready.load(Ordering::Acquire) {
            return Err("plugins or the first full scan are still loading".into());
        }
        let Some(c) = &self.cluster else { return Ok(()) };
        let unsynced: Vec<String> = self
            .plugins
            .plugins()
            .iter()
            .flat_map(|p| crate::plugin::served_kinds(p))
            .filter(|k| !self.is_disabled(k) && !c.source.is_synced(k))
            .collect();
        if !unsynced.is_empty() {
            return Err(format!("the caches of {} have not listed yet", unsynced.join(", ")));
        }
        if !c.leads() {
            return Err("standing by: another replica holds the lease".into());
        }
        Ok(())
    }

    /// The object as the source's cache holds it now (the files, or the cluster's watch).
    pub fn cached(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.source.get(key)
    }

    /// The running mode: `kubernetes` or `filesystem`.
    pub fn mode(&self) -> &'static str {
        if self.cluster.is_some() { "kubernetes" } else { "filesystem" }
    }

    /// Kubernetes mode: watches exactly the enabled kinds of the loaded plugins.
    fn sync_watches(&self) {
        let Some(c) = &self.cluster else { return };
        let mut kinds = Vec::new();
        for p in self.plugins.plugins() {
            let served = crate::plugin::served_kinds(&p);
            kinds.extend(
                p.info().kinds.iter().filter(|k| served.contains(&k.kind) && !self.is_disabled(&k.kind)).cloned(),
            );
        }
        c.source.set_kinds(&kinds);
        // A kind watched again lists again, and is scheduled as at start.
        self.synced_once.lock().unwrap_or_else(|p| p.into_inner()).retain(|k| kinds.iter().any(|i| &i.kind == k));
    }

    /// Leadership changed: taking it schedules every object; losing it stops the owned services
    /// (the new leader runs them) and leaves the queue to wait.
    async fn on_leadership(&self, leads: bool) {
        self.metrics.leader.set(i64::from(leads));
        if leads {
            for key in self.source.keys() {
                self.enqueue(&key, Reason::LeaderElected);
            }
        } else {
            // Reconciles already running finish first (they skip their writes and services now),
            // so none restarts a service after this stops them.
            let deadline = Instant::now() + Duration::from_secs(60);
            while self.in_flight.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for owner in self.services.owners() {
                self.services.remove_owner(&owner);
            }
        }
    }

    /// Whether this replica may reconcile now: always in filesystem mode or with leader election
    /// off; in Kubernetes mode while it holds the lease.
    pub fn is_leader(&self) -> bool {
        self.cluster.as_ref().is_none_or(|c| c.leads())
    }

    /// Keys ready for a worker.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Keys ready, running, or waiting for a retry or resync deadline that is already due.
    pub fn busy(&self) -> usize {
        self.queue.len() + self.queue.processing_len()
    }

    /// Schedules what is not converged: every object (or those of `kind`), and the deletes that happened meanwhile.
    fn schedule_startup(&self, kind: Option<&str>) {
        let now = now_millis();
        let mut seen = HashSet::new();
        let spread_ms = (self.cfg.resync.as_millis() as u64 / 10).clamp(1, 30_000);
        let keys = match kind {
            Some(k) => self.source.list(k, None).iter().map(|o| o.key()).collect(),
            None => self.source.keys(),
        };
        for key in keys {
            seen.insert(key.to_string());
            let Some(obj) = self.source.get(&key) else { continue };
            match self.store.get(&key.to_string()) {
                None => self.enqueue(&key, Reason::Created),
                Some(rec) if rec.generation != obj.raw.generation || rec.deleting => {
                    self.enqueue(&key, Reason::SpecChanged)
                }
                Some(rec) if rec.phase == Phase::Failed => {}
                // Objects that may own services are reconciled at once, so their services start anew.
                Some(_) if self.owns_services(&key.kind) => self.enqueue(&key, Reason::Startup),
                Some(rec) if rec.phase == Phase::Synced && rec.observed_generation == Some(rec.generation) => {
                    // Resync at least every interval since the last success, restart or not;
                    // overdue ones are spread instead of all at once.
                    let due = rec.last_success_time.unwrap_or(0) + self.resync_for(&key.kind).as_millis() as u64;
                    let delay = if due > now { due - now } else { fastrand::u64(0..spread_ms) };
                    self.schedule(&key, Duration::from_millis(delay), Reason::Resync);
                }
                Some(_) => self.enqueue(&key, Reason::Startup),
            }
        }
        let failing: HashSet<String> = self.source.problems().into_iter().map(|p| p.file).collect();
        for (k, rec) in self.store.all() {
            if seen.contains(&k) || kind.is_some_and(|want| !k.starts_with(&format!("{want}/"))) {
                continue;
            }
            // Objects of a file that does not parse right now are not taken for deleted.
            if rec.source.as_deref().and_then(|s| s.rsplit_once(':')).is_some_and(|(f, _)| failing.contains(f)) {
                continue;
            }
            if let Some(key) = ObjectKey::parse(&k) {
                self.enqueue(&key, Reason::Deleted);
            }
        }
    }

    /// Queues `key` now, for `reason`.
    pub fn enqueue(&self, key: &ObjectKey, reason: Reason) {
        self.reasons.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), reason);
        self.queue.add(key.clone());
        self.metrics.queue_adds.inc();
    }

    /// Queues `key` after `delay`, for `reason` (an earlier pending reason is kept).
    pub fn schedule(&self, key: &ObjectKey, delay: Duration, reason: Reason) {
        self.reasons.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_insert(reason);
        self.queue.add_after(key.clone(), delay);
    }

    fn notify_readers(&self, changed: &ObjectKey) {
        let readers = self.deps.lock().unwrap_or_else(|p| p.into_inner()).readers_of(changed);
        for r in readers {
            self.enqueue(&r, Reason::DependencyChanged);
        }
    }

    fn on_source_event(&self, ev: SourceEvent) {
        match ev {
            SourceEvent::Changed(key) => {
                let reason =
                    if self.store.get(&key.to_string()).is_some() { Reason::SpecChanged } else { Reason::Created };
                self.enqueue(&key, reason);
                self.notify_readers(&key);
            }
            SourceEvent::Deleted(key) => {
                self.enqueue(&key, Reason::Deleted);
                self.notify_readers(&key);
            }
            SourceEvent::FileOk { file } => {
                // Objects a failing file held at start, and that are gone now it parses, are deletes.
                for (k, rec) in self.store.all() {
                    let from_file =
                        rec.source.as_deref().and_then(|s| s.rsplit_once(':')).is_some_and(|(f, _)| f == file);
                    if let Some(key) = ObjectKey::parse(&k).filter(|key| from_file && self.source.get(key).is_none()) {
                        self.enqueue(&key, Reason::Deleted);
                    }
                }
            }
            SourceEvent::KindSynced { kind } => {
                // A (re)list: new and changed objects came as events; what vanished is found here.
                if self.synced_once.lock().unwrap_or_else(|p| p.into_inner()).insert(kind.clone()) {
                    self.schedule_startup(Some(&kind));
                } else {
                    for k in self.store.keys() {
                        if let Some(key) = ObjectKey::parse(&k).filter(|key| key.kind == kind)
                            && self.source.get(&key).is_none()
                        {
                            self.enqueue(&key, Reason::Deleted);
                        }
                    }
                }
            }
            SourceEvent::FileProblem { file } => {
                if let Some(p) = self.source.problems().into_iter().find(|p| p.file == file) {
                    tracing::warn!(problem = %p, "resource file not loaded; its objects keep their last good state");
                }
            }
        }
    }

    fn keys_of_kinds(&self, kinds: &[String]) -> Vec<ObjectKey> {
        let mut keys: BTreeSet<ObjectKey> = BTreeSet::new();
        for k in kinds {
            keys.extend(self.source.list(k, None).into_iter().map(|o| key_of(&o.raw)));
        }
        for k in self.store.keys() {
            if let Some(key) = ObjectKey::parse(&k).filter(|key| kinds.contains(&key.kind)) {
                keys.insert(key);
            }
        }
        keys.into_iter().collect()
    }

    fn on_plugin_event(&self, ev: PluginEvent) {
        self.sync_watches();
        let kinds = match ev {
            PluginEvent::Loaded { kinds, .. } => kinds,
            PluginEvent::Updated { mut kinds, removed, .. } => {
                kinds.extend(removed);
                kinds
            }
            PluginEvent::Unloaded { kinds, .. } => kinds,
            PluginEvent::Failed { .. } => return,
        };
        for key in self.keys_of_kinds(&kinds) {
            self.enqueue(&key, Reason::PluginReloaded);
        }
    }

    fn requeue_all(&self, reason: Reason) {
        for key in self.source.keys() {
            self.enqueue(&key, reason);
        }
    }

    fn owns_services(&self, kind: &str) -> bool {
        self.plugins.resolve(kind).is_ok_and(|p| p.settings().grants("services"))
    }

    /// Makes a relative command with a `/` (for example `./bin/server`) relative to the config file's directory.
    fn resolve_commands(&self, mut services: Vec<steward_sdk::ServiceSpec>) -> Vec<steward_sdk::ServiceSpec> {
        let base = self.cfg.file.parent().map(PathBuf::from).unwrap_or_default();
        for s in &mut services {
            if let Some(cmd) = &s.command
                && cmd.contains('/')
                && !cmd.starts_with('/')
            {
                s.command = Some(base.join(cmd).display().to_string());
            }
        }
        services
    }

    fn resync_for(&self, kind: &str) -> Duration {
        self.plugins
            .resolve(kind)
            .ok()
            .and_then(|p| p.info().kinds.iter().find(|k| k.kind == kind).map(|k| k.resync_seconds))
            .filter(|s| *s > 0)
            .map_or(self.cfg.resync, |s| Duration::from_secs(s.into()))
    }

    async fn worker(self: Arc<Self>, _id: usize) {
        loop {
            // A standby replica (Kubernetes mode) takes no work; its queue waits for leadership.
            if let Some(c) = &self.cluster {
                let mut leader = c.leader.clone();
                if leader.wait_for(|l| *l).await.is_err() {
                    return;
                }
            }
            let Some((key, waited)) = self.queue.get().await else { return };
            if !self.is_leader() {
                self.queue.done(&key);
                self.queue.add(key);
                continue;
            }
            self.metrics.queue_latency.observe(waited.as_secs_f64());
            self.metrics.queue_depth.set(self.queue.len() as i64);
            let reason = self.reasons.lock().unwrap_or_else(|p| p.into_inner()).remove(&key).unwrap_or(Reason::Resync);
            let span = tracing::info_span!("reconcile", kind = %key.kind, namespace = %key.namespace, name = %key.name, %reason);
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            self.process(&key, reason).instrument(span).await;
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.queue.done(&key);
        }
    }

    async fn process(&self, key: &ObjectKey, reason: Reason) {
        if self.is_disabled(&key.kind) {
            if self.cluster.is_some() {
                self.unserved(key, true).await;
            }
            return;
        }
        let skey = key.to_string();
        if let Some(c) = &self.cluster {
            if !c.source.is_watched(&key.kind) {
                return self.unserved(key, false).await;
            }
            if !c.source.is_synced(&key.kind) {
                // Not listed yet: a missing object is not taken for deleted; `KindSynced` schedules it.
                return;
            }
        }
        match self.source.get(key) {
            Some(obj) if obj.raw.deleting => {
                let ours = self.cluster.as_ref().and_then(|c| c.source.object(key)).is_some_and(|o| {
                    o.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == crate::kubernetes::FINALIZER))
                });
                match self.store.get(&skey) {
                    Some(rec) => self.finalize(key, rec, Some(obj), reason).await,
                    None if ours => self.finalize(key, StatusRecord::default(), Some(obj), reason).await,
                    // Never reconciled here and not held by the host's finalizer: nothing to finalize.
                    None => {}
                }
            }
            Some(obj) => self.reconcile(key, obj, reason).await,
            None => match self.store.get(&skey) {
                Some(rec) => {
                    if self.cluster.is_some() && !self.gone_from_cluster(key).await {
                        return;
                    }
                    self.finalize(key, rec, None, reason).await
                }
                None => {
                    self.deps.lock().unwrap_or_else(|p| p.into_inner()).forget(key);
                    self.queue.forget(key);
                }
            },
        }
    }

    async fn reconcile(&self, key: &ObjectKey, obj: SourceObject, reason: Reason) {
        let skey = key.to_string();
        let before = self.store.get(&skey);
        let mut rec = before.clone().unwrap_or_default();
        let new_generation = rec.generation != obj.raw.generation || rec.deleting;
        rec.generation = obj.raw.generation;
        rec.spec_hash = obj.spec_hash;
        rec.source = Some(format!("{}:{}", obj.file, obj.line));
        rec.api_version = obj.raw.api_version.clone();
        rec.spec = Some(obj.raw.spec.clone());
        rec.deleting = false;
        let waits_for_change = matches!(
            reason,
            Reason::Resync
                | Reason::Retry
                | Reason::Requeue
                | Reason::DependencyChanged
                | Reason::Startup
                | Reason::ServiceChanged
        );
        if rec.phase == Phase::Failed && !new_generation && waits_for_change {
            // A Failed object is not run again, but a status that did not reach the cluster is written.
            if self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).contains(key) {
                self.write_cluster_status(key, &rec, None).await;
            }
            return;
        }
        if reason == Reason::ManualTrigger || new_generation {
            rec.retry_count = 0;
            self.queue.forget(key);
        }
        let plugin = match self.plugins.resolve(&key.kind) {
            Ok(p) => p,
            Err(e) => {
                rec.phase = Phase::Pending;
                rec.last_error = Some(e.to_string());
                rec.next_attempt_time = None;
                self.persist_and_write(key, rec, before.as_ref()).await;
                return;
            }
        };
        // Kubernetes mode: the finalizer goes on before the first reconcile, so a delete waits for `finalize`.
        if let Some(c) = &self.cluster
            && let Err(e) = c.writer.ensure_finalizer(key).await
        {
            self.cluster_write_failed(key, &e);
            return;
        }
        let mut raw = obj.raw;
        raw.status = rec.status.as_ref().map(|s| s.to_string()).or(raw.status);
        let req = ReconcileRequest { resource: raw, services: self.services.observed(key) };
        let started = now_millis();
        let clock = Instant::now();
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone());
        let reads = Arc::new(EngineReads::new(self.source.clone(), self.store.clone()));
        let report = plugin.reconcile(&req, reads).await;
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.observe_call(plugin.name(), "reconcile", report.elapsed, report.cpu, report.result.as_ref().err());
        self.deps.lock().unwrap_or_else(|p| p.into_inner()).record(key, report.reads);
        rec.plugin = Some(plugin.name().to_string());
        rec.plugin_version = Some(plugin.info().version.clone());
        rec.last_reconcile_time = Some(started);
        let outcome = match report.result {
            Ok(out) => {
                rec.phase = Phase::Synced;
                rec.observed_generation = Some(rec.generation);
                rec.last_success_time = Some(now_millis());
                rec.retry_count = 0;
                rec.last_error = None;
                rec.status = serde_json::from_str(&out.status).ok();
                rec.conditions = out.conditions;
                // Events are for people: the host log, and Kubernetes Events in Kubernetes mode.
                for ev in &out.events {
                    let warning = matches!(ev.type_, steward_sdk::EventType::Warning);
                    if warning {
                        tracing::warn!(reason = %ev.reason, "event: {}", ev.message);
                    } else {
                        tracing::info!(reason = %ev.reason, "event: {}", ev.message);
                    }
                    if let Some(c) = &self.cluster {
                        c.events.publish(key, warning, &ev.reason, "Reconcile", ev.message.clone());
                    }
                }
                // A replica that lost the lease meanwhile starts nothing: the new leader runs the services.
                if self.is_leader() {
                    self.services.ensure(key, self.resolve_commands(out.services));
                }
                if self.cluster.is_none() {
                    // Kubernetes mode forgets the failures once the status is written.
                    self.queue.forget(key);
                }
                let (delay, why) = match out.requeue_after_ms {
                    Some(ms) => (Duration::from_millis(ms).min(self.resync_for(&key.kind)), Reason::Requeue),
                    None => (self.resync_for(&key.kind), Reason::Resync),
                };
                rec.next_attempt_time = Some(now_millis() + delay.as_millis() as u64);
                self.schedule(key, delay, why);
                "Synced".to_string()
            }
            Err(e) => self.failed(key, &mut rec, &e),
        };
        let result = match rec.phase {
            Phase::Synced => "success",
            Phase::Failed => "failed",
            _ => "error",
        };
        self.metrics.reconcile_total.get_or_create(&KindResult { kind: key.kind.clone(), result: result.into() }).inc();
        let elapsed = clock.elapsed();
        self.metrics.reconcile_time.get_or_create(&KindLabel { kind: key.kind.clone() }).observe(elapsed.as_secs_f64());
        rec.push_history(HistoryEntry { time: started, reason, outcome, duration_ms: elapsed.as_millis() as u64 });
        let changed = before.as_ref().is_none_or(|b| b.status != rec.status || b.conditions != rec.conditions);
        self.persist_and_write(key, rec, before.as_ref()).await;
        if changed {
            self.notify_readers(key);
        }
    }

    /// Records a failed call: retry with backoff, or Failed. Returns the history outcome.
    fn failed(&self, key: &ObjectKey, rec: &mut StatusRecord, e: &PluginError) -> String {
        self.metrics.reconcile_errors.get_or_create(&KindLabel { kind: key.kind.clone() }).inc();
        rec.last_error = Some(sanitize(&e.to_string()));
        let permanent = matches!(e, PluginError::Fatal(_) | PluginError::Invalid(_));
        rec.retry_count = rec.retry_count.saturating_add(1);
        if permanent || rec.retry_count > self.cfg.queue.max_retries {
            rec.phase = Phase::Failed;
            rec.next_attempt_time = None;
            self.queue.forget(key);
            tracing::warn!(error = %e, retries = rec.retry_count, "reconcile failed; waiting for a spec change or a manual trigger");
            format!("Failed: {}", e.label())
        } else {
            rec.phase = Phase::Error;
            let delay = self.queue.add_rate_limited(key.clone());
            self.reasons.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_insert(Reason::Retry);
            self.metrics.queue_retries.inc();
            rec.next_attempt_time = Some(now_millis() + delay.as_millis() as u64);
            tracing::info!(error = %e, retry_in = ?delay, "reconcile error; will retry");
            format!("Error: {}", e.label())
        }
    }

    /// Runs the plugin's `finalize` for an object being deleted (`obj`, Kubernetes mode) or gone
    /// from its source (`None`); on success stops its services, lets the object go (removes the
    /// finalizer) and forgets it.
    async fn finalize(&self, key: &ObjectKey, rec: StatusRecord, obj: Option<SourceObject>, reason: Reason) {
        let skey = key.to_string();
        let before = rec.clone();
        let mut rec = rec;
        rec.deleting = true;
        if rec.phase == Phase::Failed
            && matches!(reason, Reason::Resync | Reason::Retry | Reason::Requeue | Reason::DependencyChanged)
        {
            return;
        }
        let plugin = match self.plugins.resolve(&key.kind) {
            Ok(p) => p,
            Err(e) => {
                rec.phase = Phase::Pending;
                rec.last_error = Some(if self.cluster.is_some() {
                    format!(
                        "cannot finalize: {e}; the object keeps its finalizer {} until the plugin returns or an operator removes it",
                        crate::kubernetes::FINALIZER
                    )
                } else {
                    format!("cannot finalize: {e}")
                });
                self.persist_and_write(key, rec, Some(&before)).await;
                return;
            }
        };
        let raw = match obj {
            Some(o) => RawObject {
                status: rec.status.as_ref().map(|s| s.to_string()).or(o.raw.status),
                deleting: true,
                ..o.raw
            },
            None => RawObject {
                api_version: rec.api_version.clone(),
                kind: key.kind.clone(),
                name: key.name.clone(),
                namespace: key.namespace.clone(),
                generation: rec.generation,
                spec: rec.spec.clone().unwrap_or_else(|| "{}".into()),
                status: rec.status.as_ref().map(|s| s.to_string()),
                deleting: true,
                ..RawObject::default()
            },
        };
        let started = now_millis();
        let reads = Arc::new(EngineReads::new(self.source.clone(), self.store.clone()));
        let req = ReconcileRequest { resource: raw, services: self.services.observed(key) };
        let report = plugin.finalize(&req, reads).await;
        self.observe_call(plugin.name(), "finalize", report.elapsed, report.cpu, report.result.as_ref().err());
        match report.result {
            Ok(_) => {
                // Whatever the plugin asked for, an object that is gone owns nothing.
                self.services.remove_owner(key);
                if let Some(c) = &self.cluster {
                    if !self.is_leader() {
                        return;
                    }
                    if let Err(e) = c.writer.remove_finalizer(key).await {
                        self.cluster_write_failed(key, &e);
                        return;
                    }
                    c.events.publish(key, false, "Finalized", "Finalize", "finalized; the finalizer is removed".into());
                }
                if let Err(e) = self.store.remove(&skey).await {
                    tracing::error!(error = %e, "cannot forget a finalized object; it will be finalized again");
                    return;
                }
                self.deps.lock().unwrap_or_else(|p| p.into_inner()).forget(key);
                // Not `remove`: if the object came back while it was finalized, that change was
                // queued meanwhile and must still run.
                self.queue.unschedule(key);
                self.metrics
                    .reconcile_total
                    .get_or_create(&KindResult { kind: key.kind.clone(), result: "success".into() })
                    .inc();
                self.metrics.finalizations.get_or_create(&KindLabel { kind: key.kind.clone() }).inc();
                tracing::info!("finalized and forgotten");
                self.notify_readers(key);
            }
            Err(e) => {
                rec.last_reconcile_time = Some(started);
                let outcome = self.failed(key, &mut rec, &e);
                rec.push_history(HistoryEntry {
                    time: started,
                    reason,
                    outcome,
                    duration_ms: report.elapsed.as_millis() as u64,
                });
                self.persist_and_write(key, rec, Some(&before)).await;
            }
        }
    }

    fn observe_call(&self, plugin: &str, op: &str, elapsed: Duration, cpu: Duration, err: Option<&PluginError>) {
        let label = PluginOp { plugin: plugin.into(), op: op.into() };
        self.metrics.plugin_call.get_or_create(&label).observe(elapsed.as_secs_f64());
        self.metrics.plugin_call_cpu.get_or_create(&label).inc_by(cpu.as_secs_f64());
        if let Some(e) = err {
            self.metrics
                .plugin_errors
                .get_or_create(&PluginErrorLabel { plugin: plugin.into(), r#type: e.label().into() })
                .inc();
        }
    }

    /// Stores `rec`, then (Kubernetes mode) writes it to the cluster: the host's own view is never behind the cluster's.
    async fn persist_and_write(&self, key: &ObjectKey, rec: StatusRecord, before: Option<&StatusRecord>) {
        if self.cluster.is_none() {
            return self.persist(key, rec, before).await;
        }
        self.persist(key, rec.clone(), before).await;
        self.write_cluster_status(key, &rec, before).await;
    }

    /// Kubernetes mode: writes `rec` to the object's status subresource (skipped when nothing would
    /// change, or when this replica no longer leads), and records an Event when the phase changed.
    /// A failed write is retried with backoff.
    async fn write_cluster_status(&self, key: &ObjectKey, rec: &StatusRecord, before: Option<&StatusRecord>) {
        let Some(c) = &self.cluster else { return };
        if !self.is_leader() {
            return;
        }
        match c.writer.write_status(key, rec).await {
            Ok(_) => {
                self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
                if rec.phase == Phase::Synced {
                    self.queue.forget(key);
                }
                let was = before.map(|b| b.phase);
                if was != Some(rec.phase) {
                    let warning = matches!(rec.phase, Phase::Error | Phase::Failed | Phase::Pending);
                    let note = match &rec.last_error {
                        Some(e) if warning => format!("{}: {e}", rec.phase),
                        _ => format!("phase {}", rec.phase),
                    };
                    c.events.publish(key, warning, &rec.phase.to_string(), "Reconcile", note);
                }
            }
            Err(e) => {
                self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone());
                self.cluster_write_failed(key, &e)
            }
        }
    }

    /// A write to the cluster failed: retry the key with backoff (the writer has counted and logged it).
    fn cluster_write_failed(&self, key: &ObjectKey, _e: &crate::kubernetes::writer::WriteError) {
        let delay = self.queue.add_rate_limited(key.clone());
        self.reasons.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_insert(Reason::Retry);
        self.metrics.queue_retries.inc();
        tracing::debug!(retry_in = ?delay, "cluster write failed; will retry");
    }

    /// Kubernetes mode: whether an object missing from the cache is really gone from the cluster.
    /// One that still exists left this replica's scope (its labels no longer match the shard's
    /// selector): its services stop and the host forgets it, but it is not finalized — it was not
    /// deleted, and the replica whose shard it joined takes it over. When the API server cannot
    /// tell, nothing is decided: the key is retried with backoff.
    async fn gone_from_cluster(&self, key: &ObjectKey) -> bool {
        let Some(c) = &self.cluster else { return true };
        match c.writer.lookup(key).await {
            Ok(None) => true,
            // Still there (being deleted or not): it left this replica's scope; if it came back into
            // scope the cache would hold it. Its deletion is the business of the shard it joined.
            Ok(Some(_)) => {
                tracing::info!("left this replica's scope (labels or namespace); let go without finalize");
                self.services.remove_owner(key);
                if let Err(e) = self.store.remove(&key.to_string()).await {
                    tracing::error!(error = %e, "cannot forget an object that left this replica's scope");
                }
                self.deps.lock().unwrap_or_else(|p| p.into_inner()).forget(key);
                self.queue.unschedule(key);
                false
            }
            Err(e) => {
                self.cluster_write_failed(key, &e);
                false
            }
        }
    }

    /// Kubernetes mode: an object whose kind no plugin serves, or whose kind is disabled, keeps
    /// its finalizer; its status says so and what to do.
    async fn unserved(&self, key: &ObjectKey, disabled: bool) {
        let Some(before) = self.store.get(&key.to_string()) else { return };
        let mut rec = before.clone();
        rec.phase = Phase::Pending;
        let why = if disabled {
            format!("kind {} is disabled on this host (`steward kinds enable {}`)", key.kind, key.kind)
        } else {
            format!("no plugin serves kind {}", key.kind)
        };
        rec.last_error = Some(format!(
            "{why}; the object keeps its finalizer {} until the kind is served again or an operator removes it",
            crate::kubernetes::FINALIZER
        ));
        self.persist_and_write(key, rec, Some(&before)).await;
    }

    /// Stores `rec` unless it equals `before`. The store shows it at once; its durable
    /// commit is group-committed in the background, so a worker never waits for an fsync.
    /// A crash before that commit costs at most a repeated reconcile: the state is
    /// recomputed from the source, which is the truth.
    async fn persist(&self, key: &ObjectKey, rec: StatusRecord, before: Option<&StatusRecord>) {
        if before == Some(&rec) {
            return;
        }
        // The write is queued before `put` returns; its acknowledgement is not awaited (the
        // store's writer logs a failed commit once and refuses further writes; the status is
        // then recomputed after a restart). No task per write: a backlog of thousands of
        // pending commits costs only their queued bytes.
        drop(self.store.put(key.to_string(), rec));
    }

    /// Whether `kind` is disabled.
    pub fn is_disabled(&self, kind: &str) -> bool {
        self.disabled.read().unwrap_or_else(|p| p.into_inner()).contains(kind)
    }

    /// Queues `key` now as a manual trigger (a `Failed` object is retried).
    pub fn trigger(&self, key: &ObjectKey) -> Result<(), RequestError> {
        if self.source.get(key).is_none() && self.store.get(&key.to_string()).is_none() {
            return Err(RequestError::NotFound(key.clone()));
        }
        self.enqueue(key, Reason::ManualTrigger);
        Ok(())
    }

    /// Enables or disables `kind` (persisted). Enabling queues its objects.
    pub async fn set_kind_enabled(&self, kind: &str, enabled: bool) -> Result<(), RequestError> {
        let known = self.plugins.plugins().iter().any(|p| p.info().kinds.iter().any(|k| k.kind == kind))
            || !self.source.list(kind, None).is_empty();
        if !known {
            return Err(RequestError::UnknownKind(kind.to_string()));
        }
        let list = {
            let mut d = self.disabled.write().unwrap_or_else(|p| p.into_inner());
            if enabled {
                d.remove(kind);
            } else {
                d.insert(kind.to_string());
            }
            serde_json::to_string(&*d).unwrap_or_else(|_| "[]".into())
        };
        if let Err(e) = self.store.put_meta(DISABLED_KINDS.into(), list).await {
            tracing::error!(error = %e, "cannot persist the enabled kinds");
        }
        // Kubernetes mode: a disabled kind's watch stops; enabling it starts the watch again.
        self.sync_watches();
        if enabled {
            for key in self.keys_of_kinds(&[kind.to_string()]) {
                self.enqueue(&key, Reason::KindEnabled);
            }
        } else if self.cluster.is_some() {
            // Their status says the kind is disabled, and that they keep the finalizer.
            for key in self.keys_of_kinds(&[kind.to_string()]) {
                self.enqueue(&key, Reason::KindDisabled);
            }
        }
        tracing::info!(kind, enabled, "kind switched");
        Ok(())
    }

    /// Stops taking new work, lets running reconciles finish for up to `grace`, flushes the store,
    /// and (Kubernetes mode) gives up the lease so a standby takes over at once.
    pub async fn shutdown(&self, grace: Duration) {
        self.queue.shutdown();
        let workers: Vec<_> = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        if !self.is_leader() {
            // A standby's workers wait for the lease, not on work: nothing to let finish.
            for w in &workers {
                w.abort();
            }
        }
        let all = futures_join(workers);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!(?grace, "reconciles still running after the grace period; stopping anyway");
        }
        for t in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            t.abort();
        }
        self.services.shutdown().await;
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if let Err(e) = self.store.flush().await {
            tracing::error!(error = %e, "cannot flush the state store");
        }
        if let Some(c) = &self.cluster {
            c.release(grace).await;
        }
    }
}

async fn futures_join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

fn key_of(raw: &RawObject) -> ObjectKey {
    ObjectKey::new(&raw.kind, &raw.namespace, &raw.name)
}
