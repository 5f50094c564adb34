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
    /// Every document is valid. `last_open`: no document marker (`---` or `...` at the start of
    /// a line) follows the last document, so a read of a file still being written may have cut
    /// it anywhere, even mid-value into another valid value.
    Parsed { docs: Vec<Doc>, content: (u64, u64), last_open: bool },
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
        Ok(docs) => {
            let last_open = !docs.is_empty() && !ends_closed(&bytes);
            FileRead::Parsed { docs, content, last_open }
        }
        Err(e) => FileRead::Failed { problem: problem(rel, e.line, e.column, e.message), content: Some(content) },
    }
}

/// Whether the last line of `bytes` with content (neither blank nor a comment) is a document
/// marker ([`crate::yaml::is_document_marker`]), which closes the document before it. Reads
/// the file's tail only, from the end.
fn ends_closed(bytes: &[u8]) -> bool {
    bytes
        .rsplit(|b| *b == b'\n')
        .find(|l| {
            let content = l.trim_ascii_start();
            !content.is_empty() && !content.starts_with(b"#")
        })
        .is_some_and(crate::yaml::is_document_marker)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_closed_only_by_a_marker_on_a_later_line() {
        assert!(!ends_closed(b"kind: K\n---\nkind: L\n"), "the last document is open");
        assert!(ends_closed(b"kind: K\n...\n"));
        assert!(ends_closed(b"kind: K\n--- # next\n"));
        assert!(ends_closed(b"kind: K\r\n---\r\n"));
        assert!(ends_closed(b"kind: K\n---\n# a comment\n\n"), "comments and blanks after it");
        assert!(!ends_closed(b"kind: K\nname: serv"), "cut mid-value");
        assert!(!ends_closed(b"kind: K\n---x: 1\n"), "a key, not a marker");
        assert!(!ends_closed(b"kind: K\n  ---\n"), "indented: content");
        assert!(!ends_closed(b"---\nkind: K\n"), "the marker that opens it does not close it");
    }

    #[test]
    fn a_read_says_whether_its_last_document_is_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let read = |text: &str| {
            let p = tmp.path().join("f.yaml");
            std::fs::write(&p, text).unwrap();
            match read_file(&p, "f.yaml", None, &BTreeSet::new()) {
                FileRead::Parsed { docs, last_open, .. } => (docs.len(), last_open),
                other => panic!("{other:?}"),
            }
        };
        let doc = |name: &str| format!("apiVersion: v1\nkind: K\nmetadata:\n  name: {name}\nspec:\n  v: 1\n");
        assert_eq!(read(&doc("a")), (1, true));
        assert_eq!(read(&format!("{}---\n", doc("a"))), (1, false));
        assert_eq!(read(&format!("{}---\n{}", doc("a"), doc("b"))), (2, true));
        assert_eq!(read("# nothing yet\n"), (0, false));
    }
}
