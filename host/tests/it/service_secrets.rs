//! Services' secret references end to end: a plugin names where a value is, the host reads it when it starts
//! the service (a file or its environment in filesystem mode, a Secret in Kubernetes mode), the child gets it,
//! and it appears in no API answer, store, log or Kubernetes object; `steward rbac` grants exactly that read.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use steward_fake_apiserver::Verb;

use crate::common;
use crate::common::host::Host;
use crate::common::kube::{Kube, kube_e2e};

const T: Duration = Duration::from_secs(60);
/// The value read from a file: looked for everywhere it must not be.
const FILE_VALUE: &str = "fv-4Jq9-Secret-zW2";
/// The value read from the host's environment.
const ENV_VALUE: &str = "ev-7Rt1-Secret-kP5";
/// The value of a Kubernetes Secret's key.
const KUBE_VALUE: &str = "kv-2Lm8-Secret-xQ3";

/// The `secret-owner` test plugin: its objects own exactly the services their spec lists.
fn secret_owner() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let built = steward_plugin_build::build(&["secret-owner"]).unwrap_or_else(|e| panic!("{e}"));
            built["secret-owner"].clone()
        })
        .clone()
}

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

/// A stdio service whose shell writes `$TOKEN|$OTHER` to `seen` and then becomes the example MCP server.
fn echoing_service(seen: &str, secrets: Value) -> Value {
    json!({
        "name": "srv",
        "transport": "stdio",
        "command": "/bin/sh",
        "args": ["-c", r#"printf '%s|%s' "$TOKEN" "$OTHER" > "$SEEN"; exec "$SERVER" --stdio"#],
        "env": {"SEEN": seen, "SERVER": server_bin()},
        "workingDir": null,
        "url": null,
        "headers": {},
        "timeoutMs": 10000,
        "secrets": secrets,
    })
}

fn owner_yaml(name: &str, service: &Value) -> String {
    let doc = json!({
        "apiVersion": "test.steward.dev/v1",
        "kind": "SecretOwner",
        "metadata": {"name": name},
        "spec": {"services": [service]},
    });
    serde_json::to_string(&doc).unwrap()
}

fn service_status(v: Option<&Value>) -> &Value {
    static NULL: Value = Value::Null;
    v.and_then(|v| v["status"]["services"].get(0)).unwrap_or(&NULL)
}

/// Panics naming `where_` when any of the secret values is in `text`.
fn assert_absent(where_: &str, text: &str) {
    for value in [FILE_VALUE, ENV_VALUE, KUBE_VALUE] {
        assert!(!text.contains(value), "a secret value leaked into {where_}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_and_env_secrets_reach_the_child_and_never_the_api_the_store_or_the_log() {
    let mut h = Host::new("  secret-owner: { capabilities: [services] }\n");
    common::install(&secret_owner(), &h.dir.path().join("plugins/secret-owner.wasm"));
    let seen = h.dir.path().join("seen");
    // `token` is relative: it is read from the config file's directory, like a relative command.
    let secrets = json!([
        {"target": "env", "name": "TOKEN", "source": {"file": {"path": "token"}}},
        {"target": "env", "name": "OTHER", "source": {"env": {"name": "STEWARD_TEST_SECRET"}}},
    ]);
    h.start_with_env(&[("STEWARD_TEST_SECRET", ENV_VALUE), ("STEWARD_LOG", "debug")]).await;
    h.write("o.yaml", &owner_yaml("svc", &echoing_service(&seen.display().to_string(), secrets)));

    // The file does not exist yet: the service fails, says which reference and what to do, and is retried.
    let v = h
        .wait_object("SecretOwner/default/svc", T, "the service waits for its secret file", |v| {
            service_status(v)["phase"] == "Failed"
        })
        .await
        .unwrap();
    let message = service_status(Some(&v))["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("env `TOKEN`") && message.contains("does not exist"), "{message}");

    std::fs::write(h.dir.path().join("token"), format!("{FILE_VALUE}\n")).unwrap();
    let v = h
        .wait_object("SecretOwner/default/svc", T, "Running", |v| service_status(v)["phase"] == "Running")
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), format!("{FILE_VALUE}|{ENV_VALUE}"), "the child's env");
    let pid = service_status(Some(&v))["pid"].as_u64().expect("a pid") as u32;
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert_absent("the child's argv", &String::from_utf8_lossy(&argv));

    // Every API answer about the object, the kinds and the host.
    for path in [
        "/api/v1/overview",
        "/api/v1/resources",
        "/api/v1/resources/SecretOwner/default/svc",
        "/api/v1/resources/SecretOwner/default/svc/spec",
        "/api/v1/plugins",
        "/metrics",
        "/",
    ] {
        let reply = h.http("GET", path, &[], b"");
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_absent(&format!("GET {path}"), &reply.body);
    }
    h.terminate();
    // The store (every byte of the file) and the host's whole log.
    let store = std::fs::read(h.dir.path().join("state/state.redb")).unwrap();
    assert!(!store.is_empty());
    assert_absent("the store", &String::from_utf8_lossy(&store));
    let log = h.log();
    assert!(log.contains("SecretOwner"), "the log is the host's");
    assert_absent("the host's log", &log);
}

fn owners_ar() -> ApiResource {
    ApiResource {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        api_version: "test.steward.dev/v1".into(),
        kind: "SecretOwner".into(),
        plural: "secretowners".into(),
    }
}

/// Installs the `SecretOwner` CRD as `steward crds --apply` would (a forced server-side apply,
/// so the CRD may exist already on a shared server), and waits until it is served.
async fn install_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let rt = common::runtime();
    let path = secret_owner();
    let bytes = std::fs::read(&path).unwrap();
    let plugin = steward::plugin::Plugin::load(rt, &path, bytes, |_| Default::default()).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for k in &plugin.info().kinds {
        let crd = steward::kubernetes::crd::crd_for(k).unwrap();
        let name = crd.metadata.name.clone().unwrap();
        crds.patch(&name, &PatchParams::apply("steward-tests").force(), &Patch::Apply(&crd)).await.unwrap();
        common::kube::wait_established(&crds, &name).await;
    }
}

kube_e2e! {
    /// On the fake and the real API server: a `secretKeyRef` of the object's namespace is read
    /// (and only that Secret, with `get`), other sources are refused, and no value shows.
    async fn in_kubernetes_mode_a_secret_key_ref_of_the_objects_namespace_is_used_and_other_sources_are_refused(k: Kube) {
        secret_key_refs(k).await;
    }
}

async fn secret_key_refs(k: Kube) {
    let (client, ns) = (k.client.clone(), k.ns.clone());
    install_crd(&client).await;
    let (dir, cfg) = common::kube::host_dir(&[], "");
    std::fs::write(
        &cfg,
        format!(
            "mode: kubernetes\nplugins:\n  secret-owner: {{ capabilities: [services] }}\n\
             queue: {{ initial_backoff: 50ms, max_backoff: 1s }}\n{}",
            k.kubernetes_section("leaderElection: { enabled: false }")
        ),
    )
    .unwrap();
    std::fs::copy(secret_owner(), dir.path().join("plugins/secret-owner.wasm")).unwrap();
    let engine = common::kube::start(&cfg, client.clone()).await;
    let owners: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &owners_ar());
    let seen = dir.path().join("seen").display().to_string();
    let key_ref = |ns: Option<&str>| {
        json!([{"target": "env", "name": "TOKEN",
        "source": {"secretKeyRef": {"name": "creds", "namespace": ns, "key": "token"}}}])
    };
    let create = async |name: &str, secrets: Value| {
        let mut o = DynamicObject::new(name, &owners_ar()).within(&ns);
        o.data = json!({"spec": {"services": [echoing_service(&seen, secrets)]}});
        owners.create(&PostParams::default(), &o).await.unwrap();
    };
    create("good", key_ref(None)).await;
    create("elsewhere", key_ref(Some("kube-system"))).await;
    create("from-file", json!([{"target": "env", "name": "TOKEN", "source": {"file": {"path": "/etc/hostname"}}}]))
        .await;
    let phase_of = |o: Option<&DynamicObject>| {
        common::kube::status(o)["services"][0]["phase"].as_str().unwrap_or_default().to_string()
    };
    let message_of = |o: &DynamicObject| {
        common::kube::status(Some(o))["services"][0]["message"].as_str().unwrap_or_default().to_string()
    };

    let waiting = common::kube::wait_obj(&owners, "good", "waits for the Secret", |o| phase_of(o) == "Failed").await;
    let m = message_of(&waiting.unwrap());
    assert!(m.contains(&format!("Secret `{ns}/creds` does not exist")) && m.contains("create it"), "{m}");
    let refused = common::kube::wait_obj(&owners, "elsewhere", "refused", |o| phase_of(o) == "Failed").await;
    assert!(message_of(&refused.unwrap()).contains("another namespace"));
    let refused = common::kube::wait_obj(&owners, "from-file", "refused", |o| phase_of(o) == "Failed").await;
    let m = message_of(&refused.unwrap());
    assert!(m.contains("`file` source is refused in Kubernetes mode"), "{m}");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"token": KUBE_VALUE},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    common::kube::wait_obj(&owners, "good", "Running", |o| phase_of(o) == "Running").await;
    let seen_text = std::fs::read_to_string(&seen).unwrap();
    assert!(seen_text.starts_with(&format!("{KUBE_VALUE}|")), "the child got the decoded value");
    // The host only `get`s Secrets of the object's namespace: never a list, a watch or another
    // namespace (the one create is the test's own). Only the fake shows the requests it served.
    if let Some(server) = k.fake_server() {
        let reads: Vec<_> =
            server.requests().into_iter().filter(|r| r.resource.as_deref() == Some("secrets")).collect();
        assert!(reads.iter().any(|r| r.verb == Verb::Get && r.name.as_deref() == Some("creds")));
        assert!(
            reads
                .iter()
                .all(|r| r.namespace.as_deref() == Some(ns.as_str()) && matches!(r.verb, Verb::Get | Verb::Create)),
            "{reads:#?}"
        );
    }
    engine.shutdown(Duration::from_secs(5)).await;
    let objects = serde_json::to_string(&owners.list(&Default::default()).await.unwrap()).unwrap();
    assert_absent("the objects' status", &objects);
    let events = serde_json::to_string(&k.events().await).unwrap();
    assert_absent("the Events", &events);
}

