//! End-to-end tests of `steward-example-mcp`: real processes, spoken to with
//! hand-written JSON-RPC over stdio and plain HTTP/1.1 over TCP.

use std::fs;
use std::io::{BufRead as _, BufReader, ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_steward-example-mcp");
/// Upper bound on any single wait; generous for a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(20);
const PROTOCOL: &str = "2025-06-18";
/// Every built-in tool, sorted.
const ALL_TOOLS: [&str; 8] = ["add", "count", "crash", "echo", "fail", "json", "sleep", "time"];

// ---------------------------------------------------------------- process

/// A spawned server whose stderr is collected, and whose stdout lines arrive
/// on a channel.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<Receiver<String>>,
    stderr_lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Messages read from stdout while waiting for another id.
    skipped: Vec<Value>,
}

impl Server {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn steward-example-mcp");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(lines_of);
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_lines = {
            let (tx, rx) = channel();
            let pipe = child.stderr.take().expect("stderr");
            let sink = stderr.clone();
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    sink.lock().unwrap().push_str(&format!("{line}\n"));
                    let _ = tx.send(line);
                }
            });
            rx
        };
        Self { child, stdin, stdout, stderr_lines, stderr, skipped: Vec::new() }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write to server stdin");
        stdin.flush().expect("flush server stdin");
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to server stdin");
        stdin.flush().expect("flush server stdin");
    }

    /// Sends a request and returns the response with the same id, skipping
    /// anything else the server writes.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(id)
    }

    fn response(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + DEADLINE;
        let stdout = self.stdout.as_ref().expect("stdout open");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match stdout.recv_timeout(left) {
                Ok(line) => {
                    let message: Value =
                        serde_json::from_str(&line).unwrap_or_else(|e| panic!("server wrote non-JSON {line:?}: {e}"));
                    if message["id"] == json!(id) {
                        return message;
                    }
                    self.skipped.push(message);
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no response to id {id} in time; stderr:\n{}", self.stderr())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("server closed stdout before answering id {id}; stderr:\n{}", self.stderr())
                }
            }
        }
    }

    fn initialize(&mut self) -> Value {
        let reply = self.request(
            1,
            "initialize",
            json!({
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "steward-example-mcp-tests", "version": "0"},
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        reply
    }

    /// Waits for a stderr line containing `needle` and returns it.
    fn stderr_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no stderr line with {needle:?}; stderr:\n{}", self.stderr()),
            }
        }
    }

    /// Waits for the process to exit on its own.
    fn exit_status(&mut self) -> ExitStatus {
        match wait_exit_within(&mut self.child) {
            Some(status) => status,
            None => panic!("server did not exit in time; stderr:\n{}", self.stderr()),
        }
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits, up to the deadline, for a child to exit on its own; `None` (and the child
/// killed) when it did not.
fn wait_exit_within(child: &mut Child) -> Option<ExitStatus> {
    let pid = child.id();
    let (tx, rx) = channel();
    thread::scope(|scope| {
        scope.spawn(|| {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(DEADLINE) {
            Ok(status) => Some(status.expect("wait")),
            Err(_) => {
                // Unblock the waiter so the scope can end.
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                None
            }
        }
    })
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    wait_exit_within(child).expect("process did not exit in time")
}

fn lines_of(pipe: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs the binary to completion (for argument errors).
fn run_to_end(args: &[&str]) -> (ExitStatus, String) {
    let mut server = Server::spawn(args);
    drop(server.stdin.take());
    let status = server.exit_status();
    // stderr is drained by a thread; wait for it to see the end.
    let deadline = Instant::now() + DEADLINE;
    while server.stderr_lines.recv_timeout(deadline - Instant::now()).is_ok() {}
    (status, server.stderr())
}

// ---------------------------------------------------------------- MCP helpers

fn tool_names(list: &Value) -> Vec<String> {
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("tools/list result has no tools: {list}"));
    let mut names: Vec<String> = tools.iter().map(|t| t["name"].as_str().expect("tool name").to_owned()).collect();
    names.sort();
    names
}

/// The single text of a successful tool result.
fn tool_text(reply: &Value) -> String {
    let result = &reply["result"];
    assert_eq!(result["isError"], json!(false), "tool failed: {reply}");
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content: {reply}")).to_owned()
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

fn assert_server_info(reply: &Value) {
    let result = &reply["result"];
    assert_eq!(result["serverInfo"]["name"], "steward-example-mcp", "{reply}");
    assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"), "{reply}");
    assert!(result["capabilities"]["tools"].is_object(), "{reply}");
    assert_eq!(result["protocolVersion"], PROTOCOL, "{reply}");
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

// ---------------------------------------------------------------- stdio tests

#[test]
fn stdio_initialize_list_and_call_tools() {
    let mut server = Server::spawn(&["--stdio"]);
    let init = server.initialize();
    assert_server_info(&init);

    let list = server.request(2, "tools/list", json!({}));
    assert_eq!(tool_names(&list), ALL_TOOLS);
    let schema_of = |name: &str| {
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["inputSchema"].clone())
            .unwrap()
    };
    assert_eq!(schema_of("echo")["properties"]["message"]["type"], "string");
    assert_eq!(schema_of("add")["properties"]["a"]["type"], "number");
    assert_eq!(schema_of("sleep")["properties"]["ms"]["type"], "integer");
    assert_eq!(schema_of("fail")["properties"]["message"]["type"], "string");
    assert_eq!(schema_of("count")["properties"]["key"]["type"], "string");
    assert!(schema_of("json")["properties"]["value"].is_object() || schema_of("json")["properties"]["value"] == true);

    let echo = server.request(3, "tools/call", call("echo", json!({"message": "héllo wörld"})));
    assert_eq!(tool_text(&echo), "héllo wörld");

    let add = server.request(4, "tools/call", call("add", json!({"a": 2, "b": 3.5})));
    assert_eq!(tool_text(&add), "5.5");
    let add = server.request(5, "tools/call", call("add", json!({"a": -7, "b": 7})));
    assert_eq!(tool_text(&add), "0");

    let before = unix_now();
    let time = server.request(6, "tools/call", call("time", json!({})));
    let t: u64 = tool_text(&time).parse().expect("time is an integer");
    assert!(t >= before && t <= unix_now() + 1, "time {t} vs now {before}");

    // Closing stdin is the end of the session: a clean exit.
    drop(server.stdin.take());
    let status = server.exit_status();
    assert_eq!(status.code(), Some(0), "stderr:\n{}", server.stderr());
}

#[test]
fn stdio_tools_filter_and_extra_tools() {
    let mut server = Server::spawn(&["--tools", "echo", "--extra-tool", "probe_me", "--extra-tool", "other.tool"]);
    assert_server_info(&server.initialize());

    let list = server.request(2, "tools/list", json!({}));
    assert_eq!(tool_names(&list), ["echo", "other.tool", "probe_me"]);

    let probe = server.request(3, "tools/call", call("probe_me", json!({})));
    assert_eq!(tool_text(&probe), "probe_me ok");
    let other = server.request(4, "tools/call", json!({"name": "other.tool"}));
    assert_eq!(tool_text(&other), "other.tool ok");

    // A filtered-out tool is not callable: an error answer, not a crash.
    let add = server.request(5, "tools/call", call("add", json!({"a": 1, "b": 2})));
    assert!(add["error"].is_object(), "{add}");
    let echo = server.request(6, "tools/call", call("echo", json!({"message": "still here"})));
    assert_eq!(tool_text(&echo), "still here");
}

#[test]
fn stdio_empty_tools_list_leaves_only_extra_tools() {
    let mut server = Server::spawn(&["--tools", "", "--extra-tool", "only"]);
    server.initialize();
    let list = server.request(2, "tools/list", json!({}));
    assert_eq!(tool_names(&list), ["only"]);
}

#[test]
fn stdio_bad_input_gets_errors_not_a_crash() {
    let mut server = Server::spawn(&[]);
    server.initialize();

    server.send_raw("this is not json");
    server.send_raw("{\"truncated\": ");
    server.send_raw("");

    let wrong_type = server.request(2, "tools/call", call("add", json!({"a": "two", "b": 1})));
    assert_eq!(wrong_type["result"]["isError"], json!(true), "{wrong_type}");

    let missing = server.request(3, "tools/call", call("echo", json!({})));
    assert_eq!(missing["result"]["isError"], json!(true), "{missing}");

    let unknown_tool = server.request(4, "tools/call", call("nope", json!({})));
    assert!(unknown_tool["error"].is_object(), "{unknown_tool}");

    let unknown_method = server.request(5, "no/such/method", json!({}));
    assert!(unknown_method["error"].is_object(), "{unknown_method}");

    let echo = server.request(6, "tools/call", call("echo", json!({"message": "alive"})));
    assert_eq!(tool_text(&echo), "alive");
    assert!(server.is_running());
}

#[test]
fn stdio_closed_stdout_ends_the_server_cleanly() {
    // Own the pipes directly: the client reads one answer, then stops reading
    // (closes its end of our stdout) while keeping our stdin open.
    let mut child = Command::new(BIN)
        .arg("--stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn steward-example-mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }});
    writeln!(stdin, "{init}").unwrap();
    stdin.flush().unwrap();

    let (tx, rx) = channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let read = reader.read_line(&mut line);
        let _ = tx.send((read.map(|_| line), reader));
    });
    let (line, reader) = rx.recv_timeout(DEADLINE).expect("initialize answer in time");
    let reply: Value = serde_json::from_str(&line.expect("read answer")).expect("JSON answer");
    assert_server_info(&reply);
    drop(reader);

    // The next answer cannot be written; the server must notice and leave.
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).unwrap();
    stdin.flush().unwrap();
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(0));
    drop(stdin);
}

#[test]
fn stdio_fail_initialize_refuses_but_keeps_running() {
    let mut server = Server::spawn(&["--stdio", "--fail-initialize"]);
    let init = server.initialize();
    assert_eq!(init["error"]["code"], -32603, "{init}");
    assert!(init["error"]["message"].as_str().unwrap().contains("--fail-initialize"), "{init}");
    let list = server.request(2, "tools/list", json!({}));
    assert!(list["error"].is_object(), "{list}");
    let ping = server.request(3, "ping", json!({}));
    assert_eq!(ping["result"], json!({}), "{ping}");
    assert!(server.is_running());

    drop(server.stdin.take());
    assert_eq!(server.exit_status().code(), Some(0));
}

#[test]
fn exit_after_secs_exits_with_status_3() {
    let started = Instant::now();
    let mut server = Server::spawn(&["--stdio", "--exit-after-secs", "1"]);
    server.initialize();
    let status = server.exit_status();
    assert_eq!(status.code(), Some(3), "stderr:\n{}", server.stderr());
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn bad_arguments_are_startup_errors() {
    let (status, stderr) = run_to_end(&["--tools", "echo,frobnicate"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown tool \"frobnicate\""), "{stderr}");

    let (status, stderr) = run_to_end(&["--http", "0.0.0.0:0"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("only loopback addresses"), "{stderr}");

    let (status, stderr) = run_to_end(&["--extra-tool", "add"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("clashes with the built-in tool"), "{stderr}");

    let (status, stderr) = run_to_end(&["--stdio", "--http", "127.0.0.1:0"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
}

#[test]
fn help_describes_the_options() {
    let output = Command::new(BIN).arg("--help").output().expect("run --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for option in
        ["--stdio", "--http", "--tools", "--extra-tool", "--exit-after-secs", "--fail-initialize", "--journal"]
    {
        assert!(help.contains(option), "--help lacks {option}:\n{help}");
    }
    for tool in ALL_TOOLS {
        assert!(help.contains(&format!("`{tool}`")), "--help does not describe {tool}:\n{help}");
    }
}

// ---------------------------------------------------------------- journal and test tools

/// A fresh journal path, unique to this test and this test process.
fn journal_path(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("steward-example-mcp-journals");
    fs::create_dir_all(&dir).expect("create the journal directory");
    let path = dir.join(format!("{test}-{}.jsonl", std::process::id()));
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => panic!("cannot remove {}: {e}", path.display()),
    }
    path
}

/// The complete lines of the journal so far (none if it does not exist yet).
fn journal_events(path: &Path) -> Vec<Value> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    };
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("bad journal line {line:?}: {e}")))
        .collect()
}

/// Waits until the journal has an event matching `wanted`; returns all events.
fn wait_for_event(path: &Path, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let events = journal_events(path);
        if events.iter().any(&wanted) {
            return events;
        }
        assert!(Instant::now() < deadline, "the journal never got the expected event: {events:#?}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The (event, tool) pairs of a journal, in order.
fn event_kinds(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            let field = |name: &str| e[name].as_str().unwrap_or_else(|| panic!("no {name} in {e}")).to_owned();
            (field("event"), field("tool"))
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(event, tool)| ((*event).to_owned(), (*tool).to_owned())).collect()
}

/// The text of a result's first content block, whether or not it is an error.
fn first_text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content: {reply}"))
}

#[test]
fn stdio_journal_records_calls_and_their_end() {
    let journal = journal_path("records");
    let journal_arg = journal.to_str().expect("UTF-8 path");
    let mut server = Server::spawn(&["--journal", journal_arg]);
    server.initialize();
    let pid = server.child.id();

    // The end of a call is journaled before it is answered, so no waiting.
    let echo = server.request(2, "tools/call", call("echo", json!({"message": "one"})));
    assert_eq!(tool_text(&echo), "one");
    let fail = server.request(3, "tools/call", call("fail", json!({"message": "boom"})));
    assert_eq!(fail["result"]["isError"], json!(true), "{fail}");
    let unknown = server.request(4, "tools/call", json!({"name": "nope"}));
    assert!(unknown["error"].is_object(), "{unknown}");

    let events = journal_events(&journal);
    assert_eq!(
        event_kinds(&events),
        pairs(&[
            ("call", "echo"),
            ("done", "echo"),
            ("call", "fail"),
            ("done", "fail"),
            ("call", "nope"),
            ("done", "nope")
        ])
    );
    assert_eq!(events[0]["arguments"], json!({"message": "one"}), "{events:#?}");
    assert_eq!(events[2]["arguments"], json!({"message": "boom"}), "{events:#?}");
    assert_eq!(events[4]["arguments"], json!({}), "{events:#?}");
    assert!(events.iter().all(|e| e["pid"] == json!(pid)), "{events:#?}");

    // A second process appends to the same journal.
    let mut other = Server::spawn(&["--journal", journal_arg, "--tools", "count"]);
    other.initialize();
    let other_pid = other.child.id();
    let count = other.request(2, "tools/call", call("count", json!({"key": "k"})));
    assert_eq!(serde_json::from_str::<Value>(&tool_text(&count)).unwrap(), json!({"key": "k", "count": 1}));
    let events = journal_events(&journal);
    assert_eq!(events.len(), 8, "{events:#?}");
    assert_eq!(event_kinds(&events[6..]), pairs(&[("call", "count"), ("done", "count")]));
    assert!(events[6..].iter().all(|e| e["pid"] == json!(other_pid)), "{events:#?}");
    assert_eq!(events[6]["arguments"], json!({"key": "k"}));
}

#[test]
fn stdio_fail_json_and_count_tools() {
    let mut server = Server::spawn(&[]);
    server.initialize();

    let fail = server.request(2, "tools/call", call("fail", json!({"message": "it went wrong"})));
    assert_eq!(fail["result"]["isError"], json!(true), "{fail}");
    assert_eq!(first_text(&fail), "it went wrong");
    assert!(fail.get("error").is_none(), "a tool error, not a protocol error: {fail}");

    let object = json!({"id": 7, "name": "ü", "nested": {"list": [1, 2.5, null, true]}});
    let reply = server.request(3, "tools/call", call("json", json!({"value": object})));
    assert_eq!(serde_json::from_str::<Value>(&tool_text(&reply)).unwrap(), object);
    assert_eq!(reply["result"]["structuredContent"], object, "{reply}");

    for (id, value) in [(4, json!([1, "two", null])), (5, json!("text")), (6, json!(42)), (7, Value::Null)] {
        let reply = server.request(id, "tools/call", call("json", json!({"value": value})));
        assert_eq!(serde_json::from_str::<Value>(&tool_text(&reply)).unwrap(), value);
        assert!(reply["result"].get("structuredContent").is_none(), "not an object, no structured content: {reply}");
    }

    let mut id = 10;
    for (key, expected) in [("a", 1), ("a", 2), ("b", 1), ("a", 3)] {
        id += 1;
        let reply = server.request(id, "tools/call", call("count", json!({"key": key})));
        let answer = json!({"key": key, "count": expected});
        assert_eq!(serde_json::from_str::<Value>(&tool_text(&reply)).unwrap(), answer);
        assert_eq!(reply["result"]["structuredContent"], answer, "{reply}");
    }

    let sleep = server.request(20, "tools/call", call("sleep", json!({"ms": 1})));
    assert_eq!(tool_text(&sleep), "slept 1");
    let bad = server.request(21, "tools/call", call("sleep", json!({"ms": -5})));
    assert_eq!(bad["result"]["isError"], json!(true), "{bad}");
}

#[test]
fn stdio_crash_exits_with_status_4_without_answering() {
    let journal = journal_path("crash");
    let mut server = Server::spawn(&["--journal", journal.to_str().expect("UTF-8 path")]);
    server.initialize();
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call("crash", json!({}))}));

    // The client sees its transport close, with no answer to the call.
    let deadline = Instant::now() + DEADLINE;
    let stdout = server.stdout.take().expect("stdout");
    loop {
        match stdout.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let message: Value = serde_json::from_str(&line).expect("JSON");
                assert_ne!(message["id"], json!(2), "crash answered: {message}");
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("stdout still open; stderr:\n{}", server.stderr()),
        }
    }
    let status = server.exit_status();
    assert_eq!(status.code(), Some(4), "stderr:\n{}", server.stderr());
    assert_eq!(event_kinds(&journal_events(&journal)), pairs(&[("call", "crash")]));
}

