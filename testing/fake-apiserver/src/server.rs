//! [`FakeApiServer`]: the listener, connection handling, and the test-facing API.

use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::apply::FieldManager;
use crate::faults::{ActiveFault, Fault, FaultHandle, RequestRecord};
use crate::resource::{ResourceDef, StorageKey};
use crate::store::{Store, key_of};
use crate::verbs::{self, WriteOptions};

/// Errors of the test-facing API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener could not be bound on 127.0.0.1.
    #[error("binding the fake API server on 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
    /// A kubeconfig could not be written.
    #[error("writing the kubeconfig: {0}")]
    Io(#[source] std::io::Error),
    /// kube could not build a client for the server's URL.
    #[error("building a kube client: {0}")]
    Client(#[source] kube::Error),
    /// [`FakeApiServer::wait_for`] gave up.
    #[error("the condition did not hold within {0:?}")]
    Timeout(Duration),
    /// A direct write was refused with this API error (the same the HTTP API would answer).
    #[error("{code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// Status reason, e.g. `AlreadyExists`.
        reason: String,
        /// Status message.
        message: String,
    },
}

impl From<crate::status::ApiError> for Error {
    fn from(e: crate::status::ApiError) -> Self {
        Error::Api { code: e.code, reason: e.reason, message: e.message }
    }
}

/// Server settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Watch events kept per resource; a watch or continue token older than the oldest retained
    /// event gets 410 Expired. Default 1000.
    pub history_len: usize,
    /// How often watches that asked for bookmarks get one (None: only on
    /// [`FakeApiServer::bookmark_now`]). Default 1 s (the real server: about once a minute).
    pub bookmark_interval: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options { history_len: 1000, bookmark_interval: Some(Duration::from_secs(1)) }
    }
}

pub(crate) struct Shared {
    pub store: Mutex<Store>,
    pub faults: Arc<Mutex<Vec<ActiveFault>>>,
    pub next_fault: AtomicUsize,
    pub requests: Mutex<Vec<RequestRecord>>,
    pub unreachable: AtomicBool,
    pub refused: AtomicUsize,
    pub kill_connections: tokio::sync::watch::Sender<u64>,
    pub cut_watches: tokio::sync::watch::Sender<u64>,
    pub activity: Arc<tokio::sync::watch::Sender<u64>>,
    pub addr: SocketAddr,
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not wedge the server).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A read-only view of the server state, handed to [`FakeApiServer::wait_for`] predicates.
pub struct StateView<'a> {
    store: &'a Store,
    shared: &'a Shared,
}

fn storage_key(group: &str, plural: &str) -> StorageKey {
    StorageKey { group: group.to_string(), plural: plural.to_string() }
}

fn with_api_version(obj: &Value, group: &str, version: &str) -> Value {
    let mut obj = obj.clone();
    if let Some(m) = obj.as_object_mut() {
        let av = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        m.insert("apiVersion".into(), Value::String(av));
    }
    obj
}

impl StateView<'_> {
    /// The stored object, with `apiVersion` set to `group/version`; None when absent.
    pub fn object(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        self.store.stored(&storage_key(group, plural), &key).map(|s| with_api_version(&s.obj, group, version))
    }

    /// Every stored object of the resource (all namespaces), ordered by namespace and name.
    pub fn objects(&self, group: &str, version: &str, plural: &str) -> Vec<Value> {
        self.store
            .table(&storage_key(group, plural))
            .map(|t| t.objects.values().map(|s| with_api_version(&s.obj, group, version)).collect())
            .unwrap_or_default()
    }

    /// How many stored objects of the resource (all namespaces) satisfy `f`, without copying
    /// them (cheap enough to poll over tens of thousands of objects).
    pub fn count_objects(&self, group: &str, plural: &str, mut f: impl FnMut(&Value) -> bool) -> usize {
        self.store.table(&storage_key(group, plural)).map_or(0, |t| t.objects.values().filter(|s| f(&s.obj)).count())
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store.rv
    }

    /// Open watch streams on all resources.
    pub fn watch_count(&self) -> usize {
        self.store.watch_counts().values().sum()
    }

    /// Open watch streams on one resource (group, plural).
    pub fn watches_on(&self, group: &str, plural: &str) -> usize {
        self.store.watch_counts().get(&(group.to_string(), plural.to_string())).copied().unwrap_or(0)
    }

    /// The request log so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.requests).clone()
    }
}

/// An in-process fake Kubernetes API server on `127.0.0.1`, speaking HTTP/1.1. Dropping it stops
/// the listener and closes every connection.
pub struct FakeApiServer {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.shared.kill_connections.send_modify(|n| *n += 1);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, router: axum::Router) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "fake apiserver accept failed");
                tokio::task::yield_now().await;
                continue;
            }
        };
        if shared.unreachable.load(Ordering::SeqCst) {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let mut kill = shared.kill_connections.subscribe();
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
            tokio::select! {
                _ = conn => {}
                _ = kill.changed() => {}
            }
        });
    }
}

