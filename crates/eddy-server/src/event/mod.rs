//! The event (Celeriant) protocol port.

use crate::listener::{Conn, ConnectionContext};

/// Serves one event-protocol connection.
///
/// The message catalogue is not served yet: a connection that sends bytes is closed cleanly.
pub async fn serve_connection(socket: Conn, ctx: ConnectionContext) {
    crate::listener::close_on_first_bytes(socket, ctx).await;
}
