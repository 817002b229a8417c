//! Every client-port request (spec §3.2), in wire field order, and [`EventRequest`], the one
//! enum the server dispatches on.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use eddy_wire::event::{ProtocolVersion, RequestType};

use super::error::DecodeError;
use super::model::{
    AggregateKey, ReadFilters, SchemaKey, SingleAggregateDelete, SingleAggregateWrite,
};
use super::value::{self, wire_struct};

wire_struct! {
    /// Type 1 (fixed): details of one aggregate.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct AggregateDetailsRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// The aggregate.
        pub aggregate_key: AggregateKey,
    }
}

wire_struct! {
    /// Type 2 (fixed): read batches of one aggregate.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ReadRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// The aggregate.
        pub aggregate_key: AggregateKey,
        /// Version range and filters.
        pub filters: ReadFilters,
    }
}

wire_struct! {
    /// Type 3 (variable): write one batch to each of one or more aggregates, atomically.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct WriteRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// Writer identity; scopes idempotency.
        pub client_id: u128,
        /// Free-form actor id stored on every batch.
        pub user_id: Option<u128>,
        /// One entry per aggregate (`HashMap` upstream; a repeated key keeps the last value).
        pub writes: BTreeMap<AggregateKey, SingleAggregateWrite>,
    }
}

impl WriteRequest {
    /// Sum of the `event_value` lengths of all events: what the client compares with the
    /// 1024-byte compression threshold.
    pub fn payload_len(&self) -> usize {
        self.writes
            .values()
            .flat_map(|w| &w.events)
            .map(|e| e.event_value.len())
            .sum()
    }
}

wire_struct! {
    /// Type 4 (fixed): raise the readable floor of an aggregate.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct TrimStartRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// The aggregate.
        pub aggregate_key: AggregateKey,
        /// New floor.
        pub keep_from_aggregate_version: u64,
        /// Writer identity.
        pub client_id: u128,
        /// Actor id.
        pub user_id: Option<u128>,
    }
}

wire_struct! {
    /// Type 5 (fixed): soft-delete aggregates, atomically.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct DeleteRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// Writer identity.
        pub client_id: u128,
        /// Actor id.
        pub user_id: Option<u128>,
        /// One entry per aggregate.
        pub deletes: BTreeMap<AggregateKey, SingleAggregateDelete>,
    }
}

wire_struct! {
    /// Type 6 (fixed): subscribe to committed changes; the connection becomes a push stream.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct WatchRequest {
        /// Echoed in a setup error; pushes carry none.
        pub correlation_id: Option<u128>,
        /// Coalescing window; `None` pushes each change at once.
        pub requested_latency_ms: Option<u64>,
        /// Pin the watch to one shard.
        pub shard_id: Option<u64>,
        /// Filter by org.
        pub orgs: Option<BTreeSet<u128>>,
        /// Filter by aggregate type.
        pub aggregate_types: Option<BTreeSet<u128>>,
        /// Filter by aggregate id.
        pub aggregates: Option<BTreeSet<u128>>,
        /// Filter by operation code.
        pub operation_types: Option<BTreeSet<u8>>,
    }
}

wire_struct! {
    /// Type 7 (fixed): list the orgs of one shard.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ListOrgsRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// Shard to list.
        pub shard_id: u64,
        /// Opaque cursor; `None` = first page.
        pub cursor: Option<u64>,
    }
}

wire_struct! {
    /// Type 8 (fixed): list the (org, aggregate type) pairs of one shard.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ListAggregateTypesRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// Shard to list.
        pub shard_id: u64,
        /// Only this org.
        pub org_id: Option<u128>,
        /// Opaque cursor; `None` = first page.
        pub cursor: Option<u64>,
    }
}

wire_struct! {
    /// Type 9 (fixed): list the aggregates of one shard.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ListAggregatesRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// Shard to list.
        pub shard_id: u64,
        /// Only this org.
        pub org_id: Option<u128>,
        /// Only this aggregate type (independent of `org_id`).
        pub aggregate_type_id: Option<u128>,
        /// Opaque cursor; `None` = first page.
        pub cursor: Option<u64>,
    }
}

wire_struct! {
    /// Type 10 (variable): register an immutable schema for an event type.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct RegisterSchemaRequest {
        /// Echoed in the response.
        pub correlation_id: Option<u128>,
        /// Writer identity.
        pub client_id: u128,
        /// Actor id.
        pub user_id: Option<u128>,
        /// (org, aggregate type, major, minor).
        pub schema_key: SchemaKey,
        /// 0 Json, 1 Avro, 2 Protobuf ([`super::SchemaType`]); other values get 2024.
        pub schema_type: u8,
        /// The schema text.
        pub schema: String,
    }
}

wire_struct! {
    /// Type 14 (fixed): the optional handshake, valid only as the first frame. V3 accepts 5
    /// elements (no `known_dict_sha256`).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct IdentifyRequest [required = 5] {
        /// Echoed in the response (clients send `None`).
        pub correlation_id: Option<u128>,
        /// Standard base64 of the DER `SubjectPublicKeyInfo` of an RSA key.
        pub public_key: Option<String>,
        /// Unix milliseconds as a decimal string.
        pub nonce: Option<String>,
        /// Standard base64 of the PKCS#1 v1.5 SHA-256 signature over the nonce.
        pub signature: Option<String>,
        /// Standard base64 of 32 bytes.
        pub api_key: Option<String>,
        /// Lowercase hex SHA-256 of a dictionary the client already holds.
        pub known_dict_sha256: Option<String>,
    }
}

