//! The conformance kit: scenario files (YAML) run against any plugin component with the real runtime, each outcome compared with what the file expects.
//!
//! A scenario gives an object, what the host's cache answers to its `get`s and
//! `list`s, what the host observes of its services, tool calls and children,
//! and the expected outcome. [`run_file`] loads nothing itself: it runs the
//! scenarios of one file against a [`Plugin`] the caller loaded, so the same
//! files check a plugin written in any language. `steward plugin test` is its
//! command; docs/plugins.md ("Testing a plugin against scenarios") documents
//! the file format.

mod compare;
mod fake;
mod run;
mod scenario;

pub use compare::{Mismatch, compare};
pub use run::{ScenarioReport, Verdict, run_file, run_scenario};
pub use scenario::{Call, Expect, Scenario, ScenarioError, ScenarioFile, parse};

#[cfg(test)]
mod tests;
