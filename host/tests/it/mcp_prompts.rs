//! Prompts and resources of real MCP servers through `/mcp`: the official Python MCP client and the MCP Inspector CLI against a host running the reference `everything` and `memory` servers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::common;
use crate::common::host::Host;

const T: Duration = Duration::from_secs(90);

/// The static resource every test reads and subscribes to.
const DOC: &str = "demo://resource/static/document/architecture.md";

fn node_module(path: &str) -> PathBuf {
    common::mcp_servers_dir().join("node/node_modules").join(path)
}

fn everything() -> PathBuf {
    node_module("@modelcontextprotocol/server-everything/dist/index.js")
}

/// An MCPServer `name` running `node SCRIPT ARGS…` over stdio.
fn node_server(name: &str, script: &Path, args: &[&str]) -> String {
    let mut all = vec![format!("\"{}\"", script.display())];
    all.extend(args.iter().map(|a| format!("\"{a}\"")));
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  type: stdio\n  command: node\n  args: [{}]\n  autoStart: true\n  timeout: 30\n",
        all.join(", ")
    )
}

/// The official Python SDK's client, driven one JSON request a line
/// (`testing/mcp-clients/agent.py`).
struct Agent {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// The capabilities the server declared in `initialize`.
    capabilities: Value,
}

impl Agent {
    async fn start(args: &[&str]) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-clients/agent.py");
        let mut child = tokio::process::Command::new(common::mcp_servers_dir().join("py/bin/python3"))
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python client starts");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut agent = Self { _child: child, stdin, lines, capabilities: Value::Null };
        agent.capabilities = agent.answer().await.expect("the client's handshake");
        agent
    }

    async fn answer(&mut self) -> Result<Value, String> {
        let line = tokio::time::timeout(T, self.lines.next_line())
            .await
            .expect("the Python client answers in time")
            .unwrap()
            .expect("the Python client is still running");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v.get("ok") {
            Some(ok) => Ok(ok.clone()),
            None => Err(v["error"].as_str().unwrap_or_default().to_string()),
        }
    }

    async fn ask(&mut self, req: Value) -> Result<Value, String> {
        self.stdin.write_all(format!("{req}\n").as_bytes()).await.unwrap();
        self.answer().await
    }

    async fn ok(&mut self, req: Value) -> Value {
        let what = req.to_string();
        self.ask(req).await.unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    /// Asks `req` until `f` holds for the answer.
    async fn until(&mut self, req: Value, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let got = self.ok(req.clone()).await;
            if f(&got) {
                return got;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}; last: {got:#}");
            common::poll_pause(200).await;
        }
    }

    /// Waits until a notification with `method` (and `uri`, if given) has arrived; keeps the others.
    async fn notified(&mut self, seen: &mut Vec<Value>, method: &str, uri: Option<&str>) {
        let hit = |e: &Value| e["method"] == method && uri.is_none_or(|u| e["uri"] == u);
        let deadline = tokio::time::Instant::now() + T;
        while !seen.iter().any(hit) {
            assert!(tokio::time::Instant::now() < deadline, "no {method} {uri:?} arrived; got {seen:?}");
            common::poll_pause(200).await;
            seen.extend(self.ok(json!({"op": "events"})).await.as_array().cloned().unwrap_or_default());
        }
    }
}

fn names(list: &Value, key: &str) -> Vec<String> {
    let mut n: Vec<String> =
        list.as_array().unwrap().iter().map(|p| p[key].as_str().unwrap_or_default().to_string()).collect();
    n.sort();
    n
}

/// `list` sorted by `key`.
fn sorted(list: &Value, key: &str) -> Vec<Value> {
    let mut l = list.as_array().cloned().unwrap_or_default();
    l.sort_by(|a, b| a[key].as_str().cmp(&b[key].as_str()));
    l
}

