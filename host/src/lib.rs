//! Steward: a reconciler host whose per-kind logic runs in sandboxed WebAssembly plugins.
//!
//! This crate is both the `steward` binary and the library its tests drive.

pub mod cli;
pub mod config;
pub mod model;
pub mod plugin;
pub mod yaml;
