//! `CANCEL_DEFERRED_REQUEST` (code 108) of the 0.12.2 wire: cancels the connection's pending
//! deferred request (`POLL_MESSAGES_DEFERRED`, `FETCH_MESSAGES`) whose header carries the same
//! `request` id. The body is empty and the cancel itself is never answered: the cancelled
//! request gets its one answer (`TransientNotAccepted` when the cancel stopped its wait, its
//! normal reply when it had finished waiting). A connection without a session is answered
//! `Unauthenticated`.

use crate::stream::commands::Empty;

crate::stream::commands::empty_body! {
    /// Request body of `CANCEL_DEFERRED_REQUEST` (empty).
    CancelDeferredRequest
}

crate::stream::commands::command!(CancelDeferredRequest, CancelDeferredRequest, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&CancelDeferredRequest).is_empty());
    }
}
