//! The checks a Site spec passes beyond its types, each with its field path.

use steward_sdk::FieldError;

use crate::SiteSpec;
use crate::render::{INDEX, pages_data};

/// The most pages a Site may have.
pub const MAX_PAGES: usize = 50;
/// The most bytes the ConfigMap's data may hold (keys, pages and index); a ConfigMap holds at
/// most 1 MiB in all, and this leaves room for its metadata.
pub const MAX_BYTES: usize = 512 * 1024;

/// Every problem of `spec`, in field order; empty when it is valid.
pub fn validate(spec: &SiteSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if spec.title.trim().is_empty() {
        errors.push(FieldError::new("spec.title", "the title must not be empty"));
    }
    if spec.pages.len() > MAX_PAGES {
        errors.push(FieldError::new(
            "spec.pages",
            format!("a Site has at most {MAX_PAGES} pages; this one has {}", spec.pages.len()),
        ));
    }
    for name in spec.pages.keys() {
        if let Some(problem) = key_problem(name) {
            errors.push(FieldError::new(format!("spec.pages.{name}"), problem));
        }
    }
    let bytes: usize = pages_data(spec).iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_BYTES {
        errors.push(FieldError::new(
            "spec.pages",
            format!("the pages and their index come to {bytes} bytes; a Site holds at most {MAX_BYTES}"),
        ));
    }
    errors
}

/// Why `name` cannot name a page, if it cannot: it must be a ConfigMap key other than the index.
fn key_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a page name must not be empty".into());
    }
    if name.len() > 253 {
        return Some(format!("a page name has at most 253 characters; this one has {}", name.len()));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        return Some(format!(
            "{name:?} is not a valid ConfigMap key: use letters, digits, `-`, `_` and `.` (for example `about.html`)"
        ));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is not a valid ConfigMap key"));
    }
    if name == INDEX {
        return Some(format!("{INDEX} is the index the Site writes itself; name the page otherwise"));
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use steward_sdk::testing::{object, validate as validate_object};

    use super::*;
    use crate::Site;

    fn errors(spec: serde_json::Value) -> Vec<(String, String)> {
        validate_object::<Site>(&object("Site", "web", spec)).into_iter().map(|e| (e.path, e.message)).collect()
    }

    fn paths(spec: serde_json::Value) -> Vec<String> {
        errors(spec).into_iter().map(|(p, _)| p).collect()
    }

    #[test]
    fn a_minimal_and_a_full_site_are_valid() {
        assert!(paths(json!({"title": "Hi"})).is_empty());
        let pages = json!({"about.html": "x", "a_b-c.txt": "y", "README": "z"});
        assert!(paths(json!({"title": "Hi", "pages": pages, "replicas": 3})).is_empty());
    }

    #[test]
    fn the_title_is_required_and_not_blank() {
        // Missing: the SDK's parse of the spec says so (and the CRD's schema requires it).
        let e = errors(json!({"pages": {}}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].0 == "spec" && e[0].1.contains("missing field `title`"), "{e:?}");
        let e = errors(json!({"title": "  "}));
        assert_eq!(e, [("spec.title".to_string(), "the title must not be empty".to_string())]);
    }

    #[test]
    fn each_bad_page_name_is_named_by_its_path() {
        let pages = json!({"ok.html": "", "about us.html": "", "..": "", "index.html": "", "é.html": ""});
        let e = errors(json!({"title": "Hi", "pages": pages}));
        let got: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(got, ["spec.pages...", "spec.pages.about us.html", "spec.pages.index.html", "spec.pages.é.html"]);
        assert!(e[1].1.contains("not a valid ConfigMap key"), "{e:?}");
        assert!(e[2].1.contains("the index the Site writes itself"), "{e:?}");
    }

    #[test]
    fn too_many_pages_or_bytes_are_refused() {
        let many: serde_json::Map<String, serde_json::Value> =
            (0..=MAX_PAGES).map(|i| (format!("p{i}.html"), json!("x"))).collect();
        let e = errors(json!({"title": "Hi", "pages": many}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, "spec.pages");
        assert!(e[0].1.contains(&format!("at most {MAX_PAGES} pages; this one has {}", MAX_PAGES + 1)), "{e:?}");

        let big = "x".repeat(MAX_BYTES);
        let e = errors(json!({"title": "Hi", "pages": {"big.html": big}}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].1.contains(&format!("a Site holds at most {MAX_BYTES}")), "{e:?}");
    }

    #[test]
    fn a_spec_of_the_wrong_shape_is_named_by_its_path() {
        assert_eq!(paths(json!({"title": "Hi", "pages": {"a": 1}})), ["spec.pages.a"]);
        assert_eq!(paths(json!({"title": "Hi", "replicas": -1})), ["spec.replicas"]);
    }
}
