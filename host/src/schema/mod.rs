//! Field validation like a Kubernetes API server's: a spec pruned by its kind's structural schema, and what `field_validation` makes of each unknown field.

pub mod locate;
pub mod prune;
pub mod scan;

use serde_json::Value;
use steward_sdk::FieldError;

use crate::config::FieldValidation;
use crate::model::{FieldWarning, WarningSource};

/// The message of a warning about a field the schema does not know (`field_validation: warn`).
pub const UNKNOWN_FIELD_WARNING: &str = "unknown field, ignored";
/// The message of an error about a field the schema does not know (`field_validation: strict`).
pub const UNKNOWN_FIELD_ERROR: &str =
    "unknown field: the kind's schema has no such field (remove it, or set field_validation to warn or ignore)";

/// A spec after field validation.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedSpec {
    /// The spec as JSON text without the fields its schema does not know: what the plugin sees.
    pub spec: String,
    /// One warning per dropped field (`field_validation: warn`), sorted by path.
    pub warnings: Vec<FieldWarning>,
    /// One error per unknown field (`field_validation: strict`): the object is invalid.
    pub errors: Vec<FieldError>,
}

/// Prunes `spec` (JSON text of an object) by `schema` (the kind's structural schema; `None`
/// prunes nothing) and turns each unknown field into what `mode` says: a warning (`warn`),
/// nothing (`ignore`) or a field error (`strict`). A spec that is not a JSON object is left as it
/// is, for the plugin to report.
pub fn check_spec(mode: FieldValidation, schema: Option<&Value>, spec: &str) -> CheckedSpec {
    let unchanged = || CheckedSpec { spec: spec.to_string(), warnings: Vec::new(), errors: Vec::new() };
    let Some(schema) = schema else { return unchanged() };
    // Most specs have no field to prune: say so without building the document.
    if scan::prunes_nothing(schema, spec) {
        return unchanged();
    }
    let Ok(mut value @ Value::Object(_)) = serde_json::from_str::<Value>(spec) else { return unchanged() };
    let unknown = prune::prune(schema, &mut value, "spec");
    if unknown.is_empty() {
        return unchanged();
    }
    let spec = serde_json::to_string(&value).unwrap_or_else(|_| spec.to_string());
    match mode {
        FieldValidation::Warn => CheckedSpec {
            spec,
            warnings: unknown
                .into_iter()
                .map(|path| FieldWarning { path, message: UNKNOWN_FIELD_WARNING.into(), source: WarningSource::Schema })
                .collect(),
            errors: Vec::new(),
        },
        FieldValidation::Ignore => CheckedSpec { spec, warnings: Vec::new(), errors: Vec::new() },
        FieldValidation::Strict => CheckedSpec {
            spec,
            warnings: Vec::new(),
            errors: unknown.into_iter().map(|path| FieldError::new(path, UNKNOWN_FIELD_ERROR)).collect(),
        },
    }
}

/// Most warnings recorded on one object; the rest are counted in one last warning.
pub const MAX_RECORDED: usize = 100;

/// `warnings` as an object's record keeps them: the first [`MAX_RECORDED`], then, when there
/// were more, one warning at `spec` saying how many are not shown (`steward check` lists them all).
pub fn bounded(mut warnings: Vec<FieldWarning>) -> Vec<FieldWarning> {
    if warnings.len() > MAX_RECORDED {
        let more = warnings.len() - MAX_RECORDED;
        let source = warnings[MAX_RECORDED].source;
        warnings.truncate(MAX_RECORDED);
        warnings.push(FieldWarning {
            path: "spec".into(),
            message: format!("{more} more warning(s) not shown here; `steward check` lists them all"),
            source,
        });
    }
    warnings
}

/// The plugin's warnings as the host records them: each once, sorted, its text on one line.
pub fn plugin_warnings(found: Vec<FieldError>) -> Vec<FieldWarning> {
    let mut out: Vec<FieldWarning> = found
        .into_iter()
        .map(|e| FieldWarning {
            path: crate::plugin::one_line(&e.path),
            message: crate::plugin::one_line(&e.message),
            source: WarningSource::Plugin,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"command": {"type": "string"}, "steps": {"type": "array",
            "items": {"type": "object", "properties": {"tool": {"type": "string"}}}}}})
    }

    const SPEC: &str = r#"{"command":"x","steps":[{"input_schema":{},"tool":"t"}],"zzz":1}"#;

    #[test]
    fn warn_drops_unknown_fields_and_names_each_in_a_warning() {
        let c = check_spec(FieldValidation::Warn, Some(&schema()), SPEC);
        assert_eq!(c.spec, r#"{"command":"x","steps":[{"tool":"t"}]}"#);
        let shown: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(shown, ["spec.steps[0].input_schema: unknown field, ignored", "spec.zzz: unknown field, ignored"]);
        assert!(c.warnings.iter().all(|w| w.source == WarningSource::Schema));
        assert!(c.errors.is_empty());
    }

    #[test]
    fn ignore_drops_them_silently() {
        let c = check_spec(FieldValidation::Ignore, Some(&schema()), SPEC);
        assert_eq!(c.spec, r#"{"command":"x","steps":[{"tool":"t"}]}"#);
        assert!(c.warnings.is_empty() && c.errors.is_empty());
    }

    #[test]
    fn strict_makes_each_a_field_error() {
        let c = check_spec(FieldValidation::Strict, Some(&schema()), SPEC);
        let paths: Vec<&str> = c.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["spec.steps[0].input_schema", "spec.zzz"]);
        assert!(c.errors[0].message.starts_with("unknown field"));
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn a_clean_spec_no_schema_or_a_spec_that_is_not_an_object_stays_as_it_is() {
        for mode in [FieldValidation::Strict, FieldValidation::Warn, FieldValidation::Ignore] {
            let clean = r#"{"command":"x"}"#;
            assert_eq!(check_spec(mode, Some(&schema()), clean).spec, clean);
            let c = check_spec(mode, None, SPEC);
            assert_eq!((c.spec.as_str(), c.warnings.len(), c.errors.len()), (SPEC, 0, 0));
            for odd in ["[1]", "nope", "null"] {
                let c = check_spec(mode, Some(&schema()), odd);
                assert_eq!((c.spec.as_str(), c.warnings.len(), c.errors.len()), (odd, 0, 0));
            }
        }
    }

    #[test]
    fn a_record_keeps_at_most_a_hundred_warnings_and_counts_the_rest() {
        let many: Vec<FieldWarning> = (0..250)
            .map(|i| FieldWarning { path: format!("spec.f{i:03}"), message: "m".into(), source: WarningSource::Schema })
            .collect();
        let kept = bounded(many.clone());
        assert_eq!(kept.len(), MAX_RECORDED + 1);
        assert_eq!(kept[..MAX_RECORDED], many[..MAX_RECORDED]);
        assert_eq!(
            kept[MAX_RECORDED].to_string(),
            "spec: 150 more warning(s) not shown here; `steward check` lists them all"
        );
        assert_eq!(bounded(many[..3].to_vec()), many[..3]);
    }

    #[test]
    fn plugin_warnings_are_deduplicated_sorted_and_one_line() {
        let w = plugin_warnings(vec![
            FieldError::new("spec.b", "second"),
            FieldError::new("spec.a", "first\nline"),
            FieldError::new("spec.b", "second"),
        ]);
        let shown: Vec<String> = w.iter().map(|w| w.to_string()).collect();
        assert_eq!(shown, ["spec.a: first\\nline", "spec.b: second"]);
        assert!(w.iter().all(|w| w.source == WarningSource::Plugin));
    }
}
