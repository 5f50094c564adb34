//! Which tools a Workflow calls, and whether each is offered: by a healthy MCPServer of its
//! namespace, or (a `workflow_<name>` tool) by another Workflow that is itself complete.

use std::collections::BTreeSet;

use serde_json::Value;
use steward_sdk::RawObject;

use crate::spec::WorkflowSpec;
use crate::validate;

/// The prefix of the tool each Workflow is offered as: `workflow_<name>`.
pub const WORKFLOW_TOOL_PREFIX: &str = "workflow_";

/// The prefix of muster's own management tools, which Steward does not offer.
pub const CORE_TOOL_PREFIX: &str = "core_";

/// muster's workflow management tools: named `workflow_*`, but offered by muster itself.
pub const WORKFLOW_MANAGEMENT_TOOLS: [&str; 9] = [
    "workflow_list",
    "workflow_get",
    "workflow_create",
    "workflow_update",
    "workflow_delete",
    "workflow_validate",
    "workflow_available",
    "workflow_execution_list",
    "workflow_execution_get",
];

/// The tool a Workflow named `name` is offered as.
pub fn workflow_tool_name(name: &str) -> String {
    format!("{WORKFLOW_TOOL_PREFIX}{name}")
}

/// The Workflow that `tool` runs, when it is a `workflow_<name>` tool (not a management tool).
pub fn nested_workflow(tool: &str) -> Option<&str> {
    let name = tool.strip_prefix(WORKFLOW_TOOL_PREFIX)?;
    (!WORKFLOW_MANAGEMENT_TOOLS.contains(&tool) && !name.is_empty()).then_some(name)
}

/// The management tools the Steward host offers itself (at `/mcp` and to the `tools`
/// capability), always available; the host's `mcp::core` lists the same names (its write tools,
/// `core_*_create`, `_update` and `_delete`, are offered only with `api.mcp.management:
/// read-write`, so they are not counted here).
pub const STEWARD_CORE_TOOLS: [&str; 16] = [
    "core_mcpserver_list",
    "core_mcpserver_get",
    "core_mcpserver_validate",
    "core_workflow_list",
    "core_workflow_get",
    "core_workflow_validate",
    "core_workflow_available",
    "core_workflow_execution_list",
    "core_workflow_execution_get",
    "core_events",
    "core_config_get",
    "core_config_get_aggregator",
    "core_resource_list",
    "core_resource_get",
    "core_resource_reconcile",
    "core_plugin_list",
];

/// The host's write management tools, offered only when its config says
/// `api.mcp.management: read-write` ([`steward_sdk::settings::mcp_management_writes`]).
pub const STEWARD_CORE_WRITE_TOOLS: [&str; 6] = [
    "core_mcpserver_create",
    "core_mcpserver_update",
    "core_mcpserver_delete",
    "core_workflow_create",
    "core_workflow_update",
    "core_workflow_delete",
];

/// Whether the host offers the management tool `tool` now: one of [`STEWARD_CORE_TOOLS`], or
/// of [`STEWARD_CORE_WRITE_TOOLS`] when `writes` are offered.
pub fn is_steward_core_tool(tool: &str, writes: bool) -> bool {
    STEWARD_CORE_TOOLS.contains(&tool) || (writes && STEWARD_CORE_WRITE_TOOLS.contains(&tool))
}

/// Whether `tool` is one of muster's management tools (`core_*`, `workflow_list`, ...) that the
/// Steward host does not offer now (see [`is_steward_core_tool`]).
pub fn is_muster_management_tool(tool: &str) -> bool {
    let writes = steward_sdk::settings::mcp_management_writes();
    (tool.starts_with(CORE_TOOL_PREFIX) && !is_steward_core_tool(tool, writes))
        || WORKFLOW_MANAGEMENT_TOOLS.contains(&tool)
}

/// muster's `referencedTools`: the tools of the top-level steps, of their sub-steps and of
/// their conditions, sorted and unique (`onFailure` is not counted, as in muster).
pub fn referenced_tools(spec: &WorkflowSpec) -> Vec<String> {
    let mut tools = BTreeSet::new();
    for step in &spec.steps {
        tools.extend(step.tool.iter().cloned());
        tools.extend(step.condition.iter().filter_map(|c| c.tool.clone()));
        for sub in step.children() {
            tools.insert(sub.tool.clone());
            tools.extend(sub.condition.iter().filter_map(|c| c.tool.clone()));
        }
    }
    tools.retain(|t| !t.is_empty());
    tools.into_iter().collect()
}

