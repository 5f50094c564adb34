//! Kubernetes mode's change detection: a kube-rs watcher and reflector store per served kind and namespace.
//!
//! - Objects are dynamic (`DynamicObject`), typed only by what the plugin's kind info says.
//! - A kind's objects count as complete only once every one of its watches has listed
//!   ([`Source::is_synced`]); until then an object missing from the cache is not taken for deleted.
//! - Only changes a reconcile cares about are reported: generation (the spec), labels,
//!   annotations, `apiVersion` and the start of deletion. A status write changes none of them,
//!   so it cannot make its own object reconcile again.
//! - A relist (after a watch expired) reports what changed and what vanished while it was away.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use steward_sdk::{ConditionStatus, KindInfo, RawObject};
use tokio::sync::mpsc;

use crate::health::{Conditions, WATCHES_HEALTHY};
use crate::model::{ObjectKey, SourceLocation, namespace_for, spec_hash};
use crate::source::{FileProblem, Source, SourceEvent, SourceObject};

/// Which objects this replica serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Namespaces to watch; empty means all.
    pub namespaces: Vec<String>,
    /// Label selector every watch carries.
    pub label_selector: Option<String>,
    /// How often each watch starts over with a full list (`None`: only when the watcher must).
    pub relist: Option<Duration>,
}

/// The [`ApiResource`] of a plugin's kind.
pub fn api_resource(k: &KindInfo) -> ApiResource {
    ApiResource {
        group: k.group.clone(),
        version: k.version.clone(),
        api_version: if k.group.is_empty() { k.version.clone() } else { format!("{}/{}", k.group, k.version) },
        kind: k.kind.clone(),
        plural: k.plural.clone(),
    }
}

/// One watch: a namespace (or all) of one kind.
struct Shard {
    reader: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct KindWatch {
    /// Shared: every object read converts with it, and it carries the (large) spec schema.
    info: Arc<KindInfo>,
    ar: ApiResource,
    shards: Vec<Shard>,
}

impl KindWatch {
    /// The object of `key` in this kind's watch cache (shared, not copied).
    fn cached(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        let mut r = ObjectRef::<DynamicObject>::new_with(key.name(), self.ar.clone());
        if self.info.namespaced {
            r = r.within(key.namespace());
        }
        self.shards.iter().find_map(|s| s.reader.get(&r))
    }
}

/// The cluster as a [`Source`]: served kinds' objects from reflector stores, changes as [`SourceEvent`]s.
pub struct KubeSource {
    client: Client,
    scope: Scope,
    kinds: RwLock<BTreeMap<String, KindWatch>>,
    /// Kinds ever served, so an object whose plugin left can still get its status written.
    known: RwLock<HashMap<String, KindInfo>>,
    problems: Arc<Mutex<BTreeMap<String, FileProblem>>>,
    events: mpsc::UnboundedSender<SourceEvent>,
    /// Where the watches report `WatchesHealthy`, once given ([`KubeSource::report_to`]).
    conditions: Arc<OnceLock<Conditions>>,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.kinds.read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        f.debug_struct("KubeSource").field("scope", &self.scope).field("kinds", &kinds).finish()
    }
}

impl KubeSource {
    /// A source with no kinds yet; its events arrive on the returned receiver.
    pub fn new(client: Client, scope: Scope) -> (Arc<Self>, mpsc::UnboundedReceiver<SourceEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let s = Self {
            client,
            scope,
            kinds: RwLock::default(),
            known: RwLock::default(),
            problems: Arc::default(),
            events: tx,
            conditions: Arc::default(),
        };
        (Arc::new(s), rx)
    }

    /// Reports the condition `WatchesHealthy` to `conditions` from now on: `False` while a watch
    /// of a served kind fails (the API server cannot be reached, or refuses the list or watch),
    /// `True` once every watch has listed again. Only the first registry given is kept.
    pub fn report_to(&self, conditions: &Conditions) {
        let _ = self.conditions.set(conditions.clone());
    }

