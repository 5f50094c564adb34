//! Plugin output (the `log` import, stdout and stderr), bounded per call and rate-limited per plugin.

use std::fmt::Write as _;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use steward_sdk::LogLevel;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line kept; longer ones are cut and marked.
pub const MAX_LINE: usize = 4096;
/// Most lines kept from one call; the rest are counted.
pub const MAX_LINES_PER_CALL: usize = 200;
/// Lines a second one plugin may write to the host log, on average.
pub const LINES_PER_SEC: u32 = 100;
/// Lines one plugin may write to the host log in a burst.
pub const LINES_BURST: u32 = 500;
/// How often, at most, the host reports how many lines of one plugin it dropped.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Where a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The `log` import.
    Log,
    /// WASI stdout.
    Stdout,
    /// WASI stderr.
    Stderr,
}

/// One line a plugin wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    /// Severity (stdout is info, stderr is warn).
    pub level: LogLevel,
    /// Where it came from.
    pub source: LogSource,
    /// The text, one line of at most [`MAX_LINE`] bytes (see [`one_line`]).
    pub message: String,
}

/// The lines of one call: at most [`MAX_LINES_PER_CALL`], the rest counted in `dropped`.
#[derive(Debug, Default)]
pub struct CallLog {
    /// Lines kept.
    pub lines: Vec<LogLine>,
    /// Lines dropped by the per-call bound.
    pub dropped: u64,
    /// The last panic message the plugin logged (the SDK logs panics before trapping).
    pub panic: Option<String>,
    partial_out: String,
    partial_err: String,
}

impl CallLog {
    /// Records a line as [`one_line`] makes it.
    pub fn push(&mut self, level: LogLevel, source: LogSource, message: &str) {
        if source == LogSource::Log && level == LogLevel::Error && message.starts_with("panic: ") {
            self.panic = Some(cut(message.trim_start_matches("panic: ")));
        }
        if self.lines.len() >= MAX_LINES_PER_CALL {
            self.dropped += 1;
            return;
        }
        self.lines.push(LogLine { level, source, message: one_line(message) });
    }

    fn write_stream(&mut self, source: LogSource, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let level = if source == LogSource::Stderr { LogLevel::Warn } else { LogLevel::Info };
        let mut partial = std::mem::take(match source {
            LogSource::Stderr => &mut self.partial_err,
            _ => &mut self.partial_out,
        });
        for ch in text.chars() {
            if ch == '\n' {
                let line = std::mem::take(&mut partial);
                self.push(level, source, &line);
            } else if partial.len() < MAX_LINE + 4 {
                partial.push(ch);
            }
        }
        *match source {
            LogSource::Stderr => &mut self.partial_err,
            _ => &mut self.partial_out,
        } = partial;
    }

    /// Ends the call: flushes unterminated stdout/stderr text as lines.
    pub fn finish(&mut self) {
        for source in [LogSource::Stdout, LogSource::Stderr] {
            let partial = std::mem::take(match source {
                LogSource::Stderr => &mut self.partial_err,
                _ => &mut self.partial_out,
            });
            if !partial.is_empty() {
                let level = if source == LogSource::Stderr { LogLevel::Warn } else { LogLevel::Info };
                self.push(level, source, &partial);
            }
        }
    }
}

/// `s` as one line of the host log: control characters (newlines included) and Unicode line
/// separators escaped, so that a plugin can neither forge host log lines nor multiply its line
/// count, nor drive a terminal; cut to at most [`MAX_LINE`] bytes, on a character boundary.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_LINE));
    for ch in s.chars() {
        let before = out.len();
        match ch {
            '\t' => out.push(ch),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
        if out.len() > MAX_LINE {
            out.truncate(before);
            let _ = write!(out, "… [cut at {MAX_LINE} bytes]");
            return out;
        }
    }
    out
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_LINE {
        return s.to_string();
    }
    format!("{}… [cut at {MAX_LINE} bytes]", crate::sanitize::cut_at(s, MAX_LINE))
}

/// WASI stdout or stderr of one plugin store: never blocks, never fails, keeps what [`CallLog`] bounds.
#[derive(Clone)]
pub struct LogSink {
    log: Arc<Mutex<CallLog>>,
    source: LogSource,
}

impl LogSink {
    /// A sink writing `source` lines into `log`.
    pub fn new(log: Arc<Mutex<CallLog>>, source: LogSource) -> Self {
        Self { log, source }
    }

    fn write_bytes(&self, bytes: &[u8]) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).write_stream(self.source, bytes);
    }
}

