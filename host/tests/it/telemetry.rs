//! What the host tells about itself: its reconciles as OpenTelemetry traces sent to a real OTLP/HTTP
//! receiver (decoded with the OpenTelemetry protocol's own messages), and its log as JSON lines.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;
use serde_json::Value;

use crate::common::eventually;
use crate::common::host::{Host, misbehave, noop};

const T: Duration = Duration::from_secs(60);

/// A collector: every span of every `POST /v1/traces` it was sent, and the `service.name`s.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    /// Listens on a free loopback port; returns the base URL.
    async fn start(&self) -> String {
        let app = axum::Router::new().route("/v1/traces", post(export)).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

async fn export(State(r): State<Receiver>, body: Bytes) -> Vec<u8> {
    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP/protobuf trace export");
    for rs in req.resource_spans {
        let attrs = rs.resource.map(|r| r.attributes).unwrap_or_default();
        if let Some(name) = attrs.iter().find(|a| a.key == "service.name").and_then(|a| text(&a.value)) {
            r.services.lock().unwrap().push(name);
        }
        for ss in rs.scope_spans {
            r.spans.lock().unwrap().extend(ss.spans);
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> Option<String> {
    match v.as_ref()?.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        Any::DoubleValue(d) => Some(d.to_string()),
        Any::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The attribute `key` of `span`, as text.
fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| text(&a.value))
}

/// The attribute `key` of `span` when it is an integer (not text that looks like one).
fn int(span: &Span, key: &str) -> Option<i64> {
    match span.attributes.iter().find(|a| a.key == key)?.value.as_ref()?.value.as_ref()? {
        Any::IntValue(i) => Some(*i),
        _ => None,
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The reconcile spans of `Misbehave/default/{name}` that reached an outcome, oldest first.
fn reconciles(spans: &[Span], name: &str) -> Vec<Span> {
    let mut out: Vec<Span> = spans
        .iter()
        .filter(|s| s.name == "reconcile" && attr(s, "object").as_deref() == Some(name) && attr(s, "outcome").is_some())
        .cloned()
        .collect();
    out.sort_by_key(|s| s.start_time_unix_nano);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_retries_once_is_two_traces_with_the_plugin_call_inside_and_its_id_in_the_history() {
    let _heavy = crate::common::heavy().await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    // A retry only when the object it waits for appears: the backoff is longer than the test.
    let mut h = Host::new(&format!(
        "queue: {{ initial_backoff: 10m, max_backoff: 10m }}\ntelemetry: {{ endpoint: '{url}', service_name: steward-it }}\n"
    ));
    h.write("flaky.yaml", &misbehave("flaky", "retryUntil"));
    // Batches leave every 100 ms instead of every 5 s.
    h.start_with_env(&[("OTEL_BSP_SCHEDULE_DELAY", "100")]).await;
    h.wait_object("Misbehave/default/flaky", T, "an Error after one attempt", |v| {
        v.is_some_and(|v| v["phase"] == "Error" && v["retryCount"] == 1)
    })
    .await;
    h.write("target.yaml", &noop("target", "here"));
    let view = h
        .wait_object("Misbehave/default/flaky", T, "Synced", |v| v.is_some_and(|v| v["phase"] == "Synced"))
        .await
        .unwrap();

    // The first error, and the first success after it (the target's own status, once written,
    // runs flaky again: a later success may follow).
    let pair = |runs: &[Span]| {
        let failed = runs.iter().position(|s| attr(s, "outcome").as_deref() == Some("error"))?;
        let synced = runs[failed..].iter().position(|s| attr(s, "outcome").as_deref() == Some("success"))?;
        Some((runs[failed].clone(), runs[failed + synced].clone()))
    };
    let what = h.waiting_for("an error, then a success, among the reconcile spans of flaky");
    let spans = eventually(T, what, async || receiver.spans(), |s| pair(&reconciles(s, "flaky")).is_some()).await;
    let (failed, synced) = pair(&reconciles(&spans, "flaky")).unwrap();
    let (failed, synced) = (&failed, &synced);

    // The failed reconcile: the object, the plugin, the attempt, an error outcome and status.
    assert_eq!(attr(failed, "outcome").as_deref(), Some("error"), "{failed:#?}");
    assert_eq!(int(failed, "attempt"), Some(0), "attempt is a number: {failed:#?}");
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    let message = failed.status.as_ref().map(|s| s.message.as_str()).unwrap_or_default();
    assert!(message.contains("asked to retry"), "the status says why: {message}");
    // The retry: a trace of its own, a success at attempt 1, with the same object attributes.
    assert_eq!(attr(synced, "outcome").as_deref(), Some("success"), "{synced:#?}");
    assert_eq!(int(synced, "attempt"), Some(1));
    assert_eq!(attr(synced, "reason").as_deref(), Some("dependencyChanged"));
    assert_ne!(failed.trace_id, synced.trace_id);
    for key in ["kind", "namespace", "object", "plugin", "plugin.version"] {
        assert_eq!(attr(failed, key), attr(synced, key), "{key}");
    }
    assert_eq!(attr(synced, "kind").as_deref(), Some("Misbehave"));
    assert_eq!(attr(synced, "namespace").as_deref(), Some("default"));
    assert_eq!(attr(synced, "plugin").as_deref(), Some("misbehave"));

    // Each has its plugin call as a child, with the call's CPU time; the plugin's log line is
    // an event of that call.
    for run in [failed, synced] {
        let call = spans
            .iter()
            .find(|s| {
                s.name == "plugin_call"
                    && s.trace_id == run.trace_id
                    && s.parent_span_id == run.span_id
                    && attr(s, "op").as_deref() == Some("reconcile")
            })
            .unwrap_or_else(|| panic!("no plugin_call under {run:#?}"));
        assert_eq!(attr(call, "op").as_deref(), Some("reconcile"));
        assert_eq!(attr(call, "plugin").as_deref(), Some("misbehave"));
        let cpu: f64 = attr(call, "cpu_time_ms").and_then(|c| c.parse().ok()).expect("cpu_time_ms");
        assert!(cpu >= 0.0, "{cpu}");
        assert!(
            call.events.iter().any(|e| e
                .attributes
                .iter()
                .any(|a| a.key == "plugin" && text(&a.value).as_deref() == Some("misbehave"))),
            "the plugin's log line is an event of its call: {call:#?}"
        );
        // The store write is a child of the reconcile too.
        assert!(
            spans.iter().any(|s| s.name == "store_write" && s.parent_span_id == run.span_id),
            "no store_write under {run:#?}"
        );
    }
    let failed_call = spans
        .iter()
        .find(|s| {
            s.name == "plugin_call"
                && s.parent_span_id == failed.span_id
                && attr(s, "op").as_deref() == Some("reconcile")
        })
        .unwrap();
    assert_eq!(failed_call.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    assert!(receiver.services.lock().unwrap().iter().all(|s| s == "steward-it"));

    // The API's history links each entry to the trace of its reconcile: the failed one, then
    // the successes after it, which (alike in a row) share one entry naming the newest's trace.
    let history = view["history"].as_array().unwrap();
    let Some(f) = history.iter().position(|e| e["traceId"] == hex(&failed.trace_id)) else {
        panic!("the history does not name the failed reconcile's trace: {history:#?}")
    };
    assert_eq!(history[f]["outcome"], "Error: retry");
    let s = &history.get(f + 1).unwrap_or_else(|| panic!("no entry after the failure: {history:#?}"));
    assert_eq!(
        (&s["outcome"], &s["reason"]),
        (&serde_json::json!("Synced"), &serde_json::json!("dependencyChanged")),
        "{history:#?}"
    );
    let named = s["traceId"].as_str().unwrap_or_else(|| panic!("no trace named: {history:#?}")).to_string();
    let success_traces = |spans: &Vec<Span>| -> Vec<String> {
        reconciles(spans, "flaky")
            .iter()
            .filter(|r| attr(r, "outcome").as_deref() == Some("success"))
            .map(|r| hex(&r.trace_id))
            .collect()
    };
    let what = h.waiting_for(format!("a successful reconcile of flaky in trace {named}"));
    eventually(T, what, async || receiver.spans(), |spans| success_traces(spans).contains(&named)).await;
}

/// A tool call is in the trace of the reconcile of the run that asked for it; a service's first
/// start is in the trace of its object's reconcile, with its pid as a number, and a start that
/// fails is an error span saying why; a plugin's `describe` names the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_and_service_starts_are_in_the_trace_that_asked_for_them() {
    use crate::workflow_runs::{host_with_server, run_doc, wait_phase, workflow, workflow_ready};
    let _heavy = crate::common::heavy().await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let (h, _journal) = host_with_server(&format!("telemetry: {{ endpoint: '{url}' }}\n")).await;
    h.write(
        "gone.yaml",
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: gone\nspec:\n  type: stdio\n  command: /nonexistent/steward-telemetry/prog\n  autoStart: true\n",
    );
    h.write(
        "wf.yaml",
        &workflow("greet", "  steps:\n    - id: hello\n      tool: x_ex_echo\n      args: { message: hi }\n"),
    );
    workflow_ready(&h, "greet").await;
    h.write("run.yaml", &run_doc("r1", "greet", serde_json::json!({})));
    let run = wait_phase(&h, "r1", &["Failed", "Succeeded"]).await;
    assert_eq!(run["phase"], "Synced", "{run:#}");
    assert_eq!(run["status"]["phase"], "Succeeded", "{run:#}");

    let start_of = |spans: &[Span], service: &str| {
        spans
            .iter()
            .find(|s| s.name == "service_start" && attr(s, "owner").is_some_and(|o| o.ends_with(service)))
            .cloned()
    };
    let complete = |spans: &Vec<Span>| {
        spans.iter().any(|s| s.name == "tool_call")
            && start_of(spans, "/ex").is_some()
            && start_of(spans, "/gone").is_some()
    };
    let spans =
        eventually(T, h.waiting_for("a tool_call and both service_start spans"), async || receiver.spans(), complete)
            .await;

    // The tool call: a child of a reconcile of the run that asked for it.
    let call = spans.iter().find(|s| s.name == "tool_call").unwrap();
    assert_eq!(attr(call, "owner").as_deref(), Some("WorkflowRun/default/r1"), "{call:#?}");
    let parent = spans
        .iter()
        .find(|s| s.span_id == call.parent_span_id)
        .unwrap_or_else(|| panic!("the tool_call has no exported parent: {call:#?}"));
    assert_eq!((parent.name.as_str(), attr(parent, "object").as_deref()), ("reconcile", Some("r1")), "{parent:#?}");
    assert_eq!(parent.trace_id, call.trace_id);

    // The server's first start: in its reconcile's trace, its pid a number.
    let ex = start_of(&spans, "/ex").unwrap();
    assert!(int(&ex, "pid").is_some_and(|p| p > 0), "pid is a number: {ex:#?}");
    assert!(spans.iter().any(|s| s.span_id == ex.parent_span_id && s.name == "reconcile"), "{ex:#?}");
    assert_ne!(ex.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    // A start that failed: an error span that says why.
    let gone = start_of(&spans, "/gone").unwrap();
    assert_eq!(gone.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32), "{gone:#?}");
    let why = attr(&gone, "error").unwrap_or_else(|| panic!("no error on {gone:#?}"));
    assert!(why.contains("cannot start"), "{why}");
    assert!(int(&gone, "pid").is_none());

    // Every plugin call names its plugin, `describe` (before the plugin has said its name) too.
    let describes: Vec<&Span> =
        spans.iter().filter(|s| s.name == "plugin_call" && attr(s, "op").as_deref() == Some("describe")).collect();
    assert!(!describes.is_empty(), "no describe span");
    for d in describes {
        assert!(attr(d, "plugin").is_some_and(|p| !p.is_empty()), "describe without its plugin: {d:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_not_yet_sent_are_flushed_when_the_host_stops() {
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let mut h = Host::new("");
    h.write("a.yaml", &noop("a", "x"));
    // The collector comes from the standard variable, and batches would wait 10 minutes.
    h.start_with_env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &url), ("OTEL_BSP_SCHEDULE_DELAY", "600000")]).await;
    h.wait_object("Noop/default/a", T, "Synced", crate::common::host::synced).await;
    let status = h.terminate();
    assert!(status.success(), "{status}");
    let spans = receiver.spans();
    let run = spans
        .iter()
        .find(|s| s.name == "reconcile" && attr(s, "object").as_deref() == Some("a"))
        .unwrap_or_else(|| panic!("the reconcile of a was not flushed at shutdown: {spans:#?}"));
    assert_eq!(attr(run, "kind").as_deref(), Some("Noop"));
    assert_eq!(attr(run, "outcome").as_deref(), Some("success"));
    assert!(receiver.services.lock().unwrap().iter().all(|s| s == "steward"), "the default service.name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_with_the_reconcile_fields() {
    let mut h = Host::new("log: { format: json }\nqueue: { initial_backoff: 10m, max_backoff: 10m }\n");
    h.write("j.yaml", &misbehave("j", "retryUntil"));
    h.start().await;
    h.wait_object("Misbehave/default/j", T, "an Error", |v| v.is_some_and(|v| v["phase"] == "Error")).await;
    let status = h.terminate();
    assert!(status.success(), "{status}");
    let log = h.log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()), "{log}");
    // An event inside the plugin call inside the reconcile carries both spans' fields.
    let inside = lines
        .iter()
        .find(|l| l["plugin"] == "misbehave" && l["spans"].as_array().is_some_and(|s| s.len() >= 2))
        .unwrap_or_else(|| panic!("no plugin line inside its spans:\n{log}"));
    let spans = inside["spans"].as_array().unwrap();
    let reconcile = spans.iter().find(|s| s["name"] == "reconcile").unwrap_or_else(|| panic!("{inside}"));
    assert_eq!(reconcile["kind"], "Misbehave");
    assert_eq!(reconcile["namespace"], "default");
    assert_eq!(reconcile["object"], "j");
    assert_eq!(reconcile["plugin"], "misbehave");
    assert!(reconcile["reason"].is_string() && reconcile["attempt"] == 0, "{reconcile}");
    let call = spans.iter().find(|s| s["name"] == "plugin_call").unwrap_or_else(|| panic!("{inside}"));
    assert_eq!(call["op"], "reconcile");
    // The retry the engine schedules is logged in the reconcile span too, with its outcome.
    assert!(
        lines
            .iter()
            .any(|l| l["span"]["name"] == "reconcile" && l["span"]["object"] == "j" && l["span"]["outcome"] == "error"),
        "{log}"
    );
}

/// Python's `json`, refusing duplicate keys and non-standard numbers (`NaN`) as strict log
/// pipelines do: `ok N` for N lines, each an object, else the first bad line and why.
const STRICT_JSON: &str = r#"
import json, sys
def unique(pairs):
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError("duplicate keys %s" % dup)
    return dict(pairs)
def refuse(name):
    raise ValueError("not JSON: %s" % name)
n = 0
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        v = json.loads(line, object_pairs_hook=unique, parse_constant=refuse)
        if not isinstance(v, dict):
            raise ValueError("not an object")
    except ValueError as e:
        print("line %d: %s: %s" % (n + 1, e, line.strip()))
        sys.exit(1)
    n += 1
print("ok %d" % n)
"#;

/// Every line of a whole run's JSON log (plugins loaded, a reconcile that fails, a service that
/// cannot start, the stop), and the fatal error of a run that cannot start, read by an
/// independent strict parser: one object a line, unique keys; lists are arrays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_of_a_json_log_is_strict_json_with_typed_values() {
    let mut h = Host::new("log: { format: json }\nqueue: { initial_backoff: 10m, max_backoff: 10m }\n");
    h.write("j.yaml", &misbehave("j", "retryUntil"));
    h.write(
        "gone.yaml",
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: gone\nspec:\n  type: stdio\n  command: /nonexistent/steward-json/prog\n  autoStart: true\n",
    );
    h.start().await;
    h.wait_object("Misbehave/default/j", T, "an Error", |v| v.is_some_and(|v| v["phase"] == "Error")).await;
    h.wait_object("MCPServer/default/gone", T, "Failed", |v| v.is_some_and(|v| v["status"]["state"] == "Failed")).await;
    let status = h.terminate();
    assert!(status.success(), "{status}");
    // The next run cannot listen: its port is taken.
    let _taken = std::net::TcpListener::bind(("127.0.0.1", h.port)).unwrap();
    let failed = crate::common::steward()
        .args(["run", "--config"])
        .arg(h.config_path())
        .env("STEWARD_LOG", "info")
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let log = h.log() + &String::from_utf8_lossy(&failed.stderr);

    let mut python = std::process::Command::new(crate::common::py_tools())
        .args(["-c", STRICT_JSON])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut python.stdin.take().unwrap(), log.as_bytes()).unwrap();
    let verdict = python.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&verdict.stdout);
    assert!(verdict.status.success() && said.starts_with("ok "), "{said}");

    let lines: Vec<Value> =
        log.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    let loaded =
        lines.iter().find(|l| l["message"] == "plugin loaded" && l["plugin"] == "misbehave").expect("plugin loaded");
    assert_eq!(loaded["kinds"], serde_json::json!(["Misbehave"]), "a list is an array: {loaded}");
    let changed = lines
        .iter()
        .find(|l| l["message"] == "service phase changed" && l["to"] == "Failed")
        .unwrap_or_else(|| panic!("no phase change to Failed:\n{log}"));
    assert!(changed["detail"].as_str().is_some_and(|d| d.contains("cannot start")), "{changed}");
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR", "the fatal error is the last line: {last}");
    assert!(last["message"].as_str().is_some_and(|m| m.contains("in use")), "{last}");
}

/// Spans as a subscriber sees them: name, parent's name, fields, and the fields of each event
/// written inside. Installed for one test's thread only (the process's subscriber is untouched).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<std::collections::HashMap<u64, Seen>>>);

#[derive(Clone, Debug, Default)]
struct Seen {
    name: String,
    parent: Option<String>,
    fields: std::collections::BTreeMap<String, String>,
    events: Vec<std::collections::BTreeMap<String, String>>,
}

struct Fields<'a>(&'a mut std::collections::BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut seen = Seen { name: attrs.metadata().name().to_string(), ..Seen::default() };
        seen.parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name().to_string());
        attrs.record(&mut Fields(&mut seen.fields));
        self.0.lock().unwrap().insert(id.into_u64(), seen);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(seen) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else { return };
        let mut fields = std::collections::BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        if let Some(seen) = self.0.lock().unwrap().get_mut(&span.id().into_u64()) {
            seen.events.push(fields);
        }
    }
}

