//! Whole rounds of the toolpolicy world, natively: topologies as the host builds them.

use serde_json::{Value, json};
use steward_sdk::testing::{FakeHost, TopologyBuilder, first_round, reconcile_world};
use steward_sdk::{ConditionStatus, Error, ObjectRef, Outcome, RawObject, WorldAnswer};

use crate::{EFFECTIVE_KIND, GROUP_KIND, MEMBER_OF, POLICY_KIND, SERVER_KIND, ToolPolicyWorld};

const OWN: &[&str] = &[POLICY_KIND, EFFECTIVE_KIND];

fn obj(kind: &str, ns: &str, name: &str, spec: Value) -> RawObject {
    RawObject {
        api_version: "steward.dev/v1alpha1".into(),
        kind: kind.into(),
        name: name.into(),
        namespace: ns.into(),
        generation: 1,
        spec: spec.to_string(),
        ..RawObject::default()
    }
}

/// A world: servers `(ns, name, groups)`, groups `(ns, name)`, policies `(ns, name, spec)`, and
/// EffectiveToolPolicies `(ns, name, spec)`, with the edges the host's link rules make.
struct World {
    b: TopologyBuilder,
}

impl World {
    fn new() -> Self {
        Self { b: TopologyBuilder::new().with_namespaces() }
    }
    fn server(mut self, ns: &str, name: &str, groups: &[&str]) -> Self {
        self.b = self.b.object(obj(SERVER_KIND, ns, name, json!({"type": "stdio", "command": "x"})));
        for g in groups {
            self.b =
                self.b.edge(MEMBER_OF, &ObjectRef::new(SERVER_KIND, ns, name), &ObjectRef::new(GROUP_KIND, ns, *g));
        }
        self
    }
    fn group(mut self, ns: &str, name: &str) -> Self {
        self.b = self.b.object(obj(GROUP_KIND, ns, name, json!({"selector": {}})));
        self
    }
    /// A policy; `edge` says whether the host found its target (an edge to it).
    fn policy(mut self, ns: &str, name: &str, spec: Value, edge: bool) -> Self {
        let kind = spec["targetRef"]["kind"].as_str().unwrap_or_default().to_string();
        let target = spec["targetRef"]["name"].as_str().unwrap_or_default().to_string();
        self.b = self.b.object(obj(POLICY_KIND, ns, name, spec));
        if edge {
            let (link, tns) = match kind.as_str() {
                "MCPServer" => ("targets-server", ns),
                "MCPServerGroup" => ("targets-group", ns),
                _ => ("targets-namespace", ""),
            };
            self.b = self.b.edge(link, &ObjectRef::new(POLICY_KIND, ns, name), &ObjectRef::new(kind, tns, target));
        }
        self
    }
    fn effective(mut self, ns: &str, name: &str, spec: Value) -> Self {
        self.b = self.b.object(obj(EFFECTIVE_KIND, ns, name, spec));
        self
    }
    fn run(self) -> WorldAnswer {
        let round = first_round(self.b.build().unwrap());
        reconcile_world::<ToolPolicyWorld>(&FakeHost::new(), &round, OWN).unwrap()
    }
}

fn target(kind: &str, name: &str) -> Value {
    json!({"kind": kind, "name": name})
}

fn outcome<'a>(a: &'a WorldAnswer, kind: &str, ns: &str, name: &str) -> &'a Outcome<Value> {
    match a.get(&ObjectRef::new(kind, ns, name)) {
        Some(Ok(o)) => o,
        other => panic!("{kind} {ns}/{name}: {other:?}"),
    }
}

fn status(a: &WorldAnswer, name: &str) -> Value {
    outcome(a, POLICY_KIND, "team", name).status.clone().unwrap()
}

fn condition(a: &WorldAnswer, name: &str, ty: &str) -> (ConditionStatus, String) {
    let o = outcome(a, POLICY_KIND, "team", name);
    let c = o.conditions.iter().find(|c| c.type_ == ty).unwrap();
    (c.status, c.reason.clone())
}

