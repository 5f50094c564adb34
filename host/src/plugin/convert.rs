//! Conversions between the generated WIT types and the SDK's plain types the host works with.

use std::collections::BTreeMap;

use steward_sdk::{
    Condition, ConditionStatus, Event, EventType, FieldError, KindInfo, PluginInfo, RawObject, RawOutcome,
    SecretSource, SecretTarget, SecretValue, ServicePhase, ServiceSpec, ServiceStatus, Transport,
};

use super::bindings::steward::plugin::services as ws;
use super::bindings::steward::plugin::types as w;

fn kv_to_wit(m: &BTreeMap<String, String>) -> Vec<w::KeyValue> {
    m.iter().map(|(k, v)| w::KeyValue { key: k.clone(), value: v.clone() }).collect()
}

fn kv_from_wit(kv: Vec<w::KeyValue>) -> BTreeMap<String, String> {
    kv.into_iter().map(|p| (p.key, p.value)).collect()
}

/// An object as the plugin receives it.
pub fn resource_to_wit(r: &RawObject) -> w::Resource {
    w::Resource {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        generation: r.generation,
        labels: kv_to_wit(&r.labels),
        annotations: kv_to_wit(&r.annotations),
        spec: r.spec.clone(),
        status: r.status.clone(),
        deleting: r.deleting,
    }
}

/// A service's phase as the plugin receives it.
pub fn phase_to_wit(phase: ServicePhase) -> w::ServicePhase {
    match phase {
        ServicePhase::Starting => w::ServicePhase::Starting,
        ServicePhase::Running => w::ServicePhase::Running,
        ServicePhase::Stopped => w::ServicePhase::Stopped,
        ServicePhase::Failed => w::ServicePhase::Failed,
        ServicePhase::Connecting => w::ServicePhase::Connecting,
        ServicePhase::Connected => w::ServicePhase::Connected,
        ServicePhase::Disconnected => w::ServicePhase::Disconnected,
    }
}

/// Observed service state as the plugin receives it.
pub fn service_status_to_wit(s: &ServiceStatus) -> w::ServiceStatus {
    w::ServiceStatus {
        name: s.name.clone(),
        phase: phase_to_wit(s.phase),
        pid: s.pid,
        restarts: s.restarts,
        consecutive_failures: s.consecutive_failures,
        next_retry_at: s.next_retry_at.clone(),
        last_exit: s.last_exit.clone(),
        healthy: s.healthy,
        last_connected: s.last_connected.clone(),
        tools: s
            .tools
            .iter()
            .map(|t| w::ToolInfo { name: t.name.clone(), description: t.description.clone() })
            .collect(),
        message: s.message.clone(),
    }
}

/// Observed service state as the `services` interface gives it: the status and what it cannot carry.
pub fn observed_to_wit(s: &ServiceStatus) -> ws::ObservedService {
    ws::ObservedService { status: service_status_to_wit(s), auth_required: s.auth_required }
}

/// A secret reference from `services.set-desired`, as the host works with it.
pub fn secret_from_wit(v: ws::SecretValue) -> SecretValue {
    SecretValue {
        target: match v.target {
            ws::SecretTarget::Env => SecretTarget::Env,
            ws::SecretTarget::Header => SecretTarget::Header,
        },
        name: v.name,
        source: match v.source {
            ws::SecretSource::SecretKeyRef(r) => {
                SecretSource::SecretKeyRef { name: r.name, namespace: r.namespace, key: r.key }
            }
            ws::SecretSource::File(path) => SecretSource::File { path },
            ws::SecretSource::Env(name) => SecretSource::Env { name },
        },
    }
}

/// Bytes of text in secret references, for the output cap.
pub fn secrets_size(v: &[SecretValue]) -> u64 {
    v.iter()
        .map(|s| {
            s.name.len()
                + match &s.source {
                    SecretSource::SecretKeyRef { name, namespace, key } => {
                        name.len() + namespace.as_ref().map_or(0, String::len) + key.len()
                    }
                    SecretSource::File { path } => path.len(),
                    SecretSource::Env { name } => name.len(),
                }
        })
        .sum::<usize>() as u64
}

/// A field error from the plugin, each part one line (they are shown as `file:line:column: path: message` and logged).
pub fn field_error(e: w::FieldError) -> FieldError {
    FieldError { path: super::logs::one_line(&e.path), message: super::logs::one_line(&e.message) }
}

/// What `describe` returned.
pub fn plugin_info(i: w::PluginInfo) -> PluginInfo {
    PluginInfo {
        name: i.name,
        version: i.version,
        kinds: i
            .kinds
            .into_iter()
            .map(|k| KindInfo {
                group: k.group,
                version: k.version,
                kind: k.kind,
                plural: k.plural,
                namespaced: k.namespaced,
                spec_schema: k.spec_schema,
                resync_seconds: k.resync_seconds,
                columns: Vec::new(),
            })
            .collect(),
        capabilities: i.capabilities,
    }
}

