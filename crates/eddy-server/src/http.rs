//! The HTTP admin listener: `GET /health` and `GET /metrics`, served with hyper (HTTP/1.1,
//! keep-alive).
//!
//! Limits, so a slow or hostile client never holds the port (each is a config value):
//!
//! * `http_max_connections`: at the cap the accept loop waits (the kernel backlog holds new
//!   connections) until a connection ends;
//! * `max_connections_per_ip`: a connection whose address already holds that many is closed at
//!   accept ([`crate::address_cap`]);
//! * `http_header_read_timeout_ms`: a request head, and the wait for the next one on a
//!   keep-alive connection, must arrive within it or the connection is closed;
//! * `http_write_timeout_ms`: a response write that makes no progress for that long (a client
//!   that stopped reading) closes the connection;
//! * a request head above [`MAX_REQUEST_HEAD`] bytes is refused (431) by hyper.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;
use crate::metrics::Metrics;

/// Largest request head (request line plus headers) hyper buffers before answering 431 (its
/// smallest allowed buffer).
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// What `/health` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// Recovering or binding listeners: 503.
    Starting = 0,
    /// Every listener accepts connections: 200.
    Ready = 1,
    /// Shutting down: 503.
    Draining = 2,
}

/// A cluster member's answer to `/health` while ready: `Some("leader")` or
/// `Some("follower")` when it is in sync with a known leader, `None` when it is not (503).
pub type RoleProbe = Arc<dyn Fn() -> Option<&'static str> + Send + Sync>;

/// Shared readiness state, set by the server as it starts and stops.
#[derive(Clone, Default)]
pub struct HealthState(Arc<AtomicU8>, Arc<std::sync::OnceLock<RoleProbe>>);

impl std::fmt::Debug for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HealthState").field(&self.get()).finish()
    }
}

impl HealthState {
    /// Makes `/health` report this cluster member's role (and 503 while it has no leader).
    pub fn set_role_probe(&self, probe: RoleProbe) {
        let _ = self.1.set(probe);
    }

    /// The role probe's answer (`Some("ok")` for a single node).
    fn role(&self) -> Option<&'static str> {
        match self.1.get() {
            Some(probe) => probe(),
            None => Some("ok"),
        }
    }

    /// Sets the current state.
    pub fn set(&self, health: Health) {
        self.0.store(health as u8, Ordering::Release);
    }

    /// Reads the current state.
    pub fn get(&self) -> Health {
        match self.0.load(Ordering::Acquire) {
            1 => Health::Ready,
            2 => Health::Draining,
            _ => Health::Starting,
        }
    }
}

/// The admin port's limits.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Concurrent connections.
    pub max_connections: u32,
    /// Connections of one client address.
    pub per_ip: Arc<crate::address_cap::AddressCap>,
    /// Deadline for a request head (and for the next one on a kept-alive connection).
    pub header_read_timeout: Duration,
    /// Longest a response write may make no progress.
    pub write_timeout: Duration,
}

impl HttpLimits {
    /// The limits `config` sets.
    pub fn from_config(config: &ServerConfig) -> Self {
        Self {
            max_connections: config.http_max_connections,
            per_ip: crate::address_cap::AddressCap::new(
                "http",
                config,
                config.http_max_connections,
            ),
            header_read_timeout: Duration::from_millis(config.http_header_read_timeout_ms),
            write_timeout: Duration::from_millis(config.http_write_timeout_ms),
        }
    }
}

/// The admin port's own figures.
#[derive(Debug, Default)]
pub struct HttpStats {
    open: AtomicI64,
    requests: AtomicU64,
}

impl HttpStats {
    /// Requests answered since the start.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Appends the admin port's series to a `/metrics` scrape.
    pub fn sample(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "# HELP eddy_http_open_connections Connections open on the HTTP admin port.\n\
             # TYPE eddy_http_open_connections gauge\neddy_http_open_connections {}",
            self.open.load(Ordering::Relaxed)
        );
        crate::metrics::write_counter(
            out,
            "eddy_http_requests_total",
            "Requests answered on the HTTP admin port.",
            self.requests(),
        );
    }
}