    /// The client it watches with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Watches exactly `kinds`: starts a watch per kind (and namespace) not yet watched, stops
    /// those of kinds not listed. A kind whose group, version or plural changed is restarted.
    pub fn set_kinds(self: &Arc<Self>, kinds: &[KindInfo]) {
        let mut map = self.kinds.write().unwrap_or_else(|p| p.into_inner());
        let wanted: HashMap<&str, &KindInfo> = kinds.iter().map(|k| (k.kind.as_str(), k)).collect();
        map.retain(|kind, w| {
            let keep = wanted.get(kind.as_str()).is_some_and(|k| same_resource(k, &w.info));
            if !keep {
                tracing::info!(kind, "stopping the watch of kind");
                self.problems
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|k, _| !k.starts_with(&format!("{kind}:")));
            }
            keep
        });
        report_watches(&self.problems, &self.conditions, None);
        for k in kinds {
            if map.contains_key(&k.kind) {
                continue;
            }
            // Namespace shards all see a cluster-scoped kind; only a label selector keeps two of
            // them from serving the same object.
            if !k.namespaced && !self.scope.namespaces.is_empty() && self.scope.label_selector.is_none() {
                let message = format!(
                    "{} is cluster-scoped, and this replica is limited to namespaces without a labelSelector: it does not serve the kind, so that two namespace shards never serve the same object; serve it from one replica without `namespaces`, or give each shard a labelSelector",
                    k.kind
                );
                tracing::warn!(kind = %k.kind, "{message}");
                self.problems.lock().unwrap_or_else(|p| p.into_inner()).insert(
                    format!("{}:scope", k.kind),
                    FileProblem {
                        file: format!("kubernetes {}.{}", k.plural, k.group),
                        line: None,
                        column: None,
                        message,
                    },
                );
                continue;
            }
            self.known.write().unwrap_or_else(|p| p.into_inner()).insert(k.kind.clone(), k.clone());
            let ar = api_resource(k);
            let scopes: Vec<Option<String>> = if k.namespaced && !self.scope.namespaces.is_empty() {
                self.scope.namespaces.iter().cloned().map(Some).collect()
            } else {
                vec![None]
            };
            let synced_all: Arc<Vec<Arc<AtomicBool>>> =
                Arc::new(scopes.iter().map(|_| Arc::new(AtomicBool::new(false))).collect());
            let shards = scopes
                .into_iter()
                .enumerate()
                .map(|(i, ns)| self.start_shard(k, &ar, ns, synced_all.clone(), i))
                .collect();
            tracing::info!(kind = %k.kind, resource = %format!("{}.{}", k.plural, k.group), "watching kind");
            map.insert(k.kind.clone(), KindWatch { info: Arc::new(k.clone()), ar, shards });
        }
    }

    fn start_shard(
        &self,
        k: &KindInfo,
        ar: &ApiResource,
        ns: Option<String>,
        synced_all: Arc<Vec<Arc<AtomicBool>>>,
        index: usize,
    ) -> Shard {
        let api: Api<DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        };
        let mut cfg = watcher::Config::default();
        if let Some(sel) = &self.scope.label_selector {
            cfg = cfg.labels(sel);
        }
        let mut probe = ListParams::default().limit(1);
        if let Some(sel) = &self.scope.label_selector {
            probe = probe.labels(sel);
        }
        let writer = reflector::store::Writer::new(ar.clone());
        let reader = writer.as_reader();
        let synced = synced_all[index].clone();
        let ctx = ShardContext {
            kind: k.kind.clone(),
            mine: synced.clone(),
            label: format!("{}:{}", k.kind, ns.as_deref().unwrap_or("*")),
            resource: format!("{}.{}", k.plural, k.group),
            events: self.events.clone(),
            problems: self.problems.clone(),
            conditions: self.conditions.clone(),
            synced_all,
            probe: (api.clone(), probe),
        };
        let stream = reflector::reflector(writer, relisting(api, cfg, self.scope.relist).modify(strip_for_cache));
        let task = tokio::spawn(ctx.run(stream));
        Shard { reader, synced, task }
    }

    /// The object as the cache holds it, with its metadata (resourceVersion, finalizers, uid).
    pub fn object(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        let map = self.kinds.read().unwrap_or_else(|p| p.into_inner());
        map.get(key.kind().as_str())?.cached(key)
    }

    /// The object of `key` as the engine and plugins see it, with the cluster's status or without:
    /// one look-up of the kind, no copy of its description.
    fn source_of(&self, key: &ObjectKey, with_status: bool) -> Option<SourceObject> {
        let map = self.kinds.read().unwrap_or_else(|p| p.into_inner());
        let w = map.get(key.kind().as_str())?;
        w.cached(key).map(|o| source_object(&w.info, &o, with_status))
    }

    /// The kind's description, while watched or after (so its objects can still be written to).
    pub fn kind_info(&self, kind: &str) -> Option<KindInfo> {
        self.known.read().unwrap_or_else(|p| p.into_inner()).get(kind).cloned()
    }

    /// Whether `kind` is watched now.
    pub fn is_watched(&self, kind: &str) -> bool {
        self.kinds.read().unwrap_or_else(|p| p.into_inner()).contains_key(kind)
    }

    /// Waits until every watched kind has listed, or `timeout` passes; returns whether all did.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let readers: Vec<Store<DynamicObject>> = {
            let map = self.kinds.read().unwrap_or_else(|p| p.into_inner());
            map.values().flat_map(|w| w.shards.iter().map(|s| s.reader.clone())).collect()
        };
        for r in readers {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, r.wait_until_ready()).await.is_err() {
                return false;
            }
        }
        true
    }

    fn all_objects(&self, kind: Option<&str>) -> Vec<(Arc<KindInfo>, Arc<DynamicObject>)> {
        let map = self.kinds.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (k, w) in map.iter() {
            if kind.is_some_and(|want| want != k) {
                continue;
            }
            for s in &w.shards {
                out.extend(s.reader.state().into_iter().map(|o| (w.info.clone(), o)));
            }
        }
        out
    }
}

