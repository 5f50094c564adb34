//! Runs of whole workflows against a simulated host: every construct, cancel, timeout, limits.

use serde_json::{Value, json};
use steward_sdk::testing::{self, FakeHost, Read, object};
use steward_sdk::{CallRecord, CallRequest, CallState, ObjectRef, RawObject};

use super::*;

/// How the simulated tool answers one call: `Ok(text)` succeeds, `Err(text)` answers with
/// `isError`, and `None` leaves the call running.
type Responder = dyn Fn(&CallRequest) -> Answer;

/// One answer of the simulated tool (see [`Responder`]).
type Answer = Option<Result<String, String>>;

/// A host that makes the calls a run asks for and answers them with a responder.
struct Sim {
    host: FakeHost,
    run: RawObject,
    calls: Vec<CallRecord>,
    /// The ids asked for anew by each reconcile, in order.
    batches: Vec<Vec<String>>,
    /// Every request, by id, as first asked.
    requests: Vec<CallRequest>,
}

fn workflow(spec: Value) -> RawObject {
    object("Workflow", "wf", spec)
}

fn answer(text: &str, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

fn record(id: &str, tool: &str, state: CallState, result: Option<Value>, error: Option<&str>) -> CallRecord {
    CallRecord {
        id: id.into(),
        tool: tool.into(),
        state,
        attempts: 1,
        result,
        truncated: false,
        error: error.map(str::to_string),
        started_at: Some("2026-01-01T00:00:00Z".into()),
        finished_at: state.is_final().then(|| "2026-01-01T00:00:01Z".to_string()),
    }
}

impl Sim {
    fn new(wf_spec: Value, run_spec: Value) -> Self {
        let host = FakeHost::new().with(workflow(wf_spec));
        Self {
            host,
            run: object("WorkflowRun", "r", run_spec),
            calls: Vec::new(),
            batches: Vec::new(),
            requests: Vec::new(),
        }
    }

    fn status(&self) -> WorkflowRunStatus {
        serde_json::from_str(self.run.status.as_deref().expect("a status")).unwrap()
    }

    /// One reconcile as the host does it: keep the status, make new calls, cancel dropped ones.
    fn reconcile(&mut self) -> Result<Outcome<WorkflowRunStatus>, Error> {
        self.host.set_calls(self.calls.clone());
        let out = testing::reconcile::<WorkflowRun>(&self.host, &self.run, &[])?;
        self.apply(&out);
        Ok(out)
    }

    fn apply(&mut self, out: &Outcome<WorkflowRunStatus>) {
        if let Some(st) = &out.status {
            self.run.status = Some(serde_json::to_string(st).unwrap());
        }
        let wanted = out.calls.clone().expect("a run always says which calls it wants");
        let mut batch = Vec::new();
        for req in &wanted {
            assert!(req.id.len() <= 253, "{}", req.id);
            if !self.calls.iter().any(|c| c.id == req.id) {
                self.calls.push(record(&req.id, &req.tool, CallState::Pending, None, None));
                self.requests.push(req.clone());
                batch.push(req.id.clone());
            }
        }
        for c in &mut self.calls {
            if !c.state.is_final() && !wanted.iter().any(|w| w.id == c.id) {
                c.state = CallState::Cancelled;
            }
        }
        self.batches.push(batch);
    }

    fn set(&mut self, id: &str, state: CallState, result: Option<Value>, error: Option<&str>) {
        let c = self.calls.iter_mut().find(|c| c.id == id).unwrap_or_else(|| panic!("no call {id}"));
        let tool = c.tool.clone();
        *c = record(id, &tool, state, result, error);
    }

    /// Reconciles and answers until the run ends or nothing moves; the final status.
    fn drive(&mut self, respond: &Responder) -> WorkflowRunStatus {
        for _ in 0..100 {
            let out = self.reconcile().expect("reconcile");
            if out.status.as_ref().is_some_and(|s| s.phase.is_final()) {
                return self.status();
            }
            let mut moved = false;
            for i in 0..self.calls.len() {
                if self.calls[i].state.is_final() {
                    continue;
                }
                let req = self.requests.iter().find(|r| r.id == self.calls[i].id).unwrap().clone();
                let tool = req.tool.clone();
                match respond(&req) {
                    Some(Ok(text)) => {
                        self.calls[i] = record(&req.id, &tool, CallState::Succeeded, Some(answer(&text, false)), None)
                    }
                    Some(Err(text)) => {
                        self.calls[i] = record(&req.id, &tool, CallState::Failed, Some(answer(&text, true)), None)
                    }
                    None => continue,
                }
                moved = true;
            }
            if !moved {
                return self.status();
            }
        }
        panic!("the run did not settle")
    }

    fn request(&self, id: &str) -> &CallRequest {
        self.requests
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("{id} was never asked for: {:?}", self.batches))
    }

    fn step(&self, id: &str) -> StepRecord {
        self.status().steps.into_iter().find(|s| s.id == id).unwrap_or_else(|| panic!("no step {id}"))
    }

    fn non_empty_batches(&self) -> Vec<Vec<String>> {
        self.batches.iter().filter(|b| !b.is_empty()).cloned().collect()
    }
}

/// Answers every call with `{"tool": <tool>, "args": <arguments>}`.
fn echo(req: &CallRequest) -> Answer {
    Some(Ok(json!({"tool": req.tool, "args": req.arguments}).to_string()))
}

fn ids(batches: &[&[&str]]) -> Vec<Vec<String>> {
    batches.iter().map(|b| b.iter().map(|s| s.to_string()).collect()).collect()
}

