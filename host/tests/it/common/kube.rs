//! Kubernetes mode test helpers: the host in-process against an API server (the in-process fake,
//! or the shared real one of [`super::realkube`]), CRDs from the plugins, objects.
//!
//! A test written once runs on both with [`kube_e2e!`]: it gets a [`Kube`], which is the server,
//! an admin client, a namespace of the test's own and a kubeconfig.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use steward::config::Config;
use steward::engine::Engine;
use steward::model::ObjectKey;
use tempfile::TempDir;

use super::realkube::{self, RealKube};

/// How long a Kubernetes-mode condition may take.
pub const T: Duration = Duration::from_secs(60);

/// The `Noop` test kind.
pub fn noop_ar() -> ApiResource {
    ApiResource {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        api_version: "test.steward.dev/v1".into(),
        kind: "Noop".into(),
        plural: "noops".into(),
    }
}

/// The `Misbehave` test kind.
pub fn misbehave_ar() -> ApiResource {
    ApiResource {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        api_version: "test.steward.dev/v1".into(),
        kind: "Misbehave".into(),
        plural: "misbehaves".into(),
    }
}

/// The bundled `MCPServer` kind.
pub fn mcp_ar() -> ApiResource {
    ApiResource {
        group: "steward.dev".into(),
        version: "v1alpha1".into(),
        api_version: "steward.dev/v1alpha1".into(),
        kind: "MCPServer".into(),
        plural: "mcpservers".into(),
    }
}

/// Installs the CRDs of `packages` the way `steward crds --apply` does: from what the plugins
/// describe, with a forced server-side apply, so installing them again (a shared real server
/// keeps its CRDs) is harmless; then waits until each is `Established` (served).
pub async fn install_crds(client: &Client, packages: &[&str]) {
    let rt = super::runtime();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("steward-tests").force();
    for p in packages {
        let plugin = super::load(&rt, p, Default::default()).await;
        for k in &plugin.info().kinds {
            let crd = steward::kubernetes::crd::crd_for(k).unwrap_or_else(|e| panic!("{e}"));
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.patch(&name, &params, &Patch::Apply(&crd))
                .await
                .unwrap_or_else(|e| panic!("applying the CRD of {}: {e}", k.kind));
            wait_established(&crds, &name).await;
        }
    }
}

/// Waits until the CRD `name` is `Established`: its kind is served.
pub async fn wait_established(crds: &Api<CustomResourceDefinition>, name: &str) {
    let established = |c: &Option<CustomResourceDefinition>| {
        c.as_ref()
            .and_then(|c| c.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
    };
    let get = async || crds.get_opt(name).await.unwrap_or_else(|e| panic!("get CRD {name}: {e}"));
    super::eventually(T, format!("the CRD {name} Established"), get, established).await;
}

/// A host directory: `plugins/` holding `packages`, and a `steward.yaml` in Kubernetes mode.
pub fn host_dir(packages: &[&str], extra: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    for p in packages {
        std::fs::copy(super::wasm(p), dir.path().join(format!("plugins/{p}.wasm"))).unwrap();
    }
    let cfg = dir.path().join("steward.yaml");
    std::fs::write(
        &cfg,
        format!(
            "mode: kubernetes\nplugins:\n  mcpserver: {{ capabilities: [services] }}\n  workflowrun: {{ capabilities: [tools], tools: {{ allow: [\"x_*\", \"workflow_*\"] }} }}\nqueue: {{ initial_backoff: 50ms, max_backoff: 1s }}\n{cache}{extra}",
            cache = super::host::shared_cache_line(extra)
        ),
    )
    .unwrap();
    (dir, cfg)
}

/// Starts the host in Kubernetes mode with `cfg`, talking to the cluster through `client`.
pub async fn start(cfg: &Path, client: Client) -> Arc<Engine> {
    let cfg = Config::load(cfg).unwrap();
    Engine::start_with(cfg, Some(client)).await.unwrap_or_else(|e| panic!("{e}"))
}

/// A `Noop` object in `default` with `spec.value`.
pub fn noop_obj(name: &str, value: &str) -> DynamicObject {
    let mut o = DynamicObject::new(name, &noop_ar()).within("default");
    o.data = json!({ "spec": { "value": value } });
    o
}

/// Polls the object until `f` holds, failing after [`T`].
pub async fn wait_obj(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    f: impl Fn(Option<&DynamicObject>) -> bool,
) -> Option<DynamicObject> {
    let get = async || api.get_opt(name).await.unwrap_or_else(|e| panic!("get {name}: {e}"));
    super::eventually(T, format!("{name}: {what}"), get, |got| f(got.as_ref())).await
}

/// The object's `.status` (null when none).
pub fn status(o: Option<&DynamicObject>) -> &Value {
    static NULL: Value = Value::Null;
    o.and_then(|o| o.data.get("status")).unwrap_or(&NULL)
}

/// Whether the host's finalizer is on the object.
pub fn has_finalizer(o: &DynamicObject) -> bool {
    o.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == steward::kubernetes::FINALIZER))
}