impl IsTerminal for LogSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogSink {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Pollable for LogSink {
    async fn ready(&mut self) {}
}

impl OutputStream for LogSink {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl AsyncWrite for LogSink {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A token bucket per plugin: how many lines a second reach the host log, across calls.
///
/// What it drops is counted and reported: at once the first time, then at most once every
/// [`REPORT_EVERY`], so that a plugin over its limits adds a bounded number of lines to the host log.
pub struct RateLimit {
    state: Mutex<Bucket>,
    per_sec: f64,
    burst: f64,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: u64,
    last_report: Option<Instant>,
}

/// Lines a plugin had dropped, to be reported now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropReport {
    /// Lines dropped since the last report (or since the plugin was loaded).
    pub dropped: u64,
    /// Whether this is the plugin's first report.
    pub first: bool,
}

impl RateLimit {
    /// `per_sec` lines a second on average, bursts of `burst`.
    pub fn new(per_sec: u32, burst: u32) -> Self {
        let now = Instant::now();
        Self {
            state: Mutex::new(Bucket { tokens: burst as f64, at: now, suppressed: 0, last_report: None }),
            per_sec: per_sec as f64,
            burst: burst as f64,
        }
    }

    /// Admits the first of `lines` lines the bucket has tokens for, and counts the rest, with
    /// `dropped_before` lines dropped on the way (the per-call bound), as dropped. Returns how
    /// many lines to emit, and a report when drops are due to be reported.
    pub fn admit(&self, lines: usize, dropped_before: u64) -> (usize, Option<DropReport>) {
        // Most calls log nothing: no tokens to take, nothing to count, no lock or clock.
        if lines == 0 && dropped_before == 0 {
            return (0, None);
        }
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.per_sec).min(self.burst);
        b.at = now;
        let admitted = lines.min(b.tokens.max(0.0) as usize);
        b.tokens -= admitted as f64;
        let dropped = (lines - admitted) as u64 + dropped_before;
        if dropped == 0 {
            return (admitted, None);
        }
        b.suppressed += dropped;
        if b.last_report.is_some_and(|at| now.duration_since(at) < REPORT_EVERY) {
            return (admitted, None);
        }
        let first = b.last_report.is_none();
        b.last_report = Some(now);
        let report = DropReport { dropped: std::mem::take(&mut b.suppressed), first };
        (admitted, Some(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_is_split_into_lines_and_bounded() {
        let mut log = CallLog::default();
        log.write_stream(LogSource::Stdout, b"one\ntw");
        log.write_stream(LogSource::Stdout, b"o\nthree");
        log.finish();
        let msgs: Vec<_> = log.lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(msgs, ["one", "two", "three"]);
        for i in 0..1000 {
            log.push(LogLevel::Info, LogSource::Log, &format!("{i}"));
        }
        assert_eq!(log.lines.len(), MAX_LINES_PER_CALL);
        assert_eq!(log.dropped, 1003 - MAX_LINES_PER_CALL as u64);
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let mut log = CallLog::default();
        log.push(LogLevel::Info, LogSource::Log, &"é".repeat(MAX_LINE));
        assert!(log.lines[0].message.len() < MAX_LINE + 40);
        assert!(log.lines[0].message.ends_with("[cut at 4096 bytes]"));
    }

    #[test]
    fn panics_are_remembered() {
        let mut log = CallLog::default();
        log.push(LogLevel::Error, LogSource::Log, "panic: panicked at src/lib.rs:1:1:\nboom");
        assert_eq!(log.panic.as_deref(), Some("panicked at src/lib.rs:1:1:\nboom"));
    }

    #[test]
    fn rate_limit_allows_a_burst_then_drops_and_reports_once() {
        let rl = RateLimit::new(1, 5);
        assert_eq!(rl.admit(3, 0), (3, None));
        assert_eq!(rl.admit(100, 7), (2, Some(DropReport { dropped: 98 + 7, first: true })));
        // Later drops are counted, and reported no sooner than REPORT_EVERY after the first report.
        assert_eq!(rl.admit(50, 0), (0, None));
        assert_eq!(rl.admit(0, 10), (0, None));
        assert_eq!(rl.state.lock().unwrap().suppressed, 60);
    }

    #[test]
    fn a_line_cannot_forge_or_multiply_host_log_lines() {
        let l = one_line("one\nINFO steward: forged\r\x1b[31mred\u{2028}\ttab");
        assert_eq!(l, "one\\nINFO steward: forged\\r\\u{1b}[31mred\\u{2028}\ttab");
        assert!(!l.contains('\n') && !l.contains('\r'));
        let long = one_line(&"\n".repeat(MAX_LINE));
        assert!(long.len() <= MAX_LINE + 40 && long.ends_with("[cut at 4096 bytes]"), "{long}");
        assert_eq!(one_line("plain text, «unicode»"), "plain text, «unicode»");
    }
}
