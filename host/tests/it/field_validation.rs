//! Field validation like a Kubernetes API server's: unknown spec fields pruned, reported as warnings (or refused under `strict`), and plugin warnings, with real files, real hosts and the real bundled plugins.

use std::time::Duration;

use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::common;
use crate::common::host::{Host, misbehave};
use crate::common::kube::{kube_e2e, misbehave_ar, status, wait_obj};

const T: Duration = Duration::from_secs(60);

const UNKNOWN: &str = "spec.notAMusterField: unknown field, ignored";

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

/// A stdio `MCPServer` running the example server, with `extra` spec lines after line 11.
fn server(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\"]\n  autoStart: true\n  toolPrefix: ex_\n  timeout: 10\n{extra}",
        server_bin()
    )
}

fn state(v: Option<&Value>) -> &str {
    v.and_then(|v| v["status"]["state"].as_str()).unwrap_or("")
}

fn warnings(v: Option<&Value>) -> Vec<String> {
    let Some(list) = v.and_then(|v| v["warnings"].as_array()) else { return Vec::new() };
    list.iter()
        .map(|w| format!("{}: {}", w["path"].as_str().unwrap_or(""), w["message"].as_str().unwrap_or("")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_is_a_warning_under_warn_and_the_server_runs_as_usual() {
    let mut h = Host::new("");
    h.start().await;
    h.write("s.yaml", &server("git", "  notAMusterField: 1\n"));
    let v = h
        .wait_object("MCPServer/default/git", T, "Running with a warning", |v| {
            state(v) == "Running" && !warnings(v).is_empty()
        })
        .await
        .unwrap();
    assert_eq!(v["phase"], "Synced", "{v:#}");
    assert_eq!(
        v["warnings"],
        json!([{"path": "spec.notAMusterField", "message": "unknown field, ignored", "source": "schema"}])
    );
    let last = v["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["warnings"], json!([UNKNOWN]), "{v:#}");
    assert!(v["lastError"].is_null(), "{v:#}");
    // `steward status` shows it in the table, and whole in one object's detail.
    let (code, out, _) = h.cli(&["status", "MCPServer"]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("1 warning(s): {UNKNOWN}")), "{out}");
    let (_, out, _) = h.cli(&["status", "MCPServer/default/git"]);
    assert!(out.contains("spec.notAMusterField"), "{out}");

    // Without the field the warning clears, and the history says when.
    h.write("s.yaml", &server("git", ""));
    let v = h
        .wait_object("MCPServer/default/git", T, "no warnings any more", |v| {
            v.is_some_and(|v| v["observedGeneration"] == 2) && warnings(v).is_empty()
        })
        .await
        .unwrap();
    assert!(v.get("warnings").is_some_and(|w| w == &json!([])), "{v:#}");
    let last = v["history"].as_array().unwrap().last().unwrap().clone();
    assert!(last.get("warnings").is_none(), "{last:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_fails_the_object_under_strict_and_nothing_starts() {
    let mut h = Host::new("field_validation: strict\n");
    h.start().await;
    h.write("s.yaml", &server("git", "  notAMusterField: 1\n"));
    let v = h
        .wait_object("MCPServer/default/git", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed"))
        .await
        .unwrap();
    let err = v["lastError"].as_str().unwrap_or_default();
    assert!(err.contains("spec.notAMusterField") && err.contains("unknown field"), "{err}");
    assert!(v["status"]["pid"].is_null(), "nothing was started: {v:#}");
    assert!(warnings(Some(&v)).is_empty(), "{v:#}");
}

#[test]
fn check_prints_each_warning_where_its_field_is_and_fails_only_when_strict() {
    let h = Host::new("");
    h.write("s.yaml", &server("git", "  notAMusterField: 1\n"));
    h.write(
        "w.yaml",
        "apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: flow\nspec:\n  steps:\n    - id: one\n      tool: ex_echo\n      input_schema:\n        type: object\n",
    );
    h.write("m.yaml", &format!("{}  warn: mind the gap\n", misbehave("m", "ok")));
    let (code, out, err) = h.cli(&["check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("s.yaml:12:3: warning: {UNKNOWN}\n")), "{out}");
    assert!(out.contains("w.yaml:9:7: warning: spec.steps[0].input_schema: unknown field, ignored\n"), "{out}");
    assert!(out.contains("m.yaml:7:3: warning: spec.warn: mind the gap\n"), "a plugin's warning: {out}");
    assert!(out.contains("no problems, 3 warning(s)"), "{out}");

    let (code, out, err) = h.cli(&["check", "--strict"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("3 warning(s)") && err.contains("--strict"), "{err}");
}

#[test]
fn check_honours_the_setting() {
    let h = Host::new("field_validation: ignore\n");
    h.write("s.yaml", &server("git", "  notAMusterField: 1\n"));
    let (code, out, err) = h.cli(&["check", "--strict"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("warning"), "{out}");

    let h = Host::new("field_validation: strict\n");
    h.write("s.yaml", &server("git", "  notAMusterField: 1\n"));
    let (code, out, err) = h.cli(&["check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("s.yaml:1:1: MCPServer/default/git: spec.notAMusterField: unknown field"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_warning_reaches_the_status_and_goes_when_the_spec_changes() {
    let mut h = Host::new("");
    h.start().await;
    h.write("m.yaml", &format!("{}  warn: mind the gap\n", misbehave("m", "ok")));
    let v = h
        .wait_object("Misbehave/default/m", T, "Synced with the plugin's warning", |v| {
            common::host::synced(v) && !warnings(v).is_empty()
        })
        .await
        .unwrap();
    assert_eq!(v["warnings"], json!([{"path": "spec.warn", "message": "mind the gap", "source": "plugin"}]));
    assert_eq!(v["status"]["ok"], true);
    h.write("m.yaml", &misbehave("m", "ok"));
    h.wait_object("Misbehave/default/m", T, "no warnings", |v| {
        v.is_some_and(|v| v["observedGeneration"] == 2) && warnings(v).is_empty()
    })
    .await;
    // Warnings that cannot be read (the call traps) are a warning too; the object goes on.
    h.write("m.yaml", &format!("{}  warn: panic\n", misbehave("m", "ok")));
    let v = h
        .wait_object("Misbehave/default/m", T, "a warning saying why", |v| {
            v.is_some_and(|v| v["observedGeneration"] == 3) && !warnings(v).is_empty()
        })
        .await
        .unwrap();
    assert_eq!(v["phase"], "Synced", "{v:#}");
    let w = warnings(Some(&v));
    assert!(
        w[0].starts_with("spec: the plugin's warnings could not be read") && w[0].contains("deliberate panic"),
        "{w:?}"
    );
}

kube_e2e! {
    /// On the fake and the real API server: a plugin's warnings land in the status, with an Event.
    async fn in_kubernetes_mode_warnings_are_written_to_the_status_and_announced_by_an_event(k: Kube) {
        let (engine, _dir) = k.host(&["misbehave"], "leaderElection: { enabled: false }").await;
        let ar = misbehave_ar();
        let api = k.api(&ar);
        let mut o = DynamicObject::new("m", &ar).within(&k.ns);
        o.data = json!({ "spec": { "behavior": "ok", "warn": "mind the gap" } });
        api.create(&PostParams::default(), &o).await.unwrap();
        let got = wait_obj(&api, "m", "warnings in the status", |o| status(o)["steward"]["warnings"].is_array())
            .await
            .unwrap();
        let host = &status(Some(&got))["steward"];
        assert_eq!(host["warnings"], json!([{"path": "spec.warn", "message": "mind the gap", "source": "plugin"}]));
        assert_eq!(host["phase"], "Synced");
        let is = |e: &Value| e["regarding"]["name"] == "m" && e["reason"] == "SpecWarnings" && e["type"] == "Warning";
        let events =
            common::eventually(T, "a Warning event SpecWarnings for m", async || k.events().await, |all| {
                all.iter().any(is)
            })
            .await;
        let event = events.into_iter().find(is).unwrap();
        assert!(event["note"].as_str().unwrap_or("").contains("spec.warn: mind the gap"), "{event:#}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

/// The `lint` export is optional: an SDK-built component has it, a component without it (the
/// Python plugin, built against world `plugin`) loads and simply has no warnings of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lint_export_is_optional() {
    let rt = common::runtime();
    let noop = common::load(&rt, "misbehave", Default::default()).await;
    assert!(noop.has_warnings());
    let mut req = common::misbehave("ok", json!({"warn": "careful"}));
    let found = noop.warnings(&req.resource).await.expect("exported").result.unwrap();
    assert_eq!((found[0].path.as_str(), found[0].message.as_str()), ("spec.warn", "careful"));
    req.resource.spec = "{\"behavior\": 5}".into();
    assert!(
        noop.warnings(&req.resource).await.unwrap().result.unwrap().is_empty(),
        "a spec that does not parse has none"
    );

    let _heavy = common::heavy().await;
    let wasm = steward_plugin_build::python_plugin().unwrap_or_else(|e| panic!("{e}"));
    let bytes = std::fs::read(&wasm).unwrap();
    let python = steward::plugin::Plugin::load(rt.clone(), &wasm, bytes, |_| Default::default()).await.unwrap();
    assert!(!python.has_warnings());
    assert!(python.warnings(&common::request("MCPServerGroup", "g", json!({})).resource).await.is_none());
}
