//! Capability `children`: a plugin's object owns the child objects its reconcile lists. In
//! filesystem mode they are objects of the host; in Kubernetes mode objects in the cluster,
//! applied, watched, pruned and removed with their owner (no garbage collector assumed).
//!
//! The `parent` test plugin owns exactly the children its spec lists and reports what it
//! observes of them in its status.

use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use steward::model::{ObjectKey, Reason};

use crate::common;
use crate::common::host::Host;
use crate::common::kube::{Kube, T, kube_e2e, noop_ar, status, wait_obj};

/// The grant the tests give `parent`: Noop (served by `noop`) and ConfigMap children.
const GRANT: &str =
    "  parent: { capabilities: [children], children: { kinds: [test.steward.dev/v1/Noop, v1/ConfigMap] } }\n";

fn noop_child(name: &str, value: &str) -> Value {
    json!({"apiVersion": "test.steward.dev/v1", "kind": "Noop", "name": name, "body": {"spec": {"value": value}}})
}

fn config_map_child(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "body": {"data": data}})
}

fn parent_doc(name: &str, namespace: &str, children: Value) -> Value {
    json!({
        "apiVersion": "test.steward.dev/v1",
        "kind": "Parent",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"children": children},
    })
}

/// `(child, exists, phase, value)` of each child the parent's status says it observed.
fn observed(status: &Value) -> Vec<(String, bool, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    status["observed"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| (s(&o["child"]), o["exists"].as_bool().unwrap_or(false), s(&o["phase"]), s(&o["value"])))
                .collect()
        })
        .unwrap_or_default()
}

