//! Steward: a reconciler host whose per-kind logic runs in sandboxed WebAssembly plugins.
//!
//! This crate is both the `steward` binary and the library its tests drive. Data flows
//! down this list: [`config`] → [`source`] (change detection) → [`queue`] → [`engine`]
//! (workers calling [`plugin`]s) → [`store`] (status) → [`api`] and [`metrics`]. [`host`] runs
//! them together until a signal; [`cli`] is the command line, and [`client`] its API client.
//! [`telemetry`] is the host's log and, when a collector is named, its OpenTelemetry traces.
//! [`serve`] is the HTTP server of the API and the admission webhook, with their connection limits.

pub mod api;
pub mod capabilities;
pub mod children;
pub mod cli;
pub mod client;
pub mod columns;
pub mod config;
pub mod conformance;
pub mod driver;
pub mod engine;
pub mod health;
pub mod host;
pub mod kubernetes;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod objects;
pub mod oci;
pub mod plugin;
pub mod queue;
pub mod readiness;
pub mod sanitize;
pub mod scaffold;
pub mod schema;
pub mod selector;
pub mod serve;
pub mod services;
pub mod source;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod tools;
pub mod world;
pub mod yaml;
