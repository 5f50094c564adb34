//! Prometheus metrics, named in the style of controller-runtime, rendered as text for `/metrics`.

pub mod classic;
pub mod http;

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::Name;

// The labels made on every reconcile hold the kind as the object's key does (a shared
// [`Name`], not a copy) and fixed words as `&'static str`: a label is made, hashed and dropped
// for each update, and a copy of each text was an allocation and a free.

/// Labels of per-kind reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResult {
    /// The kind.
    pub kind: Name,
    /// `success`, `error` (will retry) or `failed` (gave up).
    pub result: &'static str,
}

/// A kind label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The kind.
    pub kind: Name,
}

/// Labels of plugin call metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginOp {
    /// Plugin name.
    pub plugin: Name,
    /// `reconcile`, `finalize`, `warnings` or `reconcile-world`.
    pub op: &'static str,
}

/// Labels of plugin errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginErrorLabel {
    /// Plugin name.
    pub plugin: Name,
    /// The error type: `retry`, `fatal`, `invalid`, `trap`, `timeout`, `memory`, ….
    pub r#type: &'static str,
}

/// A [`Name`] is a label value as its text.
impl prometheus_client::encoding::EncodeLabelValue for Name {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
        prometheus_client::encoding::EncodeLabelValue::encode(&&**self, encoder)
    }
}

/// Labels of world rounds: the plugin and `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorldRoundLabel {
    /// Plugin name.
    pub plugin: String,
    /// `ok`, or `error` (the round failed as a whole).
    pub result: String,
}

/// The plugin of a world.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorldLabel {
    /// Plugin name.
    pub plugin: String,
}

/// Objects by kind and phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindPhase {
    /// The kind.
    pub kind: String,
    /// The phase.
    pub phase: String,
}

/// Labels of failed Kubernetes writes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeWriteLabel {
    /// The kind of the object written.
    pub kind: String,
    /// `status`, `finalizer` or `event`.
    pub op: String,
    /// Why: `conflict`, `crd_not_found`, `unreachable`, `timeout`, `forbidden`, `unauthorized`, `throttled`, `invalid`, `server`, `other`.
    pub category: String,
}

/// Labels of Kubernetes writes by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeOpLabel {
    /// The kind of the object written.
    pub kind: String,
    /// `status`, `finalizer` or `event`.
    pub op: String,
}

/// Labels of `steward_host_condition`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostConditionLabel {
    /// The condition type, for example `StoreWritable`.
    pub r#type: String,
    /// What it concerns (a plugin, …), empty for the host as a whole.
    pub subject: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// Labels of the plugin-source metrics counted by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginSourceResult {
    /// The source's reference, as configured (`oci://…`).
    pub source: String,
    /// The outcome (see each metric).
    pub result: String,
}

/// Labels of `steward_plugin_source_refusals_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginSourceReason {
    /// The source's reference, as configured (`oci://…`).
    pub source: String,
    /// Why the artifact was refused: `unsigned`, `bad_signature`, `layout`, `digest_mismatch`,
    /// `does_not_load` or `conflict`.
    pub reason: String,
}

/// A plugin source label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginSourceLabel {
    /// The source's reference, as configured (`oci://…`).
    pub source: String,
}

/// Labels of per-service metrics: the owner of the service and the service's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabel {
    /// The kind of the owner (`MCPServer`).
    pub kind: String,
    /// The owner's namespace (empty for a cluster-scoped owner).
    pub namespace: String,
    /// The owner's name.
    pub name: String,
    /// The service's name, as the owner's plugin gives it.
    pub service: String,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.5, 16)
}

