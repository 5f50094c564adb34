//! The per-call store state: an empty WASI context, the memory cap, the output log, and recorded reads.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use steward_sdk::{LogLevel, ObjectRef};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::steward::plugin::{host, types as w};
use super::convert;
use super::logs::{CallLog, LogSink, LogSource};
use super::reads::{HostReads, NoReads, Read};

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
/// no preopened directories, no environment, no arguments, no network,
/// stdout/stderr into the bounded [`CallLog`], and the host's `get`/`list`.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) log: Arc<Mutex<CallLog>>,
    pub(crate) reads: Arc<dyn HostReads>,
    pub(crate) recorded: BTreeSet<Read>,
    pub(crate) reads_overflowed: bool,
    pub(crate) timed_out: bool,
    pub(crate) deadline: std::time::Instant,
}

impl CallState {
    /// A fresh sandbox with a memory cap of `memory_cap` bytes.
    pub(crate) fn new(memory_cap: u64) -> Self {
        let log = Arc::new(Mutex::new(CallLog::default()));
        let wasi = WasiCtxBuilder::new()
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
            log,
            reads: Arc::new(NoReads),
            recorded: BTreeSet::new(),
            reads_overflowed: false,
            timed_out: false,
            deadline: std::time::Instant::now(),
        }
    }

    /// Prepares for the next call (instances that are reused keep their store).
    pub(crate) fn reset(&mut self, reads: Arc<dyn HostReads>) {
        *self.log.lock().unwrap_or_else(|e| e.into_inner()) = CallLog::default();
        self.reads = reads;
        self.recorded.clear();
        self.reads_overflowed = false;
        self.timed_out = false;
        self.memory.hit = false;
    }

    fn record(&mut self, read: Read) {
        if self.recorded.len() < MAX_RECORDED_READS {
            self.recorded.insert(read);
        } else if !self.recorded.contains(&read) {
            self.reads_overflowed = true;
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl w::Host for CallState {}

impl host::Host for CallState {
    fn log(&mut self, level: w::LogLevel, message: String) -> wasmtime::Result<()> {
        let level = match level {
            w::LogLevel::Trace => LogLevel::Trace,
            w::LogLevel::Debug => LogLevel::Debug,
            w::LogLevel::Info => LogLevel::Info,
            w::LogLevel::Warn => LogLevel::Warn,
            w::LogLevel::Error => LogLevel::Error,
        };
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(level, LogSource::Log, &message);
        Ok(())
    }

    fn get(&mut self, r: w::ObjectRef) -> wasmtime::Result<Option<w::Resource>> {
        let r = ObjectRef::new(r.kind, if r.namespace.is_empty() { "default".into() } else { r.namespace }, r.name);
        let found = self.reads.get(&r);
        self.record(Read::Get(r));
        Ok(found.as_ref().map(convert::resource_to_wit))
    }

    fn list(&mut self, kind: String, namespace: Option<String>) -> wasmtime::Result<Vec<w::Resource>> {
        let found = self.reads.list(&kind, namespace.as_deref());
        self.record(Read::List { kind, namespace });
        Ok(found.iter().map(convert::resource_to_wit).collect())
    }
}
