//! The HTTP API and the CLI client commands against a running host.

use std::time::Duration;

use steward::client::Client;

use crate::common::host::{Host, misbehave, noop, synced};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_metrics_and_overview() {
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "x"));
    h.write("m.yaml", &misbehave("m", "fatal"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    h.wait_object("Misbehave/default/m", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed")).await;
    let raw = Client::new(&format!("http://127.0.0.1:{}", h.port), None);
    assert!(raw.get("/healthz").await.is_err(), "healthz is plain text, not JSON");
    let metrics = h.wait_get_text("/metrics").await;
    assert!(metrics.contains("steward_reconcile_total{kind=\"Noop\",result=\"success\"}"), "{metrics}");
    assert!(metrics.contains("steward_reconcile_total{kind=\"Misbehave\",result=\"failed\"} 1"), "{metrics}");
    assert!(metrics.contains("steward_plugin_errors_total{plugin=\"misbehave\",type=\"fatal\"} 1"), "{metrics}");
    assert!(metrics.contains("steward_objects{kind=\"Noop\",phase=\"Synced\"} 1"), "{metrics}");
    assert!(metrics.contains("steward_workqueue_queue_duration_seconds_bucket"), "{metrics}");
    assert!(
        metrics.contains("steward_plugin_call_duration_seconds_count{plugin=\"noop\",op=\"reconcile\"}"),
        "{metrics}"
    );
    let cpu: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("steward_plugin_call_cpu_seconds_total{plugin=\"noop\",op=\"reconcile\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no CPU account of noop's reconciles:\n{metrics}"));
    assert!(cpu > 0.0 && cpu < 5.0, "{cpu}");
    let o = h.api().get("/api/v1/overview").await.unwrap();
    assert_eq!(o["mode"], "filesystem");
    assert_eq!(o["ready"], true);
    let noop_kind = o["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == "Noop").unwrap().clone();
    assert_eq!(noop_kind["plugin"], "noop");
    assert_eq!(noop_kind["phases"]["Synced"], 1);
    let plugins = h.api().get("/api/v1/plugins").await.unwrap();
    assert_eq!(plugins.as_array().unwrap().len(), 4);
    let only = h.api().get("/api/v1/resources?kind=Misbehave").await.unwrap();
    assert_eq!(only.as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_with_a_message() {
    let mut h = Host::new("");
    h.start().await;
    for (path, code) in [
        ("/api/v1/resources/Noop/default/missing", "404"),
        ("/api/v1/resources/Noop/default/..", "400"),
        ("/api/v1/resources/No_op/default/a", "400"),
        ("/api/v1/nothing", "404"),
    ] {
        let err = h.api().get(path).await.unwrap_err().to_string();
        assert!(err.starts_with(code), "{path}: {err}");
    }
    let err = h.api().post("/api/v1/kinds/Noop/explode").await.unwrap_err().to_string();
    assert!(err.starts_with("404") && err.contains("enable or disable"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_listener_needs_the_bearer_token() {
    let mut h =
        Host::with_files("api: { listen: 0.0.0.0:{port}, token_file: token }\n", &[("token", "s3cret-token\n")]);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let anon = Client::new(&format!("http://127.0.0.1:{}", h.port), None);
    let wrong = Client::new(&format!("http://127.0.0.1:{}", h.port), Some("nope".into()));
    for path in ["/api/v1/overview", "/api/v1/resources", "/api/v1/plugins"] {
        for c in [&anon, &wrong] {
            let err = c.get(path).await.unwrap_err().to_string();
            assert!(err.starts_with("401"), "{path}: {err}");
        }
    }
    for path in ["/api/v1/resources/Noop/default/a/reconcile", "/api/v1/kinds/Noop/disable"] {
        let err = anon.post(path).await.unwrap_err().to_string();
        assert!(err.starts_with("401"), "{path}: {err}");
    }
    assert!(h.api().get("/api/v1/overview").await.is_ok(), "the right token works");
    assert!(h.wait_get_text("/metrics").await.contains("steward_"), "metrics stay open");
    // The CLI reads the token file named in the config.
    let (code, out, err) = h.cli(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Noop"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_status_trigger_plugins_and_kinds() {
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "hello"));
    h.write("m.yaml", &misbehave("m", "fatal"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    h.wait_object("Misbehave/default/m", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed")).await;

    let (code, out, err) = h.cli(&["status"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAMESPACE") && lines[0].contains("PHASE"), "{out}");
    let a = lines.iter().find(|l| l.contains("Noop")).unwrap();
    assert!(a.contains("Synced") && a.contains("True"), "{a}");
    let m = lines.iter().find(|l| l.contains("Misbehave")).unwrap();
    assert!(m.contains("Failed") && m.contains("never work"), "{m}");

    let (code, out, _) = h.cli(&["status", "Noop", "-o", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    let (code, out, _) = h.cli(&["status", "Noop/default/a"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["value"], "hello");

    let (code, out, err) = h.cli(&["trigger", "Misbehave/default/m"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queued Misbehave/default/m"), "{out}");
    h.wait_object("Misbehave/default/m", T, "the triggered run", |v| {
        v.is_some_and(|v| v["history"].as_array().unwrap().len() == 2)
    })
    .await;
    let (code, _, err) = h.cli(&["trigger", "Misbehave/default/ghost"]);
    assert_eq!(code, 1);
    assert!(err.contains("404") && err.contains("no object Misbehave/default/ghost"), "{err}");
    let (code, _, err) = h.cli(&["trigger", "not-a-key"]);
    assert_eq!(code, 1);
    assert!(err.contains("is not KIND/NAMESPACE/NAME"), "{err}");

    let (code, out, _) = h.cli(&["plugins"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.contains("mcpserver") && l.contains("Ready")), "{out}");

    let (code, out, err) = h.cli(&["kinds", "disable", "Noop"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Noop disabled"), "{out}");
    let v = h.api().get("/api/v1/resources/Noop/default/a").await.unwrap();
    assert_eq!(v["disabled"], true);
    let (code, _, _) = h.cli(&["kinds", "enable", "Noop"]);
    assert_eq!(code, 0);
}

/// What Prometheus' own Python parser (`fmt`: `classic` or `openmetrics`) reads from `text`:
/// each metric family's name with its type and the names of its samples.
fn prometheus_parse(fmt: &str, text: &str) -> serde_json::Value {
    use std::io::Write;
    const SCRIPT: &str = "import sys, json\n\
from prometheus_client.parser import text_string_to_metric_families as classic\n\
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om\n\
parse = om if sys.argv[1] == 'openmetrics' else classic\n\
print(json.dumps({f.name: {'type': f.type, 'samples': sorted({s.name for s in f.samples})} for f in parse(sys.stdin.read())}))\n";
    let mut child = std::process::Command::new(crate::common::py_tools())
        .args(["-c", SCRIPT, fmt])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {fmt} parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `/metrics` negotiates as Prometheus does: the classic text format 0.0.4 unless the scraper
/// prefers OpenMetrics; each answer reads back through Prometheus' own parser of its format with
/// every family typed (a counter's samples in the counter's family, none left untyped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_come_in_the_format_the_scraper_asks_for_and_prometheus_parsers_read_them() {
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    // What Prometheus 2.x and 3.x send by default; curl sends `*/*`, and some scrapers nothing.
    let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    for (accept, fmt) in [
        (None, "classic"),
        (Some("*/*"), "classic"),
        (Some("text/plain;version=0.0.4"), "classic"),
        (Some(prometheus), "openmetrics"),
    ] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let r = h.http("GET", "/metrics", &headers, b"");
        assert_eq!(r.status, 200, "{r:?}");
        let content_type = r
            .headers
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_string))
            .unwrap_or_default();
        let want =
            if fmt == "classic" { "text/plain; version=0.0.4" } else { "application/openmetrics-text; version=1.0.0" };
        assert!(content_type.starts_with(want), "Accept {accept:?}: {content_type}");
        assert_eq!(r.body.contains("# EOF"), fmt == "openmetrics", "Accept {accept:?}");
        let families = prometheus_parse(fmt, &r.body);
        let reconcile = &families["steward_reconcile"];
        assert_eq!(reconcile["type"], "counter", "{fmt}: {families:#}");
        assert!(
            reconcile["samples"].as_array().unwrap().iter().any(|s| s == "steward_reconcile_total"),
            "{fmt}: {reconcile:#}"
        );
        assert_eq!(families["steward_reconcile_time_seconds"]["type"], "histogram", "{fmt}");
        assert_eq!(families["steward_workqueue_depth"]["type"], "gauge", "{fmt}");
        let untyped: Vec<_> = families
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, f)| f["type"] != "counter" && f["type"] != "gauge" && f["type"] != "histogram")
            .map(|(name, _)| name.clone())
            .collect();
        assert!(untyped.is_empty(), "{fmt}: families left untyped: {untyped:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_command_without_a_host_says_how_to_fix_it() {
    let h = Host::new("");
    let (code, _, err) = h.cli(&["status"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the Steward API") && err.contains("steward run"), "{err}");
}

#[test]
fn check_reports_file_line_column_problems_and_invalid_specs() {
    let h = Host::new("");
    h.write("good.yaml", &noop("a", "x"));
    h.write("invalid.yaml", &misbehave("m", "fly"));
    h.write("broken.yaml", "apiVersion: v1\nkind: Noop\nmetadata: [\n");
    h.write("unknown.yaml", "apiVersion: x/v1\nkind: Unknown\nmetadata:\n  name: u\n");
    std::os::unix::fs::symlink("moved-away.yaml", h.resources().join("dangling.yaml")).unwrap();
    let (code, out, _) = h.cli(&["check"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("dangling.yaml: a symbolic link to `moved-away.yaml`, which does not exist"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("broken.yaml:3:")), "{out}");
    assert!(out.contains("invalid.yaml:1:1: Misbehave/default/m: spec.behavior:"), "{out}");
    assert!(out.contains("unknown.yaml:1:1: Unknown/default/u: no plugin serves kind Unknown"), "{out}");
    assert!(!out.contains("good.yaml"), "{out}");
    h.remove("invalid.yaml");
    h.remove("broken.yaml");
    h.remove("unknown.yaml");
    h.remove("dangling.yaml");
    let (code, out, _) = h.cli(&["check"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no problems"), "{out}");
}

#[test]
fn check_warns_of_settings_for_a_plugin_that_is_not_there_naming_the_plugins_found() {
    let h = Host::new("  mcpservr: { capabilities: [services] }\n");
    h.write("good.yaml", &noop("a", "x"));
    let (code, out, _) = h.cli(&["check"]);
    assert_eq!(code, 0, "a warning does not fail the check: {out}");
    let line = out.lines().find(|l| l.contains("plugins.mcpservr")).unwrap_or_else(|| panic!("no warning: {out}"));
    assert!(line.contains("warning: plugins.mcpservr: no plugin is named `mcpservr`"), "{line}");
    assert!(line.contains("plugins found: ") && line.contains("mcpserver") && line.contains("noop"), "{line}");
    assert!(out.contains("1 warning(s)"), "{out}");
    let (code, _, _) = h.cli(&["check", "--strict"]);
    assert_eq!(code, 1, "--strict fails on the warning");
}

#[test]
fn kubernetes_mode_without_a_cluster_config_says_where_it_looked() {
    let h = Host::new("mode: kubernetes\n");
    let home = tempfile::tempdir().unwrap();
    let out = crate::common::steward()
        .args(["run", "--config"])
        .arg(h.config_path())
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("missing-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mode: kubernetes") && err.contains("cannot load a Kubernetes config"), "{err}");
    assert!(err.contains("KUBECONFIG"), "{err}");
}
