//! Filesystem mode end to end: the real binary, real files, real redb.

use std::time::Duration;

use crate::common;
use crate::common::host::{Host, misbehave, noop, synced};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_update_delete() {
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "one"));
    h.start().await;
    let v = h.wait_object("Noop/default/a", T, "Synced", synced).await.unwrap();
    assert_eq!(v["status"]["value"], "one");
    assert_eq!(v["generation"], 1);
    assert_eq!(v["plugin"], "noop");
    assert_eq!(v["source"], "a.yaml:1");
    assert_eq!(v["history"][0]["reason"], "created");

    // Update: generation and observedGeneration advance together.
    h.write("a.yaml", &noop("a", "two"));
    let v = h
        .wait_object("Noop/default/a", T, "generation 2 observed", |v| v.is_some_and(|v| v["observedGeneration"] == 2))
        .await
        .unwrap();
    assert_eq!(v["status"]["value"], "two");
    assert_eq!(v["generation"], 2);
    assert_eq!(v["history"].as_array().unwrap().last().unwrap()["reason"], "specChanged");

    // Delete: finalize runs, then the object is forgotten.
    h.remove("a.yaml");
    h.wait_object("Noop/default/a", T, "forgotten", |v| v.is_none()).await;
    let finalized = async || h.metric("steward_finalizations_total", &["kind=\"Noop\""]).await;
    common::eventually(T, "the finalization counted", finalized, |n| *n == 1.0).await;
    let code = h.terminate();
    assert!(code.success(), "SIGTERM exits 0, got {code}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resyncs_of_an_object_at_rest_are_counted_in_one_history_entry_across_a_restart() {
    let mut h = Host::new("resync: 1s\n");
    h.write("a.yaml", &noop("a", "one"));
    h.start().await;
    // The resyncs the entry after `created` counts, if the history is just those two.
    let resyncs = |v: &serde_json::Value| {
        let hs = v["history"].as_array().unwrap();
        let counted = hs.len() == 2 && hs[0]["reason"] == "created" && hs[1]["reason"] == "resync";
        if counted { hs[1]["count"].as_u64().unwrap_or(1) } else { 0 }
    };
    let v =
        h.wait_object("Noop/default/a", T, "three resyncs in one entry", |v| v.is_some_and(|v| resyncs(v) >= 3)).await;
    let v = v.unwrap();
    let entry = &v["history"][1];
    assert_eq!(entry["outcome"], "Synced", "{v:#}");
    let (first, last) = (entry["firstTime"].as_str().unwrap(), entry["time"].as_str().unwrap());
    assert!(first < last, "the first resync's time and the last one's: {entry}");
    let counted = resyncs(&v);

    // The count is stored with the record: a restarted host reads it and goes on counting.
    assert!(h.terminate().success());
    h.start().await;
    let v = h
        .wait_object("Noop/default/a", T, "more resyncs in the same entry", |v| v.is_some_and(|v| resyncs(v) > counted))
        .await;
    assert_eq!(v.unwrap()["history"][1]["firstTime"], first);
    assert!(h.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_its_last_good_objects_and_says_where() {
    let mut h = Host::new("");
    h.write("b.yaml", &format!("{}---\n{}", noop("b1", "x"), noop("b2", "y")));
    h.start().await;
    h.wait_object("Noop/default/b2", T, "Synced", synced).await;
    h.write(
        "b.yaml",
        "apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: b1\nspec:\n  value: [unclosed\n",
    );
    let o = h
        .wait_get("/api/v1/overview", T, "a problem", |v| v["problems"].as_array().is_some_and(|p| !p.is_empty()))
        .await;
    let problem = o["problems"][0].as_str().unwrap();
    assert!(problem.starts_with("b.yaml:"), "{problem}");
    let parts: Vec<&str> = problem.splitn(4, ':').collect();
    assert!(parts[1].parse::<u32>().is_ok() && parts[2].parse::<u32>().is_ok(), "file:line:column: {problem}");
    let v = h.object("Noop/default/b2").await.unwrap();
    assert_eq!(v["phase"], "Synced", "last good object kept: {v:#}");
    assert_eq!(v["status"]["value"], "y");
    assert!(v["sourceProblem"].as_str().unwrap().contains("b.yaml:"), "{v:#}");
    // Fixed: the problem clears.
    h.write("b.yaml", &noop("b1", "x"));
    h.wait_get("/api/v1/overview", T, "no problems", |v| v["problems"].as_array().is_some_and(|p| p.is_empty())).await;
    h.wait_object("Noop/default/b2", T, "b2 deleted", |v| v.is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_defined_in_two_files_is_reported_on_both() {
    let mut h = Host::new("");
    h.write("one.yaml", &noop("dup", "from-one"));
    h.start().await;
    h.wait_object("Noop/default/dup", T, "Synced", synced).await;
    h.write("two.yaml", &noop("dup", "from-two"));
    let o = h
        .wait_get("/api/v1/overview", T, "conflicts", |v| v["problems"].as_array().is_some_and(|p| p.len() == 2))
        .await;
    let text = o["problems"].to_string();
    assert!(text.contains("one.yaml") && text.contains("two.yaml"), "{text}");
    let v = h.object("Noop/default/dup").await.unwrap();
    assert_eq!(v["status"]["value"], "from-one", "the first file keeps it");
    assert!(v["sourceProblem"].is_string(), "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_kind_is_left_alone_and_requeued_when_enabled() {
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "one"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    h.api().post("/api/v1/kinds/Noop/disable").await.unwrap();
    h.write("a.yaml", &noop("a", "two"));
    // The change is seen (generation 2) but not reconciled.
    let v =
        h.wait_object("Noop/default/a", T, "generation 2", |v| v.is_some_and(|v| v["generation"] == 2)).await.unwrap();
    assert_eq!(v["disabled"], true);
    // Workers keep serving other kinds meanwhile; only then look again at the disabled one.
    h.write("other.yaml", &misbehave("other", "ok"));
    h.wait_object("Misbehave/default/other", T, "Synced", synced).await;
    h.api().post("/api/v1/resources/Noop/default/a/reconcile").await.unwrap();
    h.write("other.yaml", &misbehave("other", "retry"));
    h.wait_object("Misbehave/default/other", T, "a second run", |v| {
        v.is_some_and(|v| v["observedGeneration"] == 1 && v["generation"] == 2 && v["retryCount"].as_u64() > Some(0))
    })
    .await;
    assert_eq!(
        h.object("Noop/default/a").await.unwrap()["observedGeneration"],
        1,
        "a disabled kind is not reconciled, not even by a trigger"
    );
    h.api().post("/api/v1/kinds/Noop/enable").await.unwrap();
    let v = h
        .wait_object("Noop/default/a", T, "observed 2", |v| v.is_some_and(|v| v["observedGeneration"] == 2))
        .await
        .unwrap();
    assert_eq!(v["history"].as_array().unwrap().last().unwrap()["reason"], "kindEnabled");
    let err = h.api().post("/api/v1/kinds/Nope/disable").await.unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_then_fail_and_a_manual_trigger_retries() {
    let mut h = Host::new("queue: { initial_backoff: 50ms, max_backoff: 200ms, max_retries: 3 }\n");
    h.write("m.yaml", &misbehave("m", "retry"));
    h.start().await;
    let v =
        h.wait_object("Misbehave/default/m", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed")).await.unwrap();
    assert_eq!(v["retryCount"], 4, "three retries after the first attempt: {v:#}");
    // The history: the first attempt, the two retries that failed alike counted in one entry,
    // then the last.
    let entries: Vec<(String, String, u64)> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["reason"].as_str().unwrap().into(),
                h["outcome"].as_str().unwrap().into(),
                h["count"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    let expected = [("created", "Error: retry", 1), ("retry", "Error: retry", 2), ("retry", "Failed: retry", 1)];
    assert_eq!(entries, expected.map(|(r, o, n)| (r.to_string(), o.to_string(), n)), "{v:#}");
    assert!(v["lastError"].as_str().unwrap().contains("try again later"), "{v:#}");
    // The retries waited longer each time (backoff), and the last one no longer retries: the
    // counted entry keeps the time of its first retry and of its last.
    let millis = |t: &serde_json::Value| {
        humantime::parse_rfc3339(t.as_str().unwrap())
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let hs = &v["history"];
    let times = [millis(&hs[0]["time"]), millis(&hs[1]["firstTime"]), millis(&hs[1]["time"]), millis(&hs[2]["time"])];
    assert!(times[2] - times[1] >= 80 && times[3] - times[2] >= 150, "backoff grows: {times:?}");
    assert!(v["nextAttemptTime"].is_null());

    h.api().post("/api/v1/resources/Misbehave/default/m/reconcile").await.unwrap();
    let v = h
        .wait_object("Misbehave/default/m", T, "a manual run", |v| {
            v.is_some_and(|v| v["history"].as_array().unwrap().iter().any(|e| e["reason"] == "manualTrigger"))
        })
        .await
        .unwrap();
    assert_eq!(v["history"].as_array().unwrap().iter().filter(|e| e["reason"] == "manualTrigger").count(), 1);
    let err = h.api().post("/api/v1/resources/Misbehave/default/nope/reconcile").await.unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_fails_at_once_and_a_spec_change_retries() {
    let mut h = Host::new("");
    h.write("m.yaml", &misbehave("m", "fatal"));
    h.start().await;
    let v =
        h.wait_object("Misbehave/default/m", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed")).await.unwrap();
    assert_eq!(v["retryCount"], 1);
    h.write("m.yaml", &misbehave("m", "ok"));
    h.wait_object("Misbehave/default/m", T, "Synced", synced).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_read_through_list_requeues_the_reader() {
    let mut h = Host::new("");
    h.write("reader.yaml", &misbehave("reader", "read"));
    h.start().await;
    let v = h.wait_object("Misbehave/default/reader", T, "Synced", synced).await.unwrap();
    assert_eq!(v["status"]["listed"], serde_json::json!([]));
    // A new Noop re-queues the reader without any change to the reader itself.
    h.write("n.yaml", &noop("n1", "v"));
    let v = h
        .wait_object("Misbehave/default/reader", T, "listed n1", |v| {
            v.is_some_and(|v| v["status"]["listed"] == serde_json::json!(["n1"]))
        })
        .await
        .unwrap();
    assert_eq!(v["generation"], 1);
    assert_eq!(v["history"].as_array().unwrap().last().unwrap()["reason"], "dependencyChanged");
    h.remove("n.yaml");
    h.wait_object("Misbehave/default/reader", T, "listed nothing", |v| {
        v.is_some_and(|v| v["status"]["listed"] == serde_json::json!([]))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_convergence_then_restart_converges_everything_and_finalizes_deletes() {
    let _heavy = common::heavy().await;
    let mut h = Host::new("queue: { workers: 4 }\n");
    let n = 2000;
    for f in 0..20 {
        let docs: Vec<String> = (0..n / 20).map(|i| noop(&format!("o{f}-{i}"), "v1")).collect();
        h.write(&format!("f{f}.yaml"), &docs.join("---\n"));
    }
    h.start().await;
    // Let it get part of the way, then kill it hard.
    h.wait_get("/api/v1/overview", T, "some progress", |v| {
        v["kinds"].as_array().is_some_and(|ks| ks.iter().any(|k| k["phases"]["Synced"].as_u64().unwrap_or(0) > 100))
    })
    .await;
    h.kill9();
    // While it is down: delete two files, change one.
    h.remove("f0.yaml");
    h.remove("f1.yaml");
    let docs: Vec<String> = (0..n / 20).map(|i| noop(&format!("o2-{i}"), "v2")).collect();
    h.write("f2.yaml", &docs.join("---\n"));
    h.start().await;
    let want = n - 2 * (n / 20);
    let o = h
        .wait_get("/api/v1/overview", Duration::from_secs(120), "all converged", |v| {
            v["kinds"].as_array().is_some_and(|ks| {
                ks.iter().any(|k| {
                    k["kind"] == "Noop" && k["phases"].as_object().is_some_and(|p| p.len() == 1 && p["Synced"] == want)
                })
            })
        })
        .await;
    assert_eq!(o["queueLength"], 0);
    for i in [0, 50, 99] {
        assert!(
            h.object(&format!("Noop/default/o0-{i}")).await.is_none(),
            "deleted while down: finalized and forgotten"
        );
        // Changed while down: the new spec is what is observed (objects the first run had
        // already stored are at generation 2, the others start at 1).
        let v = h.object(&format!("Noop/default/o2-{i}")).await.unwrap();
        assert_eq!(v["status"]["value"], "v2");
        assert_eq!(v["observedGeneration"], v["generation"]);
    }
    let views = h.api().get("/api/v1/resources?kind=Noop").await.unwrap();
    assert_eq!(views.as_array().unwrap().len(), want);
    assert!(views.as_array().unwrap().iter().all(|v| synced(Some(v))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_plugin_reconciles_its_objects_again_and_a_removed_one_leaves_them_pending() {
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let v = h.wait_object("Noop/default/a", T, "Synced", synced).await.unwrap();
    assert_eq!(v["status"]["by"], "0.1.0");
    common::install(&common::wasm("noop-v2"), &h.dir.path().join("plugins/noop.wasm"));
    let v = h
        .wait_object("Noop/default/a", T, "reconciled by 0.2.0", |v| v.is_some_and(|v| v["status"]["by"] == "0.2.0"))
        .await
        .unwrap();
    assert_eq!(v["history"].as_array().unwrap().last().unwrap()["reason"], "pluginReloaded");
    assert_eq!(v["pluginVersion"], "0.2.0");
    std::fs::remove_file(h.dir.path().join("plugins/noop.wasm")).unwrap();
    let v =
        h.wait_object("Noop/default/a", T, "no plugin", |v| v.is_some_and(|v| v["phase"] == "Pending")).await.unwrap();
    assert!(v["lastError"].as_str().unwrap().contains("no plugin serves kind Noop"), "{v:#}");
}
