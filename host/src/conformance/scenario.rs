//! A scenario file: its format, parsed with the host's YAML hardening, and its objects made into what a plugin receives.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;
use steward_sdk::{CallRecord, ObservedChild, RawObject, ServiceStatus};

use crate::capabilities::RawPluginSettings;

/// One scenario file: the plugin's settings, the objects every scenario reads, and the scenarios.
#[derive(Debug)]
pub struct ScenarioFile {
    /// The plugin's settings, as `plugins.<name>` of a host config says them (capabilities,
    /// limits, `tools`, `children`); `None` grants what the plugin declares, with default limits.
    pub plugin: Option<RawPluginSettings>,
    /// Objects in the host's cache for every scenario of the file.
    pub cache: Vec<RawObject>,
    /// The scenarios, in file order.
    pub scenarios: Vec<Scenario>,
}

/// Which export a scenario calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Call {
    /// `reconcile`, after the host's field validation and the plugin's warnings, as the host calls it.
    #[default]
    Reconcile,
    /// `finalize` (the object is being deleted).
    Finalize,
    /// `validate` only.
    Validate,
}

/// One scenario: an object, what the host answers, and what the plugin must do.
#[derive(Debug)]
pub struct Scenario {
    /// Its name, unique in the file.
    pub name: String,
    /// The line it starts at in its file, when known.
    pub line: Option<u64>,
    /// The export it calls.
    pub call: Call,
    /// The object the plugin gets, with its last status.
    pub object: RawObject,
    /// More objects in the host's cache, for this scenario only.
    pub cache: Vec<RawObject>,
    /// What the host observes of the object's services (capability `services`).
    pub services: Vec<ServiceStatus>,
    /// The tool calls the host holds for the object (capability `tools`).
    pub calls: Vec<CallRecord>,
    /// The object's children as the host last saw them (capability `children`).
    pub children: Vec<ObservedChild>,
    /// The expected outcome.
    pub expect: Expect,
}

/// What a scenario expects; each part it leaves out is not checked. Values are matched by
/// [`super::compare`]'s rules (maps by the keys named, lists item by item, conditions by type).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    /// `ok`, `retry`, `fatal`, `invalid`, `crashed`, `timeout`, `memory` or `error` (any other
    /// failure). Default: `ok`.
    #[serde(default)]
    pub result: Option<String>,
    /// Text the failure's message must contain.
    #[serde(default)]
    pub message: Option<String>,
    /// The status the plugin reports.
    #[serde(default, deserialize_with = "present")]
    pub status: Option<Value>,
    /// Its conditions (by type).
    #[serde(default, deserialize_with = "present")]
    pub conditions: Option<Value>,
    /// The field errors of an invalid object (`result: invalid`) or of `call: validate`.
    #[serde(default, deserialize_with = "present")]
    pub field_errors: Option<Value>,
    /// The warnings: the host's field validation's, then the plugin's own.
    #[serde(default, deserialize_with = "present")]
    pub warnings: Option<Value>,
    /// The services it wants (capability `services`).
    #[serde(default, deserialize_with = "present")]
    pub services: Option<Value>,
    /// The tool calls it asks for (capability `tools`); `null` when it leaves them as they are.
    #[serde(default, deserialize_with = "present")]
    pub calls: Option<Value>,
    /// The children it wants (capability `children`); `null` when it leaves them as they are.
    #[serde(default, deserialize_with = "present")]
    pub children: Option<Value>,
    /// The events it reports.
    #[serde(default, deserialize_with = "present")]
    pub events: Option<Value>,
    /// When it asks to be called again, in milliseconds (`null`: it does not ask).
    #[serde(default, deserialize_with = "present")]
    pub requeue_after_ms: Option<Value>,
    /// The reads it made (`{op: get, kind, namespace, name}`, `{op: list, kind, namespace}`), sorted.
    #[serde(default, deserialize_with = "present")]
    pub reads: Option<Value>,
}

/// A value that is written, `null` included (serde's `Option` would read `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Why a scenario file cannot be used: where, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ScenarioError {
    /// The file.
    pub file: String,
    /// The line, when known.
    pub line: Option<u64>,
    /// What is wrong, and what to write instead.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    plugin: Option<RawPluginSettings>,
    #[serde(default)]
    cache: Vec<Spanned<Value>>,
    scenarios: Vec<Spanned<RawScenario>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    call: Call,
    object: Spanned<Value>,
    #[serde(default)]
    cache: Vec<Spanned<Value>>,
    #[serde(default)]
    services: Vec<ServiceStatus>,
    #[serde(default)]
    calls: Vec<CallRecord>,
    #[serde(default)]
    children: Vec<ObservedChild>,
    #[serde(default)]
    expect: Expect,
}

