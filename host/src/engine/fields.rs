//! Field validation before a reconcile: the spec pruned by its kind's schema as `field_validation` says, and the plugin's own warnings (asked again only when the spec or the plugin changed).

use steward_sdk::{FieldError, RawObject};

use crate::config::FieldValidation;
use crate::model::{FieldWarning, StatusRecord, WarningSource};
use crate::plugin::Plugin;
use crate::schema;

/// The spec as the plugin gets it, and what field validation found.
pub(super) struct SpecCheck {
    /// The object with its spec pruned.
    pub raw: RawObject,
    /// Unknown fields under `field_validation: strict`: the object is invalid without a call.
    pub errors: Vec<FieldError>,
    /// Every warning, the schema's first, then the plugin's, at most [`schema::MAX_RECORDED`] (and one counting the rest).
    pub warnings: Vec<FieldWarning>,
    /// What the plugin's warnings were asked for; `None` when they could not be read.
    pub warnings_for: Option<String>,
}

/// Prunes `raw`'s spec by the kind's schema and collects the warnings. The plugin's warnings are
/// those `before` holds when they were asked for this spec (`spec_hash`) and this plugin version;
/// otherwise the plugin is asked (its optional `lint` export, under the limits of `validate`). A
/// call that fails leaves one warning saying so, and is made again at the next reconcile.
pub(super) async fn check(
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
    let (mine, warnings_for) = match kept {
        Some(b) => (b.warnings.iter().filter(|w| w.source == WarningSource::Plugin).cloned().collect(), Some(marker)),
        None => match plugin.warnings(&raw).await {
            None => (Vec::new(), Some(marker)),
            Some(report) => match report.result {
                Ok(found) => (schema::plugin_warnings(found), Some(marker)),
                Err(e) => (
                    vec![FieldWarning {
                        path: "spec".into(),
                        message: crate::sanitize::sanitize(&format!("the plugin's warnings could not be read: {e}")),
                        source: WarningSource::Plugin,
                    }],
                    None,
                ),
            },
        },
    };
    warnings.extend(mine);
    // A list cut short no longer holds all the plugin said: ask it again next time.
    let warnings_for = warnings_for.filter(|_| warnings.len() <= schema::MAX_RECORDED);
    SpecCheck { raw, errors: checked.errors, warnings: schema::bounded(warnings), warnings_for }
}