/// muster's `stepCount`: the top-level steps.
pub fn step_count(spec: &WorkflowSpec) -> usize {
    spec.steps.len()
}

/// The tools whose availability decides the workflow's, as muster decides it: the tools of
/// the steps, their sub-steps and `onFailure` (not condition tools), in order, unique.
pub fn required_tools(spec: &WorkflowSpec) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let steps = spec.steps.iter().flat_map(|s| s.tool.iter().cloned().chain(s.children().map(|c| c.tool.clone())));
    let rollback = spec.on_failure.iter().map(|s| s.tool.clone());
    steps.chain(rollback).filter(|t| !t.is_empty() && seen.insert(t.clone())).collect()
}

/// The tools offered by the servers among `servers` that are up and healthy.
///
/// A server counts when its last status has `state` `Running` or `Connected` and `health`
/// `Healthy`; its `tools` already carry their final names. A server without a status, or with
/// one that does not parse, offers nothing.
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

/// Why a tool is not available.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Missing {
    /// No Running/Connected, Healthy MCPServer of the namespace lists it.
    NotOffered(String),
    /// One of muster's management tools, which Steward does not offer.
    Management(String),
    /// A `workflow_<name>` tool whose Workflow does not exist.
    NoWorkflow(String),
    /// A `workflow_<name>` tool whose Workflow is invalid.
    InvalidWorkflow(String),
}

impl Missing {
    /// The missing tool's name.
    pub fn tool(&self) -> &str {
        match self {
            Self::NotOffered(t) | Self::Management(t) | Self::NoWorkflow(t) | Self::InvalidWorkflow(t) => t,
        }
    }
}

/// What resolving a workflow's tools found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The workflow's own required tools that are available, sorted.
    pub available: Vec<String>,
    /// Every unavailable tool, deep ones of nested workflows included, each once, in order.
    pub missing: Vec<Missing>,
}

/// Resolves the required tools of the workflow `name` with `spec`: `offered` are the tools of
/// the namespace's healthy servers, `get_workflow` reads another Workflow of the namespace.
///
/// A `workflow_<other>` tool is available when `other` exists, is valid, and all its own
/// tools are (transitively); a cycle stops descending, as in muster.
pub fn resolve(
    name: &str,
    spec: &WorkflowSpec,
    offered: &BTreeSet<String>,
    get_workflow: &dyn Fn(&str) -> Option<RawObject>,
) -> Resolution {
    let mut r = Resolution::default();
    let mut path = vec![name.to_string()];
    for tool in required_tools(spec) {
        let mut found = Vec::new();
        missing_of(&tool, offered, get_workflow, &mut path, &mut found);
        if found.is_empty() {
            r.available.push(tool);
        }
        for m in found {
            if !r.missing.iter().any(|have| have.tool() == m.tool()) {
                r.missing.push(m);
            }
        }
    }
    r.available.sort();
    r
}

