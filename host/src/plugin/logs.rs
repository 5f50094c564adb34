//! Plugin output (the `log` import, stdout and stderr), bounded per call and rate-limited per plugin.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use steward_sdk::LogLevel;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line kept; longer ones are cut and marked.
pub const MAX_LINE: usize = 4096;
/// Most lines kept from one call; the rest are counted.
pub const MAX_LINES_PER_CALL: usize = 200;

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
    /// The text, at most [`MAX_LINE`] bytes.
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
    /// Records a line, cutting it to [`MAX_LINE`].
    pub fn push(&mut self, level: LogLevel, source: LogSource, message: &str) {
        if source == LogSource::Log && level == LogLevel::Error && message.starts_with("panic: ") {
            self.panic = Some(cut(message.trim_start_matches("panic: ")));
        }
        if self.lines.len() >= MAX_LINES_PER_CALL {
            self.dropped += 1;
            return;
        }
        self.lines.push(LogLine { level, source, message: cut(message) });
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

fn cut(s: &str) -> String {
    if s.len() <= MAX_LINE {
        return s.to_string();
    }
    let mut end = MAX_LINE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut at {MAX_LINE} bytes]", &s[..end])
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

/// A token bucket per plugin: how many lines per second reach the host log, across calls.
pub struct RateLimit {
    state: Mutex<Bucket>,
    per_sec: f64,
    burst: f64,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: u64,
    last_report: Instant,
}

impl RateLimit {
    /// `per_sec` lines a second on average, bursts of `burst`.
    pub fn new(per_sec: u32, burst: u32) -> Self {
        let now = Instant::now();
        Self {
            state: Mutex::new(Bucket { tokens: burst as f64, at: now, suppressed: 0, last_report: now }),
            per_sec: per_sec as f64,
            burst: burst as f64,
        }
    }

    /// Takes one token. `Ok(())` means emit; `Err(Some(n))` means drop, and report
    /// that `n` lines were suppressed (at most once a second); `Err(None)` means drop quietly.
    pub fn take(&self) -> Result<(), Option<u64>> {
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.per_sec).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        b.suppressed += 1;
        if now.duration_since(b.last_report).as_secs() >= 1 {
            b.last_report = now;
            let n = std::mem::take(&mut b.suppressed);
            return Err(Some(n));
        }
        Err(None)
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
    fn rate_limit_allows_a_burst_then_drops() {
        let rl = RateLimit::new(1, 5);
        let allowed = (0..100).filter(|_| rl.take().is_ok()).count();
        assert_eq!(allowed, 5);
    }
}
