//! Remote sessions against real MCP servers restarted between calls: the reference `everything` server (TypeScript SDK) and one on the official Python SDK.
//!
//! They differ in how they answer a request on a session they do not know (the Python SDK: HTTP
//! 404; `everything`: HTTP 400 with an error naming no request); neither may make a call hang.
//! Both are installed by `testing/mcp-servers/install` (npm and pip, pinned, cached).

use std::path::PathBuf;

use super::*;

/// The cache dir `testing/mcp-servers/install` fills (run once per test process).
fn servers_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let install = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-servers/install");
        let out = std::process::Command::new(&install)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", install.display()));
        assert!(out.status.success(), "{} failed ({}); its output is above", install.display(), out.status);
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// Which real server.
#[derive(Clone, Copy, Debug)]
enum Real {
    /// `@modelcontextprotocol/server-everything`, streamable HTTP.
    Everything,
    /// `testing/mcp-servers/py-server.py` on the `mcp` package.
    PythonSdk,
}

/// A loopback port free now (the OS picks it), to start a server on and start it again on.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `real` on `port`; returns it once it listens, with its URL.
async fn start(real: Real, port: u16) -> (tokio::process::Child, String) {
    let dir = servers_dir();
    let mut cmd = match real {
        Real::Everything => {
            let mut c = tokio::process::Command::new("node");
            c.arg(dir.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
                .arg("streamableHttp")
                .env("PORT", port.to_string());
            c
        }
        Real::PythonSdk => {
            let mut c = tokio::process::Command::new(dir.join("py/bin/python3"));
            c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-servers/py-server.py"))
                .arg(port.to_string());
            c
        }
    };
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(&format!("listening on port {port}")) || line.contains("Uvicorn running on") {
                return;
            }
        }
        panic!("{real:?} ended before listening");
    })
    .await
    .unwrap_or_else(|_| panic!("{real:?} did not say it listens"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// Calls `echo` on `live` as the host's router does: bounded, reporting a transport failure to
/// the supervisor. The text it answers, or the failure in words and whether it reached the server.
async fn call_echo(live: &super::super::LiveSession, text: &str) -> Result<String, (String, bool)> {
    let mut params = rmcp::model::CallToolRequestParams::new("echo");
    params.arguments = Some(serde_json::json!({"message": text}).as_object().unwrap().clone());
    // The guard of the test, not a figure: a call that hangs fails the test here.
    match tokio::time::timeout(DEADLINE, live.peer.call_tool(params)).await {
        Err(_) => panic!("a call on the session hung"),
        Ok(Ok(r)) => {
            live.call_answered();
            let content = serde_json::to_value(&r.content).unwrap();
            Ok(content[0]["text"].as_str().unwrap_or_default().to_string())
        }
        Ok(Err(e)) => {
            let (words, not_reached) = super::super::request_failure(&e);
            live.call_failed(words.clone());
            Err((words, not_reached))
        }
    }
}

/// Asserts that `echo` on `live` answers with `text` (`everything` prefixes it with `Echo: `).
async fn assert_echoes(live: &super::super::LiveSession, text: &str) {
    let answer = call_echo(live, text).await.unwrap_or_else(|(e, _)| panic!("echo {text}: {e}"));
    assert!(answer == text || answer == format!("Echo: {text}"), "{answer:?}");
}

/// No Rust type names or Debug output in text a person reads.
fn in_words(text: &str) {
    for inner in ["Transport(", "StreamableHttpError", "Client(", "reqwest::", "Error {", "kind:"] {
        assert!(!text.contains(inner), "`{inner}` in {text:?}");
    }
}

async fn restarted_between_calls(real: Real) {
    // Probes far apart: what notices the restart here is the call, then the reconnect.
    let mut h = Harness::with(|o| o.health_interval = Duration::from_secs(600));
    let o = owner(&format!("restart-{real:?}").to_lowercase());
    let port = free_port();
    let (mut server, url) = start(real, port).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let first = h.mgr.session(&o, "web").expect("a connected service shares its session");
    assert_echoes(&first, "one").await;

    // Down: the call fails at once, in words, as one that never reached the server; the
    // service goes Disconnected with the cause and is reconnected with backoff.
    server.kill().await.unwrap();
    let (words, not_reached) = call_echo(&first, "while down").await.unwrap_err();
    assert!(not_reached, "a refused connection cannot have reached the server: {words}");
    in_words(&words);
    let red = h
        .wait_history(&o, "web", "Disconnected by the failed call", |s| {
            s.phase == "Disconnected" && s.message.as_deref().is_some_and(|m| m.starts_with("a tool call failed: "))
        })
        .await;
    assert_eq!(red.healthy, Some(false), "{red:#?}");
    in_words(red.message.as_deref().unwrap());
    assert!(h.mgr.session(&o, "web").is_none(), "the broken session is withdrawn");
    let down = h
        .wait_for(&o, "a failed reconnect", |s| {
            s.len() == 1
                && s[0].phase == "Disconnected"
                && s[0].message.as_deref().is_some_and(|m| m.starts_with(&format!("cannot reach {url}: ")))
        })
        .await;
    in_words(one(&down).message.as_deref().unwrap());
    assert!(one(&down).next_retry_at.is_some(), "{down:#?}");

    // Up again on the same port: reconnected, and calls answer on the new session.
    let (_server, _) = start(real, port).await;
    let green = h.wait_for(&o, "Connected again", phase_is("Connected")).await;
    let s = one(&green);
    assert!(s.healthy == Some(true) && s.message.is_none() && s.restarts >= 1, "{s:#?}");
    let renewed = h.mgr.session(&o, "web").expect("the new session is shared");
    assert_echoes(&renewed, "two").await;
    h.mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_everything_server_restarted_between_calls_is_reconnected_and_never_hangs_a_call() {
    restarted_between_calls(Real::Everything).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_sdk_server_restarted_between_calls_is_reconnected_and_never_hangs_a_call() {
    restarted_between_calls(Real::PythonSdk).await;
}

/// Without a call or a probe in between, the restart is noticed by the next probe, which asks
/// the shared session: it is re-established, and kept shared.
#[tokio::test(flavor = "multi_thread")]
async fn a_probe_after_a_restart_re_establishes_the_shared_session() {
    let mut h = Harness::with(|o| o.health_interval = Duration::from_millis(200));
    let o = owner("restart-probe");
    let port = free_port();
    let (mut server, url) = start(Real::Everything, port).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let first = h.mgr.session(&o, "web").expect("shared");
    server.kill().await.unwrap();
    h.wait_for(&o, "Disconnected", phase_is("Disconnected")).await;
    let (_server, _) = start(Real::Everything, port).await;
    h.wait_for(&o, "Connected again", phase_is("Connected")).await;
    // The session shared before the restart answers: the probe re-established it.
    assert_echoes(&first, "after").await;
    let live = h.mgr.session(&o, "web").expect("shared");
    assert_echoes(&live, "again").await;
    h.mgr.shutdown().await;
}
