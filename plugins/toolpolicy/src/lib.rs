//! The `toolpolicy` plugin of Steward: tool policies attached to MCPServers, MCPServerGroups and
//! namespaces (Gateway API policy attachment), reconciled together as a world.
//!
//! Kinds (`steward.dev/v1alpha1`, namespaced): `ToolPolicy`, written by people, and
//! `EffectiveToolPolicy`, written by this plugin (one per MCPServer that has a policy along its
//! paths, through the `children` capability) and read by WorkflowRun before it calls a tool.
//!
//! # The world
//!
//! It holds MCPServers, MCPServerGroups, the plugin's own kinds and one `Namespace` node per
//! namespace, linked by:
//! - `targets-server`, `targets-group`, `targets-namespace`: a ToolPolicy to what its
//!   `spec.targetRef` names (field links);
//! - `member-of`: an MCPServer to each MCPServerGroup whose `spec.selector` selects it;
//! - `namespace`: every object to its namespace (the host's namespace nodes).
//!
//! # A round
//!
//! For every MCPServer, the policies attached along its paths (to the server, to each group it
//! is a member of, to its namespace) are merged as [`merge`] says: the least specific
//! `overrides` win, else the most specific `defaults`, atomically per policy. For each server
//! with any attached policy the round wants an EffectiveToolPolicy named like the server, in its
//! namespace, owned by the most specific attached policy (ties by name), with body
//! `spec: {target: {kind: MCPServer, name}, allow, deny, decidedBy: {policy, rules, level}, policies}`.
//!
//! Each ToolPolicy's status says what it attaches to (`target`, `targetFound`), the MCPServers
//! whose rules it decides (`effectiveTargets`) and its conflicts; conditions `Accepted`
//! (`TargetNotFound` when the target does not exist) and `Ready` (`Enforced`, `NoEffect`,
//! `Conflicted`, `TargetNotFound`). Each EffectiveToolPolicy's status names its policies, with
//! `Ready=True Computed` when it holds what the round computed.

pub mod merge;
mod round;
pub mod spec;

use steward_sdk::prelude::*;
use steward_sdk::{Link, LinkBy, Round, RoundContext, World, WorldAnswer, WorldInfo};

pub use spec::{EffectiveToolPolicySpec, Rules, TargetKind, TargetRef, ToolPolicySpec, glob};

/// The kind of the policies.
pub const POLICY_KIND: &str = "ToolPolicy";
/// The kind of the computed rules, one per MCPServer.
pub const EFFECTIVE_KIND: &str = "EffectiveToolPolicy";
/// The MCPServer kind (plugin `mcpserver`).
pub const SERVER_KIND: &str = "MCPServer";
/// The MCPServerGroup kind (plugin `mcpservergroup`).
pub const GROUP_KIND: &str = "MCPServerGroup";
/// The link of an MCPServer to each group that selects it.
pub const MEMBER_OF: &str = "member-of";
/// The links of a policy to its target, one per target kind.
pub const TARGET_LINKS: &[&str] = &["targets-server", "targets-group", "targets-namespace"];

/// A conflict a policy takes part in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyConflict {
    /// The MCPServer whose rules the policies disagree on.
    pub server: String,
    /// The policies of the deciding level, by name.
    pub policies: Vec<String>,
    /// What happened, for people.
    pub message: String,
}

/// What a ToolPolicy reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolPolicyStatus {
    /// `Kind/name` of the target.
    pub target: String,
    /// Whether the target exists.
    pub target_found: bool,
    /// The MCPServers whose tool rules are this policy's, sorted.
    #[serde(default)]
    pub effective_targets: Vec<String>,
    /// The conflicts it takes part in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<PolicyConflict>,
}

/// What an EffectiveToolPolicy reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveToolPolicyStatus {
    /// The policies attached along its server's paths, most specific first.
    pub policies: Vec<String>,
    /// The policy whose rules it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// Whether it holds what the last round computed.
    pub current: bool,
}

/// The `ToolPolicy` kind (`steward.dev/v1alpha1`, plural `toolpolicies`, namespaced).
pub struct ToolPolicy;

impl Kind for ToolPolicy {
    type Spec = ToolPolicySpec;
    type Status = ToolPolicyStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = POLICY_KIND;
    const PLURAL: &'static str = "toolpolicies";

