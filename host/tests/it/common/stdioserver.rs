//! The `StdioServer` kind (capability `services`) end to end, the same for each language's plugin.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::host::Host;

const T: Duration = Duration::from_secs(120);

fn state(v: Option<&Value>) -> &str {
    v.and_then(|v| v["status"]["state"].as_str()).unwrap_or("")
}

fn ready(v: Option<&Value>) -> Option<&str> {
    v?["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["status"].as_str()
}

/// True while `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// Runs plugin `name` (the component `wasm`) in a host granting it `services`: an object asks
/// for the example MCP server, the host runs it and the object reports it Running and Ready
/// with its tools and pid; deleting the object ends the process and the object goes.
pub async fn owns_a_stdio_server_end_to_end(name: &str, wasm: &Path) {
    let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    let mut h = Host::new(&format!("  {name}: {{ capabilities: [services] }}\n"));
    super::install(wasm, &h.dir.path().join("plugins").join(format!("{name}.wasm")));
    h.start().await;
    h.write(
        "ex.yaml",
        &format!(
            "apiVersion: example.dev/v1alpha1\nkind: StdioServer\nmetadata:\n  name: ex\nspec:\n  command: \"{}\"\n  args: [\"--stdio\"]\n",
            bin.display()
        ),
    );
    let v = h
        .wait_object("StdioServer/default/ex", T, "Running with tools and Ready", |v| {
            state(v) == "Running" && ready(v) == Some("True")
        })
        .await
        .unwrap();
    let tools: Vec<&str> = v["status"]["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"echo") && tools.contains(&"add"), "{v:#}");
    let pid = v["status"]["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {v:#}")) as u32;
    assert!(alive(pid), "the server's process {pid} runs");
    assert_eq!(v["plugin"], name, "{v:#}");

    h.remove("ex.yaml");
    super::eventually(T, format!("process {pid} to end"), async || alive(pid), |alive| !alive).await;
    h.wait_object("StdioServer/default/ex", T, "gone", |v| v.is_none()).await;
}
