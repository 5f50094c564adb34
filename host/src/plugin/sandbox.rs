//! The per-call store state: an empty WASI context, the memory cap, the deadline, and each capability unit's state.

use std::sync::{Arc, Mutex};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::logs::{CallLog, LogSink, LogSource};
use crate::capabilities::{BaseState, CallInput, ChildrenState, ServicesState, ToolsState, UNITS};

/// Most distinct reads recorded in one call; further reads still work but are not recorded
/// individually (the call is then treated as having read the whole kind).
pub const MAX_RECORDED_READS: usize = 1024;

/// Denies memory growth past the cap, and remembers that it did.
pub(crate) struct MemoryCap {
    pub cap: usize,
    pub hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// Everything a plugin store holds. A plugin sees only what this grants:
/// no preopened directories, no environment but the host-wide settings the runtime gives every
/// plugin ([`super::RuntimeOptions::plugin_env`]), no arguments, no network,
/// stdout/stderr into the bounded [`CallLog`], and one field of state per
/// capability unit ([`crate::capabilities`]), which only that unit's imports reach.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) timed_out: bool,
    pub(crate) deadline: std::time::Instant,
    /// The base unit's state: the call's log and reads.
    pub base: BaseState,
    /// The services unit's state: observed and desired services.
    pub services: ServicesState,
    /// The tools unit's state: the object's call records and the calls it asks for.
    pub tools: ToolsState,
    /// The children unit's state: the object's observed children and the ones it wants.
    pub children: ChildrenState,
}

impl CallState {
    /// A fresh sandbox with a memory cap of `memory_cap` bytes whose environment holds `env` only.
    pub(crate) fn new(memory_cap: u64, env: &[(String, String)]) -> Self {
        let log = Arc::new(Mutex::new(CallLog::default()));
        let wasi = WasiCtxBuilder::new()
            .envs(env)
            .stdout(LogSink::new(log.clone(), LogSource::Stdout))
            .stderr(LogSink::new(log.clone(), LogSource::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap { cap: usize::try_from(memory_cap).unwrap_or(usize::MAX), hit: false },
            timed_out: false,
            deadline: std::time::Instant::now(),
            base: BaseState::new(log),
            services: ServicesState::default(),
            tools: ToolsState::default(),
            children: ChildrenState::default(),
        }
    }

    /// Prepares for the next call (instances that are reused keep their store): every unit
    /// starts its state from `input`.
    pub(crate) fn reset(&mut self, input: &CallInput) {
        for unit in UNITS {
            unit.begin_call(self, input);
        }
        self.timed_out = false;
        self.memory.hit = false;
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}
