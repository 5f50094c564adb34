//! Fault matrix, services rows: real MCP servers restarted between calls, a stdio server that stops answering, a command that does not exist; each seen through the API and the metrics, then repaired.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::model::ClientConfig;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::common;
use crate::common::host::{Host, MCP_DIRECT, free_port};
use crate::common::servers::{Real, start};

const T: Duration = Duration::from_secs(60);

fn ready(v: &Value) -> (&str, &str, &str) {
    let c = v["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let field = |k: &str| c.and_then(|c| c[k].as_str()).unwrap_or("");
    (field("status"), field("reason"), field("message"))
}

fn state(v: &Value) -> &str {
    v["status"]["state"].as_str().unwrap_or("")
}

/// No Rust type names or Debug output in text a person reads.
fn in_words(text: &str) {
    for inner in ["Transport(", "StreamableHttpError", "Client(", "reqwest::", "Error {", "kind:", "Some("] {
        assert!(!text.contains(inner), "`{inner}` in {text:?}");
    }
}

async fn connect(port: u16) -> RunningService<RoleClient, ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://127.0.0.1:{port}/mcp"));
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ClientConfig::default().serve(transport).await.expect("the MCP handshake with /mcp")
}

/// Calls `x_ev_echo` through the host's `/mcp`; the text of its answer, or of its error. The
/// timeout guards the test: a call that hangs fails it.
async fn echo(client: &RunningService<RoleClient, ClientConfig>, text: &str) -> Result<String, String> {
    let mut call = CallToolRequestParams::new("x_ev_echo");
    call.arguments = json!({"message": text}).as_object().cloned();
    match tokio::time::timeout(T, client.peer().call_tool(call)).await {
        Err(_) => panic!("a call through /mcp hung"),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(answer)) => {
            let content = serde_json::to_value(&answer.content).unwrap();
            let text = content[0]["text"].as_str().unwrap_or_default().to_string();
            if answer.is_error == Some(true) { Err(text) } else { Ok(text) }
        }
    }
}

