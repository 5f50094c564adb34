//! Compares what a component actually imports with what its plugin declares and its config grants.

use super::PluginSettings;
use super::unit::Units;

/// An import that no unit of this host provides.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("it imports {interface}, which no capability of this host provides (it provides {provided})")]
pub struct UnknownImport {
    /// The import's full name, for example `steward:plugin/http@0.1.0`.
    pub interface: String,
    /// What the host's units provide.
    pub provided: String,
}

/// The capabilities a component imports, found from its import names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportCheck {
    /// Each grantable capability the component imports, with the first interface of it
    /// that it imports, in link order.
    pub imported: Vec<(&'static str, String)>,
}

/// Maps every import name to its unit of `units`; an import no unit provides is an error naming it.
pub fn check_imports<'a>(
    units: Units,
    imports: impl IntoIterator<Item = &'a str>,
) -> Result<ImportCheck, UnknownImport> {
    let mut found: Vec<(&'static str, String)> = Vec::new();
    for import in imports {
        let unit = units
            .for_import(import)
            .ok_or_else(|| UnknownImport { interface: import.to_string(), provided: units.provided() })?;
        if !unit.always_granted() && !found.iter().any(|(n, _)| *n == unit.name()) {
            found.push((unit.name(), import.to_string()));
        }
    }
    let order = |n: &str| units.all().iter().position(|u| u.name() == n);
    found.sort_by_key(|(n, _)| order(n));
    Ok(ImportCheck { imported: found })
}

impl ImportCheck {
    /// Whether the component imports capability `name`.
    pub fn imports(&self, name: &str) -> bool {
        self.imported.iter().any(|(n, _)| *n == name)
    }

    /// Capabilities the plugin declares and its settings do not grant: a plugin with any is
    /// blocked. An import alone never blocks (see [`ImportCheck::ungranted`]).
    pub fn missing(&self, declared: &[String], settings: &PluginSettings) -> Vec<String> {
        declared.iter().filter(|c| !settings.grants(c)).cloned().collect()
    }

    /// Capabilities the component imports and its settings do not grant, in link order: it
    /// loads all the same, with those imports linked to functions that fail the call naming
    /// the grant (a component built for a whole world imports more than it uses).
    pub fn ungranted(&self, settings: &PluginSettings) -> Vec<&'static str> {
        self.imported.iter().map(|(n, _)| *n).filter(|n| !settings.grants(n)).collect()
    }

    /// The capabilities the plugin may use: those it declares, then those it imports that
    /// its settings grant, each once. What a config line granting it all lists.
    pub fn usable(&self, declared: &[String], settings: &PluginSettings) -> Vec<String> {
        let mut out = declared.to_vec();
        for (n, _) in &self.imported {
            if settings.grants(n) && !out.iter().any(|d| d == n) {
                out.push(n.to_string());
            }
        }
        out
    }

    /// Warnings: capabilities the plugin declares or its settings grant that the component
    /// never imports (a plugin built before the capability had an interface, or a grant to spare).
    pub fn unused(&self, units: Units, plugin: &str, declared: &[String], settings: &PluginSettings) -> Vec<String> {
        let mut out = Vec::new();
        for unit in units.all().iter().filter(|u| !u.always_granted() && !self.imports(u.name())) {
            let name = unit.name();
            let interface = unit.interfaces().first().copied().unwrap_or_default();
            if declared.iter().any(|d| d == name) {
                out.push(format!(
                    "plugin {plugin} declares capability `{name}` but never imports {interface}; it was built \
                     before the capability had an interface, or does not use it"
                ));
            } else if settings.grants(name) {
                out.push(format!(
                    "plugins.{plugin}.capabilities grants `{name}`, which the plugin never imports ({interface}); \
                     the grant can go"
                ));
            }
        }
        out
    }
}
