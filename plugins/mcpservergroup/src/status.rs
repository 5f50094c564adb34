//! The MCPServerGroup status: which servers were selected, which are ready, and the tools they offer together.

use std::collections::BTreeSet;

use serde_json::Value;
use steward_sdk::prelude::*;

use crate::spec::McpServerGroupSpec;

/// The kind whose objects a group selects.
pub const SERVER_KIND: &str = "MCPServer";

/// What an MCPServerGroup reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct McpServerGroupStatus {
    /// How many MCPServers the selector selects.
    pub selected: usize,
    /// How many of them are ready (Running or Connected, and Healthy).
    pub ready: usize,
    /// The selected servers, sorted by name.
    pub members: Vec<Member>,
    /// Every tool a ready member lists, sorted and unique.
    pub tools: Vec<String>,
    /// The required tools that no ready member lists, sorted.
    pub missing_tools: Vec<String>,
}

/// One selected MCPServer as the group sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// Whether it is Running or Connected, and Healthy.
    pub ready: bool,
    /// Its reported `state`, or `Unknown` before it reported one.
    pub state: String,
    /// How many tools it contributes (0 unless ready).
    pub tool_count: usize,
}

/// What one server's last status says: its state, and its tools when it is ready.
fn member(server: &RawObject) -> (Member, Vec<String>) {
    let status = server.status_as::<Value>().filter(Value::is_object).unwrap_or(Value::Null);
    let state = status.get("state").and_then(Value::as_str);
    let healthy = status.get("health").and_then(Value::as_str) == Some("Healthy");
    let ready = matches!(state, Some("Running" | "Connected")) && healthy;
    let tools: Vec<String> = if ready {
        status
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    } else {
        Vec::new()
    };
    let m = Member {
        name: server.name.clone(),
        ready,
        state: state.unwrap_or("Unknown").to_string(),
        tool_count: tools.len(),
    };
    (m, tools)
}