/// Every metric the host exports.
pub struct Metrics {
    registry: Registry,
    /// `steward_reconcile_total{kind,result}`.
    pub reconcile_total: Family<KindResult, Counter>,
    /// `steward_reconcile_errors_total{kind}`.
    pub reconcile_errors: Family<KindLabel, Counter>,
    /// `steward_reconcile_time_seconds{kind}`.
    pub reconcile_time: Family<KindLabel, Histogram>,
    /// `steward_finalizations_total{kind}`: objects finalized and forgotten, once each; counted
    /// when the store no longer holds the object (a finalize that fails, or whose object cannot
    /// be forgotten, is not counted: it runs again).
    pub finalizations: Family<KindLabel, Counter>,
    /// `steward_workqueue_depth`.
    pub queue_depth: Gauge,
    /// `steward_workqueue_adds_total`.
    pub queue_adds: Counter,
    /// `steward_workqueue_retries_total`.
    pub queue_retries: Counter,
    /// `steward_workqueue_queue_duration_seconds`.
    pub queue_latency: Histogram,
    /// `steward_plugin_call_duration_seconds{plugin,op}`.
    pub plugin_call: Family<PluginOp, Histogram>,
    /// `steward_plugin_call_cpu_seconds_total{plugin,op}`: CPU time spent in plugin calls (instance
    /// set-up included; a poll under 50 µs counts at its wall time).
    pub plugin_call_cpu: Family<PluginOp, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// `steward_plugin_errors_total{plugin,type}`.
    pub plugin_errors: Family<PluginErrorLabel, Counter>,
    /// `steward_objects{kind,phase}`, set at each scrape.
    pub objects: Family<KindPhase, Gauge<i64, AtomicI64>>,
    /// `steward_kube_writes_total{kind,op}`: writes the cluster accepted.
    pub kube_writes: Family<KubeOpLabel, Counter>,
    /// `steward_kube_write_errors_total{kind,op,category}`: writes that failed, after their retries.
    pub kube_write_errors: Family<KubeWriteLabel, Counter>,
    /// `steward_kube_write_conflicts_total{kind,op}`: 409 Conflicts met (each was retried).
    pub kube_write_conflicts: Family<KubeOpLabel, Counter>,
    /// `steward_kube_status_writes_skipped_total{kind}`: status writes skipped because nothing changed.
    pub kube_status_skipped: Family<KindLabel, Counter>,
    /// `steward_leader`: 1 while this replica holds the lease (or election is off), else 0.
    pub leader: Gauge,
    /// `steward_store_commits_total`: write transactions the state store committed, brought up
    /// to the store's own count at each scrape (see [`Metrics::set_store`]).
    pub store_commits: Counter,
    /// `steward_store_writes_total`: record and setting writes those commits carried; over
    /// `steward_store_commits_total`, how many writes one commit groups.
    pub store_writes: Counter,
    /// `steward_tool_calls_total{kind,result}`: tool calls that ended (capability `tools`), by
    /// the kind of the object that asked and `succeeded`, `failed` or `cancelled`.
    pub tool_calls: Family<KindResult, Counter>,
    /// `steward_tool_call_attempts_total{kind}`: attempts made at a server (retries included).
    pub tool_call_attempts: Family<KindLabel, Counter>,
    /// `steward_tool_calls_in_flight`: attempts under way now.
    pub tool_calls_in_flight: Gauge,
    /// `steward_world_rounds_total{plugin,result}`: world rounds run, `ok` or `error`.
    pub world_rounds: Family<WorldRoundLabel, Counter>,
    /// `steward_world_objects{plugin}`: objects (namespace nodes included) in the world's last round.
    pub world_objects: Family<WorldLabel, Gauge>,
    /// `steward_host_condition{type,subject,status}`: 1 for each condition's current status, 0
    /// for its other two, set at each scrape (see [`Metrics::set_host_conditions`]).
    pub host_condition: Family<HostConditionLabel, Gauge>,
    /// `steward_webhook_admissions_total{kind,result}`: AdmissionReviews answered, by the kind
    /// reviewed (empty for one the host does not serve) and `allowed`, `warned` (allowed with
    /// warnings) or `denied`.
    pub webhook_admissions: Family<KindResult, Counter>,
    /// `steward_webhook_admission_duration_seconds{kind}`: time to answer an AdmissionReview.
    pub webhook_admission_time: Family<KindLabel, Histogram>,
    /// The HTTP servers' metrics, rendered with these (see [`Metrics::use_http`]).
    http: http::Slot,
    /// `steward_plugin_source_fetches_total{source,result}`: tries to get the artifact a plugin
    /// source names, when it is not the one running: `loaded` (pulled, verified, runs now),
    /// `refused` (pulled and refused: see the refusals), `failed` (the registry could not be
    /// read, refused access, or has no such tag).
    pub plugin_source_fetches: Family<PluginSourceResult, Counter>,
    /// `steward_plugin_source_refusals_total{source,reason}`: artifacts refused, by reason.
    pub plugin_source_refusals: Family<PluginSourceReason, Counter>,
    /// `steward_plugin_source_cache_total{source,result}`: looks at the on-disk cache of
    /// pulled plugins when the registry did not give one at start: `hit` (the cached plugin
    /// runs) or `miss` (none usable was cached).
    pub plugin_source_cache: Family<PluginSourceResult, Counter>,
    /// `steward_plugin_source_digest_changes_total{source}`: times the artifact running for a
    /// source was replaced by another manifest digest (a moved tag), whether or not its
    /// component changed.
    pub plugin_source_digest_changes: Family<PluginSourceLabel, Counter>,
    /// `steward_service_restarts_total{kind,namespace,name,service}`: restarts of owned services
    /// (a stdio process started again, a remote service connected again after it was lost),
    /// counted as each service's `restarts` rises.
    pub service_restarts: Family<ServiceLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The registry, for a capability unit to add its own families to before the host serves
    /// them ([`crate::capabilities::register_metrics`]).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Creates and registers every metric under the `steward_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("steward");
        let reconcile_total = Family::<KindResult, Counter>::default();
        registry.register("reconcile", "Reconciles by kind and result", reconcile_total.clone());
        let reconcile_errors = Family::<KindLabel, Counter>::default();
        registry.register("reconcile_errors", "Failed reconciles by kind", reconcile_errors.clone());
        let reconcile_time = Family::<KindLabel, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register(
            "reconcile_time_seconds",
            "Duration of a reconcile, plugin call included",
            reconcile_time.clone(),
        );
        let finalizations = Family::<KindLabel, Counter>::default();
        registry.register("finalizations", "Objects finalized and forgotten, by kind", finalizations.clone());
        let queue_depth = Gauge::default();
        registry.register("workqueue_depth", "Keys ready and waiting for a worker", queue_depth.clone());
        let queue_adds = Counter::default();
        registry.register("workqueue_adds", "Keys added to the work queue", queue_adds.clone());
        let queue_retries = Counter::default();
        registry.register("workqueue_retries", "Retries scheduled with backoff", queue_retries.clone());
        let queue_latency = Histogram::new(seconds_buckets());
        registry.register(
            "workqueue_queue_duration_seconds",
            "Time a key waited in the queue before a worker took it",
            queue_latency.clone(),
        );
        let plugin_call = Family::<PluginOp, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register("plugin_call_duration_seconds", "Duration of one plugin call", plugin_call.clone());
        let plugin_call_cpu = Family::<PluginOp, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register("plugin_call_cpu_seconds", "CPU time spent in plugin calls", plugin_call_cpu.clone());
        let plugin_errors = Family::<PluginErrorLabel, Counter>::default();
        registry.register("plugin_errors", "Plugin calls that failed, by error type", plugin_errors.clone());
        let objects = Family::<KindPhase, Gauge<i64, AtomicI64>>::default();
        registry.register("objects", "Known objects by kind and phase", objects.clone());
        let kube_writes = Family::<KubeOpLabel, Counter>::default();
        registry.register("kube_writes", "Writes to the Kubernetes API that succeeded", kube_writes.clone());
        let kube_write_errors = Family::<KubeWriteLabel, Counter>::default();
        registry.register(
            "kube_write_errors",
            "Writes to the Kubernetes API that failed after retries, by category",
            kube_write_errors.clone(),
        );
        let kube_write_conflicts = Family::<KubeOpLabel, Counter>::default();
        registry.register("kube_write_conflicts", "409 Conflicts met and retried", kube_write_conflicts.clone());
        let kube_status_skipped = Family::<KindLabel, Counter>::default();
        registry.register(
            "kube_status_writes_skipped",
            "Status writes skipped because the status would not change",
            kube_status_skipped.clone(),
        );
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica reconciles (holds the lease)", leader.clone());
        let store_commits = Counter::default();
        registry.register("store_commits", "Write transactions the state store committed", store_commits.clone());
        let store_writes = Counter::default();
        registry.register("store_writes", "Writes the state store's commits carried", store_writes.clone());
        let tool_calls = Family::<KindResult, Counter>::default();
        registry.register("tool_calls", "Tool calls that ended, by the asking kind and result", tool_calls.clone());
        let tool_call_attempts = Family::<KindLabel, Counter>::default();
        registry.register(
            "tool_call_attempts",
            "Attempts routed for tool calls (retries, and looks for a tool not offered yet, included)",
            tool_call_attempts.clone(),
        );
        let tool_calls_in_flight = Gauge::default();
        registry.register("tool_calls_in_flight", "Tool call attempts under way", tool_calls_in_flight.clone());
        let world_rounds = Family::<WorldRoundLabel, Counter>::default();
        registry.register("world_rounds", "World rounds run, by plugin and result (ok, error)", world_rounds.clone());
        let world_objects = Family::<WorldLabel, Gauge>::default();
        registry.register("world_objects", "Objects in the last round of each world", world_objects.clone());
        let host_condition = Family::<HostConditionLabel, Gauge>::default();
        registry.register(
            "host_condition",
            "The host's own conditions: 1 for the current status of each type (and subject), 0 for the others",
            host_condition.clone(),
        );
        let webhook_admissions = Family::<KindResult, Counter>::default();
        registry.register(
            "webhook_admissions",
            "AdmissionReviews answered, by kind and result (allowed, warned, denied)",
            webhook_admissions.clone(),
        );
        let webhook_admission_time =
            Family::<KindLabel, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register(
            "webhook_admission_duration_seconds",
            "Time to answer an AdmissionReview, by kind",
            webhook_admission_time.clone(),
        );
        let http = http::Slot::default();
        registry.register_collector(Box::new(http.clone()));
        let plugin_source_fetches = Family::<PluginSourceResult, Counter>::default();
        registry.register(
            "plugin_source_fetches",
            "Tries to get the artifact a plugin source names, by result",
            plugin_source_fetches.clone(),
        );
        let plugin_source_refusals = Family::<PluginSourceReason, Counter>::default();
        registry.register(
            "plugin_source_refusals",
            "Artifacts of plugin sources refused, by reason",
            plugin_source_refusals.clone(),
        );
        let plugin_source_cache = Family::<PluginSourceResult, Counter>::default();
        registry.register(
            "plugin_source_cache",
            "Looks at the cache of pulled plugins when the registry gave none, by hit or miss",
            plugin_source_cache.clone(),
        );
        let plugin_source_digest_changes = Family::<PluginSourceLabel, Counter>::default();
        registry.register(
            "plugin_source_digest_changes",
            "Times the artifact running for a plugin source changed to another manifest digest",
            plugin_source_digest_changes.clone(),
        );
        let service_restarts = Family::<ServiceLabel, Counter>::default();
        registry.register(
            "service_restarts",
            "Restarts of owned services (a process started again, a remote service reconnected)",
            service_restarts.clone(),
        );
        Self {
            webhook_admissions,
            webhook_admission_time,
            http,
            plugin_source_fetches,
            plugin_source_refusals,
            plugin_source_cache,
            plugin_source_digest_changes,
            host_condition,
            service_restarts,
            registry,
            kube_writes,
            kube_write_errors,
            kube_write_conflicts,
            kube_status_skipped,
            leader,
            store_commits,
            store_writes,
            tool_calls,
            tool_call_attempts,
            tool_calls_in_flight,
            world_rounds,
            world_objects,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            finalizations,
            queue_depth,
            queue_adds,
            queue_retries,
            queue_latency,
            plugin_call,
            plugin_call_cpu,
            plugin_errors,
            objects,
        }
    }

    /// Brings `steward_store_commits_total` and `steward_store_writes_total` up to the store's
    /// own counts (they only grow; a count below the metric's leaves it as it is).
    pub fn set_store(&self, stats: &crate::store::StoreStats) {
        self.store_commits.inc_by(stats.commits.saturating_sub(self.store_commits.get()));
        self.store_writes.inc_by(stats.writes.saturating_sub(self.store_writes.get()));
    }

    /// Sets `steward_host_condition` to `conditions`: for each, its status 1 and the two others 0;
    /// conditions no longer reported disappear.
    pub fn set_host_conditions(&self, conditions: &[crate::health::HostCondition]) {
        self.host_condition.clear();
        for c in conditions {
            for status in ["True", "False", "Unknown"] {
                let label = HostConditionLabel {
                    r#type: c.type_.clone(),
                    subject: c.subject.clone().unwrap_or_default(),
                    status: status.to_string(),
                };
                self.host_condition.get_or_create(&label).set(i64::from(format!("{:?}", c.status) == status));
            }
        }
    }

    /// Renders `http` with these metrics, when no HTTP metrics were rendered yet: the host hands
    /// over those its API has counted since before the engine started. Returns whether they
    /// were taken (false when [`Metrics::http`] made others first).
    pub fn use_http(&self, http: http::HttpMetrics) -> bool {
        self.http.0.set(http).is_ok()
    }

    /// The HTTP servers' metrics rendered with these: those given to [`Metrics::use_http`], or
    /// new ones from the first call on.
    pub fn http(&self) -> &http::HttpMetrics {
        self.http.0.get_or_init(http::HttpMetrics::default)
    }

    /// The OpenMetrics text exposition of every metric (see [`classic::to_classic`] for the
    /// classic Prometheus format).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_controller_runtime() {
        let m = Metrics::new();
        m.reconcile_total.get_or_create(&KindResult { kind: "Noop".into(), result: "success" }).inc();
        m.plugin_errors.get_or_create(&PluginErrorLabel { plugin: "p".into(), r#type: "timeout" }).inc();
        m.reconcile_time.get_or_create(&KindLabel { kind: "Noop".into() }).observe(0.001);
        m.finalizations.get_or_create(&KindLabel { kind: "Noop".into() }).inc();
        let service = ServiceLabel {
            kind: "MCPServer".into(),
            namespace: "default".into(),
            name: "git".into(),
            service: "server".into(),
        };
        m.service_restarts.get_or_create(&service).inc_by(2);
        let text = m.render();
        assert!(text.contains("steward_reconcile_total{kind=\"Noop\",result=\"success\"} 1"), "{text}");
        assert!(text.contains("steward_plugin_errors_total{plugin=\"p\",type=\"timeout\"} 1"), "{text}");
        assert!(text.contains("steward_reconcile_time_seconds_bucket"), "{text}");
        assert!(text.contains("steward_finalizations_total{kind=\"Noop\"} 1"), "{text}");
        assert!(text.contains("# TYPE steward_workqueue_depth gauge"), "{text}");
        assert!(
            text.contains(
                "steward_service_restarts_total{kind=\"MCPServer\",namespace=\"default\",name=\"git\",service=\"server\"} 2"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_http_servers_metrics_are_rendered_once_handed_over_and_counted_from_before() {
        let m = Metrics::new();
        let http = http::HttpMetrics::default();
        http.connections.get_or_create(&http::ServerLabel::of("api")).set(3);
        http.mcp_sessions.set(2);
        assert!(!m.render().contains("steward_http_connections"), "not handed over yet");
        assert!(m.use_http(http.clone()));
        http.header_timeouts.get_or_create(&http::ServerLabel::of("api")).inc();
        let text = m.render();
        assert!(text.contains("steward_http_connections{server=\"api\"} 3"), "{text}");
        assert!(text.contains("steward_http_header_timeouts_total{server=\"api\"} 1"), "{text}");
        assert!(text.contains("steward_mcp_sessions 2"), "{text}");
        assert!(text.contains("# TYPE steward_mcp_sessions_evicted counter"), "{text}");
        assert!(!m.use_http(http::HttpMetrics::default()), "handed over once");
        assert_eq!(m.http().mcp_sessions.get(), 2);
    }

    #[test]
    fn host_conditions_are_one_gauge_per_status() {
        let m = Metrics::new();
        let c = crate::health::Conditions::new();
        c.fail(crate::health::STORE_WRITABLE, None, "DiskFull", "full");
        m.set_host_conditions(&c.list());
        let text = m.render();
        assert!(
            text.contains("steward_host_condition{type=\"StoreWritable\",subject=\"\",status=\"False\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("steward_host_condition{type=\"StoreWritable\",subject=\"\",status=\"True\"} 0"),
            "{text}"
        );
        c.ok(crate::health::STORE_WRITABLE, None, "Committing", "");
        m.set_host_conditions(&c.list());
        let text = m.render();
        assert!(
            text.contains("steward_host_condition{type=\"StoreWritable\",subject=\"\",status=\"True\"} 1"),
            "{text}"
        );
    }
}
