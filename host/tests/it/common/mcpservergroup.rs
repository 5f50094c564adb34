//! `MCPServerGroup` answer for answer: the objects, scenarios and checks every version of the kind (Rust, Python, TypeScript) is held to.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use steward::plugin::{HostReads, LogSource, Plugin, PluginError, PluginSettings, Read, ReconcileRequest};
use steward_sdk::{ConditionStatus, FieldError, LogLevel, ObjectRef, RawObject, RawOutcome};

/// The namespace the groups of these tests live in.
pub const NS: &str = "team-a";

/// A loaded plugin, shared by every test of a module: compiling an interpreter is seconds of
/// Cranelift, so it is done once, on its own thread.
pub struct Loaded {
    pub plugin: Plugin,
}

/// Loads `wasm` with `settings` on a thread of its own (its own runtime), for a `static`.
pub fn load_once(wasm: PathBuf, settings: PluginSettings) -> Loaded {
    let rt = super::runtime();
    std::thread::spawn(move || {
        let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let bytes = std::fs::read(&wasm).unwrap_or_else(|e| panic!("{}: {e}", wasm.display()));
        let plugin = tokio
            .block_on(Plugin::load(rt, &wasm, bytes, move |_| settings))
            .unwrap_or_else(|e| panic!("loading {}: {e}", wasm.display()));
        Loaded { plugin }
    })
    .join()
    .expect("the loading thread")
}

/// The Rust plugin `mcpservergroup`, loaded once.
pub fn rust() -> &'static Loaded {
    static LOADED: std::sync::OnceLock<Loaded> = std::sync::OnceLock::new();
    LOADED.get_or_init(|| load_once(super::wasm("mcpservergroup"), PluginSettings::default()))
}

/// The host cache of a test: `list` and `get` answer from these objects.
pub struct Cache(pub Vec<RawObject>);

impl HostReads for Cache {
    fn get(&self, r: &ObjectRef) -> Option<RawObject> {
        self.0.iter().find(|o| o.kind == r.kind && o.namespace == r.namespace && o.name == r.name).cloned()
    }
    fn list(&self, kind: &str, ns: Option<&str>) -> Vec<RawObject> {
        self.0.iter().filter(|o| o.kind == kind && ns.is_none_or(|n| n == o.namespace)).cloned().collect()
    }
}

pub fn server(ns: &str, name: &str, labels: &[(&str, &str)], status: Option<&str>) -> RawObject {
    RawObject {
        api_version: "steward.dev/v1alpha1".into(),
        kind: "MCPServer".into(),
        name: name.into(),
        namespace: ns.into(),
        generation: 1,
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        spec: "{}".into(),
        status: status.map(str::to_string),
        ..RawObject::default()
    }
}