    fn columns() -> Vec<PrinterColumn> {
        vec![
            PrinterColumn::new("Target", ".status.target", ColumnType::String)
                .description("What the policy attaches to"),
            PrinterColumn::new("Servers", ".status.effectiveTargets", ColumnType::String)
                .description("The MCPServers whose tool rules are this policy's"),
        ]
    }

    fn validate(obj: &Object<ToolPolicySpec, ToolPolicyStatus>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj.spec.defaults.is_none() && obj.spec.overrides.is_none() {
            errs.push(FieldError::new("spec", "needs `defaults`, `overrides` or both"));
        }
        if obj.spec.target_ref.name.trim().is_empty() {
            errs.push(FieldError::new("spec.targetRef.name", "must name the target"));
        }
        if obj.spec.target_ref.kind == TargetKind::Namespace && obj.spec.target_ref.name != obj.namespace {
            errs.push(FieldError::new(
                "spec.targetRef.name",
                format!("a ToolPolicy may target only its own namespace, {:?}", obj.namespace),
            ));
        }
        for (block, rules) in [("defaults", &obj.spec.defaults), ("overrides", &obj.spec.overrides)] {
            for (list, globs) in rules.iter().flat_map(|r| [("allow", &r.allow), ("deny", &r.deny)]) {
                for (i, g) in globs.iter().enumerate() {
                    if g.is_empty() {
                        errs.push(FieldError::new(format!("spec.{block}.{list}[{i}]"), "a glob must not be empty"));
                    }
                }
            }
        }
        errs
    }

    /// Never called: the world decides ToolPolicy statuses (the SDK refuses per-object calls).
    fn reconcile(
        _ctx: &Context,
        _obj: &Object<ToolPolicySpec, ToolPolicyStatus>,
    ) -> Result<Outcome<ToolPolicyStatus>, Error> {
        Err(Error::fatal("ToolPolicy objects are reconciled in the toolpolicy world's rounds"))
    }
}

/// The `EffectiveToolPolicy` kind (`steward.dev/v1alpha1`, plural `effectivetoolpolicies`,
/// namespaced), written by the toolpolicy world as children of ToolPolicies.
pub struct EffectiveToolPolicy;

impl Kind for EffectiveToolPolicy {
    type Spec = EffectiveToolPolicySpec;
    type Status = EffectiveToolPolicyStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = EFFECTIVE_KIND;
    const PLURAL: &'static str = "effectivetoolpolicies";

    fn columns() -> Vec<PrinterColumn> {
        vec![
            PrinterColumn::new("Server", ".spec.target.name", ColumnType::String).description("The MCPServer it rules"),
            PrinterColumn::new("Decided By", ".status.decidedBy", ColumnType::String)
                .description("The ToolPolicy whose rules are in force"),
        ]
    }

    /// Never called: the world decides EffectiveToolPolicy statuses (the SDK refuses per-object calls).
    fn reconcile(
        _ctx: &Context,
        _obj: &Object<EffectiveToolPolicySpec, EffectiveToolPolicyStatus>,
    ) -> Result<Outcome<EffectiveToolPolicyStatus>, Error> {
        Err(Error::fatal("EffectiveToolPolicy objects are reconciled in the toolpolicy world's rounds"))
    }
}

/// The toolpolicy world: MCPServers, MCPServerGroups and namespaces, linked as the crate docs say.
pub struct ToolPolicyWorld;

impl World for ToolPolicyWorld {
    fn info() -> WorldInfo {
        let target = || LinkBy::Field("spec.targetRef".to_string());
        WorldInfo::new([SERVER_KIND, GROUP_KIND])
            .link(Link::new(TARGET_LINKS[0], POLICY_KIND, SERVER_KIND, target()))
            .link(Link::new(TARGET_LINKS[1], POLICY_KIND, GROUP_KIND, target()))
            .link(Link::new(TARGET_LINKS[2], POLICY_KIND, steward_sdk::world::NAMESPACE_KIND, target()))
            .link(Link::new(MEMBER_OF, SERVER_KIND, GROUP_KIND, LinkBy::Selector("spec.selector".to_string())))
            .with_namespaces()
    }

    fn reconcile(ctx: &RoundContext, round: &Round) -> Result<WorldAnswer, Error> {
        round::reconcile(ctx, round)
    }
}

steward_sdk::export_plugin!(
    name: "toolpolicy",
    version: env!("CARGO_PKG_VERSION"),
    capabilities: ["children"],
    kinds: [ToolPolicy, EffectiveToolPolicy],
    world: ToolPolicyWorld,
);

#[cfg(test)]
mod tests;
