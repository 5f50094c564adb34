//! Abuse of the HTTP API of a running host: malformed and oversized bodies, unknown kinds and
//! names, path traversal in every name and kind a route takes, requests without (or with a
//! wrong) bearer token on a non-loopback listener, and errors that would carry host paths or
//! credentials into what the API and `steward status` show.

use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::host::{Host, HttpReply, noop, synced};

const T: Duration = Duration::from_secs(60);

/// A host whose compiled plugins are cached across the tests of this file (and runs of it).
fn host(extra: &str, files: &[(&str, &str)]) -> Host {
    let cache = format!("cache_dir: {}/api-abuse-plugin-cache\n", env!("CARGO_TARGET_TMPDIR"));
    Host::with_files(&format!("{cache}{extra}"), files)
}

/// Asserts a 4xx JSON error whose message contains every one of `says` (case-insensitive).
fn assert_refused(what: &str, r: &HttpReply, status: u16, says: &[&str]) {
    assert_eq!(r.status, status, "{what}: {r:?}");
    let message = r.error().to_lowercase();
    assert!(!message.is_empty(), "{what}: a JSON error message: {r:?}");
    for s in says {
        assert!(message.contains(&s.to_lowercase()), "{what}: the message should say {s:?}: {r:?}");
    }
}

/// How many reconciles the object had so far (of the last ten entries of its history, each
/// counting the reconciles alike in a row that it stands for).
async fn runs(h: &Host, key: &str) -> u64 {
    h.object(key).await.map_or(0, |v| runs_of(&v))
}

