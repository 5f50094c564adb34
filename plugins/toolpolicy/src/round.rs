//! One round of the toolpolicy world: every policy's target, every MCPServer's effective rules,
//! the EffectiveToolPolicy children, and the status of every own object.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;
use steward_sdk::prelude::*;
use steward_sdk::{NodeId, ObjectRef, Round, RoundContext, Topology, WorldAnswer};

use crate::merge::{self, Attached, Decision};
use crate::spec::{DecidedBy, EffectiveTarget, EffectiveToolPolicySpec, TargetKind, ToolPolicySpec};
use crate::{
    EFFECTIVE_KIND, EffectiveToolPolicy, EffectiveToolPolicyStatus, GROUP_KIND, MEMBER_OF, PolicyConflict, SERVER_KIND,
    TARGET_LINKS, ToolPolicy, ToolPolicyStatus,
};

/// The apiVersion of EffectiveToolPolicy children.
const API_VERSION: &str = "steward.dev/v1alpha1";

/// What the round computed for one MCPServer that has policies attached along its paths.
struct Computed {
    server: String,
    namespace: String,
    decision: Decision,
    /// Names of every attached policy, most specific first, ties by name.
    policies: Vec<String>,
}

impl Computed {
    fn spec(&self) -> EffectiveToolPolicySpec {
        let rules = self.decision.winner.as_ref().map(|w| w.rules.clone()).unwrap_or_default();
        EffectiveToolPolicySpec {
            target: EffectiveTarget { kind: SERVER_KIND.to_string(), name: self.server.clone() },
            allow: rules.allow,
            deny: rules.deny,
            decided_by: self.decision.winner.as_ref().map(|w| DecidedBy {
                policy: w.policy.clone(),
                rules: w.block.as_str().to_string(),
                level: w.level.as_str().to_string(),
            }),
            policies: self.policies.clone(),
        }
    }
}

