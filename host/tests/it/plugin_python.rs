//! The contract is language-neutral: `MCPServerGroup` written in Python (componentize-py) runs in the host like a Rust plugin.

use std::sync::OnceLock;

use steward::plugin::PluginSettings;

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
