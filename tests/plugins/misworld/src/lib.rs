//! A test world plugin whose rounds misbehave on purpose: the round does what the first of its
//! `MisWorld` objects (by namespace and name) whose `spec.behavior` is not `ok` names, so a
//! test can make a whole round trap, loop, eat memory or fail, and then repair it.

use steward_sdk::prelude::*;
use steward_sdk::{ObjectRef, Round, RoundContext, World, WorldAnswer, WorldInfo};

/// What a round does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Behavior {
    /// Answer for every object.
    Ok,
    /// Execute `unreachable`.
    Trap,
    /// Spin forever.
    Loop,
    /// Allocate (and touch) memory without bound.
    Alloc,
    /// Fail the round with `retry`.
    Retry,
}

/// The spec of a `MisWorld` object.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MisWorldSpec {
    /// What the round does while this object asks for it.
    pub behavior: Behavior,
}

/// The `MisWorld` kind: its objects are reconciled together, in rounds.
pub struct MisWorld;

impl Kind for MisWorld {
    type Spec = MisWorldSpec;
    type Status = serde_json::Value;
    const GROUP: &'static str = "test.steward.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "MisWorld";
    const PLURAL: &'static str = "misworlds";

    fn reconcile(
        _ctx: &Context,
        _obj: &Object<MisWorldSpec, serde_json::Value>,
    ) -> Result<Outcome<serde_json::Value>, Error> {
        Err(Error::fatal("MisWorld objects are reconciled in world rounds"))
    }
}

/// The world: its own objects only.
pub struct Rounds;

impl World for Rounds {
    fn info() -> WorldInfo {
        WorldInfo::new(Vec::<String>::new())
    }

    fn reconcile(_ctx: &RoundContext, round: &Round) -> Result<WorldAnswer, Error> {
        let t = &round.topology;
        let ids: Vec<_> = t.of_kind(MisWorld::KIND).collect();
        let asked = ids
            .iter()
            .find_map(|&id| t.spec::<MisWorldSpec>(id).ok().map(|s| s.behavior).filter(|b| *b != Behavior::Ok));
        match asked {
            Some(Behavior::Trap) => trap(),
            Some(Behavior::Loop) => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some(Behavior::Alloc) => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            Some(Behavior::Retry) => return Err(Error::retry("misworld: the round asked to fail")),
            Some(Behavior::Ok) | None => {}
        }
        let mut answer = WorldAnswer::new();
        for id in ids {
            let Some(r) = t.object_ref(id) else { continue };
            let status = serde_json::json!({"objects": t.nodes().len(), "changes": round.changes.len()});
            answer.outcome(
                ObjectRef::new(&r.kind, &r.namespace, &r.name),
                Outcome::status(status).condition(Condition::new("Ready", true, "Rounded", "the round answered")),
            );
        }
        Ok(answer)
    }
}

#[cfg(target_arch = "wasm32")]
fn trap() -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(not(target_arch = "wasm32"))]
fn trap() -> ! {
    std::process::abort()
}

steward_sdk::export_plugin!(name: "misworld", version: "0.1.0", kinds: [MisWorld], world: Rounds);
