//! A test plugin that misbehaves on purpose, in the way its object's `spec.behavior` names.
//!
//! Each behaviour is one thing a hostile or buggy plugin can do; the host's
//! tests prove that each ends as the right typed error within its limit.

use std::time::Duration;

use steward_sdk::prelude::*;

mod escape;

/// What the plugin does when reconciling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Behavior {
    /// Return a status at once.
    Ok,
    /// Spin forever.
    Loop,
    /// Allocate (and touch) memory without bound.
    Alloc,
    /// Execute `unreachable`.
    Trap,
    /// Panic with a message.
    Panic,
    /// Return a status of `sizeMb` megabytes.
    BigOutput,
    /// Print `lines` lines to stdout, then return.
    Chatty,
    /// Call the host's `log` `lines` times, then return.
    LogFlood,
    /// Return `lines` events.
    EventFlood,
    /// Call the host's `list` forever.
    ListLoop,
    /// Try to read files, list directories, read the environment, open a socket and spawn a process.
    Escape,
    /// Ask for an owned service.
    Services,
    /// Read through `get` and `list` and report what was seen.
    Read,
    /// `get` `reads` distinct `Noop` objects named `n0`, `n1`, …, and report the value of `n{report}`.
    ManyReads,
    /// Fail with `retry`.
    Retry,
    /// Fail with `fatal`.
    Fatal,
    /// Fail with `retry` until the `Noop` object `default/target` exists, then return a status;
    /// logs one line on each call.
    RetryUntil,
    /// `GET` `url` through `wasi:http` (an import of capability `http`, which the plugin does not
    /// declare) and report the response's status code and body, or the client's error.
    Fetch,
}

/// The spec of a `Misbehave` object.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MisbehaveSpec {
    /// What to do.
    pub behavior: Behavior,
    /// `bigOutput`: megabytes to return.
    #[serde(default)]
    pub size_mb: u32,
    /// `chatty`, `logFlood`, `eventFlood`: how many lines (events).
    #[serde(default)]
    pub lines: u32,
    /// `logFlood`, `eventFlood`: text appended to every line (for example newlines that try to forge host log lines).
    #[serde(default)]
    pub suffix: String,
    /// `escape`: a loopback TCP port to try to connect to.
    #[serde(default)]
    pub port: u16,
    /// `escape`: a loopback UDP port to try to send to.
    #[serde(default)]
    pub udp_port: u16,
    /// `escape`: an absolute path of a host file to try to read.
    #[serde(default)]
    pub secret_file: String,
    /// `escape`: an absolute path of a host directory to try to list and write into.
    #[serde(default)]
    pub dir: String,
    /// `escape`: a host environment variable to try to read.
    #[serde(default)]
    pub env_var: String,
    /// `fetch`: the URL to get.
    #[serde(default)]
    pub url: String,
    /// `manyReads`: how many distinct objects to get.
    #[serde(default)]
    pub reads: u32,
    /// `manyReads`: which of them to report the value of.
    #[serde(default)]
    pub report: u32,
    /// Any behaviour that answers: ask to be reconciled again after this many milliseconds.
    #[serde(default)]
    pub requeue_ms: u64,
    /// Any behaviour: a warning the plugin reports (`Kind::warnings`) at `spec.warn`, with this
    /// message; `panic` makes `warnings` panic instead.
    #[serde(default)]
    pub warn: String,
}

/// The `Misbehave` kind.
pub struct Misbehave;

impl Kind for Misbehave {
    type Spec = MisbehaveSpec;
    type Status = serde_json::Value;
    const GROUP: &'static str = "test.steward.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Misbehave";
    const PLURAL: &'static str = "misbehaves";

    fn warnings(obj: &Object<MisbehaveSpec, serde_json::Value>) -> Vec<FieldError> {
        match obj.spec.warn.as_str() {
            "" => Vec::new(),
            "panic" => panic!("misbehave: deliberate panic in warnings"),
            w => vec![FieldError::new("spec.warn", w)],
        }
    }

