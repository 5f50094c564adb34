//! The `steward` command line.
