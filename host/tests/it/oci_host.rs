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
        "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\n{}api: {{ listen: 127.0.0.1:{port} }}\nplugin_sources:\n  - ref: {reference}\n    poll: 200ms\n{}{extra}",
        crate::common::host::shared_cache_line(extra),
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
    let m = p["message"].as_str().unwrap();
    let refused =
        format!("{tag}: refused: the artifact {} does not load: a core WebAssembly module", artifact.digest());
    assert!(m.starts_with(&refused) && m.ends_with(&format!("the running version stays ({v2})")), "{m}");
    assert_eq!(m.matches(&tag).count(), 1, "{m}");
    let source = format!("source=\"{tag}\"");
    assert_eq!(h.metric("steward_plugin_source_refusals_total", &[&source, "reason=\"does_not_load\""]).await, 1.0);
    assert_eq!(h.metric("steward_plugin_source_fetches_total", &[&source, "result=\"loaded\""]).await, 2.0);

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
    let source = format!("source=\"{tag}\"");
    assert_eq!(h.metric("steward_plugin_source_cache_total", &[&source, "result=\"hit\""]).await, 1.0);
    assert_eq!(h.metric("steward_plugin_source_fetches_total", &[&source, "result=\"failed\""]).await, 1.0);
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
    assert!(
        m.contains(&format!("has no signature (neither a `.sig` signature nor a Sigstore bundle referrer), and the key {} ({fingerprint}) is required", a_public.display())),
        "{m}"
    );

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

/// The host condition `PluginSource` of `reference` in the overview, once it is listed.
async fn source_condition(h: &Host, reference: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    condition_of(h, "PluginSource", reference, what, f).await
}

