//! The base unit: WASI p2 (with nothing granted), the `host` interface (`log`, `get`, `list`) and a world round's `round` (`act-for`); every plugin has it.

use wasmtime::component::{HasSelf, Linker};

use super::effects::Unit;
use crate::plugin::bindings::steward::plugin::{host, types as w};
use crate::plugin::bindings::world::steward::plugin::round;
use crate::plugin::{CallState, Capability, HostState};

/// The base contract: `steward:plugin/host`, `steward:plugin/types` and `steward:plugin/round`
/// (which acts only inside a world round), and WASI p2 through the empty context of [`CallState`].
pub struct Base;

impl Capability for Base {
    fn name(&self) -> &'static str {
        "base"
    }

    fn interfaces(&self) -> &'static [&'static str] {
        &["steward:plugin/host@0.1.0", "steward:plugin/types@0.1.0", "steward:plugin/round@0.1.0", "wasi:*"]
    }

    fn always_granted(&self) -> bool {
        true
    }

    fn add_to_linker(&self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wasmtime_wasi::p2::add_to_linker_async(linker)?;
        w::add_to_linker::<CallState, HasSelf<HostState>>(linker, |s| &mut s.host)?;
        host::add_to_linker::<CallState, HasSelf<HostState>>(linker, |s| &mut s.host)?;
        round::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)
    }
}

impl Unit for Base {}
