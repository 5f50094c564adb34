//! The cache: the objects the files define, how a batch of file reads changes it, generations, and conflicts (one name defined in two files).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use steward_sdk::RawObject;

use super::document::Doc;
use super::read::FileRead;
use super::{FileProblem, SourceEvent, SourceObject};
use crate::model::{Name, ObjectKey, SourceLocation};

/// What a file held at its last read.
#[derive(Debug, Default)]
pub(super) struct FileState {
    /// The file's relative path, shared by the objects it defines.
    pub(super) path: Name,
    /// The documents of the last good read (empty if it never parsed).
    pub(super) docs: Vec<Doc>,
    /// Why the last read failed, if it did.
    pub(super) error: Option<FileProblem>,
    /// (length, hash) of the bytes last read, to skip parsing the same bytes again.
    pub(super) content: Option<(u64, u64)>,
    /// How many of the last `docs` are held from before a read of the file while it was being
    /// written, which lacked them (or could not trust its last one): they keep their objects
    /// until the quiet read, but yield to a definition that another file has.
    held: usize,
}

/// Everything the source knows: per file what it held, the objects, and the problems.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Every file read at least once (successfully or not), by relative path.
    pub(super) files: BTreeMap<String, FileState>,
    /// The objects, each from the one file that owns its key: where its document is, not a
    /// copy of it (the file's documents are the only copy of each spec the source keeps).
    pub(super) objects: BTreeMap<ObjectKey, Owned>,
    /// (generation, spec hash) of keys not present now: seeded by the host, added on deletes.
    pub(super) known: HashMap<ObjectKey, (u64, u64)>,
    /// The problems of each file (parse errors, then conflicts), sorted by position.
    pub(super) problems: BTreeMap<String, Vec<FileProblem>>,
    /// What is wrong around each object that has a problem.
    pub(super) object_problems: HashMap<ObjectKey, String>,
    /// The files defining each key (a file defines a key at most once), kept in step with `files`
    /// so that a change costs what it touches, not what the directory holds.
    index: HashMap<ObjectKey, Files>,
    /// Keys defined in more than one file.
    multi: BTreeSet<ObjectKey>,
    /// Files whose last read failed.
    errored: BTreeSet<String>,
}

/// Where an object's definition is, and the generation the cache counts for it.
#[derive(Clone, Debug)]
pub(super) struct Owned {
    /// The file that owns the key (its [`FileState::path`]).
    file: Name,
    /// The index of the object's document in that file's documents.
    doc: usize,
    /// The object's generation.
    generation: u64,
}

impl State {
    /// The object with this key, built from its document.
    pub(super) fn object(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.objects.get(key).and_then(|o| self.object_of(o))
    }

    /// The generation of the object with this key.
    pub(super) fn generation(&self, key: &ObjectKey) -> Option<u64> {
        self.objects.get(key).map(|o| o.generation)
    }

    /// The object `o` points at.
    pub(super) fn object_of(&self, o: &Owned) -> Option<SourceObject> {
        let doc = self.files.get(&*o.file)?.docs.get(o.doc)?;
        Some(make_object(&o.file, doc, o.generation))
    }

    /// An empty cache that knows the generations and spec hashes the host persisted.
    pub(super) fn with_known(known: HashMap<ObjectKey, (u64, u64)>) -> Self {
        Self { known, ..Self::default() }
    }

    /// Drops the generation kept for `key` while it is absent; nothing if it is present.
    pub(super) fn forget(&mut self, key: &ObjectKey) {
        if !self.objects.contains_key(key) {
            self.known.remove(key);
        }
    }

    /// Forgets the bytes last read of every file, so that the next read parses each again.
    pub(super) fn forget_contents(&mut self) {
        for f in self.files.values_mut() {
            f.content = None;
        }
    }

    fn index_add(&mut self, key: &ObjectKey, file: &Name) {
        match self.index.get_mut(key) {
            None => drop(self.index.insert(key.clone(), Files::One(file.clone()))),
            Some(files) => {
                if files.insert(file) > 1 {
                    self.multi.insert(key.clone());
                }
            }
        }
    }

    fn index_remove(&mut self, key: &ObjectKey, file: &str) {
        if let Some(files) = self.index.get_mut(key) {
            match files.remove(file) {
                0 => {
                    self.index.remove(key);
                    self.multi.remove(key);
                }
                1 => {
                    self.multi.remove(key);
                }
                _ => {}
            }
        }
    }
}

