//! Capabilities against real components: each plugin imports only what it uses, is linked with
//! exactly the units it is granted; a declared capability without its grant blocks the plugin,
//! an imported one only fails the calls that reach it.

use crate::common;

use std::sync::Arc;

use common::{load, request, runtime, wasm};
use serde_json::json;
use steward::capabilities::ObservedServices;
use steward::plugin::{LoadError, NoReads, Plugin, PluginSet, PluginSettings, PluginState};
use steward_sdk::{ServicePhase, ServiceStatus};

const SERVICES: &str = "steward:plugin/services@0.1.0";

fn granting(caps: &[&str]) -> PluginSettings {
    PluginSettings { capabilities: caps.iter().map(|c| c.to_string()).collect(), ..Default::default() }
}

/// The import names of a built plugin, as wasmtime reads them from the component.
fn imports(package: &str) -> Vec<String> {
    let rt = runtime();
    let bytes = std::fs::read(wasm(package)).unwrap();
    let component = wasmtime::component::Component::new(rt.engine(), &bytes).unwrap();
    component.component_type().imports(rt.engine()).map(|(n, _)| n.to_string()).collect()
}

/// The binary of a component whose only import is an empty instance named `name`.
fn component_importing(name: &str) -> Vec<u8> {
    let mut import = vec![0x01, 0x00, name.len() as u8];
    import.extend_from_slice(name.as_bytes());
    import.extend_from_slice(&[0x05, 0x00]);
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend_from_slice(&[0x07, 0x03, 0x01, 0x42, 0x00]);
    bytes.push(0x0a);
    bytes.push(import.len() as u8);
    bytes.extend(import);
    bytes
}

#[test]
fn only_a_plugin_that_owns_services_imports_the_services_interface() {
    assert!(imports("mcpserver").iter().any(|i| i == SERVICES), "{:?}", imports("mcpserver"));
    for package in ["noop", "workflow", "mcpservergroup", "misbehave"] {
        let found = imports(package);
        assert!(!found.iter().any(|i| i == SERVICES), "{package} imports {SERVICES}: {found:?}");
        assert!(found.iter().any(|i| i == "steward:plugin/host@0.1.0"), "{package}: {found:?}");
    }
}

#[tokio::test]
async fn each_plugin_is_linked_with_exactly_its_granted_units() {
    let rt = runtime();
    let noop = load(&rt, "noop", PluginSettings::default()).await;
    assert!(noop.imported_capabilities().is_empty());
    assert_eq!(rt.linked_sets(), vec![vec!["base"]]);
    let mcp = load(&rt, "mcpserver", granting(&["services"])).await;
    assert_eq!(mcp.imported_capabilities(), ["services"]);
    assert!(mcp.missing_capabilities().is_empty());
    assert!(mcp.capability_warnings().is_empty(), "{:?}", mcp.capability_warnings());
    assert_eq!(rt.linked_sets(), vec![vec!["base"], vec!["base", "services"]]);
}

#[tokio::test]
async fn services_reach_the_host_through_the_import_and_observations_come_back() {
    let rt = runtime();
    let mcp = load(&rt, "mcpserver", granting(&["services"])).await;
    let spec = json!({"type": "stdio", "command": "server", "autoStart": true});
    let mut req = request("MCPServer", "git", spec);
    req.resource.api_version = "steward.dev/v1alpha1".into();
    let out = mcp.reconcile(&req, Arc::new(NoReads)).await.result.expect("reconcile");
    assert_eq!(out.services.len(), 1, "the desired service arrives through services.set-desired");
    assert_eq!(out.services[0].command.as_deref(), Some("server"));
    // What the host observes is what the plugin sees: a running server shows in its status.
    req.inputs.insert(ObservedServices(vec![ServiceStatus {
        name: out.services[0].name.clone(),
        phase: ServicePhase::Running,
        pid: Some(42),
        restarts: 0,
        consecutive_failures: 0,
        next_retry_at: None,
        last_exit: None,
        healthy: Some(true),
        last_connected: None,
        tools: vec![],
        message: None,
        auth_required: false,
    }]));
    let out = mcp.reconcile(&req, Arc::new(NoReads)).await.result.expect("reconcile");
    let status: serde_json::Value = serde_json::from_str(&out.status).unwrap();
    assert_eq!(status["pid"], 42, "{status}");
}

/// The SDK reads the observed services from the request when none can want authorization (a
/// process's phases), and through the `services` import otherwise: a remote server that answered
/// 401 still reaches the plugin as such.
#[tokio::test]
async fn a_remote_server_wanting_authorization_reaches_the_plugin() {
    let rt = runtime();
    let mcp = load(&rt, "mcpserver", granting(&["services"])).await;
    let spec = json!({"type": "streamable-http", "url": "https://mcp.example.com/mcp", "autoStart": true});
    let mut req = request("MCPServer", "remote", spec);
    req.resource.api_version = "steward.dev/v1alpha1".into();
    let status = |auth_required| ServiceStatus {
        name: "server".into(),
        phase: ServicePhase::Disconnected,
        pid: None,
        restarts: 0,
        consecutive_failures: 1,
        next_retry_at: None,
        last_exit: None,
        healthy: Some(false),
        last_connected: None,
        tools: vec![],
        message: Some("401 Unauthorized".into()),
        auth_required,
    };
    for auth_required in [true, false] {
        req.inputs.insert(ObservedServices(vec![status(auth_required)]));
        let out = mcp.reconcile(&req, Arc::new(NoReads)).await.result.expect("reconcile");
        let ready = out.conditions.iter().find(|c| c.type_ == "Ready").expect("a Ready condition");
        assert_eq!(ready.reason == "AuthRequired", auth_required, "{ready:?}");
    }
}

