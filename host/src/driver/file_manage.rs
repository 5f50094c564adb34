//! Rewriting and removing a user's own file of the resources directory, for the management tools: only a file that defines that one object.

use std::path::{Path, PathBuf};

use super::DriverError;
use super::files::CREATED_MARK;
use crate::model::{ObjectKey, SourceLocation};

/// How many YAML documents `text` holds that define something (a document of only comments or
/// blank lines does not count).
pub(super) fn documents(text: &str) -> usize {
    let mut count = 0;
    let mut current = false;
    for line in text.lines() {
        if crate::yaml::is_document_marker(line.as_bytes()) {
            count += usize::from(current);
            current = false;
            continue;
        }
        let content = line.trim_start();
        if !content.is_empty() && !content.starts_with('#') {
            current = true;
        }
    }
    count + usize::from(current)
}

fn path_of(dir: &Path, from: &SourceLocation) -> Result<PathBuf, DriverError> {
    let rel = from.file.as_str();
    if rel.is_empty() || rel.split('/').any(|c| c == ".." || c.is_empty()) {
        return Err(DriverError::Refused(format!("{rel:?} is not a file of the resources directory")));
    }
    Ok(dir.join(rel))
}

/// Whether the file at `from` is one the host created (it carries the host's mark).
pub(super) async fn is_created(dir: &Path, from: &SourceLocation) -> bool {
    let Ok(path) = path_of(dir, from) else { return false };
    tokio::fs::read_to_string(path).await.is_ok_and(|t| t.starts_with(CREATED_MARK))
}

/// Reads the file at `from` and checks that it defines one object only.
async fn single(dir: &Path, from: &SourceLocation, what: &str) -> Result<PathBuf, DriverError> {
    let path = path_of(dir, from)?;
    let text = tokio::fs::read_to_string(&path)
        .await
        .map_err(|e| DriverError::Refused(format!("cannot read {}: {e}", path.display())))?;
    let n = documents(&text);
    if n > 1 {
        return Err(DriverError::Refused(format!(
            "{what} is defined in {}:{} beside {} other document(s); the management tools rewrite or delete \
             a file that defines one object only: move it to a file of its own, or edit the file",
            from.file,
            from.line,
            n - 1
        )));
    }
    Ok(path)
}

/// Replaces the file at `from` (which must define `name` only) with `text`, atomically: the
/// watcher never sees a half-written file.
pub(super) async fn rewrite(dir: &Path, from: &SourceLocation, name: &str, text: String) -> Result<(), DriverError> {
    let path = single(dir, from, name).await?;
    tokio::task::spawn_blocking(move || -> Result<(), DriverError> {
        let parent = path.parent().unwrap_or(&path).to_path_buf();
        // A hidden name of its own per write (never read by the source), renamed into place.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = parent.join(format!(".{}-replace-{n}.steward-tmp", std::process::id()));
        let refused = |e: std::io::Error| DriverError::Refused(format!("cannot write {}: {e}", path.display()));
        std::fs::write(&tmp, text).map_err(refused)?;
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            refused(e)
        })
    })
    .await
    .map_err(|e| DriverError::Refused(format!("the file write did not finish: {e}")))?
}

/// Deletes the file at `from`, which must define `key` only.
pub(super) async fn remove(dir: &Path, from: &SourceLocation, key: &ObjectKey) -> Result<(), DriverError> {
    let path = single(dir, from, &key.to_string()).await?;
    match tokio::fs::remove_file(&path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DriverError::Refused(format!("cannot delete {}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_counts_only_those_that_define_something() {
        assert_eq!(documents("kind: A\n"), 1);
        assert_eq!(documents("# a comment\n---\nkind: A\n"), 1);
        assert_eq!(documents("kind: A\n---\nkind: B\n"), 2);
        assert_eq!(documents("---\nkind: A\n---\n# nothing\n---\n"), 1);
        assert_eq!(documents(""), 0);
    }

    #[tokio::test]
    async fn a_file_of_two_objects_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let text = "kind: A\nmetadata: {name: a}\n---\nkind: B\nmetadata: {name: b}\n";
        std::fs::write(dir.path().join("two.yaml"), text).unwrap();
        let from = SourceLocation::new("two.yaml", 1);
        let e = rewrite(dir.path(), &from, "a", "kind: A\n".into()).await.unwrap_err();
        assert!(e.to_string().contains("two.yaml:1"), "{e}");
        let key = ObjectKey::new("A", "default", "a");
        assert!(remove(dir.path(), &from, &key).await.is_err());
        assert_eq!(std::fs::read_to_string(dir.path().join("two.yaml")).unwrap(), text);
        std::fs::write(dir.path().join("one.yaml"), "kind: A\n").unwrap();
        let one = SourceLocation::new("one.yaml", 1);
        rewrite(dir.path(), &one, "a", "kind: A\nspec: {}\n".into()).await.unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("one.yaml")).unwrap(), "kind: A\nspec: {}\n");
        remove(dir.path(), &one, &key).await.unwrap();
        assert!(!dir.path().join("one.yaml").exists());
        assert!(rewrite(dir.path(), &SourceLocation::new("../x.yaml", 1), "a", String::new()).await.is_err());
    }
}
