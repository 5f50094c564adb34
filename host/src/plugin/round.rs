//! A world round inside one store: `act-for` switches the units' state to the object the capability calls that follow act for, and the end of the round folds each object's state into its outcome.
//!
//! The units keep one typed state slot each per store ([`CallState::slot`]). In a world round
//! each of the plugin's own objects gets a set of slots of its own, bound and begun with that
//! object's input the first time `act-for` names it, so what a capability observes and what it
//! asks for is that object's, exactly as in a reconcile of the object alone. Calls made before
//! the first `act-for` belong to no object; asking for anything then fails the round.

use std::collections::HashMap;
use std::sync::Arc;

use steward_sdk::RawOutcome;

use super::bindings::steward::plugin::types as w;
use super::bindings::world::steward::plugin::round;
use super::error::PluginError;
use super::reads::HostReads;
use super::sandbox::CallState;
use super::settings::PluginSettings;
use super::unit::{CallInput, Capability, Inputs, TypeMap};
use crate::model::ObjectKey;

/// What a store knows of the round it runs: the units, the plugin, and each own object's input.
pub(crate) struct RoundScope {
    units: Vec<&'static dyn Capability>,
    plugin: String,
    settings: PluginSettings,
    reads: Arc<dyn HostReads>,
    /// The plugin's own objects in the round, each with its units' input.
    targets: HashMap<ObjectKey, Inputs>,
    /// The object the units' slots act for now (`None` before the first `act-for`).
    current: Option<ObjectKey>,
    /// The slots of the objects not acted for now.
    parked: HashMap<Option<ObjectKey>, TypeMap>,
}

impl RoundScope {
    /// A round of `plugin` (linked with `units`, configured by `settings`) whose own objects are
    /// `targets`' keys, reading through `reads`.
    pub(crate) fn new(
        units: Vec<&'static dyn Capability>,
        plugin: String,
        settings: PluginSettings,
        reads: Arc<dyn HostReads>,
        targets: HashMap<ObjectKey, Inputs>,
    ) -> Self {
        Self { units, plugin, settings, reads, targets, current: None, parked: HashMap::new() }
    }
}

impl round::Host for CallState {
    fn act_for(&mut self, object: w::ObjectRef) -> wasmtime::Result<bool> {
        let namespace = self.host.namespace(&object.kind, object.namespace);
        let key = ObjectKey::new(object.kind, namespace, object.name);
        let Some(mut scope) = self.round.take() else { return Ok(false) };
        let acted = switch(self, &mut scope, key);
        self.round = Some(scope);
        Ok(acted)
    }
}

/// Makes the units' slots those of `key`: parks the current ones, then takes `key`'s parked
/// slots, or binds and begins fresh ones with its input. False when `key` is not an own object.
fn switch(state: &mut CallState, scope: &mut RoundScope, key: ObjectKey) -> bool {
    let Some(inputs) = scope.targets.get(&key).cloned() else { return false };
    if scope.current.as_ref() == Some(&key) {
        return true;
    }
    let next = scope.parked.remove(&Some(key.clone()));
    let fresh = next.is_none();
    let before = state.swap_slots(next.unwrap_or_default());
    scope.parked.insert(scope.current.replace(key), before);
    if fresh {
        let input = CallInput { reads: scope.reads.clone(), inputs };
        for unit in &scope.units {
            unit.bind(state, &scope.plugin, &scope.settings);
            unit.begin_call(state, &input);
        }
    }
    true
}

/// Ends the round in `state`: folds each acted-for object's slots into its outcome in
/// `outcomes` (what `finish_call` does for a reconcile), and puts the store's own slots back.
/// Refuses a round that asked for something before its first `act-for`, or for an object it
/// gives no outcome.
pub(crate) fn finish(
    state: &mut CallState,
    outcomes: &mut [(ObjectKey, Result<RawOutcome, w::ReconcileError>)],
) -> Result<(), PluginError> {
    let Some(mut scope) = state.round.take() else { return Ok(()) };
    let current = state.swap_slots(TypeMap::default());
    scope.parked.insert(scope.current.take(), current);
    let mut result = Ok(());
    // The store's own slots (before any `act-for`) must hold no request.
    let own = scope.parked.remove(&None).unwrap_or_default();
    state.swap_slots(own);
    let mut unowned = super::convert::nothing();
    for unit in &scope.units {
        unit.finish_call(state, &mut unowned);
    }
    if let Some(unit) = scope.units.iter().find(|u| u.used_by(&unowned)) {
        result = Err(PluginError::BadOutput(format!(
            "the round asked for capability `{}` before `round.act-for` named the object it is for",
            unit.name()
        )));
    }
    let own = state.swap_slots(TypeMap::default());
    for (key, outcome) in outcomes.iter_mut() {
        let Some(slots) = scope.parked.remove(&Some(key.clone())) else { continue };
        state.swap_slots(slots);
        if let Ok(out) = outcome {
            for unit in &scope.units {
                unit.finish_call(state, out);
            }
        }
    }
    // What was asked for an object the answer says nothing of would be lost silently.
    for (key, slots) in scope.parked.drain() {
        let Some(key) = key else { continue };
        state.swap_slots(slots);
        let mut lost = super::convert::nothing();
        for unit in &scope.units {
            unit.finish_call(state, &mut lost);
        }
        if let Some(unit) = scope.units.iter().find(|u| u.used_by(&lost))
            && result.is_ok()
        {
            result = Err(PluginError::BadOutput(format!(
                "the round asked for capability `{}` for {key} but its answer has no outcome for it",
                unit.name()
            )));
        }
    }
    state.swap_slots(own);
    result
}
