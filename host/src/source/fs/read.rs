//! Reading one file: size limits, the bytes' hash (to skip parsing the same bytes again), and what the read found.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::Path;

use super::FileProblem;
use super::document::{Doc, DocError, parse_file};
use super::walk::is_gone;
use crate::model::fnv1a;
use crate::yaml::MAX_FILE_BYTES;

/// The result of reading one file.
#[derive(Debug)]
pub(super) enum FileRead {
    /// Gone (or not a file any more).
    Missing,
    /// The same bytes as at the last read.
    Unchanged,
    /// It could not be read or is invalid.
    Failed { problem: FileProblem, content: Option<(u64, u64)> },
    /// Every document is valid.
    Parsed { docs: Vec<Doc>, content: (u64, u64) },
}

/// A problem of `file`, at the position when known.
pub(super) fn problem(file: &str, line: Option<u64>, column: Option<u64>, message: impl Into<String>) -> FileProblem {
    FileProblem { file: file.to_string(), line, column, message: message.into() }
}

/// Reads the file at `abs` (`rel` names it in problems) and parses it, unless its (length, hash)
/// is `previous`. Never panics on input: a parser panic is a problem of the file.
pub(super) fn read_file(
    abs: &Path,
    rel: &str,
    previous: Option<(u64, u64)>,
    cluster_scoped: &BTreeSet<String>,
) -> FileRead {
    let failed = |message: String| FileRead::Failed { problem: problem(rel, None, None, message), content: None };
    let meta = match std::fs::metadata(abs) {
        Ok(m) => m,
        Err(e) if is_gone(&e) => return dangling_link(abs).map_or(FileRead::Missing, failed),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return failed(
                "a symbolic link that loops (following it leads back to a link already followed); fix or remove the link"
                    .into(),
            );
        }
        Err(e) => return failed(format!("cannot read the file: {e}")),
    };
    if meta.is_dir() {
        return FileRead::Missing;
    }
    if !meta.is_file() {
        return failed("not a regular file".to_string());
    }
    if meta.len() > MAX_FILE_BYTES {
        return failed(too_large(meta.len()));
    }
    let file = match std::fs::File::open(abs) {
        Ok(f) => f,
        Err(e) if is_gone(&e) => return FileRead::Missing,
        Err(e) => return failed(format!("cannot read the file: {e}")),
    };
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    if let Err(e) = file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        return failed(format!("cannot read the file: {e}"));
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return failed(too_large(bytes.len() as u64));
    }
    let content = (bytes.len() as u64, fnv1a(&bytes));
    if previous == Some(content) {
        return FileRead::Unchanged;
    }
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse_file(&bytes, rel, cluster_scoped)))
        .unwrap_or_else(|_| {
            Err(DocError { line: None, column: None, message: "internal error while parsing this file".into() })
        });
    match parsed {
        Ok(docs) => FileRead::Parsed { docs, content },
        Err(e) => FileRead::Failed { problem: problem(rel, e.line, e.column, e.message), content: Some(content) },
    }
}

/// What is wrong with `abs` when it is a symbolic link to nothing; `None` when it is no link
/// (the file is gone). The target is named without host paths, as problems are shown remotely.
fn dangling_link(abs: &Path) -> Option<String> {
    if !std::fs::symlink_metadata(abs).ok()?.file_type().is_symlink() {
        return None;
    }
    let target =
        std::fs::read_link(abs).map(|t| crate::sanitize::sanitize(&t.display().to_string())).unwrap_or_default();
    Some(format!("a symbolic link to `{target}`, which does not exist; create it, or fix or remove the link"))
}

fn too_large(len: u64) -> String {
    format!("the file is {len} bytes, larger than the limit of {MAX_FILE_BYTES} bytes")
}