/// The files defining one key, sorted by path. Almost every key lives in one file: that one is
/// kept inline, without the allocation (or a set's node) that would cost more than the key.
#[derive(Debug)]
enum Files {
    One(Name),
    Many(Vec<Name>),
}

impl Files {
    /// The files, sorted.
    fn as_slice(&self) -> &[Name] {
        match self {
            Files::One(f) => std::slice::from_ref(f),
            Files::Many(v) => v,
        }
    }

    /// Adds `file` if missing; returns how many files there are now.
    fn insert(&mut self, file: &Name) -> usize {
        let mut all = self.as_slice().to_vec();
        if let Err(at) = all.binary_search_by(|f| f.as_str().cmp(file)) {
            all.insert(at, file.clone());
            *self = Files::Many(all);
        }
        self.as_slice().len()
    }

    /// Removes `file` if present; returns how many files are left (at least one is kept inline).
    fn remove(&mut self, file: &str) -> usize {
        match self {
            Files::One(f) => usize::from(f.as_str() != file),
            Files::Many(v) => {
                if let Ok(at) = v.binary_search_by(|f| f.as_str().cmp(file)) {
                    v.remove(at);
                }
                if let [only] = v.as_slice() {
                    *self = Files::One(only.clone());
                    return 1;
                }
                v.len()
            }
        }
    }
}

/// A definition of a key in a file.
struct Def<'a> {
    file: &'a Name,
    /// The index of `doc` in the file's documents.
    at: usize,
    doc: &'a Doc,
}

