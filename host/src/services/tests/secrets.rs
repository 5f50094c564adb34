//! Secret values reach the service (a stdio child's environment, a remote server's headers) and nothing else; a missing one is retried; a 401 is `auth_required`.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use steward_sdk::{SecretSource, SecretTarget, SecretValue};

use super::*;
use crate::services::Secrets;
use crate::telemetry::capture::Capture;

/// The secret value every test looks for where it must not be.
const VALUE: &str = "zq7-Secret-Value-9xk";

/// Everything tracing writes while it lives (log lines at every level, and spans), on this
/// thread: a `#[tokio::test]` runtime runs its tasks here.
struct Captured {
    lines: Arc<Mutex<Vec<u8>>>,
    spans: Capture,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn start() -> Self {
        use tracing_subscriber::prelude::*;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(lines.clone());
        let spans = Capture::default();
        let subscriber = tracing_subscriber::registry().with(spans.clone()).with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || sink.clone())
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
        );
        Self { lines, spans, _guard: crate::telemetry::capture::install(subscriber) }
    }

    /// The log lines and every service span (fields and events), as text.
    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.lines.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
        for name in ["service", "service_start", "service_probe"] {
            text.push_str(&format!("{:?}", self.spans.named(name)));
        }
        text
    }
}

fn from_file(target: SecretTarget, name: &str, path: &Path) -> SecretValue {
    SecretValue { target, name: name.into(), source: SecretSource::File { path: path.display().to_string() } }
}

/// Asserts `VALUE` is in none of `texts`, naming where it was found.
fn assert_absent(texts: &[(&str, &str)]) {
    for (where_, text) in texts {
        assert!(!text.contains(VALUE), "the secret value leaked into {where_}");
    }
}

/// A stdio service whose shell writes `$TOKEN` to the file `$SEEN` before it becomes the MCP server.
fn env_echoing_server(seen: &Path) -> ServiceSpec {
    let (py, args) = py_server(&[]);
    let mut spec = stdio(
        "srv",
        ("/bin/sh".into(), vec!["-c".into(), r#"printf '%s' "$TOKEN" > "$SEEN"; exec "$PY" "$SCRIPT""#.into()]),
    );
    spec.env.insert("SEEN".into(), seen.display().to_string());
    spec.env.insert("PY".into(), py);
    spec.env.insert("SCRIPT".into(), args[0].clone());
    spec
}

#[tokio::test]
async fn a_stdio_service_gets_its_secret_in_its_environment_and_nowhere_else() {
    let logs = Captured::start();
    let mut h = Harness::new();
    let o = owner("secret-env");
    let dir = tempfile::tempdir().unwrap();
    let (secret, seen) = (dir.path().join("token"), dir.path().join("seen"));
    let mut spec = env_echoing_server(&seen);
    spec.secrets = vec![from_file(SecretTarget::Env, "TOKEN", &secret)];
    h.mgr.ensure(&o, vec![spec]);

    // The file is missing: the start fails, names the reference, and is retried with backoff.
    let obs = h
        .wait_for(&o, "Failed for the missing file", |o| {
            o.len() == 1 && o[0].phase == "Failed" && o[0].consecutive_failures >= 2
        })
        .await;
    let message = obs[0].message.clone().unwrap_or_default();
    assert!(message.contains("env `TOKEN`") && message.contains("does not exist"), "{message}");
    assert!(obs[0].next_retry_at.is_some(), "a missing secret is retried: {obs:#?}");

    // Once it appears, the next start uses it.
    std::fs::write(&secret, format!("{VALUE}\n")).unwrap();
    let obs = h.wait_for(&o, "Running", phase_is("Running")).await;
    let pid = one(&obs).pid.unwrap();
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), VALUE, "the child got the value in its environment");
    let argv = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap()).into_owned();
    h.mgr.shutdown().await;

    let statuses = serde_json::to_string(&h.mgr.history(&o, "srv")).unwrap();
    let text = logs.text();
    assert!(!logs.spans.named("service_start").is_empty() && !text.is_empty(), "the capture saw the service");
    assert_absent(&[("argv", &argv), ("the service status", &statuses), ("the log and trace output", &text)]);
}

/// A streamable-HTTP MCP server that answers 401 (with a `WWW-Authenticate` challenge) to any
/// request whose `Authorization` is not `want`, and records each `Authorization` it was sent.
#[derive(Clone)]
struct Guarded {
    want: String,
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

async fn guarded_mcp(State(g): State<Guarded>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    g.seen.lock().unwrap_or_else(|e| e.into_inner()).push(auth.clone());
    if auth.as_deref() != Some(g.want.as_str()) {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, r#"Bearer realm="steward-test""#)])
            .into_response();
    }
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else { return StatusCode::BAD_REQUEST.into_response() };
    let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method {
        "initialize" => json!({
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "guarded", "version": "0"},
        }),
        "tools/list" => json!({"tools": [{"name": "guarded_tool", "inputSchema": {"type": "object"}}]}),
        _ => json!({}),
    };
    ([("mcp-session-id", "s1")], axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))).into_response()
}

