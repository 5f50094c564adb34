//! The `/mcp` endpoint's section of the host config (`api.mcp`): how tools are offered, muster's prefix, the destructive-tool guard, management writes and OAuth metadata.

use std::collections::BTreeSet;

use serde::Deserialize;

/// How `/mcp` offers the tools of the host to a client (`api.mcp.tools`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolsMode {
    /// Only muster's meta-tools (`list_tools`, `describe_tool`, `filter_tools`, `call_tool`, …):
    /// a client's context does not grow with the number of servers. muster's default.
    #[default]
    Meta,
    /// Every tool of every ready server, every workflow and every `core_*` tool, listed flat.
    Direct,
    /// The meta-tools and every tool, listed flat.
    Both,
}

impl ToolsMode {
    /// True when `tools/list` names the meta-tools.
    pub fn lists_meta(self) -> bool {
        matches!(self, Self::Meta | Self::Both)
    }

    /// True when `tools/list` names every tool itself.
    pub fn lists_direct(self) -> bool {
        matches!(self, Self::Direct | Self::Both)
    }
}

/// Which destructive tools `/mcp` clients may call (`api.mcp.allow_destructive`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AllowDestructive {
    /// None: a tool annotated `destructiveHint: true`, and every write `core_*` tool, is refused.
    #[default]
    None,
    /// All of them (muster's `--yolo`).
    All,
    /// Those of the MCPServers named here (`NAME` in any namespace, or `NAMESPACE/NAME`).
    Servers(BTreeSet<String>),
}

impl AllowDestructive {
    /// True when a destructive tool of MCPServer `namespace/name` may be called.
    pub fn allows_server(&self, namespace: &str, name: &str) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Servers(s) => s.contains(name) || s.contains(&format!("{namespace}/{name}")),
        }
    }

    /// True when every destructive tool may be called (the write `core_*` tools among them).
    pub fn allows_all(&self) -> bool {
        matches!(self, Self::All)
    }
}

impl<'de> Deserialize<'de> for AllowDestructive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            Servers(Vec<String>),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected true (every destructive tool), false (none), or a list of MCPServer names (NAME or NAMESPACE/NAME)",
            )
        })?;
        Ok(match raw {
            Raw::Flag(false) => Self::None,
            Raw::Flag(true) => Self::All,
            Raw::Servers(names) => {
                for n in &names {
                    let ok = match n.split_once('/') {
                        Some((ns, name)) => crate::model::is_dns_subdomain(ns) && crate::model::is_dns_subdomain(name),
                        None => crate::model::is_dns_subdomain(n),
                    };
                    if !ok {
                        return Err(serde::de::Error::custom(format!(
                            "{n:?} is not an MCPServer name: write NAME or NAMESPACE/NAME (lower-case letters, digits, '-', '.')"
                        )));
                    }
                }
                Self::Servers(names.into_iter().collect())
            }
        })
    }
}

/// What the `core_*` management tools may do (`api.mcp.management`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Management {
    /// Read, list, validate: no tool changes an object. The default.
    #[default]
    ReadOnly,
    /// Also create, update and delete MCPServers and Workflows (files in filesystem mode,
    /// objects in Kubernetes mode), through the same validation as any other object.
    ReadWrite,
}

/// The `/mcp` endpoint's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpSettings {
    /// How tools are offered.
    pub tools: ToolsMode,
    /// The prefix of every MCP server's tools (`x` as in muster: `x_<server>_<tool>`).
    pub prefix: String,
    /// Which destructive tools clients may call.
    pub allow_destructive: AllowDestructive,
    /// Whether the management tools may write.
    pub management: Management,
    /// The OAuth authorization servers named in the protected-resource metadata
    /// (`/.well-known/oauth-protected-resource/mcp`), served when the API has a token.
    pub authorization_servers: Vec<String>,
}

/// muster's default [`McpSettings::prefix`].
pub const DEFAULT_PREFIX: &str = "x";

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            tools: ToolsMode::default(),
            prefix: DEFAULT_PREFIX.to_string(),
            allow_destructive: AllowDestructive::default(),
            management: Management::default(),
            authorization_servers: Vec::new(),
        }
    }
}

