//! Packs a release binary's relative relocations (`-z pack-relative-relocs`, DT_RELR).
//!
//! A position-independent executable carries one 24-byte `.rela.dyn` entry for each pointer in
//! its read-only data (vtables, tables of strings): about 85,000 in the host, 2 MiB that the
//! dynamic loader reads at start and that stay resident for the life of the process. Packed,
//! they take a few KiB, with no change to what is relocated or to address randomisation.
//!
//! glibc has read packed relocations since 2.36, and the linker makes the binary require that
//! version, so a binary built against an older glibc would not start: the flag is passed only
//! when the C library the binary links against names `GLIBC_ABI_DT_RELR`. Applied to release
//! builds for `x86_64-unknown-linux-gnu` built on that platform, as the text order is;
//! `STEWARD_RELR=off` turns it off.

use std::env;
use std::process::Command;

/// Prints the link argument that packs the binaries' relative relocations, when it applies.
pub fn link() {
    println!("cargo::rerun-if-env-changed=STEWARD_RELR");
    let var = |k: &str| env::var(k).unwrap_or_default();
    let target = var("TARGET");
    if var("STEWARD_RELR") == "off"
        || var("PROFILE") != "release"
        || target != "x86_64-unknown-linux-gnu"
        || var("HOST") != target
    {
        return;
    }
    if glibc_reads_relr() {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the `libc.so.6` the C compiler links against defines the `GLIBC_ABI_DT_RELR`
/// version (glibc 2.36 or later); `false` when it cannot be found or read.
fn glibc_reads_relr() -> bool {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let Ok(out) = Command::new(cc).arg("-print-file-name=libc.so.6").output() else {
        return false;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !path.starts_with('/') {
        return false;
    }
    let version = b"GLIBC_ABI_DT_RELR";
    std::fs::read(&path).is_ok_and(|bytes| bytes.windows(version.len()).any(|w| w == version))
}
