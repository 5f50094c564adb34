//! Real MCP servers started over streamable HTTP for the tests that need a remote one.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

/// Which real server.
#[derive(Clone, Copy, Debug)]
pub enum Real {
    /// `@modelcontextprotocol/server-everything` (TypeScript SDK): an unknown session is HTTP 400.
    Everything,
    /// `testing/mcp-servers/py-server.py` on the official Python SDK: an unknown session is HTTP 404.
    PythonSdk,
}

/// A host whose MCPServer `rv` (tool prefix `remote`) is the reference `everything` server,
/// started here over streamable HTTP; `/mcp` lists tools directly. The host is started; the
/// server runs as long as the child returned with it lives.
pub async fn host_with_remote_everything() -> (tokio::process::Child, super::host::Host) {
    let port = super::host::free_port();
    let server = start(Real::Everything, port).await;
    let mut h = super::host::Host::new("api: { listen: 127.0.0.1:{port}, mcp: { tools: direct } }\n");
    h.write(
        "rv.yaml",
        &format!(
            "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: rv\nspec:\n  type: streamable-http\n  url: http://127.0.0.1:{port}/mcp\n  autoStart: true\n  toolPrefix: remote\n"
        ),
    );
    h.start().await;
    (server, h)
}

/// Starts `real` on `port` and returns it once it listens.
pub async fn start(real: Real, port: u16) -> tokio::process::Child {
    let dir = super::mcp_servers_dir();
    let mut cmd = match real {
        Real::Everything => {
            let mut c = tokio::process::Command::new("node");
            c.arg(dir.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
                .arg("streamableHttp")
                .env("PORT", port.to_string());
            c
        }
        Real::PythonSdk => {
            let mut c = tokio::process::Command::new(dir.join("py/bin/python3"));
            c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testing/mcp-servers/py-server.py"))
                .arg(port.to_string());
            c
        }
    };
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::time::timeout(super::kube::T, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(&format!("listening on port {port}")) || line.contains("Uvicorn running on") {
                return;
            }
        }
        panic!("{real:?} ended before listening");
    })
    .await
    .unwrap_or_else(|_| panic!("{real:?} did not say it listens"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}
