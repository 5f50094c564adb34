//! The host's management tools (`core_*`): what the HTTP API shows and does, for agents, named as muster names its own.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use super::catalog::{Entry, Target, WORKFLOW_KIND, offers_tools, workflow_ready};
use crate::engine::{Engine, RequestError};
use crate::model::{ObjectKey, is_dns_subdomain, is_kind};
use crate::tools::CallError;

/// The kind whose objects are MCP servers.
pub const SERVER_KIND: &str = "MCPServer";

/// One management tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreTool {
    /// `core_mcpserver_list`: the namespace's MCPServers, each with its state, health and tools.
    McpServerList,
    /// `core_mcpserver_get`: one MCPServer's full record.
    McpServerGet,
    /// `core_workflow_list`: the namespace's Workflows, each with whether it can run.
    WorkflowList,
    /// `core_workflow_get`: one Workflow's full record and spec.
    WorkflowGet,
    /// `core_resource_list`: the namespace's objects of one kind.
    ResourceList,
    /// `core_resource_get`: one object's full record and spec.
    ResourceGet,
    /// `core_resource_reconcile`: queues one object for a reconcile now.
    ResourceReconcile,
    /// `core_plugin_list`: the loaded plugins and their state.
    PluginList,
}

impl CoreTool {
    /// Every management tool.
    pub const ALL: [Self; 8] = [
        Self::McpServerList,
        Self::McpServerGet,
        Self::WorkflowList,
        Self::WorkflowGet,
        Self::ResourceList,
        Self::ResourceGet,
        Self::ResourceReconcile,
        Self::PluginList,
    ];

    /// Its name (muster's where muster has the same tool).
    pub fn name(self) -> &'static str {
        match self {
            Self::McpServerList => "core_mcpserver_list",
            Self::McpServerGet => "core_mcpserver_get",
            Self::WorkflowList => "core_workflow_list",
            Self::WorkflowGet => "core_workflow_get",
            Self::ResourceList => "core_resource_list",
            Self::ResourceGet => "core_resource_get",
            Self::ResourceReconcile => "core_resource_reconcile",
            Self::PluginList => "core_plugin_list",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::McpServerList => {
                "Lists the MCPServers of this namespace: name, state (Running, Connected, Failed...), health, \
                 the tools each offers under the names this endpoint uses, and the last error."
            }
            Self::McpServerGet => {
                "Gets one MCPServer of this namespace by `name`: its spec and full status record (state, \
                 health, tools, restarts, last error, conditions, recent reconciles)."
            }
            Self::WorkflowList => {
                "Lists the Workflows of this namespace: name, description, whether it is ready to run as \
                 `workflow_<name>`, its arguments and the tools it still misses."
            }
            Self::WorkflowGet => {
                "Gets one Workflow of this namespace by `name`: its spec (args, steps) and full status record."
            }
            Self::ResourceList => {
                "Lists the objects of one `kind` (for example MCPServer, Workflow, WorkflowRun) in this \
                 namespace: name, phase (Pending, Synced, Error, Failed...), its Ready condition (True, False, \
                 Unknown, Absent) with reason and message, a verdict (ok, progressing, failing), the kind's \
                 own columns, generation and last error."
            }
            Self::ResourceGet => {
                "Gets one object of this namespace by `kind` and `name`: its spec and full status record \
                 (phase, status, conditions, warnings, recent reconciles)."
            }
            Self::ResourceReconcile => {
                "Queues one object of this namespace (by `kind` and `name`) for a reconcile now; this also \
                 retries an object that has Failed. Answers at once; read the object to see the outcome."
            }
            Self::PluginList => {
                "Lists the host's plugins: name, version, state, the kinds each serves, and any load error."
            }
        }
    }

    fn schema(self) -> Value {
        let name = json!({"type": "string", "description": "The object's metadata.name."});
        let kind = json!({"type": "string", "description": "The kind, CamelCase, for example MCPServer."});
        match self {
            Self::McpServerList | Self::WorkflowList | Self::PluginList => json!({"type": "object", "properties": {}}),
            Self::McpServerGet | Self::WorkflowGet => {
                json!({"type": "object", "properties": {"name": name}, "required": ["name"]})
            }
            Self::ResourceList => json!({"type": "object", "properties": {"kind": kind}, "required": ["kind"]}),
            Self::ResourceGet | Self::ResourceReconcile => {
                json!({"type": "object", "properties": {"kind": kind, "name": name}, "required": ["kind", "name"]})
            }
        }
    }

    /// The tool named `name`, if it is one of these.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The tool as clients see it.
    pub fn tool(self) -> Tool {
        let schema = match self.schema() {
            Value::Object(m) => m,
            _ => JsonObject::new(),
        };
        let read_only = self != Self::ResourceReconcile;
        let mut annotations = ToolAnnotations::new();
        annotations.read_only_hint = Some(read_only);
        annotations.destructive_hint = Some(false);
        annotations.idempotent_hint = Some(true);
        annotations.open_world_hint = Some(false);
        Tool::new(self.name(), self.description(), Arc::new(schema)).with_annotations(annotations)
    }
}