/// `api.mcp` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    #[serde(default)]
    tools: ToolsMode,
    prefix: Option<Prefix>,
    #[serde(default)]
    allow_destructive: AllowDestructive,
    #[serde(default)]
    management: Management,
    #[serde(default)]
    authorization_servers: Vec<AuthorizationServer>,
}

impl RawMcp {
    /// The settings, with defaults where the file says nothing.
    pub(super) fn resolve(self) -> McpSettings {
        McpSettings {
            tools: self.tools,
            prefix: self.prefix.map_or_else(|| DEFAULT_PREFIX.to_string(), |p| p.0),
            allow_destructive: self.allow_destructive,
            management: self.management,
            authorization_servers: self.authorization_servers.into_iter().map(|a| a.0).collect(),
        }
    }
}

/// A tool prefix: muster's `toolPrefix` pattern, `^[a-zA-Z][a-zA-Z0-9_-]*$`, at most 32 characters.
#[derive(Debug)]
struct Prefix(String);

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = String::deserialize(d)?;
        let mut chars = p.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && p.len() <= 32;
        if !ok {
            return Err(serde::de::Error::custom(format!(
                "prefix {p:?} is not valid: start with a letter, then letters, digits, '_' or '-' (at most 32), as muster's musterPrefix"
            )));
        }
        Ok(Prefix(p))
    }
}

/// An authorization server's issuer URL: `https://`, or `http://` on a loopback host.
#[derive(Debug)]
struct AuthorizationServer(String);

impl<'de> Deserialize<'de> for AuthorizationServer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let u = String::deserialize(d)?;
        let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"];
        let ok = (u.starts_with("https://") && u.len() > "https://".len())
            || loopback.iter().any(|l| u.strip_prefix(l).is_some_and(|r| r.is_empty() || r.starts_with([':', '/'])));
        if !ok || u.contains(['?', '#', ' ']) {
            return Err(serde::de::Error::custom(format!(
                "authorization server {u:?} is not an issuer URL: write https://HOST[/PATH] (http:// only on a loopback host), without query or fragment"
            )));
        }
        Ok(AuthorizationServer(u.trim_end_matches('/').to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpSettings, String> {
        crate::yaml::from_str::<RawMcp>(text).map(RawMcp::resolve).map_err(|e| e.message)
    }

    #[test]
    fn the_defaults_are_musters() {
        let s = parse("{}").unwrap();
        assert_eq!(s, McpSettings::default());
        assert_eq!((s.tools, s.prefix.as_str()), (ToolsMode::Meta, "x"));
        assert!(!s.allow_destructive.allows_server("default", "fs"));
        assert_eq!(s.management, Management::ReadOnly);
    }

    #[test]
    fn every_setting_is_read() {
        let s = parse(
            "tools: both\nprefix: m\nallow_destructive: [fs, team/db]\nmanagement: read-write\nauthorization_servers: ['https://dex.example.com/']\n",
        )
        .unwrap();
        assert!(s.tools.lists_meta() && s.tools.lists_direct());
        assert_eq!(s.prefix, "m");
        assert!(s.allow_destructive.allows_server("any", "fs"));
        assert!(s.allow_destructive.allows_server("team", "db"));
        assert!(!s.allow_destructive.allows_server("default", "db"));
        assert!(!s.allow_destructive.allows_all());
        assert_eq!(s.management, Management::ReadWrite);
        assert_eq!(s.authorization_servers, ["https://dex.example.com"]);
        assert!(parse("allow_destructive: true\n").unwrap().allow_destructive.allows_all());
        assert!(parse("tools: direct\n").unwrap().tools == ToolsMode::Direct);
    }

    #[test]
    fn bad_values_say_what_to_write() {
        for (text, says) in [
            ("prefix: 1x\n", "start with a letter"),
            ("tools: flat\n", "unknown variant"),
            ("allow_destructive: [Bad_Name]\n", "is not an MCPServer name"),
            ("allow_destructive: yes\n", "expected true"),
            ("management: write\n", "unknown variant"),
            ("authorization_servers: ['http://dex.example.com']\n", "is not an issuer URL"),
            ("token: x\n", "unknown field"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