/// The events of a watch of `api`, started over with a full list every `every` (when given).
///
/// Each new watcher begins with a list (`Init`, `InitApply`…, `InitDone`); the reflector it feeds
/// keeps serving its old cache until `InitDone` and then replaces it whole, and the shard reports
/// what the list found changed or gone. So a change whose watch event was lost (a watch cut at the
/// wrong moment, a server that dropped it) is seen at the next relist at the latest.
fn relisting(
    api: Api<DynamicObject>,
    cfg: watcher::Config,
    every: Option<Duration>,
) -> futures_util::stream::BoxStream<'static, Result<Event<DynamicObject>, watcher::Error>> {
    let start = move || watcher::watcher(api.clone(), cfg.clone()).default_backoff().boxed();
    let Some(every) = every else { return start() };
    let first = start();
    let next = tokio::time::Instant::now() + every;
    futures_util::stream::unfold((first, next, start), move |(mut stream, mut next, start)| async move {
        loop {
            tokio::select! {
                item = stream.next() => return item.map(|i| (i, (stream, next, start))),
                _ = tokio::time::sleep_until(next) => {
                    stream = start();
                    next = tokio::time::Instant::now() + every;
                }
            }
        }
    })
    .boxed()
}

/// The annotation `kubectl apply` keeps a copy of the whole applied object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what neither the host nor a plugin reads before an object is cached, as kube-rs
/// documents for reflectors (`WatchStreamExt::modify`): `metadata.managedFields` (often larger
/// than the object) and the [`LAST_APPLIED`] annotation (a second copy of the object). Plugins
/// see every other annotation.
pub fn strip_for_cache(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(a) = obj.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            obj.metadata.annotations = None;
        }
    }
}

fn same_resource(a: &KindInfo, b: &KindInfo) -> bool {
    a.group == b.group && a.version == b.version && a.plural == b.plural && a.namespaced == b.namespaced
}

