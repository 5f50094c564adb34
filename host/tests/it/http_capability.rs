//! Capability `http`: the example plugin `plugins/etcdkey` keeps a key in a real etcd (started on
//! loopback, spoken to through its v3 JSON gateway) through `wasi:http`, within the allow-list of
//! its grant; requests outside it are refused before any connection, response bodies are capped,
//! and a header the host injects from a secret reaches the server without the plugin seeing it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::common::host::{Host, free_port};

const T: Duration = Duration::from_secs(60);

/// A private etcd on loopback (the one `testing/realkube` starts the real API server with).
struct Etcd {
    dir: tempfile::TempDir,
    port: u16,
    peer: u16,
    child: Option<Child>,
}

impl Etcd {
    async fn start() -> Self {
        let mut etcd = Self { dir: tempfile::tempdir().unwrap(), port: free_port(), peer: free_port(), child: None };
        etcd.up().await;
        etcd
    }

    /// Starts (or starts again, on the same data and port) and waits until it answers.
    async fn up(&mut self) {
        let (port, peer) = (self.port, self.peer);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let child = Command::new("/usr/bin/etcd")
            .args(["--name", "default", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{port}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("default=http://127.0.0.1:{peer}")])
            .args(["--initial-cluster-state", "new"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd-server is installed (/usr/bin/etcd)");
        self.child = Some(child);
        common::eventually(
            T,
            "etcd to answer",
            async || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                    && common::host::http(port, "GET", "/health", &[], b"").body.contains("true")
            },
            |up| *up,
        )
        .await;
    }

    /// Stops it (kill -9) and waits for it to be gone.
    fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn call(&self, path: &str, body: Value) -> Value {
        common::host::http(self.port, "POST", &format!("/v3/kv/{path}"), &[], body.to_string().as_bytes()).json()
    }

    /// What etcd holds under `key`.
    fn get(&self, key: &str) -> Option<String> {
        let v = self.call("range", json!({"key": b64(key)}));
        let kv = v.get("kvs")?.get(0)?;
        Some(unb64(kv.get("value").and_then(Value::as_str).unwrap_or("")))
    }

    fn put(&self, key: &str, value: &str) {
        self.call("put", json!({"key": b64(key), "value": b64(value)}));
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.down();
    }
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn unb64(s: &str) -> String {
    use base64::Engine;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(s).unwrap()).unwrap()
}

/// The example plugin, built once per test process.
async fn etcdkey_wasm() -> PathBuf {
    match tokio::task::spawn_blocking(|| steward_plugin_build::example_plugin("etcdkey")).await {
        Ok(p) => p,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A host whose plugin `etcdkey` is granted `http` with `http` (the section's YAML, flow style).
async fn host(http: &str) -> Host {
    let wasm = etcdkey_wasm().await;
    let h = Host::new(&format!(
        "  etcdkey: {{ capabilities: [http], http: {http} }}\nresync: 1s\nqueue: {{ initial_backoff: 50ms, max_backoff: 1s }}\n"
    ));
    common::install(&wasm, &h.dir.path().join("plugins/etcdkey.wasm"));
    h
}

fn key_doc(name: &str, endpoint: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: examples.steward.dev/v1alpha1\nkind: EtcdKey\nmetadata:\n  name: {name}\nspec:\n  endpoint: \"{endpoint}\"\n  key: \"{key}\"\n  value: \"{value}\"\n"
    )
}

fn ready(v: Option<&Value>) -> (&str, &str, &str) {
    let c = v.and_then(|v| v["conditions"].as_array()).and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let s = |k: &str| c.and_then(|c| c[k].as_str()).unwrap_or("");
    (s("status"), s("reason"), s("message"))
}

/// Ready, holding `value` in etcd, as of the object's current generation.
fn in_sync(v: Option<&Value>, value: &str) -> bool {
    ready(v).0 == "True" && v.is_some_and(|v| v["status"]["remoteValue"] == value && v["status"]["state"] == "InSync")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_etcd_key_is_created_updated_repaired_and_deleted() {
    let mut etcd = Etcd::start().await;
    let port = etcd.port;
    let mut h =
        host(&format!("{{ rules: [{{ hosts: [127.0.0.1], schemes: [http], ports: [{port}], methods: [POST] }}] }}"))
            .await;
    h.start().await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let id = "EtcdKey/default/greeting";

    // Create: the key appears in etcd, and the object is Ready only once etcd holds the value.
    h.write("greeting.yaml", &key_doc("greeting", &endpoint, "/app/greeting", "hello"));
    h.wait_object(id, T, "in sync with hello", |v| in_sync(v, "hello")).await;
    assert_eq!(etcd.get("/app/greeting").as_deref(), Some("hello"));

    // Update: the new value is written.
    h.write("greeting.yaml", &key_doc("greeting", &endpoint, "/app/greeting", "bonjour"));
    h.wait_object(id, T, "in sync with bonjour", |v| in_sync(v, "bonjour")).await;
    assert_eq!(etcd.get("/app/greeting").as_deref(), Some("bonjour"));

    // Drift: someone changes the key behind the host's back; the next resync puts it back and
    // the status says what it found.
    etcd.put("/app/greeting", "intruder");
    let v = h
        .wait_object(id, T, "the drift repaired", |v| {
            in_sync(v, "bonjour") && v.is_some_and(|v| v["status"]["driftRepairs"].as_u64() >= Some(1))
        })
        .await
        .unwrap();
    assert!(v["status"]["lastDrift"].as_str().unwrap_or("").contains("intruder"), "{v:#}");
    assert_eq!(etcd.get("/app/greeting").as_deref(), Some("bonjour"));

    // etcd down: not ready, with the cause in words; back up: ready again.
    etcd.down();
    let v = h.wait_object(id, T, "not ready while etcd is down", |v| ready(v).0 == "False").await.unwrap();
    let (_, reason, message) = ready(Some(&v));
    assert_eq!(reason, "EtcdUnreachable", "{v:#}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert_eq!(v["status"]["state"], "Unreachable", "{v:#}");
    etcd.up().await;
    h.wait_object(id, T, "ready again once etcd is back", |v| in_sync(v, "bonjour")).await;

    // Each request is counted by plugin, host and status.
    let ok = h
        .metric(
            "steward_plugin_http_requests_total",
            &["plugin=\"etcdkey\"", &format!("host=\"127.0.0.1:{port}\""), "status=\"200\""],
        )
        .await;
    assert!(ok >= 4.0, "{ok}");

    // Delete: the finalize removes the key, then the object goes.
    h.remove("greeting.yaml");
    h.wait_object(id, T, "gone", |v| v.is_none()).await;
    assert_eq!(etcd.get("/app/greeting"), None);
}

/// A loopback HTTP server that answers every request with `status` and `body` and records the
/// head of each request it read (and counts the connections it accepted).
struct Recorder {
    port: u16,
    connections: Arc<Mutex<u32>>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start(body: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (connections, heads) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(Vec::new())));
        let (c, hd) = (connections.clone(), heads.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                *c.lock().unwrap() += 1;
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut raw = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as much body as it says.
                while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => raw.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&raw).to_string();
                let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0usize);
                let mut got = rest.len();
                while got < len {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                }
                hd.lock().unwrap().push(head.to_string());
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes());
            }
        });
        Self { port, connections, heads }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_outside_the_allow_list_is_refused_before_any_connection() {
    let listener = Recorder::start("{}".into());
    let allowed = free_port();
    // The rule allows another port of the same host, and GET only.
    let mut h = host(&format!("{{ rules: [{{ hosts: [127.0.0.1], schemes: [http], ports: [{allowed}] }}] }}")).await;
    h.start().await;
    h.write("k.yaml", &key_doc("k", &format!("http://127.0.0.1:{}", listener.port), "/k", "v"));
    let v = h.wait_object("EtcdKey/default/k", T, "refused", |v| ready(v).1 == "RequestDenied").await.unwrap();
    let (status, _, message) = ready(Some(&v));
    assert_eq!(status, "False");
    // The host's words reach the plugin: the rule, the field that did not match, the key.
    assert!(
        message.contains(&format!("rules[0].ports [{allowed}] has not {}", listener.port))
            && message.contains("plugins.etcdkey.http.rules"),
        "{message}"
    );
    let denied = h.metric("steward_plugin_http_requests_total", &["plugin=\"etcdkey\"", "status=\"denied\""]).await;
    assert!(denied >= 1.0, "{denied}");
    assert_eq!(*listener.connections.lock().unwrap(), 0, "nothing was sent: {:?}", listener.heads.lock().unwrap());

    // A host no rule names is refused too, naming the hosts field.
    h.write("k.yaml", &key_doc("k", &format!("http://localhost:{}", listener.port), "/k", "v"));
    let v = h
        .wait_object("EtcdKey/default/k", T, "refused for its host", |v| {
            ready(v).2.contains("does not match `localhost`")
        })
        .await
        .unwrap();
    assert_eq!(ready(Some(&v)).1, "RequestDenied");
    assert_eq!(*listener.connections.lock().unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_response_body_over_the_cap_is_cut_with_an_error_naming_the_setting() {
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(8 * 1024));
    let server = Recorder::start(big);
    let port = server.port;
    let mut h = host(&format!(
        "{{ rules: [{{ hosts: [127.0.0.1], schemes: [http], ports: [{port}] }}], max_response_body: 4KiB }}"
    ))
    .await;
    h.start().await;
    h.write("k.yaml", &key_doc("k", &format!("http://127.0.0.1:{port}"), "/k", "v"));
    let v = h
        .wait_object("EtcdKey/default/k", T, "the body refused", |v| ready(v).2.contains("max_response_body"))
        .await
        .unwrap();
    let (status, reason, message) = ready(Some(&v));
    assert_eq!((status, reason), ("False", "EtcdUnreachable"), "{message}");
    assert!(message.contains("is over 4") && message.contains("KiB"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_from_a_secret_reaches_the_server_and_never_the_plugin() {
    // The server answers a range as etcd would, holding the desired value.
    let server =
        Recorder::start(json!({"kvs": [{"key": b64("/k"), "value": b64("v"), "mod_revision": "3"}]}).to_string());
    let port = server.port;
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "s3cr3t-t0ken\n").unwrap();
    let mut h = host(&format!(
        "{{ rules: [{{ hosts: [127.0.0.1], schemes: [http], ports: [{port}], headers: {{ Authorization: {{ file: {}, prefix: \"Bearer \" }} }} }}] }}",
        token.display()
    ))
    .await;
    h.start().await;
    h.write("k.yaml", &key_doc("k", &format!("http://127.0.0.1:{port}"), "/k", "v"));
    let v = h.wait_object("EtcdKey/default/k", T, "in sync", |v| in_sync(v, "v")).await.unwrap();
    let heads = server.heads.lock().unwrap().clone();
    assert!(!heads.is_empty());
    for head in &heads {
        assert!(head.lines().any(|l| l.eq_ignore_ascii_case("authorization: Bearer s3cr3t-t0ken")), "{head}");
    }
    // Nothing the plugin reported holds it.
    assert!(!v.to_string().contains("s3cr3t"), "{v:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_without_the_grant_loads_blocked_and_describes_itself() {
    use steward::plugin::{Plugin, PluginSettings};
    let wasm = etcdkey_wasm().await;
    let bytes = std::fs::read(&wasm).unwrap();
    // Its wasi:http imports stand for the capability; ungranted, they are linked to traps, so it
    // still describes itself, and is blocked.
    let blocked = Plugin::load(common::runtime(), &wasm, bytes.clone(), |_| PluginSettings::default()).await.unwrap();
    assert_eq!(blocked.info().kinds[0].kind, "EtcdKey");
    assert_eq!(blocked.imported_capabilities(), ["http"]);
    assert_eq!(blocked.missing_capabilities(), ["http"]);
    let yaml = "capabilities: [http]\nhttp: { rules: [{ hosts: [127.0.0.1], schemes: [http], ports: [2379] }] }\n";
    let raw: steward::capabilities::RawPluginSettings = serde_saphyr::from_str(yaml).unwrap();
    let granted = raw.resolve("etcdkey").unwrap();
    let plugin = Plugin::load(common::runtime(), &wasm, bytes, move |_| granted).await.unwrap();
    assert!(plugin.missing_capabilities().is_empty());
    // A grant without rules is a config error naming the key.
    let raw: steward::capabilities::RawPluginSettings = serde_saphyr::from_str("capabilities: [http]\n").unwrap();
    let e = raw.resolve("etcdkey").unwrap_err();
    assert!(e.starts_with("plugins.etcdkey.http.rules:"), "{e}");
}
