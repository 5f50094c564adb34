//! `core_resource_list`, `core_resource_get`, `core_resource_reconcile` and `core_plugin_list`: any kind's objects and the loaded plugins (Steward's own; muster has no such tools).

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use super::{CoreTool, failed, get, kind_arg, name_arg, of_namespace, ok};
use crate::engine::{Engine, ResourceView};
use crate::model::ObjectKey;
use crate::tools::CallError;

/// The description of `tool`, when it is one of this group's.
pub(super) fn description(tool: CoreTool) -> Option<&'static str> {
    Some(match tool {
        CoreTool::ResourceList => {
            "Lists the objects of one `kind` (for example MCPServer, Workflow, WorkflowRun) in this \
             namespace: name, phase (Pending, Synced, Error, Failed...), its Ready condition (True, False, \
             Unknown, Absent) with reason and message, a verdict (ok, progressing, failing), the kind's \
             own columns, generation and last error."
        }
        CoreTool::ResourceGet => {
            "Gets one object of this namespace by `kind` and `name`: its spec and full status record \
             (phase, status, conditions, warnings, recent reconciles)."
        }
        CoreTool::ResourceReconcile => {
            "Queues one object of this namespace (by `kind` and `name`) for a reconcile now; this also \
             retries an object that has Failed. Answers at once; read the object to see the outcome."
        }
        CoreTool::PluginList => {
            "Lists the host's plugins: name, version, state, the kinds each serves, and any load error."
        }
        _ => return None,
    })
}

/// The input schema of `tool`, when it is one of this group's.
pub(super) fn schema(tool: CoreTool) -> Option<Value> {
    let name = json!({"type": "string", "description": "The object's metadata.name."});
    let kind = json!({"type": "string", "description": "The kind, CamelCase, for example MCPServer."});
    Some(match tool {
        CoreTool::PluginList => json!({"type": "object", "properties": {}}),
        CoreTool::ResourceList => json!({"type": "object", "properties": {"kind": kind}, "required": ["kind"]}),
        CoreTool::ResourceGet | CoreTool::ResourceReconcile => {
            json!({"type": "object", "properties": {"kind": kind, "name": name}, "required": ["kind", "name"]})
        }
        _ => return None,
    })
}

/// Runs one of this group's tools.
pub(super) fn call(
    engine: &Engine,
    namespace: &str,
    tool: CoreTool,
    args: &JsonObject,
) -> Result<CallToolResult, CallError> {
    Ok(match tool {
        CoreTool::ResourceList => {
            let kind = kind_arg(args)?;
            let items: Vec<Value> = of_namespace(engine, &kind, namespace).map(|v| summary(&v)).collect();
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
        _ => {
            let plugins = serde_json::to_value(engine.plugins().statuses()).unwrap_or(Value::Null);
            ok(json!({"plugins": plugins}))
        }
    })
}

fn summary(v: &ResourceView) -> Value {
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
