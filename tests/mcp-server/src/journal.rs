//! `--journal FILE`: one JSON line per tool-call event, appended to a file
//! that several server processes may share.
//!
//! Lines, one JSON object each (keys in any order):
//!
//! - `{"event":"call","tool":NAME,"arguments":{..},"pid":PID}` when a
//!   `tools/call` is received, before it runs (also for unknown tools);
//! - `{"event":"done","tool":NAME,"pid":PID}` when it has finished, just
//!   before the answer is sent (whether the answer is a success, a tool error
//!   or a protocol error);
//! - `{"event":"cancelled","tool":NAME,"pid":PID}` when the client cancelled
//!   it with `notifications/cancelled` before it finished (instead of `done`).
//!
//! A call still running when its session ends (stdin closed, HTTP session
//! deleted) is stopped without a `done` or `cancelled` line; so is one that
//! `crash` or `--exit-after-secs` cut short.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

#[derive(Debug)]
pub struct Journal {
    file: Mutex<File>,
}

impl Journal {
    /// Opens (creating it if needed) the journal for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file: Mutex::new(file) })
    }

    pub fn call(&self, tool: &str, arguments: &Value) -> io::Result<()> {
        self.record(&json!({"event": "call", "tool": tool, "arguments": arguments, "pid": std::process::id()}))
    }

    pub fn done(&self, tool: &str) -> io::Result<()> {
        self.record(&json!({"event": "done", "tool": tool, "pid": std::process::id()}))
    }

    pub fn cancelled(&self, tool: &str) -> io::Result<()> {
        self.record(&json!({"event": "cancelled", "tool": tool, "pid": std::process::id()}))
    }

    /// Appends one line with a single write (the file is opened with
    /// `O_APPEND`, so lines from several processes do not interleave).
    fn record(&self, event: &Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(event)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let written = file.write(&line)?;
        if written != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write to the journal ({written} of {} bytes)", line.len()),
            ));
        }
        file.flush()
    }
}
