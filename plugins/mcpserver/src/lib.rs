//! The `mcpserver` plugin of Steward: kind `MCPServer`, one MCP server the host runs or connects to.
//!
//! With `autoStart` the object owns one service, `server`: a process
//! (`stdio`) or a remote endpoint (`streamable-http`, `sse`). The host
//! supervises and probes it; each reconcile turns that observation into
//! muster-style status (`state`, `health`, `tools`, ...) and a `Ready`
//! condition that Workflows read.

mod names;
mod reconcile;
mod spec;
mod status;
mod url;
mod validate;

use steward_sdk::prelude::*;

pub use names::dns1123_subdomain_problem;
pub use reconcile::{PENDING_REQUEUE, SERVICE_NAME, service_spec};
pub use spec::{DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, McpServerSpec, ServerType};
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

    fn validate(obj: &Object<McpServerSpec, McpServerStatus>) -> Vec<FieldError> {
        validate::validate(&obj.name, &obj.spec)
    }

    fn reconcile(
        ctx: &Context,
        obj: &Object<McpServerSpec, McpServerStatus>,
    ) -> Result<Outcome<McpServerStatus>, Error> {
        Ok(reconcile::outcome(&obj.spec, ctx.service(SERVICE_NAME), obj.status.as_ref()))
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
        for field in ["command", "args", "env", "url", "headers", "autoStart", "toolPrefix", "description", "timeout"] {
            let p = &s["properties"][field];
            assert!(p["description"].is_string(), "{field} has no description: {p}");
        }
        assert_eq!(s["properties"]["timeout"]["default"], 30);
        assert_eq!(s["properties"]["autoStart"]["default"], false);
        assert_eq!(s["required"], serde_json::json!(["type"]));
        assert!(!s.to_string().contains("$ref"), "the schema must be inlined: {s}");
    }
}
