//! MCPServers whose servers are careless, end to end: a secret value a server prints or lists is redacted from the host's log (both formats), the API, the store, the CLI, `/mcp` and tool errors, and a tool named with it is not offered; a flood on stderr is dropped and counted on the object; a tool list too large for one message is named as the cause.

use std::path::Path;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::common::host::Host;

const T: Duration = Duration::from_secs(60);
/// The key the leaky server is given (from a file, by `valueFrom`): looked for where it must not be.
const VALUE: &str = "hv-8Kd3-leaky-Secret";
/// What stands for it where it was.
const MARK: &str = "<redacted>";

/// The venv's python, and the path of `testing/mcp-servers/<script>`.
fn python_sdk(script: &str) -> (String, String) {
    let py = crate::common::mcp_servers_dir().join("py/bin/python3").display().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-servers").join(script);
    (py, script.display().to_string())
}

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

/// An MCPServer named `name` that runs `sh -c script` with `env`, its tools prefixed `lk`.
fn shell_server(name: &str, script: &str, env: Value) -> String {
    json!({
        "apiVersion": "steward.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": name},
        "spec": {
            "type": "stdio",
            "command": "/bin/sh",
            "args": ["-c", script],
            "env": env,
            "autoStart": true,
            "toolPrefix": "lk",
            "timeout": 60,
        },
    })
    .to_string()
}

/// The leaky server with its key read from the host's file `token`; it prints the key on its
/// stderr as it starts.
fn leaky(h: &Host) -> String {
    std::fs::write(h.dir.path().join("token"), format!("{VALUE}\n")).unwrap();
    let (py, script) = python_sdk("leaky-server.py");
    shell_server(
        "leaky",
        r#"echo "starting with key $TOKEN" >&2; exec "$PY" "$SCRIPT""#,
        json!({"PY": py, "SCRIPT": script, "TOKEN": {"valueFrom": {"file": "token"}}}),
    )
}

fn status(v: Option<&Value>) -> &Value {
    static NULL: Value = Value::Null;
    v.map_or(&NULL, |v| &v["status"])
}

fn up_and_healthy(v: Option<&Value>) -> bool {
    status(v)["state"] == "Running" && status(v)["health"] == "Healthy"
}

fn ready(v: &Value) -> Value {
    v["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned().unwrap_or_default()
}

/// Panics naming `where_` when the secret value is in `text`.
fn assert_absent(where_: &str, text: &str) {
    assert!(!text.contains(VALUE), "the secret value leaked into {where_}");
}

async fn connect(port: u16) -> RunningService<RoleClient, ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://127.0.0.1:{port}/mcp"));
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ClientConfig::default().serve(transport).await.expect("the MCP handshake with /mcp")
}