/// The key of a cluster object (cluster-scoped objects have an empty namespace).
pub fn key_of(kind: &str, obj: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        kind,
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

/// The object as the engine and plugins see it. `status` is the cluster's status object.
pub fn to_source_object(info: &KindInfo, obj: &DynamicObject) -> SourceObject {
    source_object(info, obj, true)
}

/// [`to_source_object`], with the cluster's status (`with_status`) or without.
fn source_object(info: &KindInfo, obj: &DynamicObject, with_status: bool) -> SourceObject {
    let spec_text = obj.data.get("spec").and_then(|s| serde_json::to_string(s).ok()).unwrap_or_else(|| "{}".into());
    let status = obj.data.get("status").filter(|s| with_status && !s.is_null()).map(|s| s.to_string());
    let m = &obj.metadata;
    let namespace = namespace_for(info.namespaced, m.namespace.as_deref().unwrap_or_default()).to_string();
    let raw = RawObject {
        api_version: obj.types.as_ref().map_or_else(|| api_resource(info).api_version, |t| t.api_version.clone()),
        kind: info.kind.clone(),
        name: m.name.clone().unwrap_or_default(),
        namespace,
        generation: m.generation.and_then(|g| u64::try_from(g).ok()).unwrap_or(1),
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        spec: spec_text,
        status,
        deleting: m.deletion_timestamp.is_some(),
    };
    let ns_part = if raw.namespace.is_empty() { String::new() } else { format!("namespaces/{}/", raw.namespace) };
    let group = if info.group.is_empty() { "api".to_string() } else { format!("apis/{}", info.group) };
    SourceObject {
        spec_hash: spec_hash(&raw.spec),
        location: SourceLocation::new(format!("/{group}/{}/{ns_part}{}/{}", info.version, info.plural, raw.name), 0),
        raw,
        warnings: Vec::new(),
    }
}

/// What a reconcile depends on: a change of anything else (the status above all) is not reported.
fn fingerprint(obj: &DynamicObject) -> u64 {
    let m = &obj.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    obj.types.as_ref().map(|t| &t.api_version).hash(&mut h);
    h.finish()
}

/// The state one watch task keeps.
struct ShardContext {
    kind: String,
    mine: Arc<AtomicBool>,
    label: String,
    resource: String,
    events: mpsc::UnboundedSender<SourceEvent>,
    problems: Arc<Mutex<BTreeMap<String, FileProblem>>>,
    conditions: Arc<OnceLock<Conditions>>,
    synced_all: Arc<Vec<Arc<AtomicBool>>>,
    /// A cheap list of the same objects (at most one), made while the watch fails: the
    /// watcher says nothing when it resumes a watch with nothing to deliver, so this tells that
    /// the API server answers this watch's request again.
    probe: (Api<DynamicObject>, ListParams),
}

/// How often a failing watch's [`ShardContext::probe`] asks the API server whether it answers again.
const WATCH_PROBE_EVERY: Duration = Duration::from_secs(2);

impl ShardContext {
    async fn run(
        self,
        stream: impl futures_util::Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send + 'static,
    ) {
        let mut stream = std::pin::pin!(stream);
        let mut seen: HashMap<ObjectKey, u64> = HashMap::new();
        let mut listing: Option<HashMap<ObjectKey, u64>> = None;
        let mut failures = 0u32;
        let mut probe = tokio::time::interval(WATCH_PROBE_EVERY);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let ev = tokio::select! {
                ev = stream.next() => match ev {
                    Some(ev) => ev,
                    None => return,
                },
                _ = probe.tick(), if failures > 0 => {
                    // The watcher resumes on its own (with backoff) once the server answers; a
                    // list that works again is the repair, so the condition clears now rather
                    // than at the next change.
                    let (api, params) = &self.probe;
                    if api.list(params).await.is_ok() {
                        self.clear_problem(&mut failures);
                    }
                    continue;
                }
            };
            match ev {
                Ok(Event::Init) => listing = Some(HashMap::new()),
                Ok(Event::InitApply(obj)) => {
                    if let Some(l) = listing.as_mut() {
                        l.insert(key_of(&self.kind, &obj), fingerprint(&obj));
                    }
                }
                Ok(Event::InitDone) => {
                    let fresh = listing.take().unwrap_or_default();
                    // The first listing is scheduled by the engine as at start (`KindSynced`); only
                    // a relist reports what changed and what vanished while the watch was away.
                    let first = !self.mine.load(Ordering::Acquire);
                    for (k, f) in fresh.iter().filter(|_| !first) {
                        if seen.get(k) != Some(f) {
                            self.send(SourceEvent::Changed(k.clone()));
                        }
                    }
                    let gone: Vec<ObjectKey> = seen.keys().filter(|k| !fresh.contains_key(*k)).cloned().collect();
                    for k in gone {
                        self.send(SourceEvent::Deleted(k));
                    }
                    seen = fresh;
                    self.clear_problem(&mut failures);
                    self.mark_synced();
                }
                Ok(Event::Apply(obj)) => {
                    let (k, f) = (key_of(&self.kind, &obj), fingerprint(&obj));
                    if seen.insert(k.clone(), f) != Some(f) {
                        self.send(SourceEvent::Changed(k));
                    }
                    self.clear_problem(&mut failures);
                }
                Ok(Event::Delete(obj)) => {
                    let k = key_of(&self.kind, &obj);
                    seen.remove(&k);
                    self.send(SourceEvent::Deleted(k));
                }
                Err(e) => self.record_problem(&e, &mut failures),
            }
        }
    }

    fn send(&self, ev: SourceEvent) {
        let _ = self.events.send(ev);
    }

    fn mark_synced(&self) {
        let first = !self.mine.swap(true, Ordering::AcqRel);
        // Every (re)list ends in a sync report once all of the kind's watches have listed.
        if self.synced_all.iter().all(|s| s.load(Ordering::Acquire)) {
            if first {
                tracing::info!(kind = %self.kind, "kind's cache is synced");
            }
            self.send(SourceEvent::KindSynced { kind: self.kind.clone() });
        }
    }

    fn clear_problem(&self, failures: &mut u32) {
        if *failures > 0 {
            tracing::info!(kind = %self.kind, "watch recovered");
            *failures = 0;
            self.problems.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.label);
        }
        if self
            .conditions
            .get()
            .is_some_and(|c| c.get(WATCHES_HEALTHY, None).is_none_or(|w| w.status != ConditionStatus::True))
        {
            report_watches(&self.problems, &self.conditions, None);
        }
    }

    /// Records a watch failure; logs the 1st, 2nd, 4th, 8th… in a row, not every retry.
    fn record_problem(&self, e: &watcher::Error, failures: &mut u32) {
        *failures = failures.saturating_add(1);
        let message = crate::sanitize::sanitize(&watch_error_message(e, &self.resource));
        if failures.is_power_of_two() {
            tracing::warn!(kind = %self.kind, failures = *failures, "cannot watch: {message}");
        }
        self.problems.lock().unwrap_or_else(|p| p.into_inner()).insert(
            self.label.clone(),
            FileProblem { file: format!("kubernetes {}", self.resource), line: None, column: None, message },
        );
        // An answer with a status came from the API server; anything else did not reach it.
        let answered = matches!(
            e,
            watcher::Error::InitialListFailed(kube::Error::Api(_))
                | watcher::Error::WatchStartFailed(kube::Error::Api(_))
                | watcher::Error::WatchFailed(kube::Error::Api(_))
                | watcher::Error::WatchError(_)
        );
        report_watches(
            &self.problems,
            &self.conditions,
            Some(if answered { "WatchFailed" } else { "ApiServerUnreachable" }),
        );
    }
}

