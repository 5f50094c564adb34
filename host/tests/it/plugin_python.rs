//! The contract is language-neutral: `MCPServerGroup` written in Python (componentize-py) runs in the host like a Rust plugin, and a Python kind owns a service end to end.
//!
//! Both are built for the world `plugin-full`: they import every capability's interfaces and
//! need grants only for what they declare and call.

use std::sync::OnceLock;

use steward::plugin::{PluginSettings, PluginState};

use crate::common;
use crate::common::mcpservergroup::{self as group, Loaded, load_once};

/// What the Python plugin needs beyond the host's defaults (see the README of the example).
fn python_settings() -> PluginSettings {
    PluginSettings::default()
}

/// The Python plugin, built and compiled by the first test that needs it: that is heavy work
/// (both cores for a while), so it is done holding [`common::heavy`].
async fn python() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    if let Some(loaded) = LOADED.get() {
        return loaded;
    }
    let _heavy = common::heavy().await;
    LOADED.get_or_init(|| {
        let wasm = steward_plugin_build::python_plugin().unwrap_or_else(|e| panic!("{e}"));
        load_once(wasm, python_settings())
    })
}

#[tokio::test]
async fn describe_names_the_plugin_and_its_kind() {
    group::check_describe(&python().await.plugin, "mcpservergroup-py").await;
}

#[tokio::test]
async fn validate_names_the_field_of_each_problem() {
    group::check_validate(&python().await.plugin).await;
}

#[tokio::test]
async fn reconcile_refuses_an_invalid_spec_with_its_field_errors() {
    group::check_invalid(&python().await.plugin).await;
}

#[tokio::test]
async fn reconcile_reports_members_tools_and_the_ready_condition() {
    group::check_scenarios(&python().await.plugin).await;
}

#[tokio::test]
async fn a_large_namespace_fits_the_default_memory() {
    group::check_large_namespace(&python().await.plugin).await;
}

#[tokio::test]
async fn finalize_keeps_the_last_status_like_the_rust_sdk() {
    group::check_finalize(&python().await.plugin).await;
}

#[tokio::test]
async fn rust_and_python_agree_on_every_scenario() {
    let differ = group::differences(&python().await.plugin, "python").await;
    assert!(differ.is_empty(), "the plugins differ in {} ways:\n{}", differ.len(), differ.join("\n"));
}

/// Built for `plugin-full`, both examples import every capability's interfaces. The group
/// declares none and loads ready with no grant and no warning; the stdio server declares
/// `services` and is blocked without it, with the line to add naming only that.
#[tokio::test]
async fn importing_every_capability_needs_no_grant_declaring_one_does() {
    let built: Vec<_> = {
        let _heavy = common::heavy().await;
        steward_plugin_build::PY_PLUGINS
            .map(|p| (p, steward_plugin_build::python_example(p).unwrap_or_else(|e| panic!("{e}"))))
            .to_vec()
    };
    let (_dir, set, statuses) = common::load_dir(&built).await;
    let of = |name: &str| common::status_of(&statuses, name);
    let group = of("mcpservergroup-py");
    assert_eq!(group.state, PluginState::Ready, "{group:?}");
    assert!(group.warnings.is_empty() && group.capabilities.is_empty(), "{group:?}");
    let stdio = of("stdioserver-py");
    assert_eq!(stdio.state, PluginState::Blocked, "{stdio:?}");
    let msg = stdio.message.clone().unwrap_or_default();
    assert!(msg.contains("add `capabilities: [services]` under plugins.stdioserver-py"), "{msg}");
    for p in set.plugins() {
        assert_eq!(p.imported_capabilities(), ["http", "services", "tools", "children"], "{}", p.name());
    }
}

/// `stdioserver-py` asks the host for a stdio MCP server through the `services` import, reports
/// what the host observes of it, and its process ends when the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_kind_owns_a_stdio_server_end_to_end() {
    let wasm = {
        let _heavy = common::heavy().await;
        steward_plugin_build::python_example("stdioserver-py").unwrap_or_else(|e| panic!("{e}"))
    };
    common::stdioserver::owns_a_stdio_server_end_to_end("stdioserver-py", &wasm).await;
}
