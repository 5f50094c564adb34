//! What the runtime knows of a capability: the [`Capability`] trait a unit implements, the list of units it is handed ([`Units`]), and the typed bags a unit keeps its call's input and state in.
//!
//! The runtime names no capability. It links a plugin with the units its settings grant, keeps
//! one typed state slot per unit in each store ([`CallState::slot`]), hands every unit the
//! call's input ([`CallInput`]) and lets each fold what it recorded into the answer. Which units
//! exist is decided by whoever makes the [`super::Runtime`] (`crate::capabilities::UNITS`).

use std::any::{Any, TypeId};
use std::sync::Arc;

use steward_sdk::RawOutcome;
use wasmtime::component::Linker;

use super::PluginSettings;
use super::error::PluginError;
use super::reads::{HostReads, NoReads};
use super::sandbox::CallState;

/// One capability a plugin can be granted.
///
/// Implementations are stateless values; the state of one call lives in the unit's own slot of
/// [`CallState`] (a type of the unit's, reached with [`CallState::slot`]), which its imports
/// reach through the projection given to `add_to_linker`.
pub trait Capability: Send + Sync + 'static {
    /// The name the host config grants it by (`plugins.<name>.capabilities: [<name>]`)
    /// and a plugin declares in `describe`.
    fn name(&self) -> &'static str;

    /// Full names of the WIT interfaces it provides, as they appear in a component's
    /// imports (`steward:plugin/services@0.1.0`); an entry ending in `*` provides every
    /// import that starts with what precedes it (`wasi:*`).
    fn interfaces(&self) -> &'static [&'static str];

    /// Whether every plugin has it without a grant (the base contract).
    fn always_granted(&self) -> bool {
        false
    }

    /// Adds its imports to `linker`; each import reaches only the unit's own state.
    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()>;

    /// Checks the host config of plugin `plugin`, which grants this unit; the error
    /// names the config key (`plugins.<plugin>.<key>: ...`).
    fn check_settings(&self, _plugin: &str, _settings: &PluginSettings) -> Result<(), String> {
        Ok(())
    }

    /// Binds the unit's state in a new store to the plugin the store serves, granted this
    /// unit: its name and settings (a store serves one plugin, with one set of settings, for
    /// its whole life). Called once per store, before its first call.
    fn bind(&self, _state: &mut CallState, _plugin: &str, _settings: &PluginSettings) {}

    /// Prepares the unit's state for a call with `input`.
    fn begin_call(&self, _state: &mut CallState, _input: &CallInput) {}

    /// Adds what the unit gives the plugin's request itself (the `request` record of WIT).
    fn request<'a>(&self, _inputs: &'a Inputs, _request: &mut super::lowered::Request<'a>) {}

    /// Folds what the unit recorded during a reconcile or finalize into the plugin's answer,
    /// before its size is checked.
    fn finish_call(&self, _state: &mut CallState, _outcome: &mut RawOutcome) {}

    /// Bytes of the answer that are the unit's, for the plugin's output cap.
    fn output_size(&self, _outcome: &RawOutcome) -> u64 {
        0
    }

    /// Whether `outcome` uses this capability (the host refuses such an answer from a
    /// plugin that is not granted it).
    fn used_by(&self, _outcome: &RawOutcome) -> bool {
        false
    }

    /// Refuses an answer of plugin `plugin` (granted this unit, with `settings`) that asks for
    /// what its grant does not allow; the error names what and the setting to change.
    fn check_outcome(
        &self,
        _plugin: &str,
        _settings: &PluginSettings,
        _outcome: &RawOutcome,
    ) -> Result<(), PluginError> {
        Ok(())
    }

    /// Whether the unit provides the component import `import`.
    fn provides(&self, import: &str) -> bool {
        self.interfaces().iter().any(|i| match i.strip_suffix('*') {
            Some(prefix) => import.starts_with(prefix),
            None => *i == import,
        })
    }
}

/// The units a runtime links, in the order they are linked.
#[derive(Clone, Copy)]
pub struct Units(pub &'static [&'static dyn Capability]);

