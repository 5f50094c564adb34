//! Why the engine could not start, and why it refused a request.

use std::path::PathBuf;

use crate::model::ObjectKey;

/// Why the engine could not start. Each message names the path or setting.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The state store could not be opened.
    #[error("cannot open the state store: {0}")]
    Store(String),
    /// The plugin runtime could not start.
    #[error(transparent)]
    Runtime(#[from] crate::plugin::RuntimeError),
    /// A directory is missing or unreadable.
    #[error("{what} {} is not a readable directory: {message}", .dir.display())]
    Dir {
        /// Which setting.
        what: &'static str,
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The source could not be watched.
    #[error("cannot watch the resources directory: {0}")]
    Watch(String),
    /// The mode could not start (Kubernetes mode: the cluster could not be reached or watched).
    #[error(transparent)]
    Mode(#[from] crate::driver::mode::ModeError),
    /// A capability unit could not start; the message names it.
    #[error("{0}")]
    Unit(String),
}

/// Why an API request about one object or kind was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// No such object.
    #[error("no object {0}")]
    NotFound(ObjectKey),
    /// No plugin describes the kind.
    #[error("no plugin serves kind {0}")]
    UnknownKind(String),
    /// An object of that key exists already.
    #[error("{0} exists already")]
    Exists(ObjectKey),
    /// The object cannot be created or deleted as asked; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// The mode could not carry out the request (the cluster did not answer); try again.
    #[error("{0}")]
    Unavailable(String),
}
