//! The HTTP/1 server of the host's listeners (the API, the admission webhook): a cap on open connections, header- and body-read timeouts, and a graceful stop.
//!
//! Past the cap the server stops accepting: new connections wait in the listen backlog (the
//! kernel's) until one closes, and are served then. A client that sends no complete request
//! headers within the header-read timeout, or leaves a keep-alive connection idle that long, is
//! disconnected; a request whose body does not arrive within the same time of its headers is
//! answered 408 and its connection closed. So slow or silent clients cannot hold the slots.

use std::fmt::Debug;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::Listener;
use futures_util::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::ServerLimits;
use crate::metrics::http::{HttpMetrics, ServerLabel};

/// The connection slots of one listener: at most `max_connections` connections hold one at a
/// time, counted in `steward_http_connections{server}`.
#[derive(Clone, Debug)]
pub struct Slots {
    free: Arc<Semaphore>,
    open: Gauge,
    cap_reached: Counter,
}

impl Slots {
    /// `max` slots (at least one) of the listener `server`, counted in `metrics`.
    pub fn new(max: usize, server: &str, metrics: &HttpMetrics) -> Self {
        let label = ServerLabel::of(server);
        Self {
            free: Arc::new(Semaphore::new(max.max(1))),
            open: metrics.connections.get_or_create(&label).clone(),
            cap_reached: metrics.cap_reached.get_or_create(&label).clone(),
        }
    }

    /// A free slot, waiting for one when every slot is taken (and counting that in
    /// `steward_http_connection_cap_reached_total`). Take it before accepting a connection.
    pub async fn reserve(&self) -> Reserved {
        if let Ok(permit) = self.free.clone().try_acquire_owned() {
            return Reserved { permit, slots: self.clone() };
        }
        self.cap_reached.inc();
        tracing::debug!("at the connection cap: accepting again when a connection closes");
        match self.free.clone().acquire_owned().await {
            Ok(permit) => Reserved { permit, slots: self.clone() },
            // The semaphore is never closed; were it, no connection could be served again.
            Err(_) => std::future::pending().await,
        }
    }
}

/// A slot reserved for the next connection, not yet holding one.
#[derive(Debug)]
pub struct Reserved {
    permit: OwnedSemaphorePermit,
    slots: Slots,
}

impl Reserved {
    /// The slot, now held by an accepted connection: counted open until dropped.
    pub fn take(self) -> Slot {
        self.slots.open.inc();
        Slot { _permit: self.permit, open: self.slots.open }
    }
}

/// A slot held by an open connection; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    open: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// A connection with the slot it holds, freed when the connection is dropped.
#[derive(Debug)]
pub struct Held<Io> {
    io: Io,
    _slot: Slot,
}

