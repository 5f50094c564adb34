//! Links a release binary with its executed functions side by side (`host/text-order.txt`).
//!
//! A host touches a few thousand of the executable's hundred thousand functions, spread over
//! its whole text; the kernel maps code in 64 KiB blocks around each first touch, so before
//! this the idle host kept about half of a 41 MiB text resident. `text-order.txt` names the
//! functions an instrumented host ran (most-run first; `bench/text-order.sh` writes it) and
//! lld's `--symbol-ordering-file` places them first. Names that no longer exist (after a
//! dependency or compiler update) are skipped, so a stale file costs memory, never a build; the
//! host's crate is one codegen unit in release (the workspace's `Cargo.toml`), so that editing
//! it keeps its functions' names.
//!
//! Applied to release builds for `x86_64-unknown-linux-gnu` only, whose default linker is
//! rust-lld; `STEWARD_TEXT_ORDER=off` turns it off (for a linker without the option, such as
//! GNU ld), and so does a `RUSTFLAGS` flag that chooses a linker.

use std::env;
use std::path::Path;

/// Prints the link arguments that order the binaries' text by `file`, when they apply. Only a
/// build they apply to watches `file`, so a new list never rebuilds a debug host.
pub fn link(file: &str) {
    println!("cargo::rerun-if-env-changed=STEWARD_TEXT_ORDER");
    let var = |k: &str| env::var(k).unwrap_or_default();
    let off = var("STEWARD_TEXT_ORDER") == "off";
    let release = var("PROFILE") == "release";
    let target = var("TARGET") == "x86_64-unknown-linux-gnu";
    let own_linker = var("CARGO_ENCODED_RUSTFLAGS")
        .split('\x1f')
        .any(|f| ["linker", "link-self-contained", "fuse-ld"].iter().any(|k| f.contains(k)));
    if off || !release || !target || own_linker {
        return;
    }
    println!("cargo::rerun-if-changed={file}");
    let Ok(path) = Path::new(file).canonicalize() else {
        println!(
            "cargo::warning={file} is missing, so this binary's code is not laid out by what a host runs \
             (about 10 MiB more resident); restore it from git or write it with bench/text-order.sh"
        );
        return;
    };
    println!("cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", path.display());
    println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}