/// Reconciles a valid group in `namespace`: lists the namespace's MCPServers (the host records
/// the read, so any server change reconciles the group again) and reports what the selected ones offer.
pub fn outcome(ctx: &Context, namespace: &str, spec: &McpServerGroupSpec) -> Outcome<McpServerGroupStatus> {
    let mut servers: Vec<RawObject> =
        ctx.list(SERVER_KIND, Some(namespace)).into_iter().filter(|s| spec.selector.matches(&s.labels)).collect();
    servers.sort_by(|a, b| a.name.cmp(&b.name));
    let mut members = Vec::with_capacity(servers.len());
    let mut tools = BTreeSet::new();
    for server in &servers {
        let (m, offered) = member(server);
        tools.extend(offered);
        members.push(m);
    }
    let required: BTreeSet<&String> = spec.required_tools.iter().collect();
    let missing: Vec<String> = required.into_iter().filter(|t| !tools.contains(*t)).cloned().collect();
    let selected = members.len();
    let ready = members.iter().filter(|m| m.ready).count();
    let condition = if selected == 0 {
        Condition::new(
            "Ready",
            false,
            "NoServersSelected",
            format!("no MCPServer in namespace {namespace} matches the selector"),
        )
    } else if ready == 0 {
        Condition::new("Ready", false, "NoServersReady", format!("none of the {selected} selected MCPServers is ready"))
    } else if !missing.is_empty() {
        Condition::new("Ready", false, "ToolsMissing", format!("no ready member offers: {}", missing.join(", ")))
    } else {
        let n = tools.len();
        Condition::new(
            "Ready",
            true,
            "ServersReady",
            format!("{ready} of {selected} selected MCPServers are ready, offering {n} tools"),
        )
    };
    ctx.log(steward_sdk::LogLevel::Debug, &format!("selected {selected}, ready {ready}"));
    let status =
        McpServerGroupStatus { selected, ready, members, tools: tools.into_iter().collect(), missing_tools: missing };
    Outcome::status(status).condition(condition)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use steward_sdk::testing::{FakeHost, Read, object, reconcile};
    use steward_sdk::{ConditionStatus, RawObject};

    use crate::McpServerGroup;

    fn server(name: &str, labels: &[(&str, &str)], status: Option<Value>) -> RawObject {
        let mut o = object("MCPServer", name, json!({"type": "stdio", "command": "x"}));
        o.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        o.status = status.map(|s| s.to_string());
        o
    }

    fn up(tools: &[&str]) -> Option<Value> {
        Some(json!({"state": "Running", "health": "Healthy", "tools": tools}))
    }

    fn group(spec: Value) -> RawObject {
        object("MCPServerGroup", "team-a", spec)
    }

    fn host() -> FakeHost {
        let mut elsewhere = server("far", &[("team", "a")], up(&["far_tool"]));
        elsewhere.namespace = "other".into();
        FakeHost::new()
            .with(server("git", &[("team", "a")], up(&["git_log", "git_status"])))
            .with(server(
                "api",
                &[("team", "a"), ("env", "prod")],
                Some(json!({"state": "Connected", "health": "Healthy", "tools": ["api_get", "git_log"]})),
            ))
            .with(server(
                "broken",
                &[("team", "a")],
                Some(json!({"state": "Failed", "health": "Unhealthy", "tools": ["broken_x"]})),
            ))
            .with(server("new", &[("team", "a")], None))
            .with(server("b", &[("team", "b")], up(&["b_tool"])))
            .with(elsewhere)
    }

    #[test]
    fn reports_members_tools_and_readiness_of_the_selected_servers() {
        let h = host();
        let out =
            reconcile::<McpServerGroup>(&h, &group(json!({"selector": {"matchLabels": {"team": "a"}}})), &[]).unwrap();
        let st = out.status.unwrap();
        assert_eq!((st.selected, st.ready), (4, 2), "team b and the other namespace are not selected");
        let names: Vec<_> =
            st.members.iter().map(|m| (m.name.as_str(), m.ready, m.state.as_str(), m.tool_count)).collect();
        assert_eq!(
            names,
            [
                ("api", true, "Connected", 2),
                ("broken", false, "Failed", 0),
                ("git", true, "Running", 2),
                ("new", false, "Unknown", 0)
            ]
        );
        assert_eq!(st.tools, ["api_get", "git_log", "git_status"], "a failed server's tools do not count");
        assert!(st.missing_tools.is_empty());
        let c = &out.conditions[0];
        assert_eq!((c.type_.as_str(), c.status, c.reason.as_str()), ("Ready", ConditionStatus::True, "ServersReady"));
        assert_eq!(c.message, "2 of 4 selected MCPServers are ready, offering 3 tools");
        assert_eq!(h.reads(), [Read::List { kind: "MCPServer".into(), namespace: Some("default".into()) }]);
    }

    #[test]
    fn required_tools_no_ready_member_offers_are_missing() {
        let spec = json!({"selector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
                          "requiredTools": ["git_log", "deploy", "broken_x", "deploy"]});
        let out = reconcile::<McpServerGroup>(&host(), &group(spec), &[]);
        // The duplicate is refused by validation before reconcile runs.
        assert!(out.is_err());
        let spec = json!({"selector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
                          "requiredTools": ["git_log", "deploy", "broken_x"]});
        let out = reconcile::<McpServerGroup>(&host(), &group(spec), &[]).unwrap();
        assert_eq!(out.status.unwrap().missing_tools, ["broken_x", "deploy"]);
        let c = &out.conditions[0];
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "ToolsMissing"));
        assert_eq!(c.message, "no ready member offers: broken_x, deploy");
    }

    #[test]
    fn no_selected_or_no_ready_server_is_not_ready_and_says_which() {
        let out =
            reconcile::<McpServerGroup>(&host(), &group(json!({"selector": {"matchLabels": {"team": "z"}}})), &[])
                .unwrap();
        assert_eq!(out.status.unwrap().selected, 0);
        assert_eq!(out.conditions[0].reason, "NoServersSelected");
        assert_eq!(out.conditions[0].message, "no MCPServer in namespace default matches the selector");

        let spec = json!({"selector": {"matchExpressions": [{"key": "team", "operator": "Exists"},
                                                              {"key": "env", "operator": "DoesNotExist"}]},
                          "requiredTools": ["git_log"]});
        let h = FakeHost::new().with(server("new", &[("team", "a")], None)).with(server(
            "broken",
            &[("team", "a")],
            Some(json!("garbled")),
        ));
        let out = reconcile::<McpServerGroup>(&h, &group(spec), &[]).unwrap();
        let st = out.status.unwrap();
        assert_eq!((st.selected, st.ready, st.missing_tools.as_slice()), (2, 0, &["git_log".to_string()][..]));
        assert_eq!(out.conditions[0].reason, "NoServersReady");
        assert_eq!(out.conditions[0].status, ConditionStatus::False);
    }

    #[test]
    fn an_empty_selector_selects_the_whole_namespace() {
        let st = reconcile::<McpServerGroup>(&host(), &group(json!({})), &[]).unwrap().status.unwrap();
        assert_eq!(st.selected, 5);
        assert_eq!(st.tools, ["api_get", "b_tool", "git_log", "git_status"]);
    }

    #[test]
    fn status_json_has_the_documented_keys() {
        let out = reconcile::<McpServerGroup>(&host(), &group(json!({})), &[]).unwrap();
        let v = serde_json::to_value(out.status.unwrap()).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["members", "missingTools", "ready", "selected", "tools"]);
        assert_eq!(
            v["members"][0].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["name", "ready", "state", "toolCount"]
        );
    }
}
