//! A bounded tail of a child's stderr: the last lines, each cut to a maximum length.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How many stderr lines of a process are kept.
pub(crate) const TAIL_LINES: usize = 50;
/// The longest stderr line kept, in bytes; the rest of a longer line is dropped.
pub(crate) const TAIL_LINE_BYTES: usize = 1024;

/// The last [`TAIL_LINES`] lines a process wrote to stderr.
#[derive(Debug, Default)]
pub(crate) struct LogTail {
    lines: VecDeque<String>,
}

impl LogTail {
    /// Appends one line (without its newline), cutting it to [`TAIL_LINE_BYTES`].
    fn push(&mut self, bytes: &[u8], cut: bool) {
        let mut line = String::from_utf8_lossy(bytes).into_owned();
        if cut {
            line.push_str(" [...]");
        }
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// The kept lines joined by newlines; empty when the process wrote nothing.
    pub(crate) fn text(&self) -> String {
        self.lines.iter().map(String::as_str).collect::<Vec<_>>().join("\n")
    }
}

/// A [`LogTail`] shared between the reader task and the supervisor.
pub(crate) type SharedTail = Arc<Mutex<LogTail>>;

/// Reads `stderr` to its end into `tail`, logging each line at debug level.
///
/// Memory stays bounded whatever the process writes: a line is never buffered
/// past [`TAIL_LINE_BYTES`].
pub(crate) async fn collect(stderr: impl AsyncRead + Unpin, tail: SharedTail) {
    let mut reader = BufReader::with_capacity(8 * 1024, stderr);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut cut = false;
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                tracing::debug!(error = %e, "reading stderr failed");
                break;
            }
        };
        if buf.is_empty() {
            break;
        }
        let (chunk, newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        let room = TAIL_LINE_BYTES.saturating_sub(line.len());
        if chunk.len() > room {
            cut = true;
        }
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len() + usize::from(newline);
        reader.consume(used);
        if newline {
            finish_line(&tail, &mut line, &mut cut);
        }
    }
    if !line.is_empty() {
        finish_line(&tail, &mut line, &mut cut);
    }
}

fn finish_line(tail: &SharedTail, line: &mut Vec<u8>, cut: &mut bool) {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    tracing::debug!(target: "steward::services::stderr", "{}", String::from_utf8_lossy(line));
    tail.lock().unwrap_or_else(|e| e.into_inner()).push(line, *cut);
    line.clear();
    *cut = false;
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
        let tail = SharedTail::default();
        collect(&input[..], tail.clone()).await;
        let text = tail.lock().unwrap().text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 12");
        assert_eq!(lines[TAIL_LINES - 2], format!("{} [...]", "x".repeat(TAIL_LINE_BYTES)));
        assert_eq!(lines[TAIL_LINES - 1], "last without newline");
    }
}
