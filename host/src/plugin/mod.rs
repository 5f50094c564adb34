//! The plugin runtime: loads WebAssembly reconcilers, runs each call in a sandbox under limits, and hot-reloads them.
//!
//! - [`Runtime`]: one wasmtime engine per process (pooling allocator when the
//!   machine allows, copy-on-write memory images, epoch deadlines), the linker,
//!   and the on-disk [`CompileCache`].
//! - [`Plugin`]: one loaded component with its pre-linked instance, what it
//!   describes, and the calls `describe`, `validate`, `reconcile`, `finalize`.
//! - [`PluginSet`]: a plugin directory, its kinds, and hot reload ([`watch`]).
//! - [`Capability`]: what the runtime knows of a capability unit; it names none of them (the
//!   units are handed to it, see [`Runtime::with_units`]).

pub mod bindings;
mod cache;
pub(crate) mod cachefiles;
pub(crate) mod convert;
mod error;
mod host_calls;
mod imports;
mod instance;
mod logs;
pub mod lowered;
mod reads;
mod registry;
mod round;
mod runtime;
mod sandbox;
mod settings;
mod unit;
mod watch;

pub use crate::model::is_dns_label;
pub use bindings::WIT_VERSION;
pub use cache::{CACHE_ENV, CompileCache, DEFAULT_CACHE_LIMIT, InUse, Origin, Pruned, user_cache_dir};
pub use error::{LoadError, PluginError};
pub use host_calls::HostState;
pub use imports::{ImportCheck, UnknownImport, check_imports};
pub use instance::{CallReport, Plugin, ReconcileRequest, RoundAnswer, RoundRequest};
pub use logs::{
    CallLog, LINES_BURST, LINES_PER_SEC, LogLine, LogSource, MAX_LINE, MAX_LINES_PER_CALL, REPORT_EVERY, one_line,
};
pub use reads::{HostReads, NoReads, Read};
pub use registry::{Awaited, Fetched, RemoteLoad, SourceInfo};
pub use registry::{
    KindUnavailable, PluginEvent, PluginSet, PluginState, PluginStatus, is_plugin_file, served_kinds, serves,
    settings_without_plugin,
};
pub use runtime::{Prepared, Runtime, RuntimeError, RuntimeOptions, RuntimeStats, TICK};
#[cfg(test)]
pub(crate) use runtime::{linker, trap_ungranted_imports};
pub use sandbox::{CallState, MAX_RECORDED_READS};
pub use settings::{HumanDuration, HumanSize, Limits, PluginSettings, Section, Sections, parse_duration, parse_size};
pub use unit::{CallInput, Capability, Inputs, TypeMap, Units};
pub use watch::{RESCAN_EVERY, SETTLE, SETTLE_MAX, WatchHandle, watch};