/// How many successful reconciles of `Noop` `default/name` the engine's history shows.
pub fn reconciles(engine: &Engine, name: &str) -> usize {
    engine
        .view(&ObjectKey::new("Noop", "default", name))
        .map_or(0, |v| v.history.iter().filter(|h| h.outcome == "Synced").map(|h| h.count as usize).sum())
}

/// A fake API server holding the CRDs of `packages`, and a host on it started with `extra` config.
pub struct Cluster {
    /// The fake API server.
    pub server: steward_fake_apiserver::FakeApiServer,
    /// A client of it (the test's own; the host has another).
    pub client: Client,
    /// The running host.
    pub engine: Arc<Engine>,
    /// The host's directory (plugins, config, state).
    pub dir: TempDir,
}

impl Cluster {
    /// Starts the server, installs the CRDs and starts the host.
    pub async fn start(packages: &[&str], extra: &str) -> Self {
        let server = steward_fake_apiserver::FakeApiServer::start().await;
        let client = server.client();
        install_crds(&client, packages).await;
        let (dir, cfg) = host_dir(packages, extra);
        let engine = start(&cfg, client.clone()).await;
        Self { server, client, engine, dir }
    }

    /// `Noop` objects in `default`.
    pub fn noops(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), "default", &noop_ar())
    }
}

/// The API server a [`Kube`] test runs against.
pub enum Backend {
    /// The in-process fake, new for the test: it can inject faults and show its requests.
    Fake(steward_fake_apiserver::FakeApiServer),
    /// The real kube-apiserver shared by the test process ([`super::realkube::shared`]).
    Real(&'static RealKube),
}

/// One test's Kubernetes: a server, an admin client of it, a namespace of the test's own, and a
/// kubeconfig for processes.
///
/// On the real server objects outlive the test and other tests run beside it, so a host started
/// with [`Kube::host_dir`] watches only the test's namespace (on the fake it watches all of
/// them, as a host does by default), and its Lease is in the test's namespace on both.
pub struct Kube {
    /// The server.
    pub backend: Backend,
    /// An admin client of it (the test's own; a host gets another).
    pub client: Client,
    /// The test's namespace (created for it).
    pub ns: String,
    /// A kubeconfig of the server with admin rights.
    pub kubeconfig: PathBuf,
    /// What the test is called (the prefix of its namespaces).
    pub test: &'static str,
    _dir: Option<TempDir>,
}

impl Kube {
    /// A new fake API server, and the test's namespace on it.
    pub async fn fake(test: &'static str) -> Self {
        let server = steward_fake_apiserver::FakeApiServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        let ns = create_namespace(&client, test).await;
        Self { backend: Backend::Fake(server), client, ns, kubeconfig, test, _dir: Some(dir) }
    }

