//! Typed errors of plugin calls and of plugin loading, each saying what happened and what to do.

use std::path::PathBuf;
use std::time::Duration;

use steward_sdk::FieldError;

/// Why one call into a plugin did not return a usable answer.
///
/// The variants let a user tell apart what the plugin *said* (`Retry`,
/// `Fatal`, `Invalid`) from what the host *stopped* (`Trap`, `Timeout`,
/// `MemoryLimit`, `OutputTooLarge`, `CapabilityDenied`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PluginError {
    /// The plugin asked to be retried later.
    #[error("the plugin asked to retry: {0}")]
    Retry(String),
    /// The plugin reported a permanent failure.
    #[error("the plugin reported a fatal error: {0}")]
    Fatal(String),
    /// The plugin found the spec invalid.
    #[error("invalid spec: {}", join_fields(.0))]
    Invalid(Vec<FieldError>),
    /// The plugin trapped (a panic, `unreachable`, a bad memory access, a stack overflow).
    #[error("the plugin crashed: {message}")]
    Trap {
        /// The trap, and the panic message when the plugin panicked.
        message: String,
    },
    /// The call ran past the plugin's deadline and was interrupted.
    #[error("the plugin did not answer within its deadline of {}; raise `timeout` under plugins.<name> in the host config if the work is legitimately slow", humantime::format_duration(*limit))]
    Timeout {
        /// The deadline that passed.
        limit: Duration,
    },
    /// The plugin tried to grow its memory past its cap and failed because of it.
    #[error("the plugin hit its memory cap of {}; raise `memory` under plugins.<name> in the host config if it legitimately needs more ({trap})", bytesize::ByteSize::b(*limit))]
    MemoryLimit {
        /// The cap in bytes.
        limit: u64,
        /// How the failure surfaced in the plugin.
        trap: String,
    },
    /// What the plugin returned is larger than the output cap.
    #[error("the plugin returned {} of output, over the cap of {}; a status should be small (raise `max_output` under plugins.<name> if it must be larger)", size.map_or_else(|| "more".to_string(), |s| bytesize::ByteSize::b(s).to_string()), bytesize::ByteSize::b(*limit))]
    OutputTooLarge {
        /// The size it returned, when known (output far over the cap is refused before it is copied).
        size: Option<u64>,
        /// The cap.
        limit: u64,
    },
    /// The plugin returned something malformed (for example a status that is not a JSON object).
    #[error("the plugin returned a malformed answer: {0}")]
    BadOutput(String),
    /// The plugin used a capability its config does not grant: it called an import of it
    /// (a component may import what it is not granted; only calling needs the grant), or
    /// answered with what only the capability may ask for.
    #[error(
        "plugin {plugin} {used}, which needs capability `{capability}`, not granted; add `{capability}` to plugins.{plugin}.capabilities in the host config"
    )]
    CapabilityDenied {
        /// The plugin name.
        plugin: String,
        /// The capability it used.
        capability: String,
        /// What it did, for people: `called steward:plugin/services@0.9.0#set-desired`.
        used: String,
    },
    /// The plugin wants a child object of a kind its grant does not list.
    #[error(
        "plugin {plugin} wants {child}, a kind it may not own; add `{kind}` to plugins.{plugin}.children.kinds in the host config"
    )]
    ChildDenied {
        /// The plugin name.
        plugin: String,
        /// The child, for people (`child apps/v1/Deployment web`).
        child: String,
        /// Its `apiVersion/Kind`, as the grant would list it.
        kind: String,
    },
    /// A capability unit could not do what the answer asks (the message names what and why:
    /// a child the API server refused, a kind nobody serves); labelled with the capability.
    #[error("{message}")]
    Unit {
        /// The capability's name.
        capability: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The host could not run the call at all (for example no free instance slot).
    #[error("the host could not run the plugin: {0}")]
    Host(String),
}

impl PluginError {
    /// A short label for metrics and logs: `retry`, `fatal`, `invalid`, `trap`, `timeout`,
    /// `memory`, `output_too_large`, `bad_output`, `capability_denied`, `child_denied`, `children` or `host`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Retry(_) => "retry",
            Self::Fatal(_) => "fatal",
            Self::Invalid(_) => "invalid",
            Self::Trap { .. } => "trap",
            Self::Timeout { .. } => "timeout",
            Self::MemoryLimit { .. } => "memory",
            Self::OutputTooLarge { .. } => "output_too_large",
            Self::BadOutput(_) => "bad_output",
            Self::CapabilityDenied { .. } => "capability_denied",
            Self::ChildDenied { .. } => "child_denied",
            Self::Unit { capability, .. } => capability,
            Self::Host(_) => "host",
        }
    }

    /// True when the plugin itself answered (retry, fatal, invalid) rather than being stopped.
    pub fn is_plugin_answer(&self) -> bool {
        matches!(self, Self::Retry(_) | Self::Fatal(_) | Self::Invalid(_))
    }
}

