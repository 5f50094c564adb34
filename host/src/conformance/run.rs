//! Runs a scenario as the host would call the plugin (field validation, warnings, then the export) and checks the outcome.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use steward_sdk::RawOutcome;

use super::compare::{Mismatch, compare};
use super::fake::FixedCache;
use super::scenario::{Call, Scenario, ScenarioFile};
use crate::capabilities::{HeldCalls, ObservedChildren, ObservedServices};
use crate::config::FieldValidation;
use crate::plugin::{Inputs, Plugin, PluginError, ReconcileRequest};

/// How one scenario went.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioReport {
    /// The scenario's name.
    pub name: String,
    /// The line it starts at, when known.
    pub line: Option<u64>,
    /// Whether the plugin did what the scenario expects, and if not, every difference.
    pub verdict: Verdict,
    /// What the plugin did, in the shape the expectation is written in.
    pub actual: Value,
    /// What the plugin logged during the scenario's calls.
    pub logs: Vec<String>,
}

/// A scenario's verdict.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict", content = "mismatches")]
pub enum Verdict {
    /// Everything the scenario expects matched.
    Pass,
    /// These parts did not.
    Fail(Vec<Mismatch>),
}

/// Runs every scenario of `file` against `plugin`, in order; one scenario's failure does not
/// stop the others.
pub async fn run_file(plugin: &Plugin, file: &ScenarioFile) -> Vec<ScenarioReport> {
    let mut reports = Vec::with_capacity(file.scenarios.len());
    for s in &file.scenarios {
        reports.push(run_scenario(plugin, file, s).await);
    }
    reports
}

/// Runs `scenario` of `file` against `plugin` and compares its outcome with what it expects.
///
/// For `reconcile` (and `finalize`) the plugin is called as the host calls it: the spec pruned
/// by the kind's schema (unknown fields become warnings), the plugin's own warnings asked for,
/// then the export, reading from the file's and the scenario's objects only.
pub async fn run_scenario(plugin: &Plugin, file: &ScenarioFile, scenario: &Scenario) -> ScenarioReport {
    let mut logs = Vec::new();
    let mut raw = scenario.object.clone();
    let actual = match scenario.call {
        Call::Validate => {
            let report = plugin.validate(&raw).await;
            logs.extend(report.logs.iter().map(|l| l.message.clone()));
            match report.result {
                Ok(errors) => json!({"result": "ok", "fieldErrors": errors}),
                Err(e) => failure(&e),
            }
        }
        Call::Reconcile | Call::Finalize => {
            let checked =
                crate::schema::check_spec(FieldValidation::default(), plugin.spec_schema(&raw.kind), &raw.spec);
            raw.spec = checked.spec;
            let mut warnings: Vec<Value> =
                checked.warnings.iter().map(|w| json!({"path": w.path, "message": w.message})).collect();
            if let Some(report) = plugin.warnings(&raw).await {
                logs.extend(report.logs.iter().map(|l| l.message.clone()));
                match report.result {
                    Ok(found) => warnings.extend(
                        crate::schema::plugin_warnings(found)
                            .iter()
                            .map(|w| json!({"path": w.path, "message": w.message})),
                    ),
                    Err(e) => warnings.push(
                        json!({"path": "spec", "message": format!("the plugin's warnings could not be read: {e}")}),
                    ),
                }
            }
            let reads = Arc::new(FixedCache::new(file.cache.iter().chain(&scenario.cache).cloned()));
            // What the host would hand each capability unit: observed services, held tool calls, children.
            let inputs = Inputs::default()
                .with(ObservedServices(scenario.services.clone()))
                .with(HeldCalls(scenario.calls.clone()))
                .with(ObservedChildren(scenario.children.clone()));
            let req = ReconcileRequest { resource: raw, inputs };
            let report = if scenario.call == Call::Finalize {
                plugin.finalize(&req, reads).await
            } else {
                plugin.reconcile(&req, reads).await
            };
            logs.extend(report.logs.iter().map(|l| l.message.clone()));
            let mut actual = match &report.result {
                Ok(out) => outcome(out),
                Err(e) => failure(e),
            };
            actual["warnings"] = Value::Array(warnings);
            actual["reads"] = serde_json::to_value(&report.reads).unwrap_or_default();
            actual
        }
    };
    let mismatches = check(scenario, &actual);
    ScenarioReport {
        name: scenario.name.clone(),
        line: scenario.line,
        verdict: if mismatches.is_empty() { Verdict::Pass } else { Verdict::Fail(mismatches) },
        actual,
        logs,
    }
}

/// A good answer in the expectation's shape.
fn outcome(out: &RawOutcome) -> Value {
    let status = serde_json::from_str::<Value>(&out.status).unwrap_or(Value::String(out.status.clone()));
    json!({
        "result": "ok",
        "status": status,
        "conditions": out.conditions,
        "services": out.services,
        "calls": out.calls,
        "children": out.children,
        "events": out.events,
        "requeueAfterMs": out.requeue_after_ms,
    })
}

/// A failed call in the expectation's shape: its kind, its message, and the field errors of an
/// invalid object.
fn failure(e: &PluginError) -> Value {
    let result = match e {
        PluginError::Retry(_) => "retry",
        PluginError::Fatal(_) => "fatal",
        PluginError::Invalid(_) => "invalid",
        PluginError::Trap { .. } => "crashed",
        PluginError::Timeout { .. } => "timeout",
        PluginError::MemoryLimit { .. } => "memory",
        _ => "error",
    };
    let mut v = json!({"result": result, "message": e.to_string()});
    if let PluginError::Invalid(errors) = e {
        v["fieldErrors"] = serde_json::to_value(errors).unwrap_or_default();
    }
    v
}

/// Every difference between what `scenario` expects and `actual`.
fn check(scenario: &Scenario, actual: &Value) -> Vec<Mismatch> {
    let e = &scenario.expect;
    let mut out = Vec::new();
    let result = e.result.as_deref().unwrap_or("ok");
    compare("result", &Value::String(result.into()), actual.get("result"), &mut out);
    if let Some(want) = &e.message {
        let got = actual["message"].as_str().unwrap_or_default();
        if !got.contains(want.as_str()) {
            out.push(Mismatch {
                path: "message".into(),
                expected: format!("text containing {want:?}"),
                actual: if got.is_empty() { "(absent)".into() } else { format!("{got:?}") },
            });
        }
    }
    let parts = [
        ("status", &e.status),
        ("conditions", &e.conditions),
        ("fieldErrors", &e.field_errors),
        ("warnings", &e.warnings),
        ("services", &e.services),
        ("calls", &e.calls),
        ("children", &e.children),
        ("events", &e.events),
        ("requeueAfterMs", &e.requeue_after_ms),
        ("reads", &e.reads),
    ];
    for (name, want) in parts {
        let Some(want) = want else { continue };
        if UNORDERED.contains(&name) {
            compare(name, &by_path(want), actual.get(name).map(by_path).as_ref(), &mut out);
        } else {
            compare(name, want, actual.get(name), &mut out);
        }
    }
    out
}

/// The parts that are sets, whose order no implementation has to keep: compared sorted by `path`.
const UNORDERED: &[&str] = &["fieldErrors", "warnings"];

/// `list` sorted by each item's `path` (stable; anything that is not a list is left as it is).
fn by_path(list: &Value) -> Value {
    let mut list = list.clone();
    if let Value::Array(items) = &mut list {
        items.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    }
    list
}