fn runs_of(v: &serde_json::Value) -> u64 {
    v["history"].as_array().map_or(0, |hs| hs.iter().map(|e| e["count"].as_u64().unwrap_or(1)).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_bodies_get_4xx_with_a_message_and_change_nothing() {
    let mut h = host("", &[]);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let trigger = "/api/v1/resources/Noop/default/a/reconcile";
    let before = runs(&h, "Noop/default/a").await;

    let json = [("Content-Type", "application/json")];
    for (route, body) in [
        (trigger, &b"{\"force\": tru"[..]),
        (trigger, b"{\"force\": true}"),
        (trigger, b"\xff\xfe not even text"),
        ("/api/v1/kinds/Noop/disable", b"[1, 2"),
        ("/api/v1/kinds/Noop/disable", b"{\"kind\": \"Other\"}"),
    ] {
        let r = h.http("POST", route, &json, body);
        assert_refused(&format!("POST {route} {body:?}"), &r, 400, &["body"]);
    }
    let r = h.http("POST", trigger, &json, b"{\"force\": tru");
    assert!(r.error().contains("not valid JSON"), "{r:?}");

    // 10 MB, declared up front: refused by its length, before it is read.
    let big = vec![b'{'; 10 * 1024 * 1024];
    for route in [trigger, "/api/v1/kinds/Noop/disable", "/api/v1/overview"] {
        let r = h.http("POST", route, &json, &big);
        assert_refused(&format!("POST {route} with 10 MB"), &r, 413, &["larger than the limit of 65536 bytes"]);
    }
    // 10 MB, chunked (no length up front): refused once past the limit.
    let mut chunked = Vec::new();
    for _ in 0..160 {
        chunked.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
        chunked.extend(std::iter::repeat_n(b'x', 64 * 1024));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = h.http("POST", trigger, &[("Transfer-Encoding", "chunked")], &chunked);
    assert_refused("chunked 10 MB", &r, 413, &["larger than the limit of 65536 bytes"]);

    // None of it did anything: no reconcile ran, the kind is still enabled.
    assert_eq!(runs(&h, "Noop/default/a").await, before);
    assert_eq!(h.object("Noop/default/a").await.unwrap()["disabled"], false);
    // An empty body (or `{}`, which some clients always send) works.
    for body in [&b""[..], b"{}"] {
        let r = h.http("POST", trigger, &json, body);
        assert_eq!(r.status, 202, "{body:?}: {r:?}");
    }
    h.wait_object("Noop/default/a", T, "the triggered runs", |v| v.is_some_and(|v| runs_of(v) > before)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kinds_names_routes_and_methods_get_4xx_naming_them() {
    let mut h = host("", &[]);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;

    let cases: Vec<(&str, &str, u16, Vec<&str>)> = vec![
        ("GET", "/api/v1/resources/Nope/default/a", 404, vec!["Nope/default/a"]),
        ("GET", "/api/v1/resources/Noop/default/ghost", 404, vec!["Noop/default/ghost"]),
        ("GET", "/api/v1/resources/Noop/elsewhere/a", 404, vec!["Noop/elsewhere/a"]),
        ("POST", "/api/v1/resources/Nope/default/a/reconcile", 404, vec!["Nope/default/a"]),
        ("POST", "/api/v1/resources/Noop/default/ghost/reconcile", 404, vec!["Noop/default/ghost"]),
        ("POST", "/api/v1/kinds/Nope/enable", 404, vec!["Nope"]),
        ("POST", "/api/v1/kinds/Nope/disable", 404, vec!["Nope"]),
        ("POST", "/api/v1/kinds/Noop/explode", 404, vec!["explode", "enable or disable"]),
        ("GET", "/api/v1/resources?kind=Nope", 404, vec!["Nope"]),
        ("GET", "/api/v1/nothing", 404, vec!["no such route"]),
        ("GET", "/api/v2/overview", 404, vec!["no such route"]),
        ("GET", "/api/v1/resources/Noop/default/a/extra", 404, vec!["no such route"]),
        // The wrong method on a route that exists.
        ("GET", "/api/v1/resources/Noop/default/a/reconcile", 405, vec!["GET"]),
        ("PATCH", "/api/v1/resources/Noop/default/a", 405, vec!["PATCH"]),
        // The API creates and deletes the kinds the host creates itself (WorkflowRun) only.
        ("DELETE", "/api/v1/resources/Noop/default/a", 409, vec!["WorkflowRun only", "from its file"]),
        ("DELETE", "/api/v1/resources/WorkflowRun/default/ghost", 404, vec!["WorkflowRun/default/ghost"]),
        ("POST", "/api/v1/overview", 405, vec!["POST"]),
        ("PUT", "/api/v1/kinds/Noop/enable", 405, vec!["PUT"]),
    ];
    for (method, path, status, says) in &cases {
        let r = h.http(method, path, &[], b"");
        assert_refused(&format!("{method} {path}"), &r, *status, says);
    }
    // Creating an object of a kind the host does not create itself is refused: an MCPServer
    // names a command to run.
    let body = br#"{"name": "x", "spec": {"type": "stdio", "command": "sh"}}"#;
    let r = h.http("POST", "/api/v1/resources/MCPServer/default", &[("content-type", "application/json")], body);
    assert_refused("POST an MCPServer", &r, 409, &["WorkflowRun only"]);
    // The create route takes a body, up to the same limit as every route: 413 past it, declared
    // or not, as the README says.
    let big =
        format!(r#"{{"name": "big", "spec": {{"workflow": "w", "args": {{"pad": "{}"}}}}}}"#, "x".repeat(70 * 1024));
    let r = h.http(
        "POST",
        "/api/v1/resources/WorkflowRun/default",
        &[("content-type", "application/json")],
        big.as_bytes(),
    );
    assert_refused("POST a WorkflowRun over 64 KiB", &r, 413, &["larger than the limit of 65536 bytes"]);
    let mut chunked = Vec::new();
    for part in big.as_bytes().chunks(16 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = h.http(
        "POST",
        "/api/v1/resources/WorkflowRun/default",
        &[("content-type", "application/json"), ("Transfer-Encoding", "chunked")],
        &chunked,
    );
    assert_refused("POST a chunked WorkflowRun over 64 KiB", &r, 413, &["larger than the limit of 65536 bytes"]);
    assert!(h.object("WorkflowRun/default/big").await.is_none(), "nothing was created");
    // Without a token the API answers only to a loopback name (a page rebound to 127.0.0.1 sends its own).
    let rebound = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", h.port)).unwrap();
        let req =
            format!("GET /api/v1/overview HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n", h.port);
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    assert!(rebound.contains("loopback"), "{rebound}");
    // A known kind with no object yet is an empty list, not an error.
    let r = h.http("GET", "/api/v1/resources?kind=Misbehave", &[], b"");
    assert_eq!((r.status, r.json()), (200, Value::Array(vec![])), "{r:?}");
    assert_eq!(h.object("Noop/default/a").await.unwrap()["disabled"], false);
}

/// Values that must never be taken as a kind, namespace or name, as raw URL path segments.
const HOSTILE: &[&str] = &[
    "..",
    ".",
    "%2e%2e",
    "%2E%2E",
    "..%2f..%2fetc%2fpasswd",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "..%2F..%2F..%2Fetc%2Fpasswd",
    "%252e%252e%252f",
    "..%5c..%5cwindows",
    "a%2fb",
    "%2f",
    "%00",
    "a%00b",
    "%ff",
    "%c0%ae%c0%ae",
    "a%0d%0aX-Injected:%201",
    "a%20b",
    "Has_Underscore",
    "-leading-dash",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_traversal_in_any_name_or_kind_gets_4xx_naming_the_part_and_touches_nothing() {
    let mut h = host("", &[]);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let before = runs(&h, "Noop/default/a").await;
    let long = "a".repeat(300);

    let mut tried = 0;
    for bad in HOSTILE.iter().copied().chain([long.as_str()]) {
        // Each part of each route that takes one.
        let routes = [
            ("GET", format!("/api/v1/resources/{bad}/default/a"), "kind"),
            ("GET", format!("/api/v1/resources/Noop/{bad}/a"), "namespace"),
            ("GET", format!("/api/v1/resources/Noop/default/{bad}"), "name"),
            ("POST", format!("/api/v1/resources/{bad}/default/a/reconcile"), "kind"),
            ("POST", format!("/api/v1/resources/Noop/{bad}/a/reconcile"), "namespace"),
            ("POST", format!("/api/v1/resources/Noop/default/{bad}/reconcile"), "name"),
            ("POST", format!("/api/v1/kinds/{bad}/enable"), "kind"),
            ("POST", format!("/api/v1/kinds/{bad}/disable"), "kind"),
            ("GET", format!("/api/v1/resources?kind={bad}"), "kind"),
        ];
        for (method, path, part) in routes {
            let r = h.http(method, &path, &[], b"");
            assert_refused(&format!("{method} {path}"), &r, 400, &["not valid"]);
            let e = r.error();
            assert!(e.starts_with(&format!("{part} ")) || e.starts_with(&format!("the {part} ")), "{path}: {e}");
            assert!(!r.body.contains("root:"), "{method} {path}: {r:?}");
            tried += 1;
        }
    }
    // Traversal with raw slashes matches no route.
    for path in [
        "/api/v1/resources/Noop/default/../../../etc/passwd",
        "/api/v1/resources/../../../../etc/passwd",
        "/api/v1/kinds/../../../etc/passwd/enable",
        "/../../etc/passwd",
    ] {
        let r = h.http("GET", path, &[], b"");
        assert_refused(path, &r, 404, &["no such route"]);
        let r = h.http("POST", path, &[], b"");
        assert!(r.status == 404 || r.status == 405, "POST {path}: {r:?}");
    }
    eprintln!("{tried} hostile requests refused");

    // Nothing was reconciled or switched, and the host still answers.
    assert_eq!(runs(&h, "Noop/default/a").await, before);
    let o = h.api().get("/api/v1/overview").await.unwrap();
    assert!(o["kinds"].as_array().unwrap().iter().all(|k| k["enabled"] == true), "{o:#}");
    assert_eq!(h.object("Noop/default/a").await.unwrap()["phase"], "Synced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_non_loopback_listener_every_route_but_health_readiness_and_metrics_needs_the_token() {
    let token = "s3cret-token-0123456789";
    let mut h = host("api: { listen: 0.0.0.0:{port}, token_file: token }\n", &[("token", &format!("{token}\n"))]);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    h.wait_object("Noop/default/a", T, "Synced", synced).await;
    let before = runs(&h, "Noop/default/a").await;

    // Every route of api.rs: the mutating ones, then the protected reads.
    let mutating = [
        ("POST", "/api/v1/resources/Noop/default/a/reconcile"),
        ("POST", "/api/v1/kinds/Noop/disable"),
        ("POST", "/api/v1/kinds/Noop/enable"),
        // Auth comes first: nothing is said about names or kinds to a client without the token.
        ("POST", "/api/v1/resources/Noop/default/ghost/reconcile"),
        ("POST", "/api/v1/resources/No_op/default/..%2f..%2fetc/reconcile"),
        ("POST", "/api/v1/kinds/Nope/disable"),
    ];
    let reads = [
        ("GET", "/api/v1/overview"),
        ("GET", "/api/v1/resources"),
        ("GET", "/api/v1/resources?kind=Noop"),
        ("GET", "/api/v1/resources/Noop/default/a"),
        ("GET", "/api/v1/plugins"),
    ];
    let prefix = &token[..token.len() - 1];
    let wrong: Vec<(&str, String)> = vec![
        ("Authorization", "Bearer nope".into()),
        ("Authorization", "Bearer ".into()),
        ("Authorization", "Bearer".into()),
        ("Authorization", format!("Bearer {prefix}")),
        ("Authorization", format!("Bearer {token}x")),
        ("Authorization", format!("Bearer {}", token.to_uppercase())),
        ("Authorization", format!("Basic {token}")),
        ("Authorization", format!("Token {token}")),
        ("Authorization", token.to_string()),
        ("X-Api-Key", token.to_string()),
        ("Cookie", format!("token={token}")),
    ];
    let mut refused = 0;
    for (method, path) in mutating.iter().chain(&reads) {
        let mut attempts: Vec<(String, Vec<(&str, &str)>)> = vec![(path.to_string(), vec![])];
        for (k, v) in &wrong {
            attempts.push((path.to_string(), vec![(*k, v.as_str())]));
        }
        let sep = if path.contains('?') { '&' } else { '?' };
        attempts.push((format!("{path}{sep}token={token}"), vec![]));
        attempts.push((format!("{path}{sep}access_token={token}"), vec![]));
        for (target, headers) in attempts {
            let r = h.http(method, &target, &headers, b"");
            assert_refused(&format!("{method} {target} {headers:?}"), &r, 401, &["Authorization: Bearer"]);
            assert!(r.headers.to_lowercase().contains("www-authenticate: bearer"), "{r:?}");
            assert!(!r.body.contains(token) && !r.body.contains(prefix), "the token is not echoed: {r:?}");
            refused += 1;
        }
    }
    eprintln!("{refused} requests without the right token refused");
    // None of them did anything.
    let v = h.object("Noop/default/a").await.unwrap();
    assert_eq!((v["disabled"].as_bool(), runs_of(&v)), (Some(false), before), "{v:#}");

    // Health, readiness and metrics stay open (for probes and scrapers), and say nothing secret.
    for (path, says) in [("/healthz", "ok"), ("/readyz", "ready"), ("/metrics", "steward_reconcile_total")] {
        let r = h.http("GET", path, &[], b"");
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert!(r.body.contains(says) && !r.body.contains(token), "{path}: {r:?}");
    }

    // The right token works on every route.
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    for (method, path) in reads {
        assert_eq!(h.http(method, path, &auth, b"").status, 200, "{method} {path}");
    }
    assert_eq!(h.http("POST", "/api/v1/kinds/Noop/disable", &auth, b"").status, 200);
    assert_eq!(h.object("Noop/default/a").await.unwrap()["disabled"], true);
    assert_eq!(h.http("POST", "/api/v1/kinds/Noop/enable", &auth, b"").status, 200);
    assert_eq!(h.http("POST", "/api/v1/resources/Noop/default/a/reconcile", &auth, b"").status, 202);
    h.wait_object("Noop/default/a", T, "the authorized trigger's run", |v| v.is_some_and(|v| runs_of(v) > before))
        .await;
}

#[test]
fn a_non_loopback_listener_without_a_token_file_does_not_start() {
    let h = host("api: { listen: 0.0.0.0:{port} }\n", &[]);
    let out = crate::common::steward().args(["run", "--config"]).arg(h.config_path()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token_file"), "{err}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", h.port)).is_err(), "nothing listens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_are_cut_off_and_past_the_connection_cap_clients_wait_their_turn() {
    use std::io::{Read, Write};
    let mut h = host("api: { listen: 127.0.0.1:{port}, max_connections: 4, header_read_timeout: 1s }\n", &[]);
    h.start().await;
    // More connections than the cap, each sending half a request's headers: each is closed when
    // its time is up, the later ones once they got a slot.
    let slow: Vec<std::net::TcpStream> = (0..10)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", h.port)).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").unwrap();
            s
        })
        .collect();
    // A whole request waits its turn, and is answered.
    let r = h.http("GET", "/healthz", &[], b"");
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    for mut s in slow {
        s.set_read_timeout(Some(T)).unwrap();
        let mut rest = Vec::new();
        let read = s.read_to_end(&mut rest);
        assert!(read.is_ok() && rest.is_empty(), "closed with nothing said: {read:?} {rest:?}");
    }
    let api = ["server=\"api\""];
    let text = common::eventually(
        T,
        "the ten timeouts counted",
        async || h.wait_get_text("/metrics").await,
        |text| common::metric(text, "steward_http_header_timeouts_total", &api) >= 10.0,
    )
    .await;
    let capped = common::metric(&text, "steward_http_connection_cap_reached_total", &api);
    assert!(capped >= 1.0, "{text}");
    let open = common::metric(&text, "steward_http_connections", &api);
    assert!((1.0..=4.0).contains(&open), "this scrape's own connection, at most the cap: {text}");
}

/// A hostile MCP endpoint: answers every request with a 500 whose body echoes the request's
/// headers (credentials included), as a misconfigured proxy might.
fn echoing_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).into_owned();
                let head = head.split("\r\n\r\n").next().unwrap_or_default().replace("\r\n", " | ");
                let body = format!("upstream refused the request: {head}");
                let _ = write!(
                    conn,
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_in_status_and_the_api_carry_no_host_paths_and_no_credentials() {
    let mut h = host("", &[]);
    let dir = h.dir.path().to_path_buf();
    let dir_text = dir.display().to_string();
    let canonical = std::fs::canonicalize(&dir).unwrap().display().to_string();
    let closed = common::host::free_port();
    let echo = echoing_server();
    let server = |name: &str, spec: &str| {
        format!(
            "apiVersion: steward.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  autoStart: true\n  timeout: 2\n{spec}"
        )
    };
    let secrets = ["s3cr3t-in-url", "s3cr3t-in-query", "s3cr3t-bearer", "s3cr3t-api-key", "s3cr3t-in-stderr"];
    h.write(
        "remote.yaml",
        &[
            server("userinfo", &format!("  type: streamable-http\n  url: \"http://alice:s3cr3t-in-url@127.0.0.1:{closed}/mcp\"\n")),
            server("userinfo-tls", &format!("  type: streamable-http\n  url: \"https://alice:s3cr3t-in-url@127.0.0.1:{closed}/mcp\"\n")),
            server("query", &format!("  type: sse\n  url: \"http://127.0.0.1:{closed}/sse?token=s3cr3t-in-query\"\n")),
            server(
                "headers",
                &format!(
                    "  type: streamable-http\n  url: \"http://127.0.0.1:{echo}/mcp\"\n  headers:\n    Authorization: \"Bearer s3cr3t-bearer\"\n    X-Api-Key: s3cr3t-api-key\n"
                ),
            ),
        ]
        .join("---\n"),
    );
    h.write(
        "local.yaml",
        &[
            server("missing", &format!("  type: stdio\n  command: \"{dir_text}/bin/no-such-mcp-server\"\n")),
            server(
                "talks",
                &format!(
                    "  type: stdio\n  command: /bin/sh\n  args: [\"-c\", \"echo {dir_text}/conf/server.json is unreadable >&2; echo password=s3cr3t-in-stderr >&2; exit 3\"]\n"
                ),
            ),
        ]
        .join("---\n"),
    );
    h.write("nested/deeper/broken.yaml", "apiVersion: v1\nkind: Noop\nmetadata: [\n");
    std::fs::write(dir.join("plugins/broken.wasm"), b"\0asm not really").unwrap();
    h.start().await;

    let names = ["userinfo", "userinfo-tls", "query", "headers", "missing", "talks"];
    for name in names {
        h.wait_object(&format!("MCPServer/default/{name}"), T, "a lastError in its status", |v| {
            v.is_some_and(|v| v["status"]["lastError"].is_string())
        })
        .await;
    }
    let o = h
        .wait_get("/api/v1/overview", T, "the file problem", |v| {
            v["problems"].as_array().is_some_and(|p| !p.is_empty())
        })
        .await;
    assert!(o["problems"][0].as_str().unwrap().starts_with("nested/deeper/broken.yaml:3:"), "{o:#}");

    // Everything the API and the CLI show.
    let mut shown: Vec<(String, String)> = Vec::new();
    for path in ["/api/v1/resources", "/api/v1/overview", "/api/v1/plugins", "/api/v1/resources?kind=MCPServer"] {
        shown.push((path.to_string(), h.api().get(path).await.unwrap().to_string()));
    }
    for name in names {
        let key = format!("MCPServer/default/{name}");
        shown.push((key.clone(), h.object(&key).await.unwrap().to_string()));
        let (code, out, err) = h.cli(&["status", &key]);
        assert_eq!(code, 0, "{err}");
        shown.push((format!("steward status {key}"), out));
    }
    for args in [&["status"][..], &["status", "MCPServer", "-o", "json"], &["plugins"]] {
        let (code, out, err) = h.cli(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        shown.push((format!("steward {}", args.join(" ")), out));
    }
    // The host's own log keeps paths (operators need them) but no credentials either.
    let log = h.log();
    for needle in secrets.iter().filter(|s| **s != "s3cr3t-in-stderr") {
        assert!(!log.contains(needle), "the host log shows {needle:?}");
    }
    // The one path allowed is the command a user wrote in a spec, shown as given (issue 26: a
    // server whose command does not exist names the path that was asked for).
    let asked = format!("{dir_text}/bin/no-such-mcp-server");
    for (what, text) in &shown {
        let text = text.replace(&asked, "<the command as given>");
        for needle in [dir_text.as_str(), canonical.as_str()].into_iter().chain(secrets) {
            assert!(!text.contains(needle), "{what} shows {needle:?}:\n{text}");
        }
    }
    // What is left is still useful: which program, which host, what went wrong.
    let last_error = |name: &str| {
        let v: Value =
            serde_json::from_str(&shown.iter().find(|(w, _)| w.ends_with(&format!("/{name}"))).unwrap().1).unwrap();
        v["status"]["lastError"].as_str().unwrap().to_string()
    };
    assert!(last_error("missing").contains(&format!("`{asked}`")), "{}", last_error("missing"));
    assert!(last_error("userinfo").contains("127.0.0.1"), "{}", last_error("userinfo"));
    assert!(last_error("talks").contains("server.json"), "{}", last_error("talks"));
}