/// A host in direct tools mode with `everything` as `ev` and `memory` as `mem`, both ready.
async fn host() -> Host {
    let mut h = Host::new("api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n");
    h.write("ev.yaml", &node_server("ev", &everything(), &["stdio"]));
    let memory_file = h.dir.path().join("memory.jsonl");
    h.write(
        "mem.yaml",
        &format!(
            "{}  env: {{ MEMORY_FILE_PATH: \"{}\" }}\n",
            node_server("mem", &node_module("@modelcontextprotocol/server-memory/dist/index.js"), &[]),
            memory_file.display()
        ),
    );
    h.start().await;
    for key in ["MCPServer/default/ev", "MCPServer/default/mem"] {
        h.wait_object(key, T, "Running and healthy", |v| {
            v.is_some_and(|v| v["status"]["state"] == "Running" && v["status"]["health"] == "Healthy")
        })
        .await;
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_prompt_and_resource_of_everything_reaches_a_python_agent_through_mcp() {
    let _heavy = common::heavy().await;
    let h = host().await;
    let everything = everything().display().to_string();
    let mut direct = Agent::start(&["stdio", "node", &everything, "stdio"]).await;
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let mut agent = Agent::start(&["http", &url]).await;
    assert_eq!(agent.capabilities["prompts"]["listChanged"], true, "{}", agent.capabilities);
    assert_eq!(agent.capabilities["resources"], json!({"subscribe": true, "listChanged": true}));

    // Every prompt, under muster's name, otherwise as the server gives it.
    let want: Vec<Value> = sorted(&direct.ok(json!({"op": "prompts"})).await, "name")
        .into_iter()
        .map(|mut p| {
            p["name"] = format!("x_ev_{}", p["name"].as_str().unwrap()).into();
            p
        })
        .collect();
    assert!(want.len() >= 4, "{want:?}");
    let got = agent
        .until(json!({"op": "prompts"}), "the prompts of everything", |p| names(p, "name").len() == want.len())
        .await;
    assert_eq!(sorted(&got, "name"), want);
    assert!(!names(&got, "name").iter().any(|n| n.starts_with("x_mem_")), "memory offers no prompt: {got}");

    // One with arguments is got from its server.
    let args = json!({"city": "Paris", "state": "TX"});
    let from_server = direct.ok(json!({"op": "get_prompt", "name": "args-prompt", "arguments": args})).await;
    let through = agent.ok(json!({"op": "get_prompt", "name": "x_ev_args-prompt", "arguments": args})).await;
    assert_eq!(through["messages"], from_server["messages"]);
    assert_eq!(through["messages"][0]["content"]["text"], "What's weather in Paris, TX?");
    let unknown = agent.ask(json!({"op": "get_prompt", "name": "x_ev_nope"})).await.unwrap_err();
    assert!(unknown.contains("no ready MCPServer of namespace default offers prompt x_ev_nope"), "{unknown}");

    // Resources and templates, of both servers: URIs with a scheme are the servers' own.
    let memory = node_module("@modelcontextprotocol/server-memory/dist/index.js").display().to_string();
    let mut direct_mem = Agent::start(&["stdio", "node", &memory]).await;
    let mut want = direct.ok(json!({"op": "resources"})).await.as_array().cloned().unwrap();
    assert!(want.iter().any(|r| r["uri"] == DOC), "{want:?}");
    let mem_resources = direct_mem.ok(json!({"op": "resources"})).await;
    want.extend(mem_resources.as_array().cloned().unwrap());
    let want = sorted(&Value::Array(want), "uri");
    let got = agent
        .until(json!({"op": "resources"}), "the resources of everything", |r| names(r, "uri").len() == want.len())
        .await;
    assert_eq!(sorted(&got, "uri"), want);
    let want = sorted(&direct.ok(json!({"op": "templates"})).await, "uriTemplate");
    assert_eq!(sorted(&agent.ok(json!({"op": "templates"})).await, "uriTemplate"), want);
    assert!(!want.is_empty());

    // A read is the server's, for a listed resource and for one that fits a template.
    let from_server = direct.ok(json!({"op": "read", "uri": DOC})).await;
    assert_eq!(agent.ok(json!({"op": "read", "uri": DOC})).await, from_server);
    assert!(from_server[0]["text"].as_str().is_some_and(|t| !t.is_empty()));
    for r in mem_resources.as_array().unwrap() {
        let uri = &r["uri"];
        assert_eq!(
            agent.ok(json!({"op": "read", "uri": uri})).await,
            direct_mem.ok(json!({"op": "read", "uri": uri})).await
        );
    }
    let dynamic = agent.ok(json!({"op": "read", "uri": "demo://resource/dynamic/text/7"})).await;
    assert_eq!(dynamic[0]["uri"], "demo://resource/dynamic/text/7");
    assert!(dynamic[0]["text"].as_str().unwrap().starts_with("Resource 7: This is a plaintext resource"), "{dynamic}");
    let refused = agent.ask(json!({"op": "read", "uri": "demo://resource/dynamic/text/abc"})).await.unwrap_err();
    assert!(refused.contains("Unknown resource"), "the server's own error: {refused}");
    let nowhere = agent.ask(json!({"op": "read", "uri": "nowhere://x"})).await.unwrap_err();
    assert!(nowhere.contains("no ready MCPServer of namespace default offers resource nowhere://x"), "{nowhere}");

    // A subscription is passed through, and the server's updates reach the client.
    agent.ok(json!({"op": "subscribe", "uri": DOC})).await;
    agent.ok(json!({"op": "call", "name": "x_ev_toggle-subscriber-updates"})).await;
    let mut seen = Vec::new();
    agent.notified(&mut seen, "notifications/resources/updated", Some(DOC)).await;
    agent.ok(json!({"op": "unsubscribe", "uri": DOC})).await;

    // The server adds a resource and says so: the client is told, and sees it.
    seen.clear();
    let gzip = json!({"name": "hello.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resourceLink"});
    agent.ok(json!({"op": "call", "name": "x_ev_gzip-file-as-resource", "arguments": gzip})).await;
    agent.notified(&mut seen, "notifications/resources/list_changed", None).await;
    let added = "demo://resource/session/hello.gz";
    agent.until(json!({"op": "resources"}), "the added resource", |r| names(r, "uri").iter().any(|u| u == added)).await;
    let read = agent.ok(json!({"op": "read", "uri": added})).await;
    assert_eq!(read[0]["mimeType"], "application/gzip");
    assert!(read[0]["blob"].as_str().is_some_and(|b| !b.is_empty()), "{read}");

    // The server goes: the client is told its prompts and resources changed; and it comes back.
    seen.clear();
    h.remove("ev.yaml");
    agent.notified(&mut seen, "notifications/prompts/list_changed", None).await;
    agent.notified(&mut seen, "notifications/resources/list_changed", None).await;
    agent
        .until(json!({"op": "prompts"}), "no prompt of ev", |p| {
            !names(p, "name").iter().any(|n| n.starts_with("x_ev_"))
        })
        .await;
    let left = agent.ok(json!({"op": "resources"})).await;
    assert_eq!(sorted(&left, "uri"), sorted(&mem_resources, "uri"), "memory's are left");
    seen.clear();
    h.write("ev.yaml", &node_server("ev", &self::everything(), &["stdio"]));
    agent.notified(&mut seen, "notifications/prompts/list_changed", None).await;
    agent.notified(&mut seen, "notifications/resources/list_changed", None).await;
    agent
        .until(json!({"op": "prompts"}), "ev's prompts back", |p| {
            names(p, "name").iter().any(|n| n == "x_ev_args-prompt")
        })
        .await;
}

/// Runs the MCP Inspector's CLI with `args`; its JSON output.
async fn inspector(url: &str, args: &[&str]) -> Value {
    let catalog = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(node_module(".bin/mcp-inspector"))
        .arg("--cli")
        .arg(url)
        .args(args)
        .env("MCP_CATALOG_PATH", catalog.path().join("mcp.json"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(T, out).await.expect("the inspector ends in time").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "inspector {args:?}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_inspector_lists_prompts_gets_one_and_reads_a_resource_through_mcp() {
    let _heavy = common::heavy().await;
    let h = host().await;
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let listed = common::eventually(
        T,
        "the inspector lists ev's prompts",
        async || inspector(&url, &["--method", "prompts/list"]).await,
        |v| v["prompts"].as_array().is_some_and(|p| p.iter().any(|p| p["name"] == "x_ev_simple-prompt")),
    )
    .await;
    assert!(listed["prompts"].as_array().unwrap().iter().all(|p| p["name"].as_str().unwrap().starts_with("x_ev_")));
    let got = inspector(
        &url,
        &["--method", "prompts/get", "--prompt-name", "x_ev_args-prompt", "--prompt-args", "city=Oslo"],
    )
    .await;
    assert_eq!(got["messages"][0]["content"]["text"], "What's weather in Oslo?");
    let read = inspector(&url, &["--method", "resources/read", "--uri", DOC]).await;
    let mut direct = Agent::start(&["stdio", "node", &everything().display().to_string(), "stdio"]).await;
    assert_eq!(read["contents"], direct.ok(json!({"op": "read", "uri": DOC})).await);
    let templates = inspector(&url, &["--method", "resources/templates/list"]).await;
    assert!(
        templates["resourceTemplates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["uriTemplate"] == "demo://resource/dynamic/text/{resourceId}"),
        "{templates}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_servers_prompts_and_resource_updates_reach_the_agent() {
    let _heavy = common::heavy().await;
    let (_server, h) = common::servers::host_with_remote_everything().await;
    let mut agent = Agent::start(&["http", &format!("http://127.0.0.1:{}/mcp", h.port)]).await;
    let prompts = agent
        .until(json!({"op": "prompts"}), "the remote server's prompts", |p| {
            names(p, "name").iter().any(|n| n == "x_remote_simple-prompt")
        })
        .await;
    assert!(names(&prompts, "name").iter().all(|n| n.starts_with("x_remote_")), "{prompts}");
    let got =
        agent.ok(json!({"op": "get_prompt", "name": "x_remote_args-prompt", "arguments": {"city": "Rome"}})).await;
    assert_eq!(got["messages"][0]["content"]["text"], "What's weather in Rome?");
    let read = agent.ok(json!({"op": "read", "uri": DOC})).await;
    assert_eq!(read[0]["uri"], DOC);
    agent.ok(json!({"op": "subscribe", "uri": DOC})).await;
    agent.ok(json!({"op": "call", "name": "x_remote_toggle-subscriber-updates"})).await;
    let mut seen = Vec::new();
    agent.notified(&mut seen, "notifications/resources/updated", Some(DOC)).await;
}
