//! The MCPServer files of `testing/muster-compat`, through the plugin's validation and warnings.

#[path = "../../../testing/muster-compat/verdicts.rs"]
mod verdicts;

#[test]
fn every_muster_server_gets_musters_verdict() {
    let (checked, wrong) = verdicts::differences::<mcpserver::McpServer>(&["mcpserver", "steward-extensions"]);
    assert!(checked >= 35, "only {checked} MCPServer cases");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
