//! The WebAssembly side: generated bindings, conversions to the SDK's types, and the host imports.

use std::sync::Once;

use crate::context::Host;
use crate::dispatch::{PluginEntry, RawOutcome};
use crate::kind::Error;
use crate::types as t;

/// Generated bindings of `steward:plugin@0.1.0` (world `plugin-sdk`: `plugin-full` and the optional
/// `lint` export); plugin code never names them.
///
/// The world holds every capability interface, but a component imports only the
/// functions its code calls: the `services` interface is called only with the
/// crate feature `services`, so a plugin without it never imports it.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "plugin-sdk",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_guest",
        default_bindings_module: "steward_sdk::__private::bindings",
        // wasi:http and what it uses (wasi:io, wasi:clocks) for `steward_sdk::http`.
        generate_all,
    });
}

pub use bindings::export_guest;
use bindings::steward::plugin::host as imports;
use bindings::steward::plugin::types as w;

/// The host imports, as a [`Host`].
struct WasmHost;

impl Host for WasmHost {
    fn log(&self, level: t::LogLevel, message: &str) {
        imports::log(level_to_wit(level), message)
    }
    fn get(&self, r: &t::ObjectRef) -> Option<t::RawObject> {
        let r = w::ObjectRef { kind: r.kind.clone(), namespace: r.namespace.clone(), name: r.name.clone() };
        imports::get(&r).map(raw_from_wit)
    }
    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<t::RawObject> {
        imports::list(kind, namespace).into_iter().map(raw_from_wit).collect()
    }
    #[cfg(feature = "tools")]
    fn calls(&self) -> Vec<t::CallRecord> {
        bindings::steward::plugin::tools::calls().into_iter().map(call_record_from_wit).collect()
    }
    #[cfg(feature = "children")]
    fn children(&self) -> Vec<t::ObservedChild> {
        bindings::steward::plugin::children::observed()
            .into_iter()
            .map(|c| t::ObservedChild {
                api_version: c.api_version,
                kind: c.kind,
                name: c.name,
                object: c.object.and_then(|text| serde_json::from_str(&text).ok()),
            })
            .collect()
    }
}

/// Sends a panic's message to the host log before the trap, so the host can report it.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            imports::log(w::LogLevel::Error, &format!("panic: {info}"));
        }))
    });
}

/// `describe` export.
pub fn describe(p: &PluginEntry) -> w::PluginInfo {
    install_panic_hook();
    let info = p.info();
    w::PluginInfo {
        name: info.name,
        version: info.version,
        kinds: info
            .kinds
            .into_iter()
            .map(|k| w::KindInfo {
                group: k.group,
                version: k.version,
                kind: k.kind,
                plural: k.plural,
                namespaced: k.namespaced,
                spec_schema: k.spec_schema,
                resync_seconds: k.resync_seconds,
            })
            .collect(),
        capabilities: info.capabilities,
    }
}

/// `validate` export.
pub fn validate(p: &PluginEntry, r: w::Resource) -> Vec<w::FieldError> {
    install_panic_hook();
    p.validate(&raw_from_wit(r)).into_iter().map(field_to_wit).collect()
}

/// `reconcile` and `finalize` exports.
pub fn reconcile(p: &PluginEntry, req: w::Request, finalize: bool) -> Result<w::Response, w::ReconcileError> {
    install_panic_hook();
    let raw = raw_from_wit(req.resource);
    let services = observed(req.services);
    match p.reconcile(&WasmHost, &raw, &services, finalize) {
        Ok(mut o) => {
            let desired = std::mem::take(&mut o.services);
            if let Some(calls) = o.calls.take() {
                request_calls(calls)?;
            }
            if let Some(children) = o.children.take() {
                desire_children(children)?;
            }
            desire(response_to_wit(o), desired)
        }
        Err(Error::Retry(m)) => Err(w::ReconcileError::Retry(m)),
        Err(Error::Fatal(m)) => Err(w::ReconcileError::Fatal(m)),
        Err(Error::Invalid(errs)) => Err(w::ReconcileError::Invalid(errs.into_iter().map(field_to_wit).collect())),
    }
}

