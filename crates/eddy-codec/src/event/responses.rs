//! Every client-port response (spec §3.3), in wire field order, and [`EventResponse`].

use bytes::Bytes;
use eddy_wire::event::{ProtocolVersion, ResponseType};

use super::error::DecodeError;
use super::model::{
    AccessLevel, AggregateConflict, AggregateEventBatch, AggregateListItem, AggregateTypeListItem,
    OrgListItem, WatchResponseEvent,
};
use super::v2::V2Reader;
use super::v3::{self, StructForm, V3Reader};
use super::value::{self, wire_struct, WireValue};

/// Longest `error_message` that keeps an `ErrorResponse` within the 1007-byte fixed body in
/// both encodings (V2 overhead: 1 + 16 correlation id, 4 code, 8 length = 29 bytes; V3 at
/// most 1 + 18 + 5 + 3 = 27).
pub const MAX_ERROR_MESSAGE_LEN: usize = 978;

wire_struct! {
    /// Type 1 (fixed). V3 array(10).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct AggregateDetailsResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// Lowest readable version (1, or the trim floor).
        pub min_aggregate_version: u64,
        /// Current version (for a deleted aggregate, the version at deletion).
        pub max_aggregate_version: u64,
        /// Last assigned `event_seq`.
        pub max_event_seq: u64,
        /// Soft-deleted.
        pub is_deleted: bool,
        /// Flag of the delete (false if never deleted).
        pub allow_recreate: bool,
        /// Flag of the delete.
        pub allow_sequence_continuation: bool,
        /// Server timestamp of the newest record (batch, trim or delete).
        pub last_server_timestamp: u64,
        /// Client id on that record.
        pub last_client_id: u128,
        /// User id on that record.
        pub last_user_id: Option<u128>,
    }
}

wire_struct! {
    /// Type 2 (variable). V3 array(3).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ReadResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// Batches in ascending version order.
        pub event_batches: Vec<AggregateEventBatch>,
        /// Where to continue; `None` = nothing more in range.
        pub next_aggregate_version: Option<u64>,
    }
}

wire_struct! {
    /// Type 3 (fixed). V3 array(2).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct WriteResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// The committed version when exactly one aggregate was written, else `None`.
        pub max_aggregate_version: Option<u64>,
    }
}

wire_struct! {
    /// Type 4 (fixed). V3 array(1).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct TrimStartResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
    }
}

wire_struct! {
    /// Type 5 (fixed). V3 array(1).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct DeleteResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
    }
}

wire_struct! {
    /// Type 12 (fixed). V3 array(1).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct RegisterSchemaResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
    }
}

wire_struct! {
    /// Type 13 (variable, versions 4/5 only): a Write refused because pinned entries'
    /// `expected_version` did not match. V3 array(2).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct WriteConflictResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// Every conflicting pinned entry.
        pub conflicts: Vec<AggregateConflict>,
    }
}

wire_struct! {
    /// Type 14 (variable, versions 4/5 only): the same for a Delete. V3 array(2).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct DeleteConflictResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// Every conflicting pinned entry.
        pub conflicts: Vec<AggregateConflict>,
    }
}

/// Upper bound of a conflict response body with `conflicts` entries in either encoding: 25
/// bytes of envelope and 74 per entry (V2: 64 per entry; V3 at most 74).
pub const fn conflict_response_body_bound(conflicts: u64) -> u64 {
    conflicts.saturating_mul(74).saturating_add(25)
}

/// Type 6 (fixed): an empty struct (V2 empty body, V3 `90`). Defined by the protocol, never
/// sent by a server (it closes the connection instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProtocolErrorResponse {}

impl WireValue for ProtocolErrorResponse {
    const MIN_V2: usize = 0;
    fn encode_v2(&self, _out: &mut Vec<u8>) {}
    fn decode_v2(_r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {})
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_array_len(out, 0);
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        if let StructForm::Map(len) = r.struct_start("ProtocolErrorResponse", 0, 0)? {
            for _ in 0..len {
                r.field_key()?;
                r.skip_value()?;
            }
        }
        Ok(Self {})
    }
}

wire_struct! {
    /// Type 7 (fixed): the answer to any failed request. V3 array(3). Build it with
    /// [`super::ServerError::to_response`]; [`ErrorResponse::new`] truncates a message longer
    /// than [`MAX_ERROR_MESSAGE_LEN`] so the frame always fits 1007 bytes.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ErrorResponse {
        /// Echo of the failed request's correlation id.
        pub correlation_id: Option<u128>,
        /// Error code (spec §5.2).
        pub error_code: u32,
        /// Usually a compact JSON object with the error's context.
        pub error_message: String,
    }
}

