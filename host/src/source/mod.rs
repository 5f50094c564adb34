//! Change detection: where desired state comes from, kept in a cache the host reads from.

pub mod fs;

use std::fmt;

use steward_sdk::RawObject;

use crate::model::{ObjectKey, SourceLocation};

/// What the engine reads desired state from: the files of a directory or a cluster's custom
/// resources. Every method reads the source's cache and never blocks on I/O.
pub trait Source: Send + Sync + 'static {
    /// The object, if the source has it.
    fn get(&self, key: &ObjectKey) -> Option<SourceObject>;
    /// [`Source::get`] with `raw.status` left `None`, for a caller that keeps its own record
    /// of the status: a source that holds one (the cluster's) does not copy it out.
    fn get_without_status(&self, key: &ObjectKey) -> Option<SourceObject> {
        self.get(key).map(|mut o| {
            o.raw.status = None;
            o
        })
    }
    /// The objects of `kind`, in `namespace` or all namespaces, sorted by key.
    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<SourceObject>;
    /// The object's generation, if the source has it: what [`Source::get`] says, without
    /// building the object.
    fn generation(&self, key: &ObjectKey) -> Option<u64> {
        self.get(key).map(|o| o.raw.generation)
    }
    /// Every key the source has.
    fn keys(&self) -> Vec<ObjectKey>;
    /// How many objects the source has.
    fn len(&self) -> usize;
    /// Whether the source has no objects.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Problems with the source's input (files that do not parse, names defined twice).
    fn problems(&self) -> Vec<FileProblem>;
    /// A problem with this object's definition (defined twice, say), if any.
    fn object_problem(&self, _key: &ObjectKey) -> Option<String> {
        None
    }
    /// Whether `kind`'s cache holds a complete listing, so an object missing from it is gone.
    /// The filesystem source is complete once scanned.
    fn is_synced(&self, _kind: &str) -> bool {
        true
    }
    /// The host has let the object go (finalized, its record removed): the source drops what
    /// it kept about the key while it was absent (the filesystem source, its generation), so
    /// that a long-running host does not keep something for every name ever deleted. A key
    /// the source has again is left as it is.
    fn forget(&self, _key: &ObjectKey) {}
}

impl Source for fs::FsSource {
    fn get(&self, key: &ObjectKey) -> Option<SourceObject> {
        fs::FsSource::get(self, key)
    }
    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<SourceObject> {
        fs::FsSource::list(self, kind, namespace)
    }
    fn generation(&self, key: &ObjectKey) -> Option<u64> {
        fs::FsSource::generation(self, key)
    }
    fn keys(&self) -> Vec<ObjectKey> {
        fs::FsSource::keys(self)
    }
    fn len(&self) -> usize {
        fs::FsSource::len(self)
    }
    fn problems(&self) -> Vec<FileProblem> {
        fs::FsSource::problems(self)
    }
    fn object_problem(&self, key: &ObjectKey) -> Option<String> {
        fs::FsSource::object_problem(self, key)
    }
    fn forget(&self, key: &ObjectKey) {
        fs::FsSource::forget(self, key)
    }
}

/// One object as its source defines it.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceObject {
    /// The object: `status` is `None` and `deleting` false; `spec` is canonical JSON text
    /// (object keys sorted) and `{}` when the document has none.
    pub raw: RawObject,
    /// Where it is defined: in filesystem mode the file, relative to the resources directory and
    /// `/`-separated, and the 1-based line where its document starts; in Kubernetes mode the
    /// object's API path, line 0.
    pub location: SourceLocation,
    /// Stable hash of the spec: [`crate::model::spec_hash`] of the canonical JSON text.
    pub spec_hash: u64,
    /// What the source accepted that Kubernetes mode refuses (filesystem mode: a name taken
    /// from the file, `_` in a name, unknown keys), shown with the object's other warnings.
    /// Always empty in Kubernetes mode.
    pub warnings: Vec<crate::model::FieldWarning>,
}

impl SourceObject {
    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(&self.raw.kind, &self.raw.namespace, &self.raw.name)
    }
}

/// What changed. Level-triggered: the host re-reads the cache for the key or file named.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SourceEvent {
    /// The object appeared, or its spec, labels, annotations, apiVersion or defining file changed.
    Changed(ObjectKey),
    /// The object is gone from every file.
    Deleted(ObjectKey),
    /// The file's problems are new or different; see [`Source::problems`].
    FileProblem {
        /// Relative path of the file.
        file: String,
    },
    /// The file had problems and has none any more (or is gone).
    FileOk {
        /// Relative path of the file.
        file: String,
    },
    /// Kubernetes mode: the kind's cache has (re)listed every object; what it lacks now is gone.
    KindSynced {
        /// The kind.
        kind: String,
    },
}

/// A problem with one file. Displays as `file:line:column: message`, leaving out what is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileProblem {
    /// Relative path of the file, `/`-separated.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {}", self.file, self.message),
            (Some(l), None) => write!(f, "{}:{l}: {}", self.file, self.message),
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}