/// The EffectiveToolPolicy specs the round wants, by server name, with their owner.
fn effective(a: &WorldAnswer) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (r, res) in &a.outcomes {
        if let Ok(o) = res {
            for c in o.children.iter().flatten() {
                assert_eq!((c.api_version.as_str(), c.kind.as_str()), ("steward.dev/v1alpha1", EFFECTIVE_KIND));
                out.push((c.name.clone(), r.name.clone(), c.body["spec"].clone()));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn deny_of(a: &WorldAnswer, server: &str) -> Value {
    effective(a)
        .into_iter()
        .find(|(s, _, _)| s == server)
        .map(|(_, _, spec)| spec["deny"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn a_namespace_policy_rules_every_server_of_the_namespace() {
    let a = World::new()
        .server("team", "git", &[])
        .server("team", "kube", &[])
        .server("other", "far", &[])
        .policy(
            "team",
            "ns",
            json!({"targetRef": target("Namespace", "team"), "defaults": {"deny": ["*_delete"]}}),
            true,
        )
        .run();
    let eff = effective(&a);
    assert_eq!(
        eff.iter().map(|(s, o, _)| (s.as_str(), o.as_str())).collect::<Vec<_>>(),
        [("git", "ns"), ("kube", "ns")]
    );
    assert_eq!(
        eff[0].2,
        json!({"target": {"kind": "MCPServer", "name": "git"}, "allow": [], "deny": ["*_delete"],
               "decidedBy": {"policy": "ns", "rules": "defaults", "level": "Namespace"}, "policies": ["ns"]})
    );
    assert_eq!(status(&a, "ns")["effectiveTargets"], json!(["git", "kube"]));
    assert_eq!(condition(&a, "ns", "Ready"), (ConditionStatus::True, "Enforced".into()));
    assert_eq!(condition(&a, "ns", "Accepted"), (ConditionStatus::True, "Accepted".into()));
}

#[test]
fn defaults_and_overrides_at_each_level() {
    let world = || {
        World::new()
            .group("team", "prod")
            .server("team", "git", &["prod"])
            .server("team", "kube", &[])
            .policy("team", "ns", json!({"targetRef": target("Namespace", "team"), "defaults": {"deny": ["ns"]}}), true)
            .policy(
                "team",
                "grp",
                json!({"targetRef": target("MCPServerGroup", "prod"), "defaults": {"deny": ["grp"]}}),
                true,
            )
    };
    // Defaults: the most specific wins.
    let a = world()
        .policy("team", "srv", json!({"targetRef": target("MCPServer", "git"), "defaults": {"deny": ["srv"]}}), true)
        .run();
    assert_eq!(deny_of(&a, "git"), json!(["srv"]));
    assert_eq!(deny_of(&a, "kube"), json!(["ns"]), "kube is in no group");
    let a = world().run();
    assert_eq!(deny_of(&a, "git"), json!(["grp"]), "group defaults over namespace defaults");
    assert_eq!(status(&a, "ns")["effectiveTargets"], json!(["kube"]));
    assert_eq!(condition(&a, "ns", "Ready").1, "Enforced");
    // Overrides: the least specific wins, over every defaults.
    let a = world()
        .policy("team", "srv", json!({"targetRef": target("MCPServer", "git"), "overrides": {"deny": ["srv-o"]}}), true)
        .policy(
            "team",
            "grp-o",
            json!({"targetRef": target("MCPServerGroup", "prod"), "overrides": {"deny": ["grp-o"]}}),
            true,
        )
        .run();
    assert_eq!(deny_of(&a, "git"), json!(["grp-o"]));
    assert_eq!(status(&a, "srv")["effectiveTargets"], json!([]));
    assert_eq!(condition(&a, "srv", "Ready"), (ConditionStatus::True, "NoEffect".into()));
    let a = world()
        .policy("team", "lock", json!({"targetRef": target("Namespace", "team"), "overrides": {"deny": ["*"]}}), true)
        .run();
    assert_eq!(deny_of(&a, "git"), json!(["*"]));
    assert_eq!(deny_of(&a, "kube"), json!(["*"]));
}

#[test]
fn the_owner_is_the_most_specific_attached_policy_ties_by_name() {
    let a = World::new()
        .group("team", "prod")
        .server("team", "git", &["prod"])
        .policy("team", "lock", json!({"targetRef": target("Namespace", "team"), "overrides": {"deny": ["*"]}}), true)
        .policy(
            "team",
            "b-grp",
            json!({"targetRef": target("MCPServerGroup", "prod"), "defaults": {"deny": ["x"]}}),
            true,
        )
        .policy(
            "team",
            "a-grp",
            json!({"targetRef": target("MCPServerGroup", "prod"), "defaults": {"deny": ["x"]}}),
            true,
        )
        .run();
    let eff = effective(&a);
    assert_eq!((eff[0].0.as_str(), eff[0].1.as_str()), ("git", "a-grp"), "owner: group level, first by name");
    assert_eq!(eff[0].2["decidedBy"]["policy"], "lock", "the rules are still the override's");
    assert_eq!(eff[0].2["policies"], json!(["a-grp", "b-grp", "lock"]));
    // Every policy answers with its whole set of children, empty ones included.
    assert_eq!(outcome(&a, POLICY_KIND, "team", "lock").children, Some(vec![]));
}

#[test]
fn two_policies_on_one_server_that_disagree_conflict() {
    let a = World::new()
        .server("team", "git", &[])
        .policy("team", "zeta", json!({"targetRef": target("MCPServer", "git"), "defaults": {"deny": ["a"]}}), true)
        .policy("team", "alpha", json!({"targetRef": target("MCPServer", "git"), "defaults": {"deny": ["b"]}}), true)
        .run();
    assert_eq!(deny_of(&a, "git"), json!(["b"]), "alpha's, first by name");
    for p in ["alpha", "zeta"] {
        assert_eq!(condition(&a, p, "Ready"), (ConditionStatus::False, "Conflicted".into()), "{p}");
        assert_eq!(status(&a, p)["conflicts"][0]["policies"], json!(["alpha", "zeta"]));
    }
    assert!(status(&a, "zeta")["conflicts"][0]["message"].as_str().unwrap().contains("MCPServer \"git\""));
}

#[test]
fn a_server_in_two_groups_with_disagreeing_policies_conflicts() {
    let a = World::new()
        .group("team", "blue")
        .group("team", "green")
        .server("team", "git", &["blue", "green"])
        .server("team", "kube", &["green"])
        .policy("team", "pb", json!({"targetRef": target("MCPServerGroup", "blue"), "defaults": {"deny": ["b"]}}), true)
        .policy(
            "team",
            "pg",
            json!({"targetRef": target("MCPServerGroup", "green"), "defaults": {"deny": ["g"]}}),
            true,
        )
        .run();
    assert_eq!(deny_of(&a, "git"), json!(["b"]));
    assert_eq!(deny_of(&a, "kube"), json!(["g"]));
    assert_eq!(condition(&a, "pg", "Ready").1, "Conflicted");
    assert_eq!(status(&a, "pg")["conflicts"][0]["server"], "git");
    assert_eq!(status(&a, "pg")["effectiveTargets"], json!(["kube"]));
}

#[test]
fn a_missing_target_is_not_accepted() {
    let a = World::new()
        .server("team", "git", &[])
        .policy("team", "lost", json!({"targetRef": target("MCPServer", "gone"), "defaults": {"deny": ["*"]}}), false)
        .policy(
            "team",
            "lost-grp",
            json!({"targetRef": target("MCPServerGroup", "none"), "defaults": {"deny": ["*"]}}),
            false,
        )
        .run();
    for p in ["lost", "lost-grp"] {
        assert_eq!(condition(&a, p, "Accepted"), (ConditionStatus::False, "TargetNotFound".into()));
        assert_eq!(condition(&a, p, "Ready"), (ConditionStatus::False, "TargetNotFound".into()));
        assert_eq!(status(&a, p)["targetFound"], false);
    }
    assert!(effective(&a).is_empty());
}

#[test]
fn a_target_without_an_edge_is_still_found_by_its_reference() {
    let a = World::new()
        .server("team", "git", &[])
        .policy("team", "p", json!({"targetRef": target("MCPServer", "git"), "defaults": {"deny": ["x"]}}), false)
        .run();
    assert_eq!(condition(&a, "p", "Accepted").1, "Accepted");
    assert_eq!(deny_of(&a, "git"), json!(["x"]));
}

#[test]
fn a_bad_policy_is_an_error_on_itself_only() {
    let a = World::new()
        .server("team", "git", &[])
        .policy("team", "empty", json!({"targetRef": target("MCPServer", "git")}), true)
        .policy("team", "typo", json!({"targetRef": target("MCPServer", "git"), "defualts": {}}), true)
        .policy("team", "elsewhere", json!({"targetRef": target("Namespace", "prod"), "defaults": {}}), false)
        .policy("team", "good", json!({"targetRef": target("MCPServer", "git"), "defaults": {"deny": ["x"]}}), true)
        .run();
    for (p, path) in [("empty", "spec"), ("typo", "spec.defualts"), ("elsewhere", "spec.targetRef.name")] {
        match a.get(&ObjectRef::new(POLICY_KIND, "team", p)) {
            Some(Err(Error::Invalid(errs))) => assert_eq!(errs[0].path, path, "{p}"),
            other => panic!("{p}: {other:?}"),
        }
    }
    assert_eq!(deny_of(&a, "git"), json!(["x"]));
}

#[test]
fn effective_tool_policies_report_where_they_came_from() {
    let computed = json!({"target": {"kind": "MCPServer", "name": "git"}, "allow": [], "deny": ["x"],
        "decidedBy": {"policy": "p", "rules": "defaults", "level": "MCPServer"}, "policies": ["p"]});
    let a = World::new()
        .server("team", "git", &[])
        .server("team", "kube", &[])
        .policy("team", "p", json!({"targetRef": target("MCPServer", "git"), "defaults": {"deny": ["x"]}}), true)
        .effective("team", "git", computed.clone())
        .effective("team", "kube", json!({"target": {"kind": "MCPServer", "name": "kube"}, "policies": ["old"]}))
        .run();
    let git = outcome(&a, EFFECTIVE_KIND, "team", "git");
    assert_eq!(git.status, Some(json!({"policies": ["p"], "decidedBy": "p", "current": true})));
    assert_eq!((git.conditions[0].status, git.conditions[0].reason.as_str()), (ConditionStatus::True, "Computed"));
    let kube = outcome(&a, EFFECTIVE_KIND, "team", "kube");
    assert_eq!(kube.conditions[0].reason, "Orphaned");
    assert_eq!(effective(&a)[0].2, computed, "the round's body is what the node holds");
}

/// `examples/toolpolicy/resources` as the host would load them (namespace `default`), linked as
/// the world's rules say (every server carries `team: platform`, which the group selects).
#[test]
fn the_example_resources_merge_as_their_comments_say() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/toolpolicy/resources");
    let mut w = World::new();
    for file in ["servers.yaml", "groups.yaml", "policies.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        for d in docs {
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            match d["kind"].as_str().unwrap() {
                "MCPServer" => {
                    assert_eq!(d["metadata"]["labels"]["team"], "platform");
                    w = w.server("default", &name, &["platform"]);
                }
                "MCPServerGroup" => w = w.group("default", &name),
                "ToolPolicy" => {
                    let target = d["spec"]["targetRef"]["name"].as_str().unwrap();
                    let exists = ["default", "platform", "everything", "clock"].contains(&target);
                    w = w.policy("default", &name, d["spec"].clone(), exists);
                }
                other => panic!("unexpected kind {other}"),
            }
        }
    }
    let a = w.run();
    let eff = effective(&a);
    let got: Vec<(&str, &str, &Value, &Value)> =
        eff.iter().map(|(s, o, spec)| (s.as_str(), o.as_str(), &spec["allow"], &spec["decidedBy"]["policy"])).collect();
    assert_eq!(
        got,
        [
            ("clock", "platform-read-only", &json!(["x_ex_echo", "x_clk_time"]), &json!("platform-read-only")),
            ("everything", "everything-can-add", &json!(["x_ex_echo", "x_ex_add"]), &json!("everything-can-add")),
        ]
    );
    let ready = |p: &str| {
        let o = outcome(&a, POLICY_KIND, "default", p);
        o.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone()).unwrap()
    };
    assert_eq!(ready("for-a-missing-server"), "TargetNotFound");
    assert_eq!(ready("namespace-baseline"), "NoEffect");
    assert_eq!(ready("platform-read-only"), "Enforced");
    let rules: crate::Rules = serde_json::from_value(eff[1].2.clone())
        .map(|s: crate::EffectiveToolPolicySpec| crate::Rules { allow: s.allow, deny: s.deny })
        .unwrap();
    assert!(!rules.allows("x_ex_fail"), "the example run's second step is denied");
    assert!(rules.allows("x_ex_echo"));
}
