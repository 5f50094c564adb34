//! A child's stderr: read in large chunks; lines within a rate are logged at debug level and kept in a bounded tail, with the service's secret values redacted; lines over the rate are dropped and counted.
//!
//! A child that floods its stderr (`yes >&2`) would otherwise cost the host a core for as long
//! as it floods. Over the rate, the reader drops lines without looking at them beyond their
//! newline, and pauses between reads, so that the child waits on its pipe instead.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::redact::Redactor;

/// How many stderr lines of a process are kept.
pub(crate) const TAIL_LINES: usize = 50;
/// Where a longer stderr line is cut, in bytes (past it, to the end of a secret value the cut
/// would split); the rest of the line is dropped.
pub(crate) const TAIL_LINE_BYTES: usize = 1024;
/// Lines a second logged and kept, on average; the lines over it are dropped and counted.
pub(crate) const LINES_PER_SEC: u32 = 100;
/// Lines logged and kept at once above the rate (a burst at start, a stack trace).
const BURST: u32 = 1000;
/// Bytes read at once.
const CHUNK: usize = 64 * 1024;
/// The pause after a read over the rate (one that dropped lines, or of a line already cut
/// without a token left): a flooding child then waits on its full pipe.
const FLOOD_PAUSE: Duration = Duration::from_millis(50);
/// Drops are told at most this often (each telling updates the service's status).
const TELL_EVERY: Duration = Duration::from_secs(5);

/// What a process wrote to stderr: its last [`TAIL_LINES`] lines and how many were dropped.
#[derive(Debug, Default)]
pub(crate) struct Stderr {
    state: Mutex<State>,
    dropped_changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    lines: VecDeque<String>,
    dropped: u64,
}

impl Stderr {
    /// The kept lines joined by newlines; empty when the process wrote nothing.
    pub(crate) fn text(&self) -> String {
        self.lock().lines.iter().map(String::as_str).collect::<Vec<_>>().join("\n")
    }

    /// How many lines were dropped for being over [`LINES_PER_SEC`].
    pub(crate) fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Resolves when more lines were dropped since the last time it resolved; at most every
    /// [`TELL_EVERY`], and once more after the last drop. Cancel-safe.
    pub(crate) async fn dropped_changed(&self) {
        self.dropped_changed.notified().await;
    }

    fn push(&self, line: String) {
        let mut state = self.lock();
        if state.lines.len() == TAIL_LINES {
            state.lines.pop_front();
        }
        state.lines.push_back(line);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the status says of `dropped` lines.
pub(crate) fn drop_notice(dropped: u64) -> String {
    format!("stderr: {dropped} lines dropped (over {LINES_PER_SEC} lines/s)")
}

/// A token bucket of lines: [`LINES_PER_SEC`] a second, at most [`BURST`] at once.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full() -> Self {
        Self { tokens: f64::from(BURST), at: Instant::now() }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let earned = now.duration_since(self.at).as_secs_f64() * f64::from(LINES_PER_SEC);
        self.tokens = (self.tokens + earned).min(f64::from(BURST));
        self.at = now;
    }