#[test]
fn stdio_client_cancel_stops_sleep_and_is_journaled() {
    let journal = journal_path("cancel");
    let mut server = Server::spawn(&["--journal", journal.to_str().expect("UTF-8 path")]);
    server.initialize();

    // An hour-long sleep: only the cancellation can end it within the test.
    let long = json!({"ms": 3_600_000});
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call("sleep", long.clone())}));
    wait_for_event(&journal, |e| e["event"] == "call" && e["tool"] == "sleep");
    server.send(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the test cancels it"},
    }));
    let events = wait_for_event(&journal, |e| e["event"] == "cancelled");
    assert_eq!(event_kinds(&events), pairs(&[("call", "sleep"), ("cancelled", "sleep")]));
    assert_eq!(events[0]["arguments"], long);
    assert_eq!(events[1]["pid"], json!(server.child.id()));

    // The server goes on; the cancelled call is never answered.
    let echo = server.request(3, "tools/call", call("echo", json!({"message": "after"})));
    assert_eq!(tool_text(&echo), "after");
    assert!(server.skipped.iter().all(|m| m["id"] != json!(2)), "cancelled call answered: {:?}", server.skipped);
    assert_eq!(
        event_kinds(&journal_events(&journal)),
        pairs(&[("call", "sleep"), ("cancelled", "sleep"), ("call", "echo"), ("done", "echo")])
    );

    // Cancelling a call that already finished journals nothing more.
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}));
    let ping = server.request(4, "ping", json!({}));
    assert_eq!(ping["result"], json!({}), "{ping}");
    drop(server.stdin.take());
    assert_eq!(server.exit_status().code(), Some(0), "stderr:\n{}", server.stderr());
    assert_eq!(journal_events(&journal).len(), 4);
}

