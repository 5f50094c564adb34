//! How an MCPServer's tools are named: muster's aggregator names by default, or Steward's
//! plain `<toolPrefix><tool>` for an object that asks for it.
//!
//! muster's rules: a server's tool `t` is `x_<p>_t`, where `x` is the host's prefix
//! (`api.mcp.prefix`, muster's `aggregator.musterPrefix`, `x` by default), `p` is its
//! `toolPrefix`, or its name when it has none, and `<p>_` is not repeated when `t` already
//! starts with it. A member of a family is named after the family instead: `x_<family>_t`,
//! unless the members of the
//! family (the MCPServers of the namespace that declare it) disagree on `instanceArg`; then the
//! whole family falls back to per-server names.

use std::collections::BTreeMap;

use serde_json::Value;
use steward_sdk::{FieldError, RawObject};

use crate::spec::{Family, McpServerSpec};

/// The prefix muster's aggregator puts before every server tool by default; the host's
/// `api.mcp.prefix` replaces it ([`steward_sdk::settings::mcp_prefix`]).
pub const MUSTER_PREFIX: &str = steward_sdk::settings::DEFAULT_MCP_PREFIX;

/// The annotation that picks the naming of one MCPServer's tools: `muster` (the default) or `plain`.
pub const NAMING_ANNOTATION: &str = "steward.dev/tool-naming";

/// How a server's tools are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolNaming {
    /// muster's: `x_<toolPrefix or name>_<tool>`, `x_<family>_<tool>`.
    #[default]
    Muster,
    /// Steward's before muster naming: `<toolPrefix><tool>`, no separator, no fallback.
    Plain,
}

impl ToolNaming {
    /// The naming an object's annotations ask for; the error is for `metadata.annotations`.
    pub fn of(annotations: &BTreeMap<String, String>) -> Result<Self, FieldError> {
        match annotations.get(NAMING_ANNOTATION).map(String::as_str) {
            None | Some("muster") => Ok(Self::Muster),
            Some("plain") => Ok(Self::Plain),
            Some(other) => Err(FieldError::new(
                format!("metadata.annotations.{NAMING_ANNOTATION}"),
                format!("must be muster (the default) or plain, not {other:?}"),
            )),
        }
    }
}

/// muster's name, under the host's prefix `host`, of tool `tool` of a server whose prefix (its
/// `toolPrefix`, else its name) is `prefix`.
pub fn server_tool_name(host: &str, prefix: &str, tool: &str) -> String {
    join(host, prefix, tool)
}

/// muster's name, under the host's prefix `host`, of tool `tool` of a member of family `family`.
pub fn family_tool_name(host: &str, family: &str, tool: &str) -> String {
    join(host, family, tool)
}

fn join(host: &str, prefix: &str, tool: &str) -> String {
    let lead = format!("{prefix}_");
    if tool.starts_with(&lead) { format!("{host}_{tool}") } else { format!("{host}_{lead}{tool}") }
}

/// Whether the members of `family` among `servers` (the MCPServers of one namespace, this one
/// included) disagree on `instanceArg`, so that muster names their tools per server.
pub fn family_diverges(family: &Family, servers: &[RawObject]) -> bool {
    servers.iter().any(|s| {
        let Ok(spec) = serde_json::from_str::<Value>(&s.spec) else {
            return false;
        };
        let f = &spec["family"];
        f["name"].as_str() == Some(family.name.as_str())
            && f["instanceArg"].as_str().is_some_and(|arg| arg != family.instance_arg)
    })
}

