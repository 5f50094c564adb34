//! The host's aggregator of tools and its MCP endpoint: the [`catalog`] of what a namespace offers, the [`router`] that makes calls, the [`server`] at `/mcp` and its capped [`sessions`].
//!
//! A namespace offers the tools of its healthy MCPServers under muster's names (`x_…`), one
//! `workflow_<name>` per ready Workflow (each call runs a WorkflowRun), and the host's management
//! tools (`core_*`). The [`router::Aggregator`] is the [`crate::tools::Router`] the tools
//! executor sends plugins' calls through; the endpoint serves the same catalog and calls to
//! MCP clients.

pub mod catalog;
pub mod core;
pub mod guard;
pub mod listed;
pub mod meta;
pub mod offered_meta;
pub mod prompts;
pub mod resources;
pub mod router;
pub mod served;
pub mod server;
pub mod sessions;
pub mod subscriptions;
pub mod tasks;
pub mod workflow;

pub use router::Aggregator;
pub use server::router as endpoint;
