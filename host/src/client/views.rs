//! The client's view of a plugin's status, for the API answers whose server type it cannot read back.

use serde::{Deserialize, Serialize};

use crate::plugin::{PluginState, PluginStatus, SourceInfo};

/// One plugin file as `GET /api/v1/plugins` (and `steward plugin check`) shows it: the fields of
/// [`PluginStatus`], with its origin as the text the API writes (`compiled`, `cached`).
///
/// Read back with the same field names the API writes; a field missing or unknown is an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginView {
    /// The file name within the plugin directory (for a registry plugin: its `oci://` reference).
    pub file: String,
    /// The plugin's name, once described.
    pub name: Option<String>,
    /// The running version.
    pub version: Option<String>,
    /// Ready, Blocked or Failed.
    pub state: PluginState,
    /// Kinds it serves (or would serve when unblocked).
    pub kinds: Vec<String>,
    /// Capabilities it needs.
    pub capabilities: Vec<String>,
    /// Capabilities it declares or is granted but never imports, one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// `compiled` or `cached`, once loaded.
    pub origin: Option<String>,
    /// Why it is blocked or failed, or why the last reload was refused.
    pub message: Option<String>,
    /// For a plugin of a registry: its reference, digest and whether it came from the registry or the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceInfo>,
}

impl From<PluginStatus> for PluginView {
    fn from(s: PluginStatus) -> Self {
        let origin = s.origin.and_then(|o| serde_json::to_value(o).ok()).and_then(|v| v.as_str().map(String::from));
        Self {
            file: s.file,
            name: s.name,
            version: s.version,
            state: s.state,
            kinds: s.kinds,
            capabilities: s.capabilities,
            warnings: s.warnings,
            origin,
            message: s.message,
            source: s.source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientError, decode};
    use crate::plugin::Origin;

    #[test]
    fn a_local_status_and_its_api_answer_read_back_as_the_same_view() {
        let status = PluginStatus {
            file: "mcpserver.wasm".into(),
            name: Some("mcpserver".into()),
            version: Some("0.1.0".into()),
            state: PluginState::Blocked,
            kinds: vec!["MCPServer".into()],
            capabilities: vec!["services".into()],
            warnings: vec!["capability `services` is granted but the component never imports it".into()],
            origin: Some(Origin::Cached),
            message: Some("add `capabilities: [services]` under plugins.mcpserver".into()),
            source: None,
        };
        // What the API writes is the server's own type, serialized.
        let answer = serde_json::to_value(&status).unwrap();
        let read: Vec<PluginView> = decode("/api/v1/plugins", serde_json::json!([answer])).unwrap();
        assert_eq!(read, vec![PluginView::from(status)]);
        assert_eq!(read[0].origin.as_deref(), Some("cached"));
    }

    #[test]
    fn a_plugin_answer_of_another_shape_is_an_error_naming_the_field() {
        let unknown_state = serde_json::json!([{
            "file": "a.wasm", "name": null, "version": null, "state": "Sleeping",
            "kinds": [], "capabilities": [], "origin": null, "message": null
        }]);
        let e = decode::<Vec<PluginView>>("/api/v1/plugins", unknown_state).unwrap_err();
        assert!(matches!(&e, ClientError::Shape { path, .. } if path == "/api/v1/plugins"), "{e}");
        assert!(e.to_string().contains("Sleeping"), "{e}");

        let missing_kinds = serde_json::json!([{ "file": "a.wasm", "state": "Ready", "capabilities": [] }]);
        let e = decode::<Vec<PluginView>>("/api/v1/plugins", missing_kinds).unwrap_err().to_string();
        assert!(e.contains("missing field `kinds`") && e.contains("same version"), "{e}");

        let extra = serde_json::json!([{
            "file": "a.wasm", "state": "Ready", "kinds": [], "capabilities": [], "weight": 3
        }]);
        let e = decode::<Vec<PluginView>>("/api/v1/plugins", extra).unwrap_err().to_string();
        assert!(e.contains("unknown field `weight`"), "{e}");
    }
}