/// `lint` export (`warnings`): the kind's [`crate::Kind::warnings`]; none for a spec that does not parse.
pub fn warnings(p: &PluginEntry, r: w::Resource) -> Vec<w::FieldError> {
    install_panic_hook();
    p.warnings(&raw_from_wit(r)).into_iter().map(field_to_wit).collect()
}

/// `columns` export (`printer-columns`): each kind's [`crate::Kind::columns`], kinds without any left out.
pub fn printer_columns(p: &PluginEntry) -> Vec<bindings::exports::steward::plugin::columns::KindColumns> {
    use bindings::exports::steward::plugin::columns as c;
    install_panic_hook();
    p.info()
        .kinds
        .into_iter()
        .filter(|k| !k.columns.is_empty())
        .map(|k| c::KindColumns {
            kind: k.kind,
            columns: k
                .columns
                .into_iter()
                .map(|col| c::PrinterColumn {
                    name: col.name,
                    json_path: col.json_path,
                    type_: match col.type_ {
                        t::ColumnType::String => c::ColumnType::String,
                        t::ColumnType::Integer => c::ColumnType::Integer,
                        t::ColumnType::Number => c::ColumnType::Number,
                        t::ColumnType::Boolean => c::ColumnType::Boolean,
                        t::ColumnType::Date => c::ColumnType::Date,
                    },
                    description: col.description,
                    priority: col.priority,
                })
                .collect(),
        })
        .collect()
}

/// What the host observes of the object's services: through the `services` import, which
/// also says whether a remote server wants authorization, unless the request's copy says all
/// there is to say (see [`request_says_all`]).
#[cfg(feature = "services")]
fn observed(in_request: Vec<w::ServiceStatus>) -> Vec<t::ServiceStatus> {
    if request_says_all(in_request.iter().map(|s| s.phase)) {
        return in_request.into_iter().map(service_status_from_wit).collect();
    }
    bindings::steward::plugin::services::observed()
        .into_iter()
        .map(|o| t::ServiceStatus { auth_required: o.auth_required, ..service_status_from_wit(o.status) })
        .collect()
}

/// Whether services in these phases are fully described by `request.services`: `observed`
/// holds the same statuses, and adds only `auth-required`, which only a remote service that
/// failed to connect can have. With no services, or only ones in phases a remote service never
/// has (`starting`, `running` and `stopped` are a process's), the import is not called: that
/// call would copy every status into the plugin a second time.
#[cfg(any(feature = "services", test))]
fn request_says_all(mut phases: impl Iterator<Item = w::ServicePhase>) -> bool {
    phases.all(|p| matches!(p, w::ServicePhase::Starting | w::ServicePhase::Running | w::ServicePhase::Stopped))
}

/// What the host observes of the object's services: the request's copy (empty unless granted).
#[cfg(not(feature = "services"))]
fn observed(in_request: Vec<w::ServiceStatus>) -> Vec<t::ServiceStatus> {
    in_request.into_iter().map(service_status_from_wit).collect()
}

/// Hands the desired services, with their secret references, to the host through the
/// `services` import.
#[cfg(feature = "services")]
fn desire(resp: w::Response, desired: Vec<t::ServiceSpec>) -> Result<w::Response, w::ReconcileError> {
    let desired: Vec<_> = desired
        .into_iter()
        .map(|mut s| {
            let secrets = std::mem::take(&mut s.secrets).into_iter().map(secret_to_wit).collect();
            bindings::steward::plugin::services::DesiredService { spec: service_spec_to_wit(s), secrets }
        })
        .collect();
    bindings::steward::plugin::services::set_desired(&desired);
    Ok(resp)
}

/// Without the `services` feature the desired services travel in `response.services`, the
/// way plugins built before the interface answer: the plugin never imports the interface, and
/// the host refuses such an answer unless the config grants `services`. That field cannot
/// name secrets, so a service with secret references is an error rather than a service
/// started without its credentials.
#[cfg(not(feature = "services"))]
fn desire(mut resp: w::Response, desired: Vec<t::ServiceSpec>) -> Result<w::Response, w::ReconcileError> {
    if let Some(s) = desired.iter().find(|s| !s.secrets.is_empty()) {
        return Err(w::ReconcileError::Fatal(format!(
            "service `{}` reads values from secrets, which only a plugin built with steward-sdk's \
             `services` feature can ask for; enable the feature",
            s.name
        )));
    }
    resp.services = desired.into_iter().map(service_spec_to_wit).collect();
    Ok(resp)
}