fn seen(child: &str, phase: &str, value: &str) -> (String, bool, String, String) {
    (child.into(), true, phase.into(), value.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_filesystem_mode_children_of_a_served_kind_are_objects_of_the_host_that_follow_their_owner() {
    let mut h = Host::new(GRANT);
    common::install(&common::wasm("parent"), &h.dir.path().join("plugins/parent.wasm"));
    h.start().await;
    let write = |children: Value| {
        h.write("p.yaml", &serde_json::to_string(&parent_doc("p", "default", children)).unwrap());
    };
    write(json!([noop_child("kid-a", "one"), noop_child("kid-b", "two")]));

    // The children are objects of the host: reconciled by their plugin, their owner as their source.
    let a = h.wait_object("Noop/default/kid-a", T, "the child reconciled", |v| {
        v.is_some_and(|v| v["phase"] == "Synced" && v["status"]["value"] == "one")
    });
    let a = a.await.unwrap();
    assert_eq!(a["owner"], "Parent/default/p", "{a:#}");
    assert_eq!(a["source"], "owner Parent/default/p", "{a:#}");
    let file = h.resources().join("noops/default/kid-a.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# Child of Parent/default/p,"), "{text}");

    // The owner is handed its children's status, and is queued again as it changes.
    let both = vec![seen("Noop/kid-a", "Synced", "one"), seen("Noop/kid-b", "Synced", "two")];
    h.wait_object("Parent/default/p", T, "both children observed Synced", |v| {
        v.is_some_and(|v| observed(&v["status"]) == both)
    })
    .await;

    // A changed child is rewritten; one no longer listed is removed, file and object.
    write(json!([noop_child("kid-a", "uno")]));
    h.wait_object("Noop/default/kid-a", T, "the child follows", |v| v.is_some_and(|v| v["status"]["value"] == "uno"))
        .await;
    h.wait_object("Noop/default/kid-b", T, "the pruned child gone", |v| v.is_none()).await;
    assert!(!h.resources().join("noops/default/kid-b.yaml").exists());
    let one = vec![seen("Noop/kid-a", "Synced", "uno")];
    h.wait_object("Parent/default/p", T, "one child observed", |v| v.is_some_and(|v| observed(&v["status"]) == one))
        .await;

    // A child deleted by hand comes back: its owner depends on it.
    std::fs::remove_file(&file).unwrap();
    common::eventually(T, h.waiting_for("the deleted child written again"), async || file.exists(), |e| *e).await;
    h.wait_object("Noop/default/kid-a", T, "the child back", |v| v.is_some_and(|v| v["phase"] == "Synced")).await;

    // A child of a kind no plugin serves has nowhere to go in this mode: an error on the owner.
    write(json!([noop_child("kid-a", "uno"), config_map_child("cm", json!({"k": "v"}))]));
    let p = h.wait_object("Parent/default/p", T, "refused: no plugin serves ConfigMap", |v| {
        v.is_some_and(|v| v["lastError"].as_str().is_some_and(|e| e.contains("no plugin serves v1/ConfigMap")))
    });
    let why = p.await.unwrap()["lastError"].as_str().unwrap().to_string();
    assert!(why.contains("child v1/ConfigMap cm"), "{why}");

    // A child of a kind the grant does not list is refused, naming the key to add.
    let misbehave =
        json!({"apiVersion": "test.steward.dev/v1", "kind": "Misbehave", "name": "m", "body": {"spec": {}}});
    write(json!([noop_child("kid-a", "uno"), misbehave]));
    let p = h.wait_object("Parent/default/p", T, "refused: not granted", |v| {
        v.is_some_and(|v| v["lastError"].as_str().is_some_and(|e| e.contains("children.kinds")))
    });
    let why = p.await.unwrap()["lastError"].as_str().unwrap().to_string();
    assert!(why.contains("test.steward.dev/v1/Misbehave") && why.contains("plugins.parent.children.kinds"), "{why}");
    assert!(h.object("Misbehave/default/m").await.is_none(), "a refused child was made");

    // The owner deleted: its children go with it.
    write(json!([noop_child("kid-a", "uno")]));
    h.wait_object("Parent/default/p", T, "Synced again", |v| v.is_some_and(|v| v["phase"] == "Synced")).await;
    h.remove("p.yaml");
    h.wait_object("Parent/default/p", T, "the owner gone", |v| v.is_none()).await;
    h.wait_object("Noop/default/kid-a", T, "its child gone", |v| v.is_none()).await;
    assert!(!file.exists(), "the child's file stayed");
    h.terminate();
}

/// The `Parent` kind.
fn parent_ar() -> ApiResource {
    ApiResource {
        group: "test.steward.dev".into(),
        version: "v1".into(),
        api_version: "test.steward.dev/v1".into(),
        kind: "Parent".into(),
        plural: "parents".into(),
    }
}

fn config_map_ar() -> ApiResource {
    ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

fn writes(engine: &steward::engine::Engine, op: &str) -> u64 {
    let metrics = engine.render_metrics();
    let prefix = format!("steward_kube_writes_total{{kind=\"Parent\",op=\"{op}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

kube_e2e! {
    /// On the fake and the real API server: create, observe, update, prune, recreate, revert,
    /// refuse, and remove with the owner (neither server has a garbage collector).
    async fn in_kubernetes_mode_children_are_applied_watched_pruned_and_removed_with_their_owner(k: Kube) {
        scenario(k).await;
    }
}

async fn scenario(k: Kube) {
    let (ns, client) = (k.ns.clone(), k.client.clone());
    let ns = ns.as_str();
    k.install_crds(&["parent", "noop"]).await;
    let (_dir, cfg) = k.host_dir(&["parent", "noop"], "leaderElection: { enabled: false }");
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("plugins:\n", &format!("plugins:\n{GRANT}")))
        .unwrap();
    let engine = common::kube::start(&cfg, client.clone()).await;
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &parent_ar());
    let cms: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &config_map_ar());
    let noops: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &noop_ar());
    let create = |children: Value| -> DynamicObject { serde_json::from_value(parent_doc("p", ns, children)).unwrap() };

    parents
        .create(
            &PostParams::default(),
            &create(json!([config_map_child("cm", json!({"a": "1", "b": "dropped later"})), noop_child("kid", "one")])),
        )
        .await
        .unwrap();
    let p = wait_obj(&parents, "p", "Synced", |o| status(o)["steward"]["phase"] == "Synced").await.unwrap();
    let uid = p.metadata.uid.clone().unwrap();

    // The ConfigMap: applied with a controller owner reference and the owner's marks.
    let cm =
        wait_obj(&cms, "cm", "the ConfigMap made", |o| o.is_some_and(|o| o.data["data"]["a"] == "1")).await.unwrap();
    let r = &cm.metadata.owner_references.as_ref().expect("an owner reference")[0];
    assert_eq!(
        (r.kind.as_str(), r.name.as_str(), r.uid.as_str(), r.controller),
        ("Parent", "p", uid.as_str(), Some(true))
    );
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("steward.dev/owner-kind").map(String::as_str), Some("Parent"));
    assert_eq!(labels.get("steward.dev/owner-name").map(String::as_str), Some("p"));
    let managers: Vec<String> = match k.fake_server() {
        Some(server) => {
            server.field_managers("", "configmaps", Some(ns), "cm").into_iter().map(|m| m.manager).collect()
        }
        None => cm.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect(),
    };
    assert!(managers.iter().any(|m| m == "steward"), "{managers:?}");

    // The Noop child is a custom resource the host serves: it is reconciled like any other.
    wait_obj(&noops, "kid", "the Noop child reconciled", |o| status(o)["value"] == "one").await;

    // The owner is handed what was observed: the ConfigMap (with its uid) and the reconciled Noop.
    let p = wait_obj(&parents, "p", "both children observed", |o| {
        let seen = observed(status(o));
        seen.len() == 2 && seen[0].0 == "ConfigMap/cm" && seen[1] == self::seen("Noop/kid", "Synced", "one")
    })
    .await
    .unwrap();
    assert_eq!(status(Some(&p))["observed"][0]["uid"], cm.metadata.uid.clone().unwrap());

    // A reconcile with nothing changed writes no child. A reconcile queued by the children's
    // own watch events may still be running when the wait above ends (a loaded machine), so
    // the check is that the host settles: of a few reconciles in a row with nothing changed,
    // one writes nothing (a host that re-applied unchanged children would write in each).
    let applied = writes(&engine, "child_apply");
    assert!(applied >= 2, "{applied} child writes");
    let key = ObjectKey::new("Parent", ns, "p");
    let runs = async || engine.view(&key).map_or(0, |v| v.history.iter().map(|h| h.count).sum::<u32>());
    let mut rounds = Vec::new();
    for _ in 0..4 {
        let (written, before) = (writes(&engine, "child_apply"), runs().await);
        engine.enqueue(&key, Reason::ManualTrigger);
        common::eventually(T, "one more reconcile", runs, |n| *n > before).await;
        rounds.push(writes(&engine, "child_apply") - written);
        if rounds.last() == Some(&0) {
            break;
        }
    }
    assert_eq!(rounds.last(), Some(&0), "unchanged children were written again in each reconcile: {rounds:?}");

    // An update of the owner updates the ConfigMap; the Noop no longer listed is deleted.
    let patch = json!({"spec": {"children": [config_map_child("cm", json!({"a": "1"}))]}});
    parents.patch("p", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // A key the plugin stops setting goes, though the live child still has every key it wants.
    wait_obj(&cms, "cm", "b dropped", |o| o.is_some_and(|o| o.data["data"] == json!({"a": "1"}))).await;
    wait_obj(&noops, "kid", "the pruned Noop gone", |o| o.is_none()).await;

    // Someone else's edit of a child is put back: its watch queued the owner.
    let tamper = json!({"data": {"a": "tampered"}});
    cms.patch("cm", &PatchParams::default(), &Patch::Merge(&tamper)).await.unwrap();
    wait_obj(&cms, "cm", "the edit reverted", |o| o.is_some_and(|o| o.data["data"]["a"] == "1")).await;

    // A child deleted by hand comes back (a new object).
    let old_uid = cms.get("cm").await.unwrap().metadata.uid;
    cms.delete("cm", &DeleteParams::default()).await.unwrap();
    wait_obj(&cms, "cm", "recreated", |o| o.is_some_and(|o| o.metadata.uid != old_uid)).await;

    // A child of a kind the grant does not list is refused on the owner, naming the key to add.
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "body": {"spec": {}}});
    let q: DynamicObject = serde_json::from_value(parent_doc("q", ns, json!([deployment]))).unwrap();
    parents.create(&PostParams::default(), &q).await.unwrap();
    let q = wait_obj(&parents, "q", "refused", |o| {
        status(o)["steward"]["lastError"].as_str().is_some_and(|e| e.contains("children.kinds"))
    })
    .await
    .unwrap();
    let why = status(Some(&q))["steward"]["lastError"].as_str().unwrap().to_string();
    assert!(why.contains("`apps/v1/Deployment`") && why.contains("plugins.parent.children.kinds"), "{why}");

    // The owner deleted: the host removes its children itself, then lets it go.
    parents.delete("p", &DeleteParams::default()).await.unwrap();
    wait_obj(&cms, "cm", "the child gone with its owner", |o| o.is_none()).await;
    wait_obj(&parents, "p", "the owner gone", |o| o.is_none()).await;
    parents.delete("q", &DeleteParams::default()).await.unwrap();
    wait_obj(&parents, "q", "gone", |o| o.is_none()).await;
    engine.shutdown(Duration::from_secs(5)).await;
}