    fn reconcile(
        ctx: &Context,
        obj: &Object<MisbehaveSpec, serde_json::Value>,
    ) -> Result<Outcome<serde_json::Value>, Error> {
        let spec = &obj.spec;
        let status = match spec.behavior {
            Behavior::Ok => serde_json::json!({"ok": true}),
            Behavior::Loop => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Behavior::Alloc => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            Behavior::Trap => trap(),
            Behavior::Panic => panic!("misbehave: deliberate panic in {}", obj.name),
            Behavior::BigOutput => {
                let big = "x".repeat(spec.size_mb as usize * 1024 * 1024);
                serde_json::json!({ "big": big })
            }
            Behavior::Chatty => {
                for i in 0..spec.lines {
                    println!("chatty line {i}");
                }
                serde_json::json!({"printed": spec.lines})
            }
            Behavior::LogFlood => {
                for i in 0..spec.lines {
                    ctx.info(&format!("flood line {i}{}", spec.suffix));
                }
                serde_json::json!({"logged": spec.lines})
            }
            Behavior::EventFlood => {
                let mut out = Outcome::status(serde_json::json!({"events": spec.lines}));
                for i in 0..spec.lines {
                    out =
                        out.event(steward_sdk::EventType::Warning, "Flood", format!("flood event {i}{}", spec.suffix));
                }
                return Ok(requeue(out, spec));
            }
            Behavior::ListLoop => loop {
                std::hint::black_box(ctx.list("Misbehave", None));
            },
            Behavior::Escape => escape::run(ctx, spec),
            Behavior::Services => {
                return Ok(Outcome::status(serde_json::json!({"asked": true})).service(ServiceSpec {
                    name: "server".into(),
                    transport: Transport::Stdio,
                    command: Some("/bin/true".into()),
                    args: vec![],
                    env: Default::default(),
                    working_dir: None,
                    url: None,
                    headers: Default::default(),
                    timeout_ms: 1000,
                    secrets: vec![],
                }));
            }
            Behavior::Read => {
                let listed: Vec<String> = ctx.list("Noop", None).into_iter().map(|o| o.name).collect();
                let got = ctx.get("Noop", "default", "target").map(|o| o.spec);
                return Ok(Outcome::status(serde_json::json!({"listed": listed, "got": got}))
                    .requeue_after(Duration::from_secs(30)));
            }
            Behavior::ManyReads => {
                let mut found = 0u32;
                let mut reported = serde_json::Value::Null;
                for i in 0..spec.reads {
                    if let Some(o) = ctx.get("Noop", "default", &format!("n{i}")) {
                        found += 1;
                        if i == spec.report {
                            reported = serde_json::from_str::<serde_json::Value>(&o.spec)
                                .ok()
                                .and_then(|s| s.get("value").cloned())
                                .unwrap_or_default();
                        }
                    }
                }
                serde_json::json!({"found": found, "reported": reported})
            }
            Behavior::Fetch => match steward_sdk::http::get(&spec.url).send() {
                Ok(resp) => serde_json::json!({"code": resp.status, "body": resp.text()}),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            },
            Behavior::Retry => return Err(Error::retry("misbehave: try again later")),
            Behavior::Fatal => return Err(Error::fatal("misbehave: this will never work")),
            Behavior::RetryUntil => {
                let found = ctx.get("Noop", "default", "target").is_some();
                ctx.info(&format!("misbehave: target found: {found}"));
                if !found {
                    return Err(Error::retry("misbehave: waiting for Noop default/target"));
                }
                serde_json::json!({"found": true})
            }
        };
        Ok(requeue(Outcome::status(status), spec))
    }
}

/// `out`, asking to be reconciled again after `requeueMs` when the spec sets it.
fn requeue(out: Outcome<serde_json::Value>, spec: &MisbehaveSpec) -> Outcome<serde_json::Value> {
    if spec.requeue_ms > 0 { out.requeue_after(Duration::from_millis(spec.requeue_ms)) } else { out }
}

#[cfg(target_arch = "wasm32")]
fn trap() -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(not(target_arch = "wasm32"))]
fn trap() -> ! {
    std::process::abort()
}

steward_sdk::export_plugin!(name: "misbehave", version: "0.1.0", kinds: [Misbehave]);
