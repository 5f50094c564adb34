//! Kubernetes mode test helpers: the host in-process against the fake API server, CRDs from the plugins, objects.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use steward::config::Config;
use steward::engine::Engine;
use steward::model::ObjectKey;
use tempfile::TempDir;

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

/// Installs the CRDs of `packages` the way `steward crds --apply` does: from what the plugins describe.
pub async fn install_crds(client: &Client, packages: &[&str]) {
    let rt = super::runtime();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for p in packages {
        let plugin = super::load(&rt, p, Default::default()).await;
        for k in &plugin.info().kinds {
            let crd = steward::kubernetes::crd::crd_for(k).unwrap_or_else(|e| panic!("{e}"));
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("creating the CRD of {}: {e}", k.kind));
        }
    }
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
            "mode: kubernetes\nplugins:\n  mcpserver: {{ capabilities: [services] }}\n  workflowrun: {{ capabilities: [tools], tools: {{ allow: [\"x_*\", \"workflow_*\"] }} }}\nqueue: {{ initial_backoff: 50ms, max_backoff: 1s }}\n{extra}"
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
        .map_or(0, |v| v.history.iter().filter(|h| h.outcome == "Synced").count())
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
