//! The document: YAML parsed into Kubernetes-shaped objects, checked against the schema every object has (`apiVersion`, `kind`, `metadata`, `spec`), with the spec as canonical JSON and its hash.

use std::collections::{BTreeMap, BTreeSet};

use serde_saphyr::Spanned;

use super::raw::{RawDoc, text, texts};
use crate::model::{
    FieldWarning, Name, ObjectKey, WarningSource, is_dns_label, is_dns_subdomain, is_kind, is_object_name,
    namespace_for, spec_hash,
};
use crate::yaml::{self, YamlError};

/// One valid document of a file.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Doc {
    pub(super) key: ObjectKey,
    pub(super) api_version: Name,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) spec: String,
    pub(super) spec_hash: u64,
    /// Where the document starts (32 bits: a position past 4 billion is shown as the largest).
    pub(super) line: u32,
    /// Where `metadata.name` is.
    pub(super) name_line: Option<u32>,
    pub(super) name_column: Option<u32>,
    /// What filesystem mode accepted that Kubernetes mode refuses (a name from the file, an
    /// underscore in the name, unknown keys); empty for nearly every document.
    pub(super) warnings: Vec<FieldWarning>,
}

/// Why a file is invalid, with the position when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DocError {
    pub(super) line: Option<u64>,
    pub(super) column: Option<u64>,
    pub(super) message: String,
}

impl DocError {
    pub(super) fn at(loc: &serde_saphyr::Location, message: impl Into<String>) -> Self {
        let (line, column) = (loc.line(), loc.column());
        Self { line: (line > 0).then_some(line), column: (column > 0).then_some(column), message: message.into() }
    }
}

impl From<YamlError> for DocError {
    fn from(e: YamlError) -> Self {
        Self { line: e.line, column: e.column, message: clean_message(&e.message) }
    }
}

/// The parser's message without a leading `error: line X column Y: ` (the position is kept
/// apart) and without control characters.
fn clean_message(message: &str) -> String {
    let mut m = message.trim();
    m = m.strip_prefix("error: ").unwrap_or(m);
    if let Some(rest) = m.strip_prefix("line ")
        && let Some((pos, tail)) = rest.split_once(": ")
        && pos.split(" column ").all(|n| n.trim().chars().all(|c| c.is_ascii_digit()))
    {
        m = tail;
    }
    m.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Parses and validates every document of the file `file` (its path, `/`-separated); the first
/// problem fails the whole file. The objects of `cluster_scoped` kinds have no namespace; the
/// others default to `default`. A file's only document may leave `metadata.name` out: it is
/// then named after the file (see [`file_stem`]).
pub(super) fn parse_file(bytes: &[u8], file: &str, cluster_scoped: &BTreeSet<String>) -> Result<Vec<Doc>, DocError> {
    // The valid UTF-8 prefix is checked for characters YAML does not allow first, so that the
    // first problem in the file is the one reported.
    let (text, utf8_error) = match std::str::from_utf8(bytes) {
        Ok(t) => (t, false),
        Err(e) => (std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(), true),
    };
    if let Some((at, c)) = text.char_indices().find(|(_, c)| !is_yaml_printable(*c)) {
        let (line, column) = position_after(&text[..at]);
        return Err(DocError {
            line: Some(line),
            column: Some(column),
            message: format!(
                "the file holds the control character U+{:04X}, which YAML does not allow (is it a binary file?)",
                u32::from(c)
            ),
        });
    }
    if utf8_error {
        let (line, column) = position_after(text);
        let message = if bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]) {
            "the file is not valid UTF-8 (it is UTF-16: save it as UTF-8)"
        } else {
            "the file is not valid UTF-8"
        };
        return Err(DocError { line: Some(line), column: Some(column), message: message.into() });
    }
    let raw: Vec<Spanned<RawDoc>> = yaml::from_multiple(text).map_err(DocError::from)?;
    let mut docs: Vec<Doc> = Vec::with_capacity(raw.len());
    let mut shared = Shared::default();
    let count = raw.len();
    for d in raw {
        let doc = validate(d, Naming { file, count }, cluster_scoped, &mut shared)?;
        if let Some(first) = docs.iter().find(|o| o.key == doc.key) {
            return Err(DocError {
                line: doc.name_line.or(Some(doc.line)).map(u64::from),
                column: doc.name_column.map(u64::from),
                message: format!("{} is already defined at line {} of this file", doc.key, first.line),
            });
        }
        docs.push(doc);
    }
    Ok(docs)
}

