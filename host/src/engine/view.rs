//! What the API shows: one object's status record with its source, and the overview.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use steward_sdk::Condition;

use super::Engine;
use super::summary::{Summary, summarize};
use crate::driver::FileProblem;
use crate::model::{FieldWarning, HistoryEntry, ObjectKey, Phase, StatusRecord, rfc3339};
use crate::plugin::PluginStatus;

/// One past reconcile, with its time as RFC 3339.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryView {
    /// When it started.
    pub time: String,
    /// Why it ran.
    pub reason: String,
    /// What came of it.
    pub outcome: String,
    /// How long it took.
    pub duration_ms: u64,
    /// The object's warnings when it ran (`path: message`); left out when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The OpenTelemetry trace id of the reconcile, when traces were exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// How many reconciles in a row, alike in reason, outcome and warnings, the entry stands
    /// for (its time, duration and trace are the newest one's); left out when one.
    #[serde(default = "crate::model::one", skip_serializing_if = "crate::model::is_one")]
    pub count: u32,
    /// When the first of those reconciles started; left out when the entry stands for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<String>,
}

impl From<&HistoryEntry> for HistoryView {
    fn from(h: &HistoryEntry) -> Self {
        Self {
            time: rfc3339(h.time),
            reason: h.reason.to_string(),
            outcome: h.outcome.to_string(),
            duration_ms: h.duration_ms,
            warnings: h.warnings.clone(),
            trace_id: h.trace_id.clone(),
            count: h.count,
            first_time: h.first_time.map(rfc3339),
        }
    }
}

/// One object as the API shows it (`GET /api/v1/resources/{kind}/{namespace}/{name}`), and as
/// the client reads it back: a field it does not know is an error, not ignored.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceView {
    /// The kind.
    pub kind: String,
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// Its current generation.
    pub generation: u64,
    /// The generation the last success saw.
    pub observed_generation: Option<u64>,
    /// Where it stands.
    pub phase: Phase,
    /// What every list shows of it: the phase with its Ready condition, reason and message, one
    /// verdict (green only when it is synced and not unready), and its kind's printer columns.
    pub summary: Summary,
    /// When the last reconcile started.
    pub last_reconcile_time: Option<String>,
    /// When the last success finished.
    pub last_success_time: Option<String>,
    /// Failed attempts since the last success.
    pub retry_count: u32,
    /// When the next attempt is due.
    pub next_attempt_time: Option<String>,
    /// The last error.
    pub last_error: Option<String>,
    /// Problems with the spec that do not stop the object, each with its path: fields its kind's
    /// schema does not know (dropped, `source: schema`), the plugin's own (`source: plugin`), and
    /// what filesystem mode accepted that Kubernetes mode refuses (`source: source`).
    #[serde(default)]
    pub warnings: Vec<FieldWarning>,
    /// The plugin's status.
    pub status: Option<serde_json::Value>,
    /// The plugin's conditions.
    pub conditions: Vec<Condition>,
    /// The plugin that reconciles it.
    pub plugin: Option<String>,
    /// That plugin's version.
    pub plugin_version: Option<String>,
    /// `file:line` it was read from; `owner Kind/namespace/name` for a child object, which
    /// its owner made (capability `children`).
    pub source: Option<String>,
    /// The object that owns it, as `Kind/namespace/name` (a child object, capability `children`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A problem with its source: its file does not parse, or its name is defined twice.
    pub source_problem: Option<String>,
    /// Whether it is gone from its source and awaits finalize.
    pub deleting: bool,
    /// Whether its kind is disabled.
    pub disabled: bool,
    /// The last reconciles, newest last.
    pub history: Vec<HistoryView>,
}

/// Counts and state of one kind (`GET /api/v1/overview`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindOverview {
    /// The kind.
    pub kind: String,
    /// The plugin that serves it, if any.
    pub plugin: Option<String>,
    /// Whether it is enabled.
    pub enabled: bool,
    /// Objects by phase.
    pub phases: BTreeMap<String, usize>,
}

/// The whole host at a glance.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    /// `filesystem` or `kubernetes`.
    pub mode: String,
    /// Whether the first scan and plugin load are done.
    pub ready: bool,
    /// Whether this replica reconciles: always in filesystem mode or with leader election off;
    /// in Kubernetes mode while it holds the Lease (a ready standby shows `false`).
    pub leader: bool,
    /// This replica's identity in leader election; absent when no election runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The identity the Lease names as holder, as this replica last saw it; absent when no
    /// election runs, the Lease is free, or it was not seen yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_holder: Option<String>,
    /// Keys ready for a worker.
    pub queue_length: usize,
    /// Reconciles running now.
    pub running: usize,
    /// Keys waiting for a retry or resync deadline.
    pub scheduled: usize,
    /// Per kind.
    pub kinds: Vec<KindOverview>,
    /// The plugins.
    pub plugins: Vec<PluginStatus>,
    /// Resource files that do not parse or conflict, as `file:line:column: message`.
    pub problems: Vec<String>,
    /// The host's own conditions (store, resources directory, plugin sources, watches,
    /// webhook), sorted by type; `True` when all is well.
    pub conditions: Vec<crate::health::HostCondition>,
}