    /// The shared real API server (started on first use), and a new namespace on it; `None`, after
    /// saying so, under `STEWARD_KUBE=fake`. Panics, saying how to get one, when there is none.
    pub async fn real(test: &'static str) -> Option<Self> {
        if !realkube::enabled() {
            println!("{test}: skipped on the real API server (STEWARD_KUBE=fake)");
            return None;
        }
        let real = match tokio::task::spawn_blocking(realkube::shared).await {
            Ok(real) => real,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        let client = real.client().await;
        let ns = create_namespace(&client, test).await;
        Some(Self { backend: Backend::Real(real), client, ns, kubeconfig: real.kubeconfig.clone(), test, _dir: None })
    }

    /// The fake server, when it is the fake (for what only the fake can do or show).
    pub fn fake_server(&self) -> Option<&steward_fake_apiserver::FakeApiServer> {
        match &self.backend {
            Backend::Fake(s) => Some(s),
            Backend::Real(_) => None,
        }
    }

    /// Whether this is the real API server.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real(_))
    }

    /// The server's `host:port`.
    pub fn authority(&self) -> String {
        match &self.backend {
            Backend::Fake(s) => s.addr().to_string(),
            Backend::Real(r) => r.apiserver.trim_start_matches("https://").trim_end_matches('/').to_string(),
        }
    }

    /// The client configuration of the admin (for a client through a proxy, say).
    pub async fn config(&self) -> kube::Config {
        match &self.backend {
            Backend::Fake(s) => s.config(),
            Backend::Real(r) => r.config().await,
        }
    }

    /// Another new namespace, `PREFIX-…`.
    pub async fn namespace(&self, prefix: &str) -> String {
        create_namespace(&self.client, prefix).await
    }