/// Serves [`guarded_mcp`] on a free loopback port; returns its URL and what it was sent.
async fn guarded_server(want: &str) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(guarded_mcp)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .with_state(Guarded { want: want.into(), seen: seen.clone() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test]
async fn a_remote_server_answering_401_is_auth_required_until_the_secret_header_is_right() {
    let logs = Captured::start();
    let mut h = Harness::new();
    let o = owner("secret-header");
    let (url, sent) = guarded_server(&format!("Bearer {VALUE}")).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("authorization");
    std::fs::write(&secret, "Bearer not-the-one\n").unwrap();
    let mut spec = remote("web", Transport::StreamableHttp, &url);
    spec.secrets = vec![from_file(SecretTarget::Header, "Authorization", &secret)];
    h.mgr.ensure(&o, vec![spec]);

    let obs =
        h.wait_for(&o, "auth required", |o| o.len() == 1 && o[0].auth_required && o[0].phase == "Disconnected").await;
    let s = one(&obs);
    let message = s.message.clone().unwrap_or_default();
    assert!(message.contains("401") && message.contains("wants authorization"), "{message}");
    assert!(message.contains("no per-user OAuth") && message.contains("`Authorization` header"), "{message}");
    assert!(s.next_retry_at.is_some(), "it keeps retrying: {s:#?}");

    // The secret changes: the next connect reads it, succeeds, and clears `auth_required`.
    std::fs::write(&secret, format!("Bearer {VALUE}\n")).unwrap();
    let obs = h.wait_for(&o, "Connected", phase_is("Connected")).await;
    let s = one(&obs);
    assert!(!s.auth_required && s.message.is_none(), "{s:#?}");
    assert_eq!(tool_names(s), ["guarded_tool"]);
    let expected = format!("Bearer {VALUE}");
    assert!(
        sent.lock().unwrap().iter().any(|a| a.as_deref() == Some(expected.as_str())),
        "the server received the header"
    );
    h.mgr.shutdown().await;

    let statuses = serde_json::to_string(&h.mgr.history(&o, "web")).unwrap();
    let text = logs.text();
    assert!(!logs.spans.named("service_probe").is_empty(), "the capture saw the probes");
    assert_absent(&[("the service status", &statuses), ("the log and trace output", &text)]);
}

#[tokio::test]
async fn a_401_without_a_challenge_is_auth_required_too() {
    let mut h = Harness::new();
    let o = owner("plain-401");
    let (_server, url) = http_server(py_server(&["--require-header", "Authorization=Bearer x"]), 0).await;
    h.mgr.ensure(&o, vec![remote("web", Transport::StreamableHttp, &url)]);
    let obs = h.wait_for(&o, "auth required", |o| o.len() == 1 && o[0].auth_required).await;
    assert_eq!(one(&obs).phase, "Disconnected");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn a_secret_key_ref_is_refused_in_filesystem_mode_without_retrying() {
    let mut h = Harness::new();
    let o = owner("no-cluster");
    let mut spec = stdio("srv", py_server(&[]));
    spec.secrets = vec![SecretValue {
        target: SecretTarget::Env,
        name: "TOKEN".into(),
        source: SecretSource::SecretKeyRef { name: "creds".into(), namespace: None, key: "token".into() },
    }];
    h.mgr.ensure(&o, vec![spec]);
    let obs = h.wait_for(&o, "Failed", phase_is("Failed")).await;
    let s = one(&obs);
    assert!(s.message.as_deref().unwrap_or_default().contains("needs Kubernetes mode"), "{s:#?}");
    assert!(s.next_retry_at.is_none() && s.pid.is_none(), "refused, not retried: {s:#?}");
    h.mgr.shutdown().await;
}

#[tokio::test]
async fn in_kubernetes_mode_a_secret_key_ref_is_read_from_the_objects_namespace_once_it_exists() {
    use k8s_openapi::api::core::v1::Secret;
    let server = steward_fake_apiserver::FakeApiServer::start().await;
    let client = server.client();
    let dir = tempfile::tempdir().unwrap();
    let opts = test_opts(dir.path());
    let reader = Arc::new(crate::kubernetes::secrets::ClusterSecrets::new(client.clone()));
    let (mgr, rx) = ServiceManager::start(opts, Secrets::Kubernetes(reader)).unwrap();
    let mut h = Harness { mgr, rx, notified: Vec::new(), dir };
    let o = owner("kube-secret");
    let seen = h.dir.path().join("seen");
    let key_ref = |ns: Option<&str>| SecretValue {
        target: SecretTarget::Env,
        name: "TOKEN".into(),
        source: SecretSource::SecretKeyRef {
            name: "creds".into(),
            namespace: ns.map(str::to_string),
            key: "token".into(),
        },
    };
    let mut spec = env_echoing_server(&seen);
    spec.secrets = vec![key_ref(None)];
    let mut other_ns = env_echoing_server(&seen);
    other_ns.name = "z-other-namespace".into();
    other_ns.secrets = vec![key_ref(Some("kube-system"))];
    h.mgr.ensure(&o, vec![spec, other_ns]);

    let obs = h
        .wait_for(&o, "one waiting for the Secret, one refused", |o| {
            o.len() == 2 && o[0].phase == "Failed" && o[0].consecutive_failures >= 1 && o[1].phase == "Failed"
        })
        .await;
    let waiting = obs[0].message.clone().unwrap_or_default();
    assert!(waiting.contains("Secret `default/creds` does not exist") && waiting.contains("create it"), "{waiting}");
    let refused = obs[1].message.clone().unwrap_or_default();
    assert!(refused.contains("another namespace"), "{refused}");
    assert!(obs[1].next_retry_at.is_none(), "a cross-namespace reference is refused, not retried");

    let api: kube::Api<Secret> = kube::Api::namespaced(client, "default");
    let created: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"token": VALUE},
    }))
    .unwrap();
    api.create(&Default::default(), &created).await.unwrap();
    let obs = h.wait_for(&o, "Running", |o| o.len() == 2 && o[0].phase == "Running").await;
    assert!(obs[0].pid.is_some());
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), VALUE, "the child got the Secret's decoded value");
    let gets = server.requests().iter().filter(|r| r.resource.as_deref() == Some("secrets")).count();
    assert!(gets >= 2, "read on each start, never listed or watched: {gets}");
    assert!(
        server
            .requests()
            .iter()
            .filter(|r| r.resource.as_deref() == Some("secrets"))
            .all(|r| r.namespace.as_deref() == Some("default"))
    );
    h.mgr.shutdown().await;
    assert_absent(&[("the service status", &serde_json::to_string(&h.mgr.history(&o, "srv")).unwrap())]);
}

