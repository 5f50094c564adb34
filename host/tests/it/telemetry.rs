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
    assert_eq!(attr(failed, "attempt").as_deref(), Some("0"));
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    let message = failed.status.as_ref().map(|s| s.message.as_str()).unwrap_or_default();
    assert!(message.contains("asked to retry"), "the status says why: {message}");
    // The retry: a trace of its own, a success at attempt 1, with the same object attributes.
    assert_eq!(attr(synced, "outcome").as_deref(), Some("success"), "{synced:#?}");
    assert_eq!(attr(synced, "attempt").as_deref(), Some("1"));
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

    // The API's history links each reconcile to its trace.
    let history = view["history"].as_array().unwrap();
    let at = |trace: &[u8]| history.iter().position(|e| e["traceId"] == hex(trace));
    let (Some(f), Some(s)) = (at(&failed.trace_id), at(&synced.trace_id)) else {
        panic!("the history does not name both traces: {history:#?}")
    };
    assert!(f < s, "{history:#?}");
    assert_eq!(history[f]["outcome"], "Error: retry");
    assert_eq!(history[s]["outcome"], "Synced");
    assert_eq!(history[s]["reason"], "dependencyChanged");
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