impl<Io> Held<Io> {
    /// `io`, holding `slot` for as long as it lives.
    pub fn new(io: Io, slot: Slot) -> Self {
        Self { io, _slot: slot }
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Held<Io> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Held<Io> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A TCP listener that accepts a connection only when a slot is free.
#[derive(Debug)]
pub struct CappedTcp {
    tcp: TcpListener,
    slots: Slots,
}

impl CappedTcp {
    /// `tcp`, accepting at most as many connections at once as `slots` has.
    pub fn new(tcp: TcpListener, slots: Slots) -> Self {
        Self { tcp, slots }
    }
}

impl Listener for CappedTcp {
    type Io = Held<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let reserved = self.slots.reserve().await;
        loop {
            match self.tcp.accept().await {
                Ok((stream, addr)) => return (Held::new(stream, reserved.take()), addr),
                Err(e) => accept_failed(&e).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Waits after a failed `accept`: not after a connection that went away before it was taken,
/// a second after anything else (out of file descriptors, say) rather than spin.
pub async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::warn!(error = %e, "cannot accept a connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A request body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} of its headers (the header-read timeout)")]
struct BodyTimedOut(Duration);

/// Gives `req`'s body `limit` from now to arrive whole: a read of it past that fails, and then
/// the answer is 408 and the connection is closed, freeing its slot. Only the request body is
/// timed, never the answer (event streams stay open).
async fn body_deadline(State((limit, timeouts)): State<(Duration, Counter)>, req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let deadline = tokio::time::Instant::now() + limit;
    let timed_out = Arc::new(AtomicBool::new(false));
    let flag = timed_out.clone();
    let req = req.map(|body| {
        let chunks = futures_util::stream::unfold(Some(body.into_data_stream()), move |data| {
            let flag = flag.clone();
            async move {
                let mut data = data?;
                match tokio::time::timeout_at(deadline, data.next()).await {
                    Ok(Some(chunk)) => Some((chunk, Some(data))),
                    Ok(None) => None,
                    Err(_) => {
                        flag.store(true, Ordering::Relaxed);
                        Some((Err(axum::Error::new(BodyTimedOut(limit))), None))
                    }
                }
            }
        });
        Body::from_stream(chunks)
    });
    let answer = next.run(req).await;
    if !timed_out.load(Ordering::Relaxed) {
        return answer;
    }
    timeouts.inc();
    tracing::debug!(?limit, "answered 408 to a request whose body did not arrive in time");
    let body = serde_json::json!({"error": BodyTimedOut(limit).to_string()});
    (StatusCode::REQUEST_TIMEOUT, [(header::CONNECTION, "close")], axum::Json(body)).into_response()
}

/// One of the host's HTTP listeners: its name in the metrics' `server` label, its limits, and
/// where it counts.
#[derive(Clone, Debug)]
pub struct Server {
    /// `api` or `webhook`.
    pub name: &'static str,
    /// Its connection cap and header-read timeout (also the request body's).
    pub limits: ServerLimits,
    /// Where its connections are counted.
    pub metrics: HttpMetrics,
}

impl Server {
    /// The connection slots of its cap, for its listener ([`CappedTcp`], or the webhook's TLS one).
    pub fn slots(&self) -> Slots {
        Slots::new(self.limits.max_connections, self.name, &self.metrics)
    }

    /// Serves `router` over HTTP/1 on the connections of `listener` (the cap is the listener's),
    /// closing a connection whose request headers do not arrive within the header-read timeout
    /// (counted in `steward_http_header_timeouts_total{server}`), and answering 408 (closing the
    /// connection) to a request whose body does not arrive within that time of its headers.
    ///
    /// Once `stop` resolves it accepts no more connections, lets each open one finish the
    /// answer it is writing (idle ones close at once), and returns when all are closed.
    pub async fn serve<L>(self, mut listener: L, router: Router, stop: impl Future<Output = ()>)
    where
        L: Listener,
        L::Addr: Debug,
    {
        let limit = self.limits.header_read_timeout;
        let body_timeouts = self.metrics.body_timeouts.get_or_create(&ServerLabel::of(self.name)).clone();
        let router = router.layer(axum::middleware::from_fn_with_state((limit, body_timeouts), body_deadline));
        let header_timeouts = self.metrics.header_timeouts.get_or_create(&ServerLabel::of(self.name)).clone();
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(self.limits.header_read_timeout);
        let stopping = CancellationToken::new();
        // Each connection's task holds a sender: the channel closes once every connection ended.
        let (open, mut all_closed) = mpsc::channel::<()>(1);
        let mut stop = pin!(stop);
        loop {
            let (io, peer) = tokio::select! {
                c = listener.accept() => c,
                () = &mut stop => break,
            };
            let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(router.clone()));
            let (stopping, open, header_timeouts) = (stopping.clone(), open.clone(), header_timeouts.clone());
            let server = self.name;
            tokio::spawn(async move {
                let mut conn = pin!(conn);
                let served = tokio::select! {
                    r = conn.as_mut() => r,
                    () = stopping.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        conn.await
                    }
                };
                match served {
                    Err(e) if e.is_timeout() => {
                        header_timeouts.inc();
                        tracing::debug!(
                            server,
                            ?peer,
                            "closed a connection whose request headers did not arrive in time"
                        );
                    }
                    Err(e) => tracing::debug!(server, ?peer, error = %e, "a connection ended with an error"),
                    Ok(()) => {}
                }
                drop(open);
            });
        }
        stopping.cancel();
        drop(open);
        let _ = all_closed.recv().await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server of `limits` answering `GET /` with `ok`, on a loopback port.
    async fn start(limits: ServerLimits) -> (std::net::SocketAddr, HttpMetrics) {
        let metrics = HttpMetrics::default();
        let server = Server { name: "api", limits, metrics: metrics.clone() };
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let listener = CappedTcp::new(tcp, server.slots());
        let echo = |body: axum::body::Bytes| async move { format!("{} bytes", body.len()) };
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }).post(echo));
        tokio::spawn(server.serve(listener, router, std::future::pending()));
        (addr, metrics)
    }

