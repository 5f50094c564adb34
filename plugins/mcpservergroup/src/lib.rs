//! The `mcpservergroup` plugin of Steward: kind `MCPServerGroup`, a label-selected set of MCPServers.
//!
//! A kind the host knows nothing about, written only against the SDK: it
//! lists the MCPServers of its namespace through the host's `list` import,
//! keeps those its selector matches, and reports how many are ready, which
//! tools they offer together and which `requiredTools` none of them offers.
//! The host records the read, so a server coming up or going down
//! reconciles the group again. Dropping the `.wasm` into the plugin
//! directory of a running Steward is all it takes to add the kind.

mod spec;
mod status;
mod validate;

use steward_sdk::prelude::*;

pub use spec::{LabelSelector, McpServerGroupSpec, Operator, Requirement};
pub use status::{McpServerGroupStatus, Member, SERVER_KIND};

/// The `MCPServerGroup` kind (`steward.dev/v1alpha1`, plural `mcpservergroups`, namespaced).
pub struct McpServerGroup;

impl Kind for McpServerGroup {
    type Spec = McpServerGroupSpec;
    type Status = McpServerGroupStatus;
    const GROUP: &'static str = "steward.dev";
    const VERSION: &'static str = "v1alpha1";
    const KIND: &'static str = "MCPServerGroup";
    const PLURAL: &'static str = "mcpservergroups";

    fn columns() -> Vec<steward_sdk::PrinterColumn> {
        vec![
            steward_sdk::PrinterColumn::new("Selected", ".status.selected", steward_sdk::ColumnType::Integer)
                .description("MCPServers the selector matches"),
            steward_sdk::PrinterColumn::new("Members Ready", ".status.ready", steward_sdk::ColumnType::Integer)
                .description("Selected MCPServers that are ready"),
            steward_sdk::PrinterColumn::new("Missing Tools", ".status.missingTools", steward_sdk::ColumnType::String)
                .description("Required tools no ready member offers"),
        ]
    }

    fn validate(obj: &Object<McpServerGroupSpec, McpServerGroupStatus>) -> Vec<FieldError> {
        validate::validate(&obj.spec)
    }

    fn reconcile(
        ctx: &Context,
        obj: &Object<McpServerGroupSpec, McpServerGroupStatus>,
    ) -> Result<Outcome<McpServerGroupStatus>, Error> {
        Ok(status::outcome(ctx, &obj.namespace, &obj.spec))
    }
}

steward_sdk::export_plugin!(name: "mcpservergroup", version: env!("CARGO_PKG_VERSION"), kinds: [McpServerGroup]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_the_kind_without_capabilities() {
        let info = __steward_plugin().info();
        assert_eq!((info.name.as_str(), info.version.as_str()), ("mcpservergroup", "0.1.0"));
        assert!(info.capabilities.is_empty(), "it reads, it owns nothing");
        let k = &info.kinds[0];
        assert_eq!(
            (k.group.as_str(), k.version.as_str(), k.kind.as_str(), k.plural.as_str(), k.namespaced),
            ("steward.dev", "v1alpha1", "MCPServerGroup", "mcpservergroups", true)
        );
    }

    #[test]
    fn schema_describes_the_selector_and_required_tools() {
        let info = __steward_plugin().info();
        let s: serde_json::Value = serde_json::from_str(&info.kinds[0].spec_schema).unwrap();
        let sel = &s["properties"]["selector"]["properties"];
        assert_eq!(sel["matchLabels"]["additionalProperties"]["type"], "string");
        let expr = &sel["matchExpressions"]["items"]["properties"];
        assert_eq!(expr["operator"]["enum"], serde_json::json!(["In", "NotIn", "Exists", "DoesNotExist"]));
        assert_eq!(s["properties"]["requiredTools"]["items"]["type"], "string");
        assert!(!s.to_string().contains("$ref"), "the schema must be inlined: {s}");
    }
}
