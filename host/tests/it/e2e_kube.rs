//! Kubernetes mode end to end, over real loopback HTTP: status, generations, finalizers,
//! restarts, leader election, and watches per enabled kind.
//!
//! Each test written with [`kube_e2e!`] runs twice: `NAME::fake` against the in-process fake API
//! server, and `NAME::real` against the real kube-apiserver the test process shares
//! (`testing/realkube`; skipped under `STEWARD_KUBE=fake`). On the real one the test works in a
//! namespace of its own. The tests that need what only the fake can do (inject faults) are
//! plain tests, and say so.
//!
//! The plugins are the same `.wasm` files the filesystem tests load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use steward::model::ObjectKey;
use steward_fake_apiserver::Fault;

use crate::common;
use crate::common::kube::kube_e2e;
use crate::common::kube::*;

kube_e2e! {
    async fn create_update_and_status_only_changes_are_reconciled_as_a_user_expects(k: Kube) {
        let (engine, _dir) = k.host(&["noop"], "").await;
        let api = k.noops();

        // Create: the finalizer goes on, the status is written with observedGeneration and the host's fields.
        api.create(&PostParams::default(), &k.noop("a", "one")).await.unwrap();
        let a = wait_obj(&api, "a", "Synced with observedGeneration 1", |o| {
            status(o)["observedGeneration"] == 1 && status(o)["steward"]["phase"] == "Synced"
        })
        .await
        .unwrap();
        assert!(has_finalizer(&a), "{a:#?}");
        let s = status(Some(&a));
        assert_eq!(s["value"], "one");
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "True");
        assert!(s["conditions"][0]["lastTransitionTime"].is_string(), "{s:#}");
        assert!(s["steward"]["lastReconcileTime"].is_string(), "{s:#}");
        assert_eq!(s["steward"]["retryCount"], 0);
        common::eventually(T, "ready", async || engine.is_ready(), |ready| *ready).await;

        // Update: the generation advances and is observed.
        api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": "two"}}))).await.unwrap();
        let a = wait_obj(&api, "a", "generation 2 observed", |o| status(o)["observedGeneration"] == 2).await.unwrap();
        assert_eq!(a.metadata.generation, Some(2));
        assert_eq!(status(Some(&a))["value"], "two");
        assert_eq!(status(Some(&a))["seenGeneration"], 2);
        let before = k.reconciles(&engine, "a");

        // A status-only update (another writer) does not make the object reconcile.
        let mut fresh = api.get("a").await.unwrap();
        fresh.data["status"]["value"] = json!("tampered");
        api.replace_status("a", &PostParams::default(), &fresh).await.unwrap();
        // A later change to another object is seen after it (one watch, in order): a barrier.
        api.create(&PostParams::default(), &k.noop("b", "x")).await.unwrap();
        wait_obj(&api, "b", "b Synced", |o| status(o)["observedGeneration"] == 1).await;
        assert_eq!(k.reconciles(&engine, "a"), before, "a status-only change reconciled the object");
        assert_eq!(api.get("a").await.unwrap().data["status"]["value"], "tampered");

        // The host's own status writes did not loop either: a converged object is written once per change.
        let metrics = engine.render_metrics();
        assert!(metrics.contains("steward_kube_writes_total{kind=\"Noop\",op=\"status\"}"), "{metrics}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

/// Fake API server only: the conflicts are injected faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_status_write_is_retried_and_written() {
    let Cluster { server, client, engine, dir: _dir } = Cluster::start(&["noop"], "").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    let conflicts = server.inject(Fault::conflict().method("PUT").resource("noops").subresource("status").times(3));
    api.create(&PostParams::default(), &noop_obj("c", "v")).await.unwrap();
    let c =
        wait_obj(&api, "c", "Synced despite conflicts", |o| status(o)["steward"]["phase"] == "Synced").await.unwrap();
    assert_eq!(status(Some(&c))["observedGeneration"], 1);
    assert_eq!(conflicts.used(), 3, "the status write did not meet the conflicts");
    let metrics = engine.render_metrics();
    assert!(metrics.contains("steward_kube_write_conflicts_total{kind=\"Noop\",op=\"status\"} 3"), "{metrics}");
    engine.shutdown(Duration::from_secs(5)).await;
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

kube_e2e! {
    async fn delete_runs_finalize_stops_the_services_and_removes_the_finalizer(k: Kube) {
        let (engine, _dir) = k.host(&["mcpserver"], "").await;
        let api = k.api(&mcp_ar());
        let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
        let mut o = DynamicObject::new("git", &mcp_ar()).within(&k.ns);
        let command = bin.display().to_string();
        o.data = json!({
            "spec": { "type": "stdio", "command": command, "autoStart": true, "toolPrefix": "ex_", "timeout": 10 }
        });
        api.create(&PostParams::default(), &o).await.unwrap();
        let running = wait_obj(&api, "git", "Running", |o| status(o)["state"] == "Running").await.unwrap();
        let pid = status(Some(&running))["pid"].as_u64().expect("a pid") as u32;
        assert!(alive(pid));
        assert!(has_finalizer(&running));

        api.delete("git", &DeleteParams::default()).await.unwrap();
        wait_obj(&api, "git", "gone", |o| o.is_none()).await;
        let stopped = format!("the MCP server {pid} to stop with its object");
        common::eventually(T, stopped, async || alive(pid), |a| !a).await;
        let key = k.key("MCPServer", "git");
        common::eventually(T, "forgotten", async || engine.view(&key), Option::is_none).await;
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

kube_e2e! {
    /// The API server is made unreachable for the restarted host by a [`Partition`] in front of it.
    async fn after_a_restart_nothing_is_deleted_before_sync_and_deletes_made_while_down_are_finalized(k: Kube) {
        k.install_crds(&["noop"]).await;
        let (_dir, cfg) = k.host_dir(&["noop"], "");
        let api = k.noops();
        let proxy = Partition::new(k.authority()).await;
        let engine = start(&cfg, proxy.client(&k).await).await;
        for n in ["keep", "drop"] {
            api.create(&PostParams::default(), &k.noop(n, n)).await.unwrap();
        }
        for n in ["keep", "drop"] {
            wait_obj(&api, n, "Synced", |o| o.is_some_and(has_finalizer) && status(o)["observedGeneration"] == 1).await;
        }
        engine.shutdown(Duration::from_secs(5)).await;
        drop(engine);

        // While the host is down, `drop` is deleted: its finalizer holds it.
        api.delete("drop", &DeleteParams::default()).await.unwrap();
        let held = api.get("drop").await.unwrap();
        assert!(held.metadata.deletion_timestamp.is_some());

        // The restarted host cannot reach the API server for a while: nothing may be taken for deleted meanwhile.
        proxy.set_cut(true);
        let engine = start(&cfg, proxy.client(&k).await).await;
        let refused = proxy.refused();
        common::eventually(T, "the host retrying", async || proxy.refused(), |n| *n >= refused + 3).await;
        assert!(engine.view(&k.key("Noop", "keep")).is_some(), "forgotten before sync");
        assert!(engine.view(&k.key("Noop", "drop")).is_some(), "finalized before sync");
        assert!(!engine.is_ready(), "ready before the caches listed");
        proxy.set_cut(false);
        assert!(api.get("keep").await.unwrap().metadata.deletion_timestamp.is_none());

        // Once listed: the deleted one is finalized and let go, the other stays Synced and held.
        wait_obj(&api, "drop", "finalized and gone", |o| o.is_none()).await;
        let keep = api.get("keep").await.unwrap();
        assert!(has_finalizer(&keep));
        assert_eq!(status(Some(&keep))["steward"]["phase"], "Synced");
        common::eventually(T, "ready", async || engine.is_ready(), |ready| *ready).await;
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

kube_e2e! {
    /// Whether the kind is watched is seen in the host's cache (an object of the kind is cached
    /// while its watch runs, and only then); on the fake, also in the server's count of watches.
    async fn a_kind_disabled_at_runtime_stops_its_watch_and_enabling_it_starts_it_again(k: Kube) {
        let (engine, dir) = k.host(&["noop"], "").await;
        let noops = ("test.steward.dev".to_string(), "noops".to_string());
        // A watch can be between two requests at any instant (the watcher reopens it): wait for the count.
        let watches = async |n: usize| {
            if let Some(server) = k.fake_server() {
                let count = async || server.watch_counts().get(&noops).copied().unwrap_or(0);
                common::eventually(T, format!("{n} watch of noops"), count, |c| *c == n).await;
            }
        };
        let cached = async |name: &str| engine.cached(&k.key("Noop", name)).is_some();
        let api = k.noops();
        api.create(&PostParams::default(), &k.noop("early", "x")).await.unwrap();
        wait_obj(&api, "early", "Synced", |o| status(o)["steward"]["phase"] == "Synced").await;
        common::eventually(T, "early in the cache", async || cached("early").await, |c| *c).await;
        watches(1).await;
        engine.set_kind_enabled("Noop", false).await.unwrap();
        common::eventually(T, "the watch of noops and its cache gone", async || cached("early").await, |c| !*c).await;
        if let Some(server) = k.fake_server() {
            let count = async || server.watch_counts().get(&noops).copied().unwrap_or(0);
            common::eventually(T, "no watch of noops", count, |n| *n == 0).await;
        }
        // Its objects say the kind is disabled, and keep their finalizer.
        let pending = |o: Option<&DynamicObject>| status(o)["steward"]["phase"] == "Pending";
        let early = wait_obj(&api, "early", "the disabled status", pending).await.unwrap();
        assert!(has_finalizer(&early));
        let why = status(Some(&early))["steward"]["lastError"].as_str().unwrap_or_default().to_string();
        assert!(why.contains("disabled") && why.contains("steward kinds enable Noop"), "{why}");
        api.create(&PostParams::default(), &k.noop("late", "x")).await.unwrap();
        engine.set_kind_enabled("Noop", true).await.unwrap();
        common::eventually(T, "the watch again: late cached", async || cached("late").await, |c| *c).await;
        watches(1).await;
        wait_obj(&api, "late", "reconciled once enabled", |o| status(o)["observedGeneration"] == 1).await;
        wait_obj(&api, "early", "Synced again", |o| status(o)["steward"]["phase"] == "Synced").await;

        // A plugin removed while running: its watch stops, and its objects keep their finalizer and say why.
        std::fs::remove_file(dir.path().join("plugins/noop.wasm")).unwrap();
        common::eventually(T, "no watch once the plugin is gone", async || cached("late").await, |c| !*c).await;
        if let Some(server) = k.fake_server() {
            let count = async || server.watch_counts().get(&noops).copied().unwrap_or(0);
            common::eventually(T, "no watch of noops", count, |n| *n == 0).await;
        }
        let late = wait_obj(&api, "late", "the unserved status", pending).await.unwrap();
        assert!(has_finalizer(&late));
        let why = status(Some(&late))["steward"]["lastError"].as_str().unwrap_or_default().to_string();
        assert!(why.contains("no plugin serves kind Noop") && why.contains("finalizer"), "{why}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

/// A TCP proxy in front of the API server that can cut its clients off (a network partition).
/// It passes bytes through, so TLS goes through it end to end.
struct Partition {
    addr: std::net::SocketAddr,
    cut: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Partition {
    /// A proxy to `upstream` (`host:port`).
    async fn new(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let (c, r, up) = (cut.clone(), refused.clone(), upstream);
        let task = tokio::spawn(async move {
            let conns = Arc::new(tokio::sync::Notify::new());
            loop {
                let Ok((mut down, _)) = listener.accept().await else { return };
                if c.load(Ordering::SeqCst) {
                    r.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let (up, c, conns) = (up.clone(), c.clone(), conns.clone());
                tokio::spawn(async move {
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(&up).await else { return };
                    let cut_now = async {
                        while !c.load(Ordering::SeqCst) {
                            tokio::select! {
                                _ = conns.notified() => {}
                                _ = common::poll_pause(50) => {}
                            }
                        }
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut upstream) => {}
                        _ = cut_now => {}
                    }
                });
            }
        });
        Self { addr, cut, refused, task }
    }

    /// Cuts every connection through it and refuses new ones, or lets them through again.
    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    /// How many connections it refused while cut.
    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// An admin client of `k`'s server through the proxy (with the kubeconfig's TLS settings).
    async fn client(&self, k: &Kube) -> Client {
        let mut config = k.config().await;
        let scheme = config.cluster_url.scheme_str().unwrap_or("http").to_string();
        config.cluster_url = format!("{scheme}://{}", self.addr).parse().unwrap();
        Client::try_from(config).unwrap()
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.task.abort();
    }
}

kube_e2e! {
    /// Replica a reaches the API server through a [`Partition`], which then cuts it off.
    async fn two_replicas_one_leads_the_other_takes_over_when_its_lease_lapses_and_never_both_reconcile(k: Kube) {
        k.install_crds(&["noop"]).await;
        let election = format!(
            "leaderElection: {{ leaseName: steward-test, namespace: {}, leaseDuration: 3s, renewGrace: 1s }}",
            k.ns
        );
        let (_da, cfg_a) = k.host_dir(&["noop"], &election);
        let (_db, cfg_b) = k.host_dir(&["noop"], &election);
        let proxy = Partition::new(k.authority()).await;
        let a = start(&cfg_a, proxy.client(&k).await).await;
        common::eventually(T, "a leads", async || a.is_leader(), |leads| *leads).await;
        let b = start(&cfg_b, k.client.clone()).await;

        // Watch both standings for the whole test: never both at once.
        let both = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (a, b, both, stop) = (a.clone(), b.clone(), both.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    if a.is_leader() && b.is_leader() {
                        both.store(true, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    common::poll_pause(5).await;
                }
            })
        };

        let api = k.noops();
        api.create(&PostParams::default(), &k.noop("x", "1")).await.unwrap();
        wait_obj(&api, "x", "Synced", |o| status(o)["observedGeneration"] == 1).await;
        assert!(k.reconciles(&a, "x") >= 1, "the leader did not reconcile");
        assert_eq!(k.reconciles(&b, "x"), 0, "the standby reconciled");
        // Once its cache has listed, the standby is ready (a rolling update needs it) and does
        // not lead; its overview names the holder.
        common::eventually(T, "b is ready", async || b.readiness(), Result::is_ok).await.unwrap();
        let seen = b.overview();
        assert!(!seen.leader && seen.lease_holder.is_some() && seen.lease_holder != seen.identity, "{seen:?}");

        // Cut the leader off: it cannot renew, steps down when its lease runs out, and b takes over.
        proxy.set_cut(true);
        common::eventually(T, "a steps down", async || a.is_leader(), |leads| !leads).await;
        common::eventually(T, "b leads", async || b.is_leader(), |leads| *leads).await;
        api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": "2"}}))).await.unwrap();
        wait_obj(&api, "x", "generation 2 observed", |o| status(o)["observedGeneration"] == 2).await;
        assert!(k.reconciles(&b, "x") >= 1, "the new leader did not reconcile");
        stop.store(true, Ordering::SeqCst);
        watcher.await.unwrap();
        assert!(!both.load(Ordering::SeqCst), "both replicas led at once");
        b.shutdown(Duration::from_secs(5)).await;
        a.shutdown(Duration::from_secs(1)).await;
    }
}

kube_e2e! {
    async fn shards_split_the_work_by_label_and_namespace(k: Kube) {
        k.install_crds(&["noop"]).await;
        let shard = |sel: &str| {
            format!("labelSelector: {sel}\nnamespaces: [{}]\nleaderElection: {{ enabled: false }}", k.ns)
        };
        let (_da, cfg_a) = k.host_dir(&["noop"], &shard("shard=a"));
        let (_db, cfg_b) = k.host_dir(&["noop"], &shard("shard=b"));
        let a = start(&cfg_a, k.client.clone()).await;
        let b = start(&cfg_b, k.client.clone()).await;
        let api = k.noops();
        for (name, label) in [("in-a", "a"), ("in-b", "b")] {
            let mut o = k.noop(name, name);
            o.metadata.labels = Some([("shard".to_string(), label.to_string())].into());
            api.create(&PostParams::default(), &o).await.unwrap();
        }
        // An object in another namespace belongs to neither shard.
        let elsewhere = k.namespace("elsewhere").await;
        let other: Api<DynamicObject> = Api::namespaced_with(k.client.clone(), &elsewhere, &noop_ar());
        let mut o = noop_obj("away", "x").within(&elsewhere);
        o.metadata.labels = Some([("shard".to_string(), "a".to_string())].into());
        other.create(&PostParams::default(), &o).await.unwrap();

        wait_obj(&api, "in-a", "Synced", |o| status(o)["observedGeneration"] == 1).await;
        wait_obj(&api, "in-b", "Synced", |o| status(o)["observedGeneration"] == 1).await;
        assert!(k.reconciles(&a, "in-a") >= 1 && k.reconciles(&a, "in-b") == 0);
        assert!(k.reconciles(&b, "in-b") >= 1 && k.reconciles(&b, "in-a") == 0);
        let away = other.get("away").await.unwrap();
        assert!(away.data.get("status").is_none() && !has_finalizer(&away), "{away:#?}");

        // An object relabelled into the other shard moves: shard a lets go of it without
        // finalizing (it was not deleted), and shard b takes it over.
        api.patch("in-a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"shard": "b"}}})))
            .await
            .unwrap();
        common::eventually(T, "shard b takes it over", async || k.reconciles(&b, "in-a"), |n| *n >= 1).await;
        let key = k.key("Noop", "in-a");
        common::eventually(T, "shard a lets go", async || a.view(&key), Option::is_none).await;
        let moved = api.get("in-a").await.unwrap();
        assert!(has_finalizer(&moved), "{moved:#?}");
        let metrics = a.render_metrics();
        assert!(
            !metrics.contains("op=\"finalize\""),
            "an object that moved to another shard was finalized as if deleted:\n{metrics}"
        );
        a.shutdown(Duration::from_secs(5)).await;
        b.shutdown(Duration::from_secs(5)).await;
    }
}

kube_e2e! {
    /// On the real server the CRD may be there already (CRDs outlive a test): applying it is an
    /// update then too.
    async fn crds_apply_installs_the_plugins_kinds_and_a_second_apply_is_an_update(k: Kube) {
        let noop = common::wasm("noop");
        let kubeconfig = k.kubeconfig.clone();
        let home = tempfile::tempdir().unwrap();
        let home_path = home.path().to_path_buf();
        let apply = move || {
            crate::common::steward()
                .args(["crds", "--apply", "--plugin"])
                .arg(&noop)
                .env("KUBECONFIG", &kubeconfig)
                .env("HOME", &home_path)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .output()
                .unwrap()
        };
        for _ in 0..2 {
            let out = tokio::task::spawn_blocking(apply.clone()).await.unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
            assert!(
                stdout.contains("customresourcedefinition.apiextensions.k8s.io/noops.test.steward.dev configured"),
                "{stdout}"
            );
        }
        let crds: Api<CustomResourceDefinition> = Api::all(k.client.clone());
        let crd = crds.get("noops.test.steward.dev").await.expect("the CRD is installed");
        let crd = serde_json::to_value(crd).unwrap();
        assert_eq!(crd["spec"]["names"]["kind"], "Noop");
        assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object(), "{crd:#}");
        // The kind is served: once the API server has established it, objects of it can be created.
        wait_established(&crds, "noops.test.steward.dev").await;
        k.noops().create(&PostParams::default(), &k.noop("served", "x")).await.unwrap();
    }
}

kube_e2e! {
    async fn phase_changes_and_failures_are_recorded_as_kubernetes_events(k: Kube) {
        let (engine, _dir) = k.host(&["noop", "misbehave"], "leaderElection: { enabled: false }").await;
        k.noops().create(&PostParams::default(), &k.noop("fine", "x")).await.unwrap();
        let ar = misbehave_ar();
        let bad = k.api(&ar);
        let mut o = DynamicObject::new("broken", &ar).within(&k.ns);
        o.data = json!({ "spec": { "behavior": "fatal" } });
        bad.create(&PostParams::default(), &o).await.unwrap();
        let broken = wait_obj(&bad, "broken", "Failed", |o| status(o)["steward"]["phase"] == "Failed").await.unwrap();
        assert!(status(Some(&broken))["steward"]["lastError"].as_str().unwrap_or("").contains("never work"));

        // Waits for the event of `name` with `reason` and `kind`; on a timeout, shows every event.
        let event = async |name: &str, reason: &str, kind: &str| {
            let is = |e: &serde_json::Value| {
                e["regarding"]["name"] == name && e["reason"] == reason && e["type"] == kind
            };
            let what = format!("a {kind} event {reason} for {name}");
            let all = common::eventually(T, what, async || k.events().await, |all| all.iter().any(is)).await;
            all.into_iter().find(is).unwrap()
        };
        // Ready from the start: a Normal event with the Ready condition's reason (no `Synced` beside it).
        let ready = event("fine", "Echoed", "Normal").await;
        assert_eq!(ready["reportingController"], "steward");
        assert_eq!(ready["regarding"]["kind"], "Noop");
        assert_eq!(ready["note"], "the value was copied");
        let failed = event("broken", "Failed", "Warning").await;
        assert!(failed["note"].as_str().unwrap_or("").contains("never work"), "{failed:#}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

kube_e2e! {
    async fn the_host_creates_and_deletes_workflow_runs_as_custom_resources(k: Kube) {
        let (engine, _dir) = k.host(&["workflowrun"], "").await;
        let ar = kube::api::ApiResource {
            group: "steward.dev".into(),
            version: "v1alpha1".into(),
            api_version: "steward.dev/v1alpha1".into(),
            kind: "WorkflowRun".into(),
            plural: "workflowruns".into(),
        };
        let api = k.api(&ar);
        common::eventually(T, "ready", async || engine.is_ready(), |ready| *ready).await;
        let obj = steward_sdk::RawObject {
            kind: "WorkflowRun".into(),
            name: "made".into(),
            namespace: k.ns.clone(),
            labels: [("origin".to_string(), "api".to_string())].into(),
            spec: json!({"workflow": "absent", "args": {"n": 1}}).to_string(),
            ..Default::default()
        };
        let key = engine.create_object(obj.clone()).await.unwrap();
        assert_eq!(key, ObjectKey::new("WorkflowRun", &k.ns, "made"));
        // The custom resource is in the cluster, and is reconciled like one a user applied: it
        // waits for its Workflow, and says so.
        let made =
            wait_obj(&api, "made", "Pending for its Workflow", |o| status(o)["phase"] == "Pending").await.unwrap();
        assert_eq!(made.data["spec"]["args"]["n"], 1);
        assert_eq!(made.metadata.labels.as_ref().and_then(|l| l.get("origin")).map(String::as_str), Some("api"));
        assert!(status(Some(&made))["message"].as_str().unwrap().contains("absent"), "{made:#?}");
        let again = engine.create_object(obj).await.unwrap_err();
        assert!(matches!(again, steward::engine::RequestError::Exists(_)), "{again}");
        // Only the kinds the host creates itself: an MCPServer names a command to run.
        let mcp = steward_sdk::RawObject {
            kind: "MCPServer".into(),
            name: "x".into(),
            namespace: k.ns.clone(),
            spec: "{}".into(),
            ..Default::default()
        };
        let refused = engine.create_object(mcp).await.unwrap_err().to_string();
        assert!(refused.contains("WorkflowRun only"), "{refused}");
        engine.delete_object(&key).await.unwrap();
        wait_obj(&api, "made", "gone (finalized)", |o| o.is_none()).await;
        engine.shutdown(Duration::from_secs(5)).await;
    }
}