#[test]
fn journal_that_cannot_be_opened_is_a_startup_error() {
    let dir = journal_path("missing-dir");
    let inside = dir.join("journal.jsonl");
    let (status, stderr) = run_to_end(&["--journal", inside.to_str().expect("UTF-8 path")]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot open the journal"), "{stderr}");
}

// ---------------------------------------------------------------- HTTP

struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message with this id, from a JSON or an SSE body.
    fn message(&self, id: u64) -> Value {
        let content_type = self.header("content-type").unwrap_or_default();
        if content_type.starts_with("application/json") {
            return serde_json::from_str(&self.body).expect("JSON body");
        }
        assert!(
            content_type.starts_with("text/event-stream"),
            "unexpected content type {content_type:?}: {}",
            self.body
        );
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .filter(|data| !data.is_empty())
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .find(|message| message["id"] == json!(id))
            .unwrap_or_else(|| panic!("no message with id {id} in SSE body:\n{}", self.body))
    }
}

/// One POST of a JSON-RPC message to /mcp, HTTP/1.1 with `Connection: close`.
fn post(addr: SocketAddr, session: Option<&str>, message: &Value) -> HttpResponse {
    let body = message.to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {PROTOCOL}\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(session) = session {
        request.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);

    let mut stream = TcpStream::connect_timeout(&addr, DEADLINE).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream.set_write_timeout(Some(DEADLINE)).unwrap();
    stream.write_all(request.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response (the server should close after answering)");
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> HttpResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned())).collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked =
        headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    HttpResponse { status, headers, body: String::from_utf8(body).expect("UTF-8 body") }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).unwrap_or_else(|_| panic!("bad chunk size {size_text:?}"));
        data = &data[line_end + 2..];
        if size == 0 {
            break;
        }
        let chunk = data.get(..size).expect("truncated chunk");
        out.extend_from_slice(chunk);
        data = data.get(size + 2..).unwrap_or_default();
    }
    out
}

