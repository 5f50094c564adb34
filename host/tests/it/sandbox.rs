//! The plugin sandbox (issue 7, group 5): whatever a plugin tries through WASI — Rust's std or the
//! raw `wasi:*` imports — it cannot read a host file, list a directory, read the host's
//! environment, open a socket, resolve a name or spawn a process. Every attempt is made by the
//! `misbehave` plugin (behaviour `escape`) and fails inside it; the plugin reports each one.

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use steward::plugin::{LogSource, NoReads, PluginSettings};

use crate::common::host::{Host, synced};
use crate::common::{load, misbehave, runtime};

const T: Duration = Duration::from_secs(30);

/// What the test puts within the plugin's reach, were the sandbox open.
struct Bait {
    dir: tempfile::TempDir,
    secret: String,
    secret_file: String,
    tcp: TcpListener,
    udp: UdpSocket,
}

impl Bait {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let secret = format!("hunter2-{}", std::process::id());
        let secret_file = dir.path().join("secret.txt");
        std::fs::write(&secret_file, &secret).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        Self { secret_file: secret_file.display().to_string(), dir, secret, tcp, udp }
    }

    /// The `escape` spec aiming at this bait, reading `env_var` from the environment.
    fn spec(&self, env_var: &str) -> Value {
        json!({
            "behavior": "escape",
            "port": self.tcp.local_addr().unwrap().port(),
            "udpPort": self.udp.local_addr().unwrap().port(),
            "secretFile": self.secret_file,
            "dir": self.dir.path().display().to_string(),
            "envVar": env_var,
        })
    }

    /// Nothing reached the host: no TCP connection, no datagram, no file written.
    fn assert_untouched(&self) {
        match self.tcp.accept() {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
            Ok((_, from)) => panic!("the plugin connected to the test's TCP listener from {from}"),
        }
        let mut buf = [0u8; 64];
        match self.udp.recv_from(&mut buf) {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
            Ok((n, from)) => panic!("the plugin sent {n} bytes over UDP from {from}"),
        }
        let entries: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        assert_eq!(entries, ["secret.txt"], "the plugin wrote into the host directory");
        assert!(!Path::new("/tmp/steward-escape").exists(), "the plugin wrote /tmp/steward-escape");
    }
}

/// The attempts of an `escape` status: name → error. Fails if any attempt got through.
fn attempts(status: &Value) -> BTreeMap<String, String> {
    let list = status["attempts"].as_array().unwrap_or_else(|| panic!("no attempts in {status:#}"));
    let mut out = BTreeMap::new();
    for a in list {
        let name = a["attempt"].as_str().unwrap().to_string();
        assert!(a.get("escaped").is_none(), "{name} got through the sandbox: {a:#}");
        let error = a["error"].as_str().unwrap_or_else(|| panic!("{name} has no error: {a:#}"));
        assert!(!error.is_empty(), "{name} failed without saying why");
        out.insert(name, error.to_string());
    }
    out
}

/// Checks that each attempt `bait` invites was made, failed, and failed for the right reason.
fn assert_every_way_out_failed(attempts: &BTreeMap<String, String>, bait: &Bait, env_var: &str) {
    let port = bait.tcp.local_addr().unwrap().port();
    let udp_port = bait.udp.local_addr().unwrap().port();
    let dir = bait.dir.path().display().to_string();
    let error = |name: &str| -> &str {
        attempts.get(name).unwrap_or_else(|| panic!("attempt {name:?} was not made; made: {attempts:#?}"))
    };
    // Files and directories: nothing is preopened, so no path — absolute or relative — resolves.
    for name in [
        "std::fs::read /etc/passwd".to_string(),
        format!("std::fs::read {}", bait.secret_file),
        "std::fs::read secret.txt (relative)".into(),
        "std::fs::read_dir /".into(),
        format!("std::fs::read_dir {dir}"),
        "std::fs::read_dir . (relative)".into(),
        format!("std::fs::write {dir}/escaped.txt"),
        "std::fs::write /tmp/steward-escape".into(),
    ] {
        let e = error(&name);
        assert!(e.starts_with("No such file or directory"), "{name}: {e}");
    }
    assert_eq!(error("wasi:filesystem/preopens get-directories"), "no directory is preopened");
    // The environment: empty but the host-wide settings the host gives every plugin
    // (`steward_sdk::settings::VARS`), whatever the host process has.
    assert_eq!(error(&format!("std::env::var {env_var}")), "environment variable not found");
    assert_eq!(error("std::env::vars"), "the environment is empty but the host's settings");
    assert_eq!(error("wasi:cli/environment get-environment"), "the environment is empty but the host's settings");
    assert_eq!(error("wasi:cli/environment get-arguments"), "no arguments");
    assert_eq!(error("wasi:cli/environment initial-cwd"), "no working directory");
    // The network: no socket can even be created, no name resolved.
    for name in
        [format!("std::net::TcpStream::connect 127.0.0.1:{port}"), "std::net::TcpListener::bind 127.0.0.1:0".into()]
    {
        assert_eq!(error(&name), "Permission denied (os error 2)", "{name}");
    }
    assert_eq!(
        error(&format!("std::net::UdpSocket send_to 127.0.0.1:{udp_port}")),
        "bind: Permission denied (os error 2)"
    );
    for name in [format!("std::net::ToSocketAddrs localhost:{port}"), "std::net::ToSocketAddrs example.com:80".into()] {
        let e = error(&name);
        assert!(e.starts_with("failed to lookup address information"), "{name}: {e}");
    }
    assert_eq!(error(&format!("wasi:sockets/tcp connect 127.0.0.1:{port}")), "create-tcp-socket: access-denied");
    assert_eq!(error(&format!("wasi:sockets/udp send 127.0.0.1:{udp_port}")), "create-udp-socket: access-denied");
    for name in ["wasi:sockets/ip-name-lookup localhost", "wasi:sockets/ip-name-lookup 127.0.0.1"] {
        assert_eq!(error(name), "resolve-addresses: permanent-resolver-failure", "{name}");
    }
    // Processes: `std::process::Command` compiles for wasm32-wasip2 and fails when run.
    let spawn = error("std::process::Command /bin/sh -c true");
    assert!(spawn.contains("not supported"), "{spawn}");
}

