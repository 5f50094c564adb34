//! The host's management tools (`core_*`), named, argued and answered as muster's: one file per group ([`servers`], [`workflows`], [`runs`], [`events`], [`config`], [`resources`], and the [`writes`]).
//!
//! The write tools (`_create`, `_update`, `_delete`) are listed only when `api.mcp.management`
//! is `read-write`; a call of one otherwise is refused with a message naming that setting.

pub mod config;
pub mod events;
pub mod resources;
pub mod runs;
pub mod servers;
pub mod workflows;
pub mod writes;

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::catalog::{Entry, Target};
use crate::config::mcp::Management;
use crate::engine::{Engine, RequestError, ResourceView};
use crate::model::{ObjectKey, is_kind, is_object_name};
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
    /// `core_mcpserver_validate`: checks an MCPServer definition without writing it.
    McpServerValidate,
    /// `core_mcpserver_create`: writes a new MCPServer (read-write management only).
    McpServerCreate,
    /// `core_mcpserver_update`: changes the given fields of an MCPServer (read-write only).
    McpServerUpdate,
    /// `core_mcpserver_delete`: deletes an MCPServer (read-write only).
    McpServerDelete,
    /// `core_workflow_list`: the namespace's Workflows, each with whether it can run.
    WorkflowList,
    /// `core_workflow_get`: one Workflow's full record and spec.
    WorkflowGet,
    /// `core_workflow_validate`: checks a Workflow definition without writing it.
    WorkflowValidate,
    /// `core_workflow_available`: whether a Workflow can run now.
    WorkflowAvailable,
    /// `core_workflow_create`: writes a new Workflow (read-write only).
    WorkflowCreate,
    /// `core_workflow_update`: changes the given fields of a Workflow (read-write only).
    WorkflowUpdate,
    /// `core_workflow_delete`: deletes a Workflow (read-write only).
    WorkflowDelete,
    /// `core_workflow_execution_list`: the namespace's WorkflowRuns as muster's executions.
    WorkflowExecutionList,
    /// `core_workflow_execution_get`: one WorkflowRun as muster's execution, with its steps.
    WorkflowExecutionGet,
    /// `core_events`: the events the host recorded, filtered.
    Events,
    /// `core_config_get`: the host config, without secrets.
    ConfigGet,
    /// `core_config_get_aggregator`: the `/mcp` settings (`api.mcp`).
    ConfigGetAggregator,
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
    /// Every management tool, the write tools included.
    pub const ALL: [Self; 22] = [
        Self::McpServerList,
        Self::McpServerGet,
        Self::McpServerValidate,
        Self::McpServerCreate,
        Self::McpServerUpdate,
        Self::McpServerDelete,
        Self::WorkflowList,
        Self::WorkflowGet,
        Self::WorkflowValidate,
        Self::WorkflowAvailable,
        Self::WorkflowCreate,
        Self::WorkflowUpdate,
        Self::WorkflowDelete,
        Self::WorkflowExecutionList,
        Self::WorkflowExecutionGet,
        Self::Events,
        Self::ConfigGet,
        Self::ConfigGetAggregator,
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
            Self::McpServerValidate => "core_mcpserver_validate",
            Self::McpServerCreate => "core_mcpserver_create",
            Self::McpServerUpdate => "core_mcpserver_update",
            Self::McpServerDelete => "core_mcpserver_delete",
            Self::WorkflowList => "core_workflow_list",
            Self::WorkflowGet => "core_workflow_get",
            Self::WorkflowValidate => "core_workflow_validate",
            Self::WorkflowAvailable => "core_workflow_available",
            Self::WorkflowCreate => "core_workflow_create",
            Self::WorkflowUpdate => "core_workflow_update",
            Self::WorkflowDelete => "core_workflow_delete",
            Self::WorkflowExecutionList => "core_workflow_execution_list",
            Self::WorkflowExecutionGet => "core_workflow_execution_get",
            Self::Events => "core_events",
            Self::ConfigGet => "core_config_get",
            Self::ConfigGetAggregator => "core_config_get_aggregator",
            Self::ResourceList => "core_resource_list",
            Self::ResourceGet => "core_resource_get",
            Self::ResourceReconcile => "core_resource_reconcile",
            Self::PluginList => "core_plugin_list",
        }
    }

    /// Whether it changes desired state (creates, rewrites or deletes an object): offered only
    /// with `api.mcp.management: read-write`, and annotated `destructiveHint: true`.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Self::McpServerCreate
                | Self::McpServerUpdate
                | Self::McpServerDelete
                | Self::WorkflowCreate
                | Self::WorkflowUpdate
                | Self::WorkflowDelete
        )
    }

    fn description(self) -> &'static str {
        servers::description(self)
            .or_else(|| workflows::description(self))
            .or_else(|| runs::description(self))
            .or_else(|| events::description(self))
            .or_else(|| config::description(self))
            .or_else(|| resources::description(self))
            .unwrap_or_default()
    }

    fn schema(self) -> Value {
        servers::schema(self)
            .or_else(|| workflows::schema(self))
            .or_else(|| runs::schema(self))
            .or_else(|| events::schema(self))
            .or_else(|| resources::schema(self))
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
    }

    /// The tool named `name`, if it is one of these.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The tool as clients see it: a write tool is `destructiveHint: true`, a read tool
    /// `readOnlyHint: true` (`core_resource_reconcile` neither: it queues a reconcile).
    pub fn tool(self) -> Tool {
        let schema = match self.schema() {
            Value::Object(m) => m,
            _ => JsonObject::new(),
        };
        let mut annotations = ToolAnnotations::new();
        annotations.read_only_hint = Some(!self.writes() && self != Self::ResourceReconcile);
        annotations.destructive_hint = Some(self.writes());
        annotations.idempotent_hint = Some(!matches!(self, Self::McpServerCreate | Self::WorkflowCreate));
        annotations.open_world_hint = Some(false);
        Tool::new(self.name(), self.description(), Arc::new(schema)).with_annotations(annotations)
    }
}