/// Runs one round over `round`'s topology.
pub fn reconcile(_ctx: &RoundContext, round: &Round) -> Result<WorldAnswer, Error> {
    let t = &round.topology;
    let mut answer = WorldAnswer::new();
    // Each valid policy and the node it attaches to (None: the target does not exist).
    let mut policies: BTreeMap<NodeId, (Object<ToolPolicySpec, ToolPolicyStatus>, Option<NodeId>)> = BTreeMap::new();
    for id in t.of_kind(crate::POLICY_KIND) {
        let r = t.object_ref(id).unwrap_or_else(|| ObjectRef::new(crate::POLICY_KIND, "", ""));
        match t.typed::<ToolPolicy>(id) {
            Ok(p) => {
                let target = target_of(t, id, &p);
                policies.insert(id, (p, target));
            }
            Err(e) => {
                answer.error(r, e);
            }
        }
    }
    let mut attached_to: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
    for (&pid, (_, target)) in &policies {
        if let Some(target) = target {
            attached_to.entry(*target).or_default().push(pid);
        }
    }

    // Every MCPServer with a policy along its paths.
    let mut computed: Vec<(Computed, NodeId)> = Vec::new();
    for sid in t.of_kind(SERVER_KIND) {
        let Some(server) = t.object(sid) else { continue };
        let mut levels: Vec<(TargetKind, NodeId)> = vec![(TargetKind::McpServer, sid)];
        levels.extend(
            t.parents(sid, &[MEMBER_OF])
                .into_iter()
                .filter(|&g| t.object(g).is_some_and(|o| o.kind == GROUP_KIND))
                .map(|g| (TargetKind::McpServerGroup, g)),
        );
        if let Some(ns) = namespace_node(t, sid, &server.namespace) {
            levels.push((TargetKind::Namespace, ns));
        }
        let mut attached: Vec<(Attached, NodeId)> = Vec::new();
        for (level, node) in levels {
            for &pid in attached_to.get(&node).into_iter().flatten() {
                let (p, _) = &policies[&pid];
                attached.push((
                    Attached {
                        policy: p.name.clone(),
                        level,
                        defaults: p.spec.defaults.clone(),
                        overrides: p.spec.overrides.clone(),
                    },
                    pid,
                ));
            }
        }
        if attached.is_empty() {
            continue;
        }
        // The owner: the most specific attached policy, ties by name.
        attached.sort_by(|(a, _), (b, _)| b.level.cmp(&a.level).then_with(|| a.policy.cmp(&b.policy)));
        let owner = attached[0].1;
        let list: Vec<Attached> = attached.iter().map(|(a, _)| a.clone()).collect();
        let decision = merge::decide(&list);
        computed.push((
            Computed {
                server: server.name.clone(),
                namespace: server.namespace.clone(),
                decision,
                policies: list.iter().map(|a| a.policy.clone()).collect(),
            },
            owner,
        ));
    }

    // What each policy decides, takes part in and owns, gathered in one pass over the servers
    // (by namespace and policy name, as the decisions name policies; children by owner).
    let mut decides: HashMap<(&str, &str), Vec<String>> = HashMap::new();
    let mut conflicts: HashMap<(&str, &str), Vec<PolicyConflict>> = HashMap::new();
    let mut owned: HashMap<NodeId, Vec<Child>> = HashMap::new();
    for (c, owner) in &computed {
        if let Some(w) = &c.decision.winner {
            decides.entry((c.namespace.as_str(), w.policy.as_str())).or_default().push(c.server.clone());
        }
        for name in &c.decision.conflict {
            let chosen = c.decision.winner.as_ref().map(|w| w.policy.as_str()).unwrap_or_default();
            conflicts.entry((c.namespace.as_str(), name.as_str())).or_default().push(PolicyConflict {
                server: c.server.clone(),
                policies: c.decision.conflict.clone(),
                message: format!(
                    "MCPServer {:?}: the {} of policies {} ({} level) disagree; {chosen:?}'s apply (first by name)",
                    c.server,
                    c.decision.winner.as_ref().map(|w| w.block.as_str()).unwrap_or_default(),
                    c.decision.conflict.join(", "),
                    c.decision.winner.as_ref().map(|w| w.level.as_str()).unwrap_or_default(),
                ),
            });
        }
        owned.entry(*owner).or_default().push(Child::new(
            API_VERSION,
            EFFECTIVE_KIND,
            c.server.clone(),
            json!({"spec": serde_json::to_value(c.spec()).unwrap_or_default()}),
        ));
    }

    // Each policy's outcome: its children, what it affects, its conflicts.
    for (&pid, (p, target)) in &policies {
        let r = ObjectRef::new(crate::POLICY_KIND, &p.namespace, &p.name);
        let key = (p.namespace.as_str(), p.name.as_str());
        let status = ToolPolicyStatus {
            target: format!("{}/{}", p.spec.target_ref.kind.as_str(), p.spec.target_ref.name),
            target_found: target.is_some(),
            effective_targets: decides.remove(&key).unwrap_or_default(),
            conflicts: conflicts.remove(&key).unwrap_or_default(),
        };
        let children = owned.remove(&pid).unwrap_or_default();
        let (accepted, ready) = conditions(p, target.is_some(), &status);
        answer.outcome(r, Outcome::status(status).condition(accepted).condition(ready).with_children(children));
    }

    // Each EffectiveToolPolicy: where it came from, and whether it is what the round computed.
    let by_server: HashMap<(&str, &str), usize> =
        computed.iter().enumerate().map(|(i, (c, _))| ((c.namespace.as_str(), c.server.as_str()), i)).collect();
    for id in t.of_kind(EFFECTIVE_KIND) {
        let Some(r) = t.object_ref(id) else { continue };
        let obj = match t.typed::<EffectiveToolPolicy>(id) {
            Ok(obj) => obj,
            Err(e) => {
                answer.error(r, e);
                continue;
            }
        };
        let want = by_server.get(&(obj.namespace.as_str(), obj.name.as_str())).map(|&i| &computed[i]);
        let current = want.is_some_and(|(c, _)| c.spec() == obj.spec);
        let from = obj.spec.policies.join(", ");
        let status = EffectiveToolPolicyStatus {
            policies: obj.spec.policies.clone(),
            decided_by: obj.spec.decided_by.as_ref().map(|d| d.policy.clone()),
            current,
        };
        let ready = match (want, current) {
            (_, true) => Condition::new(
                "Ready",
                true,
                "Computed",
                format!("the tool rules of MCPServer {:?}, from policies {from}", obj.spec.target.name),
            ),
            (Some(_), false) => Condition::new(
                "Ready",
                false,
                "Updating",
                "the toolpolicy round has asked for new rules; they are being applied",
            ),
            (None, false) => Condition::new(
                "Ready",
                false,
                "Orphaned",
                "no ToolPolicy applies to its MCPServer any more; it is being removed",
            ),
        };
        answer.outcome(r, Outcome::status(status).condition(ready));
    }
    Ok(answer)
}

