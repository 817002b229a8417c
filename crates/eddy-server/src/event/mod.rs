//! The event (Celeriant) protocol port.

use crate::listener::{Conn, ConnectionContext};

/// Event-protocol request type names, in the order `Metrics::record_request` indexes them. Registered at start-up so
/// every series exists from the first scrape.
pub const METRIC_NAMES: &[&str] = &[];

/// Serves one event-protocol connection.
///
/// The message catalogue is not served yet: a connection that sends bytes is closed cleanly.
pub async fn serve_connection(socket: Conn, ctx: ConnectionContext) {
    crate::listener::close_on_first_bytes(socket, ctx).await;
}