impl Engine {
    fn view_of(
        &self,
        key: &ObjectKey,
        rec: Option<StatusRecord>,
        problems: &[FileProblem],
        columns: &[steward_sdk::PrinterColumn],
    ) -> ResourceView {
        let obj = self.source().get(key);
        let rec = rec.unwrap_or_default();
        let file =
            obj.as_ref().map(|o| o.location.file.clone()).or_else(|| rec.source.as_ref().map(|at| at.file.clone()));
        let source_problem = self
            .source()
            .object_problem(key)
            .or_else(|| file.as_ref().and_then(|f| problems.iter().find(|p| &p.file == f).map(ToString::to_string)));
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner()).contains(key);
        // A child (capability `children`) names its owner; its file or API path is the host's business.
        let owner = obj.as_ref().and_then(|o| o.raw.annotations.get(crate::children::OWNER_ANNOTATION)).cloned();
        let phase = if running { Phase::Reconciling } else { rec.phase };
        let status = rec.status_value();
        // The spec is parsed only when a column reads it.
        let spec = columns
            .iter()
            .any(|c| c.json_path.starts_with(".spec"))
            .then(|| obj.as_ref().and_then(|o| serde_json::from_str::<serde_json::Value>(&o.raw.spec).ok()))
            .flatten();
        let summary =
            summarize(phase, &rec.conditions, rec.last_error.as_deref(), columns, spec.as_ref(), status.as_ref());
        ResourceView {
            kind: key.kind().to_string(),
            namespace: key.namespace().to_string(),
            name: key.name().to_string(),
            generation: obj.as_ref().map_or(rec.generation, |o| o.raw.generation),
            observed_generation: rec.observed_generation,
            phase,
            summary,
            last_reconcile_time: rec.last_reconcile_time.map(rfc3339),
            last_success_time: rec.last_success_time.map(rfc3339),
            retry_count: rec.retry_count,
            next_attempt_time: rec.next_attempt_time.map(rfc3339),
            last_error: rec.last_error.clone(),
            warnings: rec.warnings.clone(),
            status,
            conditions: rec.conditions.clone(),
            plugin: rec.plugin.as_ref().map(ToString::to_string),
            plugin_version: rec.plugin_version.as_ref().map(ToString::to_string),
            owner: owner.clone(),
            source: match owner {
                Some(owner) => Some(format!("owner {owner}")),
                None => obj.map(|o| o.location).or(rec.source.clone()).map(|at| at.to_string()),
            },
            source_problem,
            deleting: rec.deleting,
            disabled: self.is_disabled(key.kind()),
            history: rec.history.iter().map(HistoryView::from).collect(),
        }
    }

    /// One object, if the source or the store knows it.
    pub fn view(&self, key: &ObjectKey) -> Option<ResourceView> {
        let rec = self.store.get(&key.text());
        if rec.is_none() && self.source().get(key).is_none() {
            return None;
        }
        Some(self.view_of(key, rec, &self.source().problems(), &self.plugins.columns(key.kind())))
    }

    /// Every known object, or those of `kind`, sorted by key.
    pub fn views(&self, kind: Option<&str>) -> Vec<ResourceView> {
        let mut keys: std::collections::BTreeSet<ObjectKey> = self.source().keys().into_iter().collect();
        keys.extend(self.store.keys().iter().filter_map(|k| ObjectKey::parse(k)));
        let problems = self.source().problems();
        let mut columns: BTreeMap<String, Vec<steward_sdk::PrinterColumn>> = BTreeMap::new();
        keys.into_iter()
            .filter(|k| kind.is_none_or(|want| k.kind() == want))
            .map(|k| {
                let rec = self.store.get(&k.to_string());
                let cols = columns.entry(k.kind().to_string()).or_insert_with(|| self.plugins.columns(k.kind()));
                self.view_of(&k, rec, &problems, cols)
            })
            .collect()
    }

    /// Every later change of the store (a status record or a host setting such as the disabled
    /// kinds), for the API's event stream; see [`crate::store::Store::subscribe`].
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<crate::store::Change> {
        self.store.subscribe()
    }

    /// The overview.
    pub fn overview(&self) -> Overview {
        let mut kinds: BTreeMap<String, KindOverview> = BTreeMap::new();
        for p in self.plugins.plugins() {
            for k in crate::plugin::served_kinds(&p) {
                kinds.insert(
                    k.clone(),
                    KindOverview {
                        kind: k.clone(),
                        plugin: Some(p.name().to_string()),
                        enabled: !self.is_disabled(&k),
                        phases: BTreeMap::new(),
                    },
                );
            }
        }
        // Counted without building a view, a key set or a key string per object: one pass over
        // the stored records (each at its stored phase), the few running keys moved to
        // `Reconciling`, then the source's objects that have no record yet (`Pending`). At
        // 100,000 objects a poll of it costs a few milliseconds rather than tens.
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut counts = self.stored_phases();
        let mut bump = |kind: &str, phase: Phase, by: isize| {
            let phases = match counts.get_mut(kind) {
                Some(p) => p,
                None => counts.entry(kind.to_string()).or_default(),
            };
            let n = phases.entry(phase).or_default();
            *n = n.saturating_add_signed(by);
        };
        for key in &running {
            if let Some(phase) = self.store.get_with(&key.text(), |r| r.phase) {
                bump(key.kind(), phase, -1);
                bump(key.kind(), Phase::Reconciling, 1);
            }
        }
        let mut text = String::new();
        for key in self.source().keys() {
            text.clear();
            let _ = write!(text, "{key}");
            if !self.store.contains(&text) {
                bump(key.kind(), if running.contains(&key) { Phase::Reconciling } else { Phase::default() }, 1);
            }
        }
        for (kind, phases) in counts {
            let entry = kinds.entry(kind).or_insert_with_key(|kind| KindOverview {
                kind: kind.clone(),
                plugin: None,
                enabled: !self.is_disabled(kind),
                phases: BTreeMap::new(),
            });
            for (phase, n) in phases.into_iter().filter(|(_, n)| *n > 0) {
                *entry.phases.entry(phase.to_string()).or_default() += n;
            }
        }
        let standing = self.driver.standing();
        Overview {
            mode: self.mode().into(),
            ready: self.is_ready(),
            leader: self.is_leader(),
            identity: standing.as_ref().map(|s| s.identity.clone()),
            lease_holder: standing.and_then(|s| s.holder),
            queue_length: self.queue.len(),
            running: self.queue.processing_len(),
            scheduled: self.queue.delayed_len(),
            kinds: kinds.into_values().collect(),
            plugins: self.plugins.statuses(),
            problems: self.source().problems().iter().map(ToString::to_string).collect(),
            conditions: self.conditions.list(),
        }
    }

    /// The stored records by kind and phase, in one pass without a copy of any record (kinds are
    /// few and keys many: a kind's name is allocated once, not once per record).
    fn stored_phases(&self) -> BTreeMap<String, BTreeMap<Phase, usize>> {
        let mut counts: BTreeMap<String, BTreeMap<Phase, usize>> = BTreeMap::new();
        self.store.for_each(|k, rec| {
            let Some(kind) = kind_of_key(k) else { return };
            let per = match counts.get_mut(kind) {
                Some(per) => per,
                None => counts.entry(kind.to_string()).or_default(),
            };
            *per.entry(rec.phase).or_default() += 1;
        });
        counts
    }

    /// Objects of `kind` by phase, from the store (cheap enough to poll).
    pub fn phase_counts(&self, kind: &str) -> BTreeMap<Phase, usize> {
        let mut counts = BTreeMap::new();
        self.store.for_each(|k, rec| {
            if k.split_once('/').is_some_and(|(k, _)| k == kind) {
                *counts.entry(rec.phase).or_default() += 1;
            }
        });
        counts
    }

    /// Sets the `steward_objects{kind,phase}` gauges from the store and renders all metrics.
    pub fn render_metrics(&self) -> String {
        self.metrics.objects.clear();
        for (kind, phases) in self.stored_phases() {
            for (phase, n) in phases {
                let label = crate::metrics::KindPhase { kind: kind.clone(), phase: phase.to_string() };
                self.metrics.objects.get_or_create(&label).set(n as i64);
            }
        }
        self.metrics.queue_depth.set(self.queue.len() as i64);
        self.metrics.set_store(&self.store.stats());
        self.metrics.set_host_conditions(&self.conditions.list());
        self.metrics.render()
    }
}

/// The kind of a store key `Kind/namespace/name` (`Kind//name` for a cluster-scoped object), as
/// [`ObjectKey::parse`] accepts it; `None` for any other key.
fn kind_of_key(key: &str) -> Option<&str> {
    let mut parts = key.split('/');
    let (kind, _, name) = (parts.next()?, parts.next()?, parts.next()?);
    (parts.next().is_none() && !kind.is_empty() && !name.is_empty()).then_some(kind)
}

#[cfg(test)]
mod tests {
    use super::kind_of_key;

    #[test]
    fn kind_of_key_accepts_what_object_keys_parse() {
        for key in ["Noop/default/a", "Noop//cluster-wide", "MCPServer/ns/x", "a/b", "/ns/x", "K/ns/", "K/ns/x/y", ""] {
            let parsed = crate::model::ObjectKey::parse(key).map(|k| k.kind().to_string());
            assert_eq!(kind_of_key(key).map(str::to_string), parsed, "{key}");
        }
    }
}