impl State {
    /// Applies a batch of file reads in one step and pushes every difference to `out`: objects
    /// changed or gone, files whose problems changed. The file that had a key first keeps it;
    /// when it loses the key, the first other file in path order takes over. Generations go on
    /// from what the cache (or the host, through `known`) had, bumped only by a spec change.
    ///
    /// A file of `busy` is still being written, and its read may have caught it truncated or
    /// half-written: the documents it no longer has are kept (and the bytes not remembered), so
    /// that no object is deleted until a read once the file is quiet says so (a kept document
    /// yields to another file's definition of its key, so one moved out is no conflict); a busy
    /// file that does not parse is left as it was until then. Only its documents that a document
    /// marker follows are taken: the last one may be cut mid-value, so it neither adds nor
    /// changes an object before the quiet read.
    pub(super) fn apply(&mut self, updates: Vec<(String, FileRead)>, busy: &[String], out: &mut Vec<SourceEvent>) {
        let mut affected = BTreeSet::new();
        // The documents files held before this batch replaced or removed them: the objects
        // still point there until each is looked at below.
        let mut retired: HashMap<String, Vec<Doc>> = HashMap::new();
        for (rel, read) in updates {
            match read {
                FileRead::Unchanged => {}
                FileRead::Missing => {
                    self.errored.remove(&rel);
                    if let Some(f) = self.files.remove(&rel) {
                        for d in &f.docs {
                            self.index_remove(&d.key, &rel);
                        }
                        affected.extend(f.docs.iter().map(|d| d.key.clone()));
                        retired.entry(rel).or_insert(f.docs);
                    }
                }
                // Likely caught half-written: the read once quiet reports what is wrong, if anything.
                FileRead::Failed { .. } if busy.contains(&rel) => {}
                FileRead::Failed { problem, content } => {
                    self.errored.insert(rel.clone());
                    let f = self.files.entry(rel).or_default();
                    f.error = Some(problem);
                    f.content = content;
                }
                FileRead::Parsed { mut docs, content, last_open } => {
                    self.errored.remove(&rel);
                    let f = self.files.entry(rel.clone()).or_default();
                    if f.path.is_empty() {
                        f.path = Name::from(rel.as_str());
                    }
                    let path = f.path.clone();
                    let old = std::mem::take(&mut f.docs);
                    let mut content = Some(content);
                    let mut held = 0;
                    if busy.contains(&rel) {
                        // Its last document may be cut anywhere, even mid-value into another
                        // valid value (`name: serv` of `name: server-1`): it is held back, the
                        // version before (if any) kept, until the quiet read.
                        if last_open {
                            docs.pop();
                            content = None;
                        }
                        let kept: Vec<Doc> =
                            old.iter().filter(|o| !docs.iter().any(|d| d.key == o.key)).cloned().collect();
                        if !kept.is_empty() {
                            held = kept.len();
                            docs.extend(kept);
                            // The same bytes read once quiet must be parsed again, not skipped.
                            content = None;
                        }
                    }
                    for d in &old {
                        self.index_remove(&d.key, &rel);
                    }
                    for d in &docs {
                        self.index_add(&d.key, &path);
                    }
                    affected.extend(old.iter().map(|d| d.key.clone()));
                    affected.extend(docs.iter().map(|d| d.key.clone()));
                    retired.entry(rel.clone()).or_insert(old);
                    let f = self.files.entry(rel).or_default();
                    f.docs = docs;
                    f.held = held;
                    f.error = None;
                    f.content = content;
                }
            }
        }

        let State { files, objects, known, problems, object_problems, index, multi, errored } = self;
        // Every definition of a key, files in path order; one held from before a read of a file
        // still being written counts only if no file has another (the document moved there).
        let defs = |key: &ObjectKey| -> Vec<Def<'_>> {
            let Some(in_files) = index.get(key) else { return Vec::new() };
            let mut all: Vec<(Def<'_>, bool)> = in_files
                .as_slice()
                .iter()
                .filter_map(|file| {
                    let f = files.get(file.as_str())?;
                    let at = f.docs.iter().position(|d| d.key == *key)?;
                    Some((Def { file: &f.path, at, doc: &f.docs[at] }, at >= f.docs.len().saturating_sub(f.held)))
                })
                .collect();
            if all.iter().any(|(_, held)| !held) {
                all.retain(|(_, held)| !held);
            }
            all.into_iter().map(|(d, _)| d).collect()
        };

        // The document an object pointed at before this batch.
        let before = |o: &Owned| -> Option<&Doc> {
            match retired.get(&*o.file) {
                Some(docs) => docs.get(o.doc),
                None => files.get(&*o.file)?.docs.get(o.doc),
            }
        };
        for key in &affected {
            let here = defs(key);
            let owner = match objects.get(key) {
                Some(o) if here.iter().any(|d| **d.file == *o.file) => here.iter().find(|d| **d.file == *o.file),
                _ => here.first(),
            };
            let Some(def) = owner else {
                if let Some(gone) = objects.remove(key) {
                    // Remembered so that the key keeps counting generations if it comes back.
                    let hash = before(&gone).map_or(0, |d| d.spec_hash);
                    known.insert(key.clone(), (gone.generation, hash));
                    out.push(SourceEvent::Deleted(key.clone()));
                }
                continue;
            };
            let doc = def.doc;
            let prev = objects.get(key).and_then(|o| Some((o, before(o)?)));
            let generation = match prev {
                Some((o, p)) if p.spec_hash == doc.spec_hash => o.generation,
                Some((o, _)) => o.generation.saturating_add(1),
                None => match known.get(key) {
                    Some(&(g, h)) if h == doc.spec_hash => g.max(1),
                    Some(&(g, _)) => g.saturating_add(1),
                    None => 1,
                },
            };
            let changed = match prev {
                None => true,
                Some((o, p)) => {
                    p.spec_hash != doc.spec_hash
                        || p.spec != doc.spec
                        || p.api_version != doc.api_version
                        || p.labels != doc.labels
                        || p.annotations != doc.annotations
                        || p.warnings != doc.warnings
                        || o.file != *def.file
                }
            };
            let owned = Owned { file: def.file.clone(), doc: def.at, generation };
            match objects.get_mut(key) {
                Some(o) => *o = owned,
                None => {
                    objects.insert(key.clone(), owned);
                }
            }
            // A present object's generation lives in `objects`; `known` holds only absent keys.
            known.remove(key);
            if changed {
                out.push(SourceEvent::Changed(key.clone()));
            }
        }
        // Seeded with every key the store has, `known` is nearly empty after the first scan; a
        // map keeps its room, which at a million keys is tens of MiB.
        if known.capacity() > 64 && known.len() < known.capacity() / 4 {
            known.shrink_to(known.len() * 2);
        }

        // Problems are derived from scratch: file errors, then conflicts.
        let mut new_problems: BTreeMap<String, Vec<FileProblem>> = BTreeMap::new();
        let mut new_object_problems: HashMap<ObjectKey, String> = HashMap::new();
        for (file, f) in errored.iter().filter_map(|file| files.get_key_value(file)) {
            if let Some(e) = &f.error {
                new_problems.entry(file.clone()).or_default().push(e.clone());
                for doc in &f.docs {
                    if objects.get(&doc.key).is_some_and(|o| *o.file == **file) {
                        new_object_problems.insert(
                            doc.key.clone(),
                            format!("{e} (the last good version of {} from this file is used)", doc.key),
                        );
                    }
                }
            }
        }
        for key in multi.iter() {
            let here = defs(key);
            if here.len() < 2 {
                continue;
            }
            let Some(owner) = objects.get(key).and_then(|o| here.iter().find(|d| **d.file == *o.file)) else {
                continue;
            };
            let at = |d: &Def<'_>| SourceLocation::new(&**d.file, u64::from(d.doc.line)).to_string();
            let others: Vec<String> = here.iter().filter(|d| d.file != owner.file).map(at).collect();
            for d in here.iter() {
                let message = if d.file == owner.file {
                    format!("{key} is also defined in {}; the definition here is used", others.join(", "))
                } else {
                    format!("{key} is already defined in {}; this definition is ignored", at(owner))
                };
                new_problems.entry(d.file.to_string()).or_default().push(FileProblem {
                    file: d.file.to_string(),
                    line: d.doc.name_line.or(Some(d.doc.line)).map(u64::from),
                    column: d.doc.name_column.map(u64::from),
                    message,
                });
            }
            let conflict =
                format!("{key} is defined in more than one file: {} is used, {} ignored", at(owner), others.join(", "));
            new_object_problems.entry(key.clone()).and_modify(|m| *m = format!("{conflict}; {m}")).or_insert(conflict);
        }
        for list in new_problems.values_mut() {
            list.sort_by(|a, b| (a.line, a.column, &a.message).cmp(&(b.line, b.column, &b.message)));
            list.dedup();
        }

        let all_files: BTreeSet<&String> = problems.keys().chain(new_problems.keys()).collect();
        for file in all_files {
            let (before, after) = (problems.get(file), new_problems.get(file));
            if before != after {
                out.push(match after {
                    Some(_) => SourceEvent::FileProblem { file: file.clone() },
                    None => SourceEvent::FileOk { file: file.clone() },
                });
            }
        }
        *problems = new_problems;
        *object_problems = new_object_problems;
    }
}