fn spawn_http(args: &[&str]) -> (Server, SocketAddr) {
    let mut all = vec!["--http", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let server = Server::spawn(&all);
    let line = server.stderr_line("listening on http://");
    let addr = line
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("bad listening line {line:?}"));
    let addr: SocketAddr = addr.parse().expect("listening address");
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);
    (server, addr)
}

/// initialize + notifications/initialized; returns the session id.
fn http_initialize(addr: SocketAddr) -> String {
    let init = post(
        addr,
        None,
        &json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "steward-example-mcp-tests", "version": "0"},
            },
        }),
    );
    assert_eq!(init.status, 200, "{}", init.body);
    assert_server_info(&init.message(1));
    let session = init.header("mcp-session-id").expect("mcp-session-id header").to_owned();

    let initialized = post(addr, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(initialized.status, 202, "{}", initialized.body);
    session
}

fn http_request(addr: SocketAddr, session: &str, id: u64, method: &str, params: Value) -> Value {
    let response = post(addr, Some(session), &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    assert_eq!(response.status, 200, "{}", response.body);
    response.message(id)
}

#[test]
fn http_initialize_list_and_call_tools() {
    let (mut server, addr) = spawn_http(&["--extra-tool", "x_tool"]);
    let session = http_initialize(addr);

    let list = http_request(addr, &session, 2, "tools/list", json!({}));
    let mut expected: Vec<&str> = ALL_TOOLS.to_vec();
    expected.push("x_tool");
    assert_eq!(tool_names(&list), expected);

    let echo = http_request(addr, &session, 3, "tools/call", call("echo", json!({"message": "over http"})));
    assert_eq!(tool_text(&echo), "over http");
    let add = http_request(addr, &session, 4, "tools/call", call("add", json!({"a": 40, "b": 2})));
    assert_eq!(tool_text(&add), "42");
    let extra = http_request(addr, &session, 5, "tools/call", call("x_tool", json!({})));
    assert_eq!(tool_text(&extra), "x_tool ok");

    // Without the session id, a non-initialize request is refused.
    let stray = post(addr, None, &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}));
    assert!(stray.status >= 400 || stray.body.contains("error"), "{}", stray.body);

    // A second, independent session works too.
    let other = http_initialize(addr);
    assert_ne!(other, session);
    let list = http_request(addr, &other, 7, "tools/list", json!({}));
    assert_eq!(tool_names(&list).len(), ALL_TOOLS.len() + 1);
    assert!(server.is_running());
}

#[test]
fn http_tools_filter() {
    let (_server, addr) = spawn_http(&["--tools", "add,time"]);
    let session = http_initialize(addr);
    let list = http_request(addr, &session, 2, "tools/list", json!({}));
    assert_eq!(tool_names(&list), ["add", "time"]);
    let echo = http_request(addr, &session, 3, "tools/call", call("echo", json!({"message": "x"})));
    assert!(echo["error"].is_object(), "{echo}");
}

#[test]
fn http_fail_initialize_refuses_but_keeps_serving() {
    let (mut server, addr) = spawn_http(&["--fail-initialize"]);
    for id in 1..=2 {
        let init = post(
            addr,
            None,
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            }}),
        );
        let reply = init.message(id);
        assert_eq!(reply["error"]["code"], -32603, "{reply}");
        assert!(init.header("mcp-session-id").is_none());
    }
    assert!(server.is_running());
}
