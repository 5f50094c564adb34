//! Write Steward reconciler plugins: typed spec and status, one trait, one export macro.
//!
//! A plugin is a crate of type `cdylib` built for `wasm32-wasip2`. Its author
//! writes one [`Kind`] implementation per kind it reconciles and names them in
//! [`export_plugin!`]; the SDK turns the WIT contract (`steward:plugin@0.1.0`)
//! into those typed calls and back, so the author never touches wit-bindgen.
//!
//! ```
//! use steward_sdk::prelude::*;
//!
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(rename_all = "camelCase", deny_unknown_fields)]
//! pub struct GreeterSpec { pub greeting: String }
//!
//! #[derive(Serialize, Deserialize, Default)]
//! pub struct GreeterStatus { pub said: String }
//!
//! pub struct Greeter;
//! impl Kind for Greeter {
//!     type Spec = GreeterSpec;
//!     type Status = GreeterStatus;
//!     const GROUP: &'static str = "example.dev";
//!     const VERSION: &'static str = "v1";
//!     const KIND: &'static str = "Greeter";
//!     const PLURAL: &'static str = "greeters";
//!     fn reconcile(_ctx: &Context, obj: &Object<GreeterSpec, GreeterStatus>) -> Result<Outcome<GreeterStatus>, Error> {
//!         Ok(Outcome::status(GreeterStatus { said: obj.spec.greeting.clone() }))
//!     }
//! }
//!
//! steward_sdk::export_plugin!(name: "greeter", version: "0.1.0", kinds: [Greeter]);
//!
//! // Native test: no WebAssembly involved.
//! use steward_sdk::testing::{FakeHost, object, reconcile};
//! let out = reconcile::<Greeter>(&FakeHost::new(), &object("Greeter", "hi", serde_json::json!({"greeting": "hello"})), &[]).unwrap();
//! assert_eq!(out.status.unwrap().said, "hello");
//! ```
//!
//! Test the logic natively with [`testing::FakeHost`] and [`testing::reconcile`]; no WebAssembly needed.
//!
//! A plugin whose logic is about a graph of objects (policy attachment, settings merged along
//! paths) registers a [`World`] instead (`world: MyWorld,` in [`export_plugin!`]): see
//! [`world`] for rounds, the [`Topology`] and how an answer's effects act for one object.
//!
//! Cargo feature `services` (host capability `services`): the plugin imports
//! `steward:plugin/services`, through which [`Context::services`] is observed and
//! [`Outcome`]'s services are handed to the host. A plugin without it never imports the
//! interface, so the host needs no grant for it.

#[cfg(any(test, all(feature = "fast-alloc", target_family = "wasm", not(target_feature = "atomics"))))]
mod alloc;
mod context;
#[doc(hidden)]
pub mod dispatch;
#[cfg(feature = "http")]
pub mod http;
mod kind;
pub mod settings;
pub mod testing;
pub mod time;
mod types;
#[doc(hidden)]
#[cfg(any(test, target_arch = "wasm32"))]
pub mod wasm;
pub mod world;

pub use context::{Context, Host};
pub use dispatch::RawOutcome;
pub use kind::{Error, Kind, Outcome};
pub use types::{
    CallRecord, CallRequest, CallState, Child, ColumnType, Condition, ConditionStatus, Event, EventType, FieldError,
    KindInfo, LogLevel, Object, ObjectRef, ObservedChild, PluginInfo, PrinterColumn, RawObject, SecretSource,
    SecretTarget, SecretValue, ServicePhase, ServiceSpec, ServiceStatus, ToolInfo, Transport,
};
pub use world::{
    Change, ChangeType, Edge, Link, LinkBy, NodeId, Observed, Round, RoundContext, Topology, World, WorldAnswer,
    WorldInfo,
};

