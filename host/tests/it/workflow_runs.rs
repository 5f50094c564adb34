//! Workflow runs end to end: the WorkflowRun plugin, the `tools` capability and real MCP servers
//! (the example server, with its hostile tools), through the real `steward` binary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::common::host::Host;

const T: Duration = Duration::from_secs(90);

/// The grant every host here gives the workflowrun plugin.
pub(crate) const GRANT: &str =
    "  workflowrun: { capabilities: [tools], tools: { allow: [\"x_ex_*\", \"workflow_*\"] } }\n";

pub(crate) fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

/// A host with the workflowrun plugin granted `tools` (for `x_ex_*` and `workflow_*`), and an
/// MCPServer `ex` (tools `x_ex_*`) journaling its calls to `journal`.
pub(crate) async fn host_with_server(extra: &str) -> (Host, PathBuf) {
    let mut h = Host::new(&format!("{GRANT}{extra}"));
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    let journal = h.dir.path().join("journal.jsonl");
    h.start().await;
    h.write("server.yaml", &server("ex", &journal));
    h.wait_object("MCPServer/default/ex", T, "Running and healthy", |v| {
        v.is_some_and(|v| v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy")
    })
    .await;
    (h, journal)
}

pub(crate) fn server(name: &str, journal: &Path) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\", \"--journal\", \"{}\"]\n  autoStart: true\n  toolPrefix: ex\n  timeout: 10\n",
        server_bin(),
        journal.display()
    )
}

pub(crate) fn workflow(name: &str, spec: &str) -> String {
    format!("apiVersion: steward.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

pub(crate) fn run_doc(name: &str, workflow: &str, args: Value) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: WorkflowRun\nmetadata:\n  name: {name}\nspec:\n  workflow: {workflow}\n  args: {args}\n"
    )
}

/// Waits for the Workflow `name` to be Ready (every tool it names is offered).
pub(crate) async fn workflow_ready(h: &Host, name: &str) {
    h.wait_object(&format!("Workflow/default/{name}"), T, "Ready", |v| {
        v.and_then(|v| v["conditions"].as_array())
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
    .await;
}

pub(crate) fn phase(v: Option<&Value>) -> &str {
    v.and_then(|v| v["status"]["phase"].as_str()).unwrap_or("")
}

pub(crate) async fn wait_phase(h: &Host, run: &str, phases: &[&str]) -> Value {
    h.wait_object(&format!("WorkflowRun/default/{run}"), T, &format!("phase in {phases:?}"), |v| {
        phases.contains(&phase(v))
    })
    .await
    .unwrap()
}

fn step<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["status"]["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id} in {:#}", run["status"]["steps"]))
}