/// Hands the wanted tool calls to the host through the `tools` import.
#[cfg(feature = "tools")]
fn request_calls(calls: Vec<t::CallRequest>) -> Result<(), w::ReconcileError> {
    use bindings::steward::plugin::tools as tw;
    let calls: Vec<_> = calls
        .into_iter()
        .map(|c| tw::CallRequest {
            id: c.id,
            tool: c.tool,
            arguments: c.arguments.to_string(),
            timeout_ms: c.timeout_ms,
        })
        .collect();
    tw::request(&calls);
    Ok(())
}

/// Without the `tools` feature the plugin never imports the interface, so it cannot ask for calls.
#[cfg(not(feature = "tools"))]
fn request_calls(calls: Vec<t::CallRequest>) -> Result<(), w::ReconcileError> {
    if calls.is_empty() {
        return Ok(());
    }
    Err(w::ReconcileError::Fatal(
        "the plugin asks for tool calls, which only a plugin built with steward-sdk's `tools` feature can; \
         enable the feature"
            .to_string(),
    ))
}

/// Hands the wanted child objects to the host through the `children` import.
#[cfg(feature = "children")]
fn desire_children(children: Vec<t::Child>) -> Result<(), w::ReconcileError> {
    use bindings::steward::plugin::children as cw;
    let children: Vec<_> = children
        .into_iter()
        .map(|c| cw::Child { api_version: c.api_version, kind: c.kind, name: c.name, body: c.body.to_string() })
        .collect();
    cw::desire(&children);
    Ok(())
}

/// Without the `children` feature the plugin never imports the interface, so it cannot own children.
#[cfg(not(feature = "children"))]
fn desire_children(children: Vec<t::Child>) -> Result<(), w::ReconcileError> {
    if children.is_empty() {
        return Ok(());
    }
    Err(w::ReconcileError::Fatal(
        "the plugin asks for child objects, which only a plugin built with steward-sdk's `children` feature can; \
         enable the feature"
            .to_string(),
    ))
}

/// A call record as the SDK shows it; a result that is not JSON is kept as a string.
#[cfg(feature = "tools")]
fn call_record_from_wit(r: bindings::steward::plugin::tools::CallRecord) -> t::CallRecord {
    use bindings::steward::plugin::tools::CallState as S;
    t::CallRecord {
        id: r.id,
        tool: r.tool,
        state: match r.state {
            S::Pending => t::CallState::Pending,
            S::Running => t::CallState::Running,
            S::Succeeded => t::CallState::Succeeded,
            S::Failed => t::CallState::Failed,
            S::Cancelled => t::CallState::Cancelled,
        },
        attempts: r.attempts,
        result: r.result.map(|text| serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))),
        truncated: r.truncated,
        error: r.error,
        started_at: r.started_at,
        finished_at: r.finished_at,
    }
}

/// A secret reference as the `services` interface carries it.
#[cfg(feature = "services")]
fn secret_to_wit(v: t::SecretValue) -> bindings::steward::plugin::services::SecretValue {
    use bindings::steward::plugin::services as s;
    s::SecretValue {
        target: match v.target {
            t::SecretTarget::Env => s::SecretTarget::Env,
            t::SecretTarget::Header => s::SecretTarget::Header,
        },
        name: v.name,
        source: match v.source {
            t::SecretSource::SecretKeyRef { name, namespace, key } => {
                s::SecretSource::SecretKeyRef(s::SecretKeyRef { name, namespace, key })
            }
            t::SecretSource::File { path } => s::SecretSource::File(path),
            t::SecretSource::Env { name } => s::SecretSource::Env(name),
        },
    }
}

