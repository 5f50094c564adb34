//! The directory walk: which paths count (`*.yaml`, `*.yml`; not hidden, not editor leftovers), and finding the files at or under a path (blocking; run on the blocking pool).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::read::{FileRead, read_file};

/// True for `file` at or under the relative directory `rel` (`""` is the root).
pub(super) fn is_under(file: &str, rel: &str) -> bool {
    rel.is_empty() || file == rel || (file.starts_with(rel) && file.as_bytes().get(rel.len()) == Some(&b'/'))
}

/// Names that never count, whether file or directory: hidden ones and editor leftovers.
fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with('~') || [".swp", ".swo", ".swx"].iter().any(|s| name.ends_with(s))
}

/// True when some component of the relative path is ignored.
pub(super) fn is_ignored_rel(rel: &str) -> bool {
    !rel.is_empty() && rel.split('/').any(is_ignored_name)
}

fn is_resource_name(name: &str) -> bool {
    !is_ignored_name(name) && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

fn join_rel(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

/// Reads what is at or under each of `rels`: the files found on disk plus the `known` ones
/// (which read as `Missing` when they are gone). Files under a directory that cannot be listed
/// are left out, so that the cache keeps them.
pub(super) fn gather(
    dir: &Path,
    rels: &[String],
    known: Vec<String>,
    hashes: &HashMap<String, (u64, u64)>,
    cluster_scoped: &BTreeSet<String>,
) -> Vec<(String, FileRead)> {
    let mut candidates: BTreeSet<String> = known.into_iter().collect();
    let mut unreadable: Vec<String> = Vec::new();
    for rel in rels {
        let abs = if rel.is_empty() { dir.to_path_buf() } else { dir.join(rel) };
        let meta = if rel.is_empty() { std::fs::metadata(&abs) } else { std::fs::symlink_metadata(&abs) };
        match meta {
            Ok(m) if m.is_dir() => walk(&abs, rel, &mut candidates, &mut unreadable),
            Ok(m) if m.file_type().is_symlink() => {
                // A link counts unless it leads to a directory (not followed): a dangling or
                // looping one is read, and reported, as a file that cannot be read.
                if !leads_to_dir(&abs) && rel.rsplit('/').next().is_some_and(is_resource_name) {
                    candidates.insert(rel.clone());
                }
            }
            Ok(_) => {
                if rel.rsplit('/').next().is_some_and(is_resource_name) {
                    candidates.insert(rel.clone());
                }
            }
            Err(e) if is_gone(&e) => {}
            Err(e) => {
                tracing::warn!(path = %abs.display(), "cannot inspect: {e}");
                if rel.rsplit('/').next().is_some_and(is_resource_name) {
                    candidates.insert(rel.clone());
                } else {
                    unreadable.push(rel.clone());
                }
            }
        }
    }
    let files: Vec<String> = candidates.into_iter().filter(|c| !unreadable.iter().any(|u| is_under(c, u))).collect();
    let read = |rel: String| {
        let read = read_file(&dir.join(&rel), &rel, hashes.get(&rel).copied(), cluster_scoped);
        (rel, read)
    };
    // Parsing is most of a scan's time: a large one is shared among the cores, in runs of
    // consecutive files whose results are joined in order.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(files.len() / PARALLEL_MIN);
    if threads < 2 {
        return files.into_iter().map(read).collect();
    }
    let per_thread = files.len().div_ceil(threads);
    let mut files = files.into_iter();
    let runs: Vec<Vec<String>> = (0..threads).map(|_| files.by_ref().take(per_thread).collect()).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            runs.into_iter().map(|run| scope.spawn(move || run.into_iter().map(read).collect::<Vec<_>>())).collect();
        // A read never panics (a parser panic is the file's problem), so a join fails only if
        // the thread could not finish at all; its files then read as unchanged, keeping the cache.
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

/// The fewest files per thread worth a thread of its own in [`gather`].
const PARALLEL_MIN: usize = 64;

/// Collects the resource files under `abs` (whose relative path is `rel`).
fn walk(abs: &Path, rel: &str, out: &mut BTreeSet<String>, unreadable: &mut Vec<String>) {
    let mut stack = vec![(abs.to_path_buf(), rel.to_string())];
    while let Some((dir_abs, dir_rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir_abs) {
            Ok(e) => e,
            Err(e) if is_gone(&e) => continue,
            Err(e) => {
                tracing::warn!(dir = %dir_abs.display(), "cannot list the directory; keeping what was read from it: {e}");
                unreadable.push(dir_rel);
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(dir = %dir_abs.display(), "cannot list the directory; keeping what was read from it: {e}");
                    unreadable.push(dir_rel.clone());
                    break;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                tracing::warn!(path = %entry.path().display(), "ignoring a name that is not UTF-8");
                continue;
            };
            if is_ignored_name(name) {
                continue;
            }
            let child_rel = join_rel(&dir_rel, name);
            let Ok(ty) = entry.file_type() else { continue };
            if ty.is_dir() {
                stack.push((entry.path(), child_rel));
            } else if is_resource_name(name) && (!ty.is_symlink() || !leads_to_dir(&entry.path())) {
                // Anything but a directory, links followed: read_file reports what is not a
                // regular file, and a link that dangles or loops.
                out.insert(child_rel);
            }
        }
    }
}

/// True when the link at `abs` leads to a directory (which is not followed).
fn leads_to_dir(abs: &Path) -> bool {
    std::fs::metadata(abs).is_ok_and(|m| m.is_dir())
}

/// The path does not exist (any more), or a component of it is not a directory any more.
pub(super) fn is_gone(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::super::FsSource;
    use super::super::test_support::*;
    use super::{is_ignored_rel, is_under};

    #[test]
    fn which_paths_count() {
        assert!(is_under("a/b.yaml", "a") && is_under("a", "a") && is_under("x", ""));
        assert!(!is_under("ab/c.yaml", "a") && !is_under("a.yaml", "a"));
        assert!(is_ignored_rel("a/.git/x.yaml") && is_ignored_rel("a.yaml~") && is_ignored_rel("d/.a.yaml.swp"));
        assert!(!is_ignored_rel("a/b.yaml") && !is_ignored_rel(""));
    }

    #[tokio::test]
    async fn only_yaml_files_count_and_hidden_or_editor_files_are_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "a.yaml", &doc("K", "a", "v: 1"));
        write(dir, "b.yml", &doc("K", "b", "v: 1"));
        write(dir, "c.json", &doc("K", "c", "v: 1"));
        write(dir, "README.md", "# not yaml: [\n");
        write(dir, ".hidden.yaml", &doc("K", "d", "v: 1"));
        write(dir, ".git/x.yaml", &doc("K", "e", "v: 1"));
        write(dir, "a.yaml~", &doc("K", "f", "v: 1"));
        write(dir, ".a.yaml.swp", "binary junk [");
        write(dir, "x.yaml.swp", "binary junk [");
        write(dir, "nested/deeper/g.yaml", &doc("K", "g", "v: 1"));
        std::fs::create_dir_all(dir.join("dir.yaml")).unwrap();
        write(dir, "dir.yaml/h.yaml", &doc("K", "h", "v: 1"));
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;
        let names: Vec<String> = src.keys().into_iter().map(|k| k.name().to_string()).collect();
        assert_eq!(names, ["a", "b", "g", "h"]);
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        assert_eq!(src.get(&key("K", "default", "g")).unwrap().location.file, "nested/deeper/g.yaml");
        // Ignored and outside paths are refused by reload_file too.
        assert_eq!(src.reload_file(&dir.join(".hidden.yaml")).await, vec![]);
        assert_eq!(src.reload_file(Path::new("/somewhere/else.yaml")).await, vec![]);
        assert_eq!(src.reload_file(Path::new("../escape.yaml")).await, vec![]);
        assert_eq!(src.reload_file(Path::new("no-such.yaml")).await, vec![]);
    }

    #[tokio::test]
    async fn dangling_and_looping_links_are_problems_naming_their_path_and_links_to_files_count() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let elsewhere = tempfile::tempdir().unwrap();
        write(elsewhere.path(), "a.yaml", &doc("K", "a", "v: 1"));
        symlink(elsewhere.path().join("a.yaml"), dir.join("linked.yaml")).unwrap();
        std::fs::create_dir_all(dir.join("nested")).unwrap();
        symlink(elsewhere.path().join("gone.yaml"), dir.join("nested/dangling.yaml")).unwrap();
        symlink("loop.yaml", dir.join("loop.yaml")).unwrap();
        symlink(elsewhere.path(), dir.join("dir-link.yaml")).unwrap();
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;
        let mut problems: Vec<(String, String)> = src.problems().into_iter().map(|p| (p.file, p.message)).collect();
        problems.sort();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].0, "loop.yaml");
        assert!(problems[0].1.contains("loops"), "{problems:?}");
        assert_eq!(problems[1].0, "nested/dangling.yaml");
        // Named without the host's path, as every problem is.
        assert!(problems[1].1.starts_with("a symbolic link to `gone.yaml`, which does not exist"), "{problems:?}");
        // The link to a file is read; the one to a directory is not followed.
        let names: Vec<String> = src.keys().into_iter().map(|k| k.name().to_string()).collect();
        assert_eq!(names, ["a"]);
        // Repaired: the problem goes at the next read of the link.
        write(elsewhere.path(), "gone.yaml", &doc("K", "g", "v: 1"));
        src.reload_file(&dir.join("nested/dangling.yaml")).await;
        assert!(src.problems().iter().all(|p| p.file != "nested/dangling.yaml"), "{:?}", src.problems());
        assert!(src.keys().iter().any(|k| k.name() == "g"));
    }
}
