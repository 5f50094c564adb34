//! Field validation before a reconcile: the spec pruned by its kind's schema as `field_validation` says, and the plugin's own warnings (asked again only when the spec or the plugin changed).

use std::time::Duration;

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
    /// Every warning, the schema's first, then the plugin's, at most [`schema::MAX_RECORDED`] (and one counting the rest).
    pub warnings: Vec<FieldWarning>,
    /// What the plugin's warnings were asked for; `None` when they could not be read.
    pub warnings_for: Option<String>,
}

/// Prunes `raw`'s spec by the kind's schema and collects the warnings. The plugin's warnings are
/// those `before` holds when they were asked for this spec (`spec_hash`) and this plugin version;
/// otherwise the plugin is asked (its optional `lint` export, under the limits of `validate`). A
/// call that fails leaves one warning saying so, and is made again at the next reconcile. A call
/// made is reported to `observe` (wall time, CPU time, error) for the metrics.
pub(super) async fn check(
    mode: FieldValidation,
    plugin: &Plugin,
    mut raw: RawObject,
    spec_hash: u64,
    before: Option<&StatusRecord>,
    observe: impl FnOnce(Duration, Duration, Option<&PluginError>),
) -> SpecCheck {
    let checked = schema::check_spec(mode, plugin.spec_schema(&raw.kind), &raw.spec);
    raw.spec = checked.spec;
    let mut warnings = checked.warnings;
    let marker = format!("{spec_hash:016x}/{}@{}", plugin.name(), plugin.info().version);
    let kept = before.filter(|b| b.plugin_warnings_for.as_deref() == Some(marker.as_str()));
    let (mine, warnings_for) = match kept {
        Some(b) => (b.warnings.iter().filter(|w| w.source == WarningSource::Plugin).cloned().collect(), Some(marker)),
        None => match ask(plugin, &raw, observe).await {
            Ok(found) => (found, Some(marker)),
            Err(failed) => (vec![failed], None),
        },
    };
    warnings.extend(mine);
    // A list cut short no longer holds all the plugin said: ask it again next time.
    let warnings_for = warnings_for.filter(|_| warnings.len() <= schema::MAX_RECORDED);
    SpecCheck { raw, errors: checked.errors, warnings: schema::bounded(warnings), warnings_for }
}

/// The plugin's warnings about `raw` (none when it does not export `lint`), or the warning that
/// says they could not be read.
async fn ask(
    plugin: &Plugin,
    raw: &RawObject,
    observe: impl FnOnce(Duration, Duration, Option<&PluginError>),
) -> Result<Vec<FieldWarning>, FieldWarning> {
    let Some(report) = plugin.warnings(raw).await else { return Ok(Vec::new()) };
    observe(report.elapsed, report.cpu, report.result.as_ref().err());
    report.result.map(schema::plugin_warnings).map_err(|e| FieldWarning {
        path: "spec".into(),
        message: crate::sanitize::sanitize(&format!("the plugin's warnings could not be read: {e}")),
        source: WarningSource::Plugin,
    })
}