#[tokio::test]
async fn every_way_out_fails_inside_the_plugin() {
    let bait = Bait::new();
    // A variable the test process certainly has: the plugin runs in this process here.
    assert!(std::env::var("PATH").is_ok());
    let rt = runtime();
    let p = load(&rt, "misbehave", PluginSettings::default()).await;
    let mut req = misbehave("escape", json!({}));
    req.resource.spec = bait.spec("PATH").to_string();
    let out = p.reconcile(&req, Arc::new(NoReads)).await;
    let status: Value = serde_json::from_str(&out.result.expect("escape answers with what it tried").status).unwrap();
    let attempts = attempts(&status);
    assert_every_way_out_failed(&attempts, &bait, "PATH");
    // Every attempt was also logged by the plugin, as it made it.
    for name in attempts.keys() {
        let line = format!("escape attempt {name}: denied: ");
        assert!(out.logs.iter().any(|l| l.source == LogSource::Log && l.message.starts_with(&line)), "{line}");
    }
    let everything = format!("{status}{:?}", out.logs);
    assert!(!everything.contains(&bait.secret), "the secret leaked: {everything}");
    assert!(!everything.contains("root:x:0:0"), "/etc/passwd leaked: {everything}");
    bait.assert_untouched();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_in_a_running_host_cannot_reach_its_files_environment_network_or_processes() {
    let bait = Bait::new();
    let var = "STEWARD_SANDBOX_TEST_BAIT";
    let mut h = Host::new("");
    h.start_with_env(&[(var, &bait.secret)]).await;
    assert!(host_environment(&h).contains(&format!("{var}={}", bait.secret)), "the host process has the secret");
    let spec = serde_yaml_like(&bait.spec(var));
    h.write(
        "escape.yaml",
        &format!("apiVersion: test.steward.dev/v1\nkind: Misbehave\nmetadata:\n  name: escape\nspec:\n{spec}"),
    );
    let v = h.wait_object("Misbehave/default/escape", T, "Synced", synced).await.unwrap();
    let attempts = attempts(&v["status"]);
    assert_every_way_out_failed(&attempts, &bait, var);
    // The attempts reached the host's log, each as the plugin saw it fail.
    h.wait_log(&format!("escape attempt std::env::var {var}: denied"), T).await;
    let log = h.log();
    for name in attempts.keys() {
        assert!(log.contains(&format!("escape attempt {name}: denied: ")), "{name} is not in the host log");
    }
    // The secret — a file's contents and a variable of the host process — is nowhere to be seen.
    let view = h.api().get("/api/v1/resources").await.unwrap().to_string();
    assert!(!view.contains(&bait.secret), "the secret leaked into the API: {view}");
    assert!(!log.contains(&bait.secret), "the secret leaked into the host log");
    assert!(!view.contains("root:x:0:0") && !log.contains("root:x:0:0"), "/etc/passwd leaked");
    bait.assert_untouched();
}

/// The environment of `h`'s `steward run` process, one `KEY=value` per line (Linux `/proc`).
fn host_environment(h: &Host) -> String {
    let config = h.config_path().display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).split('\0').any(|arg| arg == config) {
            let environ = std::fs::read(entry.path().join("environ")).unwrap();
            return String::from_utf8_lossy(&environ).replace('\0', "\n");
        }
    }
    panic!("no process runs with {config}");
}

/// `spec` as an indented YAML block (JSON is YAML; one key per line keeps it readable in failures).
fn serde_yaml_like(spec: &Value) -> String {
    spec.as_object().unwrap().iter().map(|(k, v)| format!("  {k}: {v}\n")).collect()
}