/// YAML 1.2's printable characters (`c-printable`): tab, line breaks and printable Unicode; no
/// other control character may appear raw, not even in a comment or a quoted string.
fn is_yaml_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || c >= '\u{10000}'
}

/// The 1-based (line, column) just after `prefix`, the column counted in characters.
fn position_after(prefix: &str) -> (u64, u64) {
    let line = prefix.bytes().filter(|b| *b == b'\n').count() as u64 + 1;
    let line_start = prefix.rfind('\n').map_or(0, |i| i + 1);
    (line, prefix[line_start..].chars().count() as u64 + 1)
}

/// The kind, namespace and apiVersion of the file's previous document, so that the documents
/// of one file that repeat them (nearly all do) share one copy of each.
#[derive(Default)]
struct Shared {
    kind: Name,
    namespace: Name,
    api_version: Name,
}

/// `text` as a name, the one in `last` when it is the same text (kept there for the next).
fn share(last: &mut Name, text: &str) -> Name {
    if **last != *text {
        *last = Name::from(text);
    }
    last.clone()
}

/// What naming a document from its file needs: the file's path and how many documents it holds.
#[derive(Clone, Copy)]
struct Naming<'a> {
    file: &'a str,
    count: usize,
}

/// The name a document without `metadata.name` takes, as muster takes it: the file's name
/// without its directory and its `.yaml`/`.yml` extension (`workflows/deploy.yaml` → `deploy`).
pub(super) fn file_stem(file: &str) -> &str {
    let base = file.rsplit('/').next().unwrap_or(file);
    base.strip_suffix(".yaml").or_else(|| base.strip_suffix(".yml")).unwrap_or(base)
}

/// A warning of filesystem mode's leniencies.
fn lenient(path: impl Into<String>, message: impl Into<String>) -> FieldWarning {
    FieldWarning { path: path.into(), message: message.into(), source: WarningSource::Source }
}