/// The plugin's allocator (feature `fast-alloc`, on by default): free lists of small blocks in
/// front of wasi-libc's dlmalloc; see `alloc.rs` for why and what was measured. WebAssembly
/// without threads only. Turn off the SDK's default features to keep dlmalloc alone or to set a
/// `#[global_allocator]` of your own.
#[cfg(all(feature = "fast-alloc", target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: alloc::SizeClasses = alloc::SizeClasses::new();

/// The WIT package version this SDK speaks; the host refuses plugins of another.
pub const WIT_VERSION: &str = "0.1.0";

/// Everything a plugin usually needs, including serde's and schemars' derives.
pub mod prelude {
    pub use crate::{
        CallRecord, CallRequest, CallState, Child, ColumnType, Condition, ConditionStatus, Context, Error, Event,
        FieldError, Kind, Object, ObservedChild, Outcome, PrinterColumn, RawObject, ServiceSpec, ServiceStatus,
        Transport,
    };
    pub use schemars::{self, JsonSchema};
    pub use serde::{Deserialize, Serialize};
}

#[doc(hidden)]
pub mod __private {
    pub use crate::dispatch::KindEntry;
    #[cfg(target_arch = "wasm32")]
    pub use crate::wasm::{bindings, export_guest};
    pub use schemars;
    pub use serde_json;
}

/// Exports a plugin: its name, version, the capabilities it needs, its kinds, and optionally its
/// world.
///
/// Expands to the WebAssembly exports of the `steward:plugin/reconciler` interface and of
/// the optional `steward:plugin/lint` ([`Kind::warnings`]), `steward:plugin/columns`
/// ([`Kind::columns`]) and `steward:plugin/world-reconciler` when built for `wasm32`, and to
/// nothing else; on the host target the crate stays an ordinary library that tests call natively.
/// Each listed type must implement [`Kind`]; kinds must be distinct.
///
/// With `world: MyWorld,` after the kinds (a type implementing [`World`]), `describe-world`
/// answers `MyWorld`'s [`WorldInfo`] and `reconcile-world` runs its rounds; the plugin then
/// imports `steward:plugin/round`, and its kinds are never reconciled one by one. Without it,
/// `describe-world` answers none and the plugin imports nothing it did not import before.
///
/// ```text
/// steward_sdk::export_plugin!(
///     name: "toolpolicy",
///     version: "0.1.0",
///     capabilities: ["children"],
///     kinds: [ToolPolicy, EffectiveToolPolicy],
///     world: ToolPolicyWorld,
/// );
/// ```
#[macro_export]
macro_rules! export_plugin {
    (name: $name:expr, version: $version:expr, $(capabilities: [$($cap:expr),* $(,)?],)? kinds: [$($kind:ty),+ $(,)?], world: $world:ty $(,)?) => {
        $crate::export_plugin!(@emit ($name) ($version) ($($($cap),*)?) ($($kind),+) (::std::option::Option::Some($crate::world::WorldEntry::of::<$world>())) ($world));
    };
    (name: $name:expr, version: $version:expr, $(capabilities: [$($cap:expr),* $(,)?],)? kinds: [$($kind:ty),+ $(,)?] $(,)?) => {
        $crate::export_plugin!(@emit ($name) ($version) ($($($cap),*)?) ($($kind),+) (::std::option::Option::None) ());
    };
    (@emit ($name:expr) ($version:expr) ($($cap:expr),*) ($($kind:ty),+) ($world_entry:expr) ($($world:ty)?)) => {
        /// The kinds (and world) this plugin exports, for native tests and the wasm exports alike.
        #[doc(hidden)]
        pub fn __steward_plugin() -> $crate::dispatch::PluginEntry {
            $crate::dispatch::PluginEntry {
                name: $name,
                version: $version,
                capabilities: &[$($cap),*],
                kinds: ::std::vec![$($crate::dispatch::KindEntry::of::<$kind>()),+],
                world: $world_entry,
            }
        }

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __StewardGuest;
            impl $crate::__private::bindings::exports::steward::plugin::reconciler::Guest for __StewardGuest {
                fn describe() -> $crate::__private::bindings::steward::plugin::types::PluginInfo {
                    $crate::wasm::describe(&__steward_plugin())
                }
                fn validate(
                    resource: $crate::__private::bindings::steward::plugin::types::Resource,
                ) -> ::std::vec::Vec<$crate::__private::bindings::steward::plugin::types::FieldError> {
                    $crate::wasm::validate(&__steward_plugin(), resource)
                }
                fn reconcile(
                    request: $crate::__private::bindings::steward::plugin::types::Request,
                ) -> ::std::result::Result<
                    $crate::__private::bindings::steward::plugin::types::Response,
                    $crate::__private::bindings::steward::plugin::types::ReconcileError,
                > {
                    $crate::wasm::reconcile(&__steward_plugin(), request, false)
                }
                fn finalize(
                    request: $crate::__private::bindings::steward::plugin::types::Request,
                ) -> ::std::result::Result<
                    $crate::__private::bindings::steward::plugin::types::Response,
                    $crate::__private::bindings::steward::plugin::types::ReconcileError,
                > {
                    $crate::wasm::reconcile(&__steward_plugin(), request, true)
                }
            }
            impl $crate::__private::bindings::exports::steward::plugin::lint::Guest for __StewardGuest {
                fn warnings(
                    resource: $crate::__private::bindings::steward::plugin::types::Resource,
                ) -> ::std::vec::Vec<$crate::__private::bindings::steward::plugin::types::FieldError> {
                    $crate::wasm::warnings(&__steward_plugin(), resource)
                }
            }
            impl $crate::__private::bindings::exports::steward::plugin::columns::Guest for __StewardGuest {
                fn printer_columns() -> ::std::vec::Vec<
                    $crate::__private::bindings::exports::steward::plugin::columns::KindColumns,
                > {
                    $crate::wasm::printer_columns(&__steward_plugin())
                }
            }
            $crate::__steward_world_guest!(__StewardGuest; $($world)?);
            $crate::__private::export_guest!(__StewardGuest with_types_in $crate::__private::bindings);
        };
    };
}

