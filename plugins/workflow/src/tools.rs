//! Which tools a Workflow calls, and which of them a healthy MCPServer in its namespace offers.

use std::collections::BTreeSet;

use serde_json::Value;
use steward_sdk::RawObject;

use crate::spec::{Step, WorkflowSpec};

/// Every tool the workflow may call (steps, nested steps, `onFailure`, condition tools), sorted and unique.
pub fn referenced_tools(spec: &WorkflowSpec) -> Vec<String> {
    let mut tools = BTreeSet::new();
    for step in spec.steps.iter().chain(&spec.on_failure) {
        collect_tools(step, &mut tools);
    }
    tools.into_iter().collect()
}

fn collect_tools(step: &Step, tools: &mut BTreeSet<String>) {
    let condition_tool = step.condition.as_ref().and_then(|c| c.tool.as_ref());
    for tool in step.tool.iter().chain(condition_tool) {
        if !tool.trim().is_empty() {
            tools.insert(tool.clone());
        }
    }
    for child in step.children() {
        collect_tools(child, tools);
    }
}

/// How many steps the workflow has, counting nested steps and `onFailure` steps.
pub fn step_count(spec: &WorkflowSpec) -> usize {
    fn count(step: &Step) -> usize {
        1 + step.children().map(count).sum::<usize>()
    }
    spec.steps.iter().chain(&spec.on_failure).map(count).sum()
}

/// The tools offered by the servers among `servers` that are up and healthy.
///
/// A server counts when its last status has `state` `Running` or `Connected`,
/// `health` `Healthy`, and its `tools` already carry its `toolPrefix`. A
/// server without a status, or with one that does not parse, offers nothing.
pub fn available_tools(servers: &[RawObject]) -> BTreeSet<String> {
    let mut tools = BTreeSet::new();
    for server in servers {
        let Some(status) = server.status_as::<Value>() else {
            continue;
        };
        let up = matches!(status.get("state").and_then(Value::as_str), Some("Running" | "Connected"));
        let healthy = status.get("health").and_then(Value::as_str) == Some("Healthy");
        if !(up && healthy) {
            continue;
        }
        let listed = status.get("tools").and_then(Value::as_array).into_iter().flatten();
        tools.extend(listed.filter_map(Value::as_str).map(str::to_string));
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_sdk::testing::object;

    fn spec(v: Value) -> WorkflowSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn referenced_tools_include_nested_on_failure_and_condition_tools() {
        let s = spec(json!({
            "steps": [
                {"tool": "b_tool", "condition": {"tool": "probe", "expect": {"success": true}}},
                {"forEach": {"items": [1], "steps": [{"tool": "a_tool"}, {"parallel": [{"tool": "deep"}, {"tool": "b_tool"}]}]}}
            ],
            "onFailure": [{"tool": "rollback"}]
        }));
        assert_eq!(referenced_tools(&s), ["a_tool", "b_tool", "deep", "probe", "rollback"]);
        assert_eq!(step_count(&s), 7);
    }

    #[test]
    fn only_up_and_healthy_servers_offer_tools() {
        let with_status = |name: &str, status: Value| {
            let mut o = object("MCPServer", name, json!({"type": "stdio", "command": "x"}));
            o.status = Some(status.to_string());
            o
        };
        let servers = [
            with_status("git", json!({"state": "Running", "health": "Healthy", "tools": ["git_status"]})),
            with_status("api", json!({"state": "Connected", "health": "Healthy", "tools": ["api_get"]})),
            with_status("down", json!({"state": "Failed", "health": "Unhealthy", "tools": ["down_x"]})),
            with_status("probing", json!({"state": "Running", "health": "Unknown", "tools": ["probe_x"]})),
            with_status("garbled", json!("not an object")),
            object("MCPServer", "new", json!({})),
        ];
        let got: Vec<_> = available_tools(&servers).into_iter().collect();
        assert_eq!(got, ["api_get", "git_status"]);
    }
}