fn validate(
    d: Spanned<RawDoc>,
    naming: Naming<'_>,
    cluster_scoped: &BTreeSet<String>,
    shared: &mut Shared,
) -> Result<Doc, DocError> {
    let start = d.referenced;
    let raw = d.value;
    let mut warnings: Vec<FieldWarning> = raw
        .unknown
        .iter()
        .map(|k| lenient(k.as_str(), "unknown key, ignored as muster ignores it; Kubernetes mode refuses it"))
        .collect();
    let api_version = raw.api_version.ok_or_else(|| DocError::at(&start, "apiVersion is missing"))?;
    let api_version_at = api_version.referenced;
    let api_version = text("apiVersion", api_version)?;
    if !is_api_version(&api_version) {
        return Err(DocError::at(
            &api_version_at,
            format!(
                "apiVersion {} is not valid: expected `version` or `group/version`, for example `steward.dev/v1`",
                shown(&api_version)
            ),
        ));
    }
    let kind = raw.kind.ok_or_else(|| DocError::at(&start, "kind is missing"))?;
    let kind_at = kind.referenced;
    let kind = text("kind", kind)?;
    if !is_kind(&kind) {
        return Err(DocError::at(
            &kind_at,
            format!(
                "kind {} is not valid: expected CamelCase letters and digits starting with an upper-case letter, at most 63",
                shown(&kind)
            ),
        ));
    }
    let (meta_at, meta) = match raw.metadata {
        Some(m) => (m.referenced, m.value),
        None => (start, Default::default()),
    };
    warnings.extend(meta.unknown.iter().map(|k| {
        lenient(format!("metadata.{k}"), "unknown key, ignored as muster ignores it; Kubernetes mode refuses it")
    }));
    let (name, name_at) = match meta.name {
        Some(name) => {
            let at = name.referenced;
            (text("metadata.name", name)?, Some(at))
        }
        None if naming.count > 1 => {
            return Err(DocError::at(
                &meta_at,
                format!(
                    "metadata.name is missing: a name is taken from the file name only when the file holds one document, and this one holds {}; set metadata.name",
                    naming.count
                ),
            ));
        }
        None => {
            let stem = file_stem(naming.file);
            if !is_object_name(stem) {
                return Err(DocError::at(
                    &meta_at,
                    format!(
                        "metadata.name is missing, and the file name {} is not a valid name to take instead ({NAME_RULE}); set metadata.name",
                        shown(stem)
                    ),
                ));
            }
            warnings.push(lenient(
                "metadata.name",
                format!("missing: the name {} is taken from the file name, as muster does; Kubernetes mode refuses an object without metadata.name", shown(stem)),
            ));
            (stem.to_string(), None)
        }
    };
    if !is_object_name(&name) {
        let at = name_at.unwrap_or(meta_at);
        return Err(DocError::at(&at, format!("metadata.name {} is not valid: {NAME_RULE}", shown(&name))));
    }
    if !is_dns_subdomain(&name) {
        warnings.push(lenient(
            "metadata.name",
            format!(
                "{} holds '_', accepted as muster accepts it; Kubernetes mode refuses it ({DNS_RULE})",
                shown(&name)
            ),
        ));
    }
    let namespace = match meta.namespace {
        Some(ns) => {
            let ns_at = ns.referenced;
            let ns = text("metadata.namespace", ns)?;
            if !is_dns_subdomain(&ns) {
                return Err(DocError::at(
                    &ns_at,
                    format!("metadata.namespace {} is not valid: {DNS_RULE}", shown(&ns)),
                ));
            }
            ns
        }
        None => String::new(),
    };
    let namespace = namespace_for(!cluster_scoped.contains(&kind), &namespace).to_string();
    let labels = texts("metadata.labels", meta.labels)?;
    let annotations = texts("metadata.annotations", meta.annotations)?;
    let spec = match raw.spec {
        None => serde_json::Value::Object(serde_json::Map::new()),
        Some(s) => match s.value {
            serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
            v @ serde_json::Value::Object(_) => v,
            _ => return Err(DocError::at(&s.referenced, "spec must be a mapping")),
        },
    };
    let mut spec_text = String::new();
    canonical_json(&spec, &mut spec_text);
    let (name_line, name_column) = name_at.map_or((0, 0), |at| (narrow(at.line()), narrow(at.column())));
    Ok(Doc {
        key: ObjectKey::new(share(&mut shared.kind, &kind), share(&mut shared.namespace, &namespace), name),
        api_version: share(&mut shared.api_version, &api_version),
        labels,
        annotations,
        spec_hash: spec_hash(&spec_text),
        spec: spec_text,
        line: narrow(start.line()).max(1),
        name_line: (name_line > 0).then_some(name_line),
        name_column: (name_column > 0).then_some(name_column),
        warnings,
    })
}

