//! What the componentize builders (Python, TypeScript) share: whether a component is fresh, the WIT files it depends on, and I/O errors that name their path.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::{BuildError, workspace_root};

fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Whether `out` exists and is newer than every input.
pub(crate) fn is_fresh(out: &Path, inputs: &[PathBuf]) -> bool {
    let Some(built) = modified(out) else { return false };
    inputs.iter().all(|i| modified(i).is_some_and(|t| t < built))
}

/// An I/O failure as a build error: what was done, to which path, and why it failed.
pub(crate) fn io_error(what: &str, path: &Path, e: std::io::Error) -> BuildError {
    BuildError(format!("cannot {what} {}: {e}", path.display()))
}

/// The WIT files a component is built from: the contract and the WASI packages it names (`wit/deps`).
pub(crate) fn wit_files() -> Result<Vec<PathBuf>, BuildError> {
    let mut files = Vec::new();
    for wit in [workspace_root().join("wit"), workspace_root().join("wit").join("deps")] {
        let entries = fs::read_dir(&wit).map_err(|e| io_error("read", &wit, e))?;
        files
            .extend(entries.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.extension().is_some_and(|x| x == "wit")));
    }
    Ok(files)
}
