//! `core_workflow_list`, `core_workflow_get` and `core_workflow_available`, and the arguments of muster's Workflow definition tools (`_validate`, `_create`, `_update`, `_delete`, run in [`super::writes`]).

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use super::{CoreTool, get, name_arg, of_namespace, ok, spec_of};
use crate::engine::{Engine, ResourceView};
use crate::mcp::catalog::{WORKFLOW_KIND, WORKFLOW_PREFIX, workflow_ready};
use crate::model::ObjectKey;
use crate::tools::CallError;

/// The description of `tool`, when it is one of this group's.
pub(super) fn description(tool: CoreTool) -> Option<&'static str> {
    Some(match tool {
        CoreTool::WorkflowList => {
            "Lists the Workflows of this namespace: name, description, whether it is ready to run as \
             `workflow_<name>`, its arguments and the tools it still misses."
        }
        CoreTool::WorkflowGet => {
            "Gets one Workflow of this namespace by `name`: its spec (args, steps) and full status record."
        }
        CoreTool::WorkflowAvailable => {
            "Checks whether a Workflow of this namespace can run now (it is valid and every tool it calls \
             is offered); answers `available` and the tools it misses."
        }
        CoreTool::WorkflowValidate => {
            "Validates a Workflow definition (name, description, args, steps, onFailure, output) as the \
             host would validate the object, without writing anything; answers each field error."
        }
        CoreTool::WorkflowCreate => {
            "Creates a Workflow in this namespace from its definition, after validating it as any other \
             object: a new file of the resources directory (filesystem mode) or a new custom resource \
             (Kubernetes mode). It is then offered as `workflow_<name>` once ready."
        }
        CoreTool::WorkflowUpdate => {
            "Updates a Workflow of this namespace: each field given replaces the spec's, the others stay; \
             validated as any other object, then written where the object is defined."
        }
        CoreTool::WorkflowDelete => {
            "Deletes a Workflow of this namespace by `name`: its file (when it defines only that object) \
             or its custom resource. Runs that started keep their snapshot."
        }
        _ => return None,
    })
}

fn definition() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Name of the workflow"},
            "description": {"type": "string", "description": "Description of the workflow"},
            "args": {"type": "object", "description": "Workflow arguments: name to {type, required, default, description}",
                "additionalProperties": {"type": "object"}},
            "steps": {"type": "array", "description": "Workflow steps (id, tool, args, store, condition, allowFailure, ...)",
                "items": {"type": "object"}},
            "onFailure": {"type": "array", "description": "Cleanup steps run when the workflow fails",
                "items": {"type": "object"}},
            "output": {"type": "object", "description": "Output template that shapes the returned document"},
        },
        "required": ["name", "steps"],
    })
}

/// The input schema of `tool`, when it is one of this group's.
pub(super) fn schema(tool: CoreTool) -> Option<Value> {
    let name = json!({"type": "string", "description": "Name of the workflow"});
    Some(match tool {
        CoreTool::WorkflowList => json!({"type": "object", "properties": {
            "include_system": {"type": "boolean", "description": "Include system workflows (Steward has none)", "default": true},
        }}),
        CoreTool::WorkflowGet | CoreTool::WorkflowAvailable | CoreTool::WorkflowDelete => {
            json!({"type": "object", "properties": {"name": name}, "required": ["name"]})
        }
        CoreTool::WorkflowValidate | CoreTool::WorkflowCreate | CoreTool::WorkflowUpdate => definition(),
        _ => return None,
    })
}

/// Runs `core_workflow_list`, `core_workflow_get` or `core_workflow_available`.
pub(super) fn call(
    engine: &Engine,
    namespace: &str,
    tool: CoreTool,
    args: &JsonObject,
) -> Result<CallToolResult, CallError> {
    Ok(match tool {
        CoreTool::WorkflowGet => get(engine, &ObjectKey::new(WORKFLOW_KIND, namespace, name_arg(args, "name")?)),
        CoreTool::WorkflowAvailable => {
            let name = name_arg(args, "name")?;
            let key = ObjectKey::new(WORKFLOW_KIND, namespace, &name);
            let view = engine.view(&key);
            let status = view.as_ref().and_then(|v| v.status.clone()).unwrap_or(Value::Null);
            ok(json!({
                "name": name,
                "available": view.as_ref().is_some_and(workflow_ready),
                "exists": view.is_some(),
                "missingTools": status["missingTools"],
                "message": view.map(|v| v.summary.message),
            }))
        }
        _ => {
            let flows: Vec<Value> =
                of_namespace(engine, WORKFLOW_KIND, namespace).map(|v| summary(engine, &v)).collect();
            ok(json!({"workflows": flows, "total": flows.len()}))
        }
    })
}

fn summary(engine: &Engine, v: &ResourceView) -> Value {
    let status = v.status.clone().unwrap_or(Value::Null);
    let spec = spec_of(engine, &ObjectKey::new(&v.kind, &v.namespace, &v.name));
    json!({
        "name": v.name,
        "tool": format!("{WORKFLOW_PREFIX}{}", v.name),
        "description": spec["description"],
        "ready": workflow_ready(v),
        "available": workflow_ready(v),
        "args": spec["args"],
        "missingTools": status["missingTools"],
        "lastError": v.last_error,
    })
}
