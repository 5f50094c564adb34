//! Capabilities: each power a plugin can be granted is one self-contained unit, and [`UNITS`] lists them all.
//!
//! A unit ([`Capability`]) says everything the host needs to know about one
//! capability: the name a host config grants it by, the WIT interfaces it
//! provides, how it adds those imports to a wasmtime [`Linker`], which checks
//! its grant and settings need, the per-call state it owns (one field of
//! [`CallState`]), and what it does with a call's outcome. The runtime links
//! each plugin with exactly the units it is granted, and compares a
//! component's actual imports with its grants when it loads ([`check_imports`]).
//!
//! To add a capability: write one unit in its own file here, add its WIT
//! interface to `wit/plugin.wit` (and to the world `plugin-full`), give it a
//! field in [`CallState`], and list it in [`UNITS`]. `docs/plugins.md`
//! ("Adding a capability to the host") walks through it.

mod base;
mod children;
mod imports;
mod services;
mod tools;

use std::sync::Arc;

use steward_sdk::{CallRecord, ObservedChild, ServiceStatus};
use wasmtime::component::Linker;

use crate::plugin::bindings::steward::plugin::types::Response;
use crate::plugin::{CallState, HostReads, PluginSettings};

pub use base::{Base, BaseState};
pub use children::{Children, ChildrenState, NAME as CHILDREN};
pub use imports::{ImportCheck, UnknownImport, check_imports, unit_for_import};
pub use services::{
    ServiceSecrets, Services, ServicesState, apply_desired, observed, owns_services, resolve_commands,
    resolve_secret_files,
};
pub use tools::{MAX_CALL_ID, Tools, ToolsState};

/// One capability a plugin can be granted.
///
/// Implementations are stateless values listed in [`UNITS`]; the state of one
/// call lives in the unit's own field of [`CallState`], which its imports
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

    /// Prepares the unit's state for a call with `input`.
    fn begin_call(&self, state: &mut CallState, input: &CallInput);

    /// Folds what the unit recorded during a reconcile or finalize into the plugin's answer.
    fn finish_call(&self, _state: &mut CallState, _response: &mut Response) {}

    /// Whether `response` uses this capability (the host refuses such an answer from a
    /// plugin that is not granted it).
    fn used_by(&self, _response: &Response) -> bool {
        false
    }

    /// Whether the unit provides the component import `import`.
    fn provides(&self, import: &str) -> bool {
        self.interfaces().iter().any(|i| match i.strip_suffix('*') {
            Some(prefix) => import.starts_with(prefix),
            None => *i == import,
        })
    }
}

/// Every capability this host offers, in the order they are linked. The one list:
/// config validation, linking, import checks and `steward plugin` output read it.
pub static UNITS: &[&dyn Capability] = &[&Base, &Services, &Tools, &Children];

/// What one call gives the units: the base unit's reads, the services unit's observations, the
/// tools unit's records, the children unit's observed children.
#[derive(Clone)]
pub struct CallInput {
    /// The host cache `get` and `list` read.
    pub reads: Arc<dyn HostReads>,
    /// What the host observes of the services the object owns.
    pub services: Vec<ServiceStatus>,
    /// The tool calls the host holds for the object (the tools unit's records).
    pub calls: Vec<CallRecord>,
    /// The child objects the host holds for the object, as last seen (the children unit's).
    pub children: Vec<ObservedChild>,
}

impl CallInput {
    /// A call that reads nothing and owns nothing (describe, validate).
    pub fn none() -> Self {
        Self { reads: Arc::new(crate::plugin::NoReads), services: Vec::new(), calls: Vec::new(), children: Vec::new() }
    }
}

/// The unit named `name`.
pub fn unit(name: &str) -> Option<&'static dyn Capability> {
    UNITS.iter().copied().find(|u| u.name() == name)
}

/// Names a host config may grant (every unit that is not always granted).
pub fn grantable() -> Vec<&'static str> {
    UNITS.iter().filter(|u| !u.always_granted()).map(|u| u.name()).collect()
}

/// Checks one grant as written in the host config; the error says what this host grants.
pub fn check_grant(name: &str) -> Result<(), String> {
    match unit(name) {
        Some(u) if !u.always_granted() => Ok(()),
        Some(u) => Err(format!("capability `{}` is always granted; remove it from the list", u.name())),
        None => Err(format!("unknown capability `{name}`; this host grants: {}", grantable().join(", "))),
    }
}

/// The units `settings` grant, always-granted ones included, in [`UNITS`] order.
pub fn granted_units(settings: &PluginSettings) -> Vec<&'static dyn Capability> {
    UNITS.iter().copied().filter(|u| u.always_granted() || settings.grants(u.name())).collect()
}

/// The units that are always granted: what a plugin is linked with before its grants are known.
pub fn base_units() -> Vec<&'static dyn Capability> {
    UNITS.iter().copied().filter(|u| u.always_granted()).collect()
}

/// A linker holding exactly `units`' imports.
pub fn linker(engine: &wasmtime::Engine, units: &[&'static dyn Capability]) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    for u in units {
        u.add_to_linker(&mut linker)?;
    }
    Ok(linker)
}

/// Links every import of `component` that a unit outside `linked` provides to functions
/// that trap when called, so a plugin blocked for a missing grant can still describe itself.
/// Only those imports are stubbed: the linked units' imports (and WASI's version matching)
/// are left as they are.
pub fn trap_ungranted_imports(
    linker: &mut Linker<CallState>,
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    linked: &[&'static dyn Capability],
) -> wasmtime::Result<()> {
    use wasmtime::component::types::ComponentItem;
    for (name, item) in component.component_type().imports(engine) {
        let Some(unit) = unit_for_import(name) else { continue };
        if linked.iter().any(|u| u.name() == unit.name()) {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = item.ty else { continue };
        let mut inst = linker.instance(name)?;
        for (export, ext) in instance.exports(engine) {
            if let ComponentItem::ComponentFunc(_) = ext.ty {
                let (capability, what) = (unit.name(), format!("{name}#{export}"));
                inst.func_new(export, move |_, _, _, _| {
                    wasmtime::bail!("{what} needs capability `{capability}`, which the host config does not grant")
                })?;
            }
        }
    }
    Ok(())
}

/// Runs every unit's settings check for the units `settings` grant to `plugin`.
pub fn check_settings(plugin: &str, settings: &PluginSettings) -> Result<(), String> {
    granted_units(settings).iter().try_for_each(|u| u.check_settings(plugin, settings))
}

#[cfg(test)]
mod tests;
