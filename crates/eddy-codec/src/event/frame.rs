//! Frame-level operations: a decoded frame to a message (decompressing when needed), a
//! message to a complete frame (compressing when the rules say so).

use bytes::Bytes;
use eddy_wire::event::{
    should_compress_request, should_compress_response, Compression, DictCodec, EventHeader, Frame,
    FrameBuilder, FrameLimits, FrameSpec, ProtocolVersion, RequestType, ResponseType,
};

use super::error::EventCodecError;
use super::requests::EventRequest;
use super::responses::EventResponse;

fn request_name(kind: RequestType) -> &'static str {
    match kind {
        RequestType::AggregateDetails => "AggregateDetailsRequest",
        RequestType::Read => "ReadRequest",
        RequestType::Write => "WriteRequest",
        RequestType::TrimStart => "TrimStartRequest",
        RequestType::Delete => "DeleteRequest",
        RequestType::Watch => "WatchRequest",
        RequestType::ListOrgs => "ListOrgsRequest",
        RequestType::ListAggregateTypes => "ListAggregateTypesRequest",
        RequestType::ListAggregates => "ListAggregatesRequest",
        RequestType::RegisterSchema => "RegisterSchemaRequest",
        RequestType::Identify => "IdentifyRequest",
    }
}

fn response_name(kind: ResponseType) -> &'static str {
    match kind {
        ResponseType::AggregateDetails => "AggregateDetailsResponse",
        ResponseType::Read => "ReadResponse",
        ResponseType::Write => "WriteResponse",
        ResponseType::TrimStart => "TrimStartResponse",
        ResponseType::Delete => "DeleteResponse",
        ResponseType::ProtocolError => "ProtocolErrorResponse",
        ResponseType::Error => "ErrorResponse",
        ResponseType::Watch => "WatchResponse",
        ResponseType::ListOrgs => "ListOrgsResponse",
        ResponseType::ListAggregateTypes => "ListAggregateTypesResponse",
        ResponseType::ListAggregates => "ListAggregatesResponse",
        ResponseType::RegisterSchema => "RegisterSchemaResponse",
        ResponseType::WriteConflict => "WriteConflictResponse",
        ResponseType::DeleteConflict => "DeleteConflictResponse",
        ResponseType::Identify => "IdentifyResponse",
    }
}

/// Server side: the request carried by `frame`. A compressed body is decompressed with
/// `codec` (the server always holds its dictionary) under `limits`, and its event values
/// then share the decompressed buffer instead of being copied.
pub fn decode_request(
    frame: &Frame<'_, RequestType>,
    codec: Option<&mut DictCodec>,
    limits: FrameLimits,
) -> Result<EventRequest, EventCodecError> {
    let version = frame.header.version;
    let decode_error = |source| EventCodecError::Decode {
        message: request_name(frame.kind),
        source,
    };
    match frame.header.compression {
        Compression::None => {
            EventRequest::decode_body(version, frame.kind, frame.body).map_err(decode_error)
        }
        Compression::ZstdDict => {
            let body = frame
                .decompressed_body(codec, limits)
                .map_err(EventCodecError::Decompress)?;
            let shared = Bytes::from(body.into_owned());
            EventRequest::decode_body_shared(version, frame.kind, &shared).map_err(decode_error)
        }
    }
}

/// Server side: appends the frame of `response` to `out`.
///
/// Pass the connection's `codec` only when the connection completed Identify (so the client
/// holds the dictionary); the body is then compressed when it is a Read, Watch or List
/// response of at least 1024 bytes. Fixed-size responses above 1007 bytes and bodies above
/// `max_body_len` are refused and nothing is appended (an `ErrorResponse` always fits: its
/// message is cut to 978 bytes).
pub fn encode_response(
    response: &EventResponse,
    version: ProtocolVersion,
    out: &mut Vec<u8>,
    codec: Option<&mut DictCodec>,
    max_body_len: u64,
) -> Result<EventHeader, EventCodecError> {
    let kind = response.response_type();
    let builder = FrameBuilder::begin(out);
    response.encode_body(version, out);
    let compress = codec.filter(|_| should_compress_response(kind, builder.body_len(out), true));
    builder
        .finish(
            out,
            FrameSpec::response(version, kind),
            max_body_len,
            compress,
        )
        .map_err(EventCodecError::Encode)
}

/// Client side: appends the frame of `request` to `out`, compressing a Write or
/// `RegisterSchema` whose payload is at least 1024 bytes when `codec` is given (the client
/// rule of the 0.2.0 client).
pub fn encode_request(
    request: &EventRequest,
    version: ProtocolVersion,
    out: &mut Vec<u8>,
    codec: Option<&mut DictCodec>,
    max_body_len: u64,
) -> Result<EventHeader, EventCodecError> {
    let kind = request.request_type();
    let payload = request.compressible_payload_len().unwrap_or(0);
    let builder = FrameBuilder::begin(out);
    request.encode_body(version, out);
    let compress = codec.filter(|_| should_compress_request(kind, payload, true));
    builder
        .finish(
            out,
            FrameSpec::request(version, kind),
            max_body_len,
            compress,
        )
        .map_err(EventCodecError::Encode)
}

/// Client side: the response carried by `frame` (a compressed body needs `codec`, i.e. a
/// dictionary received in Identify).
pub fn decode_response(
    frame: &Frame<'_, ResponseType>,
    codec: Option<&mut DictCodec>,
    limits: FrameLimits,
) -> Result<EventResponse, EventCodecError> {
    let version = frame.header.version;
    let body = frame
        .decompressed_body(codec, limits)
        .map_err(EventCodecError::Decompress)?;
    EventResponse::decode_body(version, frame.kind, &body).map_err(|source| {
        EventCodecError::Decode {
            message: response_name(frame.kind),
            source,
        }
    })
}
