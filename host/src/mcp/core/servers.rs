//! `core_mcpserver_list` and `core_mcpserver_get`, and the arguments of muster's MCPServer tools (`_validate`, `_create`, `_update`, `_delete`, run in [`super::writes`]).

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use super::{CoreTool, SERVER_KIND, bool_arg, get, name_arg, of_namespace, ok};
use crate::engine::{Engine, ResourceView};
use crate::mcp::catalog::offers_tools;
use crate::model::ObjectKey;
use crate::tools::CallError;

/// The description of `tool`, when it is one of this group's.
pub(super) fn description(tool: CoreTool) -> Option<&'static str> {
    Some(match tool {
        CoreTool::McpServerList => {
            "Lists the MCPServers of this namespace: name, state (Running, Connected, Failed...), health, \
             the tools each offers under the names this endpoint uses, and the last error. Failed servers \
             are hidden unless `showAll`; their errors are shown with `verbose`."
        }
        CoreTool::McpServerGet => {
            "Gets one MCPServer of this namespace by `name`: its spec and full status record (state, \
             health, tools, restarts, last error, conditions, recent reconciles)."
        }
        CoreTool::McpServerValidate => {
            "Validates an MCPServer definition (the same arguments as core_mcpserver_create) as the host \
             would validate the object, without writing anything; answers each field error."
        }
        CoreTool::McpServerCreate => {
            "Creates an MCPServer in this namespace from its fields (name, type, command, args, url, env, \
             ...), after validating it as any other object: a new file of the resources directory \
             (filesystem mode) or a new custom resource (Kubernetes mode)."
        }
        CoreTool::McpServerUpdate => {
            "Updates an MCPServer of this namespace: each field given replaces the spec's, the others stay; \
             validated as any other object, then written where the object is defined."
        }
        CoreTool::McpServerDelete => {
            "Deletes an MCPServer of this namespace by `name`: its file (when it defines only that object) \
             or its custom resource. Its server stops."
        }
        _ => return None,
    })
}

/// The arguments of muster's MCPServer definition tools; `type` required when `type_required`.
fn definition(type_required: bool) -> Value {
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let mut required = vec!["name"];
    if type_required {
        required.push("type");
    }
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "MCP server name"},
            "type": {"type": "string", "description": "MCP server type (stdio, streamable-http, or sse)"},
            "toolPrefix": {"type": "string", "description": "Tool prefix for namespacing"},
            "family": {"type": "object", "description": "Family grouping for equivalent instances",
                "properties": {"name": {"type": "string"}, "instanceArg": {"type": "string"}},
                "required": ["name", "instanceArg"]},
            "description": {"type": "string", "description": "MCP server description"},
            "autoStart": {"type": "boolean", "description": "Whether the server should start by itself"},
            "command": {"type": "string", "description": "Command to run (stdio)"},
            "args": {"type": "array", "items": {"type": "string"}, "description": "Command arguments (stdio)"},
            "url": {"type": "string", "description": "Server endpoint URL (streamable-http and sse)"},
            "env": string_map.clone(),
            "headers": string_map,
            "timeout": {"type": "integer", "description": "Connection timeout in seconds"},
            "auth": {"type": "object", "description": "Authentication configuration (oauth or none)"},
        },
        "required": required,
    })
}

/// The input schema of `tool`, when it is one of this group's.
pub(super) fn schema(tool: CoreTool) -> Option<Value> {
    let name = json!({"type": "string", "description": "Name of the MCP server"});
    Some(match tool {
        CoreTool::McpServerList => json!({"type": "object", "properties": {
            "showAll": {"type": "boolean", "description": "Show failed servers too (default: false)"},
            "verbose": {"type": "boolean", "description": "Show each server's last error (default: false)"},
        }}),
        CoreTool::McpServerGet | CoreTool::McpServerDelete => {
            json!({"type": "object", "properties": {"name": name}, "required": ["name"]})
        }
        CoreTool::McpServerValidate | CoreTool::McpServerCreate => definition(true),
        CoreTool::McpServerUpdate => definition(false),
        _ => return None,
    })
}

/// Runs `core_mcpserver_list` or `core_mcpserver_get`.
pub(super) fn call(
    engine: &Engine,
    namespace: &str,
    tool: CoreTool,
    args: &JsonObject,
) -> Result<CallToolResult, CallError> {
    if tool == CoreTool::McpServerGet {
        return Ok(get(engine, &ObjectKey::new(SERVER_KIND, namespace, name_arg(args, "name")?)));
    }
    let show_all = bool_arg(args, "showAll", false)?;
    let verbose = bool_arg(args, "verbose", false)?;
    let all: Vec<Value> = of_namespace(engine, SERVER_KIND, namespace).map(|v| summary(&v, verbose)).collect();
    let (shown, hidden): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|s| show_all || s["state"] != "Failed");
    let mut result = json!({"mcpServers": shown, "total": shown.len(), "mode": engine.mode()});
    if !hidden.is_empty() {
        result["hiddenFailed"] = hidden.len().into();
        result["hint"] =
            format!("({} failed servers hidden, use showAll to show, verbose for details)", hidden.len()).into();
    }
    Ok(ok(result))
}

fn summary(v: &ResourceView, verbose: bool) -> Value {
    let status = v.status.clone().unwrap_or(Value::Null);
    let error = status.get("lastError").cloned().or_else(|| v.last_error.clone().map(Value::from));
    let state = status.get("state").cloned().filter(|s| !s.is_null()).unwrap_or_else(|| {
        // Not reconciled yet, or refused before the plugin ran: muster's words for it.
        if v.last_error.is_some() { "Failed" } else { "Pending" }.into()
    });
    json!({
        "name": v.name,
        "phase": v.phase.to_string(),
        "ready": v.summary.ready,
        "reason": v.summary.reason,
        "message": v.summary.message,
        "verdict": v.summary.verdict,
        "state": state,
        "health": status["health"],
        "offersTools": offers_tools(&status),
        "tools": status["tools"],
        "lastError": if verbose { error.unwrap_or(Value::Null) } else { Value::Null },
    })
}