#[tokio::test]
async fn a_component_importing_services_without_the_grant_is_blocked_with_the_line_to_add() {
    let dir = tempfile::tempdir().unwrap();
    common::install(&wasm("mcpserver"), &dir.path().join("mcpserver.wasm"));
    let set = PluginSet::new(runtime(), dir.path(), Default::default(), PluginSettings::default());
    let statuses = set.load_all().await.unwrap();
    assert_eq!(statuses[0].state, PluginState::Blocked);
    let msg = statuses[0].message.clone().unwrap();
    assert!(msg.contains("add `capabilities: [services]` under plugins.mcpserver"), "{msg}");
    assert!(set.resolve("MCPServer").is_err());
    // Blocked, it still describes itself: the services import traps only if called.
    let p: Arc<Plugin> = set.plugins().pop().unwrap();
    assert_eq!(p.describe().await.result.unwrap().name, "mcpserver");
}

/// `misbehave` imports `wasi:http` (capability `http`) without declaring it: it loads ready
/// without the grant, every behaviour that does not touch the import works, and `fetch` fails
/// naming the grant; with the grant the same call reaches the server.
#[tokio::test]
async fn an_ungranted_import_loads_ready_and_only_calling_it_needs_the_grant() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello");
        }
    });
    let fetch = || common::misbehave("fetch", json!({"url": format!("http://127.0.0.1:{port}/")}));

    let dir = tempfile::tempdir().unwrap();
    common::install(&wasm("misbehave"), &dir.path().join("misbehave.wasm"));
    let set = PluginSet::new(runtime(), dir.path(), Default::default(), PluginSettings::default());
    let statuses = set.load_all().await.unwrap();
    assert_eq!(statuses[0].state, PluginState::Ready, "{:?}", statuses[0].message);
    assert!(statuses[0].warnings.is_empty(), "{:?}", statuses[0].warnings);
    let p = set.resolve("Misbehave").unwrap();
    assert_eq!(p.imported_capabilities(), ["http"]);
    assert_eq!(p.ungranted_imports(), ["http"]);
    assert!(p.missing_capabilities().is_empty());
    let ok = p.reconcile(&common::misbehave("ok", json!({})), Arc::new(NoReads)).await.result;
    assert!(ok.is_ok(), "a call that does not touch the import works: {ok:?}");
    let err = p.reconcile(&fetch(), Arc::new(NoReads)).await.result.unwrap_err();
    match &err {
        steward::plugin::PluginError::CapabilityDenied { plugin, capability, used } => {
            assert_eq!((plugin.as_str(), capability.as_str()), ("misbehave", "http"));
            assert!(used.starts_with("called wasi:http/"), "{used}");
        }
        other => panic!("expected CapabilityDenied, got {other:?}"),
    }
    assert!(err.to_string().contains("add `http` to plugins.misbehave.capabilities"), "{err}");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 0, "no request may leave without the grant");
    // The plugin is not broken by the failed call: the next one works.
    assert!(p.reconcile(&common::misbehave("ok", json!({})), Arc::new(NoReads)).await.result.is_ok());

    let yaml = format!(
        "capabilities: [http]\nhttp: {{ rules: [{{ hosts: [127.0.0.1], schemes: [http], ports: [{port}] }}] }}\n"
    );
    let raw: steward::capabilities::RawPluginSettings = serde_saphyr::from_str(&yaml).unwrap();
    let granted = load(&runtime(), "misbehave", raw.resolve("misbehave").unwrap()).await;
    assert!(granted.ungranted_imports().is_empty());
    let out =
        granted.reconcile(&fetch(), Arc::new(NoReads)).await.result.expect("granted, the fetch is a call like any");
    let status: serde_json::Value = serde_json::from_str(&out.status).unwrap();
    assert_eq!(status, json!({"code": 200, "body": "hello"}));
}

#[tokio::test]
async fn a_grant_the_component_never_imports_is_a_warning_in_its_status() {
    let dir = tempfile::tempdir().unwrap();
    common::install(&wasm("noop"), &dir.path().join("noop.wasm"));
    let settings = [("noop".to_string(), granting(&["services"]))].into_iter().collect();
    let set = PluginSet::new(runtime(), dir.path(), settings, PluginSettings::default());
    let statuses = set.load_all().await.unwrap();
    assert_eq!(statuses[0].state, PluginState::Ready, "a spare grant does not block");
    assert_eq!(statuses[0].warnings.len(), 1, "{:?}", statuses[0].warnings);
    assert!(statuses[0].warnings[0].contains("plugins.noop.capabilities grants `services`"));
}

#[tokio::test]
async fn an_import_no_capability_provides_is_a_load_error_naming_it() {
    let rt = runtime();
    let bytes = component_importing("acme:spy/exfiltrate@1.0.0");
    let err = Plugin::load(rt, std::path::Path::new("spy.wasm"), bytes, |_| PluginSettings::default())
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&err, LoadError::UnknownImport { interface, .. } if interface == "acme:spy/exfiltrate@1.0.0"),
        "{err}"
    );
    assert!(err.to_string().contains("spy.wasm"), "{err}");
}
