//! Kubernetes Events follow readiness: a Warning when an object's Ready condition turns False,
//! a Normal one when it turns True, nothing again after a leader change, and one `Finalized`
//! for every finalized object. Asserted by listing Events through the API server, on the fake
//! and the real one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common;
use crate::common::kube::{Kube, T, kube_e2e, mcp_ar, start, status, wait_obj};

/// Objects created, then deleted.
const N: usize = 50;

/// The MCPServer's Ready condition, when it reports one.
fn ready(o: Option<&DynamicObject>) -> Option<Value> {
    status(o)["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready").cloned()
}

/// The Events about objects of `kind` in the test's namespace by their name, with their series
/// count (1 for a single one).
async fn recorded(k: &Kube, kind: &str) -> BTreeMap<String, u64> {
    k.events()
        .await
        .into_iter()
        .filter(|e| e["regarding"]["kind"] == kind)
        .map(|e| {
            let count = e["series"]["count"].as_u64().unwrap_or(1);
            (e["metadata"]["name"].as_str().unwrap_or_default().to_string(), count)
        })
        .collect()
}

/// Waits for an Event about `name` that `f` accepts, and returns it.
async fn event_about(k: &Kube, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let is = |e: &Value| e["regarding"]["name"] == name && f(e);
    let all =
        common::eventually(T, format!("{name}: {what}"), async || k.events().await, |all| all.iter().any(is)).await;
    all.into_iter().find(is).unwrap()
}