    /// A connection that has sent half a request's headers.
    async fn half_header(addr: std::net::SocketAddr) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.unwrap();
        s
    }

    /// `GET /` on a new connection: the body of a 200 answer.
    async fn get(addr: std::net::SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
        let answer = String::from_utf8(until_closed(&mut s).await).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_default();
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{answer}");
        body.to_string()
    }

    /// What the server sends on `s` until it closes it (within a minute, or the test fails).
    async fn until_closed(s: &mut TcpStream) -> Vec<u8> {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut rest))
            .await
            .expect("the server did not close a connection whose headers never came")
            .unwrap();
        rest
    }

    fn label() -> ServerLabel {
        ServerLabel::of("api")
    }

    #[tokio::test]
    async fn a_client_that_sends_half_a_header_is_disconnected_while_others_are_served() {
        let limits = ServerLimits { max_connections: 64, header_read_timeout: Duration::from_millis(300) };
        let (addr, metrics) = start(limits).await;
        let mut slow = Vec::new();
        for _ in 0..5 {
            slow.push(half_header(addr).await);
        }
        assert_eq!(get(addr).await, "ok");
        for s in &mut slow {
            assert!(until_closed(s).await.is_empty(), "nothing is answered to half a request");
        }
        assert!(metrics.header_timeouts.get_or_create(&label()).get() >= 5);
        assert_eq!(get(addr).await, "ok", "the server goes on serving");
    }

    #[tokio::test]
    async fn a_request_whose_body_never_comes_is_answered_408_and_frees_its_slot() {
        let limits = ServerLimits { max_connections: 1, header_read_timeout: Duration::from_millis(300) };
        let (addr, metrics) = start(limits).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n{").await.unwrap();
        let answer = String::from_utf8(until_closed(&mut s).await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("the request body did not arrive"), "{answer}");
        assert_eq!(get(addr).await, "ok", "the one slot is free again");
        // A body that does come is read whole.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let answer = String::from_utf8(until_closed(&mut s).await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("\r\n\r\n5 bytes"), "{answer}");
        assert_eq!(metrics.body_timeouts.get_or_create(&label()).get(), 1, "the late body is counted, once");
    }

    #[tokio::test]
    async fn a_keep_alive_connection_left_idle_is_closed_after_the_header_read_timeout() {
        let limits = ServerLimits { max_connections: 64, header_read_timeout: Duration::from_millis(300) };
        let (addr, metrics) = start(limits).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        let answer = String::from_utf8(until_closed(&mut s).await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("\r\n\r\nok"), "{answer}");
        assert_eq!(metrics.header_timeouts.get_or_create(&label()).get(), 1);
        assert_eq!(metrics.connections.get_or_create(&label()).get(), 0);
    }

    #[tokio::test]
    async fn past_the_cap_connections_wait_and_are_served_when_one_closes() {
        let limits = ServerLimits { max_connections: 2, header_read_timeout: Duration::from_secs(3600) };
        let (addr, metrics) = start(limits).await;
        let open = metrics.connections.get_or_create(&label()).clone();
        let cap_reached = metrics.cap_reached.get_or_create(&label()).clone();
        let hogs = vec![half_header(addr).await, half_header(addr).await];
        tokio::time::timeout(Duration::from_secs(60), async {
            while open.get() < 2 || cap_reached.get() < 1 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the two connections are open and the cap is reached");
        // Three more send whole requests; they wait in the listen backlog while both slots are held.
        let mut late = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
            late.push(s);
        }
        assert_eq!(open.get(), 2, "never more open than the cap");
        drop(hogs);
        for s in &mut late {
            let answer = String::from_utf8(until_closed(s).await).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("\r\n\r\nok"), "{answer}");
            assert!(open.get() <= 2, "{}", open.get());
        }
        assert_eq!(get(addr).await, "ok");
    }
}
