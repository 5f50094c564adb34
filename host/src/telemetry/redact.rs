//! The log's writers: each event to stderr in one write, with credentials removed from text lines.

use crate::sanitize::redact_credentials;

/// Writes each log event to stderr with credentials removed (a library's error may quote a URL
/// with a token in it). One buffer per event, written at once, so lines never interleave.
pub(super) struct RedactedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine(Vec::new())
    }
}

/// One log event being written.
pub(super) struct RedactedLine(Vec<u8>);

impl std::io::Write for RedactedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), redact_credentials(&text).as_bytes());
    }
}

/// Writes each log event to stderr in one write, as it is (JSON lines, whose values have
/// credentials removed as they are made).
pub(super) struct LineStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LineStderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line(Vec::new())
    }
}

/// One JSON log line being written.
pub(super) struct Line(Vec<u8>);

impl std::io::Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), &self.0);
    }
}
