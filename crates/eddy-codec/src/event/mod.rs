//! Event protocol (Celeriant) messages: every request and response of the client port in
//! both body encodings, the error code table with its JSON messages, and the frame-level
//! encode/decode the server calls. Framing and compression live in `eddy_wire::event`.
//!
//! # Encodings
//!
//! The header's version picks the body codec; both encode the same structs, whose field
//! order is the wire order.
//!
//! ```text
//! V2 (bincode, fixed-width LE)               V3 (MessagePack, rmp_serde style)
//! struct  = fields back to back              struct  = array(n) of the fields
//! u128    = 16 bytes little-endian           u128    = c4 10 + 16 bytes big-endian
//! Option  = 00 | 01 value                    Option  = c0 | value
//! String  = u64 len + UTF-8                  String  = fixstr / d9 / da / db
//! bytes   = u64 len + raw                    bytes   = bin c4 / c5 / c6
//! Vec/set = u64 count + items                Vec/set = array
//! map     = u64 count + key value ...        map     = map (keys encoded as their type)
//! ```
//!
//! Example (`AggregateDetailsRequest { correlation_id: Some(1), key (1, 2, 3) }`):
//!
//! ```text
//! V2 body (65 bytes): 01 | 01 00*15 | 01 00*15 | 02 00*15 | 03 00*15
//! V3 body (74 bytes): 92 | c4 10 00*15 01 | 93 c4 10 00*15 01  c4 10 00*15 02  c4 10 00*15 03
//! ```
//!
//! `AccessLevel` is the one enum: V2 writes its position (u32 0/1), V3 its value (1/2).
//!
//! # Invariants
//!
//! - Decoding never panics and never allocates for a length or count that the rest of the
//!   body cannot hold; preallocation is further capped at 1 MiB per container.
//! - A body decodes only if the message occupies it exactly (trailing bytes are an error;
//!   the spec allows either, official clients always send exact lengths).
//! - V3 decoding accepts what `rmp_serde` 1.3 accepts for these types (maps keyed by field
//!   name, shorter arrays for defaulted fields, signed integer markers, integer `u128`s,
//!   bytes as integer arrays); V3 encoding is canonical as above.
//! - Maps and sets are ordered (`BTreeMap`/`BTreeSet`): encoding is deterministic; upstream
//!   order is unspecified anyway, and a repeated key keeps the last value as upstream does.
//! - An `ErrorResponse` always fits the 1007-byte fixed body: messages are cut to
//!   [`MAX_ERROR_MESSAGE_LEN`] bytes (JSON-aware when built from [`ServerError`]).
//!
//! # Server use
//!
//! [`decode_request`] on a frame from `eddy_wire::event::RequestFrameDecoder`, dispatch on
//! [`EventRequest`], answer with [`encode_response`] (passing the connection's `DictCodec`
//! only once it identified); failures become [`ServerError::to_response`].

use bytes::Bytes;
use eddy_wire::event::ProtocolVersion;

mod cursor;
mod error;
mod error_code;
mod frame;
mod json;
mod model;
mod requests;
mod responses;
mod v2;
mod v3;
mod value;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

pub use error::{DecodeError, EventCodecError};
pub use error_code::{AfterError, ErrorCode, InvalidKeyReason, RoutingField, ServerError};
pub use frame::{decode_request, decode_response, encode_request, encode_response};
pub use json::JsonObject;
pub use model::{
    AccessLevel, AggregateConflict, AggregateEventBatch, AggregateKey, AggregateListItem,
    AggregateTypeListItem, Event, OrgListItem, ReadFilters, SchemaKey, SchemaType,
    SingleAggregateDelete, SingleAggregateWrite, WatchOperation, WatchResponseEvent,
};
pub use requests::{
    AggregateDetailsRequest, DeleteRequest, EventRequest, IdentifyRequest,
    ListAggregateTypesRequest, ListAggregatesRequest, ListOrgsRequest, ReadRequest,
    RegisterSchemaRequest, TrimStartRequest, WatchRequest, WriteRequest,
};
pub use responses::{
    conflict_response_body_bound, AggregateDetailsResponse, DeleteConflictResponse, DeleteResponse,
    ErrorResponse, EventResponse, IdentifyResponse, ListAggregateTypesResponse,
    ListAggregatesResponse, ListOrgsResponse, ProtocolErrorResponse, ReadResponse,
    RegisterSchemaResponse, TrimStartResponse, WatchResponse, WriteConflictResponse, WriteResponse,
    MAX_ERROR_MESSAGE_LEN,
};

/// Both body encodings of one message or shared type.
pub trait EventBody: Sized {
    /// Appends the body in `version`'s encoding.
    fn encode_body(&self, version: ProtocolVersion, out: &mut Vec<u8>);

    /// The body in `version`'s encoding.
    fn to_body(&self, version: ProtocolVersion) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_body(version, &mut out);
        out
    }

    /// Decodes a body that holds exactly one value.
    fn decode_body(version: ProtocolVersion, body: &[u8]) -> Result<Self, DecodeError>;

    /// Like [`Self::decode_body`], with byte fields sliced out of `body` without copying.
    fn decode_body_shared(version: ProtocolVersion, body: &Bytes) -> Result<Self, DecodeError>;
}

macro_rules! impl_event_body {
    ($($t:ty),* $(,)?) => {
        $(
            impl EventBody for $t {
                fn encode_body(&self, version: ProtocolVersion, out: &mut Vec<u8>) {
                    value::encode(self, version, out);
                }
                fn decode_body(version: ProtocolVersion, body: &[u8]) -> Result<Self, DecodeError> {
                    value::decode(version, body, None)
                }
                fn decode_body_shared(version: ProtocolVersion, body: &Bytes) -> Result<Self, DecodeError> {
                    value::decode(version, body, Some(body))
                }
            }
        )*
    };
}

impl_event_body!(
    AggregateKey,
    SchemaKey,
    Event,
    AggregateEventBatch,
    WatchResponseEvent,
    OrgListItem,
    AggregateTypeListItem,
    AggregateListItem,
    ReadFilters,
    SingleAggregateWrite,
    SingleAggregateDelete,
    AggregateDetailsRequest,
    ReadRequest,
    WriteRequest,
    TrimStartRequest,
    DeleteRequest,
    WatchRequest,
    ListOrgsRequest,
    ListAggregateTypesRequest,
    ListAggregatesRequest,
    RegisterSchemaRequest,
    IdentifyRequest,
    AggregateDetailsResponse,
    ReadResponse,
    WriteResponse,
    TrimStartResponse,
    DeleteResponse,
    ProtocolErrorResponse,
    WatchResponse,
    ListOrgsResponse,
    ListAggregateTypesResponse,
    ListAggregatesResponse,
    RegisterSchemaResponse,
    IdentifyResponse,
);

/// The encoding of an `ErrorResponse` cuts an over-long message to
/// [`MAX_ERROR_MESSAGE_LEN`] bytes so the frame fits.
impl EventBody for ErrorResponse {
    fn encode_body(&self, version: ProtocolVersion, out: &mut Vec<u8>) {
        responses::encode_error_response(self, version, out);
    }
    fn decode_body(version: ProtocolVersion, body: &[u8]) -> Result<Self, DecodeError> {
        value::decode(version, body, None)
    }
    fn decode_body_shared(version: ProtocolVersion, body: &Bytes) -> Result<Self, DecodeError> {
        value::decode(version, body, Some(body))
    }
}