fn service_spec_to_wit(s: t::ServiceSpec) -> w::ServiceSpec {
    w::ServiceSpec {
        name: s.name,
        transport: match s.transport {
            t::Transport::Stdio => w::Transport::Stdio,
            t::Transport::StreamableHttp => w::Transport::StreamableHttp,
            t::Transport::Sse => w::Transport::Sse,
        },
        command: s.command,
        args: s.args,
        env: kv_to_wit(s.env),
        working_dir: s.working_dir,
        url: s.url,
        headers: kv_to_wit(s.headers),
        timeout_ms: s.timeout_ms,
    }
}

fn level_to_wit(l: t::LogLevel) -> w::LogLevel {
    match l {
        t::LogLevel::Trace => w::LogLevel::Trace,
        t::LogLevel::Debug => w::LogLevel::Debug,
        t::LogLevel::Info => w::LogLevel::Info,
        t::LogLevel::Warn => w::LogLevel::Warn,
        t::LogLevel::Error => w::LogLevel::Error,
    }
}

fn kv_from_wit(kv: Vec<w::KeyValue>) -> std::collections::BTreeMap<String, String> {
    kv.into_iter().map(|p| (p.key, p.value)).collect()
}

fn kv_to_wit(m: std::collections::BTreeMap<String, String>) -> Vec<w::KeyValue> {
    m.into_iter().map(|(key, value)| w::KeyValue { key, value }).collect()
}

fn raw_from_wit(r: w::Resource) -> t::RawObject {
    t::RawObject {
        api_version: r.api_version,
        kind: r.kind,
        name: r.name,
        namespace: r.namespace,
        generation: r.generation,
        labels: kv_from_wit(r.labels),
        annotations: kv_from_wit(r.annotations),
        spec: r.spec,
        status: r.status,
        deleting: r.deleting,
    }
}

fn field_to_wit(e: t::FieldError) -> w::FieldError {
    w::FieldError { path: e.path, message: e.message }
}

fn service_status_from_wit(s: w::ServiceStatus) -> t::ServiceStatus {
    t::ServiceStatus {
        name: s.name,
        phase: match s.phase {
            w::ServicePhase::Starting => t::ServicePhase::Starting,
            w::ServicePhase::Running => t::ServicePhase::Running,
            w::ServicePhase::Stopped => t::ServicePhase::Stopped,
            w::ServicePhase::Failed => t::ServicePhase::Failed,
            w::ServicePhase::Connecting => t::ServicePhase::Connecting,
            w::ServicePhase::Connected => t::ServicePhase::Connected,
            w::ServicePhase::Disconnected => t::ServicePhase::Disconnected,
        },
        pid: s.pid,
        restarts: s.restarts,
        consecutive_failures: s.consecutive_failures,
        next_retry_at: s.next_retry_at,
        last_exit: s.last_exit,
        healthy: s.healthy,
        last_connected: s.last_connected,
        tools: s.tools.into_iter().map(|t| t::ToolInfo { name: t.name, description: t.description }).collect(),
        message: s.message,
        auth_required: false,
    }
}

fn response_to_wit(o: RawOutcome) -> w::Response {
    w::Response {
        status: o.status,
        conditions: conditions_to_wit(o.conditions),
        services: Vec::new(),
        requeue_after_ms: o.requeue_after_ms,
        events: events_to_wit(o.events),
    }
}

fn conditions_to_wit(conditions: Vec<t::Condition>) -> Vec<w::Condition> {
    conditions
        .into_iter()
        .map(|c| w::Condition {
            type_: c.type_,
            status: match c.status {
                t::ConditionStatus::True => w::ConditionStatus::True,
                t::ConditionStatus::False => w::ConditionStatus::False,
                t::ConditionStatus::Unknown => w::ConditionStatus::Unknown,
            },
            reason: c.reason,
            message: c.message,
        })
        .collect()
}

fn events_to_wit(events: Vec<t::Event>) -> Vec<w::Event> {
    events
        .into_iter()
        .map(|e| w::Event {
            type_: match e.type_ {
                t::EventType::Normal => w::EventType::Normal,
                t::EventType::Warning => w::EventType::Warning,
            },
            reason: e.reason,
            message: e.message,
        })
        .collect()
}

