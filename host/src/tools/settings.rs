//! `plugins.<name>.tools`, the `tools` capability's own settings: which tools a plugin's objects may call, and the default attempt timeout.

use serde::{Deserialize, Serialize};

use crate::plugin::HumanDuration;

/// What `plugins.<name>.tools` says: the tools a plugin granted `tools` may call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsSettings {
    /// Tool-name patterns; `*` matches any run of characters (`x_git_*`, `workflow_*`, `*`).
    /// A call of a tool no pattern matches is refused.
    #[serde(default)]
    pub allow: Vec<String>,
    /// How long one attempt at a server's tool may take when the plugin names no timeout
    /// (`30s`, `5m`); the host's 60s when unset. A `workflow_*` tool is given 1h (as long as its
    /// nested run) unless the call names a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
}

impl ToolsSettings {
    /// Whether `tool` matches one of the `allow` patterns.
    pub fn allows(&self, tool: &str) -> bool {
        self.allow.iter().any(|p| glob_match(p, tool))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters (none included).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_patterns_match_with_stars() {
        assert!(glob_match("x_git_*", "x_git_status"));
        assert!(glob_match("x_git_*", "x_git_"));
        assert!(!glob_match("x_git_*", "x_gitlab_status"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("workflow_*", "workflow_deploy"));
        assert!(glob_match("x_*_status", "x_git_status"));
        assert!(!glob_match("x_*_status", "x_git_statuses"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXc"));
    }
}
