//! The per-call store state: an empty WASI context, the memory cap, the deadline, the base contract's state, and one typed slot per capability unit.

use std::sync::{Arc, Mutex};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::host_calls::HostState;
use super::logs::{CallLog, LogSink, LogSource};
use super::unit::{CallInput, Capability, TypeMap};

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
/// stdout/stderr into the bounded [`CallLog`], and one slot of state per
/// capability unit ([`CallState::slot`]), which only that unit's imports reach.
pub struct CallState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) timed_out: bool,
    pub(crate) deadline: std::time::Instant,
    /// The base contract's state: the call's log and reads.
    pub host: HostState,
    /// Each unit's own state, under its type.
    slots: TypeMap,
    /// The world round this store runs, while it runs one.
    pub(crate) round: Option<super::round::RoundScope>,
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
            host: HostState::new(log),
            slots: TypeMap::default(),
            round: None,
        }
    }

    /// This state, taken back from a fresh instance's store after a call that succeeded
    /// ([`wasmtime::Store::into_data`]), made ready for the next fresh instance of the same plugin:
    /// building a WASI context is a few percent of a fresh call, and this one holds nothing of
    /// the call (its environment is the host's, its stdio writes into the log that
    /// [`HostState::reset`] empties). Whatever the instance left is dropped: its resources, the
    /// units' slots (each unit binds a new one), the flags, the round, what it logged and read.
    pub(crate) fn recycled(mut self) -> Self {
        self.table = ResourceTable::new();
        self.slots = TypeMap::default();
        self.clear_call(super::host_calls::no_reads());
        self
    }

    /// The state a unit keeps in this store under its type `T` (made with `T::default()` the
    /// first time). A unit's imports reach it through a projection such as
    /// `|s| s.slot::<MyState>()`: a scan of a few entries, no allocation after the first call.
    pub fn slot<T: std::any::Any + Send + Default>(&mut self) -> &mut T {
        self.slots.get_or_default::<T>()
    }

    /// [`CallState::slot`] together with the store's resource table, for a unit whose imports
    /// share WASI's resources (wasi:http's bodies are wasi:io streams).
    pub fn slot_and_table<T: std::any::Any + Send + Default>(&mut self) -> (&mut T, &mut ResourceTable) {
        (self.slots.get_or_default::<T>(), &mut self.table)
    }

    /// Puts `slots` in place of the units' slots and gives back the ones there were (a world
    /// round keeps one set per object it acts for).
    pub(crate) fn swap_slots(&mut self, slots: TypeMap) -> TypeMap {
        std::mem::replace(&mut self.slots, slots)
    }

    /// Prepares for the next call (instances that are reused keep their store): the base
    /// contract and every unit of `units` start their state from `input`.
    pub(crate) fn reset(&mut self, units: &[&'static dyn Capability], input: &CallInput) {
        self.clear_call(input.reads.clone());
        for unit in units {
            unit.begin_call(self, input);
        }
    }

    /// What every call starts without: a log, reads, a round, the flags of the call before.
    fn clear_call(&mut self, reads: Arc<dyn super::reads::HostReads>) {
        self.host.reset(reads);
        self.round = None;
        self.timed_out = false;
        self.memory.hit = false;
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_state_keeps_nothing_of_the_instance_before() {
        let mut state = CallState::new(1 << 20, &[]);
        state.table.push(7u32).unwrap();
        *state.slot::<u64>() = 42;
        state.timed_out = true;
        state.memory.hit = true;
        state.host.recorded.insert(super::super::reads::Read::List { kind: "Noop".into(), namespace: None });
        state.host.log.lock().unwrap().lines.push(super::super::logs::LogLine {
            level: steward_sdk::LogLevel::Info,
            source: LogSource::Stdout,
            message: "from the last call".into(),
        });
        let mut state = state.recycled();
        assert!(state.table.is_empty(), "the instance's resources are gone");
        assert_eq!(*state.slot::<u64>(), 0, "each unit starts a new slot");
        assert!(!state.timed_out && !state.memory.hit);
        assert!(state.host.recorded.is_empty());
        assert!(state.host.log.lock().unwrap().lines.is_empty(), "the log its stdout writes into is empty");
        assert_eq!(state.memory.cap, 1 << 20, "the plugin's cap stays");
    }
}
