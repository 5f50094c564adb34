//! An in-process fake Kubernetes API server for Steward's tests.
//!
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod apply;
mod builtin;
mod crd;
mod discovery;
mod faults;
mod meta;
mod patch;
mod resource;
mod routes;
mod secret;
mod selector;
mod server;
mod status;
mod store;
mod verbs;
mod watch;

pub use apply::{FieldManager, Operation};
pub use faults::{Fault, FaultHandle, RequestRecord, Verb};
pub use resource::ResourceDef;
pub use server::{Error, FakeApiServer, Options, StateView};
