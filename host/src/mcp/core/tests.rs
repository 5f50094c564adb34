//! The management tools' names, annotations and the arguments every tool checks.

use serde_json::json;

use super::*;

/// The Workflow plugin counts the always-offered names as offered (`STEWARD_CORE_TOOLS` in
/// plugins/workflow/src/tools.rs): a change here must be made there too.
#[test]
fn the_names_are_those_the_workflow_plugin_counts_as_offered() {
    let names: Vec<&str> = CoreTool::ALL.iter().filter(|t| !t.writes()).map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
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
        ]
    );
    // The write tools: `STEWARD_CORE_WRITE_TOOLS`, counted as offered under `read-write`.
    let writes: Vec<&str> = CoreTool::ALL.iter().filter(|t| t.writes()).map(|t| t.name()).collect();
    assert_eq!(
        writes,
        [
            "core_mcpserver_create",
            "core_mcpserver_update",
            "core_mcpserver_delete",
            "core_workflow_create",
            "core_workflow_update",
            "core_workflow_delete",
        ]
    );
}

#[test]
fn every_core_tool_has_a_unique_core_name_a_description_and_an_object_schema() {
    let mut names: Vec<&str> = CoreTool::ALL.iter().map(|t| t.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), CoreTool::ALL.len());
    for t in CoreTool::ALL {
        assert!(t.name().starts_with("core_"));
        assert_eq!(CoreTool::from_name(t.name()), Some(t));
        let tool = t.tool();
        assert_eq!(tool.input_schema["type"], "object", "{}", t.name());
        assert!(tool.description.is_some_and(|d| d.len() > 20), "{}", t.name());
    }
    assert_eq!(CoreTool::from_name("core_auth_login"), None);
}

#[test]
fn write_tools_are_destructive_and_listed_only_read_write() {
    for t in CoreTool::ALL {
        let a = t.tool().annotations.unwrap();
        assert_eq!(a.destructive_hint, Some(t.writes()), "{}", t.name());
        if t.writes() {
            assert_eq!(a.read_only_hint, Some(false), "{}", t.name());
        }
    }
    let listed = |m| tools(m).into_iter().map(|e| e.tool.name.to_string()).collect::<Vec<_>>();
    let read_only = listed(Management::ReadOnly);
    let read_write = listed(Management::ReadWrite);
    assert!(!read_only.iter().any(|n| n.ends_with("_create") || n.ends_with("_update") || n.ends_with("_delete")));
    assert!(read_only.contains(&"core_mcpserver_validate".to_string()));
    assert_eq!(read_write.len(), CoreTool::ALL.len());
    assert_eq!(read_only.len(), CoreTool::ALL.len() - 6);
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
    assert_eq!(count_arg(&args(json!({"limit": 5})), "limit", 50), Ok(5));
    assert_eq!(count_arg(&args(json!({})), "limit", 50), Ok(50));
    assert!(count_arg(&args(json!({"limit": -1})), "limit", 50).is_err());
    assert!(count_arg(&args(json!({"limit": 1.5})), "limit", 50).is_err());
    assert_eq!(bool_arg(&args(json!({"showAll": true})), "showAll", false), Ok(true));
    assert!(bool_arg(&args(json!({"showAll": "yes"})), "showAll", false).is_err());
    assert_eq!(str_arg(&args(json!({"status": "failed"})), "status"), Ok(Some("failed")));
}
