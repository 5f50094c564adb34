//! Field validation before a reconcile: the spec pruned by its kind's schema as `field_validation` says, and the plugin's own warnings (asked again only when the spec or the plugin changed, in the reconcile's instance).

use steward_sdk::{FieldError, RawObject};

use crate::config::FieldValidation;
use crate::model::{FieldWarning, StatusRecord, WarningSource};
use crate::plugin::{Plugin, PluginError};
use crate::schema;

/// The spec as the plugin gets it, and what field validation found.
pub(super) struct SpecCheck {
    /// The object with its spec pruned.
    pub raw: RawObject,
    /// Unknown fields under `field_validation: strict`: the object is invalid without a call.
    pub errors: Vec<FieldError>,
    /// The schema's warnings, then the plugin's when they were kept from the last reconcile.
    warnings: Vec<FieldWarning>,
    /// What the plugin's warnings are for (spec hash, plugin and version).
    marker: String,
    /// The plugin must be asked for its warnings: the spec or the plugin changed since.
    pub ask: bool,
}

impl SpecCheck {
    /// Every warning, the schema's first, then the plugin's (`asked`: its answer when it was
    /// asked, `None` for a component without `lint`), at most [`schema::MAX_RECORDED`] (and one
    /// counting the rest); and what the plugin's warnings were asked for, `None` when they could
    /// not be read (they are asked again at the next reconcile).
    pub fn finish(self, asked: Option<Result<Vec<FieldError>, PluginError>>) -> (Vec<FieldWarning>, Option<String>) {
        let mut warnings = self.warnings;
        let mut warnings_for = Some(self.marker);
        if self.ask {
            match asked.map(|r| r.map(schema::plugin_warnings)) {
                None => {}
                Some(Ok(found)) => warnings.extend(found),
                Some(Err(e)) => {
                    warnings.push(could_not_read(&e));
                    warnings_for = None;
                }
            }
        }
        // A list cut short no longer holds all the plugin said: ask it again next time.
        let warnings_for = warnings_for.filter(|_| warnings.len() <= schema::MAX_RECORDED);
        (schema::bounded(warnings), warnings_for)
    }
}

/// Prunes `raw`'s spec by the kind's schema and collects the schema's warnings. The plugin's
/// warnings are those `before` holds when they were asked for this spec (`spec_hash`) and this
/// plugin version; otherwise [`SpecCheck::ask`] says to ask the plugin (its optional `lint`
/// export, under the limits of `validate`), with the reconcile when there is one
/// ([`crate::plugin::Plugin::reconcile_linted`]), else on their own
/// ([`crate::plugin::Plugin::warnings`]).
pub(super) fn check(
    mode: FieldValidation,
    plugin: &Plugin,
    mut raw: RawObject,
    spec_hash: u64,
    before: Option<&StatusRecord>,
) -> SpecCheck {
    let checked = schema::check_spec(mode, plugin.spec_schema(&raw.kind), &raw.spec);
    raw.spec = checked.spec;
    let mut warnings = checked.warnings;
    let marker = format!("{spec_hash:016x}/{}@{}", plugin.name(), plugin.info().version);
    let kept = before.filter(|b| b.plugin_warnings_for.as_deref() == Some(marker.as_str()));
    if let Some(b) = kept {
        warnings.extend(b.warnings.iter().filter(|w| w.source == WarningSource::Plugin).cloned());
    }
    SpecCheck { raw, errors: checked.errors, warnings, marker, ask: kept.is_none() }
}

/// The warning that says the plugin's warnings could not be read, and why.
fn could_not_read(e: &PluginError) -> FieldWarning {
    FieldWarning {
        path: "spec".into(),
        message: crate::sanitize::sanitize(&format!("the plugin's warnings could not be read: {e}")),
        source: WarningSource::Plugin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_warning() -> FieldWarning {
        FieldWarning { path: "spec.x".into(), message: "unknown field, ignored".into(), source: WarningSource::Schema }
    }

    fn checked(ask: bool) -> SpecCheck {
        SpecCheck {
            raw: RawObject::default(),
            errors: Vec::new(),
            warnings: vec![schema_warning()],
            marker: "07/p@1.0".into(),
            ask,
        }
    }

    #[test]
    fn the_plugins_answer_joins_the_schemas_warnings_and_is_kept_for_its_spec_and_version() {
        let found = vec![FieldError::new("spec.y", "deprecated")];
        let (warnings, for_) = checked(true).finish(Some(Ok(found)));
        assert_eq!(
            warnings.iter().map(|w| (w.path.as_str(), w.source)).collect::<Vec<_>>(),
            [("spec.x", WarningSource::Schema), ("spec.y", WarningSource::Plugin)]
        );
        assert_eq!(for_.as_deref(), Some("07/p@1.0"));
        // A component without `lint` has no warnings of its own, for good.
        let (warnings, for_) = checked(true).finish(None);
        assert_eq!((warnings.len(), for_.as_deref()), (1, Some("07/p@1.0")));
    }

    #[test]
    fn warnings_that_could_not_be_read_say_why_and_are_asked_again() {
        let (warnings, for_) = checked(true).finish(Some(Err(PluginError::Trap { message: "panicked: boom".into() })));
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings[1].message.starts_with("the plugin's warnings could not be read")
                && warnings[1].message.contains("boom")
        );
        assert_eq!(for_, None, "not marked as asked: the next reconcile asks again");
    }

    #[test]
    fn warnings_kept_from_the_last_reconcile_are_not_asked_for() {
        let (warnings, for_) = checked(false).finish(Some(Ok(vec![FieldError::new("spec.z", "ignored")])));
        assert_eq!((warnings.len(), for_.as_deref()), (1, Some("07/p@1.0")));
    }
}
