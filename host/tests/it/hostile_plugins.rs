//! Hostile plugins in a real host with several kinds (issue 7, group 4): one that times out on every
//! call, floods its log, lists in a loop, asks for services it was not granted, or is replaced
//! while its objects are being reconciled. Each is contained; the other kinds keep being served.

use std::time::Duration;

use serde_json::Value;
use steward::plugin::{LINES_BURST, LINES_PER_SEC, REPORT_EVERY};

use crate::common;
use crate::common::host::{Host, noop, synced};

const T: Duration = Duration::from_secs(30);

/// A host whose whole config is `plugins` (the `plugins:` entries, indented) and `rest`.
fn host_with(plugins: &str, rest: &str) -> Host {
    let h = Host::new("");
    let config = format!(
        "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\napi: {{ listen: 127.0.0.1:{} }}\nplugins:\n{plugins}{rest}",
        h.port
    );
    std::fs::write(h.config_path(), config).unwrap();
    h
}

/// A `Misbehave` document with `spec` (a JSON object; JSON is YAML).
fn misbehave_doc(name: &str, spec: Value) -> String {
    format!("apiVersion: test.steward.dev/v1\nkind: Misbehave\nmetadata:\n  name: {name}\nspec: {spec}\n")
}

/// Several documents in one file.
fn docs(items: impl IntoIterator<Item = String>) -> String {
    items.into_iter().collect::<Vec<_>>().join("---\n")
}

/// The objects of `kind` as the API lists them.
async fn objects(h: &Host, kind: &str) -> Vec<Value> {
    h.api().get(&format!("/api/v1/resources?kind={kind}")).await.unwrap().as_array().cloned().unwrap_or_default()
}

/// Every history outcome of `v` that is not `Synced`.
fn failures(v: &Value) -> Vec<String> {
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["outcome"].as_str().unwrap().to_string())
        .filter(|o| o != "Synced")
        .collect()
}

/// (a) With two workers and forty objects whose plugin runs into its deadline on every call, a
/// well-behaved kind's objects written meanwhile still converge while the hostile kind's backlog
/// is still being served: a kind that only ever times out may not hold every worker. (How long
/// they take is a figure of the `fairness` benchmark.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_times_out_on_every_call_does_not_starve_other_kinds() {
    const LOOPS: usize = 40;
    const NOOPS: usize = 50;
    let _heavy = common::heavy().await;
    let mut h = host_with(
        "  mcpserver: { capabilities: [services] }\n  misbehave: { timeout: 500ms }\n",
        "queue: { workers: 2 }\n",
    );
    h.write(
        "loops.yaml",
        &docs((0..LOOPS).map(|i| misbehave_doc(&format!("loop-{i}"), serde_json::json!({"behavior": "loop"})))),
    );
    h.start().await;
    // The hostile kind is under way: its first calls ran into their deadline.
    h.wait_object("Misbehave/default/loop-0", T, "the first timeout", |v| v.is_some_and(|v| v["phase"] == "Error"))
        .await;
    // Time is counted in the hostile plugin's own unit: calls that ran into their deadline.
    let timeouts =
        async || h.metric("steward_plugin_errors_total", &["plugin=\"misbehave\"", "type=\"timeout\""]).await;
    let before = timeouts().await;
    h.write("noops.yaml", &docs((0..NOOPS).map(|i| noop(&format!("n{i}"), "v"))));
    let what = h.waiting_for(format!("{NOOPS} Noop objects Synced"));
    common::eventually(
        T,
        what,
        async || objects(&h, "Noop").await,
        |all| all.len() == NOOPS && all.iter().all(|v| synced(Some(v))),
    )
    .await;
    let meanwhile = timeouts().await - before;
    // When the Noop objects were written, the first two loop objects (one per worker) had had
    // their first call and the others were queued before the Noop objects: workers taken in FIFO
    // order would serve LOOPS - 2 more timeouts first (38 × 500 ms / 2 workers = 9.5 s). Fair
    // shares between kinds serve the Noop objects beside them (the `fairness` benchmark measures
    // a dozen timeouts, 3 s). The bound, 30 timeouts (7.5 s), leaves room for a loaded machine,
    // which slows the Noop calls but not the hostile deadline.
    assert!(
        meanwhile < (LOOPS * 3 / 4) as f64,
        "{NOOPS} Noop objects converged only after {meanwhile} more calls of the hostile kind timed out, of \
         the {LOOPS} it had queued before them (queue.workers: 2): the hostile kind held every worker"
    );
    let v = h.object("Misbehave/default/loop-0").await.unwrap();
    assert_ne!(v["phase"], "Synced", "the hostile kind was still failing meanwhile: {v:#}");
    assert!(v["lastError"].as_str().unwrap().contains("did not answer within its deadline of 500ms"), "{v:#}");
}

