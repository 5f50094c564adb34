//! Owned services end to end: real MCP server processes and a real MCP round trip.

use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::host::Host;

const T: Duration = Duration::from_secs(60);

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

fn stdio_server(name: &str, command: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  type: stdio\n  command: \"{command}\"\n  args: [{}]\n  autoStart: true\n  toolPrefix: ex\n  timeout: 10\n",
        args.join(", ")
    )
}

fn workflow(name: &str, tools: &[&str]) -> String {
    let steps: Vec<String> =
        tools.iter().enumerate().map(|(i, t)| format!("    - id: s{i}\n      tool: {t}\n")).collect();
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {name}\nspec:\n  steps:\n{}",
        steps.concat()
    )
}

fn state(v: Option<&Value>) -> &str {
    v.and_then(|v| v["status"]["state"].as_str()).unwrap_or("")
}

fn pid_of(v: &Value) -> u32 {
    v["status"]["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {v:#}")) as u32
}

/// True while `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

async fn wait_gone(pid: u32) {
    common::eventually(T, format!("process {pid} to end"), async || alive(pid), |alive| !alive).await;
}

fn ready(v: Option<&Value>) -> Option<&str> {
    v?["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["status"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_starts_restarts_after_kill_9_restarts_on_change_and_stops_on_delete() {
    let mut h = Host::new("");
    let bin = server_bin();
    h.start().await;
    h.write("s.yaml", &stdio_server("git", &bin, &["--stdio"]));
    let v = h
        .wait_object("MCPServer/default/git", T, "Running with tools", |v| {
            state(v) == "Running" && v.is_some_and(|v| v["status"]["tools"].as_array().is_some_and(|t| !t.is_empty()))
        })
        .await
        .unwrap();
    assert_eq!(
        v["status"]["tools"],
        serde_json::json!([
            "x_ex_add",
            "x_ex_count",
            "x_ex_crash",
            "x_ex_echo",
            "x_ex_fail",
            "x_ex_json",
            "x_ex_sleep",
            "x_ex_time"
        ])
    );
    assert_eq!(v["status"]["health"], "Healthy");
    assert_eq!(ready(Some(&v)), Some("True"));
    let pid = pid_of(&v);
    assert!(alive(pid));
    let restarts = ["kind=\"MCPServer\"", "namespace=\"default\"", "name=\"git\"", "service=\"server\""];
    assert_eq!(h.metric("steward_service_restarts_total", &restarts).await, 0.0, "not restarted yet");

    // kill -9 from outside: noticed, restarted with backoff, restartCount rises, and so does
    // `steward_service_restarts_total`.
    assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    let v = h
        .wait_object("MCPServer/default/git", T, "restarted", |v| {
            v.is_some_and(|v| {
                v["status"]["restartCount"].as_u64() >= Some(1)
                    && v["status"]["state"] == "Running"
                    && v["status"]["pid"].as_u64() != Some(pid as u64)
            })
        })
        .await
        .unwrap();
    let pid2 = pid_of(&v);
    assert!(alive(pid2));
    let counted = h.metric("steward_service_restarts_total", &restarts).await;
    assert_eq!(counted, v["status"]["restartCount"].as_u64().unwrap() as f64, "the metric counts each restart");

    // A spec change restarts it with the new spec.
    h.write("s.yaml", &stdio_server("git", &bin, &["--stdio", "--extra-tool", "blame"]));
    let v = h
        .wait_object("MCPServer/default/git", T, "the new tool", |v| {
            v.is_some_and(|v| v["status"]["tools"].as_array().is_some_and(|t| t.iter().any(|t| t == "x_ex_blame")))
        })
        .await
        .unwrap();
    assert_ne!(pid_of(&v), pid2);
    wait_gone(pid2).await;
    let pid3 = pid_of(&v);

    // Deleting the resource stops the process.
    h.remove("s.yaml");
    h.wait_object("MCPServer/default/git", T, "forgotten", |v| v.is_none()).await;
    wait_gone(pid3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_command_does_not_exist_fails_with_a_clear_error() {
    let mut h = Host::new("");
    h.write("s.yaml", &stdio_server("ghost", "no-such-mcp-server", &[]));
    h.start().await;
    let v = h.wait_object("MCPServer/default/ghost", T, "Failed", |v| state(v) == "Failed").await.unwrap();
    let err = v["status"]["lastError"].as_str().unwrap();
    assert!(err.contains("no-such-mcp-server") && err.contains("No such file"), "{err}");
    assert_eq!(ready(Some(&v)), Some("False"));
    assert_eq!(v["phase"], "Synced", "the object reconciled fine; the server it describes failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_survives_kill_9_of_the_host_and_the_next_start_runs_them_anew() {
    let mut h = Host::new("");
    h.write("s.yaml", &stdio_server("git", &server_bin(), &["--stdio"]));
    h.start().await;
    let v = h.wait_object("MCPServer/default/git", T, "Running", |v| state(v) == "Running").await.unwrap();
    let pid = pid_of(&v);
    h.kill9();
    wait_gone(pid).await;
    h.start().await;
    let v = h
        .wait_object("MCPServer/default/git", T, "Running anew", |v| {
            state(v) == "Running" && v.is_some_and(|v| v["status"]["pid"].as_u64() != Some(pid as u64))
        })
        .await
        .unwrap();
    assert!(alive(pid_of(&v)));
    // A clean stop stops the children too.
    let pid = pid_of(&v);
    assert!(h.terminate().success());
    wait_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_on_loopback_connects() {
    use std::io::{BufRead, BufReader};
    let mut server = std::process::Command::new(server_bin())
        .args(["--http", "127.0.0.1:0", "--extra-tool", "remote"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("the server prints its address").unwrap();
        if let Some(u) = line.split("listening on ").nth(1) {
            break u.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let mut h = Host::new("");
    h.write(
        "r.yaml",
        &format!("apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: remote\nspec:\n  type: streamable-http\n  url: {url}\n  autoStart: true\n  toolPrefix: r\n"),
    );
    h.start().await;
    let v = h.wait_object("MCPServer/default/remote", T, "Connected", |v| state(v) == "Connected").await.unwrap();
    assert!(v["status"]["tools"].as_array().unwrap().iter().any(|t| t == "x_r_remote"), "{v:#}");
    assert!(v["status"]["lastConnected"].is_string());
    assert_eq!(ready(Some(&v)), Some("True"));
    let _ = server.kill();
    let _ = server.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_becomes_ready_by_itself_when_a_server_with_its_tool_runs() {
    let mut h = Host::new("");
    h.write("w.yaml", &workflow("wf", &["x_ex_special", "x_ex_echo"]));
    h.start().await;
    let v = h.wait_object("Workflow/default/wf", T, "not ready", |v| ready(v) == Some("False")).await.unwrap();
    assert_eq!(v["status"]["missingTools"], serde_json::json!(["x_ex_echo", "x_ex_special"]));
    assert_eq!(v["status"]["referencedTools"], serde_json::json!(["x_ex_echo", "x_ex_special"]));

    h.write("s.yaml", &stdio_server("tools", &server_bin(), &["--extra-tool", "special"]));
    let v = h.wait_object("Workflow/default/wf", T, "ready", |v| ready(v) == Some("True")).await.unwrap();
    assert_eq!(v["status"]["missingTools"], serde_json::json!([]));
    assert_eq!(v["generation"], 1, "the workflow itself never changed");

    h.remove("s.yaml");
    let v = h.wait_object("Workflow/default/wf", T, "unready again", |v| ready(v) == Some("False")).await.unwrap();
    assert_eq!(v["status"]["missingTools"], serde_json::json!(["x_ex_echo", "x_ex_special"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_errors_carry_field_paths() {
    let mut h = Host::new("");
    h.write("bad.yaml", "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: bad\nspec:\n  type: stdio\n  autoStart: true\n");
    h.write("badwf.yaml", "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: badwf\nspec:\n  steps:\n    - id: a\n      tool: t\n    - id: a\n      tool: t\n");
    h.start().await;
    let v = h
        .wait_object("MCPServer/default/bad", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed"))
        .await
        .unwrap();
    assert!(v["lastError"].as_str().unwrap().contains("spec.command"), "{v:#}");
    let v = h
        .wait_object("Workflow/default/badwf", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed"))
        .await
        .unwrap();
    assert!(v["lastError"].as_str().unwrap().contains("spec.steps[1].id"), "{v:#}");
}

/// The bundled MCPServer plugin and the host together: an `env` value `valueFrom` a file reaches
/// the server's process, while the plugin, the status and the API only ever hold the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcpserver_env_value_from_a_file_reaches_the_server_and_never_its_status() {
    const VALUE: &str = "tok-9Qw2-from-a-file";
    let mut h = Host::new("");
    h.start().await;
    // Relative: read from the config file's directory when the host starts the process.
    std::fs::write(h.dir.path().join("token"), format!("{VALUE}\n")).unwrap();
    let seen = h.dir.path().join("seen");
    let server = serde_json::json!({
        "apiVersion": "steward.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "by-ref"},
        "spec": {
            "type": "stdio",
            "command": "/bin/sh",
            "args": ["-c", r#"printf '%s' "$TOKEN" > "$SEEN"; exec "$SERVER" --stdio"#],
            "env": {"SEEN": seen.display().to_string(), "SERVER": server_bin(), "TOKEN": {"valueFrom": {"file": "token"}}},
            "autoStart": true,
            "toolPrefix": "ex",
        },
    });
    h.write("s.yaml", &server.to_string());
    h.wait_object("MCPServer/default/by-ref", T, "Running", |v| state(v) == "Running").await;
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), VALUE, "the server's environment has the file's value");
    // The object and its spec as the API shows them: the reference, never the value.
    for (path, holds) in [
        ("/api/v1/resources/MCPServer/default/by-ref", "Running"),
        ("/api/v1/resources/MCPServer/default/by-ref/spec", "valueFrom"),
    ] {
        let reply = h.http("GET", path, &[], b"");
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert!(reply.body.contains(holds), "{path}: {}", reply.body);
        assert!(!reply.body.contains(VALUE), "{path} shows the value: {}", reply.body);
    }
}

/// A remote server that answers HTTP 401 is muster's `Auth Required` through the bundled
/// MCPServer plugin and the host's services, not `Disconnected`: Ready is False for
/// `AuthRequired`, and the host keeps retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_answering_401_is_auth_required_not_disconnected() {
    use axum::http::{StatusCode, header};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .fallback(|| async { (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, r#"Bearer realm="test""#)]) });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut h = Host::new("");
    h.start().await;
    let server = serde_json::json!({
        "apiVersion": "steward.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "needs-auth"},
        "spec": {"type": "streamable-http", "url": format!("http://127.0.0.1:{port}/mcp"), "autoStart": true},
    });
    h.write("r.yaml", &server.to_string());
    let v = h
        .wait_object("MCPServer/default/needs-auth", T, "Auth Required", |v| state(v) == "Auth Required")
        .await
        .unwrap();
    let ready = v["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned();
    let ready = ready.unwrap_or_else(|| panic!("no Ready condition: {v:#}"));
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("AuthRequired")), "{v:#}");
}