/// Every management tool, as catalog entries.
pub fn tools() -> Vec<Entry> {
    CoreTool::ALL.into_iter().map(|t| Entry { tool: t.tool(), target: Target::Core(t) }).collect()
}

/// Runs `tool` in `namespace` with `args`. Arguments that do not fit are [`CallError::Refused`]
/// (as a JSON-RPC invalid-params error would be); an object that does not exist is the tool's
/// own failure (`isError: true`).
pub fn call(engine: &Engine, namespace: &str, tool: CoreTool, args: &Map<String, Value>) -> Result<Value, CallError> {
    let result = match tool {
        CoreTool::McpServerList => {
            let servers: Vec<Value> =
                of_namespace(engine, SERVER_KIND, namespace).map(|v| server_summary(&v)).collect();
            ok(json!({"mcpServers": servers, "total": servers.len()}))
        }
        CoreTool::WorkflowList => {
            let flows: Vec<Value> =
                of_namespace(engine, WORKFLOW_KIND, namespace).map(|v| workflow_summary(engine, &v)).collect();
            ok(json!({"workflows": flows, "total": flows.len()}))
        }
        CoreTool::McpServerGet => get(engine, &ObjectKey::new(SERVER_KIND, namespace, name_arg(args, "name")?)),
        CoreTool::WorkflowGet => get(engine, &ObjectKey::new(WORKFLOW_KIND, namespace, name_arg(args, "name")?)),
        CoreTool::ResourceList => {
            let kind = kind_arg(args)?;
            let items: Vec<Value> = of_namespace(engine, &kind, namespace).map(|v| resource_summary(&v)).collect();
            ok(json!({"kind": kind, "items": items, "total": items.len()}))
        }
        CoreTool::ResourceGet => get(engine, &ObjectKey::new(kind_arg(args)?, namespace, name_arg(args, "name")?)),
        CoreTool::ResourceReconcile => {
            let key = ObjectKey::new(kind_arg(args)?, namespace, name_arg(args, "name")?);
            match engine.trigger(&key) {
                Ok(()) => ok(json!({"queued": key.to_string()})),
                Err(e) => failed(e.to_string()),
            }
        }
        CoreTool::PluginList => {
            let plugins = serde_json::to_value(engine.plugins().statuses()).unwrap_or(Value::Null);
            ok(json!({"plugins": plugins}))
        }
    };
    Ok(serde_json::to_value(result).unwrap_or_else(|e| json!({"content": [], "isError": true, "error": e.to_string()})))
}

fn of_namespace<'a>(
    engine: &Engine,
    kind: &str,
    namespace: &'a str,
) -> impl Iterator<Item = crate::engine::ResourceView> + 'a {
    engine.views(Some(kind)).into_iter().filter(move |v| v.namespace == namespace)
}

fn get(engine: &Engine, key: &ObjectKey) -> CallToolResult {
    let Some(view) = engine.view(key) else { return failed(RequestError::NotFound(key.clone()).to_string()) };
    let spec = engine.cached(key).and_then(|o| serde_json::from_str::<Value>(&o.raw.spec).ok());
    let mut v = serde_json::to_value(view).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("spec".into(), spec.unwrap_or(Value::Null));
    }
    ok(v)
}

fn server_summary(v: &crate::engine::ResourceView) -> Value {
    let status = v.status.clone().unwrap_or(Value::Null);
    json!({
        "name": v.name,
        "phase": v.phase.to_string(),
        "ready": v.summary.ready,
        "reason": v.summary.reason,
        "message": v.summary.message,
        "verdict": v.summary.verdict,
        "state": status["state"],
        "health": status["health"],
        "offersTools": offers_tools(&status),
        "tools": status["tools"],
        "lastError": status.get("lastError").cloned().or_else(|| v.last_error.clone().map(Value::from)),
    })
}