/// Sets `WatchesHealthy` from the watches' current problems (the `:scope` notes are no watch
/// failure): `False` with `reason` (or `WatchFailed`) and every failing watch named, else `True`.
fn report_watches(
    problems: &Mutex<BTreeMap<String, FileProblem>>,
    conditions: &OnceLock<Conditions>,
    reason: Option<&str>,
) {
    let Some(c) = conditions.get() else { return };
    let failing: Vec<String> = problems
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(label, _)| !label.ends_with(":scope"))
        .map(|(label, p)| format!("{label}: {}", p.message))
        .collect();
    if failing.is_empty() {
        c.ok(WATCHES_HEALTHY, None, "Watching", "every watch of the served kinds is listed and running");
        return;
    }
    // Without a new reason, the one of the failure under way stands.
    let reason = reason
        .map(str::to_string)
        .or_else(|| c.get(WATCHES_HEALTHY, None).filter(|w| w.status != ConditionStatus::True).map(|w| w.reason))
        .unwrap_or_else(|| "WatchFailed".into());
    c.fail(
        WATCHES_HEALTHY,
        None,
        &reason,
        format!(
            "{} watch(es) of the cluster fail, so changes there are not seen: {}; the host retries with backoff \
             and lists again once the API server answers; check that it is reachable and the RBAC from `steward rbac`",
            failing.len(),
            failing.join("; ")
        ),
    );
}

fn watch_error_message(e: &watcher::Error, resource: &str) -> String {
    let text = e.to_string();
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    };
    match api {
        Some(404) => format!(
            "{text}: the resource {resource} is not served; install its CustomResourceDefinition with `steward crds --apply`"
        ),
        Some(403) => {
            format!("{text}: the service account may not list/watch {resource}; apply the RBAC from `steward rbac`")
        }
        Some(401) => format!("{text}: the cluster refused the credentials"),
        _ => text,
    }
}

impl Source for KubeSource {
    fn get(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.source_of(key, true)
    }

    fn get_without_status(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.source_of(key, false)
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<SourceObject> {
        let mut out: Vec<SourceObject> = self
            .all_objects(Some(kind))
            .into_iter()
            .filter(|(_, o)| namespace.is_none_or(|ns| o.metadata.namespace.as_deref() == Some(ns)))
            .map(|(i, o)| to_source_object(&i, &o))
            .collect();
        out.sort_by(|a, b| (&a.raw.namespace, &a.raw.name).cmp(&(&b.raw.namespace, &b.raw.name)));
        out
    }

    fn keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = self
            .all_objects(None)
            .into_iter()
            .map(|(i, o)| key_of(&i.kind, &o))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        keys.sort();
        keys
    }

