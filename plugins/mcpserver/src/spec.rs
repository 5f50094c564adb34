//! The MCPServer spec: how to start or reach one MCP server, field for field muster's.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use steward_sdk::Transport;
use steward_sdk::prelude::*;

pub use crate::auth::{Auth, AuthType, AuthorizationServer, ClientCredentialsSecretRef, TokenExchange};

/// The connection timeout, in seconds, when the spec gives none (muster's default).
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 30;

/// The largest accepted `timeout`, in seconds (muster's maximum).
pub const MAX_TIMEOUT_SECONDS: u32 = 300;

/// The longest `description` muster accepts, in characters.
pub const MAX_DESCRIPTION_LEN: usize = 500;

fn default_timeout() -> u32 {
    DEFAULT_TIMEOUT_SECONDS
}

/// The desired state of one MCP server.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerSpec {
    /// How the server is reached: `stdio` (a local process the host starts and
    /// speaks to over stdin/stdout), `streamable-http` or `sse` (a remote endpoint at `url`).
    #[serde(rename = "type")]
    pub type_: ServerType,
    /// stdio only, required there: the program to run.
    pub command: Option<String>,
    /// stdio only (refused on a remote server): the program's arguments.
    pub args: Option<Vec<String>>,
    /// Environment variables of the process (stdio). Each value is a string, or
    /// `{valueFrom: {secretKeyRef: {name, key, namespace?}}}`, `{valueFrom: {file: PATH}}` or
    /// `{valueFrom: {env: VAR}}`, which the host reads when it starts the server.
    #[serde(default)]
    #[schemars(schema_with = "value_map_schema")]
    pub env: BTreeMap<String, Value>,
    /// streamable-http and sse only, required there: the endpoint, an absolute http:// or https:// URL.
    #[schemars(regex(pattern = r"^https?://[^\s/$.?#].[^\s]*$"))]
    pub url: Option<String>,
    /// streamable-http and sse only (refused on a stdio server): HTTP headers sent with every
    /// request. Each value is a string or a `valueFrom` reference, as in `env`.
    #[serde(default)]
    #[schemars(schema_with = "value_map_schema")]
    pub headers: Option<BTreeMap<String, Value>>,
    /// Whether Steward starts (stdio) or connects to (remote) the server; when false it is only declared.
    #[serde(default)]
    pub auto_start: bool,
    /// Names the server's tools: `x_<toolPrefix>_<tool>`; the server's name when none is given.
    #[schemars(regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_-]*$"))]
    pub tool_prefix: Option<String>,
    /// What the server is for, for people (at most 500 characters).
    #[schemars(length(max = 500))]
    pub description: Option<String>,
    /// Connection timeout in seconds (1 to 300): of connecting, the MCP handshake and each health probe.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 300))]
    pub timeout: u32,
    /// Authentication of a remote server (muster's `auth`).
    pub auth: Option<Auth>,
    /// Declares the server one instance of a family of equivalent servers, whose tools are
    /// named `x_<family.name>_<tool>`.
    pub family: Option<Family>,
}

/// A family of equivalent servers (muster's `family`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Family {
    /// The family's name: its members' tools are `x_<name>_<tool>`.
    #[schemars(regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_-]*$"))]
    pub name: String,
    /// The argument a caller uses to pick the instance; every member of the family must agree on it.
    #[schemars(regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_]*$"))]
    pub instance_arg: String,
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

/// `env` and `headers`: a map whose values are strings or `valueFrom` references. The map keeps
/// any value (a structural schema allows that without a type), and the plugin checks the
/// shape of each itself, naming the field of each mistake.
fn value_map_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn muster_style_stdio_spec_parses_with_defaults() {
        let spec: McpServerSpec = serde_json::from_value(json!({
            "type": "stdio", "command": "npx", "args": ["@modelcontextprotocol/server-git"],
            "env": {"GIT_ROOT": "/workspace"}, "toolPrefix": "git", "autoStart": true
        }))
        .unwrap();
        assert_eq!(spec.type_, ServerType::Stdio);
        assert_eq!(spec.args.as_deref(), Some(&["@modelcontextprotocol/server-git".to_string()][..]));
        assert_eq!(spec.env["GIT_ROOT"], "/workspace");
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT_SECONDS);
        assert!(spec.auto_start);
    }

    #[test]
    fn auth_and_family_parse_with_muster_defaults() {
        let spec: McpServerSpec = serde_json::from_value(json!({
            "type": "streamable-http", "url": "https://k8s.example.com/mcp",
            "family": {"name": "kubernetes", "instanceArg": "cluster"},
            "auth": {"type": "oauth", "tokenExchange": {"enabled": true, "clientCredentialsSecretRef": {"name": "creds"}}}
        }))
        .unwrap();
        let auth = spec.auth.unwrap();
        assert_eq!(auth.type_, AuthType::Oauth);
        assert!(!auth.forward_token);
        let te = auth.token_exchange.unwrap();
        assert_eq!(te.scopes, "openid profile email groups");
        let creds = te.client_credentials_secret_ref.unwrap();
        assert_eq!((creds.client_id_key.as_str(), creds.client_secret_key.as_str()), ("client-id", "client-secret"));
        assert_eq!(spec.family.unwrap().instance_arg, "cluster");
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
