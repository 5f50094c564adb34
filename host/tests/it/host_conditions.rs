//! The host's own conditions, one fault per test: each fault shows in the overview, `/readyz`
//! (where it stops the host doing its job), the metrics and `steward status`, and clears after
//! the repair without a restart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::host::{Host, noop, synced};

const T: Duration = Duration::from_secs(60);

/// A tmpfs of `size` mounted on `dir` (the tests run as root), unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs on {} (these tests run as root) failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir: dir.to_path_buf() }
    }

    /// Fills the file system with one file until the kernel says it is full; returns the file.
    fn fill(&self) -> PathBuf {
        let file = self.dir.join("filler");
        let mut f = std::fs::File::create(&file).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                    break;
                }
            }
        }
        file
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// The host condition `type_` in an overview, if listed.
fn condition<'a>(overview: &'a Value, type_: &str) -> Option<&'a Value> {
    overview["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// Whether the overview lists `type_` with `status`.
fn has(overview: &Value, type_: &str, status: &str) -> bool {
    condition(overview, type_).is_some_and(|c| c["status"] == status)
}

/// Waits until the overview lists `type_` with `status`; returns the condition.
async fn wait_condition(h: &Host, type_: &str, status: &str) -> Value {
    let o = h.wait_get("/api/v1/overview", T, &format!("{type_} {status}"), |o| has(o, type_, status)).await;
    condition(&o, type_).unwrap().clone()
}

/// `steward_host_condition{type,status}` as `/metrics` has it now.
async fn gauge(h: &Host, type_: &str, status: &str) -> f64 {
    h.metric("steward_host_condition", &[&format!("type=\"{type_}\""), &format!("status=\"{status}\"")]).await
}

/// A noop value of about 1000 bytes (the kind's limit is 1024), so that statuses fill pages.
fn big(n: usize) -> String {
    format!("{n}-{}", "x".repeat(1000))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_store_shows_everywhere_keeps_the_writes_and_clears_once_freed() {
    // Only the store on the small file system: the compile cache stays beside it.
    let mut h = Host::new("cache_dir: cache\n");
    let disk = Tmpfs::mount(&h.dir.path().join("state"), "6m");
    h.write("a.yaml", &noop("a", "hello"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let ok = wait_condition(&h, "StoreWritable", "True").await;
    assert_eq!(ok["blocksReadiness"], true, "{ok}");
    assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200);
    assert_eq!(gauge(&h, "StoreWritable", "True").await, 1.0);

    // The disk fills up; the objects written now cannot be committed.
    let filler = disk.fill();
    for n in 0..20 {
        h.write(&format!("during{n}.yaml"), &noop(&format!("during{n}"), &big(n)));
    }
    let bad = wait_condition(&h, "StoreWritable", "False").await;
    assert_eq!(bad["reason"], "DiskFull", "{bad}");
    let message = bad["message"].as_str().unwrap();
    assert!(message.contains("state.redb") && message.contains("free space"), "{message}");
    let ready = h.http("GET", "/readyz", &[], b"");
    assert_eq!(ready.status, 503, "{ready:?}");
    assert!(ready.error().contains("StoreWritable") && ready.error().contains("DiskFull"), "{ready:?}");
    assert_eq!(gauge(&h, "StoreWritable", "False").await, 1.0);
    assert_eq!(gauge(&h, "StoreWritable", "True").await, 0.0);
    let (code, out, err) = h.cli(&["status"]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(first.starts_with("HOST CONDITION"), "{out}");
    assert!(out.lines().nth(1).is_some_and(|l| l.contains("StoreWritable") && l.contains("DiskFull")), "{out}");

    // Space comes back: the kept writes commit, without a restart.
    std::fs::remove_file(&filler).unwrap();
    wait_condition(&h, "StoreWritable", "True").await;
    assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200);
    assert_eq!(gauge(&h, "StoreWritable", "True").await, 1.0);
    for n in 0..20 {
        h.wait_object(&format!("Noop/default/during{n}"), T, "Synced", synced).await;
    }
    let (_, out, _) = h.cli(&["status"]);
    assert!(out.starts_with("NAMESPACE"), "{out}");
    let status = h.terminate();
    assert!(status.success(), "a clean stop exits 0: {status}\n{}", h.log());

    // No write of the outage was lost: the file holds every status.
    {
        let store = steward::store::Store::<steward::model::StatusRecord>::open(&h.dir.path().join("state/state.redb"))
            .unwrap();
        for n in 0..20 {
            let rec = store.get(&format!("Noop/default/during{n}")).unwrap_or_else(|| panic!("during{n} was lost"));
            assert_eq!(rec.phase.to_string(), "Synced", "during{n}: {rec:?}");
        }
    }

    // A final flush that cannot reach the disk makes the process exit non-zero.
    h.start().await;
    let _filler = disk.fill();
    for n in 20..30 {
        h.write(&format!("late{n}.yaml"), &noop(&format!("late{n}"), &big(n)));
    }
    wait_condition(&h, "StoreWritable", "False").await;
    let status = h.terminate();
    assert!(!status.success(), "writes that never reached the disk must fail the exit: {status}\n{}", h.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_resources_directory_is_a_condition_keeps_the_objects_and_clears_once_restored() {
    // A full scan every second (resync 1s): the directory is looked at again that often.
    let mut h = Host::new("resync: 1s\n");
    h.write("a.yaml", &noop("a", "hello"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    wait_condition(&h, "ResourcesReadable", "True").await;

    // The directory is moved away and a file takes its place (root reads any directory).
    let dir = h.resources();
    let away = h.dir.path().join("resources.away");
    std::fs::rename(&dir, &away).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    let bad = wait_condition(&h, "ResourcesReadable", "False").await;
    assert_eq!(bad["reason"], "DirectoryUnreadable", "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("not a directory"), "{bad}");
    assert_eq!(gauge(&h, "ResourcesReadable", "False").await, 1.0);
    // Not a reason to stop serving: the objects read before are kept, and the host stays ready.
    assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200);
    assert!(h.object("Noop/default/a").await.is_some_and(|v| synced(Some(&v))));
    let (_, out, _) = h.cli(&["status"]);
    assert!(out.starts_with("HOST CONDITION") && out.contains("ResourcesReadable"), "{out}");

    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&away, &dir).unwrap();
    wait_condition(&h, "ResourcesReadable", "True").await;
    assert_eq!(gauge(&h, "ResourcesReadable", "True").await, 1.0);
    // The directory is watched again: a new file is seen.
    h.write("b.yaml", &noop("b", "back"));
    h.wait_object("Noop/default/b", T, "Synced", synced).await;
    assert!(h.object("Noop/default/a").await.is_some_and(|v| synced(Some(&v))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_compile_cache_is_a_condition_and_what_was_compiled_is_written_once_freed() {
    // The host's own compile cache, on a small file system.
    let mut h = Host::new("cache_dir: cache\n");
    let disk = Tmpfs::mount(&h.dir.path().join("cache"), "32m");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let entries = || {
        std::fs::read_dir(&disk.dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("cwasm".as_ref()))
            .count()
    };
    let cached = entries();
    assert!(cached >= 1, "the plugins are cached");
    let o = h.api().get("/api/v1/overview").await.unwrap();
    assert!(condition(&o, "CompileCacheWritable").is_none(), "not listed while all is well: {o}");

    // The disk fills up, then the plugin is replaced: its new version compiles, runs, and
    // cannot be kept for the next start.
    let filler = disk.fill();
    crate::common::install(&crate::common::wasm("noop-v2"), &h.dir.path().join("plugins/noop.wasm"));
    h.wait_object("Noop/default/a", T, "reconciled by 0.2.0", |v| v.is_some_and(|v| v["status"]["by"] == "0.2.0"))
        .await;
    let bad = wait_condition(&h, "CompileCacheWritable", "False").await;
    assert_eq!(bad["reason"], "CannotWrite", "{bad}");
    let message = bad["message"].as_str().unwrap();
    assert!(message.contains("1 compiled plugin(s)") && message.contains("cache_dir"), "{message}");
    assert_eq!(bad["blocksReadiness"], false, "{bad}");
    assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200, "the host does its job");
    assert_eq!(gauge(&h, "CompileCacheWritable", "False").await, 1.0);
    let (_, out, _) = h.cli(&["status"]);
    assert!(out.starts_with("HOST CONDITION") && out.contains("CompileCacheWritable"), "{out}");
    assert_eq!(entries(), cached);

    // Space comes back: what was compiled is written, without a restart or a compile.
    std::fs::remove_file(&filler).unwrap();
    let ok = wait_condition(&h, "CompileCacheWritable", "True").await;
    assert_eq!(ok["reason"], "Written", "{ok}");
    assert_eq!(gauge(&h, "CompileCacheWritable", "True").await, 1.0);
    assert_eq!(entries(), cached + 1, "noop 0.2.0 is cached for the next start");
    let (_, out, _) = h.cli(&["status"]);
    assert!(out.starts_with("NAMESPACE"), "{out}");
}

/// A host with an empty plugin directory whose one plugin is the source `reference` of `reg`, polled every 200ms.
fn host_of_source(reg: &crate::oci_registry::TestRegistry, reference: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    for d in ["resources", "plugins"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let port = crate::common::host::free_port();
    let config = format!(
        "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\n{}api: {{ listen: 127.0.0.1:{port} }}\nplugin_sources:\n  - ref: {reference}\n    poll: 200ms\n{}",
        crate::common::host::shared_cache_line(""),
        reg.source_yaml()
    );
    let file = dir.path().join("steward.yaml");
    std::fs::write(&file, config).unwrap();
    Host::with_config(dir, file, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_oci_artifact_is_a_condition_until_a_good_one_arrives() {
    use crate::oci_registry::{Options, TestRegistry, push};
    use steward::oci::{OciRef, PluginLabel, Registry, wasm_artifact};
    let _heavy = crate::common::heavy().await;
    let reg = TestRegistry::start(Options::default()).await;
    let tag = reg.reference("steward/noop:conditions");
    push(&reg, &crate::common::wasm("noop"), &tag);
    let mut h = host_of_source(&reg, &tag);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let ok = wait_condition(&h, "PluginSource", "True").await;
    assert_eq!(ok["subject"], tag.as_str(), "{ok}");
    h.wait_object("Noop/default/a", T, "Synced", synced).await;

    // The tag moves to an artifact that does not load.
    let broken = b"\0asm\x01\0\0\0".to_vec();
    let artifact = wasm_artifact(&broken, &PluginLabel { name: "noop".into(), ..Default::default() });
    let r = OciRef::parse(&tag).unwrap();
    Registry::new(&r, &reg.access()).unwrap().push(&r, &broken, &artifact).await.unwrap();
    let bad = wait_condition(&h, "PluginSource", "False").await;
    assert_eq!(bad["reason"], "ArtifactRefused", "{bad}");
    let message = bad["message"].as_str().unwrap();
    let refused =
        format!("{tag}: refused: the artifact {} does not load: a core WebAssembly module", artifact.digest());
    assert!(message.starts_with(&refused), "{message}");
    assert_eq!(message.matches(&tag).count(), 1, "the reference is named once: {message}");
    assert!(message.contains("keeps running") && message.contains("once the tag names an artifact"), "{message}");
    assert_eq!(gauge(&h, "PluginSource", "False").await, 1.0);
    // The running version serves on: the host stays ready.
    assert_eq!(h.http("GET", "/readyz", &[], b"").status, 200);
    // Polls go on while the tag names the refused artifact; the condition stays until a good one
    // arrives (a later object is reconciled: the host has moved on meanwhile).
    h.write("b.yaml", &noop("b", "y"));
    h.wait_object("Noop/default/b", T, "Synced", synced).await;
    let o = h.api().get("/api/v1/overview").await.unwrap();
    let still = condition(&o, "PluginSource").unwrap();
    assert_eq!(
        (&still["status"], &still["lastTransitionTime"], &still["message"]),
        (&bad["status"], &bad["lastTransitionTime"], &bad["message"])
    );

    push(&reg, &crate::common::wasm("noop-v2"), &tag);
    let fixed = wait_condition(&h, "PluginSource", "True").await;
    assert_eq!(fixed["reason"], "Current", "{fixed}");
    assert_eq!(gauge(&h, "PluginSource", "True").await, 1.0);
}

/// Fake API server only: it is made unreachable by the test (its injected fault).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_api_server_is_a_watch_condition_that_clears_once_it_answers_again() {
    use crate::common::kube::{Cluster, noop_ar, noop_obj, status, wait_obj};
    use kube::api::{Api, DynamicObject, PostParams};
    let Cluster { server, client, engine, dir: _dir } =
        Cluster::start(&["noop"], "kubernetes: { leaderElection: { enabled: false } }\n").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &noop_ar());
    api.create(&PostParams::default(), &noop_obj("a", "before")).await.unwrap();
    wait_obj(&api, "a", "Synced", |o| status(o)["value"] == "before").await;
    let watches = |status: &'static str| {
        let engine = engine.clone();
        move || {
            let o = serde_json::to_value(engine.overview()).unwrap();
            has(&o, "WatchesHealthy", status)
        }
    };
    let healthy = watches("True");
    crate::common::eventually(T, "WatchesHealthy True", async || healthy(), |ok| *ok).await;

    server.set_unreachable(true);
    let failing = watches("False");
    crate::common::eventually(T, "WatchesHealthy False", async || failing(), |bad| *bad).await;
    let o = serde_json::to_value(engine.overview()).unwrap();
    let c = condition(&o, "WatchesHealthy").unwrap();
    assert_eq!(c["reason"], "ApiServerUnreachable", "{c}");
    assert!(c["message"].as_str().unwrap().contains("Noop"), "{c}");
    let text = engine.render_metrics();
    let series = "steward_host_condition{type=\"WatchesHealthy\",subject=\"\",status=\"False\"} 1";
    assert!(text.contains(series), "{text}");

    // The repair alone clears it, with nothing changed in the cluster (kube's watcher surfaces
    // no reconnect: the failing watch asks the server itself); then the watch carries changes.
    server.set_unreachable(false);
    crate::common::eventually(T, "WatchesHealthy True again", async || healthy(), |ok| *ok).await;
    api.create(&PostParams::default(), &noop_obj("b", "after")).await.unwrap();
    wait_obj(&api, "b", "Synced", |o| status(o)["value"] == "after").await;
    let text = engine.render_metrics();
    assert!(text.contains("steward_host_condition{type=\"WatchesHealthy\",subject=\"\",status=\"True\"} 1"), "{text}");
    engine.shutdown(Duration::from_secs(5)).await;
}
