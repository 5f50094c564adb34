//! `core_mcpserver_*` and `core_workflow_*` `_validate`, `_create`, `_update` and `_delete`: a definition checked as the host checks any object (schema field validation, then the plugin's `validate`), and written where the mode keeps desired state.

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Map, Value, json};
use steward_sdk::{FieldError, RawObject};

use super::{CoreTool, SERVER_KIND, failed, name_arg, ok_saying};
use crate::engine::{Engine, RequestError};
use crate::mcp::catalog::WORKFLOW_KIND;
use crate::model::ObjectKey;
use crate::tools::CallError;

/// The kind a definition tool is about, and how muster names it in its sentences.
fn kind_of(tool: CoreTool) -> (&'static str, &'static str) {
    match tool {
        CoreTool::McpServerValidate
        | CoreTool::McpServerCreate
        | CoreTool::McpServerUpdate
        | CoreTool::McpServerDelete => (SERVER_KIND, "MCP server"),
        _ => (WORKFLOW_KIND, "Workflow"),
    }
}

/// The spec a definition's arguments describe: every argument but `name`, nulls left out.
pub(crate) fn spec_from(args: &JsonObject) -> Map<String, Value> {
    args.iter().filter(|(k, v)| k.as_str() != "name" && !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// `base` with each field of `change` replacing its own (muster's update: fields not given stay).
pub(crate) fn merged(base: &Value, change: Map<String, Value>) -> Value {
    let mut spec = base.as_object().cloned().unwrap_or_default();
    spec.extend(change);
    Value::Object(spec)
}

/// The field errors as one sentence: `path: message; path: message`.
pub(crate) fn sentence(errors: &[FieldError]) -> String {
    errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect::<Vec<_>>().join("; ")
}

fn errors_json(errors: &[FieldError]) -> Value {
    Value::Array(errors.iter().map(|e| json!({"path": e.path, "message": e.message})).collect())
}

fn refused(e: RequestError) -> CallToolResult {
    failed(e.to_string())
}

/// Runs one of the definition tools (the caller has checked that writes are allowed).
pub(super) async fn call(
    engine: &Engine,
    namespace: &str,
    tool: CoreTool,
    args: &JsonObject,
) -> Result<CallToolResult, CallError> {
    let (kind, words) = kind_of(tool);
    let name = name_arg(args, "name")?;
    let key = ObjectKey::new(kind, namespace, &name);
    if matches!(tool, CoreTool::McpServerDelete | CoreTool::WorkflowDelete) {
        return Ok(match engine.manage_delete(&key).await {
            Ok(()) => ok_saying(
                format!("{words} '{name}' deleted successfully"),
                json!({"deleted": key.to_string(), "name": name}),
            ),
            Err(e) => refused(e),
        });
    }
    let info = match engine.served_info(kind) {
        Ok(info) => info,
        Err(e) => return Ok(refused(e)),
    };
    let updating = matches!(tool, CoreTool::McpServerUpdate | CoreTool::WorkflowUpdate);
    let spec = if updating {
        let Some(current) = engine.cached(&key) else { return Ok(refused(RequestError::NotFound(key))) };
        let base: Value = serde_json::from_str(&current.raw.spec).unwrap_or_else(|_| json!({}));
        merged(&base, spec_from(args))
    } else {
        Value::Object(spec_from(args))
    };
    let obj = RawObject {
        api_version: format!("{}/{}", info.group, info.version),
        kind: kind.to_string(),
        name: name.clone(),
        namespace: namespace.to_string(),
        spec: serde_json::to_string(&spec).unwrap_or_else(|_| "{}".into()),
        ..RawObject::default()
    };
    // Checked on a copy: the object is written as given, as a file or `kubectl apply` would.
    let errors = match engine.validate_object(&mut obj.clone()).await {
        Ok(errors) => errors,
        Err(e) => return Ok(refused(e)),
    };
    let kind_word = if kind == SERVER_KIND { "mcpserver" } else { "workflow" };
    if !errors.is_empty() {
        let mut r = failed(if matches!(tool, CoreTool::McpServerValidate | CoreTool::WorkflowValidate) {
            format!("Validation failed: {}", sentence(&errors))
        } else {
            format!("Invalid {words} definition: {}", sentence(&errors))
        });
        r.structured_content = Some(json!({"valid": false, "name": name, "errors": errors_json(&errors)}));
        return Ok(r);
    }
    Ok(match tool {
        CoreTool::McpServerValidate | CoreTool::WorkflowValidate => ok_saying(
            format!("Validation successful for {kind_word} {name}"),
            json!({"valid": true, "name": name, "errors": []}),
        ),
        _ if updating => match engine.manage_replace(&obj).await {
            Ok(key) => ok_saying(
                format!("{words} '{name}' updated successfully"),
                json!({"updated": key.to_string(), "name": name, "spec": spec}),
            ),
            Err(e) => refused(e),
        },
        _ => match engine.manage_create(&obj).await {
            Ok(key) => ok_saying(
                format!("{words} '{name}' created successfully"),
                json!({"created": key.to_string(), "name": name, "spec": spec}),
            ),
            Err(RequestError::Exists(_)) => failed(format!("{words} '{name}' already exists")),
            Err(e) => refused(e),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_is_its_arguments_but_the_name_and_an_update_keeps_what_is_not_given() {
        let args = json!({"name": "git", "type": "stdio", "command": "git-mcp", "url": null});
        let spec = spec_from(args.as_object().unwrap());
        assert_eq!(Value::Object(spec), json!({"type": "stdio", "command": "git-mcp"}));
        let base = json!({"type": "stdio", "command": "old", "args": ["a"]});
        let change = spec_from(json!({"name": "git", "command": "new"}).as_object().unwrap());
        assert_eq!(merged(&base, change), json!({"type": "stdio", "command": "new", "args": ["a"]}));
    }

    #[test]
    fn field_errors_read_as_one_sentence() {
        let errors = vec![
            FieldError { path: "spec.type".into(), message: "must be stdio".into() },
            FieldError { path: "spec.url".into(), message: "required".into() },
        ];
        assert_eq!(sentence(&errors), "spec.type: must be stdio; spec.url: required");
        assert_eq!(errors_json(&errors)[1]["path"], "spec.url");
    }
}