/// The names under which the server `name` with `spec` offers `tools` on a host whose prefix is
/// `host` (muster naming only), sorted and unique. `family_fallback` says that its family's
/// members disagree (see [`family_diverges`]).
pub fn exposed_tools<'a>(
    host: &str,
    name: &str,
    spec: &McpServerSpec,
    naming: ToolNaming,
    family_fallback: bool,
    tools: impl Iterator<Item = &'a str>,
) -> Vec<String> {
    let mut out: Vec<String> = match naming {
        ToolNaming::Plain => {
            let prefix = spec.tool_prefix.as_deref().unwrap_or_default();
            tools.map(|t| format!("{prefix}{t}")).collect()
        }
        ToolNaming::Muster => match spec.family.as_ref().filter(|_| !family_fallback) {
            Some(family) => tools.map(|t| family_tool_name(host, &family.name, t)).collect(),
            None => {
                let prefix = spec.tool_prefix.as_deref().unwrap_or(name);
                tools.map(|t| server_tool_name(host, prefix, t)).collect()
            }
        },
    };
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_sdk::testing::object;

    fn spec(v: Value) -> McpServerSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn muster_names_with_prefix_or_server_name() {
        assert_eq!(server_tool_name("x", "kubernetes", "list_pods"), "x_kubernetes_list_pods");
        assert_eq!(server_tool_name("x", "github", "github_search"), "x_github_search", "the prefix is not repeated");
        let s = spec(json!({"type": "stdio", "command": "x"}));
        assert_eq!(
            exposed_tools("x", "git", &s, ToolNaming::Muster, false, ["status", "diff"].into_iter()),
            ["x_git_diff", "x_git_status"]
        );
        let s = spec(json!({"type": "stdio", "command": "x", "toolPrefix": "gt"}));
        assert_eq!(exposed_tools("x", "git", &s, ToolNaming::Muster, false, ["status"].into_iter()), ["x_gt_status"]);
        assert_eq!(exposed_tools("x", "git", &s, ToolNaming::Plain, false, ["status"].into_iter()), ["gtstatus"]);
    }

    #[test]
    fn the_host_prefix_replaces_x() {
        let s = spec(json!({"type": "stdio", "command": "x"}));
        assert_eq!(exposed_tools("m", "git", &s, ToolNaming::Muster, false, ["status"].into_iter()), ["m_git_status"]);
        assert_eq!(server_tool_name("ms", "github", "github_search"), "ms_github_search");
        let f = spec(json!({"type": "stdio", "command": "x", "family": {"name": "k", "instanceArg": "c"}}));
        assert_eq!(exposed_tools("m", "a", &f, ToolNaming::Muster, false, ["pods"].into_iter()), ["m_k_pods"]);
        assert_eq!(exposed_tools("m", "git", &s, ToolNaming::Plain, false, ["status"].into_iter()), ["status"]);
    }

    #[test]
    fn family_names_and_the_fallback() {
        let s = spec(json!({"type": "stdio", "command": "x", "toolPrefix": "k1",
                           "family": {"name": "kubernetes", "instanceArg": "cluster"}}));
        assert_eq!(
            exposed_tools("x", "a", &s, ToolNaming::Muster, false, ["list_pods"].into_iter()),
            ["x_kubernetes_list_pods"]
        );
        assert_eq!(
            exposed_tools("x", "a", &s, ToolNaming::Muster, true, ["list_pods"].into_iter()),
            ["x_k1_list_pods"]
        );
        let family = s.family.clone().unwrap();
        let member = |name: &str, arg: &str| {
            object(
                "MCPServer",
                name,
                json!({"type": "stdio", "command": "x", "family": {"name": "kubernetes", "instanceArg": arg}}),
            )
        };
        assert!(!family_diverges(&family, &[member("a", "cluster"), member("b", "cluster")]));
        assert!(family_diverges(&family, &[member("a", "cluster"), member("b", "mc")]));
    }

    #[test]
    fn the_annotation_picks_the_naming() {
        let mut a = BTreeMap::new();
        assert_eq!(ToolNaming::of(&a).unwrap(), ToolNaming::Muster);
        a.insert(NAMING_ANNOTATION.to_string(), "plain".to_string());
        assert_eq!(ToolNaming::of(&a).unwrap(), ToolNaming::Plain);
        a.insert(NAMING_ANNOTATION.to_string(), "fancy".to_string());
        assert!(ToolNaming::of(&a).unwrap_err().message.contains("\"fancy\""));
    }
}
