//! A headless Chromium driven over W3C WebDriver (Debian's `chromedriver`), installed when missing.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::eventually;
use crate::common::host::free_port;

/// The first file named `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `chromium` and `chromedriver`, installed with apt (Debian's `chromium` and `chromium-driver`)
/// when missing and this process is root; otherwise a panic that says what to install.
fn ensure_installed() -> (PathBuf, PathBuf) {
    if let (Some(c), Some(d)) = (on_path("chromium"), on_path("chromedriver")) {
        return (c, d);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test drives a real browser: install Chromium and its driver (Debian: `apt-get install chromium chromium-driver`)"
    );
    assert!(
        crate::common::apt_install(&["chromium", "chromium-driver"]),
        "`apt-get install chromium chromium-driver` failed; run it by hand to see why"
    );
    match (on_path("chromium"), on_path("chromedriver")) {
        (Some(c), Some(d)) => (c, d),
        _ => panic!("chromium and chromedriver are still not on PATH after installing chromium and chromium-driver"),
    }
}

/// One browser session; its driver and every process it started (the browser) are killed on drop.
pub struct Browser {
    driver: Child,
    base: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a 1280×1000 window.
    pub async fn start() -> Self {
        let (chromium, chromedriver) = ensure_installed();
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            // Its own process group, which the browser it starts joins: dropping the session
            // kills the group. Killing the driver alone left each test's Chromium running.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().unwrap();
        let mut b = Self {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            http: {
                // reqwest is built without a TLS provider of its own; this talks plain HTTP anyway.
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::new()
            },
            _profile: profile,
        };
        eventually(
            Duration::from_secs(30),
            "chromedriver to answer /status",
            async || b.call("GET", "/status", None).await.ok(),
            |v| v.as_ref().is_some_and(|v| v["value"]["ready"] == true),
        )
        .await;
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", format!("--user-data-dir={}", b._profile.path().display()),
            ]},
        }}});
        let session = b.call("POST", "/session", Some(caps)).await.unwrap_or_else(|e| panic!("{e}"));
        let id = session["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {session}"));
        b.base = format!("{}/session/{id}", b.base);
        b
    }

    /// One WebDriver command: the answer's JSON, or the driver's error as text.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).header("content-type", "application/json"),
        };
        let req = match body {
            Some(b) => req.body(b.to_string()),
            None => req,
        };
        let r = req.send().await.map_err(|e| format!("{method} {path}: {e}"))?;
        let status = r.status();
        let text = r.text().await.map_err(|e| format!("{method} {path}: {e}"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{method} {path}: {e}: {text}"))?;
        if status.is_success() { Ok(v) } else { Err(format!("{method} {path}: {status}: {v}")) }
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub async fn eval(&self, script: &str) -> Value {
        let v = self.call("POST", "/execute/sync", Some(json!({ "script": script, "args": [] }))).await;
        v.unwrap_or_else(|e| panic!("{e}"))["value"].take()
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let v = self.call("GET", "/screenshot", None).await.unwrap_or_else(|e| panic!("{e}"));
        base64_decode(v["value"].as_str().expect("the screenshot is base64 text"))
    }

    /// Saves a screenshot to `path` and returns its bytes.
    pub async fn save_screenshot(&self, path: &Path) -> Vec<u8> {
        let png = self.screenshot().await;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &png).unwrap();
        png
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver's group holds the session's Chromium and its helpers.
        if let Ok(group) = i32::try_from(self.driver.id()) {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory is touched.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (what WebDriver sends screenshots as).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {:?}", c as char),
    };
    let digits: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn base64_decodes_with_and_without_padding() {
    assert_eq!(base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
    assert_eq!(base64_decode("YQ=="), b"a");
    assert_eq!(base64_decode("YWJj"), b"abc");
}