/// The management tools offered under `management`: the write tools only with `read-write`.
pub fn tools(management: Management) -> Vec<Entry> {
    CoreTool::ALL
        .into_iter()
        .filter(|t| !t.writes() || management == Management::ReadWrite)
        .map(|t| Entry { tool: t.tool(), target: Target::Core(t) })
        .collect()
}

/// Runs `tool` in `namespace` with `args`. Arguments that do not fit are [`CallError::Refused`]
/// (as a JSON-RPC invalid-params error would be), and so is a write tool while
/// `api.mcp.management` is `read-only`; an object that does not exist, or a definition that
/// does not validate, is the tool's own failure (`isError: true`).
pub async fn call(engine: &Engine, namespace: &str, tool: CoreTool, args: &JsonObject) -> Result<Value, CallError> {
    if tool.writes() && engine.config().api.mcp.management != Management::ReadWrite {
        return Err(CallError::Refused(format!(
            "{} changes objects, and this host's management tools are read-only; set `api.mcp.management: \
             read-write` in the host config to offer it",
            tool.name()
        )));
    }
    let result = match tool {
        CoreTool::McpServerList | CoreTool::McpServerGet => servers::call(engine, namespace, tool, args)?,
        CoreTool::WorkflowList | CoreTool::WorkflowGet | CoreTool::WorkflowAvailable => {
            workflows::call(engine, namespace, tool, args)?
        }
        CoreTool::McpServerValidate
        | CoreTool::McpServerCreate
        | CoreTool::McpServerUpdate
        | CoreTool::McpServerDelete
        | CoreTool::WorkflowValidate
        | CoreTool::WorkflowCreate
        | CoreTool::WorkflowUpdate
        | CoreTool::WorkflowDelete => writes::call(engine, namespace, tool, args).await?,
        CoreTool::WorkflowExecutionList | CoreTool::WorkflowExecutionGet => runs::call(engine, namespace, tool, args)?,
        CoreTool::Events => events::call(engine, namespace, args)?,
        CoreTool::ConfigGet | CoreTool::ConfigGetAggregator => config::call(engine, tool),
        CoreTool::ResourceList | CoreTool::ResourceGet | CoreTool::ResourceReconcile | CoreTool::PluginList => {
            resources::call(engine, namespace, tool, args)?
        }
    };
    Ok(serde_json::to_value(result).unwrap_or_else(|e| json!({"content": [], "isError": true, "error": e.to_string()})))
}

