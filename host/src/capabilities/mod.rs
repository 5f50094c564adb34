//! Capabilities: each power a plugin can be granted is one self-contained unit, and [`UNITS`] lists them all.
//!
//! A unit implements the runtime's [`Capability`] trait: the name a host config grants it by,
//! the WIT interfaces it provides, how it adds those imports to a wasmtime linker, which checks
//! its grant and settings need, the per-call state it owns (a type of its own, kept in a slot of
//! [`crate::plugin::CallState`]), and what it folds into a call's answer. The runtime names no
//! unit: it is handed [`UNITS`] when it is made ([`Runtime::new`]), links each plugin with
//! exactly the units it is granted, and compares a component's actual imports with its grants
//! when it loads.
//!
//! To add a capability: write one unit in its own module here, add its WIT interface to
//! `wit/plugin.wit` (and to the world `plugin-full`), and add one line to the `units!` list
//! below: its module, the unit, and its settings type when it has a section in the host
//! config.
//! `docs/plugins.md` ("Adding a capability to the host") walks through it.

mod effects;
mod settings;

use std::sync::{Arc, LazyLock};

use crate::plugin::{PluginSettings, Runtime, RuntimeError, RuntimeOptions, Section, Units};

pub use crate::plugin::{CallInput, Capability};
pub use base::Base;
pub use children::{Children, ChildrenSettings, ChildrenState, NAME as CHILDREN, ObservedChildren};
pub use effects::{Access, Effects, HostContext, Requeue, Started, Unit, start};
pub use services::{
    ObservedServices, Services, ServicesState, apply_desired, observed, owns_services, resolve_commands,
    resolve_secret_files,
};
pub use settings::RawPluginSettings;
pub use tools::{HeldCalls, MAX_CALL_ID, Tools, ToolsState};

/// Lists the units, one line each: the unit's module (declared here), the unit, and its
/// settings type when it has a section in the host config (`tools: Tools => ToolsSettings`).
/// Makes [`UNITS`], and [`parse_section`], so the config parses each section as its unit's
/// own type, at its place in the file.
macro_rules! units {
    ($($vis:vis $module:ident: $unit:expr $(=> $section:ty)?),* $(,)?) => {
        $($vis mod $module;)*

        /// Every capability this host offers, in the order they are linked. The one list:
        /// config validation, linking, import checks, `steward plugin` output and the engine's
        /// start read it; adding a unit is adding it here.
        pub static UNITS: &[&dyn Unit] = &[$(&$unit),*];

        /// Parses the section `plugins.<name>.<key>` as the settings type of the unit named
        /// `key`, from `d` as it stands (so an error points at its line); `None` when no unit
        /// has a section named `key`.
        pub(crate) fn parse_section<'de, D: serde::Deserializer<'de>>(
            key: &str,
            d: D,
        ) -> Option<Result<(&'static str, Arc<dyn Section>), D::Error>> {
            $($(
                if key == Capability::name(&$unit) {
                    let parsed = <$section as serde::Deserialize>::deserialize(d);
                    return Some(parsed.map(|s| (Capability::name(&$unit), Arc::new(s) as Arc<dyn Section>)));
                }
            )?)*
            let _ = d;
            None
        }

        /// The keys of the units' settings sections, in [`UNITS`] order.
        pub(crate) fn section_keys() -> Vec<&'static str> {
            let mut keys = Vec::new();
            $($(
                let _: Option<$section> = None;
                keys.push(Capability::name(&$unit));
            )?)*
            keys
        }
    };
}

units! {
    pub http: http::Http => http::HttpSettings,
    base: Base,
    services: Services,
    tools: Tools => crate::tools::ToolsSettings,
    children: Children => ChildrenSettings,
}

/// [`UNITS`] as the runtime sees them.
static LINKED: LazyLock<Vec<&'static dyn Capability>> =
    LazyLock::new(|| UNITS.iter().map(|u| *u as &'static dyn Capability).collect());

/// Every unit of [`UNITS`], as the runtime links them.
pub fn units() -> Units {
    Units(LINKED.as_slice())
}

impl Runtime {
    /// The runtime of this host: [`Runtime::with_units`] with every unit of [`UNITS`].
    pub fn new(opts: RuntimeOptions) -> Result<Arc<Self>, RuntimeError> {
        Self::with_units(units(), opts)
    }
}

/// The unit named `name`.
pub fn unit(name: &str) -> Option<&'static dyn Capability> {
    units().get(name)
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

/// Runs every unit's settings check for the units `settings` grant to `plugin`.
pub fn check_settings(plugin: &str, settings: &PluginSettings) -> Result<(), String> {
    units().granted(settings).iter().try_for_each(|u| u.check_settings(plugin, settings))
}

/// What the host must be allowed in a cluster for `plugins` (each by the capabilities it may use
/// and its settings): the union of what each unit needs for the plugins that use it.
pub fn access(plugins: &[(Vec<String>, &PluginSettings)]) -> Access {
    UNITS.iter().fold(Access::default(), |acc, u| {
        let using: Vec<&PluginSettings> =
            plugins.iter().filter(|(caps, _)| caps.iter().any(|c| c == u.name())).map(|(_, s)| *s).collect();
        if using.is_empty() { acc } else { acc.union(u.access(&using)) }
    })
}

/// Lets every unit of [`UNITS`] add its metric families to the host's `registry`.
pub fn register_metrics(registry: &mut prometheus_client::registry::Registry) {
    for u in UNITS {
        u.register_metrics(registry);
    }
}

#[cfg(test)]
mod tests;
