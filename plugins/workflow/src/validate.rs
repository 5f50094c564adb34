//! The structural checks of a Workflow, each problem reported with its field path.
//!
//! Template conventions (muster's): args are read as `.input.NAME` (or
//! `.args.NAME`), results of earlier steps as `.results.ID` (or the legacy
//! `.context.ID`; a step inside a loop is also `.results.ID_N` for iteration
//! N), and inside a `forEach` its variable as `.vars.NAME` and its index as
//! `.vars.NAME_index`. A bare `.NAME` is not a variable.
//!
//! Execution order: steps run top to bottom; a loop body runs after the
//! loop's `items` are read; the branches of a `parallel` group see the steps
//! before the group but not each other; `onFailure` runs after the main steps
//! and may read any of them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use steward_sdk::FieldError;

use crate::spec::{ArgSpec, Step, StepCondition, WorkflowSpec};
use crate::template;

/// The longest step id muster accepts.
pub const MAX_ID_LEN: usize = 63;

/// Every structural problem of `spec`; empty when it is valid.
pub fn validate(spec: &WorkflowSpec) -> Vec<FieldError> {
    let mut v = Validator { errors: Vec::new(), args: &spec.args, ids: BTreeMap::new(), loop_ids: BTreeSet::new() };
    for (name, arg) in &spec.args {
        v.check_arg(name, arg);
    }
    v.collect_ids(&spec.steps, "spec.steps", false);
    v.collect_ids(&spec.on_failure, "spec.onFailure", false);
    if spec.steps.is_empty() {
        v.error("spec.steps", "a workflow needs at least one step");
    }
    let mut scope = Scope::default();
    v.check_steps(&spec.steps, "spec.steps", &mut scope);
    // onFailure runs after whichever main step failed; every main step counts as earlier.
    let mut after = Scope { done: scope.done, vars: Vec::new() };
    v.check_steps(&spec.on_failure, "spec.onFailure", &mut after);
    v.errors
}

/// What a step may refer to: the steps that completed before it, and the loop variables around it.
#[derive(Clone, Debug, Default)]
struct Scope {
    done: BTreeSet<String>,
    vars: Vec<String>,
}

struct Validator<'a> {
    errors: Vec<FieldError>,
    args: &'a BTreeMap<String, ArgSpec>,
    /// Every step id, with the path where it is first declared.
    ids: BTreeMap<String, String>,
    /// The ids of steps inside loop bodies, readable per iteration as `ID_N`.
    loop_ids: BTreeSet<String>,
}