    fn take(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The line being read, cut past what is kept.
struct Line {
    bytes: Vec<u8>,
    /// The most bytes kept: [`TAIL_LINE_BYTES`] and room for a secret value cut there.
    keep: usize,
    cut: bool,
}

impl Line {
    fn extend(&mut self, chunk: &[u8]) {
        let room = self.keep.saturating_sub(self.bytes.len());
        if chunk.len() > room {
            self.cut = true;
        }
        self.bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// The line for people, and it is reset: cut at [`TAIL_LINE_BYTES`], or past it to the end
    /// of a secret value the cut would split, and only then redacted, so that no part of a value
    /// is left (a value cut off at the end of the buffer starts past the cut).
    fn take(&mut self, redactor: &Redactor) -> String {
        if self.bytes.last() == Some(&b'\r') {
            self.bytes.pop();
        }
        let text = String::from_utf8_lossy(&self.bytes);
        let end = cut_end(&text, redactor);
        let mut line = redactor.text(&text[..end]).into_owned();
        if self.cut || end < text.len() {
            line.push_str(" [...]");
        }
        self.bytes.clear();
        self.cut = false;
        line
    }
}

/// Where `text` is cut: at [`TAIL_LINE_BYTES`] (on a char boundary), or past it at the first
/// boundary no secret value straddles, one where redacting the two sides apart gives what
/// redacting the whole does. A value that starts before the cut is whole in `text` (the buffer
/// has room for the longest), so it goes whole.
fn cut_end(text: &str, redactor: &Redactor) -> usize {
    if text.len() <= TAIL_LINE_BYTES {
        return text.len();
    }
    let whole = redactor.text(text);
    let mut end = crate::sanitize::cut_at(text, TAIL_LINE_BYTES).len();
    while end < text.len() {
        let head = redactor.text(&text[..end]);
        if whole.strip_prefix(&*head) == Some(&*redactor.text(&text[end..])) {
            break;
        }
        end += 1;
        while !text.is_char_boundary(end) {
            end += 1;
        }
    }
    end
}

/// Reads `stderr` to its end into `tail`: each line within the rate is logged at debug level
/// (target `steward::services::stderr`) and kept, with `redactor`'s values replaced; the
/// others are counted as dropped.
///
/// Memory stays bounded whatever the process writes: one chunk, and a line is never buffered
/// past [`TAIL_LINE_BYTES`] (and the longest secret value).
pub(crate) async fn collect(mut stderr: impl AsyncRead + Unpin, tail: Arc<Stderr>, redactor: Redactor) {
    let mut buf = vec![0u8; CHUNK];
    let mut line = Line { bytes: Vec::with_capacity(256), keep: TAIL_LINE_BYTES + redactor.longest(), cut: false };
    let mut bucket = Bucket::full();
    // Drops not told yet, and when they may be.
    let mut untold = false;
    let mut tell_at = Instant::now();
    loop {
        let read = if untold {
            match tokio::time::timeout_at(tell_at, stderr.read(&mut buf)).await {
                Ok(read) => read,
                Err(_) => {
                    tail.dropped_changed.notify_one();
                    untold = false;
                    continue;
                }
            }
        } else {
            stderr.read(&mut buf).await
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "reading stderr failed");
                break;
            }
        };
        bucket.refill();
        let mut dropped = 0u64;
        let mut rest = &buf[..n];
        while let Some(i) = memchr::memchr(b'\n', rest) {
            if bucket.take() {
                line.extend(&rest[..i]);
                keep(&tail, line.take(&redactor));
            } else {
                // Dropped: only its newline was looked for.
                line.bytes.clear();
                line.cut = false;
                dropped += 1;
            }
            rest = &rest[i + 1..];
        }
        let no_newline = rest.len() == n;
        line.extend(rest);
        // A read of a line already cut (a flood without newlines) costs a line: over the rate, it
        // pauses as dropped lines do.
        let over = dropped > 0 || (no_newline && line.cut && !bucket.take());
        if dropped > 0 {
            tail.lock().dropped += dropped;
            untold = true;
            if Instant::now() >= tell_at {
                tail.dropped_changed.notify_one();
                untold = false;
                tell_at = Instant::now() + TELL_EVERY;
            }
        }
        if over {
            tokio::time::sleep(FLOOD_PAUSE).await;
        }
    }
    if !line.bytes.is_empty() {
        keep(&tail, line.take(&redactor));
    }
    if untold {
        tail.dropped_changed.notify_one();
    }
}

fn keep(tail: &Stderr, line: String) {
    tracing::debug!(target: "steward::services::stderr", "{line}");
    tail.push(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_last_lines_each_cut() {
        let mut input = Vec::new();
        for i in 0..(TAIL_LINES + 10) {
            input.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        input.extend(std::iter::repeat_n(b'x', TAIL_LINE_BYTES * 3));
        input.extend_from_slice(b"\nlast without newline");
        let tail = Arc::new(Stderr::default());
        collect(&input[..], tail.clone(), Redactor::default()).await;
        let text = tail.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 12");
        assert_eq!(lines[TAIL_LINES - 2], format!("{} [...]", "x".repeat(TAIL_LINE_BYTES)));
        assert_eq!(lines[TAIL_LINES - 1], "last without newline");
        assert_eq!(tail.dropped(), 0);
    }

    #[tokio::test]
    async fn secret_values_are_redacted_even_where_a_long_line_is_cut() {
        let value = "sv-Q7-secret-in-stderr".to_string();
        let mut input = format!("key {value} refused\n").into_bytes();
        // The value straddles the cut of a long line.
        input.extend(std::iter::repeat_n(b'y', TAIL_LINE_BYTES - 5));
        input.extend_from_slice(format!("{value}{}\n", "z".repeat(100)).as_bytes());
        let tail = Arc::new(Stderr::default());
        collect(&input[..], tail.clone(), Redactor::new([&value])).await;
        let text = tail.text();
        assert!(!text.contains("sv-Q7"), "{text}");
        assert!(text.starts_with("key <redacted> refused\n"), "{text}");
        assert!(text.ends_with("y<redacted> [...]"), "the value the cut splits goes whole: {text}");
    }

    #[tokio::test]
    async fn no_part_of_a_value_cut_off_at_the_end_of_the_buffer_is_kept() {
        // The buffer keeps 1024 + 40 bytes: the value, 1000 bytes, and 24 bytes of the value
        // again. Redacting the first value shortens the text by 30 bytes, which would bring 14
        // bytes of the second within a cut of the redacted text.
        let value = "tok-0123456789abcdefghijklmnopqrstuvwxyz".to_string();
        assert_eq!(value.len(), 40);
        let input = format!("{value}{}{value} and more\n", "x".repeat(1000));
        let tail = Arc::new(Stderr::default());
        collect(input.as_bytes(), tail.clone(), Redactor::new([&value])).await;
        let text = tail.text();
        assert!(!text.contains(&value[..4]), "{text}");
        assert_eq!(text, format!("<redacted>{} [...]", "x".repeat(TAIL_LINE_BYTES - value.len())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_without_newlines_is_paused_too() {
        // `cat /dev/zero >&2`: full chunks, no line ever ends, so none is dropped.
        let chunks = BURST as u64 + 240;
        let input = tokio::io::repeat(0).take(chunks * CHUNK as u64);
        let tail = Arc::new(Stderr::default());
        let start = Instant::now();
        collect(input, tail.clone(), Redactor::default()).await;
        // Past the burst, a read earns its token or waits for one: about 120 reads a second (100
        // earned, 20 after pauses), so 240 reads take about 2 s of the paused clock.
        let paused = start.elapsed();
        assert!(paused >= Duration::from_secs(1), "{paused:?}");
        assert_eq!(tail.dropped(), 0);
        assert_eq!(tail.text(), format!("{} [...]", "\0".repeat(TAIL_LINE_BYTES)));
    }

    #[tokio::test(start_paused = true)]
    async fn lines_over_the_rate_are_dropped_and_counted() {
        // Far more lines at once than the burst: the burst is kept, the rest dropped.
        let lines = 20 * BURST as usize;
        let input = "flood\n".repeat(lines).into_bytes();
        let tail = Arc::new(Stderr::default());
        let told = {
            let tail = tail.clone();
            tokio::spawn(async move { tail.dropped_changed().await })
        };
        collect(&input[..], tail.clone(), Redactor::default()).await;
        let dropped = tail.dropped();
        // The paused clock advances only by the pauses after reads that dropped lines, which
        // earn a few tokens each.
        assert!(dropped >= (lines - 2 * BURST as usize) as u64 && dropped < lines as u64, "{dropped}");
        assert_eq!(tail.text().lines().count(), TAIL_LINES);
        told.await.unwrap();
        assert_eq!(drop_notice(7), "stderr: 7 lines dropped (over 100 lines/s)");
    }
}
