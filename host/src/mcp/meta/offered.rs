//! muster's six prompt and resource meta-tools as one [`Group`], answered by [`crate::mcp::offered_meta`].

use rmcp::model::{CallToolResult, JsonObject, Tool};

use super::{Ctx, Group};
use crate::mcp::offered_meta;

/// `list_resources`, `describe_resource`, `get_resource`, `list_prompts`, `describe_prompt`
/// and `get_prompt`, in muster's order; a call is cancelled with the client's request.
pub struct OfferedGroup;

#[async_trait::async_trait]
impl Group for OfferedGroup {
    fn tools(&self) -> Vec<Tool> {
        offered_meta::tools()
    }

    async fn call(&self, name: &str, args: &JsonObject, ctx: &Ctx<'_>) -> Option<CallToolResult> {
        offered_meta::call(ctx.engine, ctx.namespace, name, args, ctx.request.ct.clone()).await
    }
}
