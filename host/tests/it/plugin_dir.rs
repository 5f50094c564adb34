//! Loading a plugin directory: bad files, conflicts, capabilities, hot reload and the compile cache.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use steward::plugin::{
    KindUnavailable, NoReads, Origin, PluginEvent, PluginSet, PluginSettings, PluginState, Runtime, RuntimeOptions,
};

use crate::common::{install, request, wasm};

fn set(dir: &std::path::Path, settings: BTreeMap<String, PluginSettings>) -> Arc<PluginSet> {
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    PluginSet::new(rt, dir, settings, PluginSettings::default())
}

fn granted(name: &str, caps: &[&str]) -> BTreeMap<String, PluginSettings> {
    let s = PluginSettings { capabilities: caps.iter().map(|c| c.to_string()).collect(), ..Default::default() };
    BTreeMap::from([(name.to_string(), s)])
}

async fn value_of(set: &PluginSet, kind: &str) -> serde_json::Value {
    let p = set.resolve(kind).unwrap();
    let out = p.reconcile(&request(kind, "x", json!({"value": "v"})), Arc::new(NoReads)).await;
    serde_json::from_str(&out.result.unwrap().status).unwrap()
}

#[tokio::test]
async fn bad_files_are_reported_by_name_and_do_not_stop_the_others() {
    let dir = tempfile::tempdir().unwrap();
    install(&wasm("noop"), &dir.path().join("noop.wasm"));
    install(&wasm("misbehave"), &dir.path().join("misbehave.wasm"));
    std::fs::write(dir.path().join("garbage.wasm"), b"this is not webassembly").unwrap();
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(dir.path().join("empty-component.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
    std::fs::write(dir.path().join("README.md"), b"not a plugin").unwrap();
    let set = set(dir.path(), BTreeMap::new());
    let statuses = set.load_all().await.unwrap();
    let by_file: BTreeMap<_, _> = statuses.iter().map(|s| (s.file.as_str(), s)).collect();
    assert_eq!(by_file.len(), 5, "only *.wasm files are plugins: {statuses:#?}");
    assert_eq!(by_file["noop.wasm"].state, PluginState::Ready);
    assert_eq!(by_file["misbehave.wasm"].state, PluginState::Ready);
    let msg = |f: &str| by_file[f].message.clone().unwrap_or_default();
    assert_eq!(by_file["garbage.wasm"].state, PluginState::Failed);
    assert!(msg("garbage.wasm").starts_with("garbage.wasm: not a WebAssembly file"), "{}", msg("garbage.wasm"));
    assert!(msg("core.wasm").contains("core WebAssembly module, not a component"), "{}", msg("core.wasm"));
    assert!(msg("empty-component.wasm").contains("not a Steward plugin"), "{}", msg("empty-component.wasm"));
    // No status names a host path.
    let dir_text = dir.path().display().to_string();
    assert!(statuses.iter().all(|s| !s.message.clone().unwrap_or_default().contains(&dir_text)));
    assert_eq!(value_of(&set, "Noop").await["value"], "v");
}

#[tokio::test]
async fn two_plugins_claiming_one_kind_are_reported_and_the_first_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    install(&wasm("noop"), &dir.path().join("a-noop.wasm"));
    install(&wasm("noop-twin"), &dir.path().join("b-twin.wasm"));
    let set = set(dir.path(), BTreeMap::new());
    let statuses = set.load_all().await.unwrap();
    assert_eq!(statuses[0].state, PluginState::Ready);
    assert_eq!(statuses[1].state, PluginState::Failed);
    let msg = statuses[1].message.clone().unwrap();
    assert!(msg.contains("kind Noop is already served by plugin noop (a-noop.wasm)"), "{msg}");
    assert!(msg.contains("plugins.<name>.kinds"), "{msg}");
    assert_eq!(set.resolve("Noop").unwrap().name(), "noop");

    // Removing the winner lets the other one take the kind.
    std::fs::remove_file(dir.path().join("a-noop.wasm")).unwrap();
    set.remove(&dir.path().join("a-noop.wasm")).await;
    assert_eq!(set.resolve("Noop").unwrap().name(), "noop-twin");
}

#[tokio::test]
async fn the_kinds_setting_resolves_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    install(&wasm("noop"), &dir.path().join("a-noop.wasm"));
    install(&wasm("noop-twin"), &dir.path().join("b-twin.wasm"));
    let settings = BTreeMap::from([("noop".to_string(), PluginSettings { kinds: Some(vec![]), ..Default::default() })]);
    let set = set(dir.path(), settings);
    let statuses = set.load_all().await.unwrap();
    assert!(statuses.iter().all(|s| s.state == PluginState::Ready), "{statuses:#?}");
    assert!(statuses[0].kinds.is_empty());
    assert_eq!(set.resolve("Noop").unwrap().name(), "noop-twin");
    // The lookup the engine asks per reconcile answers as the list does: a plugin serves a kind
    // exactly when its served kinds name it (the setting left `noop` none).
    for p in set.plugins() {
        for kind in ["Noop", "Nope"] {
            let listed = steward::plugin::served_kinds(&p).iter().any(|k| k == kind);
            assert_eq!(steward::plugin::serves(&p, kind), listed, "{} serves {kind}", p.name());
        }
    }
}

