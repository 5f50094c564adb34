//! The host's integration tests, as one test binary (one link of wasmtime and kube instead of
//! one per file). Each file is a module named as it was: `cargo test -p steward --test it e2e_fs::`
//! runs one group.
//!
//! The tests share this process. What they share is made safe in `common`: ports are handed
//! out once per process ([`common::host::free_port`]), the heavy tests take
//! [`common::heavy`] so that no two of them load the machine at once, and no test changes the
//! process's environment or current directory.

mod common;

mod admission;
mod api_abuse;
mod capabilities;
mod children;
mod children_example;
mod cli_plugin;
mod cluster_scoped_reads;
mod conformance;
mod crash_restart;
mod e2e_api;
mod e2e_example;
mod e2e_fs;
mod e2e_kube;
mod e2e_services;
mod field_validation;
mod fs_events;
mod host_conditions;
mod hostile_plugins;
mod hostile_yaml;
mod http_capability;
mod kube_cache;
mod kube_events;
mod kube_faults;
mod kube_handover;
mod kube_manifests;
mod kubectl_columns;
mod many_reads;
mod mcp_endpoint;
mod mcp_manage;
mod mcp_meta;
mod mcp_passthru;
mod mcp_prompts;
mod mcp_protocol;
mod mcp_tasks;
mod muster_compat;
mod oci_bundle;
mod oci_cli;
mod oci_deploy;
mod oci_host;
mod oci_registry;
mod plugin_dir;
mod plugin_python;
mod plugin_runtime;
mod plugin_typescript;
mod sandbox;
mod service_hardening;
mod service_secrets;
mod session_faults;
mod status_page;
mod storms;
mod summaries;
mod telemetry;
mod webhook_faults;
mod workflow_runs;
mod world_faults;
mod world_kube;
mod world_policy;
