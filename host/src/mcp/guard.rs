//! The destructive-tool guard of `/mcp`: a tool annotated `destructiveHint: true` is refused to MCP clients unless `api.mcp.allow_destructive` allows it.
//!
//! The guard stands only between `/mcp` clients and the tools (a direct `tools/call` and the
//! `call_tool` meta-tool); calls that plugins make through the `tools` capability do not pass
//! it. A tool counts as destructive when its annotations say `destructiveHint: true` and do not
//! say `readOnlyHint: true` (MCP gives the destructive hint meaning only for a tool that is not
//! read-only). A tool without annotations, or without the hint, is not refused: MCP's default of
//! `true` for a missing hint would refuse nearly every server's tools.

use super::catalog::{Entry, Target};
use crate::config::mcp::AllowDestructive;

/// Whether the tool `entry` is destructive by its annotations.
pub fn is_destructive(entry: &Entry) -> bool {
    entry.tool.annotations.as_ref().is_some_and(|a| a.destructive_hint == Some(true) && a.read_only_hint != Some(true))
}

/// Checks a `/mcp` client's call of `entry` against `allow`: `Ok` when it may go ahead, or the
/// words of the refusal, which name the tool, say why, and give the exact host config that
/// allows it.
pub fn check(entry: &Entry, allow: &AllowDestructive) -> Result<(), String> {
    if !is_destructive(entry) || allow.allows_all() {
        return Ok(());
    }
    let name = entry.name();
    match &entry.target {
        Target::Server { owner, .. } => {
            let (ns, server) = (owner.namespace().as_str(), owner.name().as_str());
            if allow.allows_server(ns, server) {
                return Ok(());
            }
            let listed = match allow {
                AllowDestructive::Servers(s) if !s.is_empty() => {
                    let mut all: Vec<String> = s.iter().cloned().collect();
                    all.push(format!("{ns}/{server}"));
                    all.join(", ")
                }
                _ => format!("{ns}/{server}"),
            };
            Err(format!(
                "{name} is refused: MCPServer {ns}/{server} annotates it as destructive (destructiveHint: true), \
                 and /mcp clients may not call destructive tools unless the host config allows them. To allow \
                 the destructive tools of this server, write `api: {{ mcp: {{ allow_destructive: [{listed}] }} }}` \
                 in the host config (or `allow_destructive: true` for every destructive tool) and restart steward."
            ))
        }
        Target::Core(_) | Target::Workflow(_) => Err(format!(
            "{name} is refused: it changes what Steward manages (destructiveHint: true), and /mcp clients may \
             not call destructive tools unless the host config allows them. To allow it, write \
             `api: {{ mcp: {{ allow_destructive: true }} }}` in the host config (every destructive tool) and \
             restart steward."
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{Tool, ToolAnnotations};

    use super::*;
    use crate::mcp::core::CoreTool;
    use crate::model::ObjectKey;

    fn entry(name: &str, destructive: Option<bool>, read_only: Option<bool>, target: Target) -> Entry {
        let mut tool = Tool::new(name.to_string(), "t", Arc::new(Default::default()));
        if destructive.is_some() || read_only.is_some() {
            let mut a = ToolAnnotations::new();
            a.destructive_hint = destructive;
            a.read_only_hint = read_only;
            tool = tool.with_annotations(a);
        }
        Entry { tool, target }
    }

    fn server(ns: &str, name: &str) -> Target {
        Target::Server { owner: ObjectKey::new("MCPServer", ns, name), service: "main".into(), tool: "t".into() }
    }

    fn servers(names: &[&str]) -> AllowDestructive {
        AllowDestructive::Servers(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn destructive_tools_are_refused_unless_allowed() {
        let none = AllowDestructive::None;
        let all = AllowDestructive::All;
        let table: Vec<(Entry, AllowDestructive, Result<(), &str>)> = vec![
            // Not destructive by its annotations: always allowed.
            (entry("x_fs_read", None, None, server("default", "fs")), none.clone(), Ok(())),
            (entry("x_fs_read", Some(false), None, server("default", "fs")), none.clone(), Ok(())),
            (entry("x_fs_odd", Some(true), Some(true), server("default", "fs")), none.clone(), Ok(())),
            (
                entry("workflow_w", None, None, Target::Workflow(ObjectKey::new("Workflow", "default", "w"))),
                none.clone(),
                Ok(()),
            ),
            // Destructive: refused by default, with the config that allows it.
            (
                entry("x_fs_rm", Some(true), None, server("default", "fs")),
                none.clone(),
                Err("x_fs_rm is refused: MCPServer default/fs annotates it as destructive (destructiveHint: true)"),
            ),
            (
                entry("x_fs_rm", Some(true), Some(false), server("default", "fs")),
                none.clone(),
                Err("`api: { mcp: { allow_destructive: [default/fs] } }`"),
            ),
            (entry("x_fs_rm", Some(true), None, server("default", "fs")), all.clone(), Ok(())),
            (entry("x_fs_rm", Some(true), None, server("default", "fs")), servers(&["fs"]), Ok(())),
            (entry("x_fs_rm", Some(true), None, server("team", "fs")), servers(&["team/fs"]), Ok(())),
            // Another server listed: this one is added to the list in the advice.
            (
                entry("x_fs_rm", Some(true), None, server("team", "fs")),
                servers(&["default/fs", "db"]),
                Err("allow_destructive: [db, default/fs, team/fs]"),
            ),
            // The write core tools: only `true` allows them.
            (
                entry("core_mcpserver_delete", Some(true), Some(false), Target::Core(CoreTool::ResourceReconcile)),
                servers(&["fs"]),
                Err("core_mcpserver_delete is refused: it changes what Steward manages"),
            ),
            (
                entry("core_mcpserver_delete", Some(true), None, Target::Core(CoreTool::ResourceReconcile)),
                none.clone(),
                Err("`api: { mcp: { allow_destructive: true } }`"),
            ),
            (entry("core_mcpserver_delete", Some(true), None, Target::Core(CoreTool::ResourceReconcile)), all, Ok(())),
        ];
        for (e, allow, want) in table {
            match (check(&e, &allow), want) {
                (Ok(()), Ok(())) => {}
                (Err(got), Err(w)) => {
                    assert!(got.contains(w), "{} with {allow:?}: {got}", e.name());
                    assert!(got.contains("restart steward"), "{got}");
                }
                (got, want) => panic!("{} with {allow:?}: {got:?}, wanted {want:?}", e.name()),
            }
        }
    }
}