impl Validator<'_> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    fn check_arg(&mut self, name: &str, arg: &ArgSpec) {
        if let Some(default) = &arg.default
            && !arg.type_.accepts(default)
        {
            self.error(
                format!("spec.args.{name}.default"),
                format!("the default is {} but the arg's type is {}", json_type(default), arg.type_.as_str()),
            );
        }
    }

    /// Records every id in execution order and reports duplicates and malformed ids.
    fn collect_ids(&mut self, steps: &[Step], path: &str, in_loop: bool) {
        for (i, step) in steps.iter().enumerate() {
            let p = format!("{path}[{i}]");
            if let Some(id) = &step.id {
                let id_path = format!("{p}.id");
                if let Some(problem) = id_problem(id) {
                    self.error(&id_path, problem);
                } else if let Some(first) = self.ids.get(id) {
                    let msg =
                        format!("step id {id:?} is already used at {first}; ids must be unique across the workflow");
                    self.error(&id_path, msg);
                } else {
                    self.ids.insert(id.clone(), id_path);
                    if in_loop {
                        self.loop_ids.insert(id.clone());
                    }
                }
            }
            if let Some(each) = &step.for_each {
                self.collect_ids(&each.steps, &format!("{p}.forEach.steps"), true);
            }
            if let Some(group) = &step.parallel {
                self.collect_ids(group, &format!("{p}.parallel"), in_loop);
            }
        }
    }

    fn check_steps(&mut self, steps: &[Step], path: &str, scope: &mut Scope) {
        for (i, step) in steps.iter().enumerate() {
            self.check_step(step, &format!("{path}[{i}]"), scope);
        }
    }

    /// Checks one step against `scope`, then adds it (and what it ran) to `scope.done`.
    fn check_step(&mut self, step: &Step, p: &str, scope: &mut Scope) {
        if let Some(cond) = &step.condition {
            self.check_condition(cond, &format!("{p}.condition"), scope);
        }
        let kinds: Vec<&str> = [
            step.tool.is_some().then_some("tool"),
            step.for_each.is_some().then_some("forEach"),
            step.parallel.is_some().then_some("parallel"),
        ]
        .into_iter()
        .flatten()
        .collect();
        match kinds.as_slice() {
            [_] => {}
            [] => self.error(p, "a step needs exactly one of tool, forEach or parallel; it has none"),
            several => self.error(
                p,
                format!("a step needs exactly one of tool, forEach or parallel; it has {}", several.join(" and ")),
            ),
        }
        if step.tool.as_ref().is_some_and(|t| t.trim().is_empty()) {
            self.error(format!("{p}.tool"), "the tool name must not be empty");
        }
        if let Some(args) = &step.args {
            if step.tool.is_none() {
                self.error(format!("{p}.args"), "only a tool step takes args");
            }
            self.check_args(args, &format!("{p}.args"), scope);
        }
        if let Some(each) = &step.for_each {
            let fp = format!("{p}.forEach");
            match &each.items {
                Value::String(text) => self.check_template(text, &format!("{fp}.items"), scope),
                Value::Array(_) => self.check_value(&each.items, &format!("{fp}.items"), scope),
                other => self.error(
                    format!("{fp}.items"),
                    format!("items must be a list or a template string, not {}", json_type(other)),
                ),
            }
            if !is_identifier(&each.as_) {
                self.error(
                    format!("{fp}.as"),
                    "the loop variable must be a letter or '_' followed by letters, digits or '_'",
                );
            }
            if each.steps.is_empty() {
                self.error(format!("{fp}.steps"), "a forEach needs at least one step");
            }
            let mut body = scope.clone();
            body.vars.push(each.as_.clone());
            body.vars.push(format!("{}_index", each.as_));
            self.check_steps(&each.steps, &format!("{fp}.steps"), &mut body);
            scope.done.extend(body.done);
        }
        if let Some(group) = &step.parallel {
            if group.is_empty() {
                self.error(format!("{p}.parallel"), "a parallel group needs at least one step");
            }
            let mut finished = BTreeSet::new();
            for (j, branch) in group.iter().enumerate() {
                let mut own = scope.clone();
                self.check_step(branch, &format!("{p}.parallel[{j}]"), &mut own);
                finished.extend(own.done);
            }
            scope.done.extend(finished);
        }
        if let Some(id) = &step.id {
            scope.done.insert(id.clone());
        }
    }

    fn check_condition(&mut self, cond: &StepCondition, p: &str, scope: &Scope) {
        let kinds: Vec<&str> = [
            cond.template.is_some().then_some("template"),
            cond.tool.is_some().then_some("tool"),
            cond.from_step.is_some().then_some("fromStep"),
        ]
        .into_iter()
        .flatten()
        .collect();
        match kinds.as_slice() {
            [_] => {}
            [] => self.error(p, "a condition needs exactly one of template, tool or fromStep; it has none"),
            several => self.error(
                p,
                format!(
                    "a condition needs exactly one of template, tool or fromStep; it has {}",
                    several.join(" and ")
                ),
            ),
        }
        if (cond.tool.is_some() || cond.from_step.is_some()) && cond.expect.is_none() && cond.expect_not.is_none() {
            self.error(
                p,
                "a tool or fromStep condition needs expect or expectNot to say what result lets the step run",
            );
        }
        if let Some(text) = &cond.template {
            self.check_template(text, &format!("{p}.template"), scope);
        }
        if cond.tool.as_ref().is_some_and(|t| t.trim().is_empty()) {
            self.error(format!("{p}.tool"), "the tool name must not be empty");
        }
        if let Some(args) = &cond.args {
            if cond.tool.is_none() {
                self.error(format!("{p}.args"), "only a tool condition takes args");
            }
            self.check_args(args, &format!("{p}.args"), scope);
        }
        if let Some(from) = &cond.from_step
            && let Some(problem) = self.step_problem(from, scope, false)
        {
            self.error(format!("{p}.fromStep"), problem);
        }
    }

    fn check_args(&mut self, args: &BTreeMap<String, Value>, p: &str, scope: &Scope) {
        for (key, value) in args {
            self.check_value(value, &format!("{p}.{key}"), scope);
        }
    }

    /// Checks the templates in every string of `value`, naming the path of each.
    fn check_value(&mut self, value: &Value, p: &str, scope: &Scope) {
        match value {
            Value::String(text) => self.check_template(text, p, scope),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.check_value(item, &format!("{p}[{i}]"), scope);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    self.check_value(item, &format!("{p}.{key}"), scope);
                }
            }
            _ => {}
        }
    }

    fn check_template(&mut self, text: &str, p: &str, scope: &Scope) {
        let paths = match template::scan(text) {
            Ok(paths) => paths,
            Err(e) => return self.error(p, e),
        };
        for path in paths {
            if let Some(problem) = self.reference_problem(&path, scope) {
                self.error(p, problem);
            }
        }
    }

    /// Why the template variable `path` cannot be read at `scope`, or `None`.
    fn reference_problem(&self, path: &[String], scope: &Scope) -> Option<String> {
        let (root, name) = (path.first()?.as_str(), path.get(1));
        let shown = format!(".{}", path.iter().take(2).cloned().collect::<Vec<_>>().join("."));
        match (root, name) {
            (_, None) if matches!(root, "input" | "args" | "results" | "context" | "vars") => None,
            ("input" | "args", Some(name)) => (!self.args.contains_key(name))
                .then(|| format!("{shown} refers to arg {name:?}, which spec.args does not declare")),
            ("results" | "context", Some(id)) => self.step_problem(id, scope, true).map(|p| format!("{shown}: {p}")),
            ("vars", Some(var)) => (!scope.vars.contains(var)).then(|| {
                if scope.vars.is_empty() {
                    format!("{shown} is used outside any forEach; loop variables exist only in a loop's steps")
                } else {
                    format!("{shown} is not a variable of an enclosing forEach (in scope: {})", scope.vars.join(", "))
                }
            }),
            _ => Some(format!(
                "{shown} is not a template variable; use .input.ARG, .results.STEP_ID or, in a forEach, .vars.NAME"
            )),
        }
    }

    /// Why step `id` cannot be read at `scope`, or `None` when it completed earlier.
    fn step_problem(&self, id: &str, scope: &Scope, allow_iteration: bool) -> Option<String> {
        if scope.done.contains(id) {
            return None;
        }
        if allow_iteration {
            // `ID_N` is iteration N of loop step ID.
            if let Some((base, n)) = id.rsplit_once('_') {
                let numeric = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
                if numeric && self.loop_ids.contains(base) && scope.done.contains(base) {
                    return None;
                }
            }
        }
        Some(match self.ids.get(id) {
            Some(at) => format!("step {id:?} (at {at}) does not run before this point"),
            None => format!("no step has id {id:?}"),
        })
    }
}

