//! The live status page and the event stream: read by a script over plain HTTP, and watched in a real browser.

mod browser;

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::common::eventually;
use crate::common::host::{Host, noop, synced};
use browser::Browser;

const T: Duration = Duration::from_secs(60);

/// An open `GET` on the host: the status line, the headers, and the body to read line by line.
struct Stream {
    status: u16,
    headers: String,
    body: BufReader<TcpStream>,
}

/// `GET path` with `token` as bearer, as `curl -N` would; HTTP/1.0, so the body is not chunked.
async fn get(port: u16, path: &str, token: Option<&str>) -> Stream {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    tcp.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").as_bytes()).await.unwrap();
    let mut body = BufReader::new(tcp);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        body.read_line(&mut line).await.unwrap();
        if line.trim().is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Stream { status, headers: head.to_ascii_lowercase(), body }
}

impl Stream {
    /// The next server-sent event as (name, data), skipping keep-alive comments.
    async fn next_event(&mut self) -> (String, Value) {
        let (mut name, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            assert!(self.body.read_line(&mut line).await.unwrap() > 0, "the event stream ended");
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim());
            } else if line.is_empty() && !name.is_empty() {
                return (name, serde_json::from_str(&data).unwrap_or(Value::Null));
            }
        }
    }

    /// Reads events until one satisfies `f`; fails after `limit`.
    async fn until(&mut self, limit: Duration, what: &str, f: impl Fn(&str, &Value) -> bool) -> Value {
        let wait = async {
            loop {
                let (name, data) = self.next_event().await;
                if f(&name, &data) {
                    return data;
                }
            }
        };
        tokio::time::timeout(limit, wait).await.unwrap_or_else(|_| panic!("no event {what} within {limit:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_follows_an_object_to_synced_on_the_event_stream() {
    let mut h = Host::new("");
    h.start().await;
    let mut events = get(h.port, "/api/v1/events", None).await;
    assert_eq!(events.status, 200);
    assert!(events.headers.contains("content-type: text/event-stream"), "{}", events.headers);
    events.until(T, "hello", |name, _| name == "hello").await;

    h.write("a.yaml", &noop("a", "one"));
    let seen = events
        .until(T, "Noop/default/a Synced", |name, d| {
            name == "object" && d["key"] == "Noop/default/a" && d["phase"] == "Synced"
        })
        .await;
    assert_eq!(
        (seen["kind"].as_str(), seen["name"].as_str(), seen["generation"].as_u64()),
        (Some("Noop"), Some("a"), Some(1))
    );
    assert_eq!(seen["removed"], false);

    // Disabling the kind changes the overview, and says so.
    h.api().post("/api/v1/kinds/Noop/disable").await.unwrap();
    events.until(T, "overview (kinds)", |name, d| name == "overview" && d["changed"] == "kinds").await;

    // A deleted object is finalized and forgotten: the stream says it is removed.
    h.api().post("/api/v1/kinds/Noop/enable").await.unwrap();
    h.remove("a.yaml");
    events
        .until(T, "Noop/default/a removed", |name, d| {
            name == "object" && d["key"] == "Noop/default/a" && d["removed"] == true
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_stream_and_data_need_it_and_the_page_files_do_not() {
    let mut h =
        Host::with_files("api: { listen: 0.0.0.0:{port}, token_file: token }\n", &[("token", "s3cret-token\n")]);
    h.start().await;
    for path in ["/api/v1/events", "/api/v1/events?token=s3cret-token", "/api/v1/resources/Noop/default/a/spec"] {
        let anon = get(h.port, path, None).await;
        assert_eq!(anon.status, 401, "{path} without the token");
        let wrong = get(h.port, path, Some("nope")).await;
        assert_eq!(wrong.status, 401, "{path} with a wrong token");
    }
    let mut ok = get(h.port, "/api/v1/events", Some("s3cret-token")).await;
    assert_eq!(ok.status, 200);
    ok.until(T, "hello", |name, _| name == "hello").await;
    for (path, kind) in [("/", "text/html"), ("/app.js", "text/javascript"), ("/app.css", "text/css")] {
        let page = get(h.port, path, None).await;
        assert_eq!(page.status, 200, "{path} holds no data and loads without the token");
        assert!(page.headers.contains(&format!("content-type: {kind}")), "{path}: {}", page.headers);
        assert!(page.headers.contains("content-security-policy: default-src 'self'"), "{path}: {}", page.headers);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_in_chromium_shows_an_object_turn_synced_without_a_reload() {
    let _heavy = crate::common::heavy().await;
    let mut h = Host::new("");
    h.write("old.yaml", &noop("already-here", "x"));
    h.start().await;
    h.wait_object("Noop/default/already-here", T, "Synced", synced).await;
    let browser = Browser::start().await;
    browser.open(&format!("http://127.0.0.1:{}/", h.port)).await;

    let text_of = |id: &str| format!("return document.getElementById('{id}').textContent");
    let live = text_of("live");
    eventually(T, "the page to follow the event stream", async || browser.eval(&live).await, |v| v == "live").await;
    let row = |key: &str, what: &str| {
        format!("const r = document.querySelector('tr[data-key=\"{key}\"]'); return r ? {what} : null")
    };
    let old_phase = row("Noop/default/already-here", "r.dataset.phase");
    eventually(T, "the existing object in the table", async || browser.eval(&old_phase).await, |v| v == "Synced").await;

    // Marks this load of the page: a reload would lose the mark.
    browser.eval("window.stewardTestMark = 'same page'; return null").await;
    h.write("new.yaml", &noop("appears-live", "y"));
    let phase = row("Noop/default/appears-live", "r.dataset.phase");
    eventually(T, "the new object to appear and turn Synced", async || browser.eval(&phase).await, |v| v == "Synced")
        .await;
    assert_eq!(browser.eval("return window.stewardTestMark ?? null").await, "same page", "updated without a reload");

    // The kind's overview counts it, and the phase filter hides what is not Failed.
    let counts = "return document.querySelector('#kinds tr[data-kind=\"Noop\"]').textContent";
    eventually(
        T,
        "the overview to count 2 Synced",
        async || browser.eval(counts).await,
        |v| v.as_str().is_some_and(|t| t.contains("Synced 2")),
    )
    .await;
    let shown_failed = "const s = document.getElementById('filter-phase'); s.value = 'Failed'; s.dispatchEvent(new Event('change')); \
         return document.querySelectorAll('#objects tbody tr').length";
    assert_eq!(browser.eval(shown_failed).await, 0);
    browser.eval("const s = document.getElementById('filter-phase'); s.value = ''; s.dispatchEvent(new Event('change')); return null").await;

    // The detail of one object, and "reconcile now" from the page adds a manual reconcile to its history.
    browser.eval(&row("Noop/default/appears-live", "(r.click(), true)")).await;
    let history = "return [...document.querySelectorAll('#detail-history tbody tr')].map(r => r.cells[1].textContent)";
    let before = eventually(
        T,
        "the detail's history",
        async || browser.eval(history).await,
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    let spec = browser.eval(&text_of("detail-spec")).await;
    assert!(spec.as_str().is_some_and(|s| s.contains("\"value\": \"y\"")), "the spec is shown: {spec}");
    // The events the host recorded about it: it was ready at once (its Ready condition's reason).
    let events = "return [...document.querySelectorAll('#detail-events tbody tr')].map(r => r.cells[1].textContent + ' ' + r.cells[2].textContent)";
    let ready = |v: &Value| v.as_array().is_some_and(|a| a.iter().any(|r| r == "Normal Echoed"));
    eventually(T, "the detail's events", async || browser.eval(events).await, ready).await;
    browser.eval("document.getElementById('reconcile').click(); return null").await;
    let after = eventually(
        T,
        "a manual reconcile in the detail's history",
        async || browser.eval(history).await,
        |v| v.as_array().is_some_and(|a| a.iter().any(|r| r == "manualTrigger")),
    )
    .await;
    assert!(after.as_array().unwrap().len() > before.as_array().unwrap().len(), "{before} then {after}");
    // A second one, alike, is counted into that entry rather than added (the newest row first).
    browser.eval("document.getElementById('reconcile').click(); return null").await;
    let rows = "return [...document.querySelectorAll('#detail-history tbody tr')].map(r => r.cells[1].textContent + ' ' + r.cells[2].textContent)";
    let counted = eventually(
        T,
        "two manual reconciles in one history entry",
        async || browser.eval(rows).await,
        |v| v.as_array().and_then(|a| a.first()).is_some_and(|r| r == "manualTrigger Synced \u{d7}2"),
    )
    .await;
    assert_eq!(counted.as_array().unwrap().len(), after.as_array().unwrap().len(), "{after} then {counted}");

    let path = steward_plugin_build::workspace_root().join("target/test-artifacts/status-page.png");
    let png = browser.save_screenshot(&path).await;
    assert!(png.len() > 1000 && png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot at {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_token_once_and_then_shows_the_host() {
    let _heavy = crate::common::heavy().await;
    let mut h =
        Host::with_files("api: { listen: 0.0.0.0:{port}, token_file: token }\n", &[("token", "s3cret-token\n")]);
    h.write("a.yaml", &noop("a", "x"));
    h.start().await;
    let browser = Browser::start().await;
    browser.open(&format!("http://127.0.0.1:{}/", h.port)).await;
    let form_shown = "return !document.getElementById('token-form').hidden && document.getElementById('main').hidden";
    eventually(T, "the token form", async || browser.eval(form_shown).await, |v| v == true).await;

    let submit = |token: &str| {
        format!(
            "document.getElementById('token').value = '{token}'; \
             document.getElementById('token-form').requestSubmit(); return null"
        )
    };
    browser.eval(&submit("wrong")).await;
    let refused = "return document.getElementById('token-error').textContent";
    eventually(
        T,
        "a wrong token to be refused",
        async || browser.eval(refused).await,
        |v| v.as_str().is_some_and(|t| t.contains("refused")),
    )
    .await;
    assert_eq!(browser.eval(form_shown).await, true, "nothing is shown with a wrong token");

    browser.eval(&submit("s3cret-token")).await;
    let phase =
        "const r = document.querySelector('tr[data-key=\"Noop/default/a\"]'); return r ? r.dataset.phase : null";
    eventually(T, "the object in the table", async || browser.eval(phase).await, |v| v == "Synced").await;
    let live = "return document.getElementById('live').textContent";
    eventually(T, "the event stream with the token", async || browser.eval(live).await, |v| v == "live").await;
    assert_eq!(browser.eval("return sessionStorage.getItem('steward-token')").await, "s3cret-token");
}
