//! The accept loop shared by every protocol listener.
//!
//! Each accepted socket gets `TCP_NODELAY` (both protocols are request/reply and clients wait for
//! each reply) and runs on its own task, tracked so shutdown can wait for it. A semaphore caps
//! concurrent connections; at the cap the loop stops accepting (the kernel backlog holds new
//! connections) instead of accepting and dropping them.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::metrics::{Metrics, Protocol};

/// What a connection handler is given besides its socket.
#[derive(Debug, Clone)]
pub struct ConnectionContext {
    /// The client's address.
    pub peer: SocketAddr,
    /// Fires when the server starts draining: finish the request in flight, then close.
    pub drain: CancellationToken,
}

/// Accepts connections until `stop` fires, running `handler` for each on `tracker`.
pub async fn accept_loop<H, F>(
    listener: TcpListener,
    protocol: Protocol,
    max_connections: u32,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    tracker: TaskTracker,
    handler: H,
) where
    H: Fn(TcpStream, ConnectionContext) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
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
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "set_nodelay failed");
        }
        let guard = metrics.connection_opened(protocol);
        let ctx = ConnectionContext {
            peer,
            drain: stop.child_token(),
        };
        let span = tracing::debug_span!("connection", protocol = protocol.label(), %peer);
        let fut = handler(socket, ctx);
        tracker.spawn(
            async move {
                tracing::debug!("connection opened");
                fut.await;
                tracing::debug!("connection closed");
                drop(guard);
                drop(permit);
            }
            .instrument(span),
        );
    }
}

/// Waits for the peer's first bytes (or its close, or the drain) and closes the connection.
/// Used by ports whose protocol this build does not serve.
pub async fn close_on_first_bytes(mut socket: TcpStream, ctx: ConnectionContext) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    tokio::select! {
        () = ctx.drain.cancelled() => {}
        read = socket.read(&mut buf) => match read {
            Ok(0) => tracing::debug!("peer closed without sending"),
            Ok(n) => tracing::debug!(bytes = n, "protocol not served on this port yet; closing"),
            Err(e) => tracing::debug!(error = %e, "read failed"),
        },
    }
}