/// The host condition `type_` of `reference` in the overview, once `f` holds for it.
async fn condition_of(h: &Host, type_: &str, reference: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let find = |o: &Value| -> Option<Value> {
        o["conditions"].as_array()?.iter().find(|c| c["type"] == type_ && c["subject"] == reference).cloned()
    };
    let o = h.wait_get("/api/v1/overview", T, what, |o| find(o).is_some_and(|c| f(&c))).await;
    find(&o).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cache_that_cannot_be_written_or_is_lost_shows_everywhere_and_is_written_again() {
    let _heavy = crate::common::heavy().await;
    let mut reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:cached");
    let v1 = push(&reg, &wasm("noop"), &tag);
    let mut h = host_of(&reg, &tag, "cache_dir: cache\n");
    // Where the cache records what each source runs is a file: nothing can be written there.
    let refs = h.dir.path().join("cache/oci/refs");
    std::fs::create_dir_all(refs.parent().unwrap()).unwrap();
    std::fs::write(&refs, "in the way").unwrap();
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;

    // The plugin runs and serves as its tag names; that it is not cached is said, with what to do.
    let source = source_condition(&h, &tag, "PluginSource True", |c| c["status"] == "True").await;
    assert_eq!(source["reason"], "Current", "{source}");
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let c = condition_of(&h, "PluginCached", &tag, "PluginCached False", |c| c["status"] == "False").await;
    assert_eq!(c["reason"], "CacheWriteFailed", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(m.starts_with(&format!("{tag}: {v1} runs but cannot be written to the plugin cache (")), "{m}");
    assert!(m.contains("would run nothing of this source") && m.contains("`cache_dir`"), "{m}");
    let labels = |status: &'static str| {
        [r#"type="PluginCached""#.to_string(), format!("subject=\"{tag}\""), format!("status=\"{status}\"")]
    };
    let gauge = async |status: &'static str| {
        let l = labels(status);
        h.metric("steward_host_condition", &[&l[0], &l[1], &l[2]]).await
    };
    assert_eq!(gauge("False").await, 1.0);
    assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200, "what runs serves: the host is ready");
    let (code, out, err) = h.cli(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l.contains("PluginCached") && l.contains("CacheWriteFailed")), "{out}");

    // Repaired: written at the next poll, without a restart.
    std::fs::remove_file(&refs).unwrap();
    let c = condition_of(&h, "PluginCached", &tag, "PluginCached True", |c| c["status"] == "True").await;
    assert_eq!(c["reason"], "Cached", "{c}");
    assert!(c["message"].as_str().unwrap().contains(v1.as_str()), "{c}");
    assert_eq!(gauge("True").await, 1.0);
    assert_eq!(gauge("False").await, 0.0);
    let (_, out, _) = h.cli(&["status"]);
    assert!(!out.contains("PluginCached"), "{out}");

    // The cache removed while the host runs: the next poll pulls what runs again and writes it.
    let oci = h.dir.path().join("cache/oci");
    std::fs::remove_dir_all(&oci).unwrap();
    crate::common::eventually(
        T,
        "the cache written again",
        async || refs.is_dir() && std::fs::read_dir(&refs).unwrap().count() > 0,
        |w| *w,
    )
    .await;
    assert_eq!(gauge("True").await, 1.0);

    // The tag moves while the new component cannot be stored (a directory where its file goes):
    // the version before is what a start without the registry would run, and the condition says so.
    let v2_wasm = wasm("noop-v2");
    let blob = oci.join("blobs").join(format!(
        "{}.wasm",
        steward::oci::layout::sha256_digest(&std::fs::read(&v2_wasm).unwrap()).replace(':', "-")
    ));
    std::fs::create_dir_all(&blob).unwrap();
    let v2 = push(&reg, &v2_wasm, &tag);
    let c = condition_of(&h, "PluginCached", &tag, "PluginCached False for 0.2.0", |c| c["status"] == "False").await;
    let m = c["message"].as_str().unwrap();
    assert!(m.starts_with(&format!("{tag}: {v2} runs but cannot be written")), "{m}");
    assert!(m.contains(&format!("would run {v1}, which ran before")), "{m}");
    std::fs::remove_dir(&blob).unwrap();
    condition_of(&h, "PluginCached", &tag, "PluginCached True for 0.2.0", |c| {
        c["status"] == "True" && c["message"].as_str().is_some_and(|m| m.contains(v2.as_str()))
    })
    .await;

    // The cache removed while the registry is down: said, and written once the registry is back.
    reg.stop();
    std::fs::remove_dir_all(&oci).unwrap();
    let c = condition_of(&h, "PluginCached", &tag, "PluginCached NotCached", |c| c["reason"] == "NotCached").await;
    assert_eq!(c["status"], "False", "{c}");
    assert!(c["message"].as_str().unwrap().contains("would run nothing of this source"), "{c}");
    reg.restart().await;
    condition_of(&h, "PluginCached", &tag, "PluginCached True again", |c| c["status"] == "True").await;

    // The cache now holds it: a start while the registry is down runs it.
    h.kill9();
    reg.stop();
    h.start().await;
    let p = wait_plugin(&h, &tag, "noop from the cache", |p| p["state"] == "Ready").await;
    assert_eq!((&p["source"]["fetched"], &p["source"]["digest"]), (&Value::from("cache"), &Value::from(v2.as_str())));
    let c = condition_of(&h, "PluginCached", &tag, "PluginCached", |_| true).await;
    assert_eq!(c["status"], "True", "what runs came from the cache, which holds it: {c}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_artifact_is_refused_in_words_everywhere_until_signed_and_its_objects_name_the_source() {
    let reg = TestRegistry::start(Options::default()).await;
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = key_pair(keys.path(), "a");
    let tag = reg.reference("steward/noop:unsigned");
    let digest = push(&reg, &wasm("noop"), &tag);
    let mut h = host_of(&reg, &tag, &format!("    key: {}\n", public.display()));
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let refused = format!("{tag}: refused: the artifact {digest} has no signature");

    // The listing: the reference once, then what happened to which artifact, and what to do.
    let p = wait_plugin(&h, &tag, "refused as unsigned", |p| p["state"] == "Failed").await;
    let m = p["message"].as_str().unwrap();
    assert!(m.starts_with(&refused), "{m}");
    assert_eq!(m.matches(&tag).count(), 1, "{m}");
    assert!(m.contains("steward plugin sign") && m.contains("allow unsigned artifacts by removing `key`"), "{m}");
    assert!(!m.contains("cannot read") && !m.contains("signature layers"), "{m}");
    let (_, table, _) = h.cli(&["plugins"]);
    let line = table.lines().find(|l| l.contains("refused:")).unwrap_or_else(|| panic!("{table}"));
    assert_eq!(line.matches(&tag).count(), 1, "{table}");

    // The condition says the same, and keeps saying it while polls refuse the artifact again.
    let c = source_condition(&h, &tag, "PluginSource False", |c| c["status"] == "False").await;
    assert_eq!(c["reason"], "ArtifactRefused", "{c}");
    let message = c["message"].as_str().unwrap().to_string();
    assert!(message.starts_with(&refused) && message.contains("no version of it runs"), "{message}");
    assert_eq!(message.matches(&tag).count(), 1, "{message}");
    let source = format!("source=\"{tag}\"");
    let fetched = h.metric("steward_plugin_source_fetches_total", &[&source, "result=\"refused\""]).await;
    crate::common::eventually(
        T,
        "three more polls refusing the unsigned artifact",
        async || h.metric("steward_plugin_source_fetches_total", &[&source, "result=\"refused\""]).await,
        |n| *n >= fetched + 3.0,
    )
    .await;
    let again = source_condition(&h, &tag, "PluginSource", |_| true).await;
    assert_eq!((&again["message"], &again["lastTransitionTime"]), (&c["message"], &c["lastTransitionTime"]));
    assert_eq!(h.metric("steward_plugin_source_refusals_total", &[&source, "reason=\"unsigned\""]).await, 1.0);

    // The object of its kind says which source it waits for and why, not to add a file.
    let v = h
        .wait_object("Noop/default/a", T, "waiting for the source", |v| {
            v.is_some_and(|v| v["lastError"].as_str().is_some_and(|e| e.contains(&tag)))
        })
        .await
        .unwrap();
    let e = v["lastError"].as_str().unwrap();
    let waits = format!(
        "no plugin serves kind Noop yet: it comes from the plugin source {tag}, which was refused: the artifact {digest} has no signature"
    );
    assert!(e.starts_with(&waits), "{e}");
    assert!(!e.contains("plugin directory"), "{e}");

    // Signed: loaded, the object served, the condition clear.
    sign(&reg, &tag, &private);
    wait_plugin(&h, &tag, "loaded once signed", |p| p["state"] == "Ready").await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let ok = source_condition(&h, &tag, "PluginSource True", |c| c["status"] == "True").await;
    assert_eq!(ok["reason"], "Current", "{ok}");
    assert_eq!(h.metric("steward_plugin_source_fetches_total", &[&source, "result=\"loaded\""]).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_moved_to_another_manifest_of_the_same_component_shows_the_new_digest() {
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:moved");
    let v1 = push(&reg, &wasm("noop"), &tag);
    let mut h = host_of(&reg, &tag, "");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    wait_plugin(&h, &tag, "noop from the registry", |p| p["source"]["digest"] == v1.as_str()).await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;

    // The same component under a new manifest (one annotation more), pushed to the tag.
    let bytes = std::fs::read(wasm("noop")).unwrap();
    let r = OciRef::parse(&tag).unwrap();
    let registry = Registry::new(&r, &reg.access()).unwrap();
    let first = registry.pull(&r, None).await.unwrap();
    let mut artifact = wasm_artifact(&bytes, &PluginLabel { name: "noop".into(), ..Default::default() });
    artifact.manifest.annotations = first.manifest.annotations.clone();
    artifact.manifest.annotations.insert("org.opencontainers.image.description".into(), "retagged".into());
    artifact.manifest_bytes = serde_json::to_vec(&artifact.manifest).unwrap();
    let v2 = registry.push(&r, &bytes, &artifact).await.unwrap();
    assert_ne!(v2, v1);
    assert_eq!(artifact.manifest.layers[0].digest, first.manifest.layers[0].digest);

    let p = wait_plugin(&h, &tag, "the new digest", |p| p["source"]["digest"] == v2.as_str()).await;
    assert_eq!((&p["state"], &p["version"]), (&"Ready".into(), &"0.1.0".into()));
    let c = source_condition(&h, &tag, "the move in the condition", |c| {
        c["message"].as_str().is_some_and(|m| m.contains(&v2))
    })
    .await;
    assert_eq!(c["status"], "True", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains(&format!(
            "the tag moved from {v1} to {v2}, a manifest of the same component, so nothing was reloaded"
        )),
        "{m}"
    );
    let source = format!("source=\"{tag}\"");
    assert_eq!(h.metric("steward_plugin_source_digest_changes_total", &[&source]).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_a_source_the_registry_cannot_give_yet_say_it_is_being_fetched() {
    let mut reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:later");
    push(&reg, &wasm("noop"), &tag);
    reg.stop();
    let mut h = host_of(&reg, &tag, "");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let v = h
        .wait_object("Noop/default/a", T, "waiting for the source", |v| {
            v.is_some_and(|v| v["lastError"].as_str().is_some_and(|e| e.contains(&tag)))
        })
        .await
        .unwrap();
    let e = v["lastError"].as_str().unwrap();
    let waits = format!(
        "no plugin serves kind Noop; it may come from the plugin source {tag}, which is still being fetched (cannot reach the registry"
    );
    assert!(e.starts_with(&waits), "{e}");
    let source = format!("source=\"{tag}\"");
    assert_eq!(h.metric("steward_plugin_source_cache_total", &[&source, "result=\"miss\""]).await, 1.0);
    assert!(h.metric("steward_plugin_source_fetches_total", &[&source, "result=\"failed\""]).await >= 1.0);

    // The registry is back: the plugin loads and the object is served.
    reg.restart().await;
    wait_plugin(&h, &tag, "loaded", |p| p["state"] == "Ready").await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
}