#[tokio::test]
async fn a_secret_the_child_prints_back_is_redacted_from_its_status() {
    let mut h = Harness::new();
    let o = owner("secret-echo");
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("token");
    std::fs::write(&secret, VALUE).unwrap();
    // A child that complains with its credential on stderr and exits: the host shows the tail of
    // its stderr in the message, the way a user debugging a crash wants it, less the value.
    let mut spec = stdio(
        "srv",
        ("/bin/sh".into(), vec!["-c".into(), r#"echo "invalid key $TOKEN (bearer $TOKEN)" >&2; exit 3"#.into()]),
    );
    spec.secrets = vec![from_file(SecretTarget::Env, "TOKEN", &secret)];
    h.mgr.ensure(&o, vec![spec]);
    let obs = h
        .wait_for(&o, "a failed start that printed the key", |o| {
            o.len() == 1 && o[0].message.as_deref().is_some_and(|m| m.contains("invalid key"))
        })
        .await;
    h.mgr.shutdown().await;
    let message = obs[0].message.clone().unwrap_or_default();
    assert!(message.contains("invalid key <redacted>"), "{message}");
    let statuses = serde_json::to_string(&h.mgr.history(&o, "srv")).unwrap();
    assert_absent(&[("the message", &message), ("the service status", &statuses)]);
}

#[tokio::test]
async fn a_secret_the_child_prints_on_stderr_is_redacted_from_the_log() {
    let logs = Captured::start();
    let mut h = Harness::new();
    let o = owner("secret-stderr");
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("token");
    std::fs::write(&secret, VALUE).unwrap();
    // A server that prints its key on stderr as it starts, and then works.
    let (py, args) = py_server(&[]);
    let mut spec = stdio(
        "srv",
        ("/bin/sh".into(), vec!["-c".into(), r#"echo "using key $TOKEN" >&2; exec "$PY" "$SCRIPT""#.into()]),
    );
    spec.env.insert("PY".into(), py);
    spec.env.insert("SCRIPT".into(), args[0].clone());
    spec.secrets = vec![from_file(SecretTarget::Env, "TOKEN", &secret)];
    h.mgr.ensure(&o, vec![spec]);
    h.wait_for(&o, "Running", phase_is("Running")).await;
    // The line is logged at debug level as the reader gets it; this capture takes every level
    // and, unlike the host's own log, redacts nothing itself.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !logs.text().contains("using key") {
        assert!(tokio::time::Instant::now() < deadline, "the stderr line was never logged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.mgr.shutdown().await;
    let text = logs.text();
    assert!(text.contains("using key <redacted>"), "the line is logged, less the value");
    assert_absent(&[("the log and trace output", &text)]);
}