/// (b) A plugin that writes thousands of lines per call, over and over (through `log`, and as
/// events), reaches the host log only at its rate (bursts of 500, then 100 lines a second); each
/// line it writes is one host log line (embedded newlines cannot forge host log lines), and the
/// limit is reported once. The host keeps serving the other kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_floods_its_log_is_rate_limited() {
    let _heavy = common::heavy().await;
    // How long the host ran: the rate limit is a rate over that time.
    let started = std::time::Instant::now();
    let mut h = Host::new("");
    h.start().await;
    let flood = |behavior: &str| {
        let forge = "\nforged: INFO steward: plugin loaded plugin=\"evil\"";
        serde_json::json!({ "behavior": behavior, "lines": 1000, "requeueMs": 50, "suffix": forge })
    };
    h.write("flood.yaml", &docs((0..10).map(|i| misbehave_doc(&format!("flood-{i}"), flood("logFlood")))));
    h.write("events.yaml", &docs((0..5).map(|i| misbehave_doc(&format!("events-{i}"), flood("eventFlood")))));
    // Let it flood: hundreds of calls of a thousand lines each.
    let calls = async || h.metric("steward_reconcile_total", &["kind=\"Misbehave\"", "result=\"success\""]).await;
    common::eventually(T, h.waiting_for("300 calls of the flood"), calls, |n| *n >= 300.0).await;
    // Meanwhile the host serves other kinds.
    h.write("n.yaml", &noop("n", "still served"));
    h.wait_object("Noop/default/n", T, "Synced", synced).await;
    let elapsed = started.elapsed();
    let log = h.log();
    let plugin_lines = log.lines().filter(|l| l.contains("flood line") || l.contains("flood event")).count();
    let allowed = LINES_BURST as usize + (f64::from(LINES_PER_SEC) * elapsed.as_secs_f64()) as usize + 100;
    assert!(
        plugin_lines <= allowed,
        "{plugin_lines} lines of the plugin reached the host log in {elapsed:?} (allowed {allowed})"
    );
    assert!(plugin_lines >= 200, "the plugin's lines still reach the log, at its rate: {plugin_lines}");
    assert!(log.contains("flood line 0") && log.contains("flood event 0"), "both kinds of line reach the log");
    let forged: Vec<&str> = log.lines().filter(|l| l.starts_with("forged")).take(3).collect();
    assert!(forged.is_empty(), "a plugin forged host log lines: {forged:?}");
    let limit_lines: Vec<&str> = log.lines().filter(|l| l.contains("plugin log limit")).collect();
    assert_eq!(
        limit_lines.iter().filter(|l| l.contains("plugin log limit reached")).count(),
        1,
        "the limit is reported once:\n{}",
        limit_lines.join("\n")
    );
    // Then at most once per REPORT_EVERY (once in all, when the flood ran for less than that).
    let reports = 1 + (elapsed.as_secs_f64() / REPORT_EVERY.as_secs_f64()) as usize;
    assert!(
        limit_lines.len() <= reports,
        "and not again within {REPORT_EVERY:?} (the flood ran {elapsed:?}):\n{}",
        limit_lines.join("\n")
    );
    // Nothing else about the plugin grows with the flood (a line per call would). The event
    // journal tells each object's first phase once: a line per object, not per call.
    let (events, others): (Vec<&str>, Vec<&str>) = log
        .lines()
        .filter(|l| l.contains("misbehave") && !l.contains("flood line") && !l.contains("flood event"))
        .partition(|l| l.contains("steward::engine::journal"));
    assert!(events.len() <= 15, "{} event lines for 15 objects:\n{}", events.len(), events.join("\n"));
    assert!(others.len() <= 10, "{} other lines about the plugin:\n{}", others.len(), others.join("\n"));
}

/// (c) A plugin that calls `list` in a loop is stopped by its deadline: its object ends with a
/// timeout error, and the host keeps reconciling the other kinds meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_lists_in_a_loop_is_stopped_by_its_deadline() {
    let mut h = Host::new("queue: { workers: 2 }\n");
    h.write("noops.yaml", &docs((0..200).map(|i| noop(&format!("n{i}"), "v"))));
    h.write(
        "oks.yaml",
        &docs((0..50).map(|i| misbehave_doc(&format!("ok-{i}"), serde_json::json!({"behavior": "ok"})))),
    );
    h.write("lister.yaml", &misbehave_doc("lister", serde_json::json!({"behavior": "listLoop"})));
    h.start().await;
    let v = h
        .wait_object("Misbehave/default/lister", T, "a timeout", |v| v.is_some_and(|v| v["phase"] == "Error"))
        .await
        .unwrap();
    let err = v["lastError"].as_str().unwrap();
    assert!(err.contains("did not answer within its deadline of 2s"), "{err}");
    let first = &v["history"].as_array().unwrap()[0];
    assert_eq!(first["outcome"], "Error: timeout");
    // It ran until its deadline. (How soon after the deadline a call stops is a figure of the
    // `deadline` benchmark.)
    let ms = first["durationMs"].as_u64().unwrap();
    assert!(ms >= 1900, "stopped after {ms} ms, before its deadline of 2s");
    // Everything else converged, and new work is served while the lister keeps being retried.
    h.write(
        "later.yaml",
        &format!("{}---\n{}", noop("later", "x"), misbehave_doc("later", serde_json::json!({"behavior": "ok"}))),
    );
    h.wait_object("Noop/default/later", T, "Synced", synced).await;
    h.wait_object("Misbehave/default/later", T, "Synced", synced).await;
    let noops = objects(&h, "Noop").await;
    assert_eq!(noops.len(), 201);
    assert!(noops.iter().all(|v| synced(Some(v))));
    let oks = objects(&h, "Misbehave").await;
    assert!(oks.iter().filter(|v| v["name"] != "lister").all(|v| synced(Some(v))));
}

