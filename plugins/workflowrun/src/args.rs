//! The run's args checked against the Workflow's declared `args`, defaults applied (muster's rules).

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use steward_sdk::FieldError;
use workflow::ArgSpec;

/// The args a run starts with: `given` completed with the declared defaults. Every problem is
/// a field error at `spec.args.<name>`: a required arg not given, or a value of the wrong type.
/// Args the Workflow does not declare are passed on, as muster does.
pub fn resolve(
    declared: &BTreeMap<String, ArgSpec>,
    given: &Map<String, Value>,
    workflow: &str,
) -> Result<Map<String, Value>, Vec<FieldError>> {
    let mut out = given.clone();
    let mut errors = Vec::new();
    for (name, spec) in declared {
        let path = format!("spec.args.{name}");
        match given.get(name) {
            None if spec.required => errors.push(FieldError::new(
                path,
                format!("Workflow {workflow:?} requires this {} arg and it is not given", spec.type_.as_str()),
            )),
            None => {
                if let Some(default) = &spec.default {
                    out.insert(name.clone(), default.clone());
                }
            }
            Some(v) if !spec.type_.accepts(v) => errors.push(FieldError::new(
                path,
                format!(
                    "must be of type {} (Workflow {workflow:?} declares it so), not {}",
                    spec.type_.as_str(),
                    workflow::validate::json_type(v)
                ),
            )),
            Some(_) => {}
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> BTreeMap<String, ArgSpec> {
        serde_json::from_value(json!({
            "app": {"type": "string", "required": true},
            "replicas": {"type": "integer", "default": 3},
            "labels": {"type": "object"}
        }))
        .unwrap()
    }

    #[test]
    fn defaults_apply_and_extras_pass() {
        let given = json!({"app": "web", "extra": 1});
        let out = resolve(&declared(), given.as_object().unwrap(), "deploy").unwrap();
        assert_eq!(Value::Object(out), json!({"app": "web", "extra": 1, "replicas": 3}));
    }

    #[test]
    fn every_problem_is_reported_at_its_arg() {
        let given = json!({"replicas": 2.5, "labels": []});
        let errs = resolve(&declared(), given.as_object().unwrap(), "deploy").unwrap_err();
        let got: Vec<(&str, &str)> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].0, "spec.args.app");
        assert!(got[0].1.contains("requires"), "{}", got[0].1);
        assert_eq!(
            got[1],
            ("spec.args.labels", "must be of type object (Workflow \"deploy\" declares it so), not an array")
        );
        assert_eq!(got[2].0, "spec.args.replicas");
    }
}