#[test]
fn rbac_from_a_config_grants_get_on_secrets_in_each_watched_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    common::install(&common::wasm("mcpserver"), &plugins.join("mcpserver.wasm"));
    let cfg = dir.path().join("steward.yaml");
    std::fs::write(
        &cfg,
        "mode: kubernetes\nplugin_dir: plugins\nplugins:\n  mcpserver: { capabilities: [services] }\n\
         kubernetes: { namespaces: [team-b, team-a] }\n",
    )
    .unwrap();
    let out = crate::common::steward().args(["rbac", "--config"]).arg(&cfg).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let docs: Vec<&Value> = docs.iter().filter(|d| !d.is_null()).collect();
    let secret_roles: Vec<&&Value> =
        docs.iter().filter(|d| d["kind"] == "Role" && d["rules"][0]["resources"] == json!(["secrets"])).collect();
    let namespaces: Vec<&str> = secret_roles.iter().filter_map(|r| r["metadata"]["namespace"].as_str()).collect();
    assert_eq!(namespaces, ["team-a", "team-b"]);
    assert!(
        secret_roles
            .iter()
            .all(|r| r["rules"][0]["verbs"] == json!(["get"]) && r["rules"][0]["apiGroups"] == json!([""]))
    );
    let bindings = docs.iter().filter(|d| d["kind"] == "RoleBinding" && d["roleRef"]["name"] == "steward-secrets");
    assert_eq!(bindings.count(), 2);
    let cluster_role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    assert!(!cluster_role.to_string().contains("secrets"), "nothing cluster-wide on Secrets");
}