/// Any client-port request, as decoded from a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventRequest {
    /// Type 1.
    AggregateDetails(AggregateDetailsRequest),
    /// Type 2.
    Read(ReadRequest),
    /// Type 3.
    Write(WriteRequest),
    /// Type 4.
    TrimStart(TrimStartRequest),
    /// Type 5.
    Delete(DeleteRequest),
    /// Type 6.
    Watch(WatchRequest),
    /// Type 7.
    ListOrgs(ListOrgsRequest),
    /// Type 8.
    ListAggregateTypes(ListAggregateTypesRequest),
    /// Type 9.
    ListAggregates(ListAggregatesRequest),
    /// Type 10.
    RegisterSchema(RegisterSchemaRequest),
    /// Type 14.
    Identify(IdentifyRequest),
}

macro_rules! each_request {
    ($self:expr, $r:ident => $e:expr) => {
        match $self {
            EventRequest::AggregateDetails($r) => $e,
            EventRequest::Read($r) => $e,
            EventRequest::Write($r) => $e,
            EventRequest::TrimStart($r) => $e,
            EventRequest::Delete($r) => $e,
            EventRequest::Watch($r) => $e,
            EventRequest::ListOrgs($r) => $e,
            EventRequest::ListAggregateTypes($r) => $e,
            EventRequest::ListAggregates($r) => $e,
            EventRequest::RegisterSchema($r) => $e,
            EventRequest::Identify($r) => $e,
        }
    };
}

impl EventRequest {
    /// The request's type id.
    pub fn request_type(&self) -> RequestType {
        match self {
            Self::AggregateDetails(_) => RequestType::AggregateDetails,
            Self::Read(_) => RequestType::Read,
            Self::Write(_) => RequestType::Write,
            Self::TrimStart(_) => RequestType::TrimStart,
            Self::Delete(_) => RequestType::Delete,
            Self::Watch(_) => RequestType::Watch,
            Self::ListOrgs(_) => RequestType::ListOrgs,
            Self::ListAggregateTypes(_) => RequestType::ListAggregateTypes,
            Self::ListAggregates(_) => RequestType::ListAggregates,
            Self::RegisterSchema(_) => RequestType::RegisterSchema,
            Self::Identify(_) => RequestType::Identify,
        }
    }

    /// Every request carries a correlation id to echo, errors included.
    pub fn correlation_id(&self) -> Option<u128> {
        each_request!(self, r => r.correlation_id)
    }

    /// Sets the correlation id (what the 0.2.0 client does before sending).
    pub fn set_correlation_id(&mut self, correlation_id: Option<u128>) {
        each_request!(self, r => r.correlation_id = correlation_id);
    }

    /// The payload the client compression rule looks at: sum of event values for Write,
    /// schema length for `RegisterSchema`, `None` for types that are never compressed.
    pub fn compressible_payload_len(&self) -> Option<usize> {
        match self {
            Self::Write(w) => Some(w.payload_len()),
            Self::RegisterSchema(s) => Some(s.schema.len()),
            _ => None,
        }
    }

    /// Appends the body in `version`'s encoding.
    pub fn encode_body(&self, version: ProtocolVersion, out: &mut Vec<u8>) {
        each_request!(self, r => value::encode(r, version, out));
    }

    /// Decodes a whole (decompressed) body of type `request_type`.
    pub fn decode_body(
        version: ProtocolVersion,
        request_type: RequestType,
        body: &[u8],
    ) -> Result<Self, DecodeError> {
        Self::decode_inner(version, request_type, body, None)
    }

    /// Like [`Self::decode_body`], with event values sliced out of `body` without copying.
    pub fn decode_body_shared(
        version: ProtocolVersion,
        request_type: RequestType,
        body: &Bytes,
    ) -> Result<Self, DecodeError> {
        Self::decode_inner(version, request_type, body, Some(body))
    }

    fn decode_inner(
        version: ProtocolVersion,
        request_type: RequestType,
        body: &[u8],
        owner: Option<&Bytes>,
    ) -> Result<Self, DecodeError> {
        Ok(match request_type {
            RequestType::AggregateDetails => {
                Self::AggregateDetails(value::decode(version, body, owner)?)
            }
            RequestType::Read => Self::Read(value::decode(version, body, owner)?),
            RequestType::Write => Self::Write(value::decode(version, body, owner)?),
            RequestType::TrimStart => Self::TrimStart(value::decode(version, body, owner)?),
            RequestType::Delete => Self::Delete(value::decode(version, body, owner)?),
            RequestType::Watch => Self::Watch(value::decode(version, body, owner)?),
            RequestType::ListOrgs => Self::ListOrgs(value::decode(version, body, owner)?),
            RequestType::ListAggregateTypes => {
                Self::ListAggregateTypes(value::decode(version, body, owner)?)
            }
            RequestType::ListAggregates => {
                Self::ListAggregates(value::decode(version, body, owner)?)
            }
            RequestType::RegisterSchema => {
                Self::RegisterSchema(value::decode(version, body, owner)?)
            }
            RequestType::Identify => Self::Identify(value::decode(version, body, owner)?),
        })
    }
}
