//! A plugin's world: its optional `world-reconciler` export, what `describe-world` said, and one round's call, with each own object's outcome checked as a reconcile's answer is.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use steward_sdk::{ObjectRef, RawOutcome};

use super::super::bindings::steward::plugin::types as w;
use super::super::bindings::world::exports::steward::plugin::world_reconciler as ww;
use super::super::convert;
use super::super::error::PluginError;
use super::super::reads::HostReads;
use super::super::unit::{CallInput, Inputs};
use super::{CallReport, Op, OpOut, Plugin};
use crate::model::ObjectKey;
use crate::world::{ChangeType, Link, LinkBy, Topology, WorldSpec};

/// Where the optional `world-reconciler` export is in a component.
pub(super) type WorldIndices = ww::GuestIndices;

/// What one round is given.
#[derive(Debug, Default)]
pub struct RoundRequest {
    /// What changed since the last successful round.
    pub changes: Vec<crate::world::Change>,
    /// Whether it is the first round since the host started or the plugin loaded.
    pub first: bool,
    /// The world now.
    pub topology: Topology,
    /// The plugin's own objects in the round, each with what the units are given for it (what
    /// `round.act-for` switches to).
    pub targets: HashMap<ObjectKey, Inputs>,
}

/// What one round answered.
#[derive(Debug, Default)]
pub struct RoundAnswer {
    /// Each own object the plugin said something of: its outcome as a reconcile's answer (with
    /// what the units folded in for it), or its error.
    pub outcomes: Vec<(ObjectKey, Result<RawOutcome, PluginError>)>,
    /// Run a round again after this long, even with no change.
    pub requeue_after: Option<Duration>,
}

/// `describe-world`'s answer as the host keeps it, its own kinds being those `describe` listed.
pub(super) fn world_spec(info: ww::WorldInfo, own: Vec<String>) -> WorldSpec {
    WorldSpec {
        own,
        kinds: info.kinds,
        links: info
            .links
            .into_iter()
            .map(|l| Link {
                name: l.name,
                from: l.from,
                to: l.to,
                by: match l.by {
                    ww::LinkBy::OwnerReference => LinkBy::OwnerReference,
                    ww::LinkBy::Field(p) => LinkBy::Field(p),
                    ww::LinkBy::Selector(p) => LinkBy::Selector(p),
                },
            })
            .collect(),
        namespaces: info.namespaces,
    }
}

/// The WIT round of `req`.
pub(super) fn round_to_wit(req: &RoundRequest) -> ww::Round {
    let r = |k: &ObjectKey| w::ObjectRef {
        kind: k.kind().to_string(),
        namespace: k.namespace().to_string(),
        name: k.name().to_string(),
    };
    ww::Round {
        changes: req
            .changes
            .iter()
            .map(|c| ww::Change {
                type_: match c.kind {
                    ChangeType::Added => ww::ChangeType::Added,
                    ChangeType::Modified => ww::ChangeType::Modified,
                    ChangeType::Deleted => ww::ChangeType::Deleted,
                },
                object: r(&c.object),
            })
            .collect(),
        first: req.first,
        topology: ww::Topology {
            nodes: req.topology.nodes.iter().map(convert::resource_to_wit).collect(),
            edges: req
                .topology
                .edges
                .iter()
                .map(|e| ww::Edge { link: e.link.clone(), from: e.from, to: e.to })
                .collect(),
        },
    }
}

/// A round's outcomes as the host works with them, keyed by object.
pub(super) type RawOutcomes = Vec<(ObjectKey, Result<RawOutcome, w::ReconcileError>)>;

/// The WIT answer's outcomes, before the units fold their state into them; `own` says whether a
/// key names one of the plugin's own objects in the round (an outcome for anything else is refused).
pub(super) fn outcomes(
    answer: ww::Answer,
    own: impl Fn(&ObjectRef) -> Option<ObjectKey>,
) -> Result<(RawOutcomes, Option<u64>), String> {
    let mut out = Vec::with_capacity(answer.outcomes.len());
    let mut seen = std::collections::HashSet::new();
    for o in answer.outcomes {
        let r = ObjectRef::new(o.object.kind, o.object.namespace, o.object.name);
        let Some(key) = own(&r) else {
            return Err(format!(
                "the round answered for {} {}/{}, which is not one of the plugin's own objects in the round",
                r.kind, r.namespace, r.name
            ));
        };
        if !seen.insert(key.clone()) {
            return Err(format!("the round answered twice for {key}"));
        }
        let result = o.result.map(|ok| {
            convert::response(w::Response {
                status: ok.status,
                conditions: ok.conditions,
                services: Vec::new(),
                requeue_after_ms: None,
                events: ok.events,
            })
        });
        out.push((key, result));
    }
    Ok((out, answer.requeue_after_ms))
}

impl Plugin {
    /// The world the plugin reconciles, when its component exports `world-reconciler` and
    /// `describe-world` named one: then its kinds are reconciled in rounds, never one by one.
    pub fn world(&self) -> Option<&WorldSpec> {
        self.world_spec.as_ref()
    }

    /// Runs one round: `reconcile-world` over `req`, under the plugin's limits (its output cap
    /// raised to the world's byte bound). Each own object's outcome is checked as a reconcile's
    /// answer is (status a JSON object, events bounded, grants); one that fails its check becomes
    /// that object's error, while the round's other outcomes stand.
    pub async fn reconcile_world(&self, req: RoundRequest, reads: Arc<dyn HostReads>) -> CallReport<RoundAnswer> {
        let input = CallInput { reads, inputs: Inputs::default() };
        let targets = req.targets.keys().cloned().collect::<std::collections::HashSet<_>>();
        let op = Op::World(round_to_wit(&req), req.targets);
        self.invoke(op, input, |o| {
            let OpOut::World(res) = o else { unreachable!("reconcile-world answers with a round") };
            let (outs, requeue) = match res {
                Ok(r) => r,
                Err(e) => return Err(e),
            };
            let outcomes = outs
                .into_iter()
                .map(|(k, r)| {
                    let checked = match r {
                        Ok(o) => self.check_answer(o, None),
                        Err(e) => Err(super::reconcile_error(e)),
                    };
                    (k, checked)
                })
                .filter(|(k, _)| targets.contains(k))
                .collect();
            Ok(RoundAnswer { outcomes, requeue_after: requeue.map(Duration::from_millis) })
        })
        .await
    }
}