    /// The objects of `ar` in the test's namespace.
    pub fn api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, ar)
    }

    /// `Noop` objects in the test's namespace.
    pub fn noops(&self) -> Api<DynamicObject> {
        self.api(&noop_ar())
    }

    /// A `Noop` object in the test's namespace with `spec.value`.
    pub fn noop(&self, name: &str, value: &str) -> DynamicObject {
        noop_obj(name, value).within(&self.ns)
    }

    /// The key of the object `kind/name` in the test's namespace.
    pub fn key(&self, kind: &str, name: &str) -> ObjectKey {
        ObjectKey::new(kind, &self.ns, name)
    }

    /// How many successful reconciles of `Noop` `name` (in the test's namespace) `engine` shows.
    pub fn reconciles(&self, engine: &Engine, name: &str) -> usize {
        engine
            .view(&self.key("Noop", name))
            .map_or(0, |v| v.history.iter().filter(|h| h.outcome == "Synced").map(|h| h.count as usize).sum())
    }

    /// Installs the CRDs of `packages` (idempotent).
    pub async fn install_crds(&self, packages: &[&str]) {
        install_crds(&self.client, packages).await;
    }

    /// Installs the CRDs of `packages` and starts a host serving them with [`Kube::host_dir`] of
    /// `fields`; returns the host and its directory (plugins, config, state).
    pub async fn host(&self, packages: &[&str], fields: &str) -> (Arc<Engine>, TempDir) {
        self.install_crds(packages).await;
        let (dir, cfg) = self.host_dir(packages, fields);
        (start(&cfg, self.client.clone()).await, dir)
    }

    /// The host config's `kubernetes:` section: `fields` (block YAML lines, unindented), plus
    /// `namespaces: [NS]` on the real server and `leaderElection: { namespace: NS }` unless
    /// `fields` give them. A test that gives `leaderElection` puts its Lease in [`Kube::ns`].
    pub fn kubernetes_section(&self, fields: &str) -> String {
        let has = |key: &str| fields.lines().any(|l| l.trim_start().starts_with(key));
        let mut out = String::from("kubernetes:\n");
        if self.is_real() && !has("namespaces:") {
            out += &format!("  namespaces: [{}]\n", self.ns);
        }
        if !has("leaderElection:") {
            out += &format!("  leaderElection: {{ namespace: {} }}\n", self.ns);
        }
        for l in fields.lines().filter(|l| !l.trim().is_empty()) {
            out += &format!("  {l}\n");
        }
        out
    }

    /// A host directory with `packages` and a config whose `kubernetes:` section is
    /// [`Kube::kubernetes_section`] of `fields`.
    pub fn host_dir(&self, packages: &[&str], fields: &str) -> (TempDir, PathBuf) {
        host_dir(packages, &self.kubernetes_section(fields))
    }

    /// Applies (server-side, forced) every document of the multi-document YAML `text`, such as
    /// the output of `steward rbac`, as the admin.
    pub async fn apply_yaml(&self, text: &str) {
        use kube::api::{Patch, PatchParams};
        let apply = PatchParams::apply("steward-tests").force();
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"));
        for doc in docs.iter().filter(|d| !d.is_null()) {
            let (api_version, kind) = (doc["apiVersion"].as_str().unwrap(), doc["kind"].as_str().unwrap());
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let ar = ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: api_version.into(),
                kind: kind.into(),
                plural: format!("{}s", kind.to_lowercase()),
            };
            let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
                None => Api::all_with(self.client.clone(), &ar),
            };
            let name = doc["metadata"]["name"].as_str().unwrap();
            api.patch(name, &apply, &Patch::Apply(doc)).await.unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
        }
    }

    /// A client acting as the ServiceAccount `name` of the test's namespace (impersonated by the
    /// admin), with the groups the API server gives a ServiceAccount.
    pub async fn client_as_service_account(&self, name: &str) -> Client {
        let mut config = self.config().await;
        config.auth_info.impersonate = Some(format!("system:serviceaccount:{}:{name}", self.ns));
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.ns),
            "system:authenticated".into(),
        ]);
        Client::try_from(config).unwrap()
    }

    /// The `events.k8s.io/v1` Events of the test's namespace, as JSON.
    pub async fn events(&self) -> Vec<Value> {
        let ar = ApiResource {
            group: "events.k8s.io".into(),
            version: "v1".into(),
            api_version: "events.k8s.io/v1".into(),
            kind: "Event".into(),
            plural: "events".into(),
        };
        let list = self.api(&ar).list(&Default::default()).await.unwrap_or_else(|e| panic!("list Events: {e}"));
        list.items.into_iter().map(|e| serde_json::to_value(e).unwrap()).collect()
    }
}

/// Creates a new namespace `PREFIX-<pid>-<n>` through `client` and returns its name (a real
/// server never deletes a namespace, and an instance may outlive this process).
pub async fn create_namespace(client: &Client, prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let prefix: String =
        prefix.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(40).collect();
    let prefix = match prefix.trim_matches('-') {
        "" => "test",
        p => p,
    };
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}-{:x}-{n}", std::process::id());
        let ns = serde_json::from_value(json!({ "metadata": { "name": name } })).expect("a namespace");
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => return name,
            // Left by an earlier process with the same pid on a reused instance.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("creating the namespace {name}: {e}"),
        }
    }
}

/// One test body, run on both API servers: `kube_e2e! { async fn name(k: Kube) { ... } }` makes
/// the module `name` with the tests `name::fake` (a new [`Kube::fake`]) and `name::real` (the
/// shared real server, [`Kube::real`]). Doc comments and attributes go on the module.
macro_rules! kube_e2e {
    ($(#[$meta:meta])* async fn $name:ident($k:ident: Kube) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($k: $crate::common::kube::Kube) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake() {
                body($crate::common::kube::Kube::fake(stringify!($name)).await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                if let Some(k) = $crate::common::kube::Kube::real(stringify!($name)).await {
                    body(k).await;
                }
            }
        }
    };
}
pub(crate) use kube_e2e;