fn error_to_wit(e: Error) -> w::ReconcileError {
    match e {
        Error::Retry(m) => w::ReconcileError::Retry(m),
        Error::Fatal(m) => w::ReconcileError::Fatal(m),
        Error::Invalid(errs) => w::ReconcileError::Invalid(errs.into_iter().map(field_to_wit).collect()),
    }
}

fn ref_to_wit(r: &t::ObjectRef) -> w::ObjectRef {
    w::ObjectRef { kind: r.kind.clone(), namespace: r.namespace.clone(), name: r.name.clone() }
}

/// The host imports of a world round, as a [`Host`]: `act-for` through the `round` import, and
/// the capability imports (each behind its cargo feature) acting for the object named last.
/// Only the world glue ([`reconcile_world`]) makes one, so a plugin without a world never
/// imports `steward:plugin/round`.
struct WasmWorldHost;

impl Host for WasmWorldHost {
    fn log(&self, level: t::LogLevel, message: &str) {
        WasmHost.log(level, message)
    }
    fn get(&self, r: &t::ObjectRef) -> Option<t::RawObject> {
        WasmHost.get(r)
    }
    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<t::RawObject> {
        WasmHost.list(kind, namespace)
    }
    fn calls(&self) -> Vec<t::CallRecord> {
        WasmHost.calls()
    }
    fn children(&self) -> Vec<t::ObservedChild> {
        WasmHost.children()
    }
    fn act_for(&self, object: &t::ObjectRef) -> bool {
        bindings::steward::plugin::round::act_for(&ref_to_wit(object))
    }
    #[cfg(feature = "services")]
    fn services(&self) -> Vec<t::ServiceStatus> {
        bindings::steward::plugin::services::observed()
            .into_iter()
            .map(|o| t::ServiceStatus { auth_required: o.auth_required, ..service_status_from_wit(o.status) })
            .collect()
    }
}

/// `describe-world` of a plugin with a world.
pub fn describe_world(p: &PluginEntry) -> Option<bindings::exports::steward::plugin::world_reconciler::WorldInfo> {
    use crate::world::LinkBy;
    use bindings::exports::steward::plugin::world_reconciler as wr;
    install_panic_hook();
    let info = (p.world.as_ref()?.info)();
    Some(wr::WorldInfo {
        kinds: info.kinds,
        links: info
            .links
            .into_iter()
            .map(|l| wr::Link {
                name: l.name,
                from: l.from,
                to: l.to,
                by: match l.by {
                    LinkBy::OwnerReference => wr::LinkBy::OwnerReference,
                    LinkBy::Field(path) => wr::LinkBy::Field(path),
                    LinkBy::Selector(path) => wr::LinkBy::Selector(path),
                },
            })
            .collect(),
        namespaces: info.namespaces,
    })
}

/// `reconcile-world` of a plugin without a world: the host never calls it (`describe-world`
/// answers none), and an answer would be wrong, so it is a fatal error.
pub fn no_world() -> Result<bindings::exports::steward::plugin::world_reconciler::Answer, w::ReconcileError> {
    Err(w::ReconcileError::Fatal("this plugin has no world reconciler (describe-world answers none)".to_string()))
}

/// Whether the SDK can hand `o`'s effects over: each needs its cargo feature.
fn effects_supported(o: &RawOutcome) -> Result<(), Error> {
    let missing = if !cfg!(feature = "tools") && o.calls.as_ref().is_some_and(|c| !c.is_empty()) {
        Some(("tool calls", "tools"))
    } else if !cfg!(feature = "children") && o.children.as_ref().is_some_and(|c| !c.is_empty()) {
        Some(("child objects", "children"))
    } else if !cfg!(feature = "services") && !o.services.is_empty() {
        Some(("services", "services"))
    } else {
        None
    };
    match missing {
        Some((what, feature)) => Err(Error::fatal(format!(
            "the round asks for {what} for this object, which only a plugin built with steward-sdk's \
             `{feature}` feature can; enable the feature"
        ))),
        None => Ok(()),
    }
}

