//! `/mcp`'s protocol details: the tool prefix from the host config, `DELETE /mcp` answered 200, and the OAuth protected-resource metadata a 401 points at.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::common::host::Host;

const T: Duration = Duration::from_secs(60);

fn server_bin() -> String {
    steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}")).display().to_string()
}

fn ready(v: Option<&Value>) -> Option<&str> {
    v?["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["status"].as_str()
}

/// Runs a script with the official Python MCP client (the venv of `testing/mcp-servers`);
/// returns (exit code, stdout, stderr).
pub(crate) fn python(script: &str, args: &[&str]) -> (i32, String, String) {
    let py = common::mcp_servers_dir().join("py/bin/python3");
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", py.display()));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Opens a session with the Python client (warnings of its logger go to stderr), lists the
/// tools, prints their names one a line, and closes the session (the client's `DELETE /mcp`).
const LIST_TOOLS: &str = r#"
import asyncio, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(sys.argv[1]) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = await s.list_tools()
            for t in tools.tools:
                print(t.name)

asyncio.run(main())
"#;

/// A `POST /mcp` of `initialize` by raw HTTP; returns the session id the host gave.
fn initialize(h: &Host, extra: &[(&str, &str)]) -> common::host::HttpReply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let mut headers = vec![("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    headers.extend_from_slice(extra);
    h.http("POST", "/mcp", &headers, body.to_string().as_bytes())
}

fn session_of(reply: &common::host::HttpReply) -> String {
    reply
        .headers
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id")))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| panic!("no session id: {reply:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_answers_200_and_the_python_client_does_not_warn() {
    let mut h = Host::new("");
    h.start().await;
    let init = initialize(&h, &[]);
    assert_eq!(init.status, 200, "{init:?}");
    let id = session_of(&init);
    let closed = h.http("DELETE", "/mcp", &[("Mcp-Session-Id", &id)], b"");
    assert!(closed.status == 200 || closed.status == 204, "DELETE /mcp answered {}: {closed:?}", closed.status);
    // The session is gone: a request in it is refused.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let after = h.http("POST", "/mcp", &headers, list.as_bytes());
    assert!(after.status >= 400, "{after:?}");

    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let (code, out, err) = python(LIST_TOOLS, &[&url]);
    assert_eq!(code, 0, "the Python client failed: {out}\n{err}");
    // The default tools mode lists the meta-tools.
    assert!(out.lines().any(|l| l == "call_tool"), "{out}");
    assert!(!err.contains("Session termination failed"), "the Python client warned on close: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_from_mcp_points_at_the_protected_resource_metadata() {
    let mut h = Host::with_files(
        "api:\n  listen: 127.0.0.1:{port}\n  token_file: token\n  mcp:\n    authorization_servers: ['https://dex.example.com/']\n",
        &[("token", "s3cret\n")],
    );
    h.start().await;
    let refused = initialize(&h, &[]);
    assert_eq!(refused.status, 401, "{refused:?}");
    let base = format!("http://127.0.0.1:{}", h.port);
    let expected =
        format!("www-authenticate: bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    assert!(refused.headers.to_ascii_lowercase().contains(&expected.to_ascii_lowercase()), "{}", refused.headers);
    // Other routes keep their plain challenge.
    let other = h.http("GET", "/api/v1/overview", &[], b"");
    assert_eq!(other.status, 401);
    assert!(!other.headers.contains("resource_metadata"), "{}", other.headers);

    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let meta = h.http("GET", path, &[], b"");
        assert_eq!(meta.status, 200, "{path}: {meta:?}");
        assert_eq!(
            meta.json(),
            json!({"resource": format!("{base}/mcp"), "authorization_servers": ["https://dex.example.com"],
                   "bearer_methods_supported": ["header"]}),
            "{path}"
        );
    }
    // Behind a TLS proxy, the resource is the URL the client reached.
    let proxied = h.http(
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        &[("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "steward.example.com")],
        b"",
    );
    assert_eq!(proxied.json()["resource"], "https://steward.example.com/mcp");
    // With the token, /mcp answers.
    let ok = initialize(&h, &[("Authorization", "Bearer s3cret")]);
    assert_eq!(ok.status, 200, "{ok:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_no_metadata_is_served() {
    let mut h = Host::new("");
    h.start().await;
    let meta = h.http("GET", "/.well-known/oauth-protected-resource/mcp", &[], b"");
    assert_eq!(meta.status, 404, "{meta:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_prefix_names_every_server_tool_and_workflows_use_it() {
    let mut h = Host::new(
        "  workflowrun: { capabilities: [tools], tools: { allow: [\"m_*\", \"x_*\", \"workflow_*\"] } }\napi:\n  listen: 127.0.0.1:{port}\n  mcp: { tools: direct, prefix: m }\n",
    );
    common::install(&common::wasm("workflowrun"), &h.dir.path().join("plugins").join("workflowrun.wasm"));
    h.start().await;
    h.write(
        "server.yaml",
        &format!(
            "apiVersion: muster.giantswarm.io/v1alpha1\nkind: MCPServer\nmetadata:\n  name: tools\nspec:\n  type: stdio\n  command: \"{}\"\n  args: [\"--stdio\"]\n  autoStart: true\n  timeout: 10\n",
            server_bin()
        ),
    );
    h.write(
        "workflows.yaml",
        "apiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: greet\nspec:\n  steps:\n    - id: hello\n      tool: m_tools_echo\n      args: {message: hi}\n\
         ---\napiVersion: muster.giantswarm.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: old\nspec:\n  steps:\n    - id: hello\n      tool: x_tools_echo\n",
    );
    let server = h.wait_object("MCPServer/default/tools", T, "Ready", |v| ready(v) == Some("True")).await.unwrap();
    let tools: Vec<&str> = server["status"]["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"m_tools_echo") && !tools.iter().any(|t| t.starts_with("x_")), "{tools:?}");
    h.wait_object("Workflow/default/greet", T, "Ready on m_tools_echo", |v| ready(v) == Some("True")).await;
    let old = h
        .wait_object("Workflow/default/old", T, "not Ready", |v| {
            ready(v) == Some("False") && v.is_some_and(|v| v["status"]["missingTools"] == json!(["x_tools_echo"]))
        })
        .await
        .unwrap();
    assert_eq!(old["status"]["valid"], true);

    // /mcp offers m_tools_echo (and no x_ name), and the workflow runs through it.
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let listed = common::eventually(
        T,
        "m_tools_echo and workflow_greet at /mcp",
        async || python(LIST_TOOLS, &[&url]),
        |(_, out, _)| out.lines().any(|l| l == "m_tools_echo") && out.lines().any(|l| l == "workflow_greet"),
    )
    .await;
    assert!(!listed.1.lines().any(|l| l.starts_with("x_")), "{}", listed.1);
    let call = r#"
import asyncio, sys
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(sys.argv[1]) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for name, args in [("m_tools_echo", {"message": "direct"}), ("workflow_greet", {}), ("x_tools_echo", {"message": "old"})]:
                try:
                    r = await s.call_tool(name, args)
                except Exception as e:
                    print(name, "error", str(e).replace("\n", " "))
                    continue
                text = " ".join(c.text for c in r.content if getattr(c, "text", None))
                print(name, "error" if r.is_error else "ok", text.replace("\n", " "))

asyncio.run(main())
"#;
    let (code, out, err) = python(call, &[&url]);
    assert_eq!(code, 0, "{out}\n{err}");
    let line = |name: &str| out.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default().to_string();
    assert!(line("m_tools_echo").starts_with("m_tools_echo ok") && line("m_tools_echo").contains("direct"), "{out}");
    assert!(line("workflow_greet").starts_with("workflow_greet ok"), "{out}");
    assert!(line("x_tools_echo").starts_with("x_tools_echo error"), "{out}");
}

/// The official Python client's OAuth flow against a host with a token: it follows the 401 to
/// the metadata, finds the authorization server named there (a stand-in served by the script:
/// metadata and client registration), and asks to authorize for the `/mcp` resource. The script
/// stops at the redirect and prints the authorization URL.
const OAUTH: &str = r#"
import asyncio, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from mcp.client.auth import OAuthClientProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
import httpx2

url, port = sys.argv[1], int(sys.argv[2])
issuer = f"http://127.0.0.1:{port}"
seen = []

class AS(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        seen.append(self.path)
        if self.path.startswith("/.well-known/"):
            self.answer(200, {"issuer": issuer, "authorization_endpoint": issuer + "/authorize",
                              "token_endpoint": issuer + "/token", "registration_endpoint": issuer + "/register",
                              "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"]})
        else:
            self.answer(404, {})
    def do_POST(self):
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        doc["client_id"] = "steward-test"
        self.answer(201, doc)

threading.Thread(target=ThreadingHTTPServer(("127.0.0.1", port), AS).serve_forever, daemon=True).start()

class Memory:
    def __init__(self):
        self.tokens, self.client = None, None
    async def get_tokens(self): return self.tokens
    async def set_tokens(self, t): self.tokens = t
    async def get_client_info(self): return self.client
    async def set_client_info(self, c): self.client = c

class Redirected(Exception):
    pass

async def redirect(auth_url):
    print("AUTHORIZE", auth_url)
    raise Redirected()

async def callback():
    raise Redirected()

async def main():
    meta = OAuthClientMetadata(redirect_uris=["http://127.0.0.1:1/callback"], client_name="steward-test")
    auth = OAuthClientProvider(url, meta, Memory(), redirect, callback)
    try:
        # A generous timeout: on a loaded machine the default 5 s can pass before the first answer.
        async with httpx2.AsyncClient(auth=auth, timeout=60) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
    except BaseException as e:
        # The redirect ends the flow on purpose; anything else is said, for the test's message.
        print("CLIENT", repr(e), file=sys.stderr)
    print("AS", " ".join(seen))

asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_oauth_flow_follows_the_metadata_to_the_authorization_server() {
    let issuer_port = common::host::free_port();
    let mut h = Host::with_files(
        &format!(
            "api:\n  listen: 127.0.0.1:{{port}}\n  token_file: token\n  mcp:\n    authorization_servers: ['http://127.0.0.1:{issuer_port}']\n"
        ),
        &[("token", "s3cret\n")],
    );
    h.start().await;
    let url = format!("http://127.0.0.1:{}/mcp", h.port);
    let (code, out, err) = python(OAUTH, &[&url, &issuer_port.to_string()]);
    assert_eq!(code, 0, "{out}\n{err}");
    let authorize = out.lines().find_map(|l| l.strip_prefix("AUTHORIZE ")).unwrap_or_else(|| panic!("{out}\n{err}"));
    assert!(authorize.starts_with(&format!("http://127.0.0.1:{issuer_port}/authorize?")), "{authorize}");
    let resource = format!("resource={}", url.replace(':', "%3A").replace('/', "%2F"));
    assert!(authorize.contains(&resource), "the client asks for a token for /mcp: {authorize}");
}