async fn restarted_between_calls(real: Real) {
    let port = free_port();
    let mut server = start(real, port).await;
    let mut h =
        Host::new(&format!("  workflowrun: {{ capabilities: [tools], tools: {{ allow: [\"x_*\"] }} }}\n{MCP_DIRECT}"));
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.write(
        "ev.yaml",
        &format!(
            "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: ev\nspec:\n  type: streamable-http\n  url: http://127.0.0.1:{port}/mcp\n  autoStart: true\n  toolPrefix: ev\n"
        ),
    );
    h.write(
        "say.yaml",
        "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: say\nspec:\n  args:\n    what: { type: string, required: true }\n  steps:\n    - id: say\n      tool: x_ev_echo\n      args:\n        message: \"{{ .input.what }}\"\n      output: true\n",
    );
    h.start().await;
    h.wait_object("MCPServer/default/ev", T, "Connected and Ready", |v| {
        v.is_some_and(|v| state(v) == "Connected" && ready(v).0 == "True")
    })
    .await;
    let client = connect(h.port).await;
    let first = common::eventually(T, "x_ev_echo answers", async || echo(&client, "one").await, |r| r.is_ok()).await;
    assert!(first.unwrap().ends_with("one"));

    // Down, and one call while it is: the call fails at once, in words; the object goes
    // not Ready with words, and the host reconnects with backoff.
    server.kill().await.unwrap();
    let _ = server.wait().await;
    let err = echo(&client, "while down").await.expect_err("nothing answers while the server is down");
    in_words(&err);
    let v = h
        .wait_object("MCPServer/default/ev", T, "Disconnected and not Ready", |v| {
            v.is_some_and(|v| state(v) == "Disconnected" && ready(v).0 == "False")
        })
        .await
        .unwrap();
    let (_, reason, message) = ready(&v);
    assert!(!reason.is_empty() && !message.is_empty(), "{v:#}");
    in_words(message);
    in_words(v["status"]["lastError"].as_str().unwrap_or(""));
    assert!(message.contains(&format!("127.0.0.1:{port}")), "the message names the server: {v:#}");

    // Up again: Ready again, and a call succeeds at once, through /mcp and through the executor.
    let _server = start(real, port).await;
    h.wait_object("MCPServer/default/ev", T, "Connected and Ready again", |v| {
        v.is_some_and(|v| state(v) == "Connected" && ready(v).0 == "True")
    })
    .await;
    let answer = echo(&client, "after the restart").await.expect("a call after the restart");
    assert!(answer.ends_with("after the restart"), "{answer}");
    let before = h.metric("steward_tool_calls_total", &["kind=\"WorkflowRun\"", "result=\"succeeded\""]).await;
    let (code, out, err) =
        h.cli_within(&["workflow", "run", "say", "--arg", "what=through the executor", "--wait", "-o", "json"], T);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("through the executor"), "{out}");
    let after = h.metric("steward_tool_calls_total", &["kind=\"WorkflowRun\"", "result=\"succeeded\""]).await;
    assert_eq!(after, before + 1.0, "the executor's call succeeded");
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_restarted_between_calls_goes_not_ready_then_ready_and_calls_never_hang() {
    restarted_between_calls(Real::Everything).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_restarted_between_calls_goes_not_ready_then_ready_and_calls_never_hang() {
    restarted_between_calls(Real::PythonSdk).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_stops_answering_goes_not_ready_and_is_restarted() {
    let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string();
    let mut h = Host::new(MCP_DIRECT);
    // Probed every second (`healthInterval`), a probe failing after 1 s (`timeout`).
    h.write(
        "s.yaml",
        &format!(
            "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: mute\nspec:\n  type: stdio\n  command: \"{bin}\"\n  args: [\"--stdio\"]\n  autoStart: true\n  timeout: 1\n"
        ),
    );
    h.start().await;
    let v = h
        .wait_object("MCPServer/default/mute", T, "Running and Ready", |v| {
            v.is_some_and(|v| state(v) == "Running" && ready(v).0 == "True")
        })
        .await
        .unwrap();
    let pid = v["status"]["pid"].as_u64().unwrap();
    let client = connect(h.port).await;
    // SAFETY: kill(2) on a process this test's host started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    crate::common::wait_stopped(pid as u32).await;
    // A call notices it (the host's periodic probe is 30 s away): it times out, then the host
    // probes at once and finds that the server does not answer.
    let mut call = CallToolRequestParams::new("x_mute_echo");
    call.arguments = json!({"message": "hello?"}).as_object().cloned();
    let call = tokio::spawn(async move {
        let r = tokio::time::timeout(T, client.peer().call_tool(call)).await;
        (client, r)
    });
    let v = h
        .wait_object("MCPServer/default/mute", T, "not Ready: it does not answer", |v| {
            v.is_some_and(|v| ready(v).0 == "False" && ready(v).2.contains("does not answer"))
        })
        .await
        .unwrap();
    assert_eq!(v["status"]["health"], "Unhealthy", "{v:#}");
    in_words(ready(&v).2);
    let v = h
        .wait_object("MCPServer/default/mute", T, "restarted after it stopped answering", |v| {
            v.is_some_and(|v| v["status"]["pid"].as_u64().is_some_and(|p| p != pid) && ready(v).0 == "True")
        })
        .await
        .unwrap();
    assert!(v["status"]["restartCount"].as_u64().unwrap_or(0) >= 1, "{v:#}");
    // The call in flight on the stopped server ended with its session, not at its deadline.
    let (client, answered) = call.await.unwrap();
    match answered.expect("the call ended") {
        Ok(r) => {
            assert_eq!(r.is_error, Some(true), "the stopped server never answered it: {r:?}");
            in_words(&serde_json::to_string(&r.content).unwrap());
        }
        Err(e) => in_words(&e.to_string()),
    }
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_does_not_exist_is_shown_with_its_path_until_it_appears() {
    let mut h = Host::new("");
    let bin = h.dir.path().join("bin/late-mcp-server");
    h.write(
        "s.yaml",
        &format!(
            "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: late\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\", \"--token=s3cr3t-value\"]\n  autoStart: true\n",
            bin.display()
        ),
    );
    h.start().await;
    let v = h
        .wait_object("MCPServer/default/late", T, "Failed and not Ready", |v| {
            v.is_some_and(|v| state(v) == "Failed" && ready(v).0 == "False")
        })
        .await
        .unwrap();
    let err = v["status"]["lastError"].as_str().unwrap_or("");
    assert!(
        err.starts_with(&format!("cannot start `{} --stdio --token=", bin.display())),
        "the command as given: {v:#}"
    );
    assert!(err.contains("No such file or directory"), "{v:#}");
    assert!(!serde_json::to_string(&v).unwrap().contains("s3cr3t-value"), "{v:#}");
    assert!(ready(&v).2.contains(&bin.display().to_string()), "{v:#}");

    // The program appears: the next attempt runs it, and the object is Ready.
    let real = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    let tmp = bin.with_extension("tmp");
    std::fs::write(&tmp, format!("#!/bin/sh\nexec \"{}\" --stdio\n", real.display())).unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &bin).unwrap();
    h.wait_object("MCPServer/default/late", T, "Running and Ready", |v| {
        v.is_some_and(|v| state(v) == "Running" && ready(v).0 == "True")
    })
    .await;
}
