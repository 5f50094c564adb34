//! The specs of `ToolPolicy` and `EffectiveToolPolicy`, and tool-name globs.

use steward_sdk::prelude::*;

/// The kinds a policy attaches to, least specific first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TargetKind {
    /// Every MCPServer of the namespace (the policy's own).
    Namespace,
    /// Every MCPServer the MCPServerGroup's selector selects.
    #[serde(rename = "MCPServerGroup")]
    McpServerGroup,
    /// One MCPServer.
    #[serde(rename = "MCPServer")]
    McpServer,
}

impl TargetKind {
    /// The kind's name as objects spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Namespace => "Namespace",
            Self::McpServerGroup => "MCPServerGroup",
            Self::McpServer => "MCPServer",
        }
    }
}

/// What a policy attaches to: an object in the policy's namespace, or that namespace itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetRef {
    /// `MCPServer`, `MCPServerGroup` or `Namespace`.
    pub kind: TargetKind,
    /// The object's name; for `Namespace`, the policy's own namespace.
    pub name: String,
}

/// Allow and deny lists of tool-name globs (`*` any run of characters, `?` one), matched against
/// the name the host offers a tool under (`x_git_status`). A tool is denied when it matches a
/// `deny` glob; otherwise it is allowed when `allow` is empty or it matches an `allow` glob.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// Globs of the tools allowed; empty allows every tool not denied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Globs of the tools denied; they win over `allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl Rules {
    /// Whether `tool` is allowed: not denied, and allowed when there is an allow list.
    pub fn allows(&self, tool: &str) -> bool {
        !self.deny.iter().any(|g| glob(g, tool)) && (self.allow.is_empty() || self.allow.iter().any(|g| glob(g, tool)))
    }
}

/// Tool rules attached to an MCPServer, an MCPServerGroup or a Namespace (Gateway API policy
/// attachment): `defaults` apply unless a more specific policy has defaults; `overrides` apply
/// over everything below them, unless a less specific policy has overrides.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolPolicySpec {
    /// What the policy attaches to.
    pub target_ref: TargetRef,
    /// Rules that a more specific policy's defaults replace.
    #[serde(default)]
    pub defaults: Option<Rules>,
    /// Rules that replace every more specific policy's.
    #[serde(default)]
    pub overrides: Option<Rules>,
}

/// The target of an EffectiveToolPolicy: the MCPServer whose tools it rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EffectiveTarget {
    /// Always `MCPServer`.
    pub kind: String,
    /// The MCPServer's name (in the EffectiveToolPolicy's namespace).
    pub name: String,
}

/// Which policy's rules an EffectiveToolPolicy holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DecidedBy {
    /// The ToolPolicy's name.
    pub policy: String,
    /// `defaults` or `overrides`.
    pub rules: String,
    /// What the policy attaches to: `Namespace`, `MCPServerGroup` or `MCPServer`.
    pub level: String,
}

/// The tool rules in force for one MCPServer, written by the toolpolicy plugin (never by hand):
/// read by WorkflowRun before it calls one of the server's tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveToolPolicySpec {
    /// The MCPServer.
    pub target: EffectiveTarget,
    /// Globs of the tools allowed; empty allows every tool not denied.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Globs of the tools denied; they win over `allow`.
    #[serde(default)]
    pub deny: Vec<String>,
    /// The policy whose rules these are.
    #[serde(default)]
    pub decided_by: Option<DecidedBy>,
    /// Every ToolPolicy attached along the server's paths, most specific first.
    #[serde(default)]
    pub policies: Vec<String>,
}

/// Whether `name` matches `pattern`: `*` matches any run of characters (none included), `?`
/// exactly one, anything else itself. Linear in the lengths (no backtracking blow-up).
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_shell_globs() {
        let cases = [
            ("x_git_*", "x_git_status", true),
            ("x_git_*", "x_gitx_status", false),
            ("*", "", true),
            ("*_delete", "x_kube_delete", true),
            ("*_delete", "x_kube_delete_pod", false),
            ("x_?it_*", "x_git_log", true),
            ("x_git_log", "x_git_log", true),
            ("x_git_log", "x_git_logs", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("", "", true),
            ("", "a", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(glob(p, n), want, "{p} ~ {n}");
        }
    }

    #[test]
    fn deny_wins_and_an_empty_allow_list_allows_the_rest() {
        let r = Rules { allow: vec![], deny: vec!["*_delete".into()] };
        assert!(r.allows("x_git_status"));
        assert!(!r.allows("x_git_delete"));
        let r = Rules { allow: vec!["x_git_*".into()], deny: vec!["x_git_push".into()] };
        assert!(r.allows("x_git_status"));
        assert!(!r.allows("x_git_push"));
        assert!(!r.allows("x_kube_pods"), "not on the allow list");
    }

    #[test]
    fn a_target_kind_outside_the_three_does_not_parse() {
        let bad = serde_json::from_value::<ToolPolicySpec>(
            serde_json::json!({"targetRef": {"kind": "Workflow", "name": "w"}, "defaults": {}}),
        );
        assert!(bad.is_err());
        let ok: ToolPolicySpec = serde_json::from_value(
            serde_json::json!({"targetRef": {"kind": "MCPServerGroup", "name": "g"}, "overrides": {"deny": ["*"]}}),
        )
        .unwrap();
        assert_eq!(ok.target_ref.kind, TargetKind::McpServerGroup);
    }
}