impl ErrorResponse {
    /// An error response whose message is cut to [`MAX_ERROR_MESSAGE_LEN`] bytes on a
    /// character boundary if needed.
    pub fn new(correlation_id: Option<u128>, error_code: u32, mut error_message: String) -> Self {
        truncate_on_char_boundary(&mut error_message, MAX_ERROR_MESSAGE_LEN);
        Self {
            correlation_id,
            error_code,
            error_message,
        }
    }
}

/// Encodes an `ErrorResponse`, cutting an over-long message so the body fits 1007 bytes.
pub(crate) fn encode_error_response(
    e: &ErrorResponse,
    version: ProtocolVersion,
    out: &mut Vec<u8>,
) {
    if e.error_message.len() > MAX_ERROR_MESSAGE_LEN {
        let fitted = ErrorResponse::new(e.correlation_id, e.error_code, e.error_message.clone());
        value::encode(&fitted, version, out);
    } else {
        value::encode(e, version, out);
    }
}

/// Cuts `s` to at most `max` bytes without splitting a character.
pub(crate) fn truncate_on_char_boundary(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

wire_struct! {
    /// Type 8 (variable): watch acknowledgement (empty), heartbeat (empty) or push.
    /// V3 array(1). Carries no correlation id.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct WatchResponse {
        /// Changes; order unspecified.
        pub events: Vec<WatchResponseEvent>,
    }
}

wire_struct! {
    /// Type 9 (variable). V3 array(3).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ListOrgsResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// This page.
        pub orgs: Vec<OrgListItem>,
        /// Cursor of the next page; `None` = shard exhausted.
        pub next_cursor: Option<u64>,
    }
}

wire_struct! {
    /// Type 10 (variable). V3 array(3).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ListAggregateTypesResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// This page.
        pub aggregate_types: Vec<AggregateTypeListItem>,
        /// Cursor of the next page; `None` = shard exhausted.
        pub next_cursor: Option<u64>,
    }
}

wire_struct! {
    /// Type 11 (variable). V3 array(3).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ListAggregatesResponse {
        /// Echo.
        pub correlation_id: Option<u128>,
        /// This page (deleted aggregates included, flagged).
        pub aggregates: Vec<AggregateListItem>,
        /// Cursor of the next page; `None` = shard exhausted.
        pub next_cursor: Option<u64>,
    }
}

wire_struct! {
    /// Type 16 (variable, never compressed). V3 array(5); 3 accepted (dictionary fields
    /// have defaults). The dictionary bytes are emitted as bin in V3, which every known
    /// decoder accepts; an upstream-style integer array is accepted on input.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct IdentifyResponse [required = 3] {
        /// Echo of the Identify's.
        pub correlation_id: Option<u128>,
        /// Some after a successful RSA identity.
        pub client_id: Option<u128>,
        /// Some when API keys are configured.
        pub access_level: Option<AccessLevel>,
        /// Lowercase hex SHA-256 of the cluster dictionary.
        pub compression_dict_sha256: Option<String>,
        /// The dictionary bytes, unless the client's sha matched.
        pub compression_dict_bytes: Option<Bytes>,
    }
}

/// Any client-port response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventResponse {
    /// Type 1.
    AggregateDetails(AggregateDetailsResponse),
    /// Type 2.
    Read(ReadResponse),
    /// Type 3.
    Write(WriteResponse),
    /// Type 4.
    TrimStart(TrimStartResponse),
    /// Type 5.
    Delete(DeleteResponse),
    /// Type 6 (never sent by a server).
    ProtocolError(ProtocolErrorResponse),
    /// Type 7.
    Error(ErrorResponse),
    /// Type 8.
    Watch(WatchResponse),
    /// Type 9.
    ListOrgs(ListOrgsResponse),
    /// Type 10.
    ListAggregateTypes(ListAggregateTypesResponse),
    /// Type 11.
    ListAggregates(ListAggregatesResponse),
    /// Type 12.
    RegisterSchema(RegisterSchemaResponse),
    /// Type 13 (versions 4/5).
    WriteConflict(WriteConflictResponse),
    /// Type 14 (versions 4/5).
    DeleteConflict(DeleteConflictResponse),
    /// Type 16.
    Identify(IdentifyResponse),
}

macro_rules! each_response {
    ($self:expr, $r:ident => $e:expr) => {
        match $self {
            EventResponse::AggregateDetails($r) => $e,
            EventResponse::Read($r) => $e,
            EventResponse::Write($r) => $e,
            EventResponse::TrimStart($r) => $e,
            EventResponse::Delete($r) => $e,
            EventResponse::ProtocolError($r) => $e,
            EventResponse::Error($r) => $e,
            EventResponse::Watch($r) => $e,
            EventResponse::ListOrgs($r) => $e,
            EventResponse::ListAggregateTypes($r) => $e,
            EventResponse::ListAggregates($r) => $e,
            EventResponse::RegisterSchema($r) => $e,
            EventResponse::WriteConflict($r) => $e,
            EventResponse::DeleteConflict($r) => $e,
            EventResponse::Identify($r) => $e,
        }
    };
}