/// Calls `tool` through `/mcp` with `arguments`: the result as JSON, or the error's text.
async fn call(client: &RunningService<RoleClient, ClientConfig>, tool: &str, arguments: Value) -> String {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = arguments.as_object().cloned();
    match tokio::time::timeout(T, client.peer().call_tool(params)).await.expect("a call through /mcp hung") {
        Ok(result) => serde_json::to_string(&result).unwrap(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_a_server_prints_or_sends_never_reaches_the_hosts_debug_log_in_either_format() {
    for format in ["text", "json"] {
        let mut h = Host::new("");
        h.start_with_env(&[("STEWARD_LOG", "debug"), ("STEWARD_LOG_FORMAT", format)]).await;
        h.write("s.yaml", &leaky(&h));
        h.wait_object("MCPServer/default/leaky", T, "Running and healthy", up_and_healthy).await;
        // The log is the subject here: the child's stderr line is logged at debug level (and the
        // server's name, which carries the key too, by rmcp), with the value replaced.
        h.wait_log(&format!("starting with key {MARK}"), T).await;
        assert!(h.terminate().success());
        let log = h.log();
        assert!(log.contains(MARK), "{format}: the redaction mark is in the log");
        assert_absent(&format!("the host's {format} log"), &log);
        if format == "json" {
            let lines = log.lines().filter(|l| !l.trim().is_empty());
            assert!(lines.clone().all(|l| serde_json::from_str::<Value>(l).is_ok()), "every line is still JSON");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_a_servers_tool_list_is_redacted_and_a_tool_named_with_it_is_not_offered() {
    let mut h = Host::new(crate::common::host::MCP_DIRECT);
    h.start().await;
    h.write("s.yaml", &leaky(&h));
    let key = "MCPServer/default/leaky";
    let v = h
        .wait_object(key, T, "Running and healthy with its tools", |v| {
            up_and_healthy(v) && status(v)["tools"].as_array().is_some_and(|t| !t.is_empty())
        })
        .await
        .unwrap();
    // The tool named after the key is not offered, and the object says so (in its words, less the key).
    assert_eq!(status(Some(&v))["tools"], json!(["x_lk_echo", "x_lk_fail", "x_lk_refuse"]), "{v:#}");
    let warnings = status(Some(&v))["warnings"].to_string();
    assert!(warnings.contains(&format!("tools not offered: `lookup_{MARK}`")), "{v:#}");
    let ready = ready(&v);
    assert_eq!(ready["status"], "True", "{v:#}");
    assert!(ready["message"].as_str().unwrap_or_default().contains("tools not offered"), "{ready:#}");
    // The prompt named after the key is not offered either, and the object says so too (its
    // prompts are listed by the session's own task: the notice shows at the next report).
    let with_prompt = h
        .wait_object(key, T, "the prompt's notice", |v| {
            status(v)["warnings"]
                .to_string()
                .contains(&format!("prompts and resources not offered: prompt `greet_{MARK}`"))
        })
        .await
        .unwrap();
    assert_absent("the prompt's notice", &with_prompt.to_string());

    // `/mcp`: the tools listed carry the mark where the key was, and the key nowhere.
    let client = connect(h.port).await;
    let tools = client.peer().list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).filter(|n| n.starts_with("x_lk_")).collect();
    assert_eq!(names, ["x_lk_echo", "x_lk_fail", "x_lk_refuse"]);
    let echo = tools.iter().find(|t| t.name == "x_lk_echo").unwrap();
    assert_eq!(echo.description.as_deref(), Some("Echoes its input (signed with key <redacted>)."));
    assert_eq!(echo.input_schema["properties"]["message"]["description"], "Text to sign with key <redacted>");
    assert_absent("/mcp tools/list", &serde_json::to_string(&tools).unwrap());

    // A tool's error result and a server's refusal come back redacted; a good result is the caller's.
    let failed = call(&client, "x_lk_fail", json!({"message": "x"})).await;
    assert!(failed.contains(&format!("key {MARK} is not allowed here")) && failed.contains("isError"), "{failed}");
    let refused = call(&client, "x_lk_refuse", json!({"message": "x"})).await;
    assert!(refused.contains(&format!("key {MARK} refused")), "{refused}");
    let echoed = call(&client, "x_lk_echo", json!({"message": "plain"})).await;
    assert!(echoed.contains("plain"), "{echoed}");
    let named = call(&client, &format!("x_lk_lookup_{VALUE}"), json!({"message": "x"})).await;
    assert!(named.contains("offers tool"), "a tool that is not offered cannot be called: {named}");
    let got = call(&client, "core_mcpserver_get", json!({"name": "leaky"})).await;
    assert!(got.contains("x_lk_echo"), "{got}");
    for (where_, text) in [("the tool error", &failed), ("the refusal", &refused), ("core_mcpserver_get", &got)] {
        assert_absent(where_, text);
    }
    let _ = client.cancel().await;

    // The API, the CLI, then (stopped) the store and the log.
    for path in ["/api/v1/resources/MCPServer/default/leaky", "/api/v1/resources", "/api/v1/overview"] {
        let reply = h.http("GET", path, &[], b"");
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_absent(&format!("GET {path}"), &reply.body);
    }
    let (code, out, err) = h.cli(&["status", key, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tools not offered"), "{out}");
    assert_absent("steward status", &out);
    assert!(h.terminate().success());
    let store = std::fs::read(h.dir.path().join("state/state.redb")).unwrap();
    assert_absent("the store", &String::from_utf8_lossy(&store));
    assert_absent("the host's log", &h.log());
}

/// The number in a `stderr: N lines dropped (over R lines/s)` warning of the object.
fn dropped(v: Option<&Value>) -> Option<u64> {
    let warnings = status(v)["warnings"].as_array()?;
    let w = warnings.iter().filter_map(Value::as_str).find_map(|w| w.strip_prefix("stderr: "))?;
    w.split(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_its_stderr_keeps_running_and_its_object_counts_the_lines_dropped() {
    let mut h = Host::new("");
    h.start().await;
    h.write(
        "s.yaml",
        &shell_server("flood", r#"yes flood >&2 & exec "$SERVER" --stdio"#, json!({"SERVER": server_bin()})),
    );
    let key = "MCPServer/default/flood";
    let v = h
        .wait_object(key, T, "Running and healthy, lines dropped", |v| up_and_healthy(v) && dropped(v).is_some())
        .await
        .unwrap();
    let s = status(Some(&v));
    let warning = s["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.ends_with("lines dropped (over 100 lines/s)"), "{v:#}");
    assert!(s["tools"].as_array().is_some_and(|t| t.iter().any(|t| t == "x_lk_echo")), "{v:#}");
    assert!(s.get("lastError").is_none(), "{v:#}");
    assert!(ready(&v)["message"].as_str().unwrap_or_default().contains("lines dropped"), "{v:#}");
    let (first, pid) = (dropped(Some(&v)).unwrap(), s["pid"].clone());

    // It goes on counting while the server floods, and the server is still reported well.
    let v = h.wait_object(key, T, "more lines dropped", |v| dropped(v).is_some_and(|n| n > first)).await.unwrap();
    assert!(up_and_healthy(Some(&v)), "{v:#}");
    assert_eq!((&status(Some(&v))["pid"], &status(Some(&v))["restartCount"]), (&pid, &json!(0)), "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_too_large_for_one_message_is_named_as_the_cause() {
    let mut h = Host::new("");
    h.start().await;
    // 18 tools of 1 MiB each: a tools/list answer of about 18 MiB, over the 16 MiB of one message.
    let (py, script) = python_sdk("huge-tools-server.py");
    h.write("s.yaml", &shell_server("huge", r#"exec "$PY" "$SCRIPT" 18 1048576"#, json!({"PY": py, "SCRIPT": script})));
    let v = h
        .wait_object("MCPServer/default/huge", T, "Failed for the size of its tool list", |v| {
            status(v)["state"] == "Failed" && status(v)["lastError"].as_str().is_some_and(|e| e.contains("too large"))
        })
        .await
        .unwrap();
    let error = status(Some(&v))["lastError"].as_str().unwrap_or_default();
    assert!(error.starts_with("MCP handshake failed: the server's answer to tools/list is too large"), "{error}");
    assert!(error.contains("a message of 18.0 MiB") && error.contains("at most 16 MiB"), "{error}");
    assert!(error.contains("make the server list fewer tools"), "{error}");
    assert!(!error.contains("timed out"), "{error}");
    let ready = ready(&v);
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("Failed")), "{v:#}");
    assert!(ready["message"].as_str().unwrap_or_default().contains("too large"), "{ready:#}");
}