#[test]
fn describes_the_kind_with_the_tools_capability() {
    let info = __steward_plugin().info();
    assert_eq!(info.name, "workflowrun");
    assert_eq!(info.capabilities, ["tools"]);
    let k = &info.kinds[0];
    assert_eq!(
        (k.group.as_str(), k.version.as_str(), k.kind.as_str(), k.plural.as_str(), k.namespaced),
        ("steward.dev", "v1alpha1", "WorkflowRun", "workflowruns", true)
    );
    let s: Value = serde_json::from_str(&k.spec_schema).unwrap();
    assert_eq!(s["properties"]["args"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(s["required"], json!(["workflow"]));
    assert!(!s.to_string().contains("$ref"), "{s}");
}

#[test]
fn spec_checks_name_the_field() {
    let cases = [
        (json!({"workflow": "wf"}), vec![]),
        (json!({"workflow": ""}), vec!["spec.workflow"]),
        (json!({"workflow": "wf", "timeout": "10 minutes"}), vec![]),
        (json!({"workflow": "wf", "timeout": "ten minutes"}), vec!["spec.timeout"]),
        (json!({"workflow": "wf", "timeout": "0s"}), vec!["spec.timeout"]),
        (json!({"workflow": "wf", "bogus": 1}), vec!["spec.bogus"]),
    ];
    for (spec, want) in cases {
        let errs = testing::validate::<WorkflowRun>(&object("WorkflowRun", "r", spec.clone()));
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, want, "{spec}: {errs:?}");
    }
}

#[test]
fn plain_steps_run_in_order_with_args_from_input_and_earlier_results() {
    let mut sim = Sim::new(
        json!({
            "args": {"app": {"type": "string", "required": true}, "list": {"type": "array"}},
            "steps": [
                {"id": "get", "tool": "x_get", "args": {"name": "{{ .input.app }}"}},
                {"id": "use", "tool": "x_use", "args": {
                    "tool": "{{ .results.get.tool }}", "list": "{{ .input.list }}",
                    "text": "app={{ .input.app }} n={{ len .input.list }}", "nested": {"n": ["{{ .results.get.args.name }}"]}, "n": 7
                }}
            ]
        }),
        json!({"workflow": "wf", "args": {"app": "web", "list": [1, 2]}}),
    );
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(sim.non_empty_batches(), ids(&[&["steps/get"], &["steps/use"]]));
    assert_eq!(sim.request("steps/get").arguments, json!({"name": "web"}));
    assert_eq!(
        sim.request("steps/use").arguments,
        json!({"tool": "x_get", "list": [1, 2], "text": "app=web n=2", "nested": {"n": ["web"]}, "n": 7})
    );
    let get = sim.step("get");
    assert_eq!(
        (get.state, get.tool.as_deref(), get.call_id.as_deref()),
        (StepState::Succeeded, Some("x_get"), Some("steps/get"))
    );
    assert_eq!(get.result, Some(json!({"tool": "x_get", "args": {"name": "web"}})));
    assert_eq!((get.attempts, get.finished_at.is_some()), (1, true));
    assert!(st.started_at.is_some() && st.finished_at.is_some());
    assert_eq!(st.message, "completed: 2 succeeded");
    // The last step is not marked output: its object answer is the output, as muster merges it.
    assert_eq!(st.output, Some(json!({"tool": "x_use", "args": sim.request("steps/use").arguments})));
}

#[test]
fn for_each_runs_its_body_per_item_in_order_with_its_variable() {
    let mut sim = Sim::new(
        json!({
            "args": {"clusters": {"type": "array"}},
            "steps": [
                {"id": "each", "forEach": {"items": "{{ .input.clusters }}", "as": "c", "steps": [
                    {"id": "one", "tool": "t1", "args": {"name": "{{ .vars.c.name }}", "i": "{{ .vars.c_index }}"}},
                    {"id": "two", "tool": "t2", "args": {"prev": "{{ .results.one.args.name }}"}}
                ]}},
                {"id": "after", "tool": "t3", "args": {"first": "{{ .results.one_0.args.name }}", "last": "{{ .results.one.args.name }}"}},
                {"id": "plain", "forEach": {"items": "{{ .input.clusters }}", "steps": [{"id": "p", "tool": "t4", "args": {"x": "{{ .vars.item.name }}"}}]}}
            ]
        }),
        json!({"workflow": "wf", "args": {"clusters": [{"name": "a"}, {"name": "b"}]}}),
    );
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(
        sim.non_empty_batches(),
        ids(&[
            &["steps/each/0/one"],
            &["steps/each/0/two"],
            &["steps/each/1/one"],
            &["steps/each/1/two"],
            &["steps/after"],
            &["steps/plain/0/p"],
            &["steps/plain/1/p"]
        ])
    );
    assert_eq!(sim.request("steps/each/1/one").arguments, json!({"name": "b", "i": 1}));
    assert_eq!(sim.request("steps/each/1/two").arguments, json!({"prev": "b"}));
    assert_eq!(sim.request("steps/after").arguments, json!({"first": "a", "last": "b"}));
    assert_eq!(sim.request("steps/plain/1/p").arguments, json!({"x": "b"}));
    let order: Vec<String> = st.steps.iter().map(|s| s.id.clone()).collect();
    assert_eq!(order[..5], ["each", "each[0].one", "each[0].two", "each[1].one", "each[1].two"]);
    assert_eq!(sim.step("each").state, StepState::Succeeded);
    assert_eq!(sim.step("each").tool, None);
}

#[test]
fn for_each_over_something_not_a_list_fails_the_run() {
    for (items, needle) in [("{{ .input.n }}", "not a list"), ("{{ .input.missing }}", "missing")] {
        let mut sim = Sim::new(
            json!({"args": {"n": {"type": "integer", "default": 3}}, "steps": [{"id": "e", "forEach": {"items": items, "steps": [{"id": "s", "tool": "t"}]}}]}),
            json!({"workflow": "wf"}),
        );
        let st = sim.drive(&echo);
        assert_eq!(st.phase, RunPhase::Failed);
        assert!(st.message.contains(needle) && st.message.contains("\"e\""), "{}", st.message);
    }
}

#[test]
fn parallel_asks_for_all_calls_at_once_and_merges_the_results() {
    let mut sim = Sim::new(
        json!({"steps": [
            {"id": "both", "parallel": [
                {"id": "a", "tool": "ta", "args": {"x": 1}},
                {"id": "b", "tool": "tb", "args": {"x": 2}}
            ]},
            {"id": "join", "tool": "tj", "args": {"a": "{{ .results.a.tool }}", "b": "{{ .results.b.args.x }}"}}
        ]}),
        json!({"workflow": "wf"}),
    );
    // Only a answers at first: the group waits for b, and still wants it.
    sim.reconcile().unwrap();
    assert_eq!(sim.batches[0], ["steps/both/a", "steps/both/b"]);
    sim.set("steps/both/a", CallState::Succeeded, Some(answer(r#"{"tool": "ta"}"#, false)), None);
    let out = sim.reconcile().unwrap();
    let wanted: Vec<String> = out.calls.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(wanted, ["steps/both/b"], "a ended, b is still wanted so the host does not cancel it");
    assert_eq!(sim.step("both").state, StepState::Running);
    assert_eq!(sim.step("both.a").state, StepState::Succeeded);
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(sim.request("steps/join").arguments, json!({"a": "ta", "b": 2}));
    let order: Vec<&str> = st.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(order, ["both", "both.a", "both.b", "join"]);
}

#[test]
fn conditions_of_every_kind_decide_whether_a_step_runs() {
    // (condition, what the condition tool answers, whether the guarded step runs)
    let ok = |t: &str| Some(Ok(t.to_string()));
    let cases: Vec<(Value, Answer, bool)> = vec![
        (json!({"template": "{{ eq .input.env \"prod\" }}"}), None, true),
        (json!({"template": "{{ eq .input.env \"dev\" }}"}), None, false),
        (
            json!({"tool": "check", "args": {"e": "{{ .input.env }}"}, "expect": {"success": true, "jsonPath": {"status": "healthy"}}}),
            ok(r#"{"status": "healthy"}"#),
            true,
        ),
        (
            json!({"tool": "check", "expect": {"success": true, "jsonPath": {"status": "healthy"}}}),
            ok(r#"{"status": "sick"}"#),
            false,
        ),
        (json!({"tool": "check", "expect": {"success": true}}), Some(Err("down".into())), false),
        (json!({"tool": "check", "expectNot": {"success": true}}), Some(Err("down".into())), true),
        (
            json!({"tool": "check", "expect": {"jsonPath": {"items[1].n": 2, "{{ len .result.items }}": "{{ .input.count }}"}}}),
            ok(r#"{"items": [{"n": 1}, {"n": 2}]}"#),
            true,
        ),
        (
            json!({"tool": "check", "expectNot": {"jsonPath": {"status": "healthy"}}}),
            ok(r#"{"status": "healthy"}"#),
            false,
        ),
        (json!({"fromStep": "first", "expect": {"success": true}}), None, true),
        (json!({"fromStep": "first", "expectNot": {"success": true}}), None, false),
        (json!({"fromStep": "first", "expect": {"jsonPath": {"args.v": "1"}}}), None, true),
    ];
    for (cond, cond_answer, runs) in cases {
        let mut sim = Sim::new(
            json!({
                "args": {"env": {"type": "string", "default": "prod"}, "count": {"type": "integer", "default": 2}},
                "steps": [{"id": "first", "tool": "t0", "args": {"v": 1}}, {"id": "guarded", "tool": "tg", "condition": cond}, {"id": "last", "tool": "tl"}]
            }),
            json!({"workflow": "wf"}),
        );
        let cond_answer = cond_answer.clone();
        let st = sim.drive(&move |req: &CallRequest| {
            if req.id.ends_with(":condition") { cond_answer.clone() } else { echo(req) }
        });
        assert_eq!(st.phase, RunPhase::Succeeded, "{cond}: {}", st.message);
        let guarded = sim.step("guarded");
        let want = if runs { StepState::Succeeded } else { StepState::Skipped };
        assert_eq!(guarded.state, want, "{cond}: {guarded:?}");
        assert_eq!(guarded.condition.as_ref().and_then(|c| c.holds), Some(runs), "{cond}");
        assert_eq!(sim.requests.iter().any(|r| r.id == "steps/guarded"), runs, "{cond}");
        if cond.get("tool").is_some() {
            assert_eq!(sim.request("steps/guarded:condition").tool, "check");
            assert_eq!(guarded.condition.unwrap().source, "check");
        }
        assert_eq!(sim.step("last").state, StepState::Succeeded, "a skipped step does not stop the run");
    }
    // A condition tool's arguments are templates too.
    let mut sim = Sim::new(
        json!({"args": {"env": {"type": "string"}}, "steps": [{"id": "s", "tool": "t", "condition": {"tool": "check", "args": {"e": "{{ .input.env }}"}, "expect": {"success": true}}}]}),
        json!({"workflow": "wf", "args": {"env": "prod"}}),
    );
    sim.drive(&echo);
    assert_eq!(sim.request("steps/s:condition").arguments, json!({"e": "prod"}));
    assert_eq!(sim.non_empty_batches(), ids(&[&["steps/s:condition"], &["steps/s"]]));
}

#[test]
fn a_group_with_a_false_condition_is_skipped_whole() {
    let mut sim = Sim::new(
        json!({"steps": [
            {"id": "p", "condition": {"template": "false"}, "parallel": [{"id": "a", "tool": "ta"}]},
            {"id": "e", "condition": {"template": "{{ if true }}true{{ end }}"}, "forEach": {"items": "{{ .input.none }}", "steps": [{"id": "x", "tool": "t"}]}}
        ]}),
        json!({"workflow": "wf", "args": {"none": []}}),
    );
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(sim.step("p").state, StepState::Skipped);
    assert_eq!(sim.step("e").state, StepState::Succeeded, "an empty list runs no iteration");
    assert!(sim.requests.is_empty());
}

#[test]
fn a_failure_allowed_lets_the_run_go_on_and_reads_as_muster_records_it() {
    let mut sim = Sim::new(
        json!({"steps": [
            {"id": "flaky", "tool": "tf", "allowFailure": true},
            {"id": "next", "tool": "tn", "args": {"failed": "{{ .results.flaky.isError }}", "why": "{{ .results.flaky.error }}"}},
            {"id": "g", "allowFailure": true, "parallel": [{"id": "ga", "tool": "bad"}, {"id": "gb", "tool": "tb"}]},
            {"id": "l", "allowFailure": true, "forEach": {"items": "{{ .input.xs }}", "steps": [{"id": "li", "tool": "bad"}]}}
        ]}),
        json!({"workflow": "wf", "args": {"xs": [1, 2]}}),
    );
    let st = sim.drive(&|req: &CallRequest| match req.tool.as_str() {
        "tf" | "bad" => Some(Err("boom".into())),
        _ => echo(req),
    });
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(sim.request("steps/next").arguments, json!({"failed": true, "why": "boom"}));
    let flaky = sim.step("flaky");
    assert_eq!((flaky.state, flaky.error.as_deref(), flaky.allow_failure), (StepState::Failed, Some("boom"), true));
    assert_eq!(sim.step("g").state, StepState::Failed, "the group failed, and was allowed to");
    assert_eq!(sim.step("g.gb").state, StepState::Succeeded);
    assert!(!sim.requests.iter().any(|r| r.id == "steps/l/1/li"), "a failed loop stops at the failing iteration");
    assert!(st.message.contains("3 failed and allowed to"), "{}", st.message);
}

#[test]
fn a_failing_step_runs_on_failure_then_fails_the_run() {
    let mut sim = Sim::new(
        json!({
            "steps": [{"id": "ok", "tool": "t"}, {"id": "deploy", "tool": "x_deploy"}, {"id": "never", "tool": "t"}],
            "onFailure": [
                {"id": "alert", "tool": "send", "args": {"why": "{{ .results.deploy }}"}},
                {"id": "broken", "tool": "send", "args": {"x": "{{ .input.nope }}"}},
                {"id": "cleanup", "tool": "clean"}
            ]
        }),
        json!({"workflow": "wf"}),
    );
    let st = sim.drive(&|req: &CallRequest| {
        if req.tool == "x_deploy" { Some(Err("quota exceeded".into())) } else { echo(req) }
    });
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.message, "step \"deploy\" failed: quota exceeded");
    assert_eq!(
        sim.non_empty_batches(),
        ids(&[&["steps/ok"], &["steps/deploy"], &["onFailure/alert"], &["onFailure/cleanup"]])
    );
    assert_eq!(sim.request("onFailure/alert").arguments, json!({"why": "quota exceeded"}));
    assert_eq!(sim.step("onFailure.broken").state, StepState::Failed, "onFailure is best effort");
    assert_eq!(sim.step("onFailure.cleanup").state, StepState::Succeeded);
    assert!(st.steps.iter().all(|s| s.id != "never"));
    assert!(st.output.is_none());
    let out = sim.reconcile().unwrap();
    let complete = out.conditions.iter().find(|c| c.type_ == "Complete").unwrap();
    assert_eq!((complete.status, complete.reason.as_str()), (ConditionStatus::True, "Failed"));
    assert!(complete.message.contains("deploy"));
}

#[test]
fn a_call_that_failed_or_was_cancelled_fails_its_step() {
    for (state, error, want) in [
        (CallState::Failed, Some("server x is not running"), "server x is not running"),
        (CallState::Cancelled, None, "the call was cancelled"),
    ] {
        let mut sim = Sim::new(json!({"steps": [{"id": "s", "tool": "t"}]}), json!({"workflow": "wf"}));
        sim.reconcile().unwrap();
        sim.set("steps/s", state, None, error);
        sim.reconcile().unwrap();
        let st = sim.status();
        assert_eq!(st.phase, RunPhase::Failed);
        assert_eq!(st.message, format!("step \"s\" failed: {want}"));
        assert_eq!(sim.step("s").error.as_deref(), Some(want));
    }
}

#[test]
fn a_template_error_fails_the_run_naming_the_step() {
    let mut sim = Sim::new(
        json!({"steps": [{"id": "s", "tool": "t", "allowFailure": true, "args": {"x": "{{ .results.nothing.here }}"}}], "onFailure": [{"id": "o", "tool": "t"}]}),
        json!({"workflow": "wf"}),
    );
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.message.starts_with("step \"s\": arguments: x:"), "{}", st.message);
    assert_eq!(sim.step("onFailure.o").state, StepState::Succeeded, "muster runs onFailure after an error too");
}

#[test]
fn output_is_the_template_or_the_marked_steps() {
    let steps = json!([
        {"id": "a", "tool": "ta", "output": true},
        {"id": "b", "tool": "tb", "store": true},
        {"id": "e", "forEach": {"items": "{{ .input.xs }}", "steps": [{"id": "i", "tool": "ti", "output": true}]}},
        {"id": "c", "tool": "tc"}
    ]);
    let respond = |req: &CallRequest| -> Answer {
        Some(Ok(match req.tool.as_str() {
            "ta" => r#"{"v": 1}"#.to_string(),
            "tb" => "plain text".to_string(),
            "ti" => "7".to_string(),
            _ => r#"{"merged": true, "n": 2}"#.to_string(),
        }))
    };
    let cases = [
        (
            json!({"steps": steps.clone()}),
            json!({"steps": {"a": {"v": 1}, "b": "plain text", "e[0].i": 7, "e[1].i": 7}, "merged": true, "n": 2}),
        ),
        (
            json!({"steps": steps.clone(), "output": {
                "count": "{{ len .input.xs }}", "a": "{{ .results.a }}", "text": "v={{ .results.a.v }}",
                "list": ["{{ .results.i_1 }}", 3], "inner": {"c": "{{ .results.c.n }}"}, "fixed": true
            }}),
            json!({"count": 2, "a": {"v": 1}, "text": "v=1", "list": [7, 3], "inner": {"c": 2}, "fixed": true}),
        ),
    ];
    for (wf, want) in cases {
        let mut sim = Sim::new(wf.clone(), json!({"workflow": "wf", "args": {"xs": ["p", "q"]}}));
        let st = sim.drive(&respond);
        assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
        assert_eq!(st.output, Some(want), "{wf}");
    }
    let mut sim = Sim::new(
        json!({"steps": [{"id": "a", "tool": "t"}], "output": {"x": "{{ .results.zz }}"}}),
        json!({"workflow": "wf"}),
    );
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.message.starts_with("the output template failed: output.x:"), "{}", st.message);
}

#[test]
fn args_are_checked_against_the_workflow_and_defaults_applied() {
    let wf = json!({
        "args": {"app": {"type": "string", "required": true}, "replicas": {"type": "integer", "default": 3}},
        "steps": [{"id": "s", "tool": "t", "args": {"app": "{{ .input.app }}", "n": "{{ .input.replicas }}"}}]
    });
    let cases = [
        (json!({}), vec![("spec.args.app", "requires")]),
        (json!({"app": 5}), vec![("spec.args.app", "must be of type string")]),
        (json!({"app": "web", "replicas": "3"}), vec![("spec.args.replicas", "not a string")]),
    ];
    for (args, want) in cases {
        let mut sim = Sim::new(wf.clone(), json!({"workflow": "wf", "args": args}));
        let Err(Error::Invalid(errs)) = sim.reconcile() else { panic!("{args}: the args should be refused") };
        assert_eq!(errs.len(), want.len(), "{errs:?}");
        for (e, (path, needle)) in errs.iter().zip(want) {
            assert_eq!(e.path, path);
            assert!(e.message.contains(needle), "{}", e.message);
        }
        assert!(sim.requests.is_empty());
    }
    let mut sim = Sim::new(wf, json!({"workflow": "wf", "args": {"app": "web"}}));
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(st.args.unwrap()["replicas"], json!(3));
    assert_eq!(sim.request("steps/s").arguments, json!({"app": "web", "n": 3}));
}

#[test]
fn a_missing_or_invalid_workflow_keeps_the_run_pending() {
    let mut sim = Sim::new(json!({"steps": [{"id": "s", "tool": "t"}]}), json!({"workflow": "other"}));
    let out = sim.reconcile().unwrap();
    let st = out.status.unwrap();
    assert_eq!(st.phase, RunPhase::Pending);
    assert!(st.message.contains("Workflow \"other\" not found in namespace \"default\""), "{}", st.message);
    assert_eq!(out.calls, Some(vec![]));
    assert!(
        sim.host.reads().contains(&Read::Get(ObjectRef::new("Workflow", "default", "other"))),
        "the read wakes the run"
    );
    let complete = out.conditions.iter().find(|c| c.type_ == "Complete").unwrap();
    assert_eq!((complete.status, complete.reason.as_str()), (ConditionStatus::False, "Pending"));

    sim.host.insert(object("Workflow", "other", json!({"steps": [{"id": "s"}]})));
    let st = sim.reconcile().unwrap().status.unwrap();
    assert_eq!(st.phase, RunPhase::Pending);
    assert!(st.message.contains("is invalid") && st.message.contains("spec.steps[0]"), "{}", st.message);

    sim.host.insert(object("Workflow", "other", json!({"steps": [{"id": "s", "tool": "t"}]})));
    let out = sim.reconcile().unwrap();
    assert_eq!(out.status.unwrap().phase, RunPhase::Running);
    assert_eq!(out.events[0].reason, "Started");
}

#[test]
fn the_run_follows_its_snapshot_not_the_live_workflow() {
    let mut sim =
        Sim::new(json!({"steps": [{"id": "a", "tool": "ta"}, {"id": "b", "tool": "tb"}]}), json!({"workflow": "wf"}));
    sim.reconcile().unwrap();
    let mut changed = workflow(json!({"steps": [{"id": "z", "tool": "tz"}]}));
    changed.generation = 2;
    sim.host.insert(changed);
    let workflow_reads =
        |sim: &Sim| sim.host.reads().iter().filter(|r| matches!(r, Read::Get(o) if o.kind == "Workflow")).count();
    let reads_before = workflow_reads(&sim);
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(sim.non_empty_batches(), ids(&[&["steps/a"], &["steps/b"]]));
    assert_eq!(st.workflow_generation, Some(1));
    assert_eq!(st.workflow.unwrap()["steps"][1]["id"], "b");
    assert_eq!(workflow_reads(&sim), reads_before, "a started run does not read the Workflow");
}

#[test]
fn a_timeout_cancels_what_is_in_flight_and_fails_the_run() {
    let mut sim = Sim::new(
        json!({"steps": [{"id": "slow", "tool": "t"}], "onFailure": [{"id": "o", "tool": "t"}]}),
        json!({"workflow": "wf", "timeout": "10m"}),
    );
    let out = sim.reconcile().unwrap();
    let after = out.requeue_after.expect("woken at the deadline");
    assert!(after.as_secs() > 590 && after.as_secs() <= 600, "{after:?}");
    // Move the start back an hour: the deadline has passed.
    let mut st = sim.status();
    st.started_at = Some(steward_sdk::time::rfc3339(steward_sdk::time::now_secs() - 3600));
    sim.run.status = Some(serde_json::to_string(&st).unwrap());
    let out = sim.reconcile().unwrap();
    assert_eq!(out.calls, Some(vec![]), "the in-flight call is cancelled");
    assert_eq!(sim.calls[0].state, CallState::Cancelled);
    let st = sim.status();
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.message, "timed out after 10m (spec.timeout)");
    assert_eq!(sim.step("slow").state, StepState::Cancelled);
    assert!(st.finished_at.is_some());
    // Ended: later reconciles change nothing and want nothing.
    let again = sim.reconcile().unwrap();
    assert_eq!(again.status.unwrap(), st);
    assert_eq!(again.calls, Some(vec![]));
}

#[test]
fn cancel_stops_the_run_and_its_calls() {
    let mut sim = Sim::new(
        json!({"steps": [{"id": "p", "parallel": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t"}]}]}),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.set("steps/p/a", CallState::Succeeded, Some(answer("1", false)), None);
    sim.set("steps/p/b", CallState::Running, None, None);
    sim.run.spec = json!({"workflow": "wf", "cancel": true}).to_string();
    let out = sim.reconcile().unwrap();
    assert_eq!(out.calls, Some(vec![]));
    assert_eq!(out.events[0].reason, "Cancelled");
    let st = sim.status();
    assert_eq!((st.phase, st.message.as_str()), (RunPhase::Cancelled, "cancelled through spec.cancel"));
    let states: Vec<(&str, StepState)> = st.steps.iter().map(|s| (s.id.as_str(), s.state)).collect();
    assert_eq!(states, [("p", StepState::Cancelled), ("p.a", StepState::Succeeded), ("p.b", StepState::Cancelled)]);
    // Cancelled before it started: no Workflow read, no calls.
    let mut sim = Sim::new(json!({"steps": [{"id": "s", "tool": "t"}]}), json!({"workflow": "wf", "cancel": true}));
    let st = sim.reconcile().unwrap().status.unwrap();
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(sim.host.reads().is_empty());
}

#[test]
fn finalize_cancels_a_running_run_and_keeps_an_ended_one() {
    let mut sim = Sim::new(json!({"steps": [{"id": "s", "tool": "t"}]}), json!({"workflow": "wf"}));
    sim.reconcile().unwrap();
    sim.host.set_calls(sim.calls.clone());
    let out = testing::finalize::<WorkflowRun>(&sim.host, &sim.run, &[]).unwrap();
    assert_eq!(out.calls, Some(vec![]));
    let st = out.status.unwrap();
    assert_eq!((st.phase, st.steps[0].state), (RunPhase::Cancelled, StepState::Cancelled));
    assert_eq!(st.message, "cancelled: the run is being deleted");

    let mut sim = Sim::new(json!({"steps": [{"id": "s", "tool": "t"}]}), json!({"workflow": "wf"}));
    let done = sim.drive(&echo);
    let out = testing::finalize::<WorkflowRun>(&sim.host, &sim.run, &[]).unwrap();
    assert_eq!(out.status.unwrap(), done);
    assert_eq!(out.calls, Some(vec![]));
}

#[test]
fn large_values_are_cut_with_a_note_and_templates_read_them_whole() {
    let big = "x".repeat(40_000);
    let mut sim = Sim::new(
        json!({"steps": [{"id": "big", "tool": "t"}, {"id": "len", "tool": "t2", "args": {"n": "{{ len .results.big.data }}"}}]}),
        json!({"workflow": "wf"}),
    );
    let big2 = big.clone();
    let st = sim.drive(&move |req: &CallRequest| {
        if req.tool == "t" { Some(Ok(json!({"data": big2}).to_string())) } else { echo(req) }
    });
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(sim.request("steps/len").arguments, json!({"n": "40000"}));
    let rec = sim.step("big");
    assert!(rec.truncated);
    let note = rec.note.unwrap();
    assert!(note.contains("result cut: 40011 bytes") && note.contains("16384"), "{note}");
    assert!(rec.result.unwrap().as_str().unwrap().len() <= limit::STEP_VALUE_LIMIT);
    assert!(!sim.step("len").truncated);
    // A result the host cut says so too.
    let mut sim = Sim::new(json!({"steps": [{"id": "s", "tool": "t"}]}), json!({"workflow": "wf"}));
    sim.reconcile().unwrap();
    sim.calls[0] = CallRecord {
        truncated: true,
        ..record("steps/s", "t", CallState::Succeeded, Some(answer("\"cut\"", false)), None)
    };
    sim.reconcile().unwrap();
    let rec = sim.step("s");
    assert!(rec.truncated && rec.note.unwrap().contains("host cut"));
}

#[test]
fn results_are_parsed_from_text_when_they_are_json() {
    let cases = [
        (r#"{"a": {"b": [1, 2]}}"#, "{{ .results.s.a.b }}", json!([1, 2])),
        ("[1, 2, 3]", "{{ index .results.s 2 }}", json!("3")),
        ("not json", "{{ .results.s }}", json!("not json")),
        ("12", "{{ .results.s }}", json!(12)),
    ];
    for (text, template, want) in cases {
        let mut sim = Sim::new(
            json!({"steps": [{"id": "s", "tool": "t"}, {"id": "u", "tool": "u", "args": {"v": template}}]}),
            json!({"workflow": "wf"}),
        );
        let text = text.to_string();
        sim.drive(&move |req: &CallRequest| if req.tool == "t" { Some(Ok(text.clone())) } else { echo(req) });
        assert_eq!(sim.request("steps/u").arguments["v"], want, "{template}");
    }
}

#[test]
fn a_nested_workflow_is_just_a_tool_call() {
    let mut sim = Sim::new(
        json!({"steps": [{"id": "child", "tool": "workflow_child", "args": {"x": 1}}]}),
        json!({"workflow": "wf"}),
    );
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(sim.request("steps/child").tool, "workflow_child");
}

#[test]
fn replays_are_deterministic_and_never_ask_for_an_ended_call_again() {
    let wf = json!({
        "args": {"xs": {"type": "array", "default": ["a", "b"]}},
        "steps": [
            {"id": "first", "tool": "t", "args": {"x": "{{ .input.xs }}"}},
            {"id": "p", "parallel": [{"id": "a", "tool": "ta"}, {"id": "b", "tool": "tb", "condition": {"tool": "c", "expect": {"success": true}}}]},
            {"id": "e", "forEach": {"items": "{{ .input.xs }}", "steps": [{"id": "i", "tool": "ti", "args": {"v": "{{ .vars.item }}"}}]}}
        ]
    });
    let mut sim = Sim::new(wf, json!({"workflow": "wf"}));
    let mut seen_ended: Vec<String> = Vec::new();
    for _ in 0..20 {
        sim.host.set_calls(sim.calls.clone());
        let one = testing::reconcile::<WorkflowRun>(&sim.host, &sim.run, &[]).unwrap();
        let two = testing::reconcile::<WorkflowRun>(&sim.host, &sim.run, &[]).unwrap();
        assert_eq!(one.calls, two.calls, "same inputs, same calls");
        let (mut s1, mut s2) = (one.status.clone().unwrap(), two.status.clone().unwrap());
        (s1.finished_at, s2.finished_at) = (None, None);
        assert_eq!(s1, s2, "same inputs, same status");
        for id in &seen_ended {
            assert!(!one.calls.as_ref().unwrap().iter().any(|c| &c.id == id), "{id} ended and is asked for again");
        }
        sim.apply(&one);
        if one.status.unwrap().phase.is_final() {
            break;
        }
        for c in sim.calls.iter_mut().filter(|c| !c.state.is_final()) {
            *c = record(&c.id.clone(), &c.tool.clone(), CallState::Succeeded, Some(answer("{}", false)), None);
            seen_ended.push(c.id.clone());
        }
    }
    assert_eq!(sim.status().phase, RunPhase::Succeeded);
    let all: Vec<&str> = sim.requests.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(all, ["steps/first", "steps/p/a", "steps/p/b:condition", "steps/p/b", "steps/e/0/i", "steps/e/1/i"]);
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "each call asked for once");
}

impl Sim {
    /// A failover in Kubernetes mode: the new leader's store holds none of the run's calls;
    /// the run's status (in the cluster) stays.
    fn failover(&mut self) {
        self.calls.clear();
    }

    /// Reconciles twice over the same host and status: both answers must be the same.
    fn reconcile_twice(&mut self) -> Outcome<WorkflowRunStatus> {
        self.host.set_calls(self.calls.clone());
        let one = testing::reconcile::<WorkflowRun>(&self.host, &self.run, &[]).unwrap();
        let two = testing::reconcile::<WorkflowRun>(&self.host, &self.run, &[]).unwrap();
        assert_eq!(one.calls, two.calls, "same inputs, same calls");
        let (mut s1, mut s2) = (one.status.clone().unwrap(), two.status.clone().unwrap());
        (s1.finished_at, s2.finished_at) = (None, None);
        assert_eq!(s1, s2, "same inputs, same status");
        self.apply(&one);
        one
    }

    fn answer(&mut self, id: &str, text: &str) {
        self.set(id, CallState::Succeeded, Some(answer(text, false)), None);
    }

    fn times_asked(&self, id: &str) -> usize {
        self.requests.iter().filter(|r| r.id == id).count()
    }
}

#[test]
fn after_a_failover_steps_done_in_the_status_are_not_run_again() {
    let mut sim = Sim::new(
        json!({"steps": [
            {"id": "a", "tool": "ta", "args": {"n": 1}},
            {"id": "b", "tool": "tb", "args": {"from_a": "{{ .results.a.v }}"}},
            {"id": "c", "tool": "tc", "args": {"a": "{{ .results.a.v }}", "b": "{{ .results.b.w }}"}}
        ]}),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.answer("steps/a", r#"{"v": "A"}"#);
    sim.reconcile().unwrap();
    sim.answer("steps/b", r#"{"w": "B"}"#);
    sim.reconcile().unwrap();
    let before = sim.status();
    assert_eq!(sim.step("b").state, StepState::Succeeded);
    assert_eq!(sim.step("c").state, StepState::Pending);

    sim.failover();
    let out = sim.reconcile_twice();
    let wanted: Vec<String> = out.calls.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(wanted, ["steps/c"], "a and b ended in the status: only c is asked for");
    assert_eq!(sim.batches.last().unwrap(), &["steps/c"], "c was pending: asked again (at least once)");
    let after = sim.status();
    assert_eq!(after.steps[..2], before.steps[..2], "the ended records are kept as they were");
    assert_eq!(sim.requests.last().unwrap().arguments, json!({"a": "A", "b": "B"}), "results read from the status");

    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!((sim.times_asked("steps/a"), sim.times_asked("steps/b")), (1, 1));
    assert_eq!(st.message, "completed: 3 succeeded");
    assert_eq!(st.output, Some(json!({"tool": "tc", "args": {"a": "A", "b": "B"}})));
}

#[test]
fn after_a_failover_a_half_done_parallel_group_and_loop_go_on_where_they_were() {
    let mut sim = Sim::new(
        json!({
            "args": {"xs": {"type": "array", "default": ["x", "y", "z"]}},
            "steps": [
                {"id": "p", "parallel": [{"id": "a", "tool": "ta"}, {"id": "b", "tool": "tb"}]},
                {"id": "e", "forEach": {"items": "{{ .input.xs }}", "steps": [{"id": "one", "tool": "t1", "args": {"v": "{{ .vars.item }}", "a": "{{ .results.a.tool }}"}}]}},
                {"id": "after", "tool": "t2", "args": {"first": "{{ .results.one_0.args.v }}", "last": "{{ .results.one.args.v }}", "b": "{{ .results.b.tool }}"}}
            ]
        }),
        json!({"workflow": "wf"}),
    );
    let done = |tool: &str| json!({"tool": tool}).to_string();
    sim.reconcile().unwrap();
    sim.answer("steps/p/a", &done("ta"));
    sim.set("steps/p/b", CallState::Running, None, None);
    sim.reconcile().unwrap();
    assert_eq!((sim.step("p.a").state, sim.step("p.b").state), (StepState::Succeeded, StepState::Running));

    // The group: a ended in the status, b was running.
    sim.failover();
    let out = sim.reconcile_twice();
    let wanted: Vec<String> = out.calls.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(wanted, ["steps/p/b"]);
    assert_eq!(sim.step("p.a").state, StepState::Succeeded);

    // The loop: items 0 and 1 ended in the status, item 2 was asked for.
    sim.answer("steps/p/b", &done("tb"));
    for i in 0..2 {
        sim.reconcile().unwrap();
        let req = sim.request(&format!("steps/e/{i}/one")).clone();
        sim.answer(&req.id, &json!({"args": req.arguments}).to_string());
    }
    sim.reconcile().unwrap();
    assert_eq!(sim.batches.last().unwrap(), &["steps/e/2/one"]);
    sim.failover();
    let out = sim.reconcile_twice();
    let wanted: Vec<String> = out.calls.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(wanted, ["steps/e/2/one"]);
    assert_eq!(sim.requests.last().unwrap().arguments, json!({"v": "z", "a": "ta"}));

    let st = sim.drive(&|req: &CallRequest| Some(Ok(json!({"args": req.arguments}).to_string())));
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(sim.request("steps/after").arguments, json!({"first": "x", "last": "z", "b": "tb"}));
    for id in ["steps/p/a", "steps/e/0/one", "steps/e/1/one", "steps/after"] {
        assert_eq!(sim.times_asked(id), 1, "{id}");
    }
    // Pending or running when the store was lost: asked again (the at-least-once rule).
    assert_eq!((sim.times_asked("steps/p/b"), sim.times_asked("steps/e/2/one")), (2, 2));
    let order: Vec<&str> = st.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(order, ["p", "p.a", "p.b", "e", "e[0].one", "e[1].one", "e[2].one", "after"]);
}

#[test]
fn after_a_failover_failures_recorded_in_the_status_stay_as_they_ended() {
    // Allowed to fail: stays failed, still allowed, not run again; later steps read it as before.
    let mut sim = Sim::new(
        json!({"steps": [
            {"id": "flaky", "tool": "tf", "allowFailure": true},
            {"id": "next", "tool": "tn", "args": {"failed": "{{ .results.flaky.isError }}", "why": "{{ .results.flaky.error }}"}}
        ]}),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.set("steps/flaky", CallState::Failed, Some(answer("boom", true)), None);
    sim.reconcile().unwrap();
    let flaky = sim.step("flaky");
    sim.failover();
    let out = sim.reconcile_twice();
    let wanted: Vec<String> = out.calls.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(wanted, ["steps/next"]);
    assert_eq!(sim.step("flaky"), flaky);
    assert_eq!((flaky.state, flaky.allow_failure, flaky.error.as_deref()), (StepState::Failed, true, Some("boom")));
    assert_eq!(sim.requests.last().unwrap().arguments, json!({"failed": true, "why": "boom"}));
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert_eq!(sim.times_asked("steps/flaky"), 1);
    assert_eq!(st.message, "completed: 1 succeeded, 1 failed and allowed to");

    // Not allowed to fail, onFailure under way: the run still fails, onFailure goes on, the
    // failed step is not run again.
    let mut sim = Sim::new(
        json!({
            "steps": [{"id": "deploy", "tool": "x_deploy"}],
            "onFailure": [{"id": "alert", "tool": "send", "args": {"why": "{{ .results.deploy }}"}}, {"id": "cleanup", "tool": "clean"}]
        }),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.set("steps/deploy", CallState::Failed, Some(answer("quota exceeded", true)), None);
    sim.reconcile().unwrap();
    sim.answer("onFailure/alert", "{}");
    sim.reconcile().unwrap();
    assert_eq!(sim.batches.last().unwrap(), &["onFailure/cleanup"]);
    sim.failover();
    let out = sim.reconcile_twice();
    let wanted: Vec<String> = out.calls.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(wanted, ["onFailure/cleanup"]);
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.message, "step \"deploy\" failed: quota exceeded");
    assert_eq!((sim.times_asked("steps/deploy"), sim.times_asked("onFailure/alert")), (1, 1));
    assert_eq!(sim.step("deploy").error.as_deref(), Some("quota exceeded"));

    // A call the host failed without an answer (refused, cancelled) stays failed too.
    let mut sim = Sim::new(
        json!({"steps": [{"id": "s", "tool": "t", "allowFailure": true}, {"id": "u", "tool": "t"}]}),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.set("steps/s", CallState::Cancelled, None, Some("the call was cancelled"));
    sim.reconcile().unwrap();
    sim.failover();
    let out = sim.reconcile_twice();
    assert_eq!(out.calls.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>(), ["steps/u"]);
    assert_eq!(sim.step("s").state, StepState::Failed);
}

#[test]
fn after_a_failover_conditions_recorded_in_the_status_are_not_asked_again() {
    let mut sim = Sim::new(
        json!({"steps": [
            {"id": "yes", "tool": "t1", "condition": {"tool": "check", "expect": {"success": true}}},
            {"id": "no", "tool": "t2", "condition": {"tool": "check", "expect": {"success": false}}},
            {"id": "g", "condition": {"tool": "check", "expect": {"success": true}}, "parallel": [{"id": "ga", "tool": "t3"}]},
            {"id": "last", "tool": "t4"}
        ]}),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.answer("steps/yes:condition", "{}");
    sim.reconcile().unwrap();
    // yes: condition decided, its call in flight; the store is lost.
    sim.failover();
    let out = sim.reconcile_twice();
    assert_eq!(out.calls.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>(), ["steps/yes"]);
    sim.answer("steps/yes", "{}");
    sim.reconcile().unwrap();
    sim.answer("steps/no:condition", "{}");
    sim.reconcile().unwrap();
    sim.answer("steps/g:condition", "{}");
    sim.reconcile().unwrap();
    assert_eq!(sim.step("no").state, StepState::Skipped);
    assert_eq!(sim.batches.last().unwrap(), &["steps/g/ga"]);
    // Skipped by a condition, a group's condition decided: both recorded in the status.
    sim.failover();
    let out = sim.reconcile_twice();
    assert_eq!(out.calls.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>(), ["steps/g/ga"]);
    assert_eq!(sim.step("no").condition.unwrap().holds, Some(false));
    let st = sim.drive(&echo);
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    for id in ["steps/yes:condition", "steps/no:condition", "steps/g:condition"] {
        assert_eq!(sim.times_asked(id), 1, "{id}");
    }
    assert_eq!(sim.times_asked("steps/yes"), 2, "in flight when the store was lost: asked again");
    assert!(!sim.requests.iter().any(|r| r.id == "steps/no"));
    assert_eq!(st.message, "completed: 3 succeeded, 1 skipped");
}

#[test]
fn host_records_win_over_the_status() {
    let mut sim = Sim::new(
        json!({"steps": [{"id": "a", "tool": "ta"}, {"id": "b", "tool": "tb", "args": {"v": "{{ .results.a.v }}"}}]}),
        json!({"workflow": "wf"}),
    );
    sim.reconcile().unwrap();
    sim.answer("steps/a", r#"{"v": "host"}"#);
    sim.reconcile().unwrap();
    // The status says otherwise about a (as a stale status would): the host's record decides.
    let mut st = sim.status();
    st.steps[0].state = StepState::Failed;
    st.steps[0].result = Some(json!({"v": "status"}));
    st.steps[0].error = Some("stale".into());
    sim.run.status = Some(serde_json::to_string(&st).unwrap());
    let out = sim.reconcile_twice();
    let calls = out.calls.unwrap();
    assert_eq!((calls[0].id.as_str(), &calls[0].arguments), ("steps/b", &json!({"v": "host"})));
    let a = sim.step("a");
    assert_eq!((a.state, a.result, a.error), (StepState::Succeeded, Some(json!({"v": "host"})), None));
    // A call the status says ended but the host holds as running: still wanted.
    let mut st = sim.status();
    st.steps[1].state = StepState::Succeeded;
    st.steps[1].result = Some(json!("status"));
    sim.run.status = Some(serde_json::to_string(&st).unwrap());
    sim.set("steps/b", CallState::Running, None, None);
    let out = sim.reconcile_twice();
    assert_eq!(out.calls.unwrap().len(), 1);
    assert_eq!(sim.step("b").state, StepState::Running);
}

#[test]
fn a_large_loop_keeps_the_status_within_its_budget() {
    const N: usize = 2000;
    let mut sim = Sim::new(
        json!({
            "args": {"xs": {"type": "array"}},
            "steps": [
                {"id": "e", "forEach": {"items": "{{ .input.xs }}", "as": "x", "steps": [{"id": "one", "tool": "t", "args": {"i": "{{ .vars.x_index }}", "x": "{{ .vars.x }}"}}]}},
                {"id": "after", "tool": "t2", "args": {"first": "{{ .results.one_0.i }}", "last": "{{ .results.one.i }}"}}
            ],
            "output": {"n": "{{ len .input.xs }}", "first": "{{ .results.one_0.pad }}", "last": "{{ .results.one.i }}", "after": "{{ .results.after.args }}"}
        }),
        json!({"workflow": "wf", "args": {"xs": (0..N).map(|i| format!("item-{i}")).collect::<Vec<_>>()}}),
    );
    let pad = "p".repeat(1000);
    let reply = |i: usize| answer(&json!({"i": i, "pad": pad}).to_string(), false);
    // The host made every call of the loop but the last (a replay asks for each in turn).
    sim.calls = (0..N - 1)
        .map(|i| record(&format!("steps/e/{i}/one"), "t", CallState::Succeeded, Some(reply(i)), None))
        .collect();
    let steps_size = |st: &WorkflowRunStatus| serde_json::to_string(&st.steps).unwrap().len();
    sim.reconcile().unwrap();
    let st = sim.status();
    assert_eq!(sim.batches.last().unwrap(), &[format!("steps/e/{}/one", N - 1)]);
    assert!(steps_size(&st) <= limit::STEPS_BUDGET, "{} bytes", steps_size(&st));
    assert_eq!(st.steps.len(), N + 1);
    let dropped = st.steps.iter().filter(|r| r.note.as_deref() == Some(limit::STEPS_BUDGET_NOTE)).count();
    assert!(dropped > N / 2, "{dropped}");
    let middle = sim.step("e[1000].one");
    assert_eq!(
        (middle.state, middle.call_id.as_deref(), middle.attempts),
        (StepState::Succeeded, Some("steps/e/1000/one"), 1)
    );
    assert!(middle.truncated && middle.result.is_none() && middle.arguments.is_none() && middle.finished_at.is_some());
    assert_eq!(sim.step("e[0].one").result.unwrap()["i"], 0, "one_0 is read later: its value stays");
    assert_eq!(sim.step(&format!("e[{}].one", N - 2)).result.unwrap()["i"], N - 2, "the current .results.one stays");

    // The host's store is lost: the run goes on from its status, within its budget.
    sim.failover();
    sim.reconcile_twice();
    assert_eq!(sim.batches.last().unwrap(), &[format!("steps/e/{}/one", N - 1)]);
    let st = sim.drive(&|req: &CallRequest| {
        if req.tool == "t" {
            Some(Ok(json!({"i": req.arguments["i"], "pad": "p".repeat(1000)}).to_string()))
        } else {
            echo(req)
        }
    });
    assert_eq!(st.phase, RunPhase::Succeeded, "{}", st.message);
    assert!(steps_size(&st) <= limit::STEPS_BUDGET, "{} bytes", steps_size(&st));
    assert_eq!(sim.request("steps/after").arguments, json!({"first": 0, "last": N - 1}));
    assert_eq!(st.output, Some(json!({"n": N, "first": pad, "last": N - 1, "after": {"first": 0, "last": N - 1}})));
    assert_eq!(st.message, format!("completed: {} succeeded", N + 1));
    assert_eq!(sim.requests.iter().filter(|r| r.id.starts_with("steps/e/")).count(), 2, "only the last item, twice");
}

mod tool_policy {
    use super::*;
    use crate::policy::{EFFECTIVE_KIND, TOOL_DENIED};

    fn git_server() -> RawObject {
        let mut s = object("MCPServer", "git", json!({"type": "stdio", "command": "git-mcp"}));
        s.status = Some(json!({"tools": ["x_git_push", "x_git_status"]}).to_string());
        s
    }

    fn denying_push() -> RawObject {
        object(
            EFFECTIVE_KIND,
            "git",
            json!({"target": {"kind": "MCPServer", "name": "git"}, "deny": ["x_git_push"],
                   "decidedBy": {"policy": "no-push", "rules": "overrides", "level": "Namespace"},
                   "policies": ["git-defaults", "no-push"]}),
        )
    }

    fn echo(req: &CallRequest) -> Answer {
        Some(Ok(req.tool.clone()))
    }

    #[test]
    fn a_denied_tool_fails_its_step_and_the_run_without_a_call() {
        let mut sim = Sim::new(
            json!({"steps": [{"id": "look", "tool": "x_git_status"}, {"id": "push", "tool": "x_git_push"}]}),
            json!({"workflow": "wf"}),
        );
        sim.host.insert(git_server());
        sim.host.insert(denying_push());
        let st = sim.drive(&echo);
        assert_eq!(st.phase, RunPhase::Failed);
        assert_eq!(sim.non_empty_batches(), ids(&[&["steps/look"]]), "x_git_push is never asked for");
        let push = sim.step("push");
        assert_eq!((push.state, push.reason.as_deref()), (StepState::Failed, Some(TOOL_DENIED)));
        let err = push.error.unwrap();
        assert!(err.contains("\"x_git_push\"") && err.contains("EffectiveToolPolicy default/git"), "{err}");
        assert!(err.contains("no-push") && err.contains("git-defaults"), "{err}");
        assert!(st.message.contains("step \"push\" failed: tool \"x_git_push\" is denied"), "{}", st.message);
        let out = sim.reconcile().unwrap();
        for ty in ["Ready", "Complete", "Succeeded"] {
            let c = out.conditions.iter().find(|c| c.type_ == ty).unwrap();
            assert_eq!(c.reason, TOOL_DENIED, "{ty}");
        }
        assert_eq!(sim.step("look").state, StepState::Succeeded);
    }

    #[test]
    fn without_an_effective_tool_policy_every_tool_is_called() {
        let mut sim = Sim::new(json!({"steps": [{"id": "push", "tool": "x_git_push"}]}), json!({"workflow": "wf"}));
        sim.host.insert(git_server());
        let st = sim.drive(&echo);
        assert_eq!(st.phase, RunPhase::Succeeded);
        assert!(
            sim.host.reads().contains(&Read::Get(ObjectRef::new(EFFECTIVE_KIND, "default", "git"))),
            "the run reads the policy it would obey, so its appearance wakes the run"
        );
    }

    #[test]
    fn a_denial_allowed_to_fail_lets_the_run_go_on_and_stays_recorded() {
        let mut sim = Sim::new(
            json!({"steps": [{"id": "push", "tool": "x_git_push", "allowFailure": true},
                             {"id": "after", "tool": "x_git_status"}]}),
            json!({"workflow": "wf"}),
        );
        sim.host.insert(git_server());
        sim.host.insert(denying_push());
        sim.reconcile().unwrap();
        assert_eq!(sim.step("push").reason.as_deref(), Some(TOOL_DENIED));
        // The policy goes away mid-run: the refused step stays refused (the replay keeps its record).
        sim.host.insert(object(EFFECTIVE_KIND, "git", json!({"target": {"kind": "MCPServer", "name": "git"}})));
        let st = sim.drive(&echo);
        assert_eq!(st.phase, RunPhase::Succeeded);
        assert_eq!(sim.non_empty_batches(), ids(&[&["steps/after"]]));
        assert_eq!(sim.step("push").state, StepState::Failed);
    }

    #[test]
    fn a_denied_condition_tool_fails_its_step() {
        let mut sim = Sim::new(
            json!({"steps": [{"id": "s", "tool": "x_git_status", "condition": {"tool": "x_git_push", "expect": {"success": true}}}]}),
            json!({"workflow": "wf"}),
        );
        sim.host.insert(git_server());
        sim.host.insert(denying_push());
        let st = sim.drive(&echo);
        assert_eq!(st.phase, RunPhase::Failed);
        assert!(sim.calls.is_empty(), "{:?}", sim.calls);
        assert_eq!(sim.step("s").reason.as_deref(), Some(TOOL_DENIED));
        assert!(st.message.contains("condition: tool \"x_git_push\" is denied"), "{}", st.message);
    }
}