/// Bytes of text in a plugin's info, for the output cap.
pub fn info_size(i: &w::PluginInfo) -> u64 {
    let kinds: usize = i
        .kinds
        .iter()
        .map(|k| k.group.len() + k.version.len() + k.kind.len() + k.plural.len() + k.spec_schema.len())
        .sum();
    (i.name.len() + i.version.len() + kinds + i.capabilities.iter().map(String::len).sum::<usize>()) as u64
}

/// Bytes of text one requested tool call holds, for the plugin's output cap.
pub fn call_size(c: &steward_sdk::CallRequest) -> u64 {
    (c.id.len() + c.tool.len()) as u64 + serde_json::to_string(&c.arguments).map_or(0, |t| t.len() as u64)
}

/// A desired service as the host works with it (no secret references: those come from `services.set-desired`).
pub fn service_spec(s: w::ServiceSpec) -> ServiceSpec {
    ServiceSpec {
        name: s.name,
        transport: match s.transport {
            w::Transport::Stdio => Transport::Stdio,
            w::Transport::StreamableHttp => Transport::StreamableHttp,
            w::Transport::Sse => Transport::Sse,
        },
        command: s.command,
        args: s.args,
        env: kv_from_wit(s.env),
        working_dir: s.working_dir,
        url: s.url,
        headers: kv_from_wit(s.headers),
        timeout_ms: s.timeout_ms,
        secrets: Vec::new(),
    }
}

/// Bytes of text one desired service holds, its secret references included, for the output cap.
pub fn service_size(s: &ServiceSpec) -> u64 {
    let kv = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    (s.name.len()
        + s.command.as_ref().map_or(0, String::len)
        + s.args.iter().map(String::len).sum::<usize>()
        + kv(&s.env)
        + s.working_dir.as_ref().map_or(0, String::len)
        + s.url.as_ref().map_or(0, String::len)
        + kv(&s.headers)) as u64
        + secrets_size(&s.secrets)
}

/// Bytes of text an answer holds in what every plugin answers with (status, conditions,
/// events); each unit counts its own part ([`super::Capability::output_size`]).
pub fn outcome_size(r: &RawOutcome) -> u64 {
    let conds: usize = r.conditions.iter().map(|c| c.type_.len() + c.reason.len() + c.message.len()).sum();
    let events: usize = r.events.iter().map(|e| e.reason.len() + e.message.len()).sum();
    (r.status.len() + conds + events) as u64
}

/// An answer that asks for nothing: an empty status object, no conditions, events or effects.
pub fn nothing() -> RawOutcome {
    RawOutcome {
        status: "{}".into(),
        conditions: Vec::new(),
        services: Vec::new(),
        requeue_after_ms: None,
        events: Vec::new(),
        calls: None,
        children: None,
    }
}

/// A response as the host works with it.
pub fn response(r: w::Response) -> RawOutcome {
    RawOutcome {
        status: r.status,
        conditions: r
            .conditions
            .into_iter()
            .map(|c| Condition {
                type_: c.type_,
                status: match c.status {
                    w::ConditionStatus::True => ConditionStatus::True,
                    w::ConditionStatus::False => ConditionStatus::False,
                    w::ConditionStatus::Unknown => ConditionStatus::Unknown,
                },
                reason: c.reason,
                message: c.message,
            })
            .collect(),
        services: r.services.into_iter().map(service_spec).collect(),
        requeue_after_ms: r.requeue_after_ms,
        calls: None,
        children: None,
        events: r
            .events
            .into_iter()
            .map(|e| Event {
                type_: match e.type_ {
                    w::EventType::Normal => EventType::Normal,
                    w::EventType::Warning => EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
    }
}

/// Adds what the optional `columns` export declared to the kinds `describe` named; an error names
/// the kind and the column when a declaration is not usable (an unknown kind, a path that is not
/// a simple JSON path into `.spec` or `.status`, an empty or repeated name).
pub fn add_columns(
    info: &mut PluginInfo,
    declared: Vec<crate::plugin::bindings::columns::exports::steward::plugin::columns::KindColumns>,
) -> Result<(), String> {
    use crate::plugin::bindings::columns::exports::steward::plugin::columns::ColumnType as W;
    use steward_sdk::{ColumnType, PrinterColumn};
    for k in declared {
        let Some(kind) = info.kinds.iter_mut().find(|i| i.kind == k.kind) else {
            return Err(format!("the columns export names kind `{}`, which describe does not list", k.kind));
        };
        let columns: Vec<PrinterColumn> = k
            .columns
            .into_iter()
            .map(|c| PrinterColumn {
                name: super::logs::one_line(&c.name),
                json_path: c.json_path,
                type_: match c.type_ {
                    W::String => ColumnType::String,
                    W::Integer => ColumnType::Integer,
                    W::Number => ColumnType::Number,
                    W::Boolean => ColumnType::Boolean,
                    W::Date => ColumnType::Date,
                },
                description: super::logs::one_line(&c.description),
                priority: c.priority,
            })
            .collect();
        crate::columns::check(&kind.kind, &columns)?;
        kind.columns = columns;
    }
    Ok(())
}
