//! One wasmtime engine per process: pooling allocator, epoch ticker, a linker per grant set, and compile-and-check of components.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, Thread};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::{self, WIT_PACKAGE, WIT_VERSION};
use super::cache::{CompileCache, Origin};
use super::error::{LoadError, UngrantedCall};
use super::imports::{ImportCheck, check_imports};
use super::sandbox::CallState;
use super::unit::{Capability, Units};

/// How often the epoch advances while calls are in flight; a deadline is checked at every tick.
pub const TICK: Duration = Duration::from_millis(10);

/// How the process-wide runtime is set up.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Where compiled components are cached; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// The bound of the compile cache's entries, in bytes (by default
    /// [`DEFAULT_CACHE_LIMIT`](super::DEFAULT_CACHE_LIMIT)); the entries of the components
    /// loaded now are kept even past it.
    pub cache_limit: u64,
    /// Try the pooling allocator (falls back to on-demand allocation when it cannot be set up).
    pub pooling: bool,
    /// Instance slots of the pool: the most calls that can run at once.
    pub max_instances: u32,
    /// The largest memory cap any plugin may be given, in bytes.
    pub max_memory: u64,
    /// Host-wide settings every plugin sees in its WASI environment, and nothing else of the
    /// host's environment: see [`crate::config::Config::plugin_env`] (the `/mcp` tool prefix).
    pub plugin_env: Vec<(String, String)>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            cache_dir: None,
            cache_limit: super::DEFAULT_CACHE_LIMIT,
            pooling: true,
            max_instances: 128,
            max_memory: 4 * 1024 * 1024 * 1024,
            plugin_env: Vec::new(),
        }
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine could not be created.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
    /// The compile cache directory is unusable.
    #[error("cannot use the compile cache directory {}: {source}", .dir.display())]
    Cache {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Counters of the runtime, for tests and metrics.
#[derive(Debug, Default)]
pub struct RuntimeStats {
    /// Components compiled (not loaded from the cache).
    pub compiled: AtomicU64,
    /// Components loaded from the cache.
    pub cache_hits: AtomicU64,
    /// Instances created.
    pub instances: AtomicU64,
}

/// A component compiled and checked against the contract, before its grants are known.
pub struct Prepared {
    /// The compiled component.
    pub component: Component,
    /// Compiled now or loaded from the compile cache.
    pub origin: Origin,
    /// The capabilities its imports need.
    pub imports: ImportCheck,
    /// Linked with the always-granted units and every other import trapping: what
    /// `describe` runs on before the plugin's name (and so its grants) is known.
    pub base_pre: bindings::PluginFullPre<CallState>,
    /// Its hold on its compile cache entry (none without a cache), to be kept while it is loaded.
    pub cache_entry: Option<super::InUse>,
}

/// The process-wide WebAssembly runtime: engine, one linker per grant set, cache and epoch ticker.
pub struct Runtime {
    engine: Engine,
    /// The capability units plugins are linked with.
    units: Units,
    linkers: Mutex<BTreeMap<Vec<&'static str>, Arc<Linker<CallState>>>>,
    cache: Option<CompileCache>,
    pooling: bool,
    ticker: Arc<Ticker>,
    stats: RuntimeStats,
    /// What every plugin's WASI environment holds ([`RuntimeOptions::plugin_env`]).
    plugin_env: Vec<(String, String)>,
}

impl Runtime {
    /// Creates the engine (pooling when possible), the compile cache and the ticker, for plugins
    /// linked with `units`; linkers are made per grant set when needed.
    pub fn with_units(units: Units, opts: RuntimeOptions) -> Result<Arc<Self>, RuntimeError> {
        let (engine, pooling) = if opts.pooling {
            match Engine::new(&config(Some(&opts))) {
                Ok(e) => (e, true),
                Err(e) => {
                    tracing::warn!(error = %e, "pooling allocator unavailable on this machine; using on-demand allocation");
                    (Engine::new(&config(None)).map_err(|e| RuntimeError::Engine(e.to_string()))?, false)
                }
            }
        } else {
            (Engine::new(&config(None)).map_err(|e| RuntimeError::Engine(e.to_string()))?, false)
        };
        // Every unit must link; a unit that cannot is a bug found here rather than at the first load.
        linker(&engine, units.all()).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let cache = match opts.cache_dir {
            Some(dir) => Some(
                CompileCache::new(&dir)
                    .map_err(|source| RuntimeError::Cache { dir, source })?
                    .with_limit(opts.cache_limit),
            ),
            None => None,
        };
        let ticker = Ticker::start(engine.clone());
        Ok(Arc::new(Self {
            engine,
            units,
            linkers: Mutex::default(),
            cache,
            pooling,
            ticker,
            stats: RuntimeStats::default(),
            plugin_env: opts.plugin_env,
        }))
    }

    /// The capability units plugins are linked with.
    pub fn units(&self) -> Units {
        self.units
    }

    /// The variables every plugin's WASI environment holds.
    pub fn plugin_env(&self) -> &[(String, String)] {
        &self.plugin_env
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether the pooling allocator is in use.
    pub fn uses_pooling(&self) -> bool {
        self.pooling
    }

    /// The compile cache, if configured.
    pub fn cache(&self) -> Option<&CompileCache> {
        self.cache.as_ref()
    }

    /// Reports whether the compile cache keeps what is compiled to `conditions`
    /// ([`CompileCache::report_to`]); nothing without a cache.
    pub fn report_to(&self, conditions: &crate::health::Conditions) {
        if let Some(c) = &self.cache {
            c.report_to(conditions);
        }
    }

    /// Counters.
    pub fn stats(&self) -> &RuntimeStats {
        &self.stats
    }

    /// Marks a call in flight so the epoch ticks; the tick stops when none are.
    pub(crate) fn enter(&self) -> TickGuard {
        self.ticker.enter()
    }

    /// The linker holding exactly `units` (made once per set, then shared).
    pub fn linker(&self, units: &[&'static dyn Capability]) -> Result<Arc<Linker<CallState>>, RuntimeError> {
        let key: Vec<&'static str> = units.iter().map(|u| u.name()).collect();
        let mut linkers = self.linkers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = linkers.get(&key) {
            return Ok(l.clone());
        }
        let linker = Arc::new(linker(&self.engine, units).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?);
        linkers.insert(key, linker.clone());
        Ok(linker)
    }

    /// The grant sets a linker was made for, each as its unit names in link order.
    pub fn linked_sets(&self) -> Vec<Vec<&'static str>> {
        self.linkers.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    /// Compiles (or loads from the cache) `bytes` read from `file`, checks it is a Steward
    /// plugin of this contract version whose every import some unit provides, and links
    /// it with the always-granted units for `describe`.
    pub fn prepare(&self, file: &Path, bytes: &[u8]) -> Result<Prepared, LoadError> {
        let file = file.to_path_buf();
        if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
            return Err(LoadError::NotWasm { file });
        }
        if bytes[6..8] != [1, 0] {
            return Err(LoadError::NotComponent { file });
        }
        let (component, origin, cache_entry) = match &self.cache {
            Some(cache) => cache.load_or_compile(&self.engine, bytes).map(|(c, o, held)| (c, o, Some(held))),
            None => Component::new(&self.engine, bytes).map(|c| (c, Origin::Compiled, None)),
        }
        .map_err(|e| LoadError::Compile { file: file.clone(), message: format!("{e:#}") })?;
        // The memories' copy-on-write images are made here, where a failure can be tried again,
        // rather than at the first instance, where it failed the call.
        with_retries(|| component.initialize_copy_on_write_image())
            .map_err(|e| LoadError::MemoryImage { file: file.clone(), message: format!("{e:#}") })?;
        match origin {
            Origin::Compiled => self.stats.compiled.fetch_add(1, Ordering::Relaxed),
            Origin::Cached => self.stats.cache_hits.fetch_add(1, Ordering::Relaxed),
        };
        self.check_version(&file, &component)?;
        let names: Vec<String> = component.component_type().imports(&self.engine).map(|(n, _)| n.to_string()).collect();
        let imports = check_imports(self.units, names.iter().map(String::as_str))
            .map_err(|e| LoadError::UnknownImport { file: file.clone(), interface: e.interface })?;
        let base_pre = self.link(&file, &component, &self.units.base(), true)?;
        Ok(Prepared { component, origin, imports, base_pre, cache_entry })
    }

    /// Pre-links `component` with exactly `units`; with `trap_rest`, the imports of units not
    /// in `units` are linked to functions that fail the call naming the grant.
    pub fn link(
        &self,
        file: &Path,
        component: &Component,
        units: &[&'static dyn Capability],
        trap_rest: bool,
    ) -> Result<bindings::PluginFullPre<CallState>, LoadError> {
        let wrong_world = |e: wasmtime::Error| LoadError::WrongWorld {
            file: file.to_path_buf(),
            expected: WIT_VERSION.into(),
            message: format!("{e:#}"),
        };
        let shared =
            self.linker(units).map_err(|e| LoadError::Compile { file: file.to_path_buf(), message: e.to_string() })?;
        let pre = if trap_rest {
            let mut linker = (*shared).clone();
            trap_ungranted_imports(self.units, &mut linker, &self.engine, component, units).map_err(wrong_world)?;
            linker.instantiate_pre(component)
        } else {
            shared.instantiate_pre(component)
        };
        pre.and_then(bindings::PluginFullPre::new).map_err(wrong_world)
    }

    /// Finds a `steward:plugin/...@V` import or export with another `V`.
    fn check_version(&self, file: &Path, component: &Component) -> Result<(), LoadError> {
        let ty = component.component_type();
        let names: Vec<String> = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_string())
            .chain(ty.exports(&self.engine).map(|(n, _)| n.to_string()))
            .collect();
        for name in names {
            if let Some(found) = foreign_version(&name) {
                return Err(LoadError::WrongVersion { file: file.to_path_buf(), found, expected: WIT_VERSION.into() });
            }
        }
        Ok(())
    }

    pub(crate) fn note_instance(&self) {
        self.stats.instances.fetch_add(1, Ordering::Relaxed);
    }
}

/// A linker holding exactly `units`' imports.
pub(crate) fn linker(
    engine: &wasmtime::Engine,
    units: &[&'static dyn Capability],
) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    for u in units {
        u.add_to_linker(&mut linker)?;
    }
    Ok(linker)
}

/// Links every import of `component` that a unit outside `linked` provides to functions
/// that fail the call with an [`UngrantedCall`] naming the capability, so a component may
/// import what it is not granted (and a blocked plugin can still describe itself).
/// Only those imports are stubbed: the linked units' imports (and WASI's version matching)
/// are left as they are.
pub(crate) fn trap_ungranted_imports(
    all: Units,
    linker: &mut Linker<CallState>,
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    linked: &[&'static dyn Capability],
) -> wasmtime::Result<()> {
    use wasmtime::component::types::ComponentItem;
    let stubbed = |name: &str| all.for_import(name).is_some_and(|u| !linked.iter().any(|l| l.name() == u.name()));
    // Resource types the linked units define (wasi:io's streams, which wasi:http's use): kept.
    let linked_resources: Vec<_> = component
        .component_type()
        .imports(engine)
        .filter(|(name, _)| !stubbed(name))
        .filter_map(|(_, item)| match item.ty {
            ComponentItem::ComponentInstance(i) => Some(i),
            _ => None,
        })
        .flat_map(|i| {
            i.exports(engine)
                .filter_map(|(_, e)| if let ComponentItem::Resource(r) = e.ty { Some(r) } else { None })
                .collect::<Vec<_>>()
        })
        .collect();
    for (name, item) in component.component_type().imports(engine) {
        let Some(unit) = all.for_import(name) else { continue };
        if !stubbed(name) {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = item.ty else { continue };
        let mut inst = linker.instance(name)?;
        for (export, ext) in instance.exports(engine) {
            // A resource type of the ungranted interface's own is stood in for by one no call can make.
            if let ComponentItem::Resource(r) = &ext.ty
                && !linked_resources.contains(r)
            {
                inst.resource(export, wasmtime::component::ResourceType::host::<Ungranted>(), |_, _| Ok(()))?;
            }
            if let ComponentItem::ComponentFunc(_) = ext.ty {
                let call = UngrantedCall { capability: unit.name(), function: format!("{name}#{export}") };
                inst.func_new(export, move |_, _, _, _| Err(wasmtime::Error::new(call.clone())))?;
            }
        }
    }
    Ok(())
}

/// The resource type that stands in for an ungranted capability's resources.
struct Ungranted;

/// `Some("steward:plugin@0.2.0")` when `name` is an interface of our package at another version.
fn foreign_version(name: &str) -> Option<String> {
    let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
    let (_, version) = rest.split_once('@')?;
    (version != WIT_VERSION).then(|| format!("{WIT_PACKAGE}@{version}"))
}

/// Bytes of each pooled linear memory kept resident between instances (a Rust plugin touches 1–2 MiB).
const KEEP_RESIDENT: usize = 4 * 1024 * 1024;

fn config(pool: Option<&RuntimeOptions>) -> Config {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true);
    cfg.epoch_interruption(true);
    cfg.memory_init_cow(true);
    if let Some(opts) = pool {
        let n = opts.max_instances.max(1);
        let mut p = PoolingAllocationConfig::default();
        p.total_component_instances(n)
            .total_core_instances(n * 8)
            .total_memories(n * 2)
            .total_tables(n * 8)
            .total_stacks(n)
            .max_memory_size(opts.max_memory.min(4 * 1024 * 1024 * 1024) as usize);
        // A fresh instance per call is the default, so what a slot costs to reset matters most:
        // keep the pages a plugin touched resident and reset only those (PAGEMAP_SCAN, Linux 6.7+;
        // older kernels memset the kept range) instead of madvise and a page fault per page on the
        // next call. Measured on the MCPServer plugin: 66–100 µs → 30 µs per fresh call.
        p.linear_memory_keep_resident(KEEP_RESIDENT).table_keep_resident(KEEP_RESIDENT / 16);
        p.pagemap_scan(wasmtime::Enabled::Auto);
        cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
    }
    cfg
}

/// Advances the engine's epoch every [`TICK`] while at least one call is in flight.
pub(crate) struct Ticker {
    inflight: AtomicUsize,
    stop: AtomicBool,
    thread: Mutex<Option<Thread>>,
}

impl Ticker {
    fn start(engine: Engine) -> Arc<Self> {
        let t =
            Arc::new(Self { inflight: AtomicUsize::new(0), stop: AtomicBool::new(false), thread: Mutex::new(None) });
        let weak = Arc::downgrade(&t);
        let handle = thread::Builder::new()
            .name("steward-epoch".into())
            .spawn(move || {
                loop {
                    let Some(t) = weak.upgrade() else { return };
                    if t.stop.load(Ordering::Acquire) {
                        return;
                    }
                    let idle = t.inflight.load(Ordering::Acquire) == 0;
                    drop(t);
                    if idle {
                        thread::park_timeout(Duration::from_secs(1));
                    } else {
                        thread::sleep(TICK);
                        engine.increment_epoch();
                    }
                }
            })
            .expect("spawning the epoch thread");
        *t.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle.thread().clone());
        t
    }

    fn enter(self: &Arc<Self>) -> TickGuard {
        if self.inflight.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(th) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
        {
            th.unpark();
        }
        TickGuard(self.clone())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::Release);
        if let Some(th) = self.ticker.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            th.unpark();
        }
    }
}