/// The views of `kind` in `namespace`.
pub(crate) fn of_namespace<'a>(
    engine: &Engine,
    kind: &str,
    namespace: &'a str,
) -> impl Iterator<Item = ResourceView> + 'a {
    engine.views(Some(kind)).into_iter().filter(move |v| v.namespace == namespace)
}

/// The spec of `key` as JSON, `Null` when the host does not hold it.
pub(crate) fn spec_of(engine: &Engine, key: &ObjectKey) -> Value {
    engine.cached(key).and_then(|o| serde_json::from_str::<Value>(&o.raw.spec).ok()).unwrap_or(Value::Null)
}

/// One object's full record with its spec; the tool's failure when it does not exist.
pub(crate) fn get(engine: &Engine, key: &ObjectKey) -> CallToolResult {
    let Some(view) = engine.view(key) else { return failed(RequestError::NotFound(key.clone()).to_string()) };
    let spec = spec_of(engine, key);
    let mut v = serde_json::to_value(view).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("spec".into(), spec);
    }
    ok(v)
}

/// A success whose text is `v` as pretty JSON and whose structured content is `v`.
pub(crate) fn ok(v: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    r
}

/// A success whose text is `text` (muster's sentence) and whose structured content is `v`.
pub(crate) fn ok_saying(text: String, v: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    r
}

/// The tool's own failure (`isError: true`) saying `message`.
pub(crate) fn failed(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The object name in argument `arg`, required: any name the host accepts for an object
/// ([`is_object_name`]: filesystem mode's `_` too; a cluster refuses those itself).
pub(crate) fn name_arg(args: &JsonObject, arg: &str) -> Result<String, CallError> {
    match args.get(arg).and_then(Value::as_str) {
        Some(n) if is_object_name(n) => Ok(n.to_string()),
        Some(n) => Err(CallError::Refused(format!(
            "argument `{arg}`: {n:?} is not a valid object name: use lower-case letters, digits, '-' and '.' \
             (at most 253 characters; filesystem mode also takes '_')"
        ))),
        None => Err(CallError::Refused(format!("argument `{arg}` (a string) is required"))),
    }
}

/// The kind in argument `kind`, required.
pub(crate) fn kind_arg(args: &JsonObject) -> Result<String, CallError> {
    match args.get("kind").and_then(Value::as_str) {
        Some(k) if is_kind(k) => Ok(k.to_string()),
        Some(k) => Err(CallError::Refused(format!("argument `kind`: {k:?} is not a kind (CamelCase, like MCPServer)"))),
        None => Err(CallError::Refused("argument `kind` (a string) is required".into())),
    }
}

/// The optional string argument `arg`.
pub(crate) fn str_arg<'a>(args: &'a JsonObject, arg: &str) -> Result<Option<&'a str>, CallError> {
    match args.get(arg) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(CallError::Refused(format!("argument `{arg}` must be a string"))),
    }
}

/// The optional boolean argument `arg`, `default` when absent.
pub(crate) fn bool_arg(args: &JsonObject, arg: &str, default: bool) -> Result<bool, CallError> {
    match args.get(arg) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(CallError::Refused(format!("argument `{arg}` must be a boolean"))),
    }
}

/// The optional non-negative whole-number argument `arg`, `default` when absent.
pub(crate) fn count_arg(args: &JsonObject, arg: &str, default: usize) -> Result<usize, CallError> {
    match args.get(arg) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|n| *n >= 0.0 && n.fract() == 0.0)
            .map(|n| n as usize)
            .ok_or_else(|| CallError::Refused(format!("argument `{arg}` must be a whole number, 0 or more"))),
    }
}

#[cfg(test)]
mod tests;
