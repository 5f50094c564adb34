//! Table tests of the matching rules and of the scenario format's errors.

use serde_json::json;

use super::*;

fn mismatches(expected: serde_json::Value, actual: serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    compare("", &expected, Some(&actual), &mut out);
    out.iter().map(ToString::to_string).collect()
}

#[test]
fn maps_match_by_the_keys_they_name() {
    assert!(mismatches(json!({"a": 1}), json!({"a": 1, "b": 2})).is_empty());
    assert_eq!(
        mismatches(json!({"a": 1, "c": 3}), json!({"a": 2})),
        ["a: expected 1, got 2", "c: expected 3, got (absent)"]
    );
    assert_eq!(
        mismatches(json!({"a": {"b": [1, {"c": true}]}}), json!({"a": {"b": [1, {"c": false}]}})),
        ["a.b[1].c: expected true, got false"]
    );
}

#[test]
fn lists_match_item_by_item_and_by_length() {
    assert!(mismatches(json!([1, 2]), json!([1, 2])).is_empty());
    assert_eq!(mismatches(json!([1]), json!([1, 2])), [": expected 1 items, got 2 items: [1,2]"]);
    assert_eq!(mismatches(json!([2, 1]), json!([1, 2])), ["[0]: expected 2, got 1", "[1]: expected 1, got 2"]);
}

#[test]
fn conditions_match_by_type() {
    let actual = json!([{"type": "Ready", "status": "True", "reason": "Ok"}, {"type": "Degraded", "status": "False"}]);
    assert!(
        mismatches(
            json!([{"type": "Degraded", "status": "False"}, {"type": "Ready", "status": "True"}]),
            actual.clone()
        )
        .is_empty()
    );
    assert_eq!(
        mismatches(json!([{"type": "Ready", "reason": "Bad"}, {"type": "Degraded"}]), actual.clone()),
        ["[Ready].reason: expected \"Bad\", got \"Ok\""]
    );
    assert_eq!(
        mismatches(json!([{"type": "Ready"}]), actual),
        [": expected 1 items (Ready), got 2 items (Ready, Degraded)"]
    );
}

#[test]
fn numbers_match_by_value_and_null_matches_only_null() {
    assert!(mismatches(json!({"n": 2}), json!({"n": 2.0})).is_empty());
    assert_eq!(mismatches(json!({"n": null}), json!({"n": []})), ["n: expected null, got []"]);
    assert!(mismatches(json!({"n": null}), json!({"n": null})).is_empty());
}

const FILE: &str = r#"
plugin:
  capabilities: []
cache:
  - apiVersion: steward.dev/v1alpha1
    kind: MCPServer
    metadata: {name: a, namespace: team-a, labels: {tier: prod}}
    status: {ready: true}
scenarios:
  - name: first
    object:
      apiVersion: steward.dev/v1alpha1
      kind: MCPServerGroup
      metadata: {name: g, namespace: team-a}
      spec: {selector: {matchLabels: {tier: prod}}}
    expect:
      status: {selected: 1}
      calls: null
  - name: second
    call: finalize
    object: {apiVersion: v1, kind: Thing, metadata: {name: t}}
"#;

#[test]
fn a_file_parses_into_objects_as_a_plugin_receives_them() {
    let f = parse("s.yaml", FILE).unwrap();
    assert_eq!(f.cache.len(), 1);
    assert_eq!(f.cache[0].labels["tier"], "prod");
    assert_eq!(f.cache[0].status.as_deref(), Some(r#"{"ready":true}"#));
    let [first, second] = &f.scenarios[..] else { panic!("two scenarios") };
    assert_eq!((first.name.as_str(), first.call, first.line), ("first", Call::Reconcile, Some(10)));
    assert_eq!(first.object.generation, 1);
    assert_eq!(first.expect.calls, Some(serde_json::Value::Null), "a written null is expected, not left out");
    assert_eq!(first.expect.children, None);
    assert_eq!((second.object.namespace.as_str(), second.object.deleting), ("default", true));
    assert_eq!(second.object.spec, "{}");
}

#[test]
fn a_bad_file_says_where_and_what() {
    let cases: &[(&str, &str)] = &[
        ("scenarios: []", "s.yaml: `scenarios` is empty: write at least one"),
        (
            "scenarios:\n  - name: x\n    object: {kind: K, metadata: {name: n}}",
            "s.yaml:3: the object has no `apiVersion`",
        ),
        (
            "scenarios:\n  - name: x\n    object: {apiVersion: v1, kind: K, metadata: {name: n}}\n  - name: x\n    object: {apiVersion: v1, kind: K, metadata: {name: n}}",
            "s.yaml:4: two scenarios are named \"x\" (first at line 2); names must be unique",
        ),
        (
            "scenarios:\n  - name: x\n    object: {apiVersion: v1, kind: K, metadata: {name: n}}\n    expect: {result: green}",
            "s.yaml:2: expect.result \"green\" is not one of ok, retry, fatal, invalid, crashed, timeout, memory, error",
        ),
        (
            "scenarios:\n  - name: x\n    object: {apiVersion: v1, kind: K, metadata: {name: n}, spek: {}}",
            "s.yaml:3: K n has a field `spek` an object does not have (apiVersion, kind, metadata, spec, status)",
        ),
    ];
    for (text, want) in cases {
        let got = parse("s.yaml", text).map(|_| ()).unwrap_err().to_string();
        assert_eq!(&got, want, "for {text:?}");
    }
    let unknown = parse("s.yaml", "scenarios:\n  - name: x\n    objekt: {}\n").unwrap_err().to_string();
    assert!(unknown.starts_with("s.yaml:3") && unknown.contains("objekt"), "{unknown}");
}