fn missing_of(
    tool: &str,
    offered: &BTreeSet<String>,
    get_workflow: &dyn Fn(&str) -> Option<RawObject>,
    path: &mut Vec<String>,
    out: &mut Vec<Missing>,
) {
    if is_muster_management_tool(tool) {
        return out.push(Missing::Management(tool.to_string()));
    }
    if is_steward_core_tool(tool, steward_sdk::settings::mcp_management_writes()) {
        return;
    }
    let Some(other) = nested_workflow(tool) else {
        if !offered.contains(tool) {
            out.push(Missing::NotOffered(tool.to_string()));
        }
        return;
    };
    if path.iter().any(|p| p == other) {
        return;
    }
    let Some(raw) = get_workflow(other) else {
        return out.push(Missing::NoWorkflow(tool.to_string()));
    };
    let Some(spec) = raw.spec_as::<WorkflowSpec>().ok().filter(|s| validate::validate(s).is_empty()) else {
        return out.push(Missing::InvalidWorkflow(tool.to_string()));
    };
    path.push(other.to_string());
    for t in required_tools(&spec) {
        missing_of(&t, offered, get_workflow, path, out);
    }
    path.pop();
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
    fn musters_counting_of_steps_and_referenced_tools() {
        let s = spec(json!({
            "steps": [
                {"id": "a", "tool": "b_tool", "condition": {"tool": "probe", "expect": {"success": true}}},
                {"id": "l", "forEach": {"items": "{{ .input.l }}", "steps": [{"id": "x", "tool": "a_tool"}]}},
                {"id": "p", "parallel": [{"id": "y", "tool": "deep", "condition": {"tool": "probe2", "expect": {"success": true}}}, {"id": "z", "tool": "b_tool"}]}
            ],
            "onFailure": [{"id": "r", "tool": "rollback"}]
        }));
        assert_eq!(referenced_tools(&s), ["a_tool", "b_tool", "deep", "probe", "probe2"]);
        assert_eq!(step_count(&s), 3);
        assert_eq!(required_tools(&s), ["b_tool", "a_tool", "deep", "rollback"]);
    }

    #[test]
    fn the_write_management_tools_count_only_when_the_host_offers_them() {
        assert!(is_steward_core_tool("core_workflow_list", false));
        assert!(!is_steward_core_tool("core_workflow_create", false));
        assert!(is_steward_core_tool("core_workflow_create", true));
        assert!(!is_steward_core_tool("core_service_start", true));
        // Outside the host (no STEWARD_MCP_MANAGEMENT), writes are not offered.
        assert!(is_muster_management_tool("core_mcpserver_delete"));
        assert!(!is_muster_management_tool("core_mcpserver_get"));
    }

    #[test]
    fn only_up_and_healthy_servers_offer_tools() {
        let with_status = |name: &str, status: Value| {
            let mut o = object("MCPServer", name, json!({"type": "stdio", "command": "x"}));
            o.status = Some(status.to_string());
            o
        };
        let servers = [
            with_status("git", json!({"state": "Running", "health": "Healthy", "tools": ["x_git_status"]})),
            with_status("api", json!({"state": "Connected", "health": "Healthy", "tools": ["x_api_get"]})),
            with_status("auth", json!({"state": "Auth Required", "health": "Unknown", "tools": ["x_auth_x"]})),
            with_status("probing", json!({"state": "Running", "health": "Unknown", "tools": ["probe_x"]})),
            with_status("garbled", json!("not an object")),
            object("MCPServer", "new", json!({})),
        ];
        let got: Vec<_> = available_tools(&servers).into_iter().collect();
        assert_eq!(got, ["x_api_get", "x_git_status"]);
    }

    #[test]
    fn nested_workflows_core_tools_and_cycles() {
        let offered: BTreeSet<String> = ["x_git_status".to_string()].into();
        let wf = |name: &str, tools: &[&str]| {
            let steps: Vec<Value> =
                tools.iter().enumerate().map(|(i, t)| json!({"id": format!("s{i}"), "tool": t})).collect();
            object("Workflow", name, json!({"steps": steps}))
        };
        let others = [
            wf("ok", &["x_git_status"]),
            wf("deep", &["workflow_ok", "x_gone"]),
            wf("loop", &["workflow_main", "x_git_status"]),
            object("Workflow", "broken", json!({"steps": []})),
        ];
        let get = |n: &str| others.iter().find(|o| o.name == n).cloned();
        let main = spec(json!({"steps": [
            {"id": "a", "tool": "workflow_ok"}, {"id": "b", "tool": "workflow_deep"}, {"id": "c", "tool": "workflow_loop"},
            {"id": "d", "tool": "workflow_nobody"}, {"id": "e", "tool": "workflow_broken"},
            {"id": "f", "tool": "core_service_list"}, {"id": "g", "tool": "workflow_list"},
            {"id": "h", "tool": "core_mcpserver_list"}
        ]}));
        let r = resolve("main", &main, &offered, &get);
        assert_eq!(
            r.available,
            ["core_mcpserver_list", "workflow_loop", "workflow_ok"],
            "a cycle stops descending, as in muster; the host's own core tools are offered"
        );
        assert_eq!(
            r.missing,
            [
                Missing::NotOffered("x_gone".into()),
                Missing::NoWorkflow("workflow_nobody".into()),
                Missing::InvalidWorkflow("workflow_broken".into()),
                Missing::Management("core_service_list".into()),
                Missing::Management("workflow_list".into()),
            ]
        );
    }
}
