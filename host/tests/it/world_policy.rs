//! World reconcilers end to end, in filesystem mode: the bundled `toolpolicy` plugin over the
//! `examples/toolpolicy` example computes effective tool policies across Namespace →
//! MCPServerGroup → MCPServer, writes one EffectiveToolPolicy per server (capability
//! `children`), and the WorkflowRun plugin refuses a step whose tool they deny; a change is one
//! new round; a world over its limits fails whole on every surface and recovers by itself.

use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::host::{Host, free_port, synced};

const T: Duration = Duration::from_secs(90);

/// A copy of `examples/toolpolicy` under a temporary directory, listening on a free port, with
/// `extra` appended to its `plugins.toolpolicy` settings.
fn example(extra: &str) -> Host {
    let src = steward_plugin_build::workspace_root().join("examples/toolpolicy");
    let root = tempfile::tempdir().unwrap();
    let dst = root.path().join("examples/toolpolicy");
    for d in ["resources", "plugins", "bin"] {
        std::fs::create_dir_all(dst.join(d)).unwrap();
    }
    let port = free_port();
    let config = std::fs::read_to_string(src.join("steward.yaml")).unwrap();
    assert!(config.contains("127.0.0.1:7879"), "the example listens on 7879:\n{config}");
    let mut config = config.replace("127.0.0.1:7879", &format!("127.0.0.1:{port}"));
    config.push_str("queue: { initial_backoff: 100ms, max_backoff: 1s, debounce: 50ms }\n");
    config += &common::host::shared_cache_line(&config);
    let config = config.replace("  toolpolicy:\n", &format!("  toolpolicy:\n{extra}"));
    std::fs::write(dst.join("steward.yaml"), config).unwrap();
    // The run comes once the policies are computed (`add_run`): a run that reached its step
    // before the first round would rightly call the tool.
    for entry in std::fs::read_dir(src.join("resources")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n != "workflows.yaml") {
            std::fs::copy(&path, dst.join("resources").join(path.file_name().unwrap())).unwrap();
        }
    }
    for p in ["mcpserver", "mcpservergroup", "workflow", "workflowrun", "toolpolicy"] {
        common::install(&common::wasm(p), &dst.join("plugins").join(format!("{p}.wasm")));
    }
    let server = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(server, dst.join("bin").join(steward_plugin_build::EXAMPLE_MCP)).unwrap();
    Host::with_config(root, dst.join("steward.yaml"), port)
}

/// The spec of an object, as the API serves it.
async fn spec(h: &Host, key: &str) -> Value {
    h.api().get(&format!("/api/v1/resources/{key}/spec")).await.unwrap_or_else(|e| panic!("{key}: {e}"))
}

