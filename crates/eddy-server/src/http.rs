//! The HTTP admin listener: `GET /health` and `GET /metrics`.
//!
//! A deliberately small HTTP/1.1 responder: one request per connection, `Connection: close`,
//! the request head capped at [`MAX_REQUEST_HEAD`] bytes and [`REQUEST_TIMEOUT`]. Two routes do
//! not justify an HTTP framework; if the admin surface grows, swap this for one.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;

/// Largest request head (request line plus headers) read before answering 431.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Time a client has to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Shared readiness state, set by the server as it starts and stops.
#[derive(Debug, Clone, Default)]
pub struct HealthState(Arc<AtomicU8>);

impl HealthState {
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

/// Serves the admin routes until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    health: HealthState,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((socket, _peer)) => {
                let health = health.clone();
                let metrics = Arc::clone(&metrics);
                tracker.spawn(async move {
                    if let Err(e) = handle(socket, &health, &metrics).await {
                        tracing::debug!(error = %e, "http connection ended with an error");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn handle(
    mut socket: TcpStream,
    health: &HealthState,
    metrics: &Metrics,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        loop {
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if head.len() >= MAX_REQUEST_HEAD {
                return Ok(false);
            }
            let n = socket.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            head.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    let (status, content_type, body) = match read {
        Err(_elapsed) => return Ok(()),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(false)) => (
            "431 Request Header Fields Too Large",
            "text/plain",
            String::new(),
        ),
        Ok(Ok(true)) => route(&head, health, metrics),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}

fn route(
    head: &[u8],
    health: &HealthState,
    metrics: &Metrics,
) -> (&'static str, &'static str, String) {
    let line_end = head.iter().position(|b| *b == b'\r').unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..line_end]);
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/health") => match health.get() {
            Health::Ready => ("200 OK", "text/plain", "ok\n".into()),
            Health::Starting => ("503 Service Unavailable", "text/plain", "starting\n".into()),
            Health::Draining => ("503 Service Unavailable", "text/plain", "draining\n".into()),
        },
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "method not allowed\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let h = HealthState::default();
        let m = Metrics::new(&[], &[]);
        assert_eq!(
            route(b"GET /health HTTP/1.1\r\n\r\n", &h, &m).0,
            "503 Service Unavailable"
        );
        h.set(Health::Ready);
        assert_eq!(route(b"GET /health HTTP/1.1\r\n\r\n", &h, &m).0, "200 OK");
        let (status, _, body) = route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", &h, &m);
        assert_eq!(status, "200 OK");
        assert!(body.contains("eddy_uptime_seconds"));
        assert_eq!(
            route(b"GET /nope HTTP/1.1\r\n\r\n", &h, &m).0,
            "404 Not Found"
        );
        assert_eq!(
            route(b"POST /health HTTP/1.1\r\n\r\n", &h, &m).0,
            "405 Method Not Allowed"
        );
        assert_eq!(
            route(b"\xff\xfe garbage\r\n\r\n", &h, &m).0,
            "405 Method Not Allowed"
        );
        h.set(Health::Draining);
        assert_eq!(
            route(b"GET /health HTTP/1.1\r\n\r\n", &h, &m).2,
            "draining\n"
        );
    }
}
