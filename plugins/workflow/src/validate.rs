//! The checks of a Workflow, each problem reported with its field path.
//!
//! Errors are what muster refuses: its CRD's schema and admission rules (ids, exactly one of
//! `tool`/`forEach`/`parallel`, condition sources) and its own checks (unique top-level ids,
//! unique ids in a group). Warnings are what muster accepts but is likely a mistake: template
//! references to undeclared args or to steps that have not run, loop variables outside their
//! loop, defaults of the wrong type, fields muster ignores, the deprecated `store`.
//!
//! Template conventions (muster's): args are read as `.input.NAME` (or `.args.NAME`), results
//! of earlier steps as `.results.ID` (or the legacy `.context.ID`; a sub-step of a loop is
//! also `.results.ID_N` for iteration N), and inside a `forEach` its variable as `.vars.NAME`
//! and its index as `.vars.NAME_index`. A bare `.NAME` is not a variable.
//!
//! Execution order: steps run top to bottom; a loop body runs after the loop's `items` are
//! read; the sub-steps of a `parallel` group see the steps before the group but not each
//! other; `onFailure` and the `output` template come after the main steps and may read any.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use steward_sdk::FieldError;

use crate::spec::{ArgSpec, Step, StepCondition, SubStep, WorkflowSpec};
use crate::template;

/// The longest step id muster accepts.
pub const MAX_ID_LEN: usize = 63;

/// The longest workflow description muster accepts, in characters.
pub const MAX_DESCRIPTION_LEN: usize = 1000;

/// The longest step, sub-step or arg description muster accepts, in characters.
pub const MAX_STEP_DESCRIPTION_LEN: usize = 500;

/// What a check of a spec found: the errors that stop it and the warnings that do not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// What muster refuses.
    pub errors: Vec<FieldError>,
    /// What muster accepts but is probably a mistake.
    pub warnings: Vec<FieldError>,
}

/// Every error of `spec`; empty when muster would accept it.
pub fn validate(spec: &WorkflowSpec) -> Vec<FieldError> {
    check(spec).errors
}

/// Every warning of `spec`.
pub fn warnings(spec: &WorkflowSpec) -> Vec<FieldError> {
    check(spec).warnings
}

/// The errors and the warnings of `spec`, in one pass.
pub fn check(spec: &WorkflowSpec) -> Findings {
    let mut v = Validator { f: Findings::default(), args: &spec.args, ids: BTreeMap::new(), loop_ids: BTreeSet::new() };
    v.too_long(spec.description.as_deref(), "spec.description", MAX_DESCRIPTION_LEN);
    for (name, arg) in &spec.args {
        v.check_arg(name, arg);
    }
    v.collect_ids(spec);
    if spec.steps.is_empty() {
        v.error("spec.steps", "a workflow needs at least one step");
    }
    let mut scope = Scope::default();
    for (i, step) in spec.steps.iter().enumerate() {
        v.check_step(step, &format!("spec.steps[{i}]"), &mut scope);
    }
    // onFailure and the output template come after whichever main step ran last.
    let mut after = Scope { done: scope.done, vars: Vec::new() };
    for (i, sub) in spec.on_failure.iter().enumerate() {
        v.check_sub(sub, &format!("spec.onFailure[{i}]"), &mut after);
    }
    if let Some(output) = &spec.output {
        for (key, value) in output {
            v.check_value(value, &format!("spec.output.{key}"), &after);
        }
        v.inert_output_flags(spec);
    }
    v.f
}

/// What a step may refer to: the steps that completed before it, and the loop variables around it.
#[derive(Clone, Debug, Default)]
struct Scope {
    done: BTreeSet<String>,
    vars: Vec<String>,
}

struct Validator<'a> {
    f: Findings,
    args: &'a BTreeMap<String, ArgSpec>,
    /// Every step id, with the path where it is first declared.
    ids: BTreeMap<String, String>,
    /// The ids of sub-steps of loops, readable per iteration as `ID_N`.
    loop_ids: BTreeSet<String>,
}