/// The journal's lines as JSON.
fn journal(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// How many calls of `tool` with `arguments` the servers received.
fn calls_of(path: &Path, tool: &str, arguments: &Value) -> usize {
    journal(path).iter().filter(|e| e["event"] == "call" && e["tool"] == tool && &e["arguments"] == arguments).count()
}

const CONSTRUCTS: &str = r#"  args:
    greeting: { type: string, required: true }
    items: { type: array, default: ["a", "b"] }
    skip: { type: boolean, default: true }
  steps:
    - id: hello
      tool: x_ex_echo
      args: { message: "{{ .input.greeting }}" }
      output: true
    - id: data
      tool: x_ex_json
      args:
        value: { name: "{{ .input.greeting }}", n: 2 }
    - id: skipped
      tool: x_ex_echo
      args: { message: never }
      condition: { template: "{{ not .input.skip }}" }
    - id: after
      tool: x_ex_echo
      args: { message: "after {{ .results.data.name }}" }
      condition: { fromStep: hello, expect: { success: true } }
    - id: each
      forEach:
        items: "{{ .input.items }}"
        as: it
        steps:
          - id: say
            tool: x_ex_echo
            args: { message: "item {{ .vars.it }}" }
    - id: both
      parallel:
        - { id: left, tool: x_ex_count, args: { key: left } }
        - { id: right, tool: x_ex_count, args: { key: right } }
    - id: tolerated
      tool: x_ex_fail
      args: { message: expected failure }
      allowFailure: true
    - id: checked
      tool: x_ex_echo
      args: { message: checked }
      condition:
        tool: x_ex_json
        args: { value: { ok: true } }
        expect: { jsonPath: { ok: true } }
    - id: nested
      tool: workflow_inner
      args: { who: "{{ .input.greeting }}" }
      store: true
  output:
    greeting: "{{ .results.hello }}"
    name: "{{ .results.data.name }}"
    n: "{{ .results.data.n }}"
    inner: "{{ .results.nested.said }}"
"#;

const INNER: &str = r#"  args:
    who: { type: string, required: true }
  steps:
    - id: say
      tool: x_ex_echo
      args: { message: "inner {{ .input.who }}" }
  output:
    said: "{{ .results.say }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_every_construct_against_a_real_server_and_prints_the_output() {
    let (h, journal_file) = host_with_server("").await;
    h.write("inner.yaml", &workflow("inner", INNER));
    workflow_ready(&h, "inner").await;
    h.write("wf.yaml", &workflow("constructs", CONSTRUCTS));
    workflow_ready(&h, "constructs").await;
    let (code, out, err) =
        h.cli_within(&["workflow", "run", "constructs", "--arg", "greeting=hi", "--wait", "-o", "json"], T);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}\nlog: {}", h.log());
    let output: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        output,
        json!({"greeting": "hi", "name": "hi", "n": 2, "inner": "inner hi"}),
        "the output template, typed"
    );

    // The nested workflow ran as a run of its own, created by the host for the step.
    let runs = h.api().resources(Some("WorkflowRun")).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    // The CLI's run is `constructs-<5>`; the nested one is named after it and the call.
    let outer = runs.iter().min_by_key(|r| r.name.len()).expect("the CLI's run");
    let inner = runs.iter().find(|r| r.name != outer.name).expect("the nested run");
    assert!(inner.name.starts_with(&format!("{}-", outer.name)), "{} {}", outer.name, inner.name);
    let inner = h.object(&format!("WorkflowRun/default/{}", inner.name)).await.unwrap();
    assert_eq!(inner["status"]["phase"], "Succeeded");
    assert_eq!(inner["status"]["output"], json!({"said": "inner hi"}));
    let key = format!("WorkflowRun/default/{}", outer.name);
    let run = h.object(&key).await.unwrap();
    assert_eq!(phase(Some(&run)), "Succeeded");
    assert_eq!(step(&run, "hello")["result"], "hi");
    assert_eq!(step(&run, "data")["result"], json!({"name": "hi", "n": 2}));
    assert_eq!(step(&run, "skipped")["state"], "Skipped", "a template condition that does not hold");
    assert_eq!(step(&run, "after")["state"], "Succeeded", "a fromStep condition that holds");
    assert_eq!(step(&run, "after")["result"], "after hi", "templates read earlier results");
    assert_eq!(step(&run, "each[0].say")["result"], "item a");
    assert_eq!(step(&run, "each[1].say")["result"], "item b", "the default of an arg");
    assert_eq!(step(&run, "both.left")["state"], "Succeeded");
    assert_eq!(step(&run, "both.right")["result"], json!({"key": "right", "count": 1}));
    assert_eq!(step(&run, "tolerated")["state"], "Failed");
    assert!(step(&run, "tolerated")["error"].as_str().unwrap().contains("expected failure"));
    assert_eq!(step(&run, "checked")["state"], "Succeeded", "a tool condition that holds");
    assert_eq!(step(&run, "checked")["condition"]["holds"], true);
    assert_eq!(step(&run, "nested")["result"], json!({"said": "inner hi"}), "a nested workflow's output");
    assert_eq!(run["status"]["args"], json!({"greeting": "hi", "items": ["a", "b"], "skip": true}));
    // Every step's call reached the real server once; the skipped one never.
    for (tool, args) in [
        ("echo", json!({"message": "hi"})),
        ("json", json!({"value": {"name": "hi", "n": 2}})),
        ("echo", json!({"message": "item a"})),
        ("count", json!({"key": "left"})),
        ("fail", json!({"message": "expected failure"})),
    ] {
        assert_eq!(calls_of(&journal_file, tool, &args), 1, "{tool} {args}");
    }
    assert_eq!(calls_of(&journal_file, "echo", &json!({"message": "never"})), 0);

    // `steward status` shows the run's steps as a table.
    let (code, out, _) = h.cli(&["status", &key]);
    assert_eq!(code, 0);
    assert!(out.contains("STEP") && out.contains("each[1].say") && out.contains("Skipped"), "{out}");

    // Bad args fail before any step, with the field's path.
    let (code, _, err) = h.cli_within(&["workflow", "run", "constructs", "--wait"], T);
    assert_ne!(code, 0);
    assert!(err.contains("spec.args.greeting"), "{err}");
    // A Workflow that misses a tool is refused by the CLI, saying which.
    h.write("missing.yaml", &workflow("missing", "  steps:\n    - id: a\n      tool: x_ex_nope\n"));
    h.wait_object("Workflow/default/missing", T, "reconciled", |v| v.is_some_and(|v| v["observedGeneration"] == 1))
        .await;
    let (code, _, err) = h.cli_within(&["workflow", "run", "missing"], T);
    assert_ne!(code, 0);
    assert!(err.contains("not ready to run") && err.contains("x_ex_nope"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_runs_on_failure_and_fails_the_run_naming_the_step() {
    let (h, journal_file) = host_with_server("").await;
    h.write(
        "wf.yaml",
        &workflow(
            "breaks",
            "  steps:\n    - id: ok\n      tool: x_ex_echo\n      args: { message: first }\n    - id: boom\n      tool: x_ex_fail\n      args: { message: disk full }\n    - id: never\n      tool: x_ex_echo\n      args: { message: never }\n  onFailure:\n    - id: cleanup\n      tool: x_ex_echo\n      args: { message: cleaning up }\n",
        ),
    );
    workflow_ready(&h, "breaks").await;
    h.write("run.yaml", &run_doc("r1", "breaks", json!({})));
    let run = wait_phase(&h, "r1", &["Failed", "Succeeded"]).await;
    assert_eq!(phase(Some(&run)), "Failed");
    let message = run["status"]["message"].as_str().unwrap();
    assert!(message.contains("boom") && message.contains("disk full"), "{message}");
    assert_eq!(step(&run, "onFailure.cleanup")["state"], "Succeeded");
    assert_eq!(calls_of(&journal_file, "echo", &json!({"message": "cleaning up"})), 1);
    assert_eq!(calls_of(&journal_file, "echo", &json!({"message": "never"})), 0, "steps after the failure never run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_outside_the_grant_is_refused_naming_the_config_key() {
    let (h, journal_file) = host_with_server("").await;
    // The grant allows `x_ex_*`; `x_other_time` matches no pattern.
    h.write("wf.yaml", &workflow("ungranted", "  steps:\n    - id: t\n      tool: x_other_time\n"));
    h.write("run.yaml", &run_doc("r1", "ungranted", json!({})));
    let run = wait_phase(&h, "r1", &["Failed", "Succeeded"]).await;
    let error = step(&run, "t")["error"].as_str().unwrap().to_string();
    assert!(error.contains("plugins.workflowrun.tools.allow"), "{error}");
    assert!(journal(&journal_file).iter().all(|e| e["tool"] != "time"), "nothing reached a server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_run_cancels_its_call_on_the_server() {
    let (h, journal_file) = host_with_server("").await;
    h.write(
        "wf.yaml",
        &workflow("slow", "  steps:\n    - id: nap\n      tool: x_ex_sleep\n      args: { ms: 120000 }\n"),
    );
    workflow_ready(&h, "slow").await;
    let (code, out, err) = h.cli(&["workflow", "run", "slow"]);
    assert_eq!(code, 0, "{out}{err}");
    let key = out.trim().strip_prefix("created ").unwrap().to_string();
    let name = key.rsplit('/').next().unwrap().to_string();
    h.wait_object(&key, T, "the nap running", |v| {
        v.is_some_and(|v| {
            v["status"]["steps"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["id"] == "nap" && s["state"] == "Running"))
        })
    })
    .await;
    common::eventually(
        T,
        "the server to receive the call",
        async || calls_of(&journal_file, "sleep", &json!({"ms": 120000})),
        |n| *n == 1,
    )
    .await;
    // The run was created by the host: it deletes it (a file in the resources directory).
    assert!(h.resources().join("workflowruns/default").join(format!("{name}.yaml")).exists());
    let deleted = h.api().delete(&steward::model::ObjectKey::new("WorkflowRun", "default", &name)).await.unwrap();
    assert_eq!(deleted.deleted, key);
    common::eventually(
        T,
        "the server to journal the cancellation",
        async || journal(&journal_file).iter().filter(|e| e["event"] == "cancelled" && e["tool"] == "sleep").count(),
        |n| *n == 1,
    )
    .await;
    h.wait_object(&key, T, "gone", |v| v.is_none()).await;
    // The API deletes runs only, and only those the host created: a file the user wrote is theirs.
    let e = h.api().delete(&steward::model::ObjectKey::new("Workflow", "default", "slow")).await.unwrap_err();
    assert!(e.to_string().contains("WorkflowRun only"), "{e}");
    h.write("mine.yaml", &run_doc("mine", "slow", json!({})));
    h.wait_object("WorkflowRun/default/mine", T, "seen", |v| v.is_some()).await;
    let e = h.api().delete(&steward::model::ObjectKey::new("WorkflowRun", "default", "mine")).await.unwrap_err();
    assert!(e.to_string().contains("did not create"), "{e}");
    assert!(h.resources().join("mine.yaml").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_changed_mid_run_does_not_change_the_run() {
    let (h, journal_file) = host_with_server("").await;
    let spec = |message: &str| {
        format!(
            "  steps:\n    - id: nap\n      tool: x_ex_sleep\n      args: {{ ms: 1500 }}\n    - id: say\n      tool: x_ex_echo\n      args: {{ message: {message} }}\n"
        )
    };
    h.write("wf.yaml", &workflow("evolving", &spec("old")));
    workflow_ready(&h, "evolving").await;
    h.write("run.yaml", &run_doc("r1", "evolving", json!({})));
    h.wait_object("WorkflowRun/default/r1", T, "started", |v| phase(v) == "Running").await;
    h.write("wf.yaml", &workflow("evolving", &spec("new")));
    h.wait_object("Workflow/default/evolving", T, "generation 2 observed", |v| {
        v.is_some_and(|v| v["observedGeneration"] == 2)
    })
    .await;
    let run = wait_phase(&h, "r1", &["Succeeded", "Failed"]).await;
    assert_eq!(phase(Some(&run)), "Succeeded");
    assert_eq!(run["status"]["workflowGeneration"], 1);
    assert_eq!(step(&run, "say")["result"], "old");
    assert_eq!(calls_of(&journal_file, "echo", &json!({"message": "new"})), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_drops_the_connection_mid_call_fails_the_step_after_retries() {
    let (h, journal_file) = host_with_server("").await;
    h.write(
        "wf.yaml",
        &workflow("crashy", "  steps:\n    - id: crash\n      tool: x_ex_crash\n      allowFailure: true\n    - id: after\n      tool: x_ex_echo\n      args: { message: still here }\n"),
    );
    h.write("run.yaml", &run_doc("r1", "crashy", json!({})));
    let run = wait_phase(&h, "r1", &["Succeeded", "Failed"]).await;
    assert_eq!(phase(Some(&run)), "Succeeded", "the failure was allowed: {:#}", run["status"]);
    let crash = step(&run, "crash");
    assert_eq!(crash["state"], "Failed");
    assert_eq!(crash["attempts"], 3, "a transport failure is retried up to the host's limit: {crash:#}");
    assert_eq!(calls_of(&journal_file, "crash", &json!({})), 3);
    // The server came back each time (the host restarts it); the next step ran on it.
    assert_eq!(step(&run, "after")["result"], "still here");
}

/// A host killed with `kill -9` in the middle of a run: after the restart the run finishes, no
/// step recorded as completed is called again, and a call in flight at the crash is made again
/// at most once.
async fn resumes_after_kill_9(in_flight: &str) {
    let _heavy = common::heavy().await;
    let (mut h, journal_file) = host_with_server("").await;
    h.write(
        "wf.yaml",
        &workflow(
            "durable",
            r#"  args:
    items: { type: array, default: ["a", "b", "c"] }
  steps:
    - id: first
      tool: x_ex_count
      args: { key: first }
    - id: each
      forEach:
        items: "{{ .input.items }}"
        steps:
          - id: mark
            tool: x_ex_count
            args: { key: "each-{{ .vars.item }}" }
          - id: nap
            tool: x_ex_sleep
            args: { ms: 1500 }
    - id: both
      parallel:
        - { id: slow, tool: x_ex_sleep, args: { ms: 2500 } }
        - { id: quick, tool: x_ex_count, args: { key: quick } }
    - id: last
      tool: x_ex_count
      args: { key: last }
"#,
        ),
    );
    workflow_ready(&h, "durable").await;
    h.write("run.yaml", &run_doc("r1", "durable", json!({})));
    let target = in_flight.to_string();
    h.wait_object("WorkflowRun/default/r1", T, &format!("{target} running"), |v| {
        v.and_then(|v| v["status"]["steps"].as_array()).is_some_and(|s| {
            s.iter().any(|s| s["id"] == target.as_str() && s["state"] == "Running")
                && (target != "both.slow" || s.iter().any(|s| s["id"] == "both.quick" && s["state"] == "Succeeded"))
        })
    })
    .await;
    h.kill9();
    h.start().await;
    let run = wait_phase(&h, "r1", &["Succeeded", "Failed"]).await;
    assert_eq!(phase(Some(&run)), "Succeeded", "{:#}", run["status"]);
    for key in ["first", "each-a", "each-b", "each-c", "quick", "last"] {
        assert_eq!(
            calls_of(&journal_file, "count", &json!({"key": key})),
            1,
            "count {key}: completed steps are never called again"
        );
    }
    let naps = calls_of(&journal_file, "sleep", &json!({"ms": 1500}));
    let slow = calls_of(&journal_file, "sleep", &json!({"ms": 2500}));
    if in_flight == "both.slow" {
        assert_eq!(naps, 3);
        assert!((1..=2).contains(&slow), "the call in flight is made again at most once: {slow}");
    } else {
        assert!((3..=4).contains(&naps), "the call in flight is made again at most once: {naps}");
        assert_eq!(slow, 1);
    }
    // The restarted host kept the run's results: every count step reports the first answer.
    assert_eq!(step(&run, "first")["result"], json!({"key": "first", "count": 1}));
}

/// A call cut short by two crashes is not made a third time: the host that loads it ends it,
/// and the run that waits for it ends at once (Failed, naming why), not at its next resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_two_crashes_ends_its_run_at_the_next_start() {
    let _heavy = common::heavy().await;
    let (mut h, journal_file) = host_with_server("").await;
    h.write(
        "wf.yaml",
        &workflow("long", "  steps:\n    - id: nap\n      tool: x_ex_sleep\n      args: { ms: 120000 }\n"),
    );
    workflow_ready(&h, "long").await;
    h.write("run.yaml", &run_doc("r1", "long", json!({})));
    for attempt in 1..=2usize {
        h.wait_object("WorkflowRun/default/r1", T, &format!("attempt {attempt} of nap running"), |v| {
            v.and_then(|v| v["status"]["steps"].as_array()).is_some_and(|s| {
                s.iter().any(|s| s["id"] == "nap" && s["state"] == "Running" && s["attempts"] == attempt)
            })
        })
        .await;
        common::eventually(
            T,
            "the server got the call",
            async || calls_of(&journal_file, "sleep", &json!({"ms": 120000})),
            |n| *n == attempt,
        )
        .await;
        h.kill9();
        h.start().await;
    }
    let run = wait_phase(&h, "r1", &["Succeeded", "Failed"]).await;
    assert_eq!(phase(Some(&run)), "Failed", "{:#}", run["status"]);
    let nap = step(&run, "nap");
    assert_eq!(nap["state"], "Failed", "{nap:#}");
    assert!(nap["error"].as_str().is_some_and(|e| e.contains("not made a third time")), "{nap:#}");
    assert_eq!(calls_of(&journal_file, "sleep", &json!({"ms": 120000})), 2, "never made a third time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_for_each_resumes_without_repeating_completed_steps() {
    resumes_after_kill_9("each[1].nap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_parallel_group_resumes_without_repeating_completed_steps() {
    resumes_after_kill_9("both.slow").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_grant_the_plugin_is_blocked_and_says_which_line_to_add() {
    let mut h = Host::new("");
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.start().await;
    let plugins = h.api().get("/api/v1/plugins").await.unwrap();
    let wr = plugins
        .as_array()
        .and_then(|p| p.iter().find(|p| p.to_string().contains("workflowrun")))
        .unwrap_or_else(|| panic!("no workflowrun in {plugins:#}"))
        .to_string();
    assert!(wr.to_lowercase().contains("blocked"), "{wr}");
    assert!(wr.contains("tools"), "the message names the capability to grant: {wr}");
    // A run of a blocked plugin's kind waits, saying why.
    h.write("run.yaml", &run_doc("r1", "nothing", json!({})));
    let v = h
        .wait_object("WorkflowRun/default/r1", T, "Pending with a reason", |v| {
            v.is_some_and(|v| v["phase"] == "Pending" && v["lastError"].is_string())
        })
        .await
        .unwrap();
    assert!(v["lastError"].as_str().unwrap().contains("workflowrun"), "{v:#}");
}
