//! The `mcpserver` plugin of Steward: kind `MCPServer`, one MCP server the host runs or connects to.
//!
//! With `autoStart` the object owns one service, `server`: a process
//! (`stdio`) or a remote endpoint (`streamable-http`, `sse`). The host
//! supervises and probes it; each reconcile turns that observation into
//! muster-style status (`state`, `health`, `tools`, ...) and a `Ready`
//! condition that Workflows read. Tools are named as muster's aggregator names
//! them (see [`naming`]); credentials may come from references (see [`values`]).

mod auth;
mod names;
pub mod naming;
mod patterns;
mod reconcile;
mod spec;
mod status;
mod url;
mod validate;
pub mod values;

use steward_sdk::prelude::*;

pub use names::dns1123_subdomain_problem;
pub use naming::{MUSTER_PREFIX, NAMING_ANNOTATION, ToolNaming};
pub use reconcile::{Observed, PENDING_REQUEUE, SERVICE_NAME, service_spec};
pub use spec::{
    Auth, AuthType, AuthorizationServer, ClientCredentialsSecretRef, DEFAULT_TIMEOUT_SECONDS, Family,
    MAX_DESCRIPTION_LEN, MAX_TIMEOUT_SECONDS, McpServerSpec, ServerType, TokenExchange,
};
pub use status::{Health, McpServerStatus, ServerState};
pub use url::http_url_problem;

/// The `MCPServer` kind (`steward.dev/v1alpha1`, plural `mcpservers`, namespaced).
pub struct McpServer;

impl Kind for McpServer {
    type Spec = McpServerSpec;
    type Status = McpServerStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "MCPServer";
    const PLURAL: &'static str = "mcpservers";

    fn columns() -> Vec<steward_sdk::PrinterColumn> {
        vec![
            steward_sdk::PrinterColumn::new("State", ".status.state", steward_sdk::ColumnType::String)
                .description("The server's lifecycle state"),
            steward_sdk::PrinterColumn::new("Health", ".status.health", steward_sdk::ColumnType::String)
                .description("The result of the last health probe"),
            steward_sdk::PrinterColumn::new("Tools", ".status.toolCount", steward_sdk::ColumnType::Integer)
                .description("How many tools the server lists"),
            steward_sdk::PrinterColumn::new("Restarts", ".status.restartCount", steward_sdk::ColumnType::Integer)
                .description("How many times the host restarted the server")
                .priority(1),
        ]
    }

    fn validate(obj: &Object<McpServerSpec, McpServerStatus>) -> Vec<FieldError> {
        validate::validate(&obj.name, &obj.annotations, &obj.spec)
    }

    fn warnings(obj: &Object<McpServerSpec, McpServerStatus>) -> Vec<FieldError> {
        validate::warnings(&obj.spec)
    }

    /// Lists the namespace's MCPServers only for a family member (the host re-queues it when they change).
    fn reconcile(
        ctx: &Context,
        obj: &Object<McpServerSpec, McpServerStatus>,
    ) -> Result<Outcome<McpServerStatus>, Error> {
        let servers = if obj.spec.family.is_some() { ctx.list("MCPServer", Some(&obj.namespace)) } else { Vec::new() };
        let now = steward_sdk::time::now_rfc3339();
        let prefix = steward_sdk::settings::mcp_prefix();
        let seen = Observed {
            prefix: &prefix,
            name: &obj.name,
            naming: ToolNaming::of(&obj.annotations).unwrap_or_default(),
            servers: &servers,
            service: ctx.service(SERVICE_NAME),
            prev: obj.status.as_ref(),
            now: &now,
        };
        Ok(reconcile::outcome(&obj.spec, &seen))
    }

    /// Asks for no services, so the host stops the server, and keeps the last status.
    fn finalize(
        _ctx: &Context,
        _obj: &Object<McpServerSpec, McpServerStatus>,
    ) -> Result<Outcome<McpServerStatus>, Error> {
        Ok(Outcome::keep_status())
    }
}

steward_sdk::export_plugin!(
    name: "mcpserver",
    version: env!("CARGO_PKG_VERSION"),
    capabilities: ["services"],
    kinds: [McpServer],
);

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> serde_json::Value {
        let info = __steward_plugin().info();
        assert_eq!(info.kinds.len(), 1);
        serde_json::from_str(&info.kinds[0].spec_schema).unwrap()
    }

    #[test]
    fn describes_the_kind_and_needs_services() {
        let info = __steward_plugin().info();
        assert_eq!(info.name, "mcpserver");
        assert_eq!(info.capabilities, ["services"]);
        let k = &info.kinds[0];
        assert_eq!(
            (k.group.as_str(), k.version.as_str(), k.kind.as_str(), k.plural.as_str(), k.namespaced),
            ("steward.dev", "v1alpha1", "MCPServer", "mcpservers", true)
        );
    }

    #[test]
    fn schema_has_the_spec_properties_with_descriptions() {
        let s = schema();
        assert_eq!(s["properties"]["type"]["enum"], serde_json::json!(["stdio", "streamable-http", "sse"]));
        assert!(s["properties"]["type"]["description"].as_str().unwrap().contains("stdio"));
        for field in [
            "command",
            "args",
            "env",
            "url",
            "headers",
            "autoStart",
            "toolPrefix",
            "description",
            "timeout",
            "auth",
            "family",
        ] {
            let p = &s["properties"][field];
            assert!(p["description"].is_string(), "{field} has no description: {p}");
        }
        assert_eq!(s["properties"]["timeout"]["default"], 30);
        assert_eq!(s["properties"]["autoStart"]["default"], false);
        assert_eq!(s["required"], serde_json::json!(["type"]));
        assert!(!s.to_string().contains("$ref"), "the schema must be inlined: {s}");
        assert_eq!(s["properties"]["timeout"]["maximum"], 300);
        assert_eq!(s["properties"]["description"]["maxLength"], 500);
        let auth = &s["properties"]["auth"]["properties"];
        assert_eq!(auth["type"]["enum"], serde_json::json!(["oauth", "none"]));
        let creds = &auth["tokenExchange"]["properties"]["clientCredentialsSecretRef"];
        assert_eq!(creds["required"], serde_json::json!(["name"]));
        assert_eq!(creds["properties"]["clientIdKey"]["default"], "client-id");
        assert_eq!(s["properties"]["family"]["required"], serde_json::json!(["name", "instanceArg"]));
        for map in ["env", "headers"] {
            let value = &s["properties"][map];
            assert_eq!(value["x-kubernetes-preserve-unknown-fields"], true, "{map}: {value}");
            assert_eq!(value["additionalProperties"], true, "{map}: {value}");
        }
    }
}