fn id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        Some("a step id must not be empty".to_string())
    } else if id.len() > MAX_ID_LEN {
        Some(format!("a step id must be at most {MAX_ID_LEN} characters"))
    } else if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        Some("a step id may hold only letters, digits, '_' and '-'".to_string())
    } else {
        None
    }
}

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use steward_sdk::FieldError;
    use steward_sdk::testing::{object, validate};

    use crate::Workflow;

    fn errors(spec: Value) -> Vec<FieldError> {
        validate::<Workflow>(&object("Workflow", "wf", spec))
    }

    fn paths(spec: Value) -> Vec<String> {
        errors(spec).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_well_formed_workflow_is_valid() {
        let spec = json!({
            "args": {"app": {"type": "string", "required": true}, "clusters": {"type": "array", "default": ["a"]}},
            "steps": [
                {"id": "info", "tool": "get_info", "args": {"app": "{{ .input.app }}"}},
                {"id": "each", "forEach": {"items": "{{ .input.clusters }}", "as": "cluster", "steps": [
                    {"id": "deploy", "tool": "deploy", "args": {"to": "{{ .vars.cluster }}", "n": "{{ .vars.cluster_index }}",
                                                                "endpoint": "{{ .results.info.endpoint }}"}},
                    {"id": "check", "tool": "check", "args": {"of": "{{ .results.deploy }}"}}
                ]}},
                {"id": "both", "parallel": [
                    {"id": "a", "tool": "a", "args": {"x": "{{ .results.deploy_0.name }}"}},
                    {"id": "b", "tool": "b", "condition": {"fromStep": "each", "expect": {"success": true}}}
                ]},
                {"id": "last", "tool": "z", "condition": {"template": "{{ eq .results.a.ok true }}"}}
            ],
            "onFailure": [{"id": "undo", "tool": "rollback", "args": {"app": "{{ .args.app }}", "after": "{{ .results.last }}"}}]
        });
        assert_eq!(errors(spec), vec![]);
    }

    #[test]
    fn empty_steps_are_rejected() {
        assert_eq!(paths(json!({"steps": []})), ["spec.steps"]);
        assert_eq!(
            paths(json!({"steps": [{"forEach": {"items": [], "steps": []}}, {"parallel": []}]})),
            ["spec.steps[0].forEach.steps", "spec.steps[1].parallel"]
        );
    }

    #[test]
    fn duplicate_ids_are_found_anywhere_and_name_the_first_use() {
        let errs = errors(json!({
            "steps": [
                {"id": "a", "tool": "t"},
                {"id": "loop", "forEach": {"items": [1], "steps": [{"id": "a", "tool": "t"}]}}
            ],
            "onFailure": [{"id": "loop", "tool": "t"}]
        }));
        let got: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(got, ["spec.steps[1].forEach.steps[0].id", "spec.onFailure[0].id"]);
        assert!(errs[0].message.contains("already used at spec.steps[0].id"), "{}", errs[0].message);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        assert_eq!(paths(json!({"steps": [{"id": "has space", "tool": "t"}]})), ["spec.steps[0].id"]);
        assert_eq!(paths(json!({"steps": [{"id": "x".repeat(64), "tool": "t"}]})), ["spec.steps[0].id"]);
    }

    #[test]
    fn a_step_needs_exactly_one_kind() {
        let errs = errors(json!({"steps": [
            {"id": "none"},
            {"tool": "t", "parallel": [{"tool": "u"}]},
            {"tool": "t", "forEach": {"items": [1], "steps": [{"tool": "u"}]}, "parallel": [{"tool": "v"}]}
        ]}));
        let got: Vec<_> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(got[0].0, "spec.steps[0]");
        assert!(got[0].1.ends_with("it has none"), "{}", got[0].1);
        assert_eq!(got[1].0, "spec.steps[1]");
        assert!(got[1].1.ends_with("it has tool and parallel"), "{}", got[1].1);
        assert_eq!(got[2].0, "spec.steps[2]");
        assert!(got[2].1.ends_with("tool and forEach and parallel"), "{}", got[2].1);
        assert_eq!(errs.len(), 3);
    }

    #[test]
    fn nested_steps_are_checked_with_nested_paths() {
        assert_eq!(
            paths(json!({"steps": [{"forEach": {"items": [1], "steps": [{"parallel": [{"tool": "a"}, {}]}]}}]})),
            ["spec.steps[0].forEach.steps[0].parallel[1]"]
        );
        assert_eq!(paths(json!({"steps": [{"tool": " "}]})), ["spec.steps[0].tool"]);
    }

    #[test]
    fn args_belong_to_tool_steps_only() {
        assert_eq!(paths(json!({"steps": [{"parallel": [{"tool": "a"}], "args": {"x": 1}}]})), ["spec.steps[0].args"]);
    }

    #[test]
    fn a_condition_needs_exactly_one_source_and_an_expectation() {
        let errs = errors(json!({"steps": [
            {"id": "a", "tool": "t"},
            {"tool": "t", "condition": {}},
            {"tool": "t", "condition": {"template": "{{ true }}", "fromStep": "a", "expect": {"success": true}}},
            {"tool": "t", "condition": {"tool": "probe"}},
            {"tool": "t", "condition": {"template": "{{ true }}", "args": {"x": 1}}}
        ]}));
        let got: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.steps[1].condition",
                "spec.steps[2].condition",
                "spec.steps[3].condition",
                "spec.steps[4].condition.args"
            ]
        );
        assert!(errs[1].message.ends_with("template and fromStep"), "{}", errs[1].message);
        assert!(errs[2].message.contains("expect or expectNot"), "{}", errs[2].message);
    }

    #[test]
    fn from_step_must_name_an_earlier_step() {
        let errs = errors(json!({"steps": [
            {"id": "first", "tool": "t", "condition": {"fromStep": "later", "expect": {"success": true}}},
            {"id": "self", "tool": "t", "condition": {"fromStep": "self", "expect": {"success": true}}},
            {"id": "later", "tool": "t", "condition": {"fromStep": "ghost", "expectNot": {"success": false}}},
            {"id": "ok", "tool": "t", "condition": {"fromStep": "first", "expect": {"success": true}}}
        ]}));
        let got: Vec<_> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].0, "spec.steps[0].condition.fromStep");
        assert!(got[0].1.contains("\"later\" (at spec.steps[2].id) does not run before"), "{}", got[0].1);
        assert_eq!(got[1].0, "spec.steps[1].condition.fromStep");
        assert_eq!(got[2].0, "spec.steps[2].condition.fromStep");
        assert!(got[2].1.contains("no step has id \"ghost\""), "{}", got[2].1);
    }

    #[test]
    fn parallel_siblings_cannot_read_each_other() {
        assert_eq!(
            paths(json!({"steps": [{"parallel": [
                {"id": "a", "tool": "t"},
                {"id": "b", "tool": "t", "args": {"x": "{{ .results.a }}"}}
            ]}, {"tool": "t", "args": {"y": "{{ .results.a }}{{ .results.b }}"}}]})),
            ["spec.steps[0].parallel[1].args.x"]
        );
    }

    #[test]
    fn templates_must_name_declared_args() {
        let errs = errors(json!({
            "args": {"app": {"type": "string"}},
            "steps": [{"tool": "t", "args": {"a": "{{ .input.app }}", "nested": {"list": ["ok", "{{ .input.clustr }}"]}}}]
        }));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "spec.steps[0].args.nested.list[1]");
        assert!(errs[0].message.contains(".input.clustr refers to arg \"clustr\""), "{}", errs[0].message);
        assert_eq!(
            paths(json!({"steps": [{"tool": "t", "condition": {"template": "{{ .args.nope }}"}}]})),
            ["spec.steps[0].condition.template"]
        );
    }

    #[test]
    fn templates_must_name_earlier_steps() {
        assert_eq!(
            paths(json!({"steps": [
                {"id": "a", "tool": "t", "args": {"x": "{{ .results.b.out }}"}},
                {"id": "b", "tool": "t", "args": {"x": "{{ .results.nobody }}"}}
            ]})),
            ["spec.steps[0].args.x", "spec.steps[1].args.x"]
        );
    }

    #[test]
    fn loop_variables_exist_only_inside_their_loop() {
        let errs = errors(json!({"steps": [
            {"forEach": {"items": "{{ .vars.item }}", "steps": [{"tool": "t", "args": {"x": "{{ .vars.item }}", "y": "{{ .vars.other }}"}}]}},
            {"tool": "t", "args": {"z": "{{ .vars.item }}"}}
        ]}));
        let got: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            ["spec.steps[0].forEach.items", "spec.steps[0].forEach.steps[0].args.y", "spec.steps[1].args.z"]
        );
        assert!(errs[1].message.contains("in scope: item, item_index"), "{}", errs[1].message);
    }

    #[test]
    fn bare_and_unknown_template_roots_are_rejected() {
        let errs =
            errors(json!({"args": {"app": {"type": "string"}}, "steps": [{"tool": "t", "args": {"x": "{{ .app }}"}}]}));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains(".app is not a template variable; use .input.ARG"), "{}", errs[0].message);
    }

    #[test]
    fn unclosed_templates_and_bad_items_are_rejected() {
        assert_eq!(paths(json!({"steps": [{"tool": "t", "args": {"x": "{{ .input.a"}}]})), ["spec.steps[0].args.x"]);
        assert_eq!(
            paths(json!({"steps": [{"forEach": {"items": 3, "as": "1x", "steps": [{"tool": "t"}]}}]})),
            ["spec.steps[0].forEach.items", "spec.steps[0].forEach.as"]
        );
    }

    #[test]
    fn defaults_must_match_the_arg_type() {
        let errs = errors(json!({
            "args": {
                "n": {"type": "integer", "default": "3"},
                "ok": {"type": "integer", "required": true, "default": 3},
                "flag": {"type": "boolean", "default": 1}
            },
            "steps": [{"tool": "t"}]
        }));
        let got: Vec<_> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(
            got,
            [
                ("spec.args.flag.default", "the default is an integer but the arg's type is boolean"),
                ("spec.args.n.default", "the default is a string but the arg's type is integer"),
            ]
        );
    }

    #[test]
    fn on_failure_steps_may_read_any_main_step() {
        assert!(
            paths(json!({
                "steps": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t"}],
                "onFailure": [{"tool": "undo", "condition": {"fromStep": "b", "expectNot": {"success": true}}}]
            }))
            .is_empty()
        );
    }

    #[test]
    fn every_error_is_reported_in_one_pass() {
        let errs = errors(json!({
            "args": {"n": {"type": "integer", "default": "x"}},
            "steps": [{}, {"tool": "t", "args": {"a": "{{ .input.missing }}"}}, {"tool": "t", "condition": {}}]
        }));
        assert_eq!(errs.len(), 4, "{errs:?}");
    }
}
