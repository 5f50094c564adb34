//! The log's writer: each event to stderr in one write, with credentials removed from text lines.

use crate::sanitize::redact_credentials;

/// Writes each log event to stderr in one write (one buffer per event, so lines never
/// interleave). For text lines (`redact`) credentials are removed from the line (a library's
/// error may quote a URL with a token in it); JSON lines are written as they are, their values
/// having had credentials removed as they were made.
pub(super) struct Stderr {
    /// Remove credentials from each line.
    pub(super) redact: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line { bytes: Vec::new(), redact: self.redact }
    }
}

/// One log event being written.
pub(super) struct Line {
    bytes: Vec<u8>,
    redact: bool,
}

impl std::io::Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let mut err = std::io::stderr().lock();
        let _ = if self.redact {
            std::io::Write::write_all(&mut err, redact_credentials(&String::from_utf8_lossy(&self.bytes)).as_bytes())
        } else {
            std::io::Write::write_all(&mut err, &self.bytes)
        };
    }
}