/// Whether an outcome has effects to hand over (with the `services` feature, the desired services
/// are always set, as a reconcile sets them: an empty list stops the object's services).
fn has_effects(o: &RawOutcome) -> bool {
    o.calls.is_some() || o.children.is_some() || cfg!(feature = "services")
}

/// `reconcile-world` export: runs the world's round, then for each outcome with effects acts for
/// its object (`round.act-for`) and hands the effects over through the capability imports.
pub fn reconcile_world(
    p: &PluginEntry,
    round: bindings::exports::steward::plugin::world_reconciler::Round,
) -> Result<bindings::exports::steward::plugin::world_reconciler::Answer, w::ReconcileError> {
    use bindings::exports::steward::plugin::world_reconciler as wr;
    install_panic_hook();
    let round = round_from_wit(round);
    let answer = p.reconcile_world(&WasmWorldHost, &round).map_err(error_to_wit)?;
    let mut outcomes = Vec::with_capacity(answer.outcomes.len());
    for o in answer.outcomes {
        let object = ref_to_wit(&o.object);
        let result = match o.result.and_then(|raw| effects_supported(&raw).map(|()| raw)) {
            Err(e) => Err(error_to_wit(e)),
            Ok(mut raw) => {
                if has_effects(&raw) {
                    if !bindings::steward::plugin::round::act_for(&object) {
                        return Err(w::ReconcileError::Fatal(format!(
                            "the host would not act for {}, which the round answered for",
                            crate::world::describe_ref(&o.object)
                        )));
                    }
                    if let Some(calls) = raw.calls.take() {
                        request_calls(calls)?;
                    }
                    if let Some(children) = raw.children.take() {
                        desire_children(children)?;
                    }
                    world_services(std::mem::take(&mut raw.services));
                }
                Ok(wr::ObjectOutcome {
                    status: raw.status,
                    conditions: conditions_to_wit(raw.conditions),
                    events: events_to_wit(raw.events),
                })
            }
        };
        outcomes.push(wr::Outcome { object, result });
    }
    Ok(wr::Answer { outcomes, requeue_after_ms: answer.requeue_after_ms })
}

/// Sets the desired services of the object acted for (feature `services`).
#[cfg(feature = "services")]
fn world_services(desired: Vec<t::ServiceSpec>) {
    // `desire` only fails without the feature.
    let _ = desire(response_to_wit(RawOutcome::default()), desired);
}

/// Without the `services` feature there is nothing to set ([`effects_supported`] refused any).
#[cfg(not(feature = "services"))]
fn world_services(_desired: Vec<t::ServiceSpec>) {}

fn round_from_wit(r: bindings::exports::steward::plugin::world_reconciler::Round) -> crate::world::Round {
    use crate::world as wo;
    use bindings::exports::steward::plugin::world_reconciler as wr;
    let obj = |o: w::ObjectRef| t::ObjectRef { kind: o.kind, namespace: o.namespace, name: o.name };
    wo::Round {
        changes: r
            .changes
            .into_iter()
            .map(|c| wo::Change {
                type_: match c.type_ {
                    wr::ChangeType::Added => wo::ChangeType::Added,
                    wr::ChangeType::Modified => wo::ChangeType::Modified,
                    wr::ChangeType::Deleted => wo::ChangeType::Deleted,
                },
                object: obj(c.object),
            })
            .collect(),
        first: r.first,
        topology: wo::Topology::new(
            r.topology.nodes.into_iter().map(raw_from_wit).collect(),
            r.topology
                .edges
                .into_iter()
                .map(|e| wo::Edge { link: e.link, from: wo::NodeId(e.from), to: wo::NodeId(e.to) })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use w::ServicePhase as P;

    #[test]
    fn the_services_import_is_skipped_only_when_no_service_can_want_authorization() {
        assert!(request_says_all([].into_iter()));
        assert!(request_says_all([P::Running, P::Starting, P::Stopped].into_iter()));
        for remote in [P::Connecting, P::Connected, P::Disconnected, P::Failed] {
            assert!(!request_says_all([P::Running, remote].into_iter()), "{remote:?}");
        }
    }
}