#[tokio::test]
async fn an_ungranted_capability_blocks_the_plugin_with_the_line_to_add() {
    let dir = tempfile::tempdir().unwrap();
    install(&wasm("mcpserver"), &dir.path().join("mcpserver.wasm"));
    let set = set(dir.path(), BTreeMap::new());
    let statuses = set.load_all().await.unwrap();
    assert_eq!(statuses[0].state, PluginState::Blocked);
    assert_eq!(statuses[0].kinds, vec!["MCPServer"]);
    let msg = statuses[0].message.clone().unwrap();
    assert!(msg.contains("add `capabilities: [services]` under plugins.mcpserver"), "{msg}");
    match set.resolve("MCPServer") {
        Err(KindUnavailable::Blocked { plugin, .. }) => assert_eq!(plugin, "mcpserver"),
        other => panic!("expected Blocked, got {:?}", other.map(|p| p.name().to_string())),
    }

    let set2 = self::set(dir.path(), granted("mcpserver", &["services"]));
    let statuses = set2.load_all().await.unwrap();
    assert_eq!(statuses[0].state, PluginState::Ready, "{statuses:#?}");
    assert!(set2.resolve("MCPServer").is_ok());
    assert!(matches!(set2.resolve("Nope"), Err(KindUnavailable::NoPlugin { .. })));
}

#[tokio::test]
async fn hot_reload_keeps_the_good_version_swaps_in_a_better_one_and_unloads_a_removed_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("noop.wasm");
    install(&wasm("noop"), &file);
    let set = set(dir.path(), BTreeMap::new());
    set.load_all().await.unwrap();
    let mut events = set.subscribe();
    let _watch = steward::plugin::watch(set.clone()).unwrap();
    assert_eq!(value_of(&set, "Noop").await["by"], "0.1.0");

    // good → bad: the good one keeps running, and the refusal is shown.
    let bad = dir.path().join("bad.part");
    std::fs::write(&bad, b"\0asm\x0d\0\x01\0 truncated").unwrap();
    std::fs::rename(&bad, &file).unwrap();
    let ev = recv(&mut events).await;
    assert!(matches!(&ev, PluginEvent::Failed { file, .. } if file == "noop.wasm"), "{ev:?}");
    assert_eq!(value_of(&set, "Noop").await["by"], "0.1.0");
    let st = &set.statuses()[0];
    assert_eq!(st.state, PluginState::Ready);
    assert!(st.message.clone().unwrap().contains("the running version stays"), "{st:?}");

    // bad → the bytes that run: nothing to load, and the refusal is over.
    install(&wasm("noop"), &file);
    crate::common::eventually(
        Duration::from_secs(30),
        "the refusal cleared",
        async || set.statuses()[0].message.clone(),
        Option::is_none,
    )
    .await;
    assert_eq!(set.statuses()[0].state, PluginState::Ready);
    assert_eq!(value_of(&set, "Noop").await["by"], "0.1.0");

    // good → better: swapped in atomically.
    install(&wasm("noop-v2"), &file);
    let ev = recv(&mut events).await;
    assert_eq!(
        ev,
        PluginEvent::Updated {
            name: "noop".into(),
            from: "0.1.0".into(),
            to: "0.2.0".into(),
            kinds: vec!["Noop".into()],
            removed: vec![]
        }
    );
    assert_eq!(value_of(&set, "Noop").await["by"], "0.2.0");
    assert_eq!(set.statuses()[0].message, None);

    // removed → its kinds are no longer served.
    std::fs::remove_file(&file).unwrap();
    let ev = recv(&mut events).await;
    assert_eq!(ev, PluginEvent::Unloaded { name: "noop".into(), kinds: vec!["Noop".into()] });
    assert!(matches!(set.resolve("Noop"), Err(KindUnavailable::NoPlugin { .. })));

    // A new file is picked up.
    install(&wasm("noop"), &dir.path().join("again.wasm"));
    let ev = recv(&mut events).await;
    assert!(matches!(ev, PluginEvent::Loaded { ref name, .. } if name == "noop"), "{ev:?}");
}

async fn recv(rx: &mut tokio::sync::broadcast::Receiver<PluginEvent>) -> PluginEvent {
    tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("a plugin event within 30 s").unwrap()
}