/// A position in 32 bits, the largest when it does not fit.
fn narrow(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

const NAME_RULE: &str = "expected lower-case letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most 253 characters";

const DNS_RULE: &str = "expected lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";

/// A value quoted for a message: escaped, and cut when long.
fn shown(s: &str) -> String {
    let mut v: String = s.chars().take(64).collect();
    if v.len() < s.len() {
        v.push('…');
    }
    format!("\"{}\"", v.escape_debug())
}

/// `version` or `group/version`: the group a DNS-1123 subdomain, the version a DNS-1123 label.
fn is_api_version(s: &str) -> bool {
    match s.split_once('/') {
        Some((group, version)) => is_dns_subdomain(group) && is_dns_label(version),
        None => is_dns_label(s),
    }
}

/// JSON text with object keys sorted at every level, whatever the map type's own order.
fn canonical_json(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                canonical_json(v, out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&serde_json::to_string(scalar).unwrap_or_else(|_| "null".into())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::read::problem;
    use super::super::test_support::*;
    use super::super::{FsSource, SourceEvent};
    use super::*;
    use crate::yaml::MAX_FILE_BYTES;

    #[tokio::test]
    async fn status_is_ignored_and_yaml_1_1_booleans_stay_strings() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(
            dir,
            "a.yaml",
            "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  labels: {on: yes}\nspec:\n  on: push\n  yes: no\n  off: [y, n, true]\n  1: one\nstatus:\n  phase: Synced\n",
        );
        let src = FsSource::new(opts(dir), HashMap::new());
        src.scan().await;
        assert!(src.problems().is_empty(), "{:?}", src.problems());
        let k = key("K", "default", "a");
        assert_eq!(
            spec_of(&src, &k),
            serde_json::json!({"on": "push", "yes": "no", "off": ["y", "n", true], "1": "one"})
        );
        let o = src.get(&k).unwrap();
        assert_eq!(o.raw.labels["on"], "yes");
        assert_eq!(o.raw.status, None);
    }

    /// A name, the file text, the expected (line, column) of the problem, a fragment of its message.
    type Case = (&'static str, String, Option<(u64, u64)>, &'static str);

    #[tokio::test]
    async fn invalid_documents_are_file_problems_with_positions() {
        let mut bomb = String::from(
            "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
        );
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!(
                "  a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let deep = format!(
            "apiVersion: v1\nkind: K\nmetadata: {{name: a}}\nspec: {{x: {}1{}}}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let cases: Vec<Case> = vec![
            (
                "upper-case name",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: MyName\n".into(),
                Some((4, 9)),
                "metadata.name \"MyName\" is not valid",
            ),
            (
                "name starting with an underscore",
                "apiVersion: v1\nkind: K\nmetadata: {name: _a}\n".into(),
                Some((3, 18)),
                "metadata.name \"_a\" is not valid",
            ),
            (
                "name ending in a dash",
                "apiVersion: v1\nkind: K\nmetadata: {name: a-}\n".into(),
                Some((3, 18)),
                "metadata.name",
            ),
            (
                "empty label in a name",
                "apiVersion: v1\nkind: K\nmetadata: {name: a..b}\n".into(),
                Some((3, 18)),
                "metadata.name",
            ),
            (
                "name too long",
                format!("apiVersion: v1\nkind: K\nmetadata: {{name: {}}}\n", "a".repeat(254)),
                Some((3, 18)),
                "at most 253",
            ),
            (
                "bad namespace",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  namespace: Prod\n".into(),
                Some((5, 14)),
                "metadata.namespace \"Prod\"",
            ),
            ("missing kind", "apiVersion: v1\nmetadata: {name: a}\n".into(), Some((1, 1)), "kind is missing"),
            (
                "lower-case kind",
                "apiVersion: v1\nkind: mcpServer\nmetadata: {name: a}\n".into(),
                Some((2, 7)),
                "kind \"mcpServer\" is not valid",
            ),
            (
                "kind with a dash",
                "apiVersion: v1\nkind: Mcp-Server\nmetadata: {name: a}\n".into(),
                Some((2, 7)),
                "kind",
            ),
            ("missing apiVersion", "kind: K\nmetadata: {name: a}\n".into(), Some((1, 1)), "apiVersion is missing"),
            ("bad apiVersion", "apiVersion: a/b/c\nkind: K\nmetadata: {name: a}\n".into(), Some((1, 13)), "apiVersion"),
            (
                "two documents without a name",
                "apiVersion: v1\nkind: K\nmetadata:\n  namespace: x\n---\napiVersion: v1\nkind: K\n".into(),
                Some((4, 3)),
                "metadata.name is missing: a name is taken from the file name only when the file holds one document, and this one holds 2",
            ),
            (
                "spec not a mapping",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec: [1]\n".into(),
                Some((4, 7)),
                "spec must be a mapping",
            ),
            (
                "label value not a string",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  labels: {a: {b: c}}\n".into(),
                None,
                "",
            ),
            (
                "duplicate key",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nkind: J\n".into(),
                Some((4, 1)),
                "duplicate",
            ),
            (
                "duplicate key in spec",
                "apiVersion: v1\nkind: K\nmetadata: {name: a}\nspec:\n  x: 1\n  x: 2\n".into(),
                Some((6, 3)),
                "duplicate",
            ),
            (
                "same object twice",
                format!("{}---\n{}", doc("K", "a", "v: 1"), doc("K", "a", "v: 2")),
                Some((11, 9)),
                "already defined at line 1 of this file",
            ),
            ("not a mapping", "- a\n- b\n".into(), Some((1, 1)), ""),
            (
                "a number for a name",
                "apiVersion: v1\nkind: K\nmetadata: {name: 123}\n".into(),
                Some((3, 18)),
                "metadata.name must be a string, not the number 123 (quote it to make it text)",
            ),
            (
                "a boolean for a label",
                "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  labels: {x: true}\n".into(),
                Some((5, 15)),
                "metadata.labels.x must be a string, not the boolean true (quote it to make it text)",
            ),
            (
                "a control character",
                "apiVersion: v1\n# \u{7}\nkind: K\n".into(),
                Some((2, 3)),
                "the control character U+0007",
            ),
            ("syntax error", "apiVersion: v1\nkind: [K\n".into(), None, ""),
            ("tab indentation", "apiVersion: v1\nkind: K\nmetadata:\n\tname: a\n".into(), None, ""),
            ("alias bomb", bomb, None, "alias bomb"),
            ("deep nesting", deep, None, "nested deeper than"),
        ];
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for (i, (_, text, _, _)) in cases.iter().enumerate() {
            write(dir, &format!("case{i:02}.yaml"), text);
        }
        // Invalid UTF-8 on line 2, column 8; a file over the size limit.
        std::fs::write(dir.join("utf8.yaml"), b"kind: K\nname: a\xff\n").unwrap();
        let big = std::fs::File::create(dir.join("big.yaml")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();

        let src = FsSource::new(opts(dir), HashMap::new());
        // The bomb and the nesting end at the parser's budgets, not expanded or recursed into:
        // the scan returns, and each file's problem names the budget.
        let events = src.scan().await;
        assert_eq!(src.len(), 0, "no invalid document enters the cache: {:?}", src.keys());
        assert_eq!(events.len(), cases.len() + 2, "{events:?}");
        assert!(events.iter().all(|e| matches!(e, SourceEvent::FileProblem { .. })), "{events:?}");
        for (i, (what, _, at, fragment)) in cases.iter().enumerate() {
            let problems = src.file_problems(&format!("case{i:02}.yaml"));
            assert_eq!(problems.len(), 1, "{what}: {problems:?}");
            let p = &problems[0];
            assert!(p.line.is_some(), "{what}: a line is known: {p}");
            if let Some((line, column)) = at {
                assert_eq!((p.line, p.column), (Some(*line), Some(*column)), "{what}: {p}");
            }
            assert!(p.message.contains(fragment), "{what}: {p}");
            assert!(!p.message.is_empty() && !p.message.contains('\n'), "{what}: {p}");
        }
        let p = src.file_problems("utf8.yaml").remove(0);
        assert_eq!(p.to_string(), "utf8.yaml:2:8: the file is not valid UTF-8");
        let p = src.file_problems("big.yaml").remove(0);
        assert_eq!((p.line, p.column), (None, None));
        assert!(p.to_string().starts_with("big.yaml: the file is 8388609 bytes, larger than the limit"), "{p}");
    }

    fn parse(file: &str, text: &str) -> Result<Vec<Doc>, DocError> {
        parse_file(text.as_bytes(), file, &BTreeSet::new())
    }

    fn warned(doc: &Doc) -> Vec<(&str, &str)> {
        doc.warnings.iter().map(|w| (w.path.as_str(), w.message.as_str())).collect()
    }

    #[test]
    fn filesystem_leniencies_are_accepted_with_a_warning_each() {
        // No metadata (or no name): the file's only document is named after the file.
        let docs = parse("dir/deploy.yml", "apiVersion: v1\nkind: K\nspec: {a: 1}\n").unwrap();
        assert_eq!(docs[0].key, ObjectKey::new("K", "default", "deploy"));
        let w = warned(&docs[0]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].0, "metadata.name");
        assert!(
            w[0].1.contains("\"deploy\" is taken from the file name") && w[0].1.contains("Kubernetes mode refuses")
        );
        assert_eq!(file_stem("a/b.c.yaml"), "b.c");
        let e = parse("Deploy.yaml", "apiVersion: v1\nkind: K\nmetadata: {namespace: x}\n").unwrap_err();
        assert!(
            e.message.contains("the file name \"Deploy\" is not a valid name")
                && e.message.contains("set metadata.name"),
            "{e:?}"
        );
        let e = parse("two.yaml", "apiVersion: v1\nkind: K\nmetadata: {name: a}\n---\napiVersion: v1\nkind: K\n")
            .unwrap_err();
        assert!(e.message.contains("holds 2"), "{e:?}");
        // '_' in a name (muster's special-chars-workflow_123).
        let docs = parse("w.yaml", "apiVersion: v1\nkind: K\nmetadata: {name: special-chars-workflow_123}\n").unwrap();
        assert_eq!(docs[0].key.name(), "special-chars-workflow_123");
        let w = warned(&docs[0]);
        assert!(w.len() == 1 && w[0].0 == "metadata.name" && w[0].1.contains("holds '_'"), "{w:?}");
        // Unknown keys are ignored, each named; the fields a server fills in are not.
        let docs = parse(
            "u.yaml",
            "apiVersion: v1\nkind: K\nmetadata:\n  name: a\n  lables: {x: y}\n  uid: 1\n  resourceVersion: '2'\nspecs: {}\nstatus: {}\n",
        )
        .unwrap();
        let paths: Vec<&str> = warned(&docs[0]).iter().map(|w| w.0).collect();
        assert_eq!(paths, ["specs", "metadata.lables"]);
        assert!(
            docs[0].warnings.iter().all(|w| w.source == WarningSource::Source && w.message.contains("unknown key"))
        );
        assert_eq!(docs[0].spec, "{}");
        // A plain document has none.
        assert!(parse("p.yaml", &doc("K", "a", "v: 1")).unwrap()[0].warnings.is_empty());
    }

    #[test]
    fn names_kinds_and_api_versions() {
        for ok in ["a", "a-b", "a.b", "0", "a1.b-2.c", &"a".repeat(63)] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "a_b",
            "-a",
            "a-",
            ".a",
            "a.",
            "a..b",
            "a.-b",
            "a b",
            "é",
            &"a".repeat(64),
            &format!("{}.a", "a".repeat(252)),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        for ok in ["K", "MCPServer", "Workflow2"] {
            assert!(is_kind(ok), "{ok}");
        }
        for bad in ["", "k", "mcpServer", "A-B", "A_B", "1A", "Ä"] {
            assert!(!is_kind(bad), "{bad}");
        }
        for ok in ["v1", "steward.dev/v1alpha1", "apps/v1"] {
            assert!(is_api_version(ok), "{ok}");
        }
        for bad in ["", "/v1", "a/", "a/b/c", "V1", "a b/v1"] {
            assert!(!is_api_version(bad), "{bad}");
        }
    }

    #[test]
    fn spec_hash_and_text_do_not_depend_on_key_order() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [true, null, "s\"q"]}, "a": 1.5}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a": 1.5, "b": {"x": [true, null, "s\"q"], "y": 1}}"#).unwrap();
        let (mut ta, mut tb) = (String::new(), String::new());
        canonical_json(&a, &mut ta);
        canonical_json(&b, &mut tb);
        assert_eq!(ta, r#"{"a":1.5,"b":{"x":[true,null,"s\"q"],"y":1}}"#);
        assert_eq!(ta, tb);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&ta).unwrap(), a);
        // FNV-1a reference values: the hash is stable across builds.
        assert_eq!(spec_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(spec_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn problems_display_as_file_line_column() {
        let p = problem("a/b.yaml", Some(3), Some(7), "bad");
        assert_eq!(p.to_string(), "a/b.yaml:3:7: bad");
        assert_eq!(problem("a.yaml", Some(3), None, "bad").to_string(), "a.yaml:3: bad");
        assert_eq!(problem("a.yaml", None, None, "bad").to_string(), "a.yaml: bad");
        assert_eq!(clean_message("error: line 13 column 6: non-finite float"), "non-finite float");
        assert_eq!(clean_message("unclosed bracket '['"), "unclosed bracket '['");
        assert_eq!(clean_message("a\u{1b}[31mb"), "a [31mb");
    }
}
