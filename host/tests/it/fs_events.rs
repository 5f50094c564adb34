//! Filesystem mode records the same events as Kubernetes mode, in the host's own history
//! (`GET /api/v1/resources/KIND/NS/NAME/events`): the real binary, real files, a real MCP server.

use std::time::Duration;

use serde_json::Value;

use crate::common::host::{Host, noop};

const T: Duration = Duration::from_secs(60);

fn server(command: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: srv\nspec:\n  type: stdio\n  command: \"{command}\"\n  autoStart: true\n  timeout: 10\n"
    )
}

fn events(key: &str) -> String {
    format!("/api/v1/resources/{key}/events")
}

/// The object's Ready condition in its view.
fn ready(v: &Value) -> Option<Value> {
    v["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready").cloned()
}

/// Whether the event list `v` has one of `type_` with `reason`.
fn has(v: &Value, type_: &str, reason: &Value) -> bool {
    v.as_array().is_some_and(|all| all.iter().any(|e| e["type"] == type_ && e["reason"] == *reason))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_mode_records_readiness_changes_once_and_every_finalize() {
    let mut h = Host::new("");
    h.write("srv.yaml", &server("/nonexistent/steward-fs-events-no-such-prog"));
    h.write("n.yaml", &noop("n1", "v"));
    h.start().await;

    // A server whose command does not exist: a Warning with its Ready condition's reason and message.
    let srv = "MCPServer/default/srv";
    let failed = h.wait_object(srv, T, "Failed", |v| v.is_some_and(|v| v["status"]["state"] == "Failed")).await;
    let cond = ready(&failed.unwrap()).expect("a Ready condition");
    assert_eq!(cond["status"], "False");
    let told =
        h.wait_get(&events(srv), T, "a Warning naming Ready's reason", |v| has(v, "Warning", &cond["reason"])).await;
    let warning = told.as_array().unwrap().iter().find(|e| e["reason"] == cond["reason"]).unwrap().clone();
    assert_eq!(warning["message"], cond["message"], "{warning:#}");
    assert_eq!(warning["object"], srv);
    assert!(told.as_array().unwrap().iter().all(|e| e["type"] == "Warning"), "no Normal event: {told:#}");

    // Ready from the start: one Normal event with the condition's reason.
    let n1 = "Noop/default/n1";
    let reason = Value::from("Echoed");
    h.wait_get(&events(n1), T, "a Normal Echoed", |v| has(v, "Normal", &reason)).await;

    // A restart, and a reconcile that changes nothing: nothing recorded again.
    assert!(h.terminate().success());
    h.start().await;
    h.api().post(&format!("/api/v1/resources/{n1}/reconcile")).await.unwrap();
    let ran = |v: Option<&Value>| {
        v.is_some_and(|v| v["history"].as_array().is_some_and(|hs| hs.iter().any(|e| e["reason"] == "manualTrigger")))
    };
    h.wait_object(n1, T, "reconciled after the restart", ran).await;
    let after = h.api().get(&events(n1)).await.unwrap();
    assert_eq!(after, serde_json::json!([]), "recorded again after a restart");

    // Fixing the spec: Ready turns True, and a Normal event says so.
    let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    h.write("srv.yaml", &server(&bin.display().to_string()));
    let healthy = |v: Option<&Value>| v.and_then(ready).is_some_and(|c| c["status"] == "True");
    let fixed = h.wait_object(srv, T, "Ready", healthy).await.unwrap();
    let cond = ready(&fixed).unwrap();
    h.wait_get(&events(srv), T, "a Normal event for Ready turning True", |v| has(v, "Normal", &cond["reason"])).await;

    // Deleting: the object is forgotten, its `Finalized` event stays in the history.
    h.remove("n.yaml");
    h.wait_object(n1, T, "forgotten", |v| v.is_none()).await;
    let done = h.wait_get(&events(n1), T, "Finalized", |v| has(v, "Normal", &Value::from("Finalized"))).await;
    assert_eq!(done.as_array().unwrap().len(), 1, "{done:#}");
    h.terminate();
}