/// Keeps the epoch ticking while alive.
pub(crate) struct TickGuard(Arc<Ticker>);

impl Drop for TickGuard {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs `attempt` until it succeeds, at most [`ATTEMPTS`] times, pausing 10 ms, then twice as
/// long each time, between two; the last error when none succeeds.
///
/// For the memory images of a component: on Linux each is a sealed memfd, and sealing fails
/// with `EBUSY` while pages just written to it are still referenced elsewhere for a moment
/// (seen on a loaded 2-core machine: a Python plugin then failed its first call with "cannot
/// add seals to the memfd"). Runs on a blocking thread, as loading does.
fn with_retries(mut attempt: impl FnMut() -> wasmtime::Result<()>) -> wasmtime::Result<()> {
    let mut pause = Duration::from_millis(10);
    for _ in 1..ATTEMPTS {
        match attempt() {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::debug!(error = format!("{e:#}"), ?pause, "cannot make the memory image yet; trying again")
            }
        }
        thread::sleep(pause);
        pause *= 2;
    }
    attempt()
}

/// How many times [`with_retries`] tries.
const ATTEMPTS: u32 = 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_image_that_fails_for_a_moment_is_made_on_a_later_attempt_and_one_that_keeps_failing_is_an_error() {
        let mut tries = 0;
        let made = with_retries(|| {
            tries += 1;
            if tries < 3 { Err(wasmtime::format_err!("cannot add seals to the memfd")) } else { Ok(()) }
        });
        assert!(made.is_ok());
        assert_eq!(tries, 3);
        let mut tries = 0;
        let err = with_retries(|| {
            tries += 1;
            Err(wasmtime::format_err!("attempt {tries}"))
        })
        .unwrap_err();
        assert_eq!(tries, ATTEMPTS);
        assert_eq!(err.to_string(), format!("attempt {ATTEMPTS}"), "the last error is the one reported");
    }

    #[test]
    fn foreign_versions_are_recognised() {
        assert_eq!(foreign_version("steward:plugin/host@0.2.0").as_deref(), Some("steward:plugin@0.2.0"));
        assert_eq!(foreign_version("steward:plugin/host@0.1.0"), None);
        assert_eq!(foreign_version("wasi:cli/stdout@0.2.0"), None);
    }

    #[test]
    fn not_wasm_and_core_modules_are_told_apart() {
        let rt = Runtime::new(RuntimeOptions { pooling: false, ..Default::default() }).unwrap();
        let f = Path::new("p.wasm");
        assert!(matches!(rt.prepare(f, b"hello world").map(|_| ()), Err(LoadError::NotWasm { .. })));
        assert!(matches!(rt.prepare(f, b"\0asm\x01\0\0\0").map(|_| ()), Err(LoadError::NotComponent { .. })));
        // An empty component compiles but exports nothing of ours.
        let err = rt.prepare(f, b"\0asm\x0d\0\x01\0").map(|_| ()).unwrap_err();
        assert!(matches!(err, LoadError::WrongWorld { .. }), "{err}");
        assert!(err.to_string().contains("not a Steward plugin"), "{err}");
    }
}
