//! Hostile resource files against a running host: alias bombs, deep nesting, a 200 MB file,
//! binary garbage, invalid UTF-8, YAML 1.1 booleans, duplicate keys, wrong types, bad names and
//! 10,000 documents in one file. Each ends as an error on its file (with `file:line:column`) or
//! on its object, in bounded time and memory; `steward check` says the same; and the valid
//! objects beside it, in other files and in the same file, keep reconciling.
//!
//! The corpus is generated here; nothing big is checked in.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use serde_json::Value;
use steward::yaml::{MAX_DEPTH, MAX_DOCUMENTS, MAX_FILE_BYTES};

use crate::common;
use crate::common::host::{Host, noop, synced};

/// Deadline for an error (or a convergence) to show.
const T: Duration = Duration::from_secs(60);
const MIB: u64 = 1024 * 1024;

/// A host whose compiled plugins are cached across the tests of this file (and runs of it).
fn host() -> Host {
    Host::new(&format!("cache_dir: {}/hostile-yaml-plugin-cache\n", env!("CARGO_TARGET_TMPDIR")))
}

/// A `Noop` document whose spec is `spec` (lines indented by two spaces).
fn noop_with(name: &str, spec: &str) -> String {
    format!("apiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// One problem of a file, as the API and `steward check` show it.
#[derive(Debug, Clone, PartialEq)]
struct Problem {
    text: String,
    line: Option<u64>,
    column: Option<u64>,
    message: String,
}

/// Parses `file:line:column: message` (or `file: message`) for a known `file`.
fn parse_problem(file: &str, text: &str) -> Option<Problem> {
    let rest = text.strip_prefix(file)?.strip_prefix(':')?;
    let mut parts = rest.splitn(3, ':');
    let (a, b) = (parts.next()?, parts.next());
    let number = |s: &str| s.parse::<u64>().ok();
    let (line, column, message) = match (number(a), b.and_then(number)) {
        (Some(l), Some(c)) => (Some(l), Some(c), parts.next()?.trim().to_string()),
        (Some(l), None) => (Some(l), None, rest.split_once(':')?.1.trim().to_string()),
        _ => (None, None, rest.trim().to_string()),
    };
    Some(Problem { text: text.to_string(), line, column, message })
}

/// The overview's problems, by file (each of these tests' files has at most one).
async fn problems(h: &Host, files: &[&str]) -> BTreeMap<String, Problem> {
    let o = h.api().get("/api/v1/overview").await.unwrap_or(Value::Null);
    let list: Vec<String> =
        o["problems"].as_array().into_iter().flatten().filter_map(|p| p.as_str().map(String::from)).collect();
    let mut out = BTreeMap::new();
    for f in files {
        if let Some(p) = list.iter().find_map(|p| parse_problem(f, p)) {
            out.insert(f.to_string(), p);
        }
    }
    out
}

/// Waits until every file in `files` has a problem for which `done` holds; returns them.
async fn wait_problems(
    h: &Host,
    files: &[&str],
    what: &str,
    done: impl Fn(&str, &Problem) -> bool,
) -> BTreeMap<String, Problem> {
    let what = h.waiting_for(format!("{what} in {files:?}"));
    common::eventually(
        T,
        what,
        async || problems(h, files).await,
        |got| files.iter().all(|f| got.get(*f).is_some_and(|p| done(f, p))),
    )
    .await
}

/// `steward check`: its exit code and its `file:…` lines by file.
fn check(h: &Host, files: &[&str]) -> (i32, BTreeMap<String, String>, String) {
    let (code, out, err) = h.cli_within(&["check"], T);
    let mut by_file = BTreeMap::new();
    for f in files {
        if let Some(line) = out.lines().find(|l| parse_problem(f, l).is_some()) {
            by_file.insert(f.to_string(), line.to_string());
        }
    }
    (code, by_file, format!("{out}{err}"))
}

/// The character at a 1-based line and column of `text`.
fn char_at(text: &str, line: u64, column: u64) -> Option<char> {
    text.lines().nth(line as usize - 1)?.chars().nth(column as usize - 1)
}

/// Waits until `key` is Synced with `status.value == value`.
async fn wait_value(h: &Host, key: &str, value: &str) -> Value {
    h.wait_object(key, T, &format!("Synced with value {value}"), |v| {
        synced(v) && v.is_some_and(|v| v["status"]["value"] == value)
    })
    .await
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The corpus.

/// Billion laughs: ten lists of ten aliases of the one before, 10^9 values expanded.
fn billion_laughs(name: &str) -> String {
    let mut spec = String::from("  value: &l0 \"lol\"\n");
    for i in 1..10 {
        let aliases = vec![format!("*l{}", i - 1); 10].join(", ");
        spec.push_str(&format!("  l{i}: &l{i} [{aliases}]\n"));
    }
    noop_with(name, &spec)
}

/// The quadratic blow-up: one 2 MiB string, aliased 900 times (1.8 GB expanded) by a 2 MiB file.
fn quadratic_text() -> String {
    let big = "x".repeat(2 * MIB as usize);
    noop_with("quadratic-text", &format!("  big: &big \"{big}\"\n  copies: [{}]\n", vec!["*big"; 900].join(", ")))
}

/// The quadratic blow-up with structure: a mapping of 1,000 keys, aliased 999 times.
fn quadratic_map() -> String {
    let keys: Vec<String> = (0..1000).map(|i| format!("k{i}: v")).collect();
    noop_with(
        "quadratic-map",
        &format!("  m: &m {{{}}}\n  copies: [{}]\n", keys.join(", "), vec!["*m"; 999].join(", ")),
    )
}

const DEEP: usize = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_bombs_and_deep_nesting_end_as_file_errors_in_bounded_time_and_memory() {
    let mut h = host();
    h.write("outer.yaml", &noop("outer", "v1"));
    h.write("mixed.yaml", &format!("{}---\n{}", noop("inner", "v1"), noop("beside", "v1")));
    h.start().await;
    for key in ["Noop/default/outer", "Noop/default/inner", "Noop/default/beside"] {
        h.wait_object(key, T, "Synced", synced).await;
    }

    // (file, text, the character the error must point at, the largest column it may be at, message)
    let corpus: Vec<(&str, String, char, usize, &str)> = vec![
        ("laughs.yaml", billion_laughs("laughs"), '*', usize::MAX, "alias bomb"),
        ("quadratic-text.yaml", quadratic_text(), '*', usize::MAX, "bytes of text, counting what aliases repeat"),
        ("quadratic-map.yaml", quadratic_map(), '*', usize::MAX, "alias bomb"),
        (
            "deep-flow.yaml",
            noop_with("deep-flow", &format!("  value: {}1{}\n", "[".repeat(DEEP), "]".repeat(DEEP))),
            '[',
            10 + MAX_DEPTH + 1,
            "nested deeper than 64 levels",
        ),
        (
            "deep-flow-map.yaml",
            noop_with("deep-flow-map", &format!("  value: {}1{}\n", "{a: ".repeat(DEEP), "}".repeat(DEEP))),
            '{',
            10 + 4 * (MAX_DEPTH + 1),
            "nested deeper than 64 levels",
        ),
        (
            "deep-block.yaml",
            noop_with("deep-block", &format!("  value:\n    {}x\n", "- ".repeat(DEEP))),
            '-',
            5 + 2 * (MAX_DEPTH + 1),
            "nested deeper than 64 levels",
        ),
    ];
    // And a bomb in a multi-document file, after a valid document that changes at the same time.
    let mixed = format!("{}---\n{}", noop("inner", "v2"), billion_laughs("bomb"));

    for (file, text, ..) in &corpus {
        h.write(file, text);
    }
    h.write("mixed.yaml", &mixed);
    let mut files: Vec<&str> = corpus.iter().map(|c| c.0).collect();
    files.push("mixed.yaml");
    let found = wait_problems(&h, &files, "every hostile file's problem", |f, p| {
        f != "mixed.yaml" || p.message.contains("alias bomb")
    })
    .await;

    let mut texts: BTreeMap<&str, &str> = corpus.iter().map(|c| (c.0, c.1.as_str())).collect();
    texts.insert("mixed.yaml", &mixed);
    let mut expect: Vec<(&str, char, usize, &str)> = corpus.iter().map(|c| (c.0, c.2, c.3, c.4)).collect();
    expect.push(("mixed.yaml", '*', usize::MAX, "alias bomb"));
    for (file, at, max_column, fragment) in expect {
        let p = &found[file];
        let (Some(line), Some(column)) = (p.line, p.column) else { panic!("{file}: no line and column: {p:?}") };
        assert_eq!(char_at(texts[file], line, column), Some(at), "{file}: the error points at a '{at}': {p:?}");
        assert!(column as usize <= max_column, "{file}: reported where the limit is crossed, not later: {p:?}");
        assert!(p.message.contains(fragment) && p.message.contains("too large or too complex"), "{file}: {p:?}");
    }
    // The bomb in mixed.yaml is in its second document (from line 8).
    assert!(found["mixed.yaml"].line.unwrap() > 8, "{:?}", found["mixed.yaml"]);

    let peak = h.peak_rss();
    eprintln!("peak RSS {} MiB", peak / MIB);
    assert!(peak < 300 * MIB, "the host's peak RSS is {} MiB", peak / MIB);

    // A valid object in another file still converges.
    h.write("outer.yaml", &noop("outer", "v2"));
    wait_value(&h, "Noop/default/outer", "v2").await;
    // The valid documents of the bombed file keep their last good version, and say why and where.
    for key in ["Noop/default/inner", "Noop/default/beside"] {
        let v = h.object(key).await.unwrap();
        assert_eq!((v["phase"].as_str(), v["status"]["value"].as_str()), (Some("Synced"), Some("v1")), "{v:#}");
        let why = v["sourceProblem"].as_str().unwrap_or_default();
        assert!(why.starts_with(&found["mixed.yaml"].text) && why.contains("last good version"), "{key}: {why}");
    }

    // `steward check` reports the same problems.
    let (code, by_file, out) = check(&h, &files);
    assert_eq!(code, 1, "{out}");
    for f in &files {
        assert_eq!(by_file.get(*f), Some(&found[*f].text), "{f}: check says what the API says:\n{out}");
    }

    // The bomb removed: the changed document converges and the problem clears.
    h.write("mixed.yaml", &format!("{}---\n{}", noop("inner", "v3"), noop("beside", "v1")));
    wait_value(&h, "Noop/default/inner", "v3").await;
    let left = problems(&h, &["mixed.yaml"]).await;
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(h.object("Noop/default/inner").await.unwrap()["sourceProblem"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mb_file_is_refused_by_its_size_and_endless_files_are_not_read() {
    let _heavy = common::heavy().await;
    let mut h = host();
    h.write("outer.yaml", &noop("outer", "v1"));
    h.start().await;
    h.wait_object("Noop/default/outer", T, "Synced", synced).await;
    let baseline = h.peak_rss();

    // Written in place, the way a runaway generator would: the host sees it grow past the limit.
    let size = 200 * MIB;
    let path = h.resources().join("huge.yaml");
    let mut f = std::fs::File::create(&path).unwrap();
    let head = noop_with("huge", "  value: \"");
    f.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 4 * MIB as usize];
    let mut written = head.len() as u64;
    while written + 2 < size {
        let n = chunk.len().min((size - 2 - written) as usize);
        f.write_all(&chunk[..n]).unwrap();
        written += n as u64;
    }
    f.write_all(b"\"\n").unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);

    // And inputs without an end: a link to /dev/zero and a named pipe nobody writes to.
    std::os::unix::fs::symlink("/dev/zero", h.resources().join("endless.yaml")).unwrap();
    let fifo = std::ffi::CString::new(h.resources().join("pipe.yaml").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0, "mkfifo");

    let want = format!("huge.yaml: the file is {size} bytes, larger than the limit of {MAX_FILE_BYTES} bytes");
    let files = ["huge.yaml", "endless.yaml", "pipe.yaml"];
    let found = wait_problems(&h, &files, "the size problem", |f, p| {
        if f == "huge.yaml" { p.text == want } else { p.message == "not a regular file" }
    })
    .await;
    assert_eq!((found["huge.yaml"].line, found["huge.yaml"].column), (None, None), "no position: nothing was parsed");

    let peak = h.peak_rss();
    eprintln!("peak RSS {} MiB (before the file: {} MiB)", peak / MIB, baseline / MIB);
    assert!(peak < 1024 * MIB, "the host's peak RSS is {} MiB", peak / MIB);
    // Not read into memory: the peak grew by far less than the file.
    assert!(peak < baseline + 64 * MIB, "peak {} MiB, baseline {} MiB", peak / MIB, baseline / MIB);

    h.write("outer.yaml", &noop("outer", "v2"));
    wait_value(&h, "Noop/default/outer", "v2").await;

    // `check` ends (within T: it reads neither the pipe nor /dev/zero) and says the same.
    let (code, by_file, out) = check(&h, &files);
    assert_eq!(code, 1, "{out}");
    for f in files {
        assert_eq!(by_file.get(f), Some(&found[f].text), "{out}");
    }
}

/// A file of the corpus: its name, its bytes, the (line, column) its problem is at, a fragment of the message.
type Case = (&'static str, Vec<u8>, Option<(u64, u64)>, &'static str);

/// Writes every case after the host started, waits for each file's problem, checks its position
/// and message, and that `steward check` reports the very same line.
async fn assert_file_problems(h: &Host, cases: &[Case]) {
    for (file, bytes, ..) in cases {
        h.write_bytes(file, bytes);
    }
    let files: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let found = wait_problems(h, &files, "every file's problem", |_, _| true).await;
    for (file, _, at, fragment) in cases {
        let p = &found[*file];
        let pos = p.line.zip(p.column);
        assert_eq!(pos, *at, "{file}: position of {p:?}");
        assert!(p.message.contains(fragment), "{file}: {p:?} should say {fragment:?}");
        assert!(!p.message.contains('\n') && !p.message.contains('\0'), "{file}: one clean line: {p:?}");
    }
    let (code, by_file, out) = check(h, &files);
    assert_eq!(code, 1, "{out}");
    for f in &files {
        assert_eq!(by_file.get(*f), Some(&found[*f].text), "{f}: check says what the API says:\n{out}");
    }
}

/// Binary garbage: an ELF-like header (control characters, valid UTF-8), then bytes that are not
/// UTF-8 from offset 20, then pseudo-random bytes.
fn binary_garbage() -> Vec<u8> {
    let mut b = b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00".to_vec();
    b.push(0xff);
    let mut x: u32 = 0x2545_f491;
    for _ in 0..64 * 1024 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b.push(x as u8);
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bad_encodings_yaml_1_1_keys_and_duplicate_keys_are_file_errors_with_positions() {
    let mut h = host();
    h.write("outer.yaml", &noop("outer", "v1"));
    h.start().await;
    h.wait_object("Noop/default/outer", T, "Synced", synced).await;

    let head = "apiVersion: test.steward.dev/v1\nkind: Noop\n";
    let doc = |rest: &str| format!("{head}{rest}").into_bytes();
    let utf16: Vec<u8> = "\u{feff}apiVersion: v1\nkind: Noop\n".encode_utf16().flat_map(u16::to_le_bytes).collect();
    let mut bad_utf8 = doc("metadata:\n  name: caf");
    bad_utf8.extend_from_slice(b"\xc3\nspec: {}\n");
    let cases: Vec<Case> = vec![
        (
            "garbage.yaml",
            binary_garbage(),
            Some((1, 1)),
            "control character U+007F, which YAML does not allow (is it a binary file?)",
        ),
        ("garbage-text.yaml", binary_garbage()[1..].to_vec(), Some((1, 4)), "control character U+0002"),
        ("garbage-bytes.yaml", binary_garbage()[20..].to_vec(), Some((1, 1)), "the file is not valid UTF-8"),
        ("invalid-utf8.yaml", bad_utf8, Some((4, 12)), "the file is not valid UTF-8"),
        ("utf16.yaml", utf16, Some((1, 1)), "not valid UTF-8 (it is UTF-16: save it as UTF-8)"),
        ("nul.yaml", doc("metadata:\n  name: a\0b\n"), Some((4, 10)), "control character U+0000"),
        ("bell.yaml", b"apiVersion: v1\nkind: Noop\x07\nmetadata: {name: a}\n".to_vec(), Some((2, 11)), "U+0007"),
        ("bell-in-comment.yaml", doc("# a bell \x07\nmetadata: {name: a}\n"), Some((3, 10)), "U+0007"),
        ("dup-top.yaml", doc("metadata:\n  name: a\nkind: Noop\n"), Some((5, 1)), "duplicate mapping key `kind`"),
        ("dup-meta.yaml", doc("metadata:\n  name: a\n  name: b\n"), Some((5, 3)), "duplicate mapping key `name`"),
        ("dup-label.yaml", doc("metadata:\n  name: a\n  labels: {x: b, x: c}\n"), Some((5, 18)), "duplicate"),
        ("dup-spec.yaml", doc("metadata:\n  name: a\nspec:\n  value: x\n  value: y\n"), Some((7, 3)), "duplicate"),
    ];
    assert_file_problems(&h, &cases).await;

    // YAML 1.1 booleans: `on:` and `yes:` are keys named "on" and "yes", unknown at the top:
    // ignored, as muster ignores them, with a warning that names them.
    h.write_bytes("on.yaml", &doc("on: push\nmetadata:\n  name: on\n"));
    h.write_bytes("yes-key.yaml", &doc("metadata:\n  name: yes-key\nyes: true\n"));
    for (key, path) in [("Noop/default/on", "on"), ("Noop/default/yes-key", "yes")] {
        h.wait_object(key, T, &format!("loaded with a warning at {path}"), |v| {
            v.is_some_and(|v| v["warnings"][0]["path"] == path && v["warnings"][0]["source"] == "source")
        })
        .await;
    }

    // YAML 1.1 booleans are strings: a name `yes`, a label `on: yes` and a value `no` load as text…
    h.write(
        "words.yaml",
        &noop_with("yes", "  value: no\n").replace("  name: yes\n", "  name: yes\n  labels: {on: yes}\n"),
    );
    wait_value(&h, "Noop/default/yes", "no").await;
    // …and `yes` where a boolean is expected is an error on the object, naming the field.
    h.write(
        "autostart.yaml",
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: autostart\nspec:\n  type: stdio\n  command: x\n  autoStart: yes\n",
    );
    let v = h
        .wait_object("MCPServer/default/autostart", T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed"))
        .await
        .unwrap();
    let err = v["lastError"].as_str().unwrap();
    assert!(err.contains("spec.autoStart") && err.contains("\"yes\", expected a boolean"), "{err}");
    assert!(v["status"]["pid"].is_null(), "nothing was started: {v:#}");

    h.write("outer.yaml", &noop("outer", "v2"));
    wait_value(&h, "Noop/default/outer", "v2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_and_bad_names_in_the_object_are_file_errors_with_positions() {
    let mut h = host();
    h.write("outer.yaml", &noop("outer", "v1"));
    h.start().await;
    h.wait_object("Noop/default/outer", T, "Synced", synced).await;

    let head = "apiVersion: test.steward.dev/v1\nkind: Noop\n";
    let doc = |rest: &str| format!("{head}{rest}").into_bytes();
    let meta = |rest: &str| doc(&format!("metadata:\n  name: a\n{rest}"));
    let quote = "(quote it to make it text)";
    let cases: Vec<Case> = vec![
        // apiVersion and kind
        (
            "api-version-list.yaml",
            b"apiVersion: [v1]\nkind: Noop\nmetadata: {name: a}\n".to_vec(),
            Some((1, 13)),
            "apiVersion must be a string, not a sequence",
        ),
        (
            "api-version-map.yaml",
            b"apiVersion: {a: b}\nkind: Noop\nmetadata: {name: a}\n".to_vec(),
            Some((1, 13)),
            "apiVersion must be a string, not a mapping",
        ),
        ("api-version-int.yaml", b"apiVersion: 1\nkind: Noop\nmetadata: {name: a}\n".to_vec(), Some((1, 13)), quote),
        (
            "api-version-bool.yaml",
            b"apiVersion: true\nkind: Noop\nmetadata: {name: a}\n".to_vec(),
            Some((1, 13)),
            quote,
        ),
        (
            "api-version-null.yaml",
            b"apiVersion: ~\nkind: Noop\nmetadata: {name: a}\n".to_vec(),
            Some((1, 1)),
            "apiVersion is missing",
        ),
        ("kind-int.yaml", b"apiVersion: v1\nkind: 5\nmetadata: {name: a}\n".to_vec(), Some((2, 7)), quote),
        (
            "kind-list.yaml",
            b"apiVersion: v1\nkind: [Noop]\nmetadata: {name: a}\n".to_vec(),
            Some((2, 7)),
            "kind must be a string, not a sequence",
        ),
        ("kind-empty.yaml", b"apiVersion: v1\nkind:\nmetadata: {name: a}\n".to_vec(), Some((1, 1)), "kind is missing"),
        // metadata
        ("metadata-string.yaml", doc("metadata: a\n"), Some((3, 11)), "expected a mapping"),
        ("metadata-list.yaml", doc("metadata: [a]\n"), Some((3, 11)), "expected a mapping"),
        ("metadata-int.yaml", doc("metadata: 5\n"), Some((3, 11)), "expected a mapping"),
        (
            "name-list.yaml",
            doc("metadata:\n  name: [a]\n"),
            Some((4, 9)),
            "metadata.name must be a string, not a sequence",
        ),
        (
            "name-map.yaml",
            doc("metadata:\n  name: {a: b}\n"),
            Some((4, 9)),
            "metadata.name must be a string, not a mapping",
        ),
        (
            "name-int.yaml",
            doc("metadata:\n  name: 123\n"),
            Some((4, 9)),
            "metadata.name must be a string, not the number 123",
        ),
        ("name-float.yaml", doc("metadata:\n  name: 1.5\n"), Some((4, 9)), quote),
        ("name-bool.yaml", doc("metadata:\n  name: true\n"), Some((4, 9)), "not the boolean true (quote it"),
        ("namespace-int.yaml", meta("  namespace: 7\n"), Some((5, 14)), quote),
        ("namespace-list.yaml", meta("  namespace: [x]\n"), Some((5, 14)), "metadata.namespace must be a string"),
        ("labels-list.yaml", meta("  labels: [a]\n"), Some((5, 11)), "expected a mapping"),
        ("labels-string.yaml", meta("  labels: x\n"), Some((5, 11)), "expected a mapping"),
        ("labels-int-value.yaml", meta("  labels: {a: 1}\n"), Some((5, 15)), "metadata.labels.a must be a string"),
        ("labels-bool-value.yaml", meta("  labels: {a: true}\n"), Some((5, 15)), quote),
        (
            "labels-null-value.yaml",
            meta("  labels: {a: ~}\n"),
            Some((5, 15)),
            "metadata.labels.a must be a string, not null",
        ),
        (
            "labels-map-value.yaml",
            meta("  labels:\n    a: {b: c}\n"),
            Some((6, 8)),
            "metadata.labels.a must be a string, not a mapping",
        ),
        ("annotations-list.yaml", meta("  annotations: [a]\n"), Some((5, 16)), "expected a mapping"),
        (
            "annotations-int-value.yaml",
            meta("  annotations:\n    a: 1\n"),
            Some((6, 8)),
            "metadata.annotations.a must be",
        ),
        ("spec-string.yaml", meta("spec: x\n"), Some((5, 7)), "spec must be a mapping"),
        ("spec-list.yaml", meta("spec: [a]\n"), Some((5, 7)), "spec must be a mapping"),
        ("spec-int.yaml", meta("spec: 5\n"), Some((5, 7)), "spec must be a mapping"),
        ("spec-nan.yaml", meta("spec:\n  value: .nan\n"), Some((6, 10)), "not a finite number"),
        // names that are not DNS-1123
        (
            "name-upper.yaml",
            doc("metadata:\n  name: MyServer\n"),
            Some((4, 9)),
            "metadata.name \"MyServer\" is not valid",
        ),
        (
            "name-too-long.yaml",
            doc(&format!("metadata:\n  name: {}\n", "a".repeat(254))),
            Some((4, 9)),
            "at most 253 characters",
        ),
        ("name-empty.yaml", doc("metadata:\n  name: \"\"\n"), Some((4, 9)), "metadata.name \"\" is not valid"),
        ("name-dot-dot.yaml", doc("metadata:\n  name: ../x\n"), Some((4, 9)), "metadata.name \"../x\" is not valid"),
        ("name-slash.yaml", doc("metadata:\n  name: a/b\n"), Some((4, 9)), "metadata.name \"a/b\" is not valid"),
        ("name-nul.yaml", doc("metadata:\n  name: \"a\\0b\"\n"), Some((4, 9)), "metadata.name \"a\\0b\""),
        (
            "namespace-dot-dot.yaml",
            meta("  namespace: ../etc\n"),
            Some((5, 14)),
            "metadata.namespace \"../etc\" is not valid",
        ),
        (
            "kind-path.yaml",
            b"apiVersion: v1\nkind: ../Noop\nmetadata: {name: a}\n".to_vec(),
            Some((2, 7)),
            "kind \"../Noop\" is not valid",
        ),
    ];
    assert_file_problems(&h, &cases).await;
    assert_eq!(h.api().get("/api/v1/resources?kind=Noop").await.unwrap().as_array().unwrap().len(), 1, "only outer");
    // Filesystem mode's leniencies (as muster's): no name (named after the file), an unknown
    // `metadata` key, '_' in a name; each loads with a warning naming what Kubernetes refuses.
    let lenient = [
        ("metadata-empty.yaml", doc("metadata:\n"), "Noop/default/metadata-empty", "metadata.name"),
        ("name-null.yaml", doc("metadata:\n  name: ~\n"), "Noop/default/name-null", "metadata.name"),
        ("unknown-meta.yaml", meta("  lables: {}\n"), "Noop/default/a", "metadata.lables"),
        ("name-underscore.yaml", doc("metadata:\n  name: my_server\n"), "Noop/default/my_server", "metadata.name"),
    ];
    for (file, bytes, key, path) in &lenient {
        h.write_bytes(file, bytes);
        h.wait_object(key, T, &format!("loaded with a warning at {path}"), |v| {
            v.is_some_and(|v| {
                v["warnings"][0]["path"] == *path
                    && v["warnings"][0]["message"].as_str().is_some_and(|m| m.contains("Kubernetes mode refuses"))
            })
        })
        .await;
    }
    // Quoted, the same values are text: the object loads.
    h.write("quoted.yaml", &noop("123", "v").replace("  name: 123\n", "  name: \"123\"\n  labels: {version: \"2\"}\n"));
    wait_value(&h, "Noop/default/123", "v").await;

    h.write("outer.yaml", &noop("outer", "v2"));
    wait_value(&h, "Noop/default/outer", "v2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_in_a_spec_fail_the_object_with_the_field_path() {
    // `strict`: a misspelt field is an error too (under the default `warn` it is dropped with a warning).
    let mut h = Host::new(&format!(
        "cache_dir: {}/hostile-yaml-plugin-cache\nfield_validation: strict\n",
        env!("CARGO_TARGET_TMPDIR")
    ));
    h.write("outer.yaml", &noop("outer", "v1"));
    h.start().await;
    h.wait_object("Noop/default/outer", T, "Synced", synced).await;

    // (name, spec lines, field path, what the error says)
    let noop_cases = [
        ("value-list", "  value: [a]\n", "spec.value", "invalid type: sequence, expected a string"),
        ("value-map", "  value: {a: b}\n", "spec.value", "invalid type: map, expected a string"),
        ("value-int", "  value: 5\n", "spec.value", "invalid type: integer `5`, expected a string"),
        ("value-bool", "  value: true\n", "spec.value", "invalid type: boolean `true`, expected a string"),
        ("value-null", "  value: ~\n", "spec.value", "invalid type: null, expected a string"),
        ("value-typo", "  valeu: x\n", "spec.valeu", "unknown field"),
    ];
    let server = "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n";
    let server_cases = [
        ("type-int", "  type: 5\n  command: x\n", "spec.type", ""),
        ("type-list", "  type: [stdio]\n  command: x\n", "spec.type", ""),
        ("type-unknown", "  type: local\n  command: x\n", "spec.type", "unknown variant `local`"),
        ("command-list", "  type: stdio\n  command: [x]\n", "spec.command", "expected a string"),
        ("command-int", "  type: stdio\n  command: 5\n", "spec.command", "expected a string"),
        ("args-string", "  type: stdio\n  command: x\n  args: x\n", "spec.args", "expected a sequence"),
        ("args-nested", "  type: stdio\n  command: x\n  args: [[x]]\n", "spec.args[0]", "expected a string"),
        ("args-int", "  type: stdio\n  command: x\n  args: [1]\n", "spec.args[0]", "expected a string"),
        ("env-list", "  type: stdio\n  command: x\n  env: [A]\n", "spec.env", "expected a map"),
        ("env-int", "  type: stdio\n  command: x\n  env: {A: 1}\n", "spec.env.A", "expected a string"),
        ("url-int", "  type: streamable-http\n  url: 5\n", "spec.url", "expected a string"),
        ("headers-list", "  type: sse\n  url: http://127.0.0.1:1/\n  headers: [a]\n", "spec.headers", "expected a map"),
        (
            "headers-int",
            "  type: sse\n  url: http://127.0.0.1:1/\n  headers: {A: 1}\n",
            "spec.headers.A",
            "expected a string",
        ),
        ("autostart-on", "  type: stdio\n  command: x\n  autoStart: on\n", "spec.autoStart", "expected a boolean"),
        (
            "autostart-string",
            "  type: stdio\n  command: x\n  autoStart: \"true\"\n",
            "spec.autoStart",
            "expected a boolean",
        ),
        ("autostart-int", "  type: stdio\n  command: x\n  autoStart: 1\n", "spec.autoStart", "expected a boolean"),
        ("prefix-int", "  type: stdio\n  command: x\n  toolPrefix: 5\n", "spec.toolPrefix", "expected a string"),
        (
            "description-map",
            "  type: stdio\n  command: x\n  description: {a: b}\n",
            "spec.description",
            "expected a string",
        ),
        ("timeout-duration", "  type: stdio\n  command: x\n  timeout: 10s\n", "spec.timeout", "expected u32"),
        ("timeout-negative", "  type: stdio\n  command: x\n  timeout: -1\n", "spec.timeout", "expected u32"),
        ("timeout-fraction", "  type: stdio\n  command: x\n  timeout: 1.5\n", "spec.timeout", "expected u32"),
        ("timeout-huge", "  type: stdio\n  command: x\n  timeout: 1e300\n", "spec.timeout", "expected u32"),
        ("timeout-no", "  type: stdio\n  command: x\n  timeout: no\n", "spec.timeout", "expected u32"),
    ];
    let mut objects = Vec::new();
    for (name, spec, path, says) in noop_cases {
        h.write(&format!("{name}.yaml"), &noop_with(name, spec));
        objects.push((format!("Noop/default/{name}"), format!("{name}.yaml"), path, says));
    }
    for (name, spec, path, says) in server_cases {
        h.write(&format!("{name}.yaml"), &format!("{}{spec}", server.replace("{name}", name)));
        objects.push((format!("MCPServer/default/{name}"), format!("{name}.yaml"), path, says));
    }
    for (key, _, path, says) in &objects {
        let v = h.wait_object(key, T, "Failed", |v| v.is_some_and(|v| v["phase"] == "Failed")).await.unwrap();
        let err = v["lastError"].as_str().unwrap_or_default();
        assert!(err.contains(&format!("{path}: ")) && err.contains(says), "{key}: {err}");
        // The position is the file's, not one in the JSON text the plugin was handed.
        assert!(!err.contains("at line 1 column"), "{key}: {err}");
        assert_eq!(v["retryCount"], 1, "an invalid spec is not retried: {v:#}");
        assert!(v["status"]["pid"].is_null(), "nothing was started: {v:#}");
    }

    // `steward check` names each object's file, line and field.
    let (code, out, err) = h.cli(&["check"]);
    assert_eq!(code, 1, "{out}{err}");
    for (key, file, path, says) in &objects {
        let line = out.lines().find(|l| l.starts_with(&format!("{file}:"))).unwrap_or_else(|| panic!("{file}:\n{out}"));
        assert!(line.starts_with(&format!("{file}:1:1: {key}: {path}: ")) && line.contains(says), "{line}");
        assert!(!line.contains("at line 1 column"), "{line}");
    }

    h.write("outer.yaml", &noop("outer", "v2"));
    wait_value(&h, "Noop/default/outer", "v2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_ten_thousand_documents_in_one_file_is_an_error_and_the_rest_keeps_working() {
    let mut h = host();
    h.write("outer.yaml", &noop("outer", "v1"));
    h.write("many.yaml", &format!("{}---\n{}", noop("first", "v1"), noop("second", "v1")));
    h.start().await;
    for key in ["Noop/default/outer", "Noop/default/first", "Noop/default/second"] {
        h.wait_object(key, T, "Synced", synced).await;
    }

    // Two changed documents, then a storm of empty ones (each counts): the 10,001st is refused.
    // (Empty documents keep this fast in a debug build; what is counted is documents.)
    let first_two = format!("{}---\n{}", noop("first", "v2"), noop("second", "v2"));
    let storm = "--- # nothing\n".repeat(MAX_DOCUMENTS - 2);
    h.write("many.yaml", &format!("{first_two}{storm}---\n{}", noop("extra", "v")));
    // And 10,000 documents whose last one is invalid: found, and placed, at line 10,000.
    let last_bad = format!(
        "{}---\napiVersion: test.steward.dev/v1\nkind: Noop\nmetadata:\n  name: Last_One\n",
        "--- # nothing\n".repeat(MAX_DOCUMENTS - 1)
    );
    h.write("last-bad.yaml", &last_bad);
    let found = wait_problems(&h, &["many.yaml", "last-bad.yaml"], "both problems", |_, _| true).await;
    // Lines: 6 + `---` + 6, then one per empty document; the 10,001st starts at its `---`.
    let p = &found["many.yaml"];
    assert_eq!((p.line, p.column), (Some(13 + MAX_DOCUMENTS as u64 - 2 + 1), Some(1)), "{p:?}");
    assert!(p.message.contains("more than 10000 documents in one file"), "{p:?}");
    let p = &found["last-bad.yaml"];
    assert_eq!((p.line, p.column), (Some(MAX_DOCUMENTS as u64 + 4), Some(9)), "{p:?}");
    assert!(p.message.contains("metadata.name \"Last_One\" is not valid"), "{p:?}");

    // The file's objects keep their last good version and say why; nothing refused was loaded.
    let v = h.object("Noop/default/first").await.unwrap();
    assert_eq!((v["phase"].as_str(), v["status"]["value"].as_str()), (Some("Synced"), Some("v1")), "{v:#}");
    assert!(v["sourceProblem"].as_str().unwrap().contains("more than 10000 documents"), "{v:#}");
    assert_eq!(h.api().get("/api/v1/resources?kind=Noop").await.unwrap().as_array().unwrap().len(), 3);
    h.write("outer.yaml", &noop("outer", "v2"));
    wait_value(&h, "Noop/default/outer", "v2").await;

    let (code, by_file, out) = check(&h, &["many.yaml", "last-bad.yaml"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(by_file.get("many.yaml"), Some(&found["many.yaml"].text), "{out}");
    assert_eq!(by_file.get("last-bad.yaml"), Some(&found["last-bad.yaml"].text), "{out}");

    // Back under the limit (10,000 documents): the changed documents converge.
    h.write("many.yaml", &format!("{first_two}{}", "--- # nothing\n".repeat(MAX_DOCUMENTS - 2)));
    wait_value(&h, "Noop/default/first", "v2").await;
    wait_value(&h, "Noop/default/second", "v2").await;
}
