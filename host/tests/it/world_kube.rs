//! World reconcilers in Kubernetes mode: the bundled `toolpolicy` plugin computes effective tool
//! policies from ToolPolicies, MCPServerGroups and MCPServers in a namespace, writes each
//! EffectiveToolPolicy as a custom resource (capability `children`), follows changes, and (on the
//! fake API server, which can lose watch events on purpose) repairs what lost events hid at the
//! next relist. One body, run on the fake server and the shared real kube-apiserver.

use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::kube::kube_e2e;
use crate::common::kube::*;

fn ar(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "steward.dev".into(),
        version: "v1alpha1".into(),
        api_version: "steward.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn obj(k: &Kube, kind: &str, plural: &str, name: &str, labels: Value, spec: Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &ar(kind, plural)).within(&k.ns);
    o.metadata.labels = serde_json::from_value(labels).ok();
    o.data = json!({ "spec": spec });
    o
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// The `allow` list of an EffectiveToolPolicy (empty when it does not exist).
fn allow(o: Option<&DynamicObject>) -> Vec<&str> {
    o.map(|o| strings(&o.data["spec"]["allow"])).unwrap_or_default()
}

kube_e2e! {
    async fn tool_policies_are_merged_across_the_topology_and_lost_events_are_repaired(k: Kube) {
        install_crds(&k.client, &["mcpserver", "mcpservergroup", "toolpolicy", "workflow", "workflowrun"]).await;
        let extra = format!(
            "{}\n",
            k.kubernetes_section("relist: 2s").trim_end()
        );
        let (dir, cfg) = host_dir(&["mcpserver", "mcpservergroup", "toolpolicy", "workflow", "workflowrun"], &extra);
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "plugins:\n",
            "plugins:\n  toolpolicy: { capabilities: [children], children: { kinds: [steward.dev/v1alpha1/EffectiveToolPolicy] } }\n",
        );
        std::fs::write(&cfg, text).unwrap();
        let _engine = start(&cfg, k.client.clone()).await;
        let servers = k.api(&ar("MCPServer", "mcpservers"));
        let groups = k.api(&ar("MCPServerGroup", "mcpservergroups"));
        let policies = k.api(&ar("ToolPolicy", "toolpolicies"));
        let effective = k.api(&ar("EffectiveToolPolicy", "effectivetoolpolicies"));
        let pp = PostParams::default();
        // Servers that are not started (no process needed): the world holds them all the same.
        let server = |name: &str| {
            obj(&k, "MCPServer", "mcpservers", name, json!({"team": "platform"}),
                json!({"type": "stdio", "command": "steward-example-mcp", "autoStart": false, "toolPrefix": name}))
        };
        servers.create(&pp, &server("git")).await.unwrap();
        servers.create(&pp, &server("fs")).await.unwrap();
        groups.create(&pp, &obj(&k, "MCPServerGroup", "mcpservergroups", "platform", json!({}),
            json!({"selector": {"matchLabels": {"team": "platform"}}}))).await.unwrap();
        let ns = k.ns.clone();
        policies.create(&pp, &obj(&k, "ToolPolicy", "toolpolicies", "baseline", json!({}),
            json!({"targetRef": {"kind": "Namespace", "name": ns}, "defaults": {"deny": ["*_delete"]}}))).await.unwrap();
        policies.create(&pp, &obj(&k, "ToolPolicy", "toolpolicies", "group-read", json!({}),
            json!({"targetRef": {"kind": "MCPServerGroup", "name": "platform"}, "defaults": {"allow": ["*_read"]}}))).await.unwrap();
        policies.create(&pp, &obj(&k, "ToolPolicy", "toolpolicies", "git-write", json!({}),
            json!({"targetRef": {"kind": "MCPServer", "name": "git"}, "defaults": {"allow": ["*_read", "*_commit"]}}))).await.unwrap();

        // Each server's effective rules: its own defaults win over the group's.
        let git = wait_obj(&effective, "git", "the server's own defaults", |o| allow(o) == ["*_read", "*_commit"]).await.unwrap();
        let owner = git.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owner.first().map(|r| r.name.as_str()), Some("git-write"), "{git:#?}");
        wait_obj(&effective, "fs", "the group's defaults", |o| allow(o) == ["*_read"]).await;
        let p = wait_obj(&policies, "group-read", "Ready, affecting fs", |o| {
            strings(&status(o)["effectiveTargets"]) == ["fs"] && status(o)["steward"]["phase"] == "Synced"
        }).await.unwrap();
        assert_eq!(status(Some(&p))["targetFound"], true);

        // A change is a new round: an override at the namespace level replaces everything below.
        let over = json!({"spec": {"overrides": {"deny": ["*"]}}});
        policies.patch("baseline", &PatchParams::default(), &Patch::Merge(over)).await.unwrap();
        wait_obj(&effective, "git", "the namespace's override", |o| {
            o.is_some_and(|o| strings(&o.data["spec"]["deny"]) == ["*"])
        }).await;

        // Lost events (the fake server only): the server drops every watch event while a policy
        // goes and another changes; the periodic relist (2s here) shows the world as it is.
        if let Some(server) = k.fake_server() {
            server.lose_watch_events(true);
            policies.delete("baseline", &DeleteParams::default()).await.unwrap();
            let edit = json!({"spec": {"defaults": {"allow": ["*_read", "*_push"]}}});
            policies.patch("git-write", &PatchParams::default(), &Patch::Merge(edit)).await.unwrap();
            wait_obj(&effective, "git", "the lost edit, after a relist", |o| allow(o) == ["*_read", "*_push"]).await;
            server.lose_watch_events(false);
            wait_obj(&effective, "fs", "without the deleted override", |o| {
                o.is_some_and(|o| strings(&o.data["spec"]["deny"]).is_empty()) && allow(o) == ["*_read"]
            }).await;
        } else {
            policies.delete("baseline", &DeleteParams::default()).await.unwrap();
            wait_obj(&effective, "fs", "without the deleted override", |o| {
                o.is_some_and(|o| strings(&o.data["spec"]["deny"]).is_empty()) && allow(o) == ["*_read"]
            }).await;
        }

        // Enforced: a WorkflowRun refuses a step whose tool the server's effective policy denies,
        // before any call (server `git` allows `*_read` and `*_push` only; it is not even running).
        let workflows = k.api(&ar("Workflow", "workflows"));
        let runs = k.api(&ar("WorkflowRun", "workflowruns"));
        workflows.create(&pp, &obj(&k, "Workflow", "workflows", "wipe", json!({}),
            json!({"steps": [{"id": "wipe", "tool": "x_git_delete", "args": {}}]}))).await.unwrap();
        runs.create(&pp, &obj(&k, "WorkflowRun", "workflowruns", "wipe-1", json!({}), json!({"workflow": "wipe"})))
            .await
            .unwrap();
        let run = wait_obj(&runs, "wipe-1", "refused by the policy", |o| {
            status(o)["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| c["type"] == "Ready" && c["reason"] == "ToolDenied")
            })
        })
        .await
        .unwrap();
        let text = status(Some(&run)).to_string();
        assert!(text.contains("x_git_delete") && text.contains("git-write"), "{text}");
        drop(dir);
    }
}