fn make_object(file: &Name, doc: &Doc, generation: u64) -> SourceObject {
    SourceObject {
        raw: RawObject {
            api_version: doc.api_version.to_string(),
            kind: doc.key.kind().to_string(),
            name: doc.key.name().to_string(),
            namespace: doc.key.namespace().to_string(),
            generation,
            labels: doc.labels.clone(),
            annotations: doc.annotations.clone(),
            spec: doc.spec.clone(),
            status: None,
            deleting: false,
        },
        location: SourceLocation::new(file, u64::from(doc.line)),
        spec_hash: doc.spec_hash,
        warnings: doc.warnings.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::super::FsSource;
    use super::super::test_support::*;
    use super::Files;
    use crate::model::Name;

    #[test]
    fn the_files_of_a_key_stay_sorted_and_one_file_is_kept_inline() {
        let names = |f: &Files| f.as_slice().iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut f = Files::One(Name::from("b.yaml"));
        assert_eq!(f.insert(&Name::from("b.yaml")), 1, "a file already there is not added twice");
        assert!(matches!(f, Files::One(_)));
        assert_eq!(f.insert(&Name::from("c.yaml")), 2);
        assert_eq!(f.insert(&Name::from("a.yaml")), 3);
        assert_eq!(names(&f), ["a.yaml", "b.yaml", "c.yaml"]);
        assert_eq!(f.remove("b.yaml"), 2);
        assert_eq!(f.remove("x.yaml"), 2, "removing a file that is not there changes nothing");
        assert_eq!(f.remove("a.yaml"), 1);
        assert!(matches!(f, Files::One(_)), "back to one file: inline again");
        assert_eq!(names(&f), ["c.yaml"]);
        assert_eq!(f.remove("c.yaml"), 0);
    }

    #[tokio::test]
    async fn generation_bumps_only_when_the_spec_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("MCPServer", "default", "git");
        write(dir, "a.yaml", "apiVersion: v1\nkind: MCPServer\nmetadata: {name: git}\nspec: {a: 1, b: [1, 2]}\n");
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await, vec![changed(&k)]);
        let first = src.get(&k).unwrap();
        assert_eq!(first.raw.generation, 1);

        // Same content, other key order and layout: no event, same hash.
        write(
            dir,
            "a.yaml",
            "# reformatted\napiVersion: v1\nkind: MCPServer\nmetadata:\n  name: git\nspec:\n  b:\n    - 1\n    - 2\n  a: 1\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![]);
        assert_eq!(src.get(&k).unwrap().spec_hash, first.spec_hash);
        assert_eq!(src.get(&k).unwrap().location.line, 2, "the line follows the document");

        // Labels: Changed, same generation.
        write(
            dir,
            "a.yaml",
            "apiVersion: v1\nkind: MCPServer\nmetadata: {name: git, labels: {x: y}}\nspec: {a: 1, b: [1, 2]}\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
        // apiVersion: Changed, same generation.
        write(
            dir,
            "a.yaml",
            "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git, labels: {x: y}}\nspec: {a: 1, b: [1, 2]}\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
        // Spec: Changed, generation + 1.
        write(
            dir,
            "a.yaml",
            "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git, labels: {x: y}}\nspec: {a: 2, b: [1, 2]}\n",
        );
        assert_eq!(src.reload_file(&dir.join("a.yaml")).await, vec![changed(&k)]);
        let o = src.get(&k).unwrap();
        assert_eq!(o.raw.generation, 2);
        assert_ne!(o.spec_hash, first.spec_hash);

        // Deleted and re-created: the generation goes on instead of going back.
        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        assert_eq!(src.scan().await, vec![deleted(&k)]);
        write(dir, "b.yaml", "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git}\nspec: {a: 3}\n");
        assert_eq!(src.scan().await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 3);

        // Forgetting a key a file defines changes nothing.
        src.forget(&k);
        assert_eq!(src.get(&k).unwrap().raw.generation, 3);
        // Deleted, then let go by the host (finalized, its record removed): nothing is kept
        // for the name, and an object of that name created later is a new one, at 1.
        std::fs::remove_file(dir.join("b.yaml")).unwrap();
        assert_eq!(src.scan().await, vec![deleted(&k)]);
        assert_eq!(src.read().known.len(), 1, "kept while the host may still finalize it");
        src.forget(&k);
        assert!(src.read().known.is_empty());
        write(dir, "c.yaml", "apiVersion: v2\nkind: MCPServer\nmetadata: {name: git}\nspec: {a: 4}\n");
        assert_eq!(src.scan().await, vec![changed(&k)]);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
    }

    #[tokio::test]
    async fn generations_are_preserved_from_what_the_host_knows() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(
            dir,
            "a.yaml",
            &[doc("Kind", "same", "x: 1"), doc("Kind", "edited", "x: 1"), doc("Kind", "new", "x: 1")].join("---\n"),
        );
        // What a first run computed is what the host persisted.
        let first = FsSource::new(opts(dir), HashMap::new());
        first.scan().await;
        let hash = first.get(&key("Kind", "default", "same")).unwrap().spec_hash;
        let known = HashMap::from([
            (key("Kind", "default", "same"), (7, hash)),
            (key("Kind", "default", "edited"), (4, hash ^ 1)),
            (key("Kind", "default", "gone"), (9, 1)),
        ]);
        let src = FsSource::new(opts(dir), known);
        let events = src.scan().await;
        assert_eq!(events.len(), 3, "every object is reported and nothing is deleted: {events:?}");
        let generation = |n: &str| src.get(&key("Kind", "default", n)).unwrap().raw.generation;
        assert_eq!(generation("same"), 7);
        assert_eq!(generation("edited"), 5);
        assert_eq!(generation("new"), 1);
    }

    #[tokio::test]
    async fn a_broken_file_keeps_its_last_good_objects_and_recovers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, b) = (key("K", "default", "a"), key("K", "default", "b"));
        write(dir, "f.yaml", &format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "b", "v: 1")));
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await.len(), 2);

        // A syntax error on line 4, column 9: nothing changes in the cache.
        write(dir, "f.yaml", "apiVersion: v1\nkind: K\nmetadata:\n  name: [a\nspec: {v: 2}\n");
        assert_eq!(src.reload_file(Path::new("f.yaml")).await, vec![file_problem("f.yaml")]);
        assert_eq!(src.len(), 2);
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 1}));
        let problems = src.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert_eq!((p.file.as_str(), p.line.is_some(), p.column.is_some()), ("f.yaml", true, true), "{p:?}");
        assert!(p.line.unwrap() >= 4, "{p:?}");
        assert!(p.to_string().starts_with(&format!("f.yaml:{}:{}: ", p.line.unwrap(), p.column.unwrap())), "{p}");
        assert!(!p.message.starts_with("error:"), "the position is not repeated: {p}");
        assert!(src.object_problem(&a).unwrap().contains("last good version"), "{:?}", src.object_problem(&a));
        // The same broken bytes again: nothing new to say.
        assert_eq!(src.scan().await, vec![]);

        // A different error: the problem is reported again, with its own position.
        write(
            dir,
            "f.yaml",
            &format!("{}---\napiVersion: v1\nkind: K\nmetadata:\n  name: Bad_Name\n", doc("K", "a", "v: 2")),
        );
        assert_eq!(src.reload_file(Path::new("f.yaml")).await, vec![file_problem("f.yaml")]);
        let p = src.problems().remove(0);
        assert_eq!((p.line, p.column), (Some(11), Some(9)), "{p}");
        assert!(p.message.contains("metadata.name \"Bad_Name\""), "{p}");
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 1}), "still the last good version");

        // Fixed, with `b` removed and `a` edited: the problem clears and the differences come.
        write(dir, "f.yaml", &doc("K", "a", "v: 2"));
        let events = src.reload_file(&dir.join("f.yaml")).await;
        assert_eq!(set(&events), set(&[changed(&a), deleted(&b), file_ok("f.yaml")]));
        assert!(src.problems().is_empty());
        assert_eq!(src.object_problem(&a), None);
        assert_eq!(src.get(&a).unwrap().raw.generation, 2);
    }

    #[tokio::test]
    async fn a_file_broken_at_its_first_read_contributes_nothing_until_fixed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "ok.yaml", &doc("K", "ok", "v: 1"));
        write(dir, "bad.yaml", &format!("{}---\nkind: K\nmetadata: {{name: x}}\n", doc("K", "good-part", "v: 1")));
        let src = FsSource::new(opts(dir), HashMap::new());
        let events = src.scan().await;
        assert_eq!(set(&events), set(&[changed(&key("K", "default", "ok")), file_problem("bad.yaml")]));
        assert_eq!(src.keys(), vec![key("K", "default", "ok")]);
        let p = src.problems().remove(0);
        assert_eq!(p.to_string(), "bad.yaml:8:1: apiVersion is missing");
        assert_eq!(src.files(), vec!["bad.yaml".to_string(), "ok.yaml".to_string()]);

        // Deleting a broken file clears its problem.
        std::fs::remove_file(dir.join("bad.yaml")).unwrap();
        assert_eq!(src.scan().await, vec![file_ok("bad.yaml")]);
        assert!(src.problems().is_empty());
    }

    #[tokio::test]
    async fn a_name_conflict_is_reported_on_both_files_and_cleared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("K", "default", "x");
        write(dir, "b.yaml", &doc("K", "x", "from: b"));
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;

        // a.yaml sorts first but b.yaml had the object first: b.yaml keeps it.
        write(dir, "a.yaml", &format!("{}---\n{}", doc("K", "other", "v: 1"), doc("K", "x", "from: a")));
        let events = src.scan().await;
        assert_eq!(
            set(&events),
            set(&[changed(&key("K", "default", "other")), file_problem("a.yaml"), file_problem("b.yaml")])
        );
        assert_eq!(src.get(&k).unwrap().location.file, "b.yaml");
        assert_eq!(spec_of(&src, &k), serde_json::json!({"from": "b"}));
        let problems: Vec<String> = src.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "a.yaml:11:9: K/default/x is already defined in b.yaml:1; this definition is ignored",
                "b.yaml:4:9: K/default/x is also defined in a.yaml:8; the definition here is used",
            ]
        );
        let op = src.object_problem(&k).unwrap();
        assert!(op.contains("b.yaml:1 is used") && op.contains("a.yaml:8"), "{op}");
        assert_eq!(src.object_problem(&key("K", "default", "other")), None);

        // Editing the ignored definition changes nothing.
        write(dir, "a.yaml", &format!("{}---\n{}", doc("K", "other", "v: 1"), doc("K", "x", "from: a2")));
        assert_eq!(src.reload_file(Path::new("a.yaml")).await, vec![]);
        assert_eq!(spec_of(&src, &k), serde_json::json!({"from": "b"}));

        // The conflict goes away: both problems clear, the object stays.
        write(dir, "a.yaml", &doc("K", "other", "v: 1"));
        let events = src.reload_file(Path::new("a.yaml")).await;
        assert_eq!(set(&events), set(&[file_ok("a.yaml"), file_ok("b.yaml")]));
        assert!(src.problems().is_empty());
        assert_eq!(src.object_problem(&k), None);
        assert_eq!(src.get(&k).unwrap().raw.generation, 1);
    }

    #[tokio::test]
    async fn when_both_are_new_the_first_path_wins_and_the_other_takes_over_after_a_delete() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("K", "default", "x");
        write(dir, "b.yaml", &doc("K", "x", "from: b"));
        write(dir, "a/z.yaml", &doc("K", "x", "from: a/z"));
        write(dir, "a.yaml", &doc("K", "x", "from: a"));
        let src = FsSource::new(opts(dir), HashMap::new());
        let events = src.scan().await;
        assert_eq!(
            set(&events),
            set(&[changed(&k), file_problem("a.yaml"), file_problem("a/z.yaml"), file_problem("b.yaml")])
        );
        assert_eq!(src.get(&k).unwrap().location.file, "a.yaml");
        assert!(src.file_problems("a.yaml")[0].message.contains("a/z.yaml:1, b.yaml:1"), "{:?}", src.problems());

        // The winner is deleted: the next file takes over, no Deleted.
        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        let events = src.scan().await;
        assert_eq!(
            set(&events),
            set(&[changed(&k), file_ok("a.yaml"), file_problem("a/z.yaml"), file_problem("b.yaml")])
        );
        let o = src.get(&k).unwrap();
        assert_eq!((o.location.file.as_str(), o.raw.generation), ("a/z.yaml", 2));
        std::fs::remove_file(dir.join("a/z.yaml")).unwrap();
        let events = src.scan().await;
        assert_eq!(set(&events), set(&[changed(&k), file_ok("a/z.yaml"), file_ok("b.yaml")]));
        assert_eq!(spec_of(&src, &k), serde_json::json!({"from": "b"}));
    }

    #[tokio::test]
    async fn deleting_a_file_or_removing_a_document_deletes_its_objects() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, b, c) = (key("K", "default", "a"), key("K", "default", "b"), key("K", "default", "c"));
        write(dir, "ab.yaml", &format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "b", "v: 1")));
        write(dir, "sub/c.yaml", &doc("K", "c", "v: 1"));
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await.len(), 3);

        write(dir, "ab.yaml", &doc("K", "a", "v: 1"));
        assert_eq!(src.reload_file(Path::new("ab.yaml")).await, vec![deleted(&b)]);
        std::fs::remove_file(dir.join("ab.yaml")).unwrap();
        assert_eq!(src.reload_file(Path::new("ab.yaml")).await, vec![deleted(&a)]);
        // A directory replaced by a file, then removed, reloaded by its path.
        std::fs::remove_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub"), "not a directory").unwrap();
        assert_eq!(src.reload_file(&dir.join("sub")).await, vec![deleted(&c)]);
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        std::fs::remove_file(dir.join("sub")).unwrap();
        assert_eq!(src.reload_file(&dir.join("sub")).await, vec![]);
        assert!(src.is_empty());
        assert!(src.files().is_empty());
        // An emptied file defines nothing.
        write(dir, "e.yaml", &doc("K", "e", "v: 1"));
        src.scan().await;
        write(dir, "e.yaml", "# nothing here\n");
        assert_eq!(src.scan().await, vec![deleted(&key("K", "default", "e"))]);
    }

    #[tokio::test]
    async fn a_document_moved_out_of_a_file_still_being_written_is_no_conflict() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (x, y) = (key("K", "default", "x"), key("K", "default", "y"));
        write(dir, "a.yaml", &format!("{}---\n{}", doc("K", "x", "v: 1"), doc("K", "y", "v: 1")));
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await.len(), 2);
        // x moves to b.yaml while a.yaml is still being written without it: the read of a.yaml
        // holds x, but b.yaml has it, so b.yaml's x is the object and no file is in conflict.
        write(dir, "a.yaml", &format!("{}---\n", doc("K", "y", "v: 2")));
        write(dir, "b.yaml", &doc("K", "x", "v: 3"));
        let files = || vec!["a.yaml".to_string(), "b.yaml".to_string()];
        assert_eq!(set(&src.rescan(files(), &["a.yaml".to_string()]).await), set(&[changed(&x), changed(&y)]));
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        assert_eq!(spec_of(&src, &x), serde_json::json!({"v": 3}));
        assert_eq!(src.get(&x).unwrap().location.to_string(), "b.yaml:1");
        // Read quiet, a.yaml lets x go: nothing changes.
        assert_eq!(src.rescan(vec!["a.yaml".to_string()], &[]).await, vec![]);
        // A document only held still keeps its object: y, held by a busy read of an emptied
        // a.yaml, yields to no one and stays until the quiet read.
        write(dir, "a.yaml", "");
        assert_eq!(src.rescan(vec!["a.yaml".to_string()], &["a.yaml".to_string()]).await, vec![]);
        assert_eq!(spec_of(&src, &y), serde_json::json!({"v": 2}));
        assert_eq!(src.rescan(vec!["a.yaml".to_string()], &[]).await, vec![deleted(&y)]);
        assert!(src.get(&x).is_some());
    }

    #[tokio::test]
    async fn a_file_read_while_still_being_written_deletes_nothing_until_it_is_read_quiet() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, b) = (key("K", "default", "a"), key("K", "default", "b"));
        let both = format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "b", "v: 1"));
        write(dir, "ab.yaml", &both);
        let src = FsSource::new(opts(dir), HashMap::new());
        assert_eq!(src.scan().await.len(), 2);
        let busy = || vec!["ab.yaml".to_string()];
        let rel = || vec!["ab.yaml".to_string()];

        // Caught truncated, as a rewrite in place is between its truncation and its write.
        write(dir, "ab.yaml", "");
        assert_eq!(src.rescan(rel(), &busy()).await, vec![]);
        assert!(src.get(&a).is_some() && src.get(&b).is_some());
        // Caught in its first document, cut mid-value (`v: 2` of `v: 25`): nothing follows it, so
        // it changes nothing yet.
        write(dir, "ab.yaml", &doc("K", "a", "v: 2"));
        assert_eq!(src.rescan(rel(), &busy()).await, vec![]);
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 1}));
        // Caught after its first document, the second cut in its name (`b` of `bee`): what
        // a marker closes is taken, the rest waits, and what it lacks is kept. No object `b`...
        let (full, bee) =
            (format!("{}---\n{}", doc("K", "a", "v: 25"), doc("K", "bee", "v: 1")), key("K", "default", "bee"));
        let cut = &full[..full.find("name: bee").unwrap() + "name: b".len()];
        write(dir, "ab.yaml", cut);
        assert_eq!(src.rescan(rel(), &busy()).await, vec![changed(&a)]);
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 25}));
        assert_eq!(spec_of(&src, &b), serde_json::json!({"v": 1}), "b is kept, not replaced");
        assert!(src.get(&bee).is_none());
        // ...until the file, written to its end, is read once quiet: that read is its word.
        write(dir, "ab.yaml", &full);
        assert_eq!(set(&src.rescan(rel(), &[]).await), set(&[deleted(&b), changed(&bee)]));
        assert_eq!(spec_of(&src, &bee), serde_json::json!({"v": 1}));
        assert_eq!(src.rescan(rel(), &[]).await, vec![], "and nothing more");
        // A file that ends with a marker has its last document closed: a busy read takes it (and
        // keeps what it lacks until the quiet read).
        write(dir, "ab.yaml", &format!("{}---\n", doc("K", "a", "v: 3")));
        assert_eq!(src.rescan(rel(), &busy()).await, vec![changed(&a)]);
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 3}));
        assert_eq!(src.rescan(rel(), &[]).await, vec![deleted(&bee)]);

        // Caught in the middle of a document: no problem is reported while it is being written...
        write(dir, "ab.yaml", "apiVersion: steward.dev/v1\nkind: [");
        assert_eq!(src.rescan(rel(), &busy()).await, vec![]);
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        // ...but read quiet, the same bytes are: the last good version is kept and the file named.
        assert_eq!(src.rescan(rel(), &[]).await, vec![file_problem("ab.yaml")]);
        assert_eq!(spec_of(&src, &a), serde_json::json!({"v": 3}));
        // Valid again, even read busy: the problem is over (b, last and open, waits).
        write(dir, "ab.yaml", &both);
        let seen = src.rescan(rel(), &busy()).await;
        assert_eq!(set(&seen), set(&[changed(&a), file_ok("ab.yaml")]));
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        assert_eq!(src.rescan(rel(), &[]).await, vec![changed(&b)]);
    }
}