kube_e2e! {
    async fn events_follow_readiness_survive_a_leader_change_and_every_finalize_has_one(k: Kube) {
        let _heavy = common::heavy().await;
        k.install_crds(&["noop", "mcpserver"]).await;
        let election = format!(
            "leaderElection: {{ leaseName: steward-events, namespace: {}, leaseDuration: 3s, renewGrace: 1s }}",
            k.ns
        );
        let (_da, cfg_a) = k.host_dir(&["noop", "mcpserver"], &election);
        let (_db, cfg_b) = k.host_dir(&["noop", "mcpserver"], &election);
        let a = start(&cfg_a, k.client.clone()).await;
        common::eventually(T, "a leads", async || a.is_ready(), |ready| *ready).await;

        // A server whose command does not exist: a Warning with its Ready condition's reason and message.
        let servers = k.api(&mcp_ar());
        let mut srv = DynamicObject::new("srv", &mcp_ar()).within(&k.ns);
        srv.data = json!({
            "spec": { "type": "stdio", "command": "/nonexistent/steward-events-no-such-prog", "autoStart": true, "timeout": 10 }
        });
        servers.create(&PostParams::default(), &srv).await.unwrap();
        let failed = wait_obj(&servers, "srv", "Failed", |o| status(o)["state"] == "Failed").await;
        let cond = ready(failed.as_ref()).expect("a Ready condition");
        assert_eq!(cond["status"], "False", "{cond:#}");
        let warning = event_about(&k, "srv", "a Warning naming Ready's reason", |e| {
            e["type"] == "Warning" && e["reason"] == cond["reason"]
        })
        .await;
        assert_eq!(warning["note"], cond["message"], "{warning:#}");
        assert_eq!(warning["regarding"]["kind"], "MCPServer");
        let about_srv = |all: &[Value]| -> Vec<Value> {
            all.iter().filter(|e| e["regarding"]["name"] == "srv").cloned().collect()
        };
        assert!(
            about_srv(&k.events().await).iter().all(|e| e["type"] == "Warning"),
            "a server that is not ready gets no Normal event: {:#?}",
            about_srv(&k.events().await)
        );
        let srv_key = k.key("MCPServer", "srv");
        assert!(
            a.events_of(&srv_key).iter().any(|e| e.type_ == "Warning" && e.reason == cond["reason"]),
            "the host's own history has it too: {:?}",
            a.events_of(&srv_key)
        );

        // N objects that are ready at once: one Normal Event each, with their Ready condition's reason.
        let noops = k.noops();
        let names: Vec<String> = (0..N).map(|i| format!("n{i:02}")).collect();
        for n in &names {
            noops.create(&PostParams::default(), &k.noop(n, "1")).await.unwrap();
        }
        let synced_events = async || {
            let all = k.events().await;
            let who: BTreeSet<String> = all
                .iter()
                .filter(|e| e["regarding"]["kind"] == "Noop" && e["reason"] == "Echoed" && e["type"] == "Normal")
                .filter_map(|e| e["regarding"]["name"].as_str().map(str::to_string))
                .collect();
            who.len()
        };
        common::eventually(T, format!("a Normal Echoed Event for each of the {N} objects"), synced_events, |n| *n == N)
            .await;

        // A leader change: b takes over from a stopped a, and records nothing for what did not
        // change. (The server's process does change: only the leader runs services, so b starts
        // it anew, and what that start tells is recorded.)
        let before = recorded(&k, "Noop").await;
        let b = start(&cfg_b, k.client.clone()).await;
        // A standby is ready (its caches are synced) without leading.
        common::eventually(T, "b stands by, ready", async || (b.is_ready(), b.is_leader()), |s| *s == (true, false))
            .await;
        a.shutdown(Duration::from_secs(5)).await;
        common::eventually(T, "b leads", async || b.is_leader(), |leads| *leads).await;
        let keys: Vec<_> = names.iter().map(|n| k.key("Noop", n)).collect();
        let reconciled_all = async || {
            let done = keys.iter().filter(|key| b.view(key).is_some_and(|v| !v.history.is_empty())).count();
            (done, b.busy())
        };
        let what = format!("b reconciles all {N} objects and goes idle");
        common::eventually(T, what, reconciled_all, |(done, busy)| *done == N && *busy == 0).await;
        let told: Vec<_> = keys.iter().flat_map(|key| b.events_of(key)).collect();
        assert!(told.is_empty(), "the new leader told again what did not change: {told:#?}");
        assert_eq!(recorded(&k, "Noop").await, before, "a leader change recorded Events about unchanged objects");

        // Fixing the spec: Ready turns True, and a Normal Event says so with the condition's reason.
        let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
        let fix = json!({ "spec": { "command": bin.display().to_string() } });
        servers.patch("srv", &PatchParams::default(), &Patch::Merge(&fix)).await.unwrap();
        let fixed = wait_obj(&servers, "srv", "Ready", |o| ready(o).is_some_and(|c| c["status"] == "True")).await;
        let cond = ready(fixed.as_ref()).unwrap();
        let normal = event_about(&k, "srv", "a Normal Event for Ready turning True", |e| {
            e["type"] == "Normal" && e["reason"] == cond["reason"]
        })
        .await;
        assert_eq!(normal["note"], cond["message"], "{normal:#}");
        assert!(b.events_of(&srv_key).iter().any(|e| e.type_ == "Normal" && e.reason == cond["reason"]));

        // Deleting N objects: N `Finalized` Events, each about its own object.
        noops.delete_collection(&DeleteParams::default(), &ListParams::default()).await.unwrap();
        let gone = async || noops.list(&ListParams::default()).await.map_or(usize::MAX, |l| l.items.len());
        common::eventually(T, "every object finalized and gone", gone, |left| *left == 0).await;
        let finalized = async || {
            let all = k.events().await;
            let who: Vec<String> = all
                .iter()
                .filter(|e| e["reason"] == "Finalized" && e["type"] == "Normal")
                .filter_map(|e| e["regarding"]["name"].as_str().map(str::to_string))
                .collect();
            who
        };
        let who = common::eventually(T, format!("{N} Finalized Events"), finalized, |who| who.len() >= N).await;
        assert_eq!(who.iter().cloned().collect::<BTreeSet<_>>(), names.iter().cloned().collect(), "one per object");
        assert_eq!(who.len(), N, "exactly one per object: {who:?}");
        for key in &keys {
            let last = b.events_of(key).pop().map(|e| e.reason);
            assert_eq!(last.as_deref(), Some("Finalized"), "{key}");
        }
        b.shutdown(Duration::from_secs(5)).await;
    }
}