impl Units {
    /// Every unit.
    pub fn all(&self) -> &'static [&'static dyn Capability] {
        self.0
    }

    /// The unit named `name`.
    pub fn get(&self, name: &str) -> Option<&'static dyn Capability> {
        self.0.iter().copied().find(|u| u.name() == name)
    }

    /// The units `settings` grant, always-granted ones included, in link order.
    pub fn granted(&self, settings: &PluginSettings) -> Vec<&'static dyn Capability> {
        self.0.iter().copied().filter(|u| u.always_granted() || settings.grants(u.name())).collect()
    }

    /// The units that are always granted: what a plugin is linked with before its grants are known.
    pub fn base(&self) -> Vec<&'static dyn Capability> {
        self.0.iter().copied().filter(|u| u.always_granted()).collect()
    }

    /// The unit that provides the component import `import`.
    pub fn for_import(&self, import: &str) -> Option<&'static dyn Capability> {
        self.0.iter().copied().find(|u| u.provides(import))
    }

    /// Every interface the units provide, for messages.
    pub fn provided(&self) -> String {
        self.0.iter().flat_map(|u| u.interfaces().iter().copied()).collect::<Vec<_>>().join(", ")
    }
}

/// A small map from a type to one value of it: where units keep their call input and state
/// without the runtime knowing their types. Lookups scan a handful of entries and allocate nothing.
#[derive(Default)]
pub struct TypeMap {
    entries: Vec<(TypeId, Box<dyn Any + Send>)>,
}

impl TypeMap {
    /// The value of type `T`, made with `T::default()` the first time it is asked for.
    pub fn get_or_default<T: Any + Send + Default>(&mut self) -> &mut T {
        let id = TypeId::of::<T>();
        let at = match self.entries.iter().position(|(t, _)| *t == id) {
            Some(at) => at,
            None => {
                self.entries.push((id, Box::new(T::default())));
                self.entries.len() - 1
            }
        };
        // The entry under `TypeId::of::<T>()` always holds a `T`.
        self.entries[at].1.downcast_mut::<T>().expect("a slot holds the type it is keyed by")
    }
}

/// What one call gives the units: the cache `get` and `list` read, and each unit's own input
/// (keyed by its type, put there by whoever makes the call).
#[derive(Clone)]
pub struct CallInput {
    /// The host cache `get` and `list` read.
    pub reads: Arc<dyn HostReads>,
    /// Each unit's input, by type.
    pub inputs: Inputs,
}

impl CallInput {
    /// A call that reads nothing and owns nothing (describe, validate).
    pub fn none() -> Self {
        Self { reads: Arc::new(NoReads), inputs: Inputs::default() }
    }
}

/// The units' inputs of one reconcile or finalize, each under its own type.
#[derive(Clone, Default)]
pub struct Inputs {
    entries: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
}

impl Inputs {
    /// Sets the input of type `T` (replacing one there was).
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        self.entries.retain(|(t, _)| *t != id);
        self.entries.push((id, Arc::new(value)));
    }

    /// `self` with `value` set.
    pub fn with<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.insert(value);
        self
    }

    /// The input of type `T`, if one was given.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries.iter().find(|(t, _)| *t == id).and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// The input of type `T`, shared rather than borrowed: for a unit that keeps it for the
    /// call and converts it only if the plugin asks.
    pub fn get_shared<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let id = TypeId::of::<T>();
        self.entries.iter().find(|(t, _)| *t == id).and_then(|(_, v)| v.clone().downcast::<T>().ok())
    }
}

impl std::fmt::Debug for Inputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inputs({} given)", self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Debug, PartialEq)]
    struct A(u32);
    #[derive(Default, Debug, PartialEq)]
    struct B(&'static str);

    #[test]
    fn each_type_has_its_own_slot() {
        let mut m: TypeMap = TypeMap::default();
        m.get_or_default::<A>().0 = 7;
        m.get_or_default::<B>().0 = "b";
        assert_eq!(m.get_or_default::<A>(), &A(7));
        assert_eq!(m.get_or_default::<B>(), &B("b"));
        assert_eq!(m.entries.len(), 2);
    }

    #[test]
    fn inputs_are_found_by_type_and_replaced() {
        let i = Inputs::default().with(A(1)).with(A(2)).with(B("x"));
        assert_eq!(i.get::<A>(), Some(&A(2)));
        assert_eq!(i.get::<B>(), Some(&B("x")));
        assert_eq!(i.get::<u8>(), None);
    }
}
