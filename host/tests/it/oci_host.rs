//! A host whose plugins come from a real registry: following a tag, keeping the last good, starting from the cache, signatures.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::host::{Host, free_port, noop, synced};
use crate::common::wasm;
use crate::oci_registry::{Options, TestRegistry, key_pair, push, steward};
use steward::oci::{OciRef, PluginLabel, Registry, wasm_artifact};

const T: Duration = Duration::from_secs(60);

/// A host with an empty plugin directory whose one plugin is the source `reference` of `reg`
/// (polled every 200ms), with `extra` lines for the source.
pub(crate) fn host_of(reg: &TestRegistry, reference: &str, extra: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    for d in ["resources", "plugins"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let port = free_port();
    let config = format!(
        "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\napi: {{ listen: 127.0.0.1:{port} }}\nplugin_sources:\n  - ref: {reference}\n    poll: 200ms\n{}{extra}",
        reg.source_yaml()
    );
    let file = dir.path().join("steward.yaml");
    std::fs::write(&file, config).unwrap();
    Host::with_config(dir, file, port)
}

/// The `/api/v1/plugins` entry of `reference`.
fn entry<'a>(plugins: &'a Value, reference: &str) -> Option<&'a Value> {
    plugins.as_array()?.iter().find(|p| p["file"] == reference)
}

