//! The stdio transport of a child: one JSON-RPC message a line, at most [`MAX_MESSAGE`] bytes, and a meter of the lines over it (which the transport drops), so that a status can say why an answer never came.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use rmcp::RoleClient;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// The largest message read from a stdio server, newline included: rmcp's default, which
/// its streamable-HTTP client also takes for one event.
pub(crate) const MAX_MESSAGE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The client side of a stdio session over `read` and `write`, reading messages of at most
/// [`MAX_MESSAGE`] bytes (a longer one is dropped, as [`Metered`] tells).
pub(crate) fn transport<R, W>(read: R, write: W) -> AsyncRwTransport<RoleClient, R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    AsyncRwTransport::new_client(read, write).with_max_line_length(MAX_MESSAGE)
}

/// What a server sent over [`MAX_MESSAGE`], shared by the [`Metered`] reader and its supervisor.
#[derive(Debug, Default)]
pub(crate) struct Oversize {
    /// Lines over the limit so far (counted as they cross it).
    count: AtomicU64,
    /// The size of the largest of them so far, in bytes.
    largest: AtomicUsize,
    /// The largest has not ended yet (its size is a lower bound).
    unfinished: AtomicBool,
    ended: Notify,
}

impl Oversize {
    /// Lines over the limit so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Resolves when a line over the limit has ended (the transport dropped it). Cancel-safe.
    pub(crate) async fn ended(&self) {
        self.ended.notified().await;
    }

    /// Why the answer to `request` never came, what the limit is, and what to do.
    pub(crate) fn describe(&self, request: &str) -> String {
        let size = self.largest.load(Ordering::Relaxed);
        let at_least = if self.unfinished.load(Ordering::Relaxed) { "at least " } else { "" };
        let fix = match request {
            "tools/list" => {
                "make the server list fewer tools, or shorter descriptions and schemas (many servers take an \
                 option or an environment variable that chooses which tools they offer)"
            }
            "initialize" => "make the server's `initialize` answer (its instructions, its server info) shorter",
            _ => "make the server send smaller messages",
        };
        format!(
            "the server's answer to {request} is too large: it sent a message of {at_least}{}, and Steward reads at \
             most {} in one message from a stdio server, so the message was dropped; {fix}",
            mib(size),
            mib(MAX_MESSAGE)
        )
    }
}

/// `bytes` for people: `16 MiB`, `17.3 MiB`.
fn mib(bytes: usize) -> String {
    let m = bytes as f64 / (1024.0 * 1024.0);
    if m.fract() == 0.0 { format!("{m:.0} MiB") } else { format!("{m:.1} MiB") }
}

/// A reader that measures the lines passing through it and records in an [`Oversize`] each
/// one longer than [`MAX_MESSAGE`] (newline included, as the transport counts).
#[derive(Debug)]
pub(crate) struct Metered<R> {
    inner: R,
    /// Bytes of the current line so far.
    line: usize,
    oversize: Arc<Oversize>,
}

impl<R> Metered<R> {
    /// Wraps `inner`, recording in `oversize`.
    pub(crate) fn new(inner: R, oversize: Arc<Oversize>) -> Self {
        Self { inner, line: 0, oversize }
    }

    fn measure(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        loop {
            let (segment, ends) = match memchr::memchr(b'\n', rest) {
                Some(i) => (i + 1, true),
                None => (rest.len(), false),
            };
            let was_over = self.line > MAX_MESSAGE;
            self.line += segment;
            if self.line > MAX_MESSAGE {
                let o = &self.oversize;
                if !was_over {
                    o.count.fetch_add(1, Ordering::Relaxed);
                }
                if self.line >= o.largest.load(Ordering::Relaxed) {
                    o.largest.store(self.line, Ordering::Relaxed);
                    o.unfinished.store(!ends, Ordering::Relaxed);
                }
                if ends {
                    o.ended.notify_one();
                }
            }
            if !ends {
                return;
            }
            self.line = 0;
            rest = &rest[segment..];
            if rest.is_empty() {
                return;
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Metered<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &res {
            let this = &mut *self;
            this.measure(&buf.filled()[before..]);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn lines_over_the_limit_are_counted_with_their_size() {
        let mut input = b"{\"small\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_MESSAGE));
        input.extend_from_slice(b"\n{\"after\":2}\n");
        input.extend(std::iter::repeat_n(b'y', MAX_MESSAGE + 10));
        let oversize = Arc::new(Oversize::default());
        let mut reader = Metered::new(&input[..], oversize.clone());
        let mut sink = Vec::new();
        reader.read_to_end(&mut sink).await.unwrap();
        assert_eq!(sink, input, "it passes everything on");
        assert_eq!(oversize.count(), 2);
        oversize.ended().await;
        let words = oversize.describe("tools/list");
        assert!(words.starts_with("the server's answer to tools/list is too large"), "{words}");
        assert!(words.contains("at least 16.0 MiB") && words.contains("at most 16 MiB"), "{words}");
        assert!(words.contains("fewer tools"), "{words}");
        assert_eq!(mib(17 * 1024 * 1024 + 300 * 1024), "17.3 MiB");
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_limit_is_not_over_it() {
        let mut input = vec![b'z'; MAX_MESSAGE - 1];
        input.push(b'\n');
        let oversize = Arc::new(Oversize::default());
        let mut reader = Metered::new(&input[..], oversize.clone());
        reader.read_to_end(&mut Vec::new()).await.unwrap();
        assert_eq!(oversize.count(), 0);
    }
}