/// What `steward rbac` prints for a config granting `children` is enough, and checked where RBAC
/// is enforced: a host acting as its ServiceAccount (impersonated) on the real API server
/// applies, prunes, watches and deletes ConfigMap children. Real API server only: the fake
/// authorizes every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rbac_steward_rbac_prints_for_children_is_enough_on_a_real_api_server() {
    let Some(k) = Kube::real("children-rbac").await else { return };
    k.install_crds(&["parent", "noop"]).await;
    let (_dir, cfg) = k.host_dir(&["parent", "noop"], "leaderElection: { enabled: false }");
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("plugins:\n", &format!("plugins:\n{GRANT}")))
        .unwrap();
    let name = format!("steward-{}", k.ns);
    let out = crate::common::steward()
        .args(["rbac", "--namespace", &k.ns, "--service-account", "steward", "--name", &name, "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "steward rbac: {}", String::from_utf8_lossy(&out.stderr));
    let rbac = String::from_utf8(out.stdout).unwrap();
    assert!(rbac.contains("configmaps"), "no rule for the granted ConfigMap children:\n{rbac}");
    k.apply_yaml(&rbac).await;
    let as_steward = k.client_as_service_account("steward").await;
    // The impersonation is in force: Secrets, which the grant does not name, are refused.
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        as_steward.clone(),
        &k.ns,
        &ApiResource {
            group: "".into(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
            plural: "secrets".into(),
        },
    );
    match secrets.list(&Default::default()).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("the ServiceAccount could list Secrets, or failed otherwise: {other:?}"),
    }

    let engine = common::kube::start(&cfg, as_steward).await;
    let parents = k.api(&parent_ar());
    let cms = k.api(&config_map_ar());
    let two = json!([config_map_child("a", json!({"k": "1"})), config_map_child("b", json!({"k": "2"}))]);
    let p: DynamicObject = serde_json::from_value(parent_doc("p", &k.ns, two)).unwrap();
    parents.create(&PostParams::default(), &p).await.unwrap();
    for cm in ["a", "b"] {
        wait_obj(&cms, cm, "made", |o| o.is_some()).await;
    }
    let patch = json!({"spec": {"children": [config_map_child("a", json!({"k": "3"}))]}});
    parents.patch("p", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_obj(&cms, "a", "updated", |o| o.is_some_and(|o| o.data["data"]["k"] == "3")).await;
    wait_obj(&cms, "b", "pruned", |o| o.is_none()).await;
    let p = wait_obj(&parents, "p", "observes its child", |o| observed(status(o)).len() == 1).await.unwrap();
    assert_eq!(status(Some(&p))["observed"][0]["child"], "ConfigMap/a");
    parents.delete("p", &DeleteParams::default()).await.unwrap();
    wait_obj(&cms, "a", "gone with its owner", |o| o.is_none()).await;
    wait_obj(&parents, "p", "the owner gone", |o| o.is_none()).await;
    let metrics = engine.render_metrics();
    assert!(!metrics.contains("category=\"forbidden\""), "a write was forbidden:\n{metrics}");
    engine.shutdown(Duration::from_secs(5)).await;
}
