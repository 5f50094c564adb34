//! What a namespace lists to the endpoint's clients (tools, prompts, resources and templates), compared by name to tell its sessions what changed.

use std::collections::BTreeSet;

use rmcp::service::{Peer, RoleServer};

use super::{catalog, prompts, resources};
use crate::engine::Engine;

/// The names a namespace lists now: what a `list_changed` notification is about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// The tools' names.
    pub tools: BTreeSet<String>,
    /// The prompts' names.
    pub prompts: BTreeSet<String>,
    /// The resources' URIs and the templates' (see [`resources::Listing::names`]).
    pub resources: BTreeSet<String>,
}

impl Listed {
    /// What `namespace` lists now. In meta mode (`api.mcp.tools: meta`) the tools listed are
    /// the meta-tools, which never change: no tool name is compared, so no
    /// `tools/list_changed` is sent, as muster sends none.
    pub fn of(engine: &Engine, namespace: &str) -> Self {
        let direct = engine.config().api.mcp.tools.lists_direct();
        Self {
            tools: if direct { catalog::build(engine, namespace).names() } else { BTreeSet::new() },
            prompts: prompts::names(engine, namespace),
            resources: resources::list(engine, namespace).names(),
        }
    }

    /// Tells `peer` which of its lists changed since `before`: `notifications/tools/list_changed`,
    /// `prompts/list_changed`, `resources/list_changed`, each only when its set changed. The
    /// error is the first notification that could not be sent.
    pub async fn tell(&self, before: &Listed, peer: &Peer<RoleServer>) -> Result<(), rmcp::service::ServiceError> {
        if self.tools != before.tools {
            peer.notify_tool_list_changed().await?;
        }
        if self.prompts != before.prompts {
            peer.notify_prompt_list_changed().await?;
        }
        if self.resources != before.resources {
            peer.notify_resource_list_changed().await?;
        }
        Ok(())
    }
}
