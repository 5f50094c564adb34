//! The contract is language-neutral: `MCPServerGroup` written in TypeScript (the SDK in `sdk-ts`, componentize-js) runs in the host like a Rust plugin, and a TypeScript kind owns a service end to end.

use std::sync::OnceLock;

use steward::plugin::{PluginSettings, PluginState};

use crate::common;
use crate::common::mcpservergroup::{self as group, Loaded, load_once};

/// The TypeScript `MCPServerGroup`, built and compiled by the first test that needs it: that is
/// heavy work (both cores for a while), so it is done holding [`common::heavy`].
async fn typescript() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    if let Some(loaded) = LOADED.get() {
        return loaded;
    }
    let _heavy = common::heavy().await;
    LOADED.get_or_init(|| {
        let wasm = steward_plugin_build::typescript_plugin("mcpservergroup-ts").unwrap_or_else(|e| panic!("{e}"));
        load_once(wasm, PluginSettings::default())
    })
}

#[tokio::test]
async fn describe_names_the_plugin_and_its_kind() {
    group::check_describe(&typescript().await.plugin, "mcpservergroup-ts").await;
}

#[tokio::test]
async fn validate_names_the_field_of_each_problem() {
    group::check_validate(&typescript().await.plugin).await;
}

#[tokio::test]
async fn reconcile_refuses_an_invalid_spec_with_its_field_errors() {
    group::check_invalid(&typescript().await.plugin).await;
}

#[tokio::test]
async fn reconcile_reports_members_tools_and_the_ready_condition() {
    group::check_scenarios(&typescript().await.plugin).await;
}

#[tokio::test]
async fn a_large_namespace_fits_the_default_memory() {
    group::check_large_namespace(&typescript().await.plugin).await;
}

#[tokio::test]
async fn finalize_keeps_the_last_status_like_the_rust_sdk() {
    group::check_finalize(&typescript().await.plugin).await;
}

#[tokio::test]
async fn rust_and_typescript_agree_on_every_scenario() {
    let differ = group::differences(&typescript().await.plugin, "typescript").await;
    assert!(differ.is_empty(), "the plugins differ in {} ways:\n{}", differ.len(), differ.join("\n"));
}

/// `stdioserver-ts` asks the host for a stdio MCP server through the `services` import, reports
/// what the host observes of it, and its process ends when the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_kind_owns_a_stdio_server_end_to_end() {
    let wasm = {
        let _heavy = common::heavy().await;
        steward_plugin_build::typescript_plugin("stdioserver-ts").unwrap_or_else(|e| panic!("{e}"))
    };
    common::stdioserver::owns_a_stdio_server_end_to_end("stdioserver-ts", &wasm).await;
}

/// The SDK builds each plugin against the base contract plus the capabilities its package.json
/// lists: `mcpservergroup-ts` needs no grant, `stdioserver-ts` imports `services` and is blocked
/// without its grant, with the line to add (and shows its printer columns all the same).
#[tokio::test]
async fn a_typescript_plugin_imports_only_the_capabilities_it_lists() {
    let built: Vec<_> = {
        let _heavy = common::heavy().await;
        ["mcpservergroup-ts", "stdioserver-ts"]
            .map(|p| (p, steward_plugin_build::typescript_plugin(p).unwrap_or_else(|e| panic!("{e}"))))
            .to_vec()
    };
    let (_dir, set, statuses) = common::load_dir(&built).await;
    let of = |name: &str| common::status_of(&statuses, name);
    assert_eq!(of("mcpservergroup-ts").state, PluginState::Ready, "{:?}", of("mcpservergroup-ts"));
    let blocked = of("stdioserver-ts");
    assert_eq!(blocked.state, PluginState::Blocked);
    let msg = blocked.message.clone().unwrap_or_default();
    assert!(msg.contains("add `capabilities: [services]` under plugins.stdioserver-ts"), "{msg}");
    // The kind's printer columns reach the host through the `columns` export.
    let columns = set.columns("StdioServer");
    assert_eq!(columns.len(), 1, "{columns:?}");
    assert_eq!((columns[0].name.as_str(), columns[0].json_path.as_str()), ("State", ".status.state"));
    assert!(set.columns("MCPServerGroup").is_empty(), "the group declares no columns");
}