impl EventResponse {
    /// The response's type id.
    pub fn response_type(&self) -> ResponseType {
        match self {
            Self::AggregateDetails(_) => ResponseType::AggregateDetails,
            Self::Read(_) => ResponseType::Read,
            Self::Write(_) => ResponseType::Write,
            Self::TrimStart(_) => ResponseType::TrimStart,
            Self::Delete(_) => ResponseType::Delete,
            Self::ProtocolError(_) => ResponseType::ProtocolError,
            Self::Error(_) => ResponseType::Error,
            Self::Watch(_) => ResponseType::Watch,
            Self::ListOrgs(_) => ResponseType::ListOrgs,
            Self::ListAggregateTypes(_) => ResponseType::ListAggregateTypes,
            Self::ListAggregates(_) => ResponseType::ListAggregates,
            Self::RegisterSchema(_) => ResponseType::RegisterSchema,
            Self::WriteConflict(_) => ResponseType::WriteConflict,
            Self::DeleteConflict(_) => ResponseType::DeleteConflict,
            Self::Identify(_) => ResponseType::Identify,
        }
    }

    /// The echoed correlation id; `None` for Watch and `ProtocolError`, which carry none.
    pub fn correlation_id(&self) -> Option<u128> {
        match self {
            Self::AggregateDetails(r) => r.correlation_id,
            Self::Read(r) => r.correlation_id,
            Self::Write(r) => r.correlation_id,
            Self::TrimStart(r) => r.correlation_id,
            Self::Delete(r) => r.correlation_id,
            Self::Error(r) => r.correlation_id,
            Self::ListOrgs(r) => r.correlation_id,
            Self::ListAggregateTypes(r) => r.correlation_id,
            Self::ListAggregates(r) => r.correlation_id,
            Self::RegisterSchema(r) => r.correlation_id,
            Self::WriteConflict(r) => r.correlation_id,
            Self::DeleteConflict(r) => r.correlation_id,
            Self::Identify(r) => r.correlation_id,
            Self::Watch(_) | Self::ProtocolError(_) => None,
        }
    }

    /// Appends the body in `version`'s encoding. An `ErrorResponse` whose message exceeds
    /// [`MAX_ERROR_MESSAGE_LEN`] is encoded with the message cut on a character boundary,
    /// so it always fits the fixed body.
    pub fn encode_body(&self, version: ProtocolVersion, out: &mut Vec<u8>) {
        match self {
            Self::Error(e) => encode_error_response(e, version, out),
            _ => each_response!(self, r => value::encode(r, version, out)),
        }
    }

    /// Decodes a whole (decompressed) body of type `response_type`.
    pub fn decode_body(
        version: ProtocolVersion,
        response_type: ResponseType,
        body: &[u8],
    ) -> Result<Self, DecodeError> {
        Self::decode_inner(version, response_type, body, None)
    }

    /// Like [`Self::decode_body`], with byte fields sliced out of `body` without copying.
    pub fn decode_body_shared(
        version: ProtocolVersion,
        response_type: ResponseType,
        body: &Bytes,
    ) -> Result<Self, DecodeError> {
        Self::decode_inner(version, response_type, body, Some(body))
    }

    fn decode_inner(
        version: ProtocolVersion,
        response_type: ResponseType,
        body: &[u8],
        owner: Option<&Bytes>,
    ) -> Result<Self, DecodeError> {
        Ok(match response_type {
            ResponseType::AggregateDetails => {
                Self::AggregateDetails(value::decode(version, body, owner)?)
            }
            ResponseType::Read => Self::Read(value::decode(version, body, owner)?),
            ResponseType::Write => Self::Write(value::decode(version, body, owner)?),
            ResponseType::TrimStart => Self::TrimStart(value::decode(version, body, owner)?),
            ResponseType::Delete => Self::Delete(value::decode(version, body, owner)?),
            ResponseType::ProtocolError => {
                Self::ProtocolError(value::decode(version, body, owner)?)
            }
            ResponseType::Error => Self::Error(value::decode(version, body, owner)?),
            ResponseType::Watch => Self::Watch(value::decode(version, body, owner)?),
            ResponseType::ListOrgs => Self::ListOrgs(value::decode(version, body, owner)?),
            ResponseType::ListAggregateTypes => {
                Self::ListAggregateTypes(value::decode(version, body, owner)?)
            }
            ResponseType::ListAggregates => {
                Self::ListAggregates(value::decode(version, body, owner)?)
            }
            ResponseType::RegisterSchema => {
                Self::RegisterSchema(value::decode(version, body, owner)?)
            }
            ResponseType::WriteConflict => {
                Self::WriteConflict(value::decode(version, body, owner)?)
            }
            ResponseType::DeleteConflict => {
                Self::DeleteConflict(value::decode(version, body, owner)?)
            }
            ResponseType::Identify => Self::Identify(value::decode(version, body, owner)?),
        })
    }
}