// One thread: every task of the engine runs where the test's subscriber is set. Fake API server
// only: it injects the conflicts.
#[tokio::test(flavor = "current_thread")]
async fn a_conflicting_status_write_is_one_span_with_an_event_per_retry_inside_its_reconcile() {
    use tracing_subscriber::prelude::*;
    let capture = Capture::default();
    let filter = tracing_subscriber::filter::Targets::new().with_target("steward", tracing::Level::DEBUG);
    // Tracing caches a line's interest process-wide, asking only the registering thread while one
    // dispatcher is registered: a second that lives as long as the process keeps a sibling test's
    // thread (no subscriber) from caching "never" for a line this test counts.
    static ANCHOR: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    ANCHOR.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    let _subscriber = tracing_subscriber::registry().with(capture.clone().with_filter(filter)).set_default();
    let extra = "kubernetes: { statusRetries: 3, leaderElection: { enabled: false } }\n";
    let cluster = crate::common::kube::Cluster::start(&["noop"], extra).await;
    // The first write meets a conflict on each of its 3 attempts; the next one is written.
    let storm = cluster.server.inject(
        steward_fake_apiserver::Fault::conflict().method("PUT").resource("noops").subresource("status").times(3),
    );
    let api = cluster.noops();
    api.create(&kube::api::PostParams::default(), &crate::common::kube::noop_obj("s", "v")).await.unwrap();
    crate::common::kube::wait_obj(&api, "s", "Synced", |o| {
        crate::common::kube::status(o)["steward"]["phase"] == "Synced"
    })
    .await
    .unwrap();
    assert_eq!(storm.used(), 3);
    cluster.engine.shutdown(Duration::from_secs(5)).await;

    let seen: Vec<Seen> = capture.0.lock().unwrap().values().cloned().collect();
    let writes: Vec<&Seen> = seen.iter().filter(|s| s.name == "status_write").collect();
    assert!(writes.iter().all(|w| w.parent.as_deref() == Some("reconcile")), "{writes:#?}");
    let failed = writes
        .iter()
        .find(|w| w.fields.get("category").map(String::as_str) == Some("conflict"))
        .unwrap_or_else(|| panic!("no status write failed with a conflict: {writes:#?}"));
    assert_eq!(failed.fields.get("attempts").map(String::as_str), Some("3"), "{failed:#?}");
    // A retried conflict is an event of the write; the last attempt's is the failure itself.
    let retried: Vec<_> = failed.events.iter().filter(|e| e.contains_key("attempt")).collect();
    assert_eq!(retried.len(), 2, "{failed:#?}");
    assert!(
        writes.iter().any(|w| w.fields.get("written").map(String::as_str) == Some("true")),
        "the status is written in the end: {writes:#?}"
    );
}
