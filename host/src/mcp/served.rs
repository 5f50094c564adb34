//! The live sessions of a namespace's ready MCPServers, and how their prompts and resource URIs are named: muster's `x_<prefix>_<name>`, a URI with a scheme as it is.

use crate::engine::Engine;
use crate::model::ObjectKey;
use crate::services::LiveSession;

/// The annotation that picks plain naming of one MCPServer (see the mcpserver plugin).
const NAMING_ANNOTATION: &str = "steward.dev/tool-naming";

/// How one server's prompts and resource URIs are named, as its tools are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Naming {
    /// muster's: `<mp>_<p>_<name>`, where `mp` is the host's prefix (`api.mcp.prefix`, `x`)
    /// and `p` the server's `toolPrefix`, else its name; `<p>_` is not repeated when the name
    /// starts with it.
    Muster {
        /// The host's prefix.
        host: String,
        /// The server's prefix.
        server: String,
    },
    /// Steward's plain naming (annotation `steward.dev/tool-naming: plain`): `<toolPrefix><name>`.
    Plain(String),
}

impl Naming {
    /// The exposed name of the server's prompt `name`.
    pub fn prompt(&self, name: &str) -> String {
        match self {
            Self::Muster { host, server } => {
                let lead = format!("{server}_");
                if name.starts_with(&lead) { format!("{host}_{name}") } else { format!("{host}_{lead}{name}") }
            }
            Self::Plain(prefix) => format!("{prefix}{name}"),
        }
    }

    /// The exposed URI of the server's resource `uri` (or URI template): as it is when it has
    /// a scheme (`…://`), else named as a prompt is (muster's rule).
    pub fn uri(&self, uri: &str) -> String {
        if uri.contains("://") { uri.to_string() } else { self.prompt(uri) }
    }
}

/// One live session of a ready server of the namespace.
#[derive(Clone, Debug)]
pub struct Served {
    /// The object that owns the service (an MCPServer).
    pub owner: ObjectKey,
    /// The service's name among the owner's.
    pub service: String,
    /// The session.
    pub live: LiveSession,
    /// How its prompts and URIs are named.
    pub naming: Naming,
}

/// The live sessions of the servers of `namespace` that offer tools now
/// ([`super::catalog::offers_tools`]), by owner then service, each with its naming.
pub fn servers(engine: &Engine, namespace: &str) -> Vec<Served> {
    let services = engine.units().services();
    let host = engine.config().api.mcp.prefix.clone();
    let mut out = Vec::new();
    for owner in services.owners().into_iter().filter(|o| o.namespace() == namespace) {
        let Some(status) = engine.view(&owner).and_then(|v| v.status) else { continue };
        if !super::catalog::offers_tools(&status) {
            continue;
        }
        let naming = naming_of(engine, &owner, &host);
        for s in services.observed(&owner) {
            if let Some(live) = services.session(&owner, &s.name) {
                out.push(Served { owner: owner.clone(), service: s.name, live, naming: naming.clone() });
            }
        }
    }
    out
}

/// The naming of `owner`'s prompts and URIs, from its spec (`toolPrefix`) and annotations.
fn naming_of(engine: &Engine, owner: &ObjectKey, host: &str) -> Naming {
    let cached = engine.cached(owner);
    let spec: serde_json::Value =
        cached.as_ref().and_then(|c| serde_json::from_str(&c.raw.spec).ok()).unwrap_or_default();
    let prefix = spec["toolPrefix"].as_str().filter(|p| !p.is_empty());
    let plain = cached.as_ref().and_then(|c| c.raw.annotations.get(NAMING_ANNOTATION)).is_some_and(|n| n == "plain");
    if plain {
        return Naming::Plain(prefix.unwrap_or_default().to_string());
    }
    Naming::Muster { host: host.to_string(), server: prefix.unwrap_or(owner.name().as_str()).to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_uris_are_named_as_muster_names_them() {
        let m = Naming::Muster { host: "x".into(), server: "ev".into() };
        assert_eq!(m.prompt("simple-prompt"), "x_ev_simple-prompt");
        assert_eq!(m.prompt("ev_greet"), "x_ev_greet", "the prefix is not repeated");
        assert_eq!(m.uri("demo://resource/static/document/a.md"), "demo://resource/static/document/a.md");
        assert_eq!(m.uri("file:///tmp/a"), "file:///tmp/a");
        assert_eq!(m.uri("notes/today"), "x_ev_notes/today", "a URI without a scheme is prefixed");
        let other = Naming::Muster { host: "m".into(), server: "git".into() };
        assert_eq!(other.prompt("log"), "m_git_log", "the host's prefix is api.mcp.prefix");
        let plain = Naming::Plain("gt".into());
        assert_eq!(plain.prompt("status"), "gtstatus");
        assert_eq!(plain.uri("a://b"), "a://b");
    }
}