fn condition<'a>(v: &'a Value, type_: &str) -> Option<&'a Value> {
    v["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// The host condition `WorldRounds` of the toolpolicy world, as the overview lists it.
async fn world_condition(h: &Host) -> Option<Value> {
    let v = h.api().get("/api/v1/overview").await.ok()?;
    v["conditions"].as_array()?.iter().find(|c| c["type"] == "WorldRounds" && c["subject"] == "toolpolicy").cloned()
}

async fn wait_world(h: &Host, status: &str) -> Value {
    let holds = |c: &Option<Value>| c.as_ref().is_some_and(|c| c["status"] == status);
    common::eventually(T, format!("WorldRounds {status}"), async || world_condition(h).await, holds).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn policies_merge_along_the_topology_and_a_workflow_run_obeys_them() {
    let mut h = example("");
    h.start().await;
    let dir = h.dir.path().join("examples/toolpolicy");

    // Server `everything`: its own policy's defaults are the most specific.
    let e = h
        .wait_object("EffectiveToolPolicy/default/everything", T, "computed and Synced", |v| {
            synced(v) && v.is_some_and(|v| v["status"]["current"] == true)
        })
        .await
        .unwrap();
    assert_eq!(e["status"]["decidedBy"], "everything-can-add", "{e:#}");
    let s = spec(&h, "EffectiveToolPolicy/default/everything").await;
    assert_eq!(strings(&s["allow"]), ["x_ex_echo", "x_ex_add"], "{s:#}");
    // Server `clock`: the group's defaults (no policy of its own).
    let c = h.wait_object("EffectiveToolPolicy/default/clock", T, "computed", synced).await.unwrap();
    assert_eq!(c["status"]["decidedBy"], "platform-read-only", "{c:#}");
    let s = spec(&h, "EffectiveToolPolicy/default/clock").await;
    assert_eq!(strings(&s["allow"]), ["x_ex_echo", "x_clk_time"], "{s:#}");

    // Each policy says what it affects; a policy whose target is missing says so.
    let p = h.wait_object("ToolPolicy/default/platform-read-only", T, "Synced", synced).await.unwrap();
    assert_eq!(strings(&p["status"]["effectiveTargets"]), ["clock"], "{p:#}");
    let missing = h
        .wait_object("ToolPolicy/default/for-a-missing-server", T, "TargetNotFound", |v| {
            v.and_then(|v| condition(v, "Accepted")).is_some_and(|c| c["reason"] == "TargetNotFound")
        })
        .await
        .unwrap();
    assert_eq!(condition(&missing, "Accepted").unwrap()["status"], "False", "{missing:#}");

    // The run: step `hello` is called, step `refused` is refused before any call.
    let src = steward_plugin_build::workspace_root().join("examples/toolpolicy/resources/workflows.yaml");
    std::fs::copy(src, dir.join("resources/workflows.yaml")).unwrap();
    let run = h
        .wait_object("WorkflowRun/default/denied-run", T, "refused by the policy", |v| {
            v.and_then(|v| condition(v, "Ready")).is_some_and(|c| c["reason"] == "ToolDenied")
        })
        .await
        .unwrap();
    let text = run.to_string();
    assert!(text.contains("x_ex_fail") && text.contains("everything"), "{run:#}");

    // The world is green, on the API and in the metrics.
    let cond = wait_world(&h, "True").await;
    assert_eq!(cond["reason"], "RoundSucceeded", "{cond:#}");
    assert!(h.metric("steward_world_rounds_total", &["plugin=\"toolpolicy\"", "result=\"ok\""]).await >= 1.0);
    let rounds = h.metric("steward_world_rounds_total", &["plugin=\"toolpolicy\"", "result=\"ok\""]).await;

    // A change is a new round: without the server-level policy, `everything` falls back to the
    // group's rules, now decided (and owned) by the group's policy.
    let policies = std::fs::read_to_string(dir.join("resources/policies.yaml")).unwrap();
    let cut = policies.find("# Server level").expect("the example has a server-level policy");
    let end = policies[cut..].find("\n---\n").map(|i| cut + i + 5).unwrap();
    let tmp = dir.join("policies.tmp");
    std::fs::write(&tmp, format!("{}{}", &policies[..cut], &policies[end..])).unwrap();
    std::fs::rename(&tmp, dir.join("resources/policies.yaml")).unwrap();
    h.wait_object("EffectiveToolPolicy/default/everything", T, "the group's rules", |v| {
        v.is_some_and(|v| v["status"]["decidedBy"] == "platform-read-only")
    })
    .await;
    let s = spec(&h, "EffectiveToolPolicy/default/everything").await;
    assert_eq!(strings(&s["allow"]), ["x_ex_echo", "x_clk_time"], "{s:#}");
    let p = h
        .wait_object("ToolPolicy/default/platform-read-only", T, "both servers", |v| {
            v.is_some_and(|v| strings(&v["status"]["effectiveTargets"]).len() == 2)
        })
        .await
        .unwrap();
    assert_eq!(strings(&p["status"]["effectiveTargets"]), ["clock", "everything"], "{p:#}");
    assert!(h.metric("steward_world_rounds_total", &["plugin=\"toolpolicy\"", "result=\"ok\""]).await > rounds);
    let cond = wait_world(&h, "True").await;
    assert_eq!(cond["reason"], "RoundSucceeded");

    // A new status of an object of another plugin's kind in the world is a round too (the
    // topology carries statuses): the server `clock` killed from outside reports its restart.
    let clock = h
        .wait_object("MCPServer/default/clock", T, "Running", |v| v.is_some_and(|v| v["status"]["pid"].is_u64()))
        .await
        .unwrap();
    let pid = clock["status"]["pid"].as_u64().unwrap();
    let rounds = h.metric("steward_world_rounds_total", &["plugin=\"toolpolicy\"", "result=\"ok\""]).await;
    assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    h.wait_object("MCPServer/default/clock", T, "restarted", |v| {
        v.is_some_and(|v| v["status"]["pid"].as_u64().is_some_and(|p| p != pid))
    })
    .await;
    let ok_rounds = async || h.metric("steward_world_rounds_total", &["plugin=\"toolpolicy\"", "result=\"ok\""]).await;
    common::eventually(T, "a round after the server's status changed", ok_rounds, |n| *n > rounds).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_world_over_its_limit_fails_whole_on_every_surface_and_recovers_by_itself() {
    // 2 servers, 1 group, 4 policies, 2 effective policies and the namespace: 10 objects.
    let mut h = example("    world_objects: 10\n");
    h.start().await;
    let dir = h.dir.path().join("examples/toolpolicy");
    h.wait_object("EffectiveToolPolicy/default/clock", T, "computed", synced).await;
    wait_world(&h, "True").await;

    // Two more policies: 12 objects, over the limit. The round fails whole.
    let extra = "apiVersion: steward.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: extra-a}\n\
                 spec: {targetRef: {kind: MCPServer, name: clock}, defaults: {deny: [\"x_clk_sleep\"]}}\n---\n\
                 apiVersion: steward.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: extra-b}\n\
                 spec: {targetRef: {kind: MCPServer, name: clock}, overrides: {deny: [\"*\"]}}\n";
    std::fs::write(dir.join("resources/extra.yaml"), extra).unwrap();
    let cond = wait_world(&h, "False").await;
    let message = cond["message"].as_str().unwrap_or_default();
    assert_eq!(cond["reason"], "RoundFailed", "{cond:#}");
    assert!(message.contains("12 objects") && message.contains("world_objects"), "{message}");
    // Every own object shows the round's error; nothing of a round was applied.
    let p = h
        .wait_object("ToolPolicy/default/platform-read-only", T, "in error", |v| {
            v.is_some_and(|v| v["lastError"].as_str().is_some_and(|e| e.contains("world_objects")))
        })
        .await
        .unwrap();
    assert_ne!(p["phase"], "Synced", "{p:#}");
    let s = spec(&h, "EffectiveToolPolicy/default/clock").await;
    assert_eq!(strings(&s["allow"]), ["x_ex_echo", "x_clk_time"], "the last good round stands: {s:#}");
    assert!(h.metric("steward_world_rounds_total", &["plugin=\"toolpolicy\"", "result=\"error\""]).await >= 1.0);
    let (code, out, err) = h.cli(&["status"]);
    assert!(
        out.contains("WorldRounds") || err.contains("WorldRounds"),
        "steward status names it: {code}\n{out}\n{err}"
    );

    // The repair: back under the limit, the next round succeeds and every surface clears.
    std::fs::remove_file(dir.join("resources/extra.yaml")).unwrap();
    let cond = wait_world(&h, "True").await;
    assert_eq!(cond["reason"], "RoundSucceeded", "{cond:#}");
    h.wait_object("ToolPolicy/default/platform-read-only", T, "Synced again", synced).await;

    // A kind of the world that is not served (disabled here) fails the round with its name; enabled again, it clears.
    let (code, out, err) = h.cli(&["kinds", "disable", "MCPServer"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let cond = wait_world(&h, "False").await;
    assert!(cond["message"].as_str().is_some_and(|m| m.contains("kind MCPServer")), "{cond:#}");
    h.wait_object("ToolPolicy/default/platform-read-only", T, "in error", |v| {
        v.is_some_and(|v| v["lastError"].as_str().is_some_and(|e| e.contains("kind MCPServer")))
    })
    .await;
    let (code, out, err) = h.cli(&["kinds", "enable", "MCPServer"]);
    assert_eq!(code, 0, "{out}\n{err}");
    wait_world(&h, "True").await;
    h.wait_object("ToolPolicy/default/platform-read-only", T, "Synced again", synced).await;
}