/// Six servers of [`NS`], ready and not in every way, and a ready one in another namespace.
pub fn fleet() -> Vec<RawObject> {
    vec![
        // Listed out of order: members are sorted by name.
        server(NS, "zeta", &[("tier", "prod"), ("canary", "true")], Some(r#"{"state":"Starting","health":"Unknown"}"#)),
        server(
            NS,
            "alpha",
            &[("tier", "prod"), ("team", "search")],
            Some(r#"{"state":"Running","health":"Healthy","tools":["search","fetch",7,{"name":"x"}]}"#),
        ),
        server(
            NS,
            "beta",
            &[("tier", "prod")],
            Some(r#"{"state":"Connected","health":"Healthy","tools":["fetch","summarize"]}"#),
        ),
        server(
            NS,
            "gamma",
            &[("tier", "dev"), ("team", "search")],
            Some(r#"{"state":"Running","health":"Unhealthy","tools":["debug"]}"#),
        ),
        server(NS, "delta", &[], None),
        server(NS, "epsilon", &[("tier", "staging")], Some("not json")),
        server("other", "omega", &[("tier", "prod")], Some(r#"{"state":"Running","health":"Healthy","tools":["x"]}"#)),
    ]
}

pub fn group(spec: Value) -> RawObject {
    RawObject {
        api_version: "steward.dev/v1alpha1".into(),
        kind: "MCPServerGroup".into(),
        name: "g".into(),
        namespace: NS.into(),
        generation: 1,
        spec: spec.to_string(),
        ..RawObject::default()
    }
}

pub fn group_raw(spec: &str) -> RawObject {
    RawObject { spec: spec.into(), ..group(json!({})) }
}

/// One reconcile scenario: the spec, the servers the host holds, and the expected answer.
pub struct Scenario {
    pub name: &'static str,
    pub spec: Value,
    pub servers: Vec<RawObject>,
    /// Expected member names, in order.
    pub members: &'static [&'static str],
    pub ready: u64,
    pub tools: &'static [&'static str],
    pub missing: &'static [&'static str],
    pub holds: bool,
    pub reason: &'static str,
    pub message: &'static str,
}

pub fn scenarios() -> Vec<Scenario> {
    let all = fleet();
    vec![
        Scenario {
            name: "no servers at all",
            spec: json!({}),
            servers: vec![],
            members: &[],
            ready: 0,
            tools: &[],
            missing: &[],
            holds: false,
            reason: "NoServersSelected",
            message: "no MCPServer in namespace team-a matches the selector",
        },
        Scenario {
            name: "only servers of another namespace",
            spec: json!({}),
            servers: all.iter().filter(|s| s.namespace != NS).cloned().collect(),
            members: &[],
            ready: 0,
            tools: &[],
            missing: &[],
            holds: false,
            reason: "NoServersSelected",
            message: "no MCPServer in namespace team-a matches the selector",
        },
        Scenario {
            name: "matchLabels matching nothing",
            spec: json!({"selector": {"matchLabels": {"tier": "nope"}}}),
            servers: all.clone(),
            members: &[],
            ready: 0,
            tools: &[],
            missing: &[],
            holds: false,
            reason: "NoServersSelected",
            message: "no MCPServer in namespace team-a matches the selector",
        },
        Scenario {
            name: "no selector selects the whole namespace",
            spec: json!({}),
            servers: all.clone(),
            members: &["alpha", "beta", "delta", "epsilon", "gamma", "zeta"],
            ready: 2,
            tools: &["fetch", "search", "summarize"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "2 of 6 selected MCPServers are ready, offering 3 tools",
        },
        Scenario {
            name: "an empty selector selects the whole namespace",
            spec: json!({"selector": {"matchLabels": {}, "matchExpressions": []}, "requiredTools": []}),
            servers: all.clone(),
            members: &["alpha", "beta", "delta", "epsilon", "gamma", "zeta"],
            ready: 2,
            tools: &["fetch", "search", "summarize"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "2 of 6 selected MCPServers are ready, offering 3 tools",
        },
        Scenario {
            name: "matchLabels",
            spec: json!({"selector": {"matchLabels": {"tier": "prod"}}}),
            servers: all.clone(),
            members: &["alpha", "beta", "zeta"],
            ready: 2,
            tools: &["fetch", "search", "summarize"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "2 of 3 selected MCPServers are ready, offering 3 tools",
        },
        Scenario {
            name: "every matchLabels pair must match",
            spec: json!({"selector": {"matchLabels": {"tier": "prod", "team": "search"}}}),
            servers: all.clone(),
            members: &["alpha"],
            ready: 1,
            tools: &["fetch", "search"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "1 of 1 selected MCPServers are ready, offering 2 tools",
        },
        Scenario {
            name: "In, none ready",
            spec: json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["dev", "staging"]}]}}),
            servers: all.clone(),
            members: &["epsilon", "gamma"],
            ready: 0,
            tools: &[],
            missing: &[],
            holds: false,
            reason: "NoServersReady",
            message: "none of the 2 selected MCPServers is ready",
        },
        Scenario {
            name: "NotIn keeps servers without the label",
            spec: json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]}}),
            servers: all.clone(),
            members: &["delta", "epsilon", "gamma"],
            ready: 0,
            tools: &[],
            missing: &[],
            holds: false,
            reason: "NoServersReady",
            message: "none of the 3 selected MCPServers is ready",
        },
        Scenario {
            name: "Exists",
            spec: json!({"selector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}),
            servers: all.clone(),
            members: &["alpha", "gamma"],
            ready: 1,
            tools: &["fetch", "search"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "1 of 2 selected MCPServers are ready, offering 2 tools",
        },
        Scenario {
            name: "DoesNotExist",
            spec: json!({"selector": {"matchExpressions": [{"key": "team", "operator": "DoesNotExist", "values": []}]}}),
            servers: all.clone(),
            members: &["beta", "delta", "epsilon", "zeta"],
            ready: 1,
            tools: &["fetch", "summarize"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "1 of 4 selected MCPServers are ready, offering 2 tools",
        },
        Scenario {
            name: "requirements are ANDed",
            spec: json!({"selector": {
                "matchLabels": {"tier": "prod"},
                "matchExpressions": [
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "team", "operator": "NotIn", "values": ["search"]},
                ],
            }}),
            servers: all.clone(),
            members: &["beta"],
            ready: 1,
            tools: &["fetch", "summarize"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "1 of 1 selected MCPServers are ready, offering 2 tools",
        },
        Scenario {
            name: "required tools all offered",
            spec: json!({"selector": {"matchLabels": {"tier": "prod"}}, "requiredTools": ["summarize", "fetch"]}),
            servers: all.clone(),
            members: &["alpha", "beta", "zeta"],
            ready: 2,
            tools: &["fetch", "search", "summarize"],
            missing: &[],
            holds: true,
            reason: "ServersReady",
            message: "2 of 3 selected MCPServers are ready, offering 3 tools",
        },
        Scenario {
            name: "required tools missing, one only on a member that is not ready",
            spec: json!({"requiredTools": ["zzz", "search", "debug"], "unknownField": true}),
            servers: all.clone(),
            members: &["alpha", "beta", "delta", "epsilon", "gamma", "zeta"],
            ready: 2,
            tools: &["fetch", "search", "summarize"],
            missing: &["debug", "zzz"],
            holds: false,
            reason: "ToolsMissing",
            message: "no ready member offers: debug, zzz",
        },
    ]
}

/// Per member of `fleet()`: (ready, state, toolCount).
pub fn member_facts(name: &str) -> (bool, &'static str, u64) {
    match name {
        "alpha" => (true, "Running", 2),
        "beta" => (true, "Connected", 2),
        "gamma" => (false, "Running", 0),
        "delta" => (false, "Unknown", 0),
        "epsilon" => (false, "Unknown", 0),
        "zeta" => (false, "Starting", 0),
        other => panic!("no member {other} in the fleet"),
    }
}

pub fn expected_status(s: &Scenario) -> Value {
    let members: Vec<Value> = s
        .members
        .iter()
        .map(|m| {
            let (ready, state, count) = member_facts(m);
            json!({"name": m, "ready": ready, "state": state, "toolCount": count})
        })
        .collect();
    json!({
        "selected": s.members.len(),
        "ready": s.ready,
        "members": members,
        "tools": s.tools,
        "missingTools": s.missing,
    })
}

pub fn request(obj: RawObject) -> ReconcileRequest {
    ReconcileRequest { resource: obj, ..Default::default() }
}

pub async fn run(p: &Plugin, s: &Scenario) -> (RawOutcome, Vec<Read>, Vec<steward::plugin::LogLine>) {
    let report = p.reconcile(&request(group(s.spec.clone())), Arc::new(Cache(s.servers.clone()))).await;
    let out = report.result.unwrap_or_else(|e| panic!("{}: {}: {e}", p.name(), s.name));
    (out, report.reads, report.logs)
}

pub fn status_of(out: &RawOutcome) -> Value {
    serde_json::from_str(&out.status).unwrap_or_else(|e| panic!("status is not JSON ({e}): {}", out.status))
}

pub fn conditions_of(out: &RawOutcome) -> Value {
    serde_json::to_value(&out.conditions).unwrap()
}
/// Specs that break rules, with the paths their errors must name (sorted).
pub fn bad_specs() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("[]", &["spec"]),
        ("not json", &["spec"]),
        ("null", &["spec"]),
        (r#"{"selector": "prod"}"#, &["spec.selector"]),
        // Optional fields may be left out, not given as null.
        (r#"{"selector": null}"#, &["spec.selector"]),
        (r#"{"requiredTools": null}"#, &["spec.requiredTools"]),
        (r#"{"selector": {"matchLabels": {"tier": 1}}}"#, &["spec.selector.matchLabels.tier"]),
        (r#"{"selector": {"matchExpressions": {"key": "a"}}}"#, &["spec.selector.matchExpressions"]),
        (r#"{"selector": {"matchExpressions": [{"operator": "Exists"}]}}"#, &["spec.selector.matchExpressions[0]"]),
        (
            r#"{"selector": {"matchExpressions": [{"key": "a", "operator": 3}]}}"#,
            &["spec.selector.matchExpressions[0].operator"],
        ),
        (r#"{"requiredTools": "search"}"#, &["spec.requiredTools"]),
        (r#"{"requiredTools": ["search", 2]}"#, &["spec.requiredTools[1]"]),
        // A wrong type stops the parse: only the first one, in the order written, is reported.
        (r#"{"requiredTools": [1], "selector": "x"}"#, &["spec.requiredTools[0]"]),
        (
            r#"{"selector": {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "", "operator": "Equals", "values": ["x"]}]}, "requiredTools": [""]}"#,
            &["spec.selector.matchExpressions[1].operator"],
        ),
        (
            r#"{"selector": {"matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "NotIn", "values": []}]}}"#,
            &["spec.selector.matchExpressions[0].values", "spec.selector.matchExpressions[1].values"],
        ),
        (
            r#"{"selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}, {"key": "b", "operator": "DoesNotExist", "values": ["y"]}]}}"#,
            &["spec.selector.matchExpressions[0].values", "spec.selector.matchExpressions[1].values"],
        ),
        (
            r#"{"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}, {"key": "", "operator": "Exists"}]}}"#,
            &["spec.selector.matchExpressions[1].key"],
        ),
        (r#"{"selector": {"matchLabels": {"": "x", "tier": "prod"}}}"#, &["spec.selector.matchLabels"]),
        (
            r#"{"requiredTools": ["search", " ", "fetch", "search", "", "fetch"]}"#,
            &["spec.requiredTools[1]", "spec.requiredTools[3]", "spec.requiredTools[4]", "spec.requiredTools[5]"],
        ),
        // Every rule is checked once the types are right.
        (
            r#"{"requiredTools": ["a", "a"], "selector": {"matchLabels": {" ": "x"}, "matchExpressions": [{"key": " ", "operator": "In"}]}}"#,
            &[
                "spec.requiredTools[1]",
                "spec.selector.matchExpressions[0].key",
                "spec.selector.matchExpressions[0].values",
                "spec.selector.matchLabels",
            ],
        ),
    ]
}

/// The first bad spec whose text contains `needle`.
pub fn bad_spec(needle: &str) -> (&'static str, &'static [&'static str]) {
    bad_specs().into_iter().find(|(s, _)| s.contains(needle)).unwrap_or_else(|| panic!("no bad spec with {needle}"))
}

pub fn good_specs() -> Vec<Value> {
    vec![
        json!({}),
        json!({"selector": {}}),
        json!({"somethingElse": [1, 2], "selector": {"matchLabels": {"tier": "prod"}, "future": 1}}),
        json!({
            "selector": {
                "matchLabels": {"tier": "prod"},
                "matchExpressions": [
                    {"key": "team", "operator": "In", "values": ["search"]},
                    {"key": "team", "operator": "NotIn", "values": ["x", "y"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "tier", "operator": "Exists", "values": []},
                ],
            },
            "requiredTools": ["search", "fetch"],
        }),
    ]
}

pub fn paths(errs: &[FieldError]) -> Vec<String> {
    let mut p: Vec<String> = errs.iter().map(|e| e.path.clone()).collect();
    p.sort();
    p
}
/// A group being deleted, with the status of an earlier reconcile.
pub fn deleting_group() -> RawObject {
    RawObject { deleting: true, status: Some(r#"{"selected":1,"ready":0}"#.into()), ..group(json!({})) }
}
/// Everything an answer says, as JSON: status, conditions, services, requeue and events.
pub fn answer(out: &RawOutcome) -> Value {
    json!({
        "status": status_of(out),
        "conditions": conditions_of(out),
        "services": out.services.len(),
        "requeueAfterMs": out.requeue_after_ms,
        "events": out.events.len(),
    })
}

/// `describe` names the plugin `name` and the kind, with the Rust plugin's schema.
pub async fn check_describe(p: &Plugin, name: &str) {
    let info = p.describe().await.result.unwrap();
    assert_eq!(&info, p.info(), "describe is pure");
    assert_eq!((info.name.as_str(), info.version.as_str()), (name, "0.1.0"));
    assert_eq!(info.kinds.len(), 1);
    let k = &info.kinds[0];
    assert_eq!(
        (k.group.as_str(), k.version.as_str(), k.kind.as_str(), k.plural.as_str(), k.namespaced, k.resync_seconds),
        ("steward.dev", "v1alpha1", "MCPServerGroup", "mcpservergroups", true, 0)
    );
    let schema: Value = serde_json::from_str(&k.spec_schema).expect("the spec schema is JSON");
    assert_eq!(schema["type"], "object");
    let selector = &schema["properties"]["selector"];
    assert_eq!(selector["type"], "object");
    assert_eq!(selector["properties"]["matchLabels"]["type"], "object");
    assert_eq!(selector["properties"]["matchLabels"]["additionalProperties"], json!({"type": "string"}));
    let expr = &selector["properties"]["matchExpressions"];
    assert_eq!(expr["type"], "array");
    assert_eq!(expr["items"]["required"], json!(["key", "operator"]));
    assert_eq!(expr["items"]["properties"]["key"]["type"], "string");
    assert_eq!(expr["items"]["properties"]["operator"]["enum"], json!(["In", "NotIn", "Exists", "DoesNotExist"]));
    assert_eq!(expr["items"]["properties"]["values"]["items"], json!({"type": "string"}));
    assert_eq!(schema["properties"]["requiredTools"]["type"], "array");
    assert_eq!(schema["properties"]["requiredTools"]["items"], json!({"type": "string"}));
    for described in [&schema, selector, expr, &schema["properties"]["requiredTools"]] {
        assert!(described["description"].as_str().is_some_and(|d| !d.is_empty()), "no description in {described}");
    }
}

/// `validate` names the field of each problem, with messages that say what would be right.
pub async fn check_validate(p: &Plugin) {
    for (spec, want) in bad_specs() {
        let errs = p.validate(&group_raw(spec)).await.result.unwrap();
        assert_eq!(paths(&errs), *want, "spec {spec}: {errs:?}");
        assert!(errs.iter().all(|e| !e.message.is_empty()), "{errs:?}");
    }
    for spec in good_specs() {
        let errs = p.validate(&group(spec.clone())).await.result.unwrap();
        assert!(errs.is_empty(), "spec {spec}: {errs:?}");
    }
    // The messages say what would be right.
    let errs = p.validate(&group_raw(bad_spec(r#""operator": "In"}"#).0)).await.result.unwrap();
    assert!(errs[0].message.contains("In needs at least one value"), "{errs:?}");
    let errs = p
        .validate(&group_raw(bad_spec(r#""values": ["x"]}, {"key": "b", "operator": "DoesNotExist""#).0))
        .await
        .result
        .unwrap();
    assert!(errs[0].message.contains("Exists takes no values"), "{errs:?}");
    let errs = p.validate(&group_raw(bad_spec("Equals").0)).await.result.unwrap();
    assert!(errs[0].message.contains("Equals") && errs[0].message.contains("DoesNotExist"), "{errs:?}");
    // Another kind is not this plugin's.
    let other = RawObject { kind: "MCPServer".into(), ..group(json!({})) };
    assert_eq!(paths(&p.validate(&other).await.result.unwrap()), ["kind"]);
}

/// `reconcile` refuses an invalid spec with its field errors and reads nothing.
pub async fn check_invalid(p: &Plugin) {
    let (spec, want) = bad_spec(r#""search", " ", "fetch""#);
    let report = p.reconcile(&request(group_raw(spec)), Arc::new(Cache(fleet()))).await;
    match report.result {
        Err(PluginError::Invalid(errs)) => assert_eq!(paths(&errs), *want),
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert!(report.reads.is_empty(), "nothing is read for a spec that cannot be used: {:?}", report.reads);
}

/// `reconcile` reports members, tools and the Ready condition in every scenario, and logs.
pub async fn check_scenarios(p: &Plugin) {
    for s in scenarios() {
        let (out, reads, logs) = run(p, &s).await;
        assert_eq!(status_of(&out), expected_status(&s), "{}", s.name);
        assert_eq!(out.conditions.len(), 1, "{}: {:?}", s.name, out.conditions);
        let c = &out.conditions[0];
        assert_eq!(c.type_, "Ready");
        let want = if s.holds { ConditionStatus::True } else { ConditionStatus::False };
        assert_eq!((c.status, c.reason.as_str(), c.message.as_str()), (want, s.reason, s.message), "{}", s.name);
        assert!(out.services.is_empty() && out.events.is_empty() && out.requeue_after_ms.is_none(), "{}", s.name);
        assert_eq!(reads, vec![Read::List { kind: "MCPServer".into(), namespace: Some(NS.into()) }], "{}", s.name);
        let line = format!("selected {}, ready {}", s.members.len(), s.ready);
        assert!(
            logs.iter().any(|l| l.source == LogSource::Log && l.level == LogLevel::Debug && l.message.contains(&line)),
            "{}: no debug line `{line}` in {logs:?}",
            s.name
        );
    }
}

/// A namespace of 2000 servers fits the plugin's memory.
pub async fn check_large_namespace(p: &Plugin) {
    let tools: Vec<String> = (0..20).map(|t| format!("tool_{t:02}")).collect();
    let status = json!({"state": "Running", "health": "Healthy", "tools": tools}).to_string();
    let servers: Vec<RawObject> =
        (0..2000).map(|i| server(NS, &format!("s{i:04}"), &[("tier", "prod")], Some(&status))).collect();
    let report = p.reconcile(&request(group(json!({"requiredTools": ["tool_19"]}))), Arc::new(Cache(servers))).await;
    let out = report.result.unwrap_or_else(|e| panic!("{e}"));
    let status = status_of(&out);
    assert_eq!((status["selected"].as_u64(), status["ready"].as_u64()), (Some(2000), Some(2000)));
    assert_eq!(status["members"][1999]["name"], "s1999");
    assert_eq!(status["tools"].as_array().map(Vec::len), Some(20));
    assert_eq!(out.conditions[0].reason, "ServersReady");
}

/// `finalize` keeps the last status and reads nothing, like the Rust SDK's default.
pub async fn check_finalize(p: &Plugin) {
    let report = p.finalize(&request(deleting_group()), Arc::new(Cache(fleet()))).await;
    let out = report.result.unwrap();
    assert_eq!(status_of(&out), json!({"selected": 1, "ready": 0}));
    assert!(out.conditions.is_empty() && out.services.is_empty() && out.events.is_empty());
    assert!(report.reads.is_empty(), "{:?}", report.reads);
}

/// Every way `a` (called `label`) and the Rust plugin answer differently on the same objects.
pub async fn differences(a: &Plugin, label: &str) -> Vec<String> {
    let rs = rust();
    assert_eq!(rs.plugin.info().name, "mcpservergroup");
    let (pk, rk) = (&a.info().kinds, &rs.plugin.info().kinds);
    assert_eq!((pk.len(), rk.len()), (1, 1));
    let strip = |k: &steward_sdk::KindInfo| {
        (k.group.clone(), k.version.clone(), k.kind.clone(), k.plural.clone(), k.namespaced, k.resync_seconds)
    };
    assert_eq!(strip(&pk[0]), strip(&rk[0]));
    let mut differ = Vec::new();
    let mut objects: Vec<RawObject> = bad_specs().into_iter().map(|(spec, _)| group_raw(spec)).collect();
    objects.extend(good_specs().into_iter().map(group));
    objects.push(RawObject { kind: "MCPServer".into(), ..group(json!({})) });
    for obj in &objects {
        let x = a.validate(obj).await.result.unwrap();
        let y = rs.plugin.validate(obj).await.result.unwrap();
        if paths(&x) != paths(&y) {
            differ.push(format!("validate of {} {}: {label} {x:?}, rust {y:?}", obj.kind, obj.spec));
        }
    }
    for s in scenarios() {
        let (x, _, _) = run(a, &s).await;
        let (y, _, _) = run(&rs.plugin, &s).await;
        let (x, y) = (answer(&x), answer(&y));
        if x != y {
            differ.push(format!("reconcile `{}`: {label} {x}, rust {y}", s.name));
        }
    }
    let (spec, _) = bad_spec(r#""search", " ", "fetch""#);
    let x = a.reconcile(&request(group_raw(spec)), Arc::new(Cache(fleet()))).await.result.unwrap_err();
    let y = rs.plugin.reconcile(&request(group_raw(spec)), Arc::new(Cache(fleet()))).await.result.unwrap_err();
    match (&x, &y) {
        (PluginError::Invalid(m), PluginError::Invalid(n)) if paths(m) == paths(n) => {}
        _ => differ.push(format!("reconcile of an invalid spec: {label} {x:?}, rust {y:?}")),
    }
    let x = a.finalize(&request(deleting_group()), Arc::new(Cache(fleet()))).await.result.unwrap();
    let y = rs.plugin.finalize(&request(deleting_group()), Arc::new(Cache(fleet()))).await.result.unwrap();
    let (x, y) = (answer(&x), answer(&y));
    if x != y {
        differ.push(format!("finalize: {label} {x}, rust {y}"));
    }
    differ
}