/// How a call into an import of an ungranted capability fails inside the guest: the host
/// function's error, which [`PluginError::CapabilityDenied`] replaces when the call returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{function} needs capability `{capability}`, which the host config does not grant")]
pub struct UngrantedCall {
    /// The capability the import belongs to.
    pub capability: &'static str,
    /// The function called, `INTERFACE#NAME`.
    pub function: String,
}

fn join_fields(errs: &[FieldError]) -> String {
    errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Why a plugin file could not be loaded. Every message names the file.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{}: cannot read: {message}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The file is not WebAssembly at all.
    #[error("{}: not a WebAssembly file; a plugin is a component built with `cargo build --target wasm32-wasip2`", .file.display())]
    NotWasm {
        /// The file.
        file: PathBuf,
    },
    /// The file is a core module, not a component.
    #[error("{}: a core WebAssembly module, not a component; build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)", .file.display())]
    NotComponent {
        /// The file.
        file: PathBuf,
    },
    /// Compilation failed.
    #[error("{}: does not compile: {message}", .file.display())]
    Compile {
        /// The file.
        file: PathBuf,
        /// The compiler's message.
        message: String,
    },
    /// The images of the component's memories could not be made (on Linux, sealed memfds), even
    /// after a few tries: a kernel under memory pressure, or one that refuses the seals.
    #[error("{}: compiled, but the image of its memories cannot be made ({message}); the host loads the file again when it changes (touch it) and at its next start", .file.display())]
    MemoryImage {
        /// The file.
        file: PathBuf,
        /// Why, from the last try.
        message: String,
    },
    /// The component targets another version of the contract.
    #[error("{}: built against {found}, but this host speaks steward:plugin@{expected}; rebuild the plugin with a steward-sdk for {expected}", .file.display())]
    WrongVersion {
        /// The file.
        file: PathBuf,
        /// The interface it uses.
        found: String,
        /// The version this host speaks.
        expected: String,
    },
    /// The component is not a Steward plugin (another world).
    #[error("{}: not a Steward plugin (it does not fit world steward:plugin/plugin@{expected}): {message}", .file.display())]
    WrongWorld {
        /// The file.
        file: PathBuf,
        /// The version this host speaks.
        expected: String,
        /// What did not fit.
        message: String,
    },
    /// The component imports an interface no capability of this host provides.
    #[error("{}: imports {interface}, which no capability of this host provides; this host speaks steward:plugin@{} (see `steward plugin inspect`)", .file.display(), super::bindings::WIT_VERSION)]
    UnknownImport {
        /// The file.
        file: PathBuf,
        /// The import's full name.
        interface: String,
    },
    /// `describe` failed.
    #[error("{}: describe() failed: {error}", .file.display())]
    Describe {
        /// The file.
        file: PathBuf,
        /// The call error.
        error: PluginError,
    },
    /// What `describe` returned is unusable.
    #[error("{}: describe() returned an unusable answer: {message}", .file.display())]
    BadInfo {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Another plugin already serves one of its kinds.
    #[error("{}: kind {kind} is already served by plugin {other} ({}); remove one of the files, or list the kinds each may serve under plugins.<name>.kinds", .file.display(), .other_file.display())]
    KindConflict {
        /// The file.
        file: PathBuf,
        /// The contested kind.
        kind: String,
        /// The plugin that has it.
        other: String,
        /// That plugin's file.
        other_file: PathBuf,
    },
    /// A plugin source gave no plugin that runs: its artifact was refused, or the registry
    /// could not give it. The message names the artifact's digest when there is one.
    #[error("{}: {message}", .file.display())]
    Source {
        /// The source's reference.
        file: PathBuf,
        /// What happened, and what to do.
        message: String,
    },
    /// Another file already carries a plugin of the same name.
    #[error("{}: plugin name {name} is already used by {}; remove one of the files", .file.display(), .other_file.display())]
    DuplicateName {
        /// The file.
        file: PathBuf,
        /// The name.
        name: String,
        /// The other file.
        other_file: PathBuf,
    },
}