fn workflow_summary(engine: &Engine, v: &crate::engine::ResourceView) -> Value {
    let status = v.status.clone().unwrap_or(Value::Null);
    let key = ObjectKey::new(&v.kind, &v.namespace, &v.name);
    let spec = engine.cached(&key).and_then(|o| serde_json::from_str::<Value>(&o.raw.spec).ok()).unwrap_or_default();
    json!({
        "name": v.name,
        "tool": format!("{}{}", super::catalog::WORKFLOW_PREFIX, v.name),
        "description": spec["description"],
        "ready": workflow_ready(v),
        "args": spec["args"],
        "missingTools": status["missingTools"],
        "lastError": v.last_error,
    })
}

fn resource_summary(v: &crate::engine::ResourceView) -> Value {
    json!({
        "name": v.name,
        "phase": v.phase.to_string(),
        "ready": v.summary.ready,
        "reason": v.summary.reason,
        "message": v.summary.message,
        "verdict": v.summary.verdict,
        "columns": v.summary.columns,
        "generation": v.generation,
        "observedGeneration": v.observed_generation,
        "lastError": v.last_error,
        "deleting": v.deleting,
    })
}

fn ok(v: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    r
}

fn failed(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn name_arg(args: &JsonObject, arg: &str) -> Result<String, CallError> {
    match args.get(arg).and_then(Value::as_str) {
        Some(n) if is_dns_subdomain(n) => Ok(n.to_string()),
        Some(n) => Err(CallError::Refused(format!("argument `{arg}`: {n:?} is not a valid object name"))),
        None => Err(CallError::Refused(format!("argument `{arg}` (a string) is required"))),
    }
}

fn kind_arg(args: &JsonObject) -> Result<String, CallError> {
    match args.get("kind").and_then(Value::as_str) {
        Some(k) if is_kind(k) => Ok(k.to_string()),
        Some(k) => Err(CallError::Refused(format!("argument `kind`: {k:?} is not a kind (CamelCase, like MCPServer)"))),
        None => Err(CallError::Refused("argument `kind` (a string) is required".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Workflow plugin counts these names as offered (`STEWARD_CORE_TOOLS` in
    /// plugins/workflow/src/tools.rs): a change here must be made there too.
    #[test]
    fn the_names_are_those_the_workflow_plugin_counts_as_offered() {
        let names: Vec<&str> = CoreTool::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            [
                "core_mcpserver_list",
                "core_mcpserver_get",
                "core_workflow_list",
                "core_workflow_get",
                "core_resource_list",
                "core_resource_get",
                "core_resource_reconcile",
                "core_plugin_list",
            ]
        );
    }

    #[test]
    fn every_core_tool_has_a_unique_core_name_and_an_object_schema() {
        let mut names: Vec<&str> = CoreTool::ALL.iter().map(|t| t.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CoreTool::ALL.len());
        for t in CoreTool::ALL {
            assert!(t.name().starts_with("core_"));
            assert_eq!(CoreTool::from_name(t.name()), Some(t));
            let tool = t.tool();
            assert_eq!(tool.input_schema["type"], "object", "{}", t.name());
            assert!(tool.description.is_some_and(|d| d.len() > 20));
        }
        assert_eq!(CoreTool::from_name("core_config_get"), None);
    }

    #[test]
    fn arguments_are_checked() {
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(name_arg(&args(json!({"name": "git"})), "name"), Ok("git".into()));
        assert!(matches!(name_arg(&args(json!({})), "name"), Err(CallError::Refused(m)) if m.contains("required")));
        assert!(matches!(name_arg(&args(json!({"name": "Not/Valid"})), "name"), Err(CallError::Refused(_))));
        assert!(matches!(name_arg(&args(json!({"name": 3})), "name"), Err(CallError::Refused(_))));
        assert_eq!(kind_arg(&args(json!({"kind": "MCPServer"}))), Ok("MCPServer".into()));
        assert!(matches!(kind_arg(&args(json!({"kind": "mcpserver"}))), Err(CallError::Refused(_))));
    }
}