pub(crate) async fn wait_plugin(h: &Host, reference: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let v = h.wait_get("/api/v1/plugins", T, what, |v| entry(v, reference).is_some_and(&f)).await;
    entry(&v, reference).cloned().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_follows_a_moved_tag_keeps_the_last_good_and_starts_from_its_cache_when_the_registry_is_down() {
    let _heavy = crate::common::heavy().await;
    let mut reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:live");
    let v1 = push(&reg, &wasm("noop"), &tag);
    let mut h = host_of(&reg, &tag, "");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let p = wait_plugin(&h, &tag, "noop 0.1.0 from the registry", |p| p["state"] == "Ready").await;
    assert_eq!(p["version"], "0.1.0");
    assert_eq!(p["source"]["digest"], v1.as_str());
    assert_eq!(p["source"]["fetched"], "registry");
    let v = h.wait_object("Noop/default/a", T, "Synced", synced).await.unwrap();
    assert_eq!(v["status"]["by"], "0.1.0");
    let (code, table, err) = h.cli(&["plugins"]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains(&format!("{tag}: digest {v1}, from the registry")), "{table}");

    // The tag moves to a new version while the host runs: it is swapped in and serves.
    let v2 = push(&reg, &wasm("noop-v2"), &tag);
    let p = wait_plugin(&h, &tag, "noop 0.2.0", |p| p["version"] == "0.2.0").await;
    assert_eq!(p["source"]["digest"], v2.as_str());
    h.wait_object("Noop/default/a", T, "reconciled by 0.2.0", |v| v.is_some_and(|v| v["status"]["by"] == "0.2.0"))
        .await;

    // The tag moves to an artifact that does not load: 0.2.0 keeps running, the refusal is shown.
    let broken = b"\0asm\x01\0\0\0".to_vec();
    let artifact = wasm_artifact(&broken, &PluginLabel { name: "noop".into(), ..Default::default() });
    let r = OciRef::parse(&tag).unwrap();
    Registry::new(&r, &reg.access()).unwrap().push(&r, &broken, &artifact).await.unwrap();
    let p = wait_plugin(&h, &tag, "the broken artifact refused", |p| {
        p["message"].as_str().is_some_and(|m| m.contains("the running version stays"))
    })
    .await;
    assert_eq!(p["state"], "Ready");
    assert_eq!(p["version"], "0.2.0");
    assert_eq!(p["source"]["digest"], v2.as_str());
    assert!(p["message"].as_str().unwrap().contains("core WebAssembly module"), "{p}");

    // Restarted with the registry down: the cached last good starts, and says so.
    h.kill9();
    reg.stop();
    h.write("b.yaml", &noop("b", "y"));
    h.start().await;
    let p = wait_plugin(&h, &tag, "noop from the cache", |p| p["state"] == "Ready").await;
    assert_eq!(p["version"], "0.2.0");
    assert_eq!(p["source"]["fetched"], "cache");
    assert_eq!(p["source"]["digest"], v2.as_str());
    assert!(p["source"]["note"].as_str().unwrap().contains("started from the cache"), "{p}");
    let v = h.wait_object("Noop/default/b", T, "Synced", synced).await.unwrap();
    assert_eq!(v["status"]["by"], "0.2.0");
    let (_, table, _) = h.cli(&["plugins"]);
    assert!(table.contains("from the cache; started from the cache"), "{table}");

    // The registry is back with the tag on a good version again: followed as before.
    reg.restart().await;
    let v1_again = push(&reg, &wasm("noop"), &tag);
    assert_eq!(v1_again, v1);
    let p = wait_plugin(&h, &tag, "back on 0.1.0 from the registry", |p| {
        p["version"] == "0.1.0" && p["source"]["fetched"] == "registry"
    })
    .await;
    assert!(p["message"].is_null() && p["source"]["note"].is_null(), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_a_key_loads_only_artifacts_signed_with_it() {
    let reg = TestRegistry::start(Options::default()).await;
    let keys = tempfile::tempdir().unwrap();
    let (a_private, a_public) = key_pair(keys.path(), "a");
    let (b_private, _) = key_pair(keys.path(), "b");
    let fingerprint = steward::oci::TrustKey::load(&a_public).unwrap().fingerprint().to_string();
    let tag = reg.reference("steward/noop:signed");
    let digest = push(&reg, &wasm("noop"), &tag);
    let mut h = host_of(&reg, &tag, &format!("    key: {}\n", a_public.display()));
    h.start().await;

    // Unsigned: refused, naming the key expected.
    let p = wait_plugin(&h, &tag, "refused as unsigned", |p| p["state"] == "Failed").await;
    let m = p["message"].as_str().unwrap();
    assert!(m.contains(&format!("is not signed with the key {} ({fingerprint})", a_public.display())), "{m}");

    // Signed with another key: still refused, and the message says so.
    sign(&reg, &tag, &b_private);
    let p = wait_plugin(&h, &tag, "refused as signed by another key", |p| {
        p["message"].as_str().is_some_and(|m| m.contains("another key"))
    })
    .await;
    assert_eq!(p["state"], "Failed");

    // Signed with the key: loaded, and the status says with which key.
    sign(&reg, &tag, &a_private);
    let p = wait_plugin(&h, &tag, "loaded once signed", |p| p["state"] == "Ready").await;
    assert_eq!(p["source"]["digest"], digest.as_str());
    assert!(p["source"]["signedBy"].as_str().unwrap().contains(&fingerprint), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_pulls_through_basic_auth_and_tls_and_a_digest_reference_needs_no_tag() {
    let reg = TestRegistry::start(Options { tls: true, auth: true }).await;
    let digest = push(&reg, &wasm("noop"), &reg.reference("steward/noop:1"));
    let pinned = format!("{}@{digest}", reg.reference("steward/noop"));
    let mut h = host_of(&reg, &pinned, "");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let p = wait_plugin(&h, &pinned, "noop pinned by digest", |p| p["state"] == "Ready").await;
    assert_eq!(p["source"]["digest"], digest.as_str());
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    assert!(!h.log().contains(crate::oci_registry::PASSWORD));
}

fn sign(reg: &TestRegistry, reference: &str, key: &Path) {
    let mut args =
        vec!["plugin".to_string(), "sign".into(), reference.into(), "--key".into(), key.display().to_string()];
    args.extend(reg.cli_args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = steward(&args);
    assert_eq!(code, 0, "sign failed: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_plugin_whose_name_a_file_holds_loads_once_the_file_is_gone() {
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:1");
    push(&reg, &wasm("noop-v2"), &tag);
    let mut h = host_of(&reg, &tag, "");
    crate::common::install(&wasm("noop"), &h.dir.path().join("plugins/noop.wasm"));
    h.start().await;
    let p = wait_plugin(&h, &tag, "refused: the name is taken", |p| p["state"] == "Failed").await;
    assert!(p["message"].as_str().unwrap().contains("plugin name noop is already used by noop.wasm"), "{p}");

    std::fs::remove_file(h.dir.path().join("plugins/noop.wasm")).unwrap();
    let p = wait_plugin(&h, &tag, "loaded from the registry", |p| p["state"] == "Ready").await;
    assert_eq!(p["version"], "0.2.0");
    assert!(p["message"].is_null(), "{p}");
}