/// (d) A plugin that returns a desired service without the `services` grant is refused; the
/// object says which capability and which config key grant it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_returns_services_without_the_grant_is_refused() {
    let mut h = Host::new("");
    h.write("s.yaml", &misbehave_doc("wants-a-server", serde_json::json!({"behavior": "services"})));
    h.write("n.yaml", &noop("n", "v"));
    h.start().await;
    let v = h
        .wait_object("Misbehave/default/wants-a-server", T, "refused", |v| {
            v.is_some_and(|v| v["lastError"].is_string())
        })
        .await
        .unwrap();
    let err = v["lastError"].as_str().unwrap();
    assert!(err.contains("capability `services`"), "names the capability: {err}");
    assert!(err.contains("plugins.misbehave.capabilities"), "names the config key: {err}");
    assert_ne!(v["phase"], "Synced");
    assert!(v["status"].is_null(), "nothing of the refused answer is kept: {v:#}");
    assert!(v["history"][0]["outcome"].as_str().unwrap().ends_with("capability_denied"), "{v:#}");
    h.wait_object("Noop/default/n", T, "Synced", synced).await;
}

/// (e) Replacing a plugin's file (atomically, noop → noop-v2) while hundreds of its objects are
/// being reconciled, and their specs keep changing, fails no reconcile and loses no update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_replaced_while_its_objects_are_reconciled_loses_nothing() {
    const FILES: usize = 8;
    const PER_FILE: usize = 50;
    let _heavy = common::heavy().await;
    let mut h = Host::new("");
    let write_round = |h: &Host, value: &str| {
        for f in 0..FILES {
            h.write(&format!("f{f}.yaml"), &docs((0..PER_FILE).map(|i| noop(&format!("o{f}-{i}"), value))));
        }
    };
    write_round(&h, "r0");
    h.start().await;
    h.wait_get("/api/v1/overview", T, "all Synced", |o| {
        o["kinds"].as_array().is_some_and(|ks| {
            ks.iter().any(|k| k["kind"] == "Noop" && k["phases"]["Synced"].as_u64() == Some((FILES * PER_FILE) as u64))
        })
    })
    .await;
    let mut round = 0;
    let mut after_swap = 0;
    while after_swap < 2 {
        round += 1;
        let value = format!("r{round}");
        write_round(&h, &value);
        if round == 2 {
            // Round 1 is under way with 0.1.0; the replacement lands while round 2 is reconciled.
            common::install(&common::wasm("noop-v2"), &h.dir.path().join("plugins/noop.wasm"));
        }
        // Each round is under way (reconciles running) before the next one is written.
        h.wait_get("/api/v1/resources?kind=Noop", T, "the round under way", |all| {
            all.as_array().is_some_and(|a| a.iter().any(|v| v["status"]["value"] == value.as_str()))
        })
        .await;
        let plugins = h.api().get("/api/v1/plugins").await.unwrap();
        if plugins.to_string().contains("\"0.2.0\"") {
            after_swap += 1;
        }
        assert!(round < 50, "noop-v2 never replaced noop:\n{}", h.log());
    }
    let last = format!("r{round}");
    let all = h
        .wait_get("/api/v1/resources?kind=Noop", T, "every object Synced by 0.2.0 with its last spec", |all| {
            all.as_array().is_some_and(|a| {
                a.len() == FILES * PER_FILE
                    && a.iter().all(|v| {
                        synced(Some(v)) && v["status"]["value"] == last.as_str() && v["status"]["by"] == "0.2.0"
                    })
            })
        })
        .await;
    for v in all.as_array().unwrap() {
        assert_eq!(v["pluginVersion"], "0.2.0");
        assert!(failures(v).is_empty(), "{} failed on the way: {v:#}", v["name"]);
    }
    let metrics = h.wait_get_text("/metrics").await;
    assert_eq!(common::metric(&metrics, "steward_reconcile_errors_total", &["kind=\"Noop\""]), 0.0, "{metrics}");
    assert_eq!(common::metric(&metrics, "steward_plugin_errors_total", &["plugin=\"noop\""]), 0.0, "{metrics}");
    assert!(round >= 3, "the swap happened while rounds of updates were being reconciled");
}