/// The node policy `pid` attaches to: the target its `spec.targetRef` link rules found, else the
/// object of that reference in the topology; `None` when it does not exist.
fn target_of(t: &Topology, pid: NodeId, p: &Object<ToolPolicySpec, ToolPolicyStatus>) -> Option<NodeId> {
    let kind = p.spec.target_ref.kind.as_str();
    let name = &p.spec.target_ref.name;
    let by_edge = t
        .parents(pid, TARGET_LINKS)
        .into_iter()
        .find(|&n| t.object(n).is_some_and(|o| o.kind == kind && &o.name == name));
    by_edge.or_else(|| {
        let ns = if kind == steward_sdk::world::NAMESPACE_KIND { "" } else { p.namespace.as_str() };
        t.node(&ObjectRef::new(kind, ns, name))
    })
}

/// The namespace node of server `sid`: its `namespace` edge, else the node of that name.
fn namespace_node(t: &Topology, sid: NodeId, namespace: &str) -> Option<NodeId> {
    t.parents(sid, &[steward_sdk::world::NAMESPACE_LINK])
        .into_iter()
        .find(|&n| t.object(n).is_some_and(|o| o.kind == steward_sdk::world::NAMESPACE_KIND))
        .or_else(|| t.node(&ObjectRef::new(steward_sdk::world::NAMESPACE_KIND, "", namespace)))
}

/// `Accepted` and `Ready` of a policy.
fn conditions(
    p: &Object<ToolPolicySpec, ToolPolicyStatus>,
    found: bool,
    status: &ToolPolicyStatus,
) -> (Condition, Condition) {
    let target = &status.target;
    if !found {
        let msg = if p.spec.target_ref.kind == TargetKind::Namespace {
            format!("target {target} does not exist (no object lives in namespace {:?})", p.spec.target_ref.name)
        } else {
            format!("target {target} does not exist in namespace {:?}", p.namespace)
        };
        return (
            Condition::new("Accepted", false, "TargetNotFound", &msg),
            Condition::new("Ready", false, "TargetNotFound", msg),
        );
    }
    let accepted = Condition::new("Accepted", true, "Accepted", format!("attached to {target}"));
    if !status.conflicts.is_empty() {
        let msg: Vec<&str> = status.conflicts.iter().map(|c| c.message.as_str()).collect();
        return (accepted, Condition::new("Ready", false, "Conflicted", msg.join("; ")));
    }
    let ready = match status.effective_targets.len() {
        0 => Condition::new(
            "Ready",
            true,
            "NoEffect",
            format!("attached to {target}; no MCPServer takes its rules (none there, or a policy overrides it)"),
        ),
        n => Condition::new(
            "Ready",
            true,
            "Enforced",
            format!("its rules are in force for {n} MCPServer(s): {}", status.effective_targets.join(", ")),
        ),
    };
    (accepted, ready)
}
