//! Change detection: where desired state comes from, kept in a cache the host reads from.

pub mod fs;
