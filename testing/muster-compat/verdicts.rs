//! Runs the corpus files of one kind through a plugin's own validation, natively (no host):
//! shared by the `muster_corpus` tests of the mcpserver and workflow plugins.
//!
//! Cases marked `# needs: fieldval` or `# needs: fsmode` are left out: their unknown fields are
//! pruned, or their document read leniently, by the host before a plugin sees them
//! (`host/tests/it/muster_compat.rs` checks those through the host).

use std::path::{Path, PathBuf};

use steward_sdk::testing::{object, validate, warnings};
use steward_sdk::{FieldError, Kind};

/// The corpus directory.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testing/muster-compat")
}

/// Checks every file of `dirs` whose `kind` is `K::KIND`; returns what differs from the comments.
pub fn differences<K: Kind>(dirs: &[&str]) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for dir in dirs {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(corpus_dir().join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
            let text = std::fs::read_to_string(path).unwrap();
            let comment = |key: &str| -> Vec<String> {
                let prefix = format!("# {key}: ");
                text.lines()
                    .take_while(|l| l.starts_with('#'))
                    .filter_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
                    .collect()
            };
            if comment("needs").iter().any(|n| n == "fieldval" || n == "fsmode") {
                continue;
            }
            let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
            if doc["kind"] != K::KIND {
                continue;
            }
            checked += 1;
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let obj = object(K::KIND, name, doc["spec"].clone());
            let verdict = comment("steward").pop().or_else(|| comment("muster").pop()).unwrap_or_default();
            let fields = comment("field");
            let errs = validate::<K>(&obj);
            let warns = warnings::<K>(&obj);
            let at = path.display();
            let names = |list: &[FieldError], f: &str| {
                list.iter().any(|e| {
                    e.path == f || e.path.starts_with(&format!("{f}.")) || e.path.starts_with(&format!("{f}["))
                })
            };
            match verdict.as_str() {
                "reject" => {
                    if errs.is_empty() {
                        wrong.push(format!("{at}: accepted, muster refuses it"));
                    }
                    for f in &fields {
                        if !names(&errs, f) {
                            wrong.push(format!("{at}: no error at {f}: {errs:?}"));
                        }
                    }
                }
                "warn" => {
                    if !errs.is_empty() {
                        wrong.push(format!("{at}: refused, muster accepts it: {errs:?}"));
                    }
                    for f in &fields {
                        if !names(&warns, f) {
                            wrong.push(format!("{at}: no warning at {f}: {warns:?}"));
                        }
                    }
                }
                "accept" => {
                    if !errs.is_empty() || !warns.is_empty() {
                        wrong.push(format!("{at}: expected no problem: {errs:?} {warns:?}"));
                    }
                }
                other => wrong.push(format!("{at}: unknown verdict {other:?}")),
            }
        }
    }
    (checked, wrong)
}