/// Parses the scenario file `file` (its name for errors) holding `text`.
pub fn parse(file: &str, text: &str) -> Result<ScenarioFile, ScenarioError> {
    let at = |line: Option<u64>, message: String| ScenarioError { file: file.to_string(), line, message };
    let raw: RawFile = crate::yaml::from_str(text).map_err(|e| at(e.line, e.message))?;
    if raw.scenarios.is_empty() {
        return Err(at(None, "`scenarios` is empty: write at least one".into()));
    }
    let objects = |list: Vec<Spanned<Value>>, call: Call| {
        list.into_iter()
            .map(|v| object(v.value, call).map_err(|m| at(line_of(&v.referenced), m)))
            .collect::<Result<Vec<_>, _>>()
    };
    let cache = objects(raw.cache, Call::Reconcile)?;
    let mut names = BTreeMap::new();
    let mut scenarios = Vec::with_capacity(raw.scenarios.len());
    for s in raw.scenarios {
        let line = line_of(&s.referenced);
        let r = s.value;
        if r.name.trim().is_empty() {
            return Err(at(line, "a scenario needs a `name`".into()));
        }
        if let Some(first) = names.insert(r.name.clone(), line) {
            let first = first.map(|l| format!(" (first at line {l})")).unwrap_or_default();
            return Err(at(line, format!("two scenarios are named {:?}{first}; names must be unique", r.name)));
        }
        if let Some(result) = &r.expect.result
            && !RESULTS.contains(&result.as_str())
        {
            return Err(at(line, format!("expect.result {result:?} is not one of {}", RESULTS.join(", "))));
        }
        let object_line = line_of(&r.object.referenced);
        scenarios.push(Scenario {
            name: r.name,
            line,
            call: r.call,
            object: object(r.object.value, r.call).map_err(|m| at(object_line, m))?,
            cache: objects(r.cache, Call::Reconcile)?,
            services: r.services,
            calls: r.calls,
            children: r.children,
            expect: r.expect,
        });
    }
    Ok(ScenarioFile { plugin: raw.plugin, cache, scenarios })
}

/// The results a scenario may expect.
pub(super) const RESULTS: &[&str] = &["ok", "retry", "fatal", "invalid", "crashed", "timeout", "memory", "error"];

fn line_of(loc: &serde_saphyr::Location) -> Option<u64> {
    Some(loc.line()).filter(|l| *l > 0)
}

/// A Kubernetes-shaped object (`apiVersion`, `kind`, `metadata`, `spec`, `status`) as a plugin
/// receives it. Its namespace defaults to `default`, its generation to 1; it is being deleted
/// when `metadata.deletionTimestamp` is set or the call is `finalize`.
fn object(v: Value, call: Call) -> Result<RawObject, String> {
    let Value::Object(mut map) = v else {
        return Err("an object must be a map with apiVersion, kind and metadata".into());
    };
    let mut text = |field: &str| match map.remove(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(other) => Err(format!("`{field}` must be a non-empty string, not {other}")),
        None => Err(format!("the object has no `{field}`")),
    };
    let api_version = text("apiVersion")?;
    let kind = text("kind")?;
    let Some(Value::Object(mut meta)) = map.remove("metadata") else {
        return Err(format!("the {kind} has no `metadata` map (with at least `name`)"));
    };
    let name = match meta.remove("name") {
        Some(Value::String(n)) if !n.is_empty() => n,
        _ => return Err(format!("the {kind} has no `metadata.name`")),
    };
    let namespace = match meta.remove("namespace") {
        None => "default".to_string(),
        Some(Value::String(n)) => n,
        Some(other) => return Err(format!("metadata.namespace of {kind} {name} must be a string, not {other}")),
    };
    let strings = |v: Option<Value>, field: &str| -> Result<BTreeMap<String, String>, String> {
        match v {
            None => Ok(BTreeMap::new()),
            Some(v) => serde_json::from_value(v)
                .map_err(|_| format!("metadata.{field} of {kind} {name} must map strings to strings")),
        }
    };
    let labels = strings(meta.remove("labels"), "labels")?;
    let annotations = strings(meta.remove("annotations"), "annotations")?;
    let generation = match meta.remove("generation") {
        None => 1,
        Some(g) => g
            .as_u64()
            .filter(|g| *g > 0)
            .ok_or_else(|| format!("metadata.generation of {kind} {name} must be a positive integer"))?,
    };
    let deleting = meta.remove("deletionTimestamp").is_some() || call == Call::Finalize;
    let spec = map.remove("spec").unwrap_or_else(|| Value::Object(Default::default()));
    let status = map.remove("status").map(|s| s.to_string());
    if let Some(extra) = map.keys().next() {
        return Err(format!(
            "{kind} {name} has a field `{extra}` an object does not have (apiVersion, kind, metadata, spec, status)"
        ));
    }
    Ok(RawObject {
        api_version,
        kind,
        name,
        namespace,
        generation,
        labels,
        annotations,
        spec: spec.to_string(),
        status,
        deleting,
    })
}