impl Validator<'_> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.f.errors.push(FieldError::new(path, message));
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.f.warnings.push(FieldError::new(path, message));
    }

    fn too_long(&mut self, text: Option<&str>, path: &str, max: usize) {
        if let Some(n) = text.map(|t| t.chars().count()).filter(|n| *n > max) {
            self.error(path, format!("must be at most {max} characters, not {n}"));
        }
    }

    fn check_arg(&mut self, name: &str, arg: &ArgSpec) {
        self.too_long(arg.description.as_deref(), &format!("spec.args.{name}.description"), MAX_STEP_DESCRIPTION_LEN);
        if let Some(default) = &arg.default
            && !arg.type_.accepts(default)
        {
            self.warn(
                format!("spec.args.{name}.default"),
                format!("the default is {} but the arg's type is {}", json_type(default), arg.type_.as_str()),
            );
        }
    }

    /// Records every id; reports malformed ids and the duplicates muster refuses (among the
    /// top-level steps, within one group), and warns of an id used in two places.
    fn collect_ids(&mut self, spec: &WorkflowSpec) {
        let top: Vec<(String, &str)> =
            spec.steps.iter().enumerate().map(|(i, s)| (format!("spec.steps[{i}].id"), s.id.as_str())).collect();
        self.collect_group(&top, false);
        for (i, step) in spec.steps.iter().enumerate() {
            if let Some(each) = &step.for_each {
                let ids = sub_ids(&each.steps, &format!("spec.steps[{i}].forEach.steps"));
                self.collect_group(&ids, true);
            }
            if let Some(group) = &step.parallel {
                self.collect_group(&sub_ids(group, &format!("spec.steps[{i}].parallel")), false);
            }
        }
        self.collect_group(&sub_ids(&spec.on_failure, "spec.onFailure"), false);
    }

    fn collect_group(&mut self, ids: &[(String, &str)], in_loop: bool) {
        let mut group = BTreeMap::new();
        for (path, id) in ids {
            if let Some(problem) = id_problem(id) {
                self.error(path, problem);
                continue;
            }
            if let Some(first) = group.get(id) {
                self.error(
                    path,
                    format!("step id {id:?} is already used at {first}; ids must be unique in their group"),
                );
                continue;
            }
            group.insert(*id, path.clone());
            match self.ids.get(*id) {
                Some(first) => {
                    let msg = format!("step id {id:?} is also used at {first}; .results.{id} is ambiguous");
                    self.warn(path, msg);
                }
                None => {
                    self.ids.insert(id.to_string(), path.clone());
                    if in_loop {
                        self.loop_ids.insert(id.to_string());
                    }
                }
            }
        }
    }

    /// Checks one top-level step against `scope`, then adds it (and what it ran) to `scope.done`.
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
        if step.tool.as_deref() == Some("") {
            self.error(format!("{p}.tool"), "the tool name must not be empty");
        }
        self.too_long(step.description.as_deref(), &format!("{p}.description"), MAX_STEP_DESCRIPTION_LEN);
        self.deprecated_store(step.store && step.output.is_none(), p);
        if let Some(args) = &step.args {
            if step.tool.is_none() {
                self.warn(format!("{p}.args"), "only a tool step takes args; muster ignores these");
            }
            self.check_args(args, &format!("{p}.args"), scope);
        }
        if let Some(each) = &step.for_each {
            let fp = format!("{p}.forEach");
            if each.items.is_empty() {
                self.error(
                    format!("{fp}.items"),
                    "items must be a template that renders to a list, such as {{ .input.clusters }}",
                );
            } else {
                self.check_template(&each.items, &format!("{fp}.items"), scope);
            }
            if !is_identifier(&each.as_) {
                self.warn(
                    format!("{fp}.as"),
                    "templates can read a loop variable only when it is a letter or '_' followed by letters, digits or '_'",
                );
            }
            if each.steps.is_empty() {
                self.error(format!("{fp}.steps"), "a forEach needs at least one step");
            }
            let mut body = scope.clone();
            body.vars.push(each.as_.clone());
            body.vars.push(format!("{}_index", each.as_));
            for (j, sub) in each.steps.iter().enumerate() {
                self.check_sub(sub, &format!("{fp}.steps[{j}]"), &mut body);
            }
            scope.done.extend(body.done);
        }
        if let Some(group) = &step.parallel {
            if group.is_empty() {
                self.error(format!("{p}.parallel"), "a parallel group needs at least one step");
            }
            let mut finished = BTreeSet::new();
            for (j, sub) in group.iter().enumerate() {
                let mut own = scope.clone();
                self.check_sub(sub, &format!("{p}.parallel[{j}]"), &mut own);
                finished.extend(own.done);
            }
            scope.done.extend(finished);
        }
        scope.done.insert(step.id.clone());
    }

    /// Checks one sub-step (of a loop, a group or onFailure), then adds it to `scope.done`.
    fn check_sub(&mut self, sub: &SubStep, p: &str, scope: &mut Scope) {
        if let Some(cond) = &sub.condition {
            self.check_condition(cond, &format!("{p}.condition"), scope);
        }
        if sub.tool.is_empty() {
            self.error(format!("{p}.tool"), "the tool name must not be empty");
        }
        self.too_long(sub.description.as_deref(), &format!("{p}.description"), MAX_STEP_DESCRIPTION_LEN);
        self.deprecated_store(sub.store && sub.output.is_none(), p);
        if let Some(args) = &sub.args {
            self.check_args(args, &format!("{p}.args"), scope);
        }
        scope.done.insert(sub.id.clone());
    }

    fn deprecated_store(&mut self, uses_store: bool, p: &str) {
        if uses_store {
            self.warn(format!("{p}.store"), "store is a deprecated alias of output; write output: true");
        }
    }

    /// muster's nudge: with an output template, the per-step output flags change nothing.
    fn inert_output_flags(&mut self, spec: &WorkflowSpec) {
        let mut flagged = Vec::new();
        for (i, step) in spec.steps.iter().enumerate() {
            if step.output_enabled() {
                flagged.push(format!("spec.steps[{i}]"));
            }
            let subs = step.for_each.iter().flat_map(|f| {
                f.steps.iter().enumerate().map(move |(j, s)| (format!("spec.steps[{i}].forEach.steps[{j}]"), s))
            });
            let group = step
                .parallel
                .iter()
                .flat_map(|g| g.iter().enumerate().map(move |(j, s)| (format!("spec.steps[{i}].parallel[{j}]"), s)));
            flagged.extend(subs.chain(group).filter(|(_, s)| s.output_enabled()).map(|(p, _)| p));
        }
        flagged.extend(
            spec.on_failure
                .iter()
                .enumerate()
                .filter(|(_, s)| s.output_enabled())
                .map(|(i, _)| format!("spec.onFailure[{i}]")),
        );
        for p in flagged {
            self.warn(
                format!("{p}.output"),
                "spec.output shapes what the workflow returns, so this step's output flag has no effect",
            );
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
        if cond.template.is_none() && cond.expect.is_none() && cond.expect_not.is_none() {
            self.error(
                p,
                "a tool or fromStep condition needs expect or expectNot to say what result lets the step run",
            );
        }
        if let Some(text) = &cond.template {
            self.check_template(text, &format!("{p}.template"), scope);
        }
        if cond.tool.as_deref() == Some("") {
            self.error(format!("{p}.tool"), "the tool name must not be empty");
        }
        if let Some(args) = &cond.args {
            if cond.tool.is_none() {
                self.warn(format!("{p}.args"), "only a tool condition takes args; muster ignores these");
            }
            self.check_args(args, &format!("{p}.args"), scope);
        }
        if let Some(from) = &cond.from_step
            && let Some(problem) = self.step_problem(from, scope, false)
        {
            self.warn(format!("{p}.fromStep"), problem);
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

    /// Template problems are warnings: muster renders templates only when the workflow runs.
    fn check_template(&mut self, text: &str, p: &str, scope: &Scope) {
        let paths = match template::scan(text) {
            Ok(paths) => paths,
            Err(e) => return self.warn(p, e),
        };
        for path in paths {
            if let Some(problem) = self.reference_problem(&path, scope) {
                self.warn(p, problem);
            }
        }
    }

    /// Why the template variable `path` cannot be read at `scope`, or `None`.
    fn reference_problem(&self, path: &[String], scope: &Scope) -> Option<String> {
        let (root, name) = (path.first()?.as_str(), path.get(1));
        let shown = format!(".{}", path.iter().take(2).cloned().collect::<Vec<_>>().join("."));
        match (root, name) {
            (_, None) if matches!(root, "input" | "args" | "results" | "context" | "vars") => None,
            ("input" | "args", Some(name)) => (!self.args.contains_key(name)).then(|| {
                format!("{shown} refers to arg {name:?}, which spec.args does not declare; it is empty unless a caller passes it")
            }),
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
            // `ID_N` is iteration N of loop sub-step ID.
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

fn sub_ids<'a>(subs: &'a [SubStep], path: &str) -> Vec<(String, &'a str)> {
    subs.iter().enumerate().map(|(j, s)| (format!("{path}[{j}].id"), s.id.as_str())).collect()
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

/// How a JSON value reads in a message: `a string`, `an integer`, `an array`, ...
pub fn json_type(v: &Value) -> &'static str {
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
    use steward_sdk::testing::{object, validate, warnings};

    use crate::Workflow;

    fn errors(spec: Value) -> Vec<FieldError> {
        validate::<Workflow>(&object("Workflow", "wf", spec))
    }

    fn paths(spec: Value) -> Vec<String> {
        errors(spec).into_iter().map(|e| e.path).collect()
    }

    fn warned(spec: Value) -> Vec<FieldError> {
        warnings::<Workflow>(&object("Workflow", "wf", spec))
    }

    fn warned_paths(spec: Value) -> Vec<String> {
        warned(spec).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_well_formed_workflow_is_valid_and_quiet() {
        let spec = json!({
            "args": {"app": {"type": "string", "required": true}, "clusters": {"type": "array", "default": ["a"]}},
            "steps": [
                {"id": "info", "tool": "get_info", "args": {"app": "{{ .input.app }}"}},
                {"id": "each", "forEach": {"items": "{{ .input.clusters }}", "as": "cluster", "steps": [
                    {"id": "deploy", "tool": "deploy", "args": {"to": "{{ .vars.cluster }}", "n": "{{ .vars.cluster_index }}",
                                                                "endpoint": "{{ .results.info.endpoint }}"}}
                ]}},
                {"id": "both", "parallel": [
                    {"id": "a", "tool": "a", "args": {"x": "{{ .results.deploy_0.name }}"}},
                    {"id": "b", "tool": "b", "condition": {"fromStep": "each", "expect": {"success": true}}}
                ]},
                {"id": "last", "tool": "z", "condition": {"template": "{{ eq .results.a.ok true }}"}}
            ],
            "onFailure": [{"id": "undo", "tool": "rollback", "args": {"app": "{{ .args.app }}", "after": "{{ .results.last }}"}}],
            "output": {"app": "{{ .input.app }}", "deployed": ["{{ .results.deploy_0 }}"], "n": "{{ len .results.each }}"}
        });
        assert_eq!(errors(spec.clone()), vec![]);
        assert_eq!(warned(spec), vec![]);
    }

    #[test]
    fn musters_structural_rules_are_errors() {
        assert_eq!(paths(json!({"steps": []})), ["spec.steps"]);
        assert_eq!(
            paths(json!({"steps": [{"id": "e", "forEach": {"items": "", "steps": []}}, {"id": "p", "parallel": []}]})),
            ["spec.steps[0].forEach.items", "spec.steps[0].forEach.steps", "spec.steps[1].parallel"]
        );
        assert_eq!(paths(json!({"steps": [{"id": "a", "tool": ""}]})), ["spec.steps[0].tool"]);
        assert_eq!(
            paths(json!({"steps": [{"id": "p", "parallel": [{"id": "s", "tool": ""}]}]})),
            ["spec.steps[0].parallel[0].tool"]
        );
        let long = "x".repeat(501);
        assert_eq!(
            paths(json!({"description": "d".repeat(1001), "args": {"a": {"type": "string", "description": long}},
                         "steps": [{"id": "a", "tool": "t", "description": "x".repeat(501)}]})),
            ["spec.description", "spec.args.a.description", "spec.steps[0].description"]
        );
        // Parse-level: output is a mapping, items a string, ids present, sub-steps do not nest.
        for bad in [
            json!({"steps": [{"id": "a", "tool": "t"}], "output": "{{ .results.a }}"}),
            json!({"steps": [{"id": "e", "forEach": {"items": [1, 2], "steps": [{"id": "s", "tool": "t"}]}}]}),
            json!({"steps": [{"id": "a", "tool": "t", "output": "name"}]}),
            json!({"steps": [{"tool": "t"}]}),
        ] {
            assert_eq!(errors(bad.clone()).len(), 1, "{bad}");
        }
    }

    #[test]
    fn duplicate_ids_are_errors_in_a_group_and_warnings_across() {
        let spec = json!({
            "steps": [
                {"id": "a", "tool": "t"},
                {"id": "a", "tool": "t"},
                {"id": "loop", "forEach": {"items": "{{ .input.x }}", "steps": [{"id": "a", "tool": "t"}, {"id": "s", "tool": "t"}, {"id": "s", "tool": "t"}]}}
            ],
            "onFailure": [{"id": "loop", "tool": "t"}]
        });
        assert_eq!(paths(spec.clone()), ["spec.steps[1].id", "spec.steps[2].forEach.steps[2].id"]);
        let w = warned_paths(spec);
        assert!(w.contains(&"spec.steps[2].forEach.steps[0].id".to_string()), "{w:?}");
        assert!(w.contains(&"spec.onFailure[0].id".to_string()), "{w:?}");
    }

    #[test]
    fn malformed_ids_are_rejected() {
        assert_eq!(paths(json!({"steps": [{"id": "has space", "tool": "t"}]})), ["spec.steps[0].id"]);
        assert_eq!(paths(json!({"steps": [{"id": "x".repeat(64), "tool": "t"}]})), ["spec.steps[0].id"]);
        assert_eq!(paths(json!({"steps": [{"id": "", "tool": "t"}]})), ["spec.steps[0].id"]);
    }

    #[test]
    fn a_step_needs_exactly_one_kind() {
        let errs = errors(json!({"steps": [
            {"id": "none"},
            {"id": "tp", "tool": "t", "parallel": [{"id": "u", "tool": "u"}]},
            {"id": "all", "tool": "t", "forEach": {"items": "{{ .input.l }}", "steps": [{"id": "v", "tool": "u"}]}, "parallel": [{"id": "w", "tool": "v"}]}
        ]}));
        let got: Vec<_> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].1.ends_with("it has none"), "{}", got[0].1);
        assert!(got[1].1.ends_with("it has tool and parallel"), "{}", got[1].1);
        assert!(got[2].1.ends_with("tool and forEach and parallel"), "{}", got[2].1);
    }

    #[test]
    fn a_condition_needs_exactly_one_source_and_an_expectation() {
        let errs = errors(json!({"steps": [
            {"id": "a", "tool": "t"},
            {"id": "b", "tool": "t", "condition": {}},
            {"id": "c", "tool": "t", "condition": {"template": "{{ true }}", "fromStep": "a", "expect": {"success": true}}},
            {"id": "d", "tool": "t", "condition": {"tool": "probe"}},
            {"id": "e", "tool": "t", "condition": {"template": "{{ true }}", "args": {"x": 1}}}
        ]}));
        let got: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.steps[1].condition",
                "spec.steps[1].condition",
                "spec.steps[2].condition",
                "spec.steps[3].condition"
            ]
        );
        assert_eq!(
            warned_paths(
                json!({"steps": [{"id": "e", "tool": "t", "condition": {"template": "{{ true }}", "args": {"x": 1}}}]})
            ),
            ["spec.steps[0].condition.args"]
        );
    }

    #[test]
    fn template_problems_are_warnings_as_muster_renders_only_at_run_time() {
        let spec = json!({
            "args": {"app": {"type": "string"}},
            "steps": [
                {"id": "a", "tool": "t", "args": {"x": "{{ .input.undeclared }}", "y": "{{ .results.b }}", "z": "{{ .vars.item }}"}},
                {"id": "b", "tool": "t", "args": {"w": "{{ .app }}", "u": "{{ .input.app"}},
                {"id": "c", "tool": "t", "condition": {"fromStep": "ghost", "expect": {"success": true}}}
            ],
            "output": {"o": "{{ .input.other }}"}
        });
        assert!(errors(spec.clone()).is_empty());
        let w = warned(spec);
        let got: Vec<_> = w.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.steps[0].args.x",
                "spec.steps[0].args.y",
                "spec.steps[0].args.z",
                "spec.steps[1].args.u",
                "spec.steps[1].args.w",
                "spec.steps[2].condition.fromStep",
                "spec.output.o"
            ]
        );
        assert!(w[0].message.contains("does not declare"), "{}", w[0].message);
        assert!(w[1].message.contains("does not run before"), "{}", w[1].message);
    }

    #[test]
    fn parallel_siblings_cannot_read_each_other() {
        assert_eq!(
            warned_paths(json!({"steps": [{"id": "g", "parallel": [
                {"id": "a", "tool": "t"},
                {"id": "b", "tool": "t", "args": {"x": "{{ .results.a }}"}}
            ]}, {"id": "after", "tool": "t", "args": {"y": "{{ .results.a }}{{ .results.b }}"}}]})),
            ["spec.steps[0].parallel[1].args.x"]
        );
    }

    #[test]
    fn musters_authoring_nudges_and_ignored_fields_are_warnings() {
        let spec = json!({
            "args": {"n": {"type": "integer", "default": "3"}},
            "steps": [
                {"id": "a", "tool": "t", "store": true},
                {"id": "b", "tool": "t", "output": true},
                {"id": "l", "forEach": {"items": "{{ .input.n }}", "as": "my-var", "steps": [{"id": "s", "tool": "t"}]}, "args": {"k": 1}}
            ],
            "output": {"all": "{{ .results }}"}
        });
        assert!(errors(spec.clone()).is_empty());
        assert_eq!(
            warned_paths(spec),
            [
                "spec.args.n.default",
                "spec.steps[0].store",
                "spec.steps[2].args",
                "spec.steps[2].forEach.as",
                "spec.steps[0].output",
                "spec.steps[1].output"
            ]
        );
    }
}