    fn len(&self) -> usize {
        let map = self.kinds.read().unwrap_or_else(|p| p.into_inner());
        map.values().flat_map(|w| w.shards.iter()).map(|s| s.reader.len()).sum()
    }

    fn problems(&self) -> Vec<FileProblem> {
        self.problems.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    fn is_synced(&self, kind: &str) -> bool {
        let map = self.kinds.read().unwrap_or_else(|p| p.into_inner());
        map.get(kind).is_some_and(|w| w.shards.iter().all(|s| s.synced.load(Ordering::Acquire)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info() -> KindInfo {
        KindInfo {
            group: "steward.dev".into(),
            version: "v1alpha1".into(),
            kind: "MCPServer".into(),
            plural: "mcpservers".into(),
            namespaced: true,
            spec_schema: "{}".into(),
            resync_seconds: 0,
            columns: Vec::new(),
        }
    }

    fn obj(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_cluster_object_becomes_what_plugins_see() {
        let o = obj(json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": "git", "namespace": "team", "generation": 3, "labels": {"a": "b"},
                         "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]},
            "spec": {"type": "stdio"}, "status": {"state": "Running"}
        }));
        let s = to_source_object(&info(), &o);
        assert_eq!(s.key(), ObjectKey::new("MCPServer", "team", "git"));
        assert_eq!(s.raw.generation, 3);
        assert_eq!(s.raw.spec, r#"{"type":"stdio"}"#);
        assert_eq!(s.raw.status.as_deref(), Some(r#"{"state":"Running"}"#));
        assert!(s.raw.deleting);
        assert_eq!(s.raw.labels["a"], "b");
        assert_eq!(s.location, SourceLocation::new("/apis/steward.dev/v1alpha1/namespaces/team/mcpservers/git", 0));
        assert_eq!(s.spec_hash, spec_hash(r#"{"type":"stdio"}"#));
    }

    #[test]
    fn a_cluster_scoped_object_has_no_namespace_and_an_api_path_without_one() {
        let cluster = KindInfo { namespaced: false, ..info() };
        let o = obj(json!({"metadata": {"name": "c", "generation": 1}, "spec": {}}));
        let s = to_source_object(&cluster, &o);
        assert_eq!(s.key(), ObjectKey::new("MCPServer", "", "c"));
        assert_eq!(s.location.to_string(), "/apis/steward.dev/v1alpha1/mcpservers/c:0");
    }

    #[test]
    fn the_cache_keeps_no_managed_fields_and_no_last_applied_copy() {
        let mut o = obj(json!({
            "metadata": {"name": "a", "generation": 1,
                         "annotations": {LAST_APPLIED: "{\"spec\":{}}", "team": "x"},
                         "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}]},
            "spec": {}
        }));
        strip_for_cache(&mut o);
        assert!(o.metadata.managed_fields.is_none());
        assert_eq!(o.metadata.annotations, Some([("team".to_string(), "x".to_string())].into()));
        let mut only_last = obj(json!({"metadata": {"name": "b", "annotations": {LAST_APPLIED: "{}"}}}));
        strip_for_cache(&mut only_last);
        assert!(only_last.metadata.annotations.is_none());
    }

    #[test]
    fn only_what_a_reconcile_depends_on_changes_the_fingerprint() {
        let base =
            json!({"metadata": {"name": "a", "generation": 1, "resourceVersion": "1"}, "spec": {}, "status": {"x": 1}});
        let f = fingerprint(&obj(base.clone()));
        let mut status_only = base.clone();
        status_only["status"]["x"] = json!(2);
        status_only["metadata"]["resourceVersion"] = json!("2");
        assert_eq!(fingerprint(&obj(status_only)), f, "a status write must not look like a change");
        let mut finalizer_only = base.clone();
        finalizer_only["metadata"]["finalizers"] = json!(["steward.dev/finalizer"]);
        assert_eq!(fingerprint(&obj(finalizer_only)), f, "adding the finalizer must not reconcile again");
        for change in [
            json!({"generation": 2}),
            json!({"labels": {"l": "v"}}),
            json!({"annotations": {"a": "v"}}),
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
        ] {
            let mut o = base.clone();
            for (k, v) in change.as_object().unwrap() {
                o["metadata"][k] = v.clone();
            }
            assert_ne!(fingerprint(&obj(o)), f, "{change}");
        }
    }
}