/// The `world-reconciler` export of [`export_plugin!`]: the world's glue with a world, and
/// without one an answer of none that calls no import (so the plugin imports nothing new).
#[doc(hidden)]
#[macro_export]
macro_rules! __steward_world_guest {
    ($guest:ident;) => {
        impl $crate::__private::bindings::exports::steward::plugin::world_reconciler::Guest for $guest {
            fn describe_world()
            -> ::std::option::Option<$crate::__private::bindings::exports::steward::plugin::world_reconciler::WorldInfo>
            {
                ::std::option::Option::None
            }
            fn reconcile_world(
                _round: $crate::__private::bindings::exports::steward::plugin::world_reconciler::Round,
            ) -> ::std::result::Result<
                $crate::__private::bindings::exports::steward::plugin::world_reconciler::Answer,
                $crate::__private::bindings::steward::plugin::types::ReconcileError,
            > {
                $crate::wasm::no_world()
            }
        }
    };
    ($guest:ident; $world:ty) => {
        impl $crate::__private::bindings::exports::steward::plugin::world_reconciler::Guest for $guest {
            fn describe_world()
            -> ::std::option::Option<$crate::__private::bindings::exports::steward::plugin::world_reconciler::WorldInfo>
            {
                $crate::wasm::describe_world(&__steward_plugin())
            }
            fn reconcile_world(
                round: $crate::__private::bindings::exports::steward::plugin::world_reconciler::Round,
            ) -> ::std::result::Result<
                $crate::__private::bindings::exports::steward::plugin::world_reconciler::Answer,
                $crate::__private::bindings::steward::plugin::types::ReconcileError,
            > {
                $crate::wasm::reconcile_world(&__steward_plugin(), round)
            }
        }
    };
}

#[cfg(test)]
mod tests;
