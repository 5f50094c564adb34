//! The `request` record of a reconcile or finalize, borrowed from the host's own object and inputs, so it is lowered into the plugin without copying every string first.

use steward_sdk::{RawObject, ServiceStatus};
use wasmtime::component::{ComponentType, Lower};

use super::bindings::steward::plugin::types as w;

/// WIT `request`: the object and what the units add to it (the services unit: its observed
/// services). It has the same canonical ABI as the generated `types::Request`, which the plugin
/// checks once per component against the component's `reconcile` export before calling with it.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct Request<'a> {
    /// The object, with its last status.
    #[component(name = "resource")]
    pub resource: Resource<'a>,
    /// What the host observes of the services the object owns.
    pub services: Vec<Status<'a>>,
}

impl<'a> Request<'a> {
    /// The request for `object`, with no services yet.
    pub fn new(object: &'a RawObject) -> Self {
        Self { resource: Resource::new(object), services: Vec::new() }
    }
}

/// WIT `resource`, borrowed from a [`RawObject`].
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct Resource<'a> {
    #[component(name = "api-version")]
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: &'a str,
    generation: u64,
    labels: Vec<KeyValue<'a>>,
    annotations: Vec<KeyValue<'a>>,
    spec: &'a str,
    status: Option<&'a str>,
    deleting: bool,
}

impl<'a> Resource<'a> {
    /// `object` as the plugin receives it (labels and annotations sorted by key, as the maps hold them).
    pub fn new(object: &'a RawObject) -> Self {
        let kv = |m: &'a std::collections::BTreeMap<String, String>| {
            m.iter().map(|(k, v)| KeyValue { key: k, value: v }).collect()
        };
        Self {
            api_version: &object.api_version,
            kind: &object.kind,
            name: &object.name,
            namespace: &object.namespace,
            generation: object.generation,
            labels: kv(&object.labels),
            annotations: kv(&object.annotations),
            spec: &object.spec,
            status: object.status.as_deref(),
            deleting: object.deleting,
        }
    }
}

/// WIT `key-value`: one label or annotation.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct KeyValue<'a> {
    key: &'a str,
    value: &'a str,
}

/// WIT `service-status`, borrowed from a [`ServiceStatus`].
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct Status<'a> {
    name: &'a str,
    phase: w::ServicePhase,
    pid: Option<u32>,
    restarts: u32,
    #[component(name = "consecutive-failures")]
    consecutive_failures: u32,
    #[component(name = "next-retry-at")]
    next_retry_at: Option<&'a str>,
    #[component(name = "last-exit")]
    last_exit: Option<&'a str>,
    healthy: Option<bool>,
    #[component(name = "last-connected")]
    last_connected: Option<&'a str>,
    tools: Vec<ToolInfo<'a>>,
    message: Option<&'a str>,
}

impl<'a> Status<'a> {
    /// What the plugin receives of `s`.
    pub fn new(s: &'a ServiceStatus) -> Self {
        Self {
            name: &s.name,
            phase: super::convert::phase_to_wit(s.phase),
            pid: s.pid,
            restarts: s.restarts,
            consecutive_failures: s.consecutive_failures,
            next_retry_at: s.next_retry_at.as_deref(),
            last_exit: s.last_exit.as_deref(),
            healthy: s.healthy,
            last_connected: s.last_connected.as_deref(),
            tools: s.tools.iter().map(|t| ToolInfo { name: &t.name, description: &t.description }).collect(),
            message: s.message.as_deref(),
        }
    }
}

/// WIT `tool-info`: one tool a service lists.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ToolInfo<'a> {
    name: &'a str,
    description: &'a str,
}