/// Serves the admin routes until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    health: HealthState,
    metrics: Arc<Metrics>,
    stats: Arc<HttpStats>,
    limits: HttpLimits,
    stop: CancellationToken,
    tracker: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
    let HttpLimits {
        per_ip,
        header_read_timeout,
        write_timeout,
        ..
    } = limits;
    loop {
        let permit = tokio::select! {
            () = stop.cancelled() => return,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_closed) => return,
            },
        };
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, address) = match accepted {
            Ok((socket, peer)) => {
                let Some(address) = per_ip.admit(peer.ip()) else {
                    tracing::debug!(%peer, "http connection over --max-connections-per-ip closed");
                    continue;
                };
                (socket, address)
            }
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (health, metrics, stats, stop) = (
            health.clone(),
            Arc::clone(&metrics),
            Arc::clone(&stats),
            stop.clone(),
        );
        tracker.spawn(async move {
            stats.open.fetch_add(1, Ordering::Relaxed);
            let counted = Arc::clone(&stats);
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                counted.requests.fetch_add(1, Ordering::Relaxed);
                let response = respond(request.method(), request.uri().path(), &health, &metrics);
                std::future::ready(Ok::<_, Infallible>(response))
            });
            let io = TokioIo::new(StallTimeout::new(socket, write_timeout));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .max_buf_size(MAX_REQUEST_HEAD)
                .serve_connection(io, service);
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "http connection ended with an error");
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(address);
            drop(permit);
        });
    }
}

fn respond(
    method: &Method,
    path: &str,
    health: &HealthState,
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = route(method, path, health, metrics);
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn route(
    method: &Method,
    path: &str,
    health: &HealthState,
    metrics: &Metrics,
) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "method not allowed\n".into(),
        );
    }
    match path {
        "/health" => match health.get() {
            Health::Ready => match health.role() {
                Some(role) => (StatusCode::OK, TEXT, format!("{role}\n")),
                None => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "no leader: this cluster member is not in sync\n".into(),
                ),
            },
            Health::Starting => (StatusCode::SERVICE_UNAVAILABLE, TEXT, "starting\n".into()),
            Health::Draining => (StatusCode::SERVICE_UNAVAILABLE, TEXT, "draining\n".into()),
        },
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

/// A socket whose writes fail once they make no progress for `limit` (the peer stopped
/// reading and the buffers are full); reads pass through (hyper's header timeout bounds them).
#[derive(Debug)]
struct StallTimeout<T> {
    inner: T,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> StallTimeout<T> {
    fn new(inner: T, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Called when a write is pending: starts the stall clock, or fails once it ran out.
    fn poll_stall<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let limit = self.limit;
        let stall = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<R>(&mut self, ready: io::Result<R>) -> Poll<io::Result<R>> {
        self.stalled = None;
        Poll::Ready(ready)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.poll_stall(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.poll_stall(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.poll_stall(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.poll_stall(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let h = HealthState::default();
        let m = Metrics::new(&[], &[]);
        let get = |path| route(&Method::GET, path, &h, &m);
        assert_eq!(get("/health").0, StatusCode::SERVICE_UNAVAILABLE);
        h.set(Health::Ready);
        assert_eq!(get("/health").0, StatusCode::OK);
        let (status, _, body) = get("/metrics");
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("eddy_uptime_seconds"));
        assert_eq!(get("/nope").0, StatusCode::NOT_FOUND);
        assert_eq!(
            route(&Method::POST, "/health", &h, &m).0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        h.set(Health::Draining);
        assert_eq!(get("/health").2, "draining\n");
    }

    #[tokio::test]
    async fn a_write_that_makes_no_progress_fails_after_the_limit() {
        use tokio::io::AsyncWriteExt as _;
        let (a, _b) = tokio::io::duplex(16);
        let mut stalled = StallTimeout::new(a, Duration::from_millis(50));
        let err = stalled.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        let (a, mut b) = tokio::io::duplex(16);
        let mut slow = StallTimeout::new(a, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let mut got = Vec::new();
            let mut buf = [0u8; 8];
            while got.len() < 64 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let n = b.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        slow.write_all(&[7u8; 64])
            .await
            .expect("a reader keeps it going");
        assert_eq!(reader.await.unwrap(), vec![7u8; 64]);
    }
}
