//! muster's meta-tools at `/mcp` (`api.mcp.tools`): what `tools/list` shows in each mode, and where a `tools/call` goes (a meta-tool, or a real tool past the destructive-tool guard).
//!
//! The meta-tools come in [`Group`]s, each naming its tools and answering their calls; the
//! endpoint lists and dispatches the groups of [`GROUPS`] in order. In `meta` mode (the
//! default) `tools/list` names only the meta-tools and a `tools/call` of any other name is
//! refused with words that say to use `call_tool`, as muster does (its aggregator registers
//! only the meta-tools with its MCP server). In `both` mode both are listed and callable; in
//! `direct` mode only the real tools are.

pub mod filter;
pub mod glob;
pub mod offered;
pub mod ranking;
pub mod tools;

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool};
use rmcp::service::{RequestContext, RoleServer};

use super::{catalog, guard};
use crate::config::McpSettings;
use crate::engine::Engine;

/// What a meta-tool call may use: the host, the client's namespace and request, and the way to
/// call a real tool exactly as the client's own `tools/call` would.
pub struct Ctx<'a> {
    /// The engine.
    pub engine: &'a Arc<Engine>,
    /// The client's namespace (`?namespace=`).
    pub namespace: &'a str,
    /// The `/mcp` settings of the host config.
    pub settings: &'a McpSettings,
    /// The client's request (its peer, progress token, cancellation).
    pub request: &'a RequestContext<RoleServer>,
    /// Calls a real tool as a direct `tools/call` does (same routing, progress and cancellation).
    pub route: &'a dyn Route,
}

/// The endpoint's way of calling a real tool for a client: through
/// [`crate::mcp::Aggregator::call_with_progress`], with the client's progress token and
/// cancellation, and the router's errors in MCP's terms.
#[async_trait::async_trait]
pub trait Route: Send + Sync {
    /// Calls `tool` with `arguments` for the client of this request; the guard is not applied here.
    async fn route(&self, tool: &str, arguments: JsonObject) -> Result<CallToolResult, ErrorData>;
}

/// A set of meta-tools: their definitions, and the answer to a call of one of them.
#[async_trait::async_trait]
pub trait Group: Send + Sync {
    /// The meta-tools of the group, as `tools/list` shows them.
    fn tools(&self) -> Vec<Tool>;

    /// The answer to a call of `name` with `args`, or `None` when `name` is not one of this
    /// group's tools. A meta-tool's failure is a result with `isError`, as in muster.
    async fn call(&self, name: &str, args: &JsonObject, ctx: &Ctx<'_>) -> Option<CallToolResult>;
}

/// Every group of meta-tools, in the order `tools/list` shows them: the tools' five, then
/// the resources' and prompts' six.
pub static GROUPS: &[&dyn Group] = &[&tools::ToolsGroup, &offered::OfferedGroup];

/// The names of every meta-tool.
pub fn meta_names() -> Vec<String> {
    GROUPS.iter().flat_map(|g| g.tools()).map(|t| t.name.to_string()).collect()
}

/// What `tools/list` shows to a client of `namespace` under `settings`: the meta-tools (meta,
/// both), then the namespace's tools (direct, both) but for one named as a meta-tool.
pub fn list(engine: &Engine, namespace: &str, settings: &McpSettings) -> Vec<Tool> {
    let mut out: Vec<Tool> = Vec::new();
    if settings.tools.lists_meta() {
        out.extend(GROUPS.iter().flat_map(|g| g.tools()));
    }
    if settings.tools.lists_direct() {
        let meta = meta_names();
        let real = catalog::build(engine, namespace).entries.into_iter().map(|e| e.tool);
        out.extend(real.filter(|t| !meta.iter().any(|m| *m == t.name)));
    }
    out
}

/// Answers a client's `tools/call` of `name`: a meta-tool where the mode lists them, else a real
/// tool where the mode lists them, past the guard; else an error that says how to call it.
pub async fn call(ctx: &Ctx<'_>, name: &str, arguments: JsonObject) -> Result<CallToolResult, ErrorData> {
    let mode = ctx.settings.tools;
    if mode.lists_meta() {
        for group in GROUPS {
            if let Some(answer) = group.call(name, &arguments, ctx).await {
                return Ok(answer);
            }
        }
    }
    if !mode.lists_direct() {
        return Err(ErrorData::invalid_params(
            format!(
                "tool {name} is not offered directly: this endpoint offers muster's meta-tools (api.mcp.tools: meta); \
                 call it with call_tool {{\"name\": \"{name}\", \"arguments\": {{…}}}}, or set api.mcp.tools to both \
                 or direct in the host config"
            ),
            None,
        ));
    }
    call_guarded(ctx, name, arguments).await
}

/// Calls the real tool `name` for the client, unless the destructive-tool guard refuses it (an
/// `isError` result that says which config allows it).
pub async fn call_guarded(ctx: &Ctx<'_>, name: &str, arguments: JsonObject) -> Result<CallToolResult, ErrorData> {
    if let Some(refusal) = refusal(ctx, name) {
        return Ok(CallToolResult::error(vec![ContentBlock::text(refusal)]));
    }
    ctx.route.route(name, arguments).await
}

/// The guard's refusal of a call of the real tool `name` by the client, if it refuses it.
pub fn refusal(ctx: &Ctx<'_>, name: &str) -> Option<String> {
    let offered = catalog::build(ctx.engine, ctx.namespace);
    guard::check(offered.get(name)?, &ctx.settings.allow_destructive).err()
}