#[tokio::test]
async fn calls_running_during_a_swap_finish_on_the_version_they_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("noop.wasm");
    install(&wasm("noop"), &file);
    let set = set(dir.path(), BTreeMap::new());
    set.load_all().await.unwrap();
    let old = set.resolve("Noop").unwrap();
    install(&wasm("noop-v2"), &file);
    set.reload(&file).await;
    // The old Arc still works, and new lookups get the new version.
    let out = old.reconcile(&request("Noop", "x", json!({})), Arc::new(NoReads)).await;
    assert!(out.result.unwrap().status.contains("0.1.0"));
    assert_eq!(value_of(&set, "Noop").await["by"], "0.2.0");
}

#[tokio::test]
async fn the_compile_cache_makes_the_second_load_skip_compilation() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    install(&wasm("noop"), &dir.path().join("noop.wasm"));
    let opts = RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() };

    let rt1 = Runtime::new(opts.clone()).unwrap();
    let set1 = PluginSet::new(rt1.clone(), dir.path(), BTreeMap::new(), PluginSettings::default());
    assert_eq!(set1.load_all().await.unwrap()[0].origin, Some(Origin::Compiled));
    assert_eq!(rt1.stats().compiled.load(Ordering::Relaxed), 1);

    let rt2 = Runtime::new(opts.clone()).unwrap();
    let set2 = PluginSet::new(rt2.clone(), dir.path(), BTreeMap::new(), PluginSettings::default());
    assert_eq!(set2.load_all().await.unwrap()[0].origin, Some(Origin::Cached));
    assert_eq!(rt2.stats().compiled.load(Ordering::Relaxed), 0, "nothing recompiled");
    assert_eq!(value_of(&set2, "Noop").await["by"], "0.1.0");

    // A corrupt entry is recompiled and replaced, not trusted.
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let p = e.unwrap().path();
        std::fs::write(&p, b"corrupt").unwrap();
    }
    let rt3 = Runtime::new(opts).unwrap();
    let set3 = PluginSet::new(rt3.clone(), dir.path(), BTreeMap::new(), PluginSettings::default());
    assert_eq!(set3.load_all().await.unwrap()[0].origin, Some(Origin::Compiled));
    assert_eq!(value_of(&set3, "Noop").await["by"], "0.1.0");
}

#[tokio::test]
async fn the_bundled_plugins_describe_their_kinds_with_derived_schemas() {
    let dir = tempfile::tempdir().unwrap();
    install(&wasm("mcpserver"), &dir.path().join("mcpserver.wasm"));
    install(&wasm("workflow"), &dir.path().join("workflow.wasm"));
    let set = set(dir.path(), granted("mcpserver", &["services"]));
    set.load_all().await.unwrap();
    let mcp = set.resolve("MCPServer").unwrap();
    let kind = &mcp.info().kinds[0];
    assert_eq!(
        (kind.group.as_str(), kind.version.as_str(), kind.plural.as_str()),
        ("steward.dev", "v1alpha1", "mcpservers")
    );
    let schema: serde_json::Value = serde_json::from_str(&kind.spec_schema).unwrap();
    assert!(schema["properties"]["command"].is_object(), "{schema}");
    assert_eq!(mcp.info().capabilities, vec!["services"]);
    let wf = set.resolve("Workflow").unwrap();
    let schema: serde_json::Value = serde_json::from_str(&wf.info().kinds[0].spec_schema).unwrap();
    assert!(schema["properties"]["steps"].is_object(), "{schema}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_cache_limit_prunes_what_it_does_not_use_and_keeps_what_it_loaded() {
    use crate::common::host::{Host, PLUGINS, noop, synced};
    let entries = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .collect();
        v.sort();
        v
    };
    // Room for no entry at all: every entry this host does not use goes, its own stay.
    let mut h = Host::new("cache_dir: cache\ncache_limit: 1\n");
    let cache = h.dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let old = cache.join(format!("{}-{:016x}.cwasm", "ab".repeat(32), 1));
    std::fs::write(&old, vec![0u8; 4096]).unwrap();
    h.write("a.yaml", &noop("a", "hello"));
    h.start().await;
    h.wait_object("Noop/default/a", Duration::from_secs(60), "Synced", synced).await;
    assert!(!old.exists(), "an entry no plugin of the host uses was pruned");
    let kept = entries(&cache);
    assert_eq!(kept.len(), PLUGINS.len(), "the entries of the loaded plugins stay, over the limit: {kept:?}");

    // The next start loads every plugin from them.
    h.terminate();
    h.start().await;
    h.wait_object("Noop/default/a", Duration::from_secs(60), "Synced", synced).await;
    let plugins = h.api().get("/api/v1/plugins").await.unwrap();
    let origins: Vec<&str> = plugins.as_array().unwrap().iter().filter_map(|p| p["origin"].as_str()).collect();
    assert_eq!(origins, vec!["cached"; PLUGINS.len()], "{plugins}");
    assert_eq!(entries(&cache), kept);
}
