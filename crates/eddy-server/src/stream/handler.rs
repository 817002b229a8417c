//! What dispatch hands a handler and what a handler answers with: the seam between
//! [`dispatch`](super::dispatch) (routing, login gate, decoding, authorisation) and the command
//! handlers (`system`, `users`, `login`, `streams`, `messages`, `consumer_groups`). Both sides
//! import this module; neither imports the other's internals.

use bytes::Bytes;
use eddy_auth::sessions::ClientId;
use eddy_codec::stream::codec::WireEncode;
use eddy_wire::stream::EvictionHeader;

use super::StreamState;

/// The version string login replies and `GET_STATS` carry.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a request is answered with (errors travel as [`StreamError`](eddy_replicated::stream::error::StreamError)).
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Success: the payload (the result section, where the operation has one, is added when the
    /// reply is framed).
    Reply(Vec<Bytes>),
    /// An eviction in the reply's place; the connection stays open.
    Evict(Box<EvictionHeader>),
    /// No answer at all (a `CANCEL_DEFERRED_REQUEST`, 0.12.2 wire).
    NoReply,
}

impl Outcome {
    /// A success carrying an encoded payload.
    pub(crate) fn payload<T: WireEncode + ?Sized>(payload: &T) -> Self {
        Outcome::Reply(vec![Bytes::from(payload.to_vec())])
    }

    /// A success with an empty payload.
    pub(crate) fn empty() -> Self {
        Outcome::Reply(Vec::new())
    }
}

/// Everything a handler knows about the request besides its body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// Shared state.
    pub state: &'a StreamState,
    /// The connection.
    pub client_id: ClientId,
    /// The authenticated user (meaningful once past the login gate).
    pub user_id: u32,
}
