//! `steward workflow run`: start a WorkflowRun of a Workflow, and with `--wait` follow it to its end and print its output.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::api::CreateBody;
use crate::client::Client;
use crate::model::ObjectKey;

use super::Output;
use super::table::{format_rows, print_json};

use crate::model::WORKFLOW_RUN_KIND as RUN_KIND;

/// How often `--wait` reads the run again.
const POLL: Duration = Duration::from_millis(300);

/// How `steward workflow run` follows the run it starts.
#[derive(Clone, Copy, Debug)]
pub(super) struct How {
    /// Follow it to its end.
    pub wait: bool,
    /// Then delete it.
    pub rm: bool,
    /// How to print the result.
    pub output: Output,
}

/// Creates a WorkflowRun of `workflow` in `namespace` with `args` (`KEY=VALUE`; a value is
/// taken as JSON unless the Workflow declares the argument a string); with `wait`, prints each
/// step as it ends and the output at the end, and exits 0 only when the run succeeded; with
/// `rm`, deletes the run once it ended.
pub(super) async fn run(
    client: &Client,
    workflow: &str,
    namespace: &str,
    args: &[String],
    timeout: Option<&str>,
    how: How,
) -> Result<ExitCode> {
    let How { wait, rm, output } = how;
    let declared = client
        .spec(&ObjectKey::new("Workflow", namespace, workflow))
        .await
        .with_context(|| format!("cannot read Workflow {namespace}/{workflow}"))?;
    let args = parse_args(args, &declared)?;
    // A Workflow that is not Ready (a tool missing, an invalid spec) would start a run that
    // waits for tools and fails: say why now instead.
    let wf = client.resource(&ObjectKey::new("Workflow", namespace, workflow)).await?;
    if let Some(why) = not_ready(&wf) {
        bail!("Workflow {namespace}/{workflow} is not ready to run: {why}");
    }
    let mut spec = serde_json::json!({ "workflow": workflow, "args": args });
    if let Some(t) = timeout {
        spec["timeout"] = t.into();
    }
    let body = CreateBody { generate_name: Some(format!("{}-", prefix(workflow))), spec, ..CreateBody::default() };
    let created = client.create(RUN_KIND, namespace, &body).await?;
    if !wait {
        println!("created {}", created.created);
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("created {}; waiting for it to end", created.created);
    let key = ObjectKey::parse(&created.created).context("the API answered with a key that does not parse")?;
    let mut shown: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let view = match client.resource(&key).await {
            Ok(v) => v,
            // The host sees a new file after its debounce: not there yet is not an error.
            Err(crate::client::ClientError::Status { status, .. }) if status.as_u16() == 404 => {
                tokio::time::sleep(POLL).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let status = view.status.clone().unwrap_or(Value::Null);
        for step in status["steps"].as_array().into_iter().flatten() {
            let (id, state) = (text(&step["id"]), text(&step["state"]));
            if matches!(state.as_str(), "Pending" | "Running") || shown.get(&id) == Some(&state) {
                continue;
            }
            let detail = step["error"].as_str().map(|e| format!(": {e}")).unwrap_or_default();
            eprintln!("  {id}: {state}{detail}");
            shown.insert(id, state);
        }
        let phase = text(&status["phase"]);
        if view.phase == crate::model::Phase::Failed && phase.is_empty() {
            bail!("{}: {}", created.created, view.last_error.unwrap_or_default());
        }
        let code = match phase.as_str() {
            "Succeeded" => {
                match output {
                    Output::Json => print_json(&status["output"])?,
                    Output::Table => println!("{}", serde_json::to_string_pretty(&status["output"])?),
                }
                ExitCode::SUCCESS
            }
            "Failed" | "Cancelled" => {
                eprintln!("{}: {phase}: {}", created.created, text(&status["message"]));
                if output == Output::Json {
                    print_json(&status)?;
                }
                ExitCode::FAILURE
            }
            _ => {
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        if rm {
            client
                .delete(&key)
                .await
                .with_context(|| format!("the run ended, but {} could not be deleted", created.created))?;
            eprintln!("deleted {}", created.created);
        }
        return Ok(code);
    }
}

/// Why the Workflow `view` is not ready to run, or `None` when its `Ready` condition is True.
fn not_ready(view: &crate::engine::ResourceView) -> Option<String> {
    match view.conditions.iter().find(|c| c.type_ == "Ready") {
        Some(c) if c.status == steward_sdk::ConditionStatus::True => None,
        Some(c) => Some(if c.message.is_empty() { c.reason.clone() } else { c.message.clone() }),
        None => Some(view.last_error.clone().unwrap_or_else(|| format!("it is {} (not reconciled yet)", view.phase))),
    }
}

/// The run name's prefix: the workflow's name, cut so the generated name stays within 63.
fn prefix(workflow: &str) -> &str {
    let cut = crate::sanitize::cut_at(workflow, 52);
    cut.trim_end_matches(['-', '.'])
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// `KEY=VALUE` pairs as the run's args: a value is JSON (`3`, `true`, `[1,2]`, `{"a":1}`)
/// unless the Workflow (`declared`, its spec) declares the argument a string, or it does not
/// parse as JSON; then it is the text as written.
fn parse_args(args: &[String], declared: &Value) -> Result<serde_json::Map<String, Value>> {
    let mut out = serde_json::Map::new();
    for a in args {
        let Some((k, v)) = a.split_once('=') else { bail!("--arg `{a}` is not KEY=VALUE") };
        if k.is_empty() {
            bail!("--arg `{a}` has no key");
        }
        let string = declared["args"][k]["type"].as_str() == Some("string");
        let value =
            if string { Value::String(v.into()) } else { serde_json::from_str(v).unwrap_or(Value::String(v.into())) };
        out.insert(k.to_string(), value);
    }
    Ok(out)
}

/// The steps of a run's status as a table: a header, then one row per step record.
pub(super) fn step_rows(status: &Value) -> Vec<[String; 5]> {
    let mut rows = vec![["STEP", "STATE", "TOOL", "ATTEMPTS", "RESULT OR ERROR"].map(String::from)];
    for s in status["steps"].as_array().into_iter().flatten() {
        let detail = match (&s["error"], &s["result"]) {
            (Value::String(e), _) => e.clone(),
            (_, Value::Null) => String::new(),
            (_, r) => r.to_string(),
        };
        rows.push([
            text(&s["id"]),
            text(&s["state"]),
            text(&s["tool"]),
            s["attempts"].as_u64().map_or("-".into(), |n| n.to_string()),
            detail.chars().take(60).collect(),
        ]);
    }
    rows
}

/// Prints a run (a status with `steps`) for people: phase and message, then its steps.
pub(super) fn print_run(key: &str, status: &Value) {
    println!("{key}  {}  {}", text(&status["phase"]), text(&status["message"]));
    print!("{}", format_rows(&step_rows(status)));
    if !status["output"].is_null() {
        println!("output: {}", status["output"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn args_are_json_unless_declared_strings() {
        let declared = json!({"args": {"version": {"type": "string"}, "replicas": {"type": "integer"}}});
        let got = parse_args(
            &["version=1.2".into(), "replicas=3".into(), "flags=[\"a\"]".into(), "note=hello world".into()],
            &declared,
        )
        .unwrap();
        assert_eq!(Value::Object(got), json!({"version": "1.2", "replicas": 3, "flags": ["a"], "note": "hello world"}));
        assert!(parse_args(&["novalue".into()], &declared).unwrap_err().to_string().contains("KEY=VALUE"));
        assert!(parse_args(&["=3".into()], &declared).unwrap_err().to_string().contains("no key"));
    }

    #[test]
    fn a_run_shows_one_row_per_step() {
        let status = json!({
            "phase": "Failed",
            "steps": [
                {"id": "a", "state": "Succeeded", "tool": "x_s_echo", "attempts": 1, "result": {"text": "hi"}},
                {"id": "b", "state": "Failed", "tool": "x_s_fail", "attempts": 1, "error": "boom"},
                {"id": "c", "state": "Skipped", "tool": "x_s_echo"}
            ]
        });
        let rows = step_rows(&status);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1], ["a", "Succeeded", "x_s_echo", "1", r#"{"text":"hi"}"#]);
        assert_eq!(rows[2], ["b", "Failed", "x_s_fail", "1", "boom"]);
        assert_eq!(rows[3], ["c", "Skipped", "x_s_echo", "-", ""]);
        assert_eq!(
            prefix("a-very-long-workflow-name-that-goes-on-and-on-and-on-and-on-forever"),
            "a-very-long-workflow-name-that-goes-on-and-on-and-on"
        );
    }
}
