//! The stream (Iggy) protocol port.

use crate::listener::{Conn, ConnectionContext};

/// Stream-protocol command names, in the order `Metrics::record_request` indexes them. Registered at start-up so
/// every series exists from the first scrape.
pub const METRIC_NAMES: &[&str] = &[];

/// Serves one stream-protocol connection.
///
/// The command catalog is not served yet: a connection that sends bytes is closed cleanly.
pub async fn serve_connection(socket: Conn, ctx: ConnectionContext) {
    crate::listener::close_on_first_bytes(socket, ctx).await;
}
