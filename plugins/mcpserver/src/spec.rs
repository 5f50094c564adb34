//! The MCPServer spec: how to start or reach one MCP server, field-compatible with muster's.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{Schema, SchemaGenerator, json_schema};
use steward_sdk::Transport;
use steward_sdk::prelude::*;

/// The health-probe timeout, in seconds, when the spec gives none.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 30;

/// The largest accepted `timeout`, in seconds (one hour).
pub const MAX_TIMEOUT_SECONDS: u32 = 3600;

fn default_timeout() -> u32 {
    DEFAULT_TIMEOUT_SECONDS
}

/// The desired state of one MCP server.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerSpec {
    /// How the server is reached: `stdio` (a local process the host starts and
    /// speaks to over stdin/stdout), `streamable-http` or `sse` (a remote endpoint at `url`).
    #[serde(rename = "type")]
    pub type_: ServerType,
    /// stdio only, required there: the program to run.
    pub command: Option<String>,
    /// stdio only: the program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio only: extra environment variables of the process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// streamable-http and sse only, required there: the endpoint, an absolute http:// or https:// URL.
    pub url: Option<String>,
    /// streamable-http and sse only: extra HTTP headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Whether Steward starts (stdio) or connects to (remote) the server; when false it is only declared.
    #[serde(default)]
    pub auto_start: bool,
    /// Prepended to every tool name the server lists, for example `git_` turns `status` into `git_status`.
    #[schemars(regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_-]*$"))]
    pub tool_prefix: Option<String>,
    /// What the server is for, for people.
    pub description: Option<String>,
    /// Timeout of one health probe, in seconds (1 to 3600).
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout: u32,
}

/// How an MCP server is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerType {
    /// A local process spoken to over stdin/stdout.
    #[default]
    Stdio,
    /// A remote endpoint speaking MCP streamable HTTP.
    StreamableHttp,
    /// A remote endpoint speaking MCP over server-sent events.
    Sse,
}

impl ServerType {
    /// The spelling used in specs, for example `streamable-http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::StreamableHttp => "streamable-http",
            Self::Sse => "sse",
        }
    }

    /// Whether the server is a remote endpoint rather than a local process.
    pub fn is_remote(self) -> bool {
        !matches!(self, Self::Stdio)
    }

    /// The host transport of an owned service of this type.
    pub fn transport(self) -> Transport {
        match self {
            Self::Stdio => Transport::Stdio,
            Self::StreamableHttp => Transport::StreamableHttp,
            Self::Sse => Transport::Sse,
        }
    }
}

// Written by hand: the derive turns documented variants into a `oneOf` of
// constants, which Kubernetes structural schemas reject; a plain `enum` is what CRDs want.
impl JsonSchema for ServerType {
    fn schema_name() -> Cow<'static, str> {
        "ServerType".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "enum": ["stdio", "streamable-http", "sse"] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn muster_style_stdio_spec_parses_with_defaults() {
        let spec: McpServerSpec = serde_json::from_value(json!({
            "type": "stdio", "command": "npx", "args": ["@modelcontextprotocol/server-git"],
            "env": {"GIT_ROOT": "/workspace"}, "toolPrefix": "git_", "autoStart": true
        }))
        .unwrap();
        assert_eq!(spec.type_, ServerType::Stdio);
        assert_eq!(spec.args, vec!["@modelcontextprotocol/server-git"]);
        assert_eq!(spec.env["GIT_ROOT"], "/workspace");
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT_SECONDS);
        assert!(spec.auto_start);
    }

    #[test]
    fn auto_start_defaults_to_false() {
        let spec: McpServerSpec =
            serde_json::from_value(json!({"type": "sse", "url": "https://x.example/sse"})).unwrap();
        assert!(!spec.auto_start);
        assert!(spec.type_.is_remote());
        assert_eq!(spec.type_.transport(), Transport::Sse);
    }

    #[test]
    fn unknown_type_is_rejected() {
        let err =
            serde_json::from_value::<McpServerSpec>(json!({"type": "local", "command": "x"})).unwrap_err().to_string();
        assert!(err.contains("unknown variant `local`"), "{err}");
    }
}