impl FakeApiServer {
    /// Starts a server with default [`Options`] on `127.0.0.1:0`.
    ///
    /// # Panics
    /// When no loopback port can be bound (use [`FakeApiServer::start_with`] to handle that).
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await.expect("start the fake API server")
    }

    /// Starts a server with `options` on `127.0.0.1:0`. Must run inside a Tokio runtime; the
    /// server's tasks live on it.
    pub async fn start_with(options: Options) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::Bind)?;
        let activity = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(options.history_len, activity.clone())),
            faults: Arc::new(Mutex::new(Vec::new())),
            next_fault: AtomicUsize::new(1),
            requests: Mutex::new(Vec::new()),
            unreachable: AtomicBool::new(false),
            refused: AtomicUsize::new(0),
            kill_connections: tokio::sync::watch::Sender::new(0),
            cut_watches: tokio::sync::watch::Sender::new(0),
            activity,
            addr,
        });
        {
            // The namespaces every cluster has.
            let mut store = lock(&shared.store);
            let def = store.registry.get("", "v1", "namespaces").cloned().expect("namespaces are built in");
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let body = serde_json::json!({"metadata": {"name": ns}});
                let w = WriteOptions { manager: "kube-apiserver".into(), ..WriteOptions::default() };
                verbs::create(&mut store, &def, None, body, &w).map_err(Error::from)?;
            }
        }
        let router = crate::routes::router(shared.clone());
        let mut tasks = vec![tokio::spawn(accept_loop(listener, shared.clone(), router))];
        if let Some(interval) = options.bookmark_interval {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    lock(&shared.store).bookmark_all();
                }
            }));
        }
        Ok(FakeApiServer { shared, tasks })
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// A kube config for this server: plain HTTP, no auth, default namespace `default`, kube's
    /// default timeouts and retry policy (so 429/503/504 are retried by the client, honouring
    /// `Retry-After`, as against a real cluster).
    pub fn config(&self) -> kube::Config {
        let uri = self.url().parse().expect("the server URL is a valid URI");
        kube::Config::new(uri)
    }

    /// A client for this server.
    ///
    /// # Panics
    /// When kube cannot build a client for a plain-HTTP URL (it can with the workspace features).
    pub fn client(&self) -> kube::Client {
        self.try_client().expect("build a kube client for the fake API server")
    }

    /// A client for this server, or the error kube gave.
    pub fn try_client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.config()).map_err(Error::Client)
    }

    /// A kubeconfig whose current context points at this server (insecure, no credentials,
    /// namespace `default`), for code that loads kubeconfig files.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`FakeApiServer::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        std::fs::write(path, self.kubeconfig_yaml()).map_err(Error::Io)
    }

    /// Serves a resource type without a CRD (replaces an existing definition of the same
    /// group/version/plural; objects are kept).
    pub fn register(&self, def: ResourceDef) {
        lock(&self.shared.store).register(def);
        self.shared.activity.send_modify(|n| *n += 1);
    }

    /// While `true`, new connections are accepted and closed at once without a response (kube
    /// sees a connection error) and every open connection, watch streams included, is closed.
    /// `false` serves again on the same port.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.shared.unreachable.store(unreachable, Ordering::SeqCst);
        if unreachable {
            self.shared.cut_watches.send_modify(|n| *n += 1);
            self.shared.kill_connections.send_modify(|n| *n += 1);
        }
    }

    /// Whether the server is currently unreachable.
    pub fn is_unreachable(&self) -> bool {
        self.shared.unreachable.load(Ordering::SeqCst)
    }

    /// Connections refused (accepted and closed) while unreachable.
    pub fn refused_connections(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Ends every open watch stream abruptly: the connection is aborted mid-body without a final
    /// event, as a dropped connection would. Clients resume from their last resourceVersion.
    pub fn cut_watches(&self) {
        self.shared.cut_watches.send_modify(|n| *n += 1);
    }

    /// While `true`, writes are stored (and kept in the history a new watch replays) but their
    /// events never reach the watches open now, as if lost on the way; those watches stay open
    /// and get the events of writes made after `false`. Only a new list or watch sees what was lost.
    pub fn lose_watch_events(&self, lose: bool) {
        lock(&self.shared.store).lose_events = lose;
    }

    /// Drops the retained event history of every resource: any watch, `Exact` list or continue
    /// token from before the current resourceVersion gets 410 Expired.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Sends a BOOKMARK at the current resourceVersion to every watch that allowed bookmarks.
    pub fn bookmark_now(&self) {
        lock(&self.shared.store).bookmark_all();
    }

    /// Injects a fault; the returned handle counts its uses and can withdraw it. Faults are
    /// checked in injection order; a request consumes at most one.
    pub fn inject(&self, fault: Fault) -> FaultHandle {
        let id = self.shared.next_fault.fetch_add(1, Ordering::SeqCst);
        let used = Arc::new(AtomicUsize::new(0));
        let times = fault.times;
        lock(&self.shared.faults).push(ActiveFault { id, fault, used: used.clone() });
        FaultHandle { id, used, times, faults: self.shared.faults.clone() }
    }

    /// Withdraws every injected fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Every request served so far (including injected faults), in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.requests).clone()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// The stored object, with `apiVersion` set to `group/version`; None when absent.
    /// `namespace` is None for cluster-scoped resources.
    pub fn object(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.view(|v| v.object(group, version, plural, namespace, name))
    }

    /// Every stored object of the resource (all namespaces), ordered by namespace and name.
    pub fn objects(&self, group: &str, version: &str, plural: &str) -> Vec<Value> {
        self.view(|v| v.objects(group, version, plural))
    }

    /// The current global resourceVersion (incremented by every write).
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv
    }

    /// Open watch streams on all resources.
    pub fn watch_count(&self) -> usize {
        self.view(|v| v.watch_count())
    }

    /// Open watch streams per resource, keyed by (group, plural); resources without watches are absent.
    pub fn watch_counts(&self) -> BTreeMap<(String, String), usize> {
        lock(&self.shared.store).watch_counts()
    }

    /// The field managers of an object (server-side apply ownership); empty when absent.
    pub fn field_managers(&self, group: &str, plural: &str, namespace: Option<&str>, name: &str) -> Vec<FieldManager> {
        let store = lock(&self.shared.store);
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        store.stored(&storage_key(group, plural), &key).map(|s| s.fields.report()).unwrap_or_default()
    }

    /// Runs `f` on the current state under the server's lock (keep it short, never block in it).
    pub fn view<T>(&self, f: impl FnOnce(&StateView<'_>) -> T) -> T {
        let store = lock(&self.shared.store);
        f(&StateView { store: &store, shared: &self.shared })
    }

    /// Waits until `f` holds, re-checking after every write, watch opening/closing and request,
    /// for at most `timeout`. No polling: it sleeps until something changes.
    pub async fn wait_for(&self, timeout: Duration, mut f: impl FnMut(&StateView<'_>) -> bool) -> Result<(), Error> {
        let mut changes = self.shared.activity.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            if self.view(&mut f) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return if self.view(&mut f) { Ok(()) } else { Err(Error::Timeout(timeout)) },
            }
        }
    }

    /// Creates an object directly (no HTTP, no faults), with the same rules as a POST. The
    /// namespace comes from `metadata.namespace`. Returns the stored object.
    pub fn create_object(&self, group: &str, version: &str, plural: &str, obj: Value) -> Result<Value, Error> {
        let mut store = lock(&self.shared.store);
        let def = Self::def(&store, group, version, plural)?;
        let ns = crate::meta::meta_str(&obj, "namespace").map(str::to_string);
        let w = WriteOptions { manager: "steward-fake-apiserver".into(), ..WriteOptions::default() };
        Ok(verbs::create(&mut store, &def, ns.as_deref(), obj, &w)?.1)
    }

    /// Replaces an object directly, with the same rules as a PUT (a `metadata.resourceVersion`
    /// in `obj` is a precondition; without it the update is unconditional).
    pub fn replace_object(&self, group: &str, version: &str, plural: &str, obj: Value) -> Result<Value, Error> {
        let mut store = lock(&self.shared.store);
        let def = Self::def(&store, group, version, plural)?;
        let (ns, name) = key_of(&obj);
        let ns = (!ns.is_empty()).then_some(ns);
        let w = WriteOptions { manager: "steward-fake-apiserver".into(), ..WriteOptions::default() };
        Ok(verbs::replace(&mut store, &def, ns.as_deref(), &name, false, obj, &w)?.1)
    }

    /// Replaces an object's status directly, with the same rules as a PUT on `/status`.
    pub fn replace_status(&self, group: &str, version: &str, plural: &str, obj: Value) -> Result<Value, Error> {
        let mut store = lock(&self.shared.store);
        let def = Self::def(&store, group, version, plural)?;
        let (ns, name) = key_of(&obj);
        let ns = (!ns.is_empty()).then_some(ns);
        let w = WriteOptions { manager: "steward-fake-apiserver".into(), ..WriteOptions::default() };
        Ok(verbs::replace(&mut store, &def, ns.as_deref(), &name, def.status_subresource, obj, &w)?.1)
    }

    /// Deletes an object directly, with the same rules as a DELETE (finalizers only mark it).
    pub fn delete_object(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Error> {
        let mut store = lock(&self.shared.store);
        let def = Self::def(&store, group, version, plural)?;
        verbs::delete(&mut store, &def, namespace, name, &verbs::DeleteOptions::default())?;
        Ok(())
    }

    fn def(store: &Store, group: &str, version: &str, plural: &str) -> Result<ResourceDef, Error> {
        store.registry.get(group, version, plural).cloned().ok_or_else(|| Error::Api {
            code: 404,
            reason: "NotFound".into(),
            message: format!("the server could not find the requested resource ({group}/{version}/{plural})"),
        })
    }
}
