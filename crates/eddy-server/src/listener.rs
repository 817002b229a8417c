//! The accept loop shared by every protocol listener.
//!
//! Each accepted socket gets `TCP_NODELAY` (both protocols are request/reply and clients wait for
//! each reply) and runs on its own task, tracked so shutdown can wait for it. A semaphore caps
//! concurrent connections; at the cap the loop stops accepting (the kernel backlog holds new
//! connections) instead of accepting and dropping them. A connection whose address already
//! holds `--max-connections-per-ip` of the port's connections is closed right after accept
//! ([`crate::address_cap`]), so one address cannot take every slot.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::metrics::{Metrics, Protocol};
use crate::Shared;

/// What a connection handler is given besides its socket.
#[derive(Debug, Clone)]
pub struct ConnectionContext {
    /// The client's address.
    pub peer: SocketAddr,
    /// Fires when the server starts draining: finish the request in flight, then close.
    pub drain: CancellationToken,
    /// State shared by every connection (config, metrics, storage, auth).
    pub shared: Arc<Shared>,
}

/// An accepted client connection, plaintext or TLS.
#[derive(Debug)]
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS 1.3 over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One protocol listener's settings.
#[derive(Debug, Clone)]
pub struct ListenerSpec {
    /// Which protocol (metrics label, log span).
    pub protocol: Protocol,
    /// Concurrent connection cap.
    pub max_connections: u32,
    /// The per-address cap of this port.
    pub per_ip: Arc<crate::address_cap::AddressCap>,
    /// TLS acceptor when the port is TLS-only.
    pub tls: Option<crate::tls::Tls>,
}

/// Accepts connections until `stop` fires, running `handler` for each on `tracker`.
pub async fn accept_loop<H, F>(
    listener: TcpListener,
    spec: ListenerSpec,
    shared: Arc<Shared>,
    stop: CancellationToken,
    tracker: TaskTracker,
    handler: H,
) where
    H: Fn(Conn, ConnectionContext) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let ListenerSpec {
        protocol,
        max_connections,
        per_ip,
        tls,
    } = spec;
    let metrics: Arc<Metrics> = Arc::clone(&shared.metrics);
    let handler = Arc::new(handler);
    let limit = Arc::new(Semaphore::new(max_connections as usize));
    loop {
        let permit = tokio::select! {
            () = stop.cancelled() => return,
            permit = Arc::clone(&limit).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_closed) => return,
            },
        };
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(protocol = protocol.label(), error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(address) = per_ip.admit(peer.ip()) else {
            // Closed unread; its slot is free again at once.
            tracing::debug!(protocol = protocol.label(), %peer, "connection over --max-connections-per-ip closed");
            drop(socket);
            continue;
        };
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "set_nodelay failed");
        }
        let guard = metrics.connection_opened(protocol);
        let ctx = ConnectionContext {
            peer,
            drain: stop.child_token(),
            shared: Arc::clone(&shared),
        };
        let span = tracing::debug_span!("connection", protocol = protocol.label(), %peer);
        let handler = Arc::clone(&handler);
        let tls = tls.clone();
        tracker.spawn(
            async move {
                tracing::debug!("connection opened");
                let conn = match tls {
                    None => Some(Conn::Plain(socket)),
                    Some(crate::tls::Tls(acceptor)) => {
                        match tokio::time::timeout(
                            crate::tls::HANDSHAKE_TIMEOUT,
                            acceptor.accept(socket),
                        )
                        .await
                        {
                            Ok(Ok(stream)) => Some(Conn::Tls(Box::new(stream))),
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!("TLS handshake timed out");
                                None
                            }
                        }
                    }
                };
                if let Some(conn) = conn {
                    handler(conn, ctx).await;
                }
                tracing::debug!("connection closed");
                drop(guard);
                drop(address);
                drop(permit);
            }
            .instrument(span),
        );
    }
}

/// Waits for the peer's first bytes (or its close, or the drain) and closes the connection.
/// Used by ports whose protocol this build does not serve.
pub async fn close_on_first_bytes(mut socket: Conn, ctx: ConnectionContext) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    tokio::select! {
        () = ctx.drain.cancelled() => {}
        // A silent connection holds a place under the port's cap: not for longer than a
        // member's greeting may take.
        () = tokio::time::sleep(crate::cluster::transport::HELLO_TIMEOUT) => {
            tracing::debug!("nothing sent; closing");
        }
        read = socket.read(&mut buf) => match read {
            Ok(0) => tracing::debug!("peer closed without sending"),
            Ok(n) => tracing::debug!(bytes = n, "protocol not served on this port yet; closing"),
            Err(e) => tracing::debug!(error = %e, "read failed"),
        },
    }
}
