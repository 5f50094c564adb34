//! Host-wide settings every plugin is given: values of the host config that kinds share, read from the plugin's (otherwise empty) WASI environment.
//!
//! The host sets these variables, and only these, in every plugin's environment; a plugin run
//! outside the host (native tests) sees none and gets the defaults.

/// The variable that holds the `/mcp` tool prefix (`api.mcp.prefix`).
pub const MCP_PREFIX_VAR: &str = "STEWARD_MCP_PREFIX";

/// The variable that holds what `/mcp`'s management tools may do (`api.mcp.management`:
/// `read-only` or `read-write`).
pub const MCP_MANAGEMENT_VAR: &str = "STEWARD_MCP_MANAGEMENT";

/// Every variable the host sets in a plugin's environment; it sets no other.
pub const VARS: [&str; 2] = [MCP_PREFIX_VAR, MCP_MANAGEMENT_VAR];

/// muster's default tool prefix, used when the host sets none.
pub const DEFAULT_MCP_PREFIX: &str = "x";

/// The prefix of every MCP server's tools as the host offers them (`<prefix>_<server>_<tool>`):
/// the host config's `api.mcp.prefix` (muster's `aggregator.musterPrefix`), `x` by default.
pub fn mcp_prefix() -> String {
    std::env::var(MCP_PREFIX_VAR).ok().filter(|p| !p.is_empty()).unwrap_or_else(|| DEFAULT_MCP_PREFIX.to_string())
}

/// Whether the host offers its write management tools (`core_*_create`, `_update`,
/// `_delete`): the host config says `api.mcp.management: read-write`. False by default.
pub fn mcp_management_writes() -> bool {
    std::env::var(MCP_MANAGEMENT_VAR).is_ok_and(|v| v == "read-write")
}
