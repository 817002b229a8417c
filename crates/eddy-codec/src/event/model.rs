//! Types shared by several messages (spec §3.1): keys, the event record, event batches,
//! watch events, list items, read filters, per-aggregate write and delete options, and the
//! small enumerations.

use bytes::Bytes;

use super::error::DecodeError;
use super::v2::{self, V2Reader};
use super::v3::{self, V3Reader};
use super::value::{wire_struct, WireValue};

wire_struct! {
    /// One event stream: (`org_id`, `aggregate_type_id`, `aggregate_id`). V2 48 bytes,
    /// V3 array(3).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct AggregateKey {
        /// Tenant.
        pub org_id: u128,
        /// Aggregate type.
        pub aggregate_type_id: u128,
        /// Stream id.
        pub aggregate_id: u128,
    }
}

wire_struct! {
    /// One pinned entry of a Write or Delete whose `expected_version` did not match
    /// (0.3.0's typed conflict responses, types 13 and 14). V2 64 bytes, V3 array(3).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AggregateConflict {
        /// The aggregate.
        pub key: AggregateKey,
        /// What the request expected.
        pub expected: u64,
        /// The aggregate's version when the request was decided.
        pub current: u64,
    }
}

impl AggregateKey {
    /// A key from its three ids.
    pub const fn new(org_id: u128, aggregate_type_id: u128, aggregate_id: u128) -> Self {
        Self {
            org_id,
            aggregate_type_id,
            aggregate_id,
        }
    }
}

wire_struct! {
    /// Schema lookup key: (org, aggregate type, event type major, minor). V2 48 bytes,
    /// V3 array(4).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct SchemaKey {
        /// Tenant.
        pub org_id: u128,
        /// Aggregate type.
        pub aggregate_type_id: u128,
        /// Event type.
        pub event_type_major: u64,
        /// Backward-compatible revision.
        pub event_type_minor: u64,
    }
}

wire_struct! {
    /// One event (upstream `DatablockAggregateEvent`), in write requests and read responses.
    /// V3 array(8); 7 elements are accepted (no `iv`).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Event [required = 7] {
        /// Client-chosen sequence number; the idempotency key together with `client_id`.
        pub client_seq: u64,
        /// Per-aggregate event counter assigned by the server (first event = 1).
        pub event_seq: u64,
        /// Opaque optional id, stored and returned.
        pub event_id: Option<u128>,
        /// Client time of the event (convention: epoch milliseconds); never rewritten.
        pub event_timestamp: u64,
        /// Event type; 0 is reserved.
        pub event_type_major: u64,
        /// Backward-compatible revision.
        pub event_type_minor: u64,
        /// Opaque payload: V2 length-prefixed, V3 bin.
        pub event_value: Bytes,
        /// AES-GCM nonce of a client-encrypted payload: V2 tag + 12 bytes, V3 nil or bin(12).
        pub iv: Option<[u8; 12]>,
    }
}

wire_struct! {
    /// One batch of a read response. V3 array(5).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct AggregateEventBatch {
        /// The batch's version (1-based).
        pub aggregate_version: u64,
        /// Writer's client id.
        pub client_id: u128,
        /// The write request's user id.
        pub user_id: Option<u128>,
        /// Server time when the batch was prepared, in the configured precision.
        pub server_timestamp: u64,
        /// The batch's events after event-level filtering.
        pub events: Vec<Event>,
    }
}

wire_struct! {
    /// One watch notification. V3 array(7).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WatchResponseEvent {
        /// Tenant.
        pub org_id: u128,
        /// Aggregate type.
        pub aggregate_type_id: u128,
        /// Stream id.
        pub aggregate_id: u128,
        /// Operation code ([`WatchOperation`]).
        pub operation: u8,
        /// Write: lowest version covered.
        pub from_aggregate_version: Option<u64>,
        /// Write: highest version covered.
        pub to_aggregate_version: Option<u64>,
        /// `TrimStart`: the new floor.
        pub keep_from_aggregate_version: Option<u64>,
    }
}

wire_struct! {
    /// Item of `ListOrgsResponse`. V3 array(1).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct OrgListItem {
        /// Tenant.
        pub org_id: u128,
    }
}

wire_struct! {
    /// Item of `ListAggregateTypesResponse`. V3 array(2).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct AggregateTypeListItem {
        /// Tenant.
        pub org_id: u128,
        /// Aggregate type.
        pub aggregate_type_id: u128,
    }
}

wire_struct! {
    /// Item of `ListAggregatesResponse`. V3 array(15). Zero means "no data" for the
    /// statistics.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AggregateListItem {
        /// Soft-deleted.
        pub is_deleted: bool,
        /// Tenant.
        pub org_id: u128,
        /// Aggregate type.
        pub aggregate_type_id: u128,
        /// Stream id.
        pub aggregate_id: u128,
        /// Batches seen.
        pub event_batch_count: u64,
        /// Smallest event timestamp.
        pub min_event_timestamp: u64,
        /// Largest event timestamp.
        pub max_event_timestamp: u64,
        /// Lowest readable version.
        pub min_aggregate_version: u64,
        /// Current version.
        pub max_aggregate_version: u64,
        /// Smallest event sequence.
        pub min_event_seq: u64,
        /// Largest event sequence.
        pub max_event_seq: u64,
        /// Oldest server timestamp.
        pub min_server_timestamp: u64,
        /// Newest server timestamp.
        pub max_server_timestamp: u64,
        /// Stored bytes.
        pub compressed_size: u64,
        /// Bytes before compression.
        pub uncompressed_size: u64,
    }
}

wire_struct! {
    /// Filters of a `ReadRequest`. V3 array(15). All bounds are inclusive; there is no page
    /// size and no cursor (paging is by `from_aggregate_version`).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ReadFilters {
        /// First version wanted (the server does not turn 0 into 1).
        pub from_aggregate_version: u64,
        /// Last version wanted.
        pub to_aggregate_version: Option<u64>,
        /// Keep only events whose `event_type_major` is listed; `Some([])` means no filter.
        pub include_event_types: Option<Vec<u64>>,
        /// Drop batches written by this client id.
        pub exclude_client_id: Option<u128>,
        /// Keep only batches written by this client id.
        pub include_client_id: Option<u128>,
        /// Drop batches whose `user_id == Some(x)`.
        pub exclude_user_id: Option<u128>,
        /// Keep only batches whose `user_id == Some(x)`.
        pub include_user_id: Option<u128>,
        /// Keep batches with `server_timestamp >= x`.
        pub min_server_timestamp: Option<u64>,
        /// Keep batches with `server_timestamp <= x`.
        pub max_server_timestamp: Option<u64>,
        /// Keep events with `client_seq >= x`.
        pub min_client_seq: Option<u64>,
        /// Keep events with `client_seq <= x`.
        pub max_client_seq: Option<u64>,
        /// Keep events with `event_timestamp >= x`.
        pub min_event_timestamp: Option<u64>,
        /// Keep events with `event_timestamp <= x`.
        pub max_event_timestamp: Option<u64>,
        /// Keep events with `event_seq >= x`.
        pub min_event_seq: Option<u64>,
        /// Keep events with `event_seq <= x`.
        pub max_event_seq: Option<u64>,
    }
}

impl ReadFilters {
    /// Filters reading from `from_aggregate_version`, nothing else set.
    pub fn from_version(from_aggregate_version: u64) -> Self {
        Self {
            from_aggregate_version,
            ..Self::default()
        }
    }
}

wire_struct! {
    /// The write to one aggregate inside a `WriteRequest`; becomes exactly one batch.
    /// V3 array(4).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct SingleAggregateWrite {
        /// The batch's events, in order.
        pub events: Vec<Event>,
        /// May create the aggregate if it does not exist.
        pub allow_create: bool,
        /// OCC guard: the current version must equal this (0 = does not exist yet).
        pub expected_version: Option<u64>,
        /// Reject events whose `client_seq` is not above this client's high-water mark.
        pub enforce_client_idempotency: bool,
    }
}

wire_struct! {
    /// The delete of one aggregate inside a `DeleteRequest`. V3 array(3).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SingleAggregateDelete {
        /// A later write may recreate the aggregate.
        pub allow_recreate: bool,
        /// A recreated aggregate continues the version and event sequence.
        pub allow_sequence_continuation: bool,
        /// OCC guard on the current version.
        pub expected_version: Option<u64>,
    }
}

/// Access granted by an API key, reported in `IdentifyResponse`.
///
/// Encoded differently per version: V2 (bincode derive) writes the variant *position* as a
/// u32 — `0` `ReadWrite`, `1` `ReadOnly` — while V3 (serde `into = "u8"`) writes the declared
/// discriminant as an integer — `1` `ReadWrite`, `2` `ReadOnly`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessLevel {
    /// Everything allowed.
    ReadWrite,
    /// Write, `TrimStart`, Delete and `RegisterSchema` get 10007.
    ReadOnly,
}

impl AccessLevel {
    /// The V2 variant position.
    pub const fn v2_position(self) -> u32 {
        match self {
            Self::ReadWrite => 0,
            Self::ReadOnly => 1,
        }
    }

    /// The V3 (and declared) discriminant.
    pub const fn v3_value(self) -> u8 {
        match self {
            Self::ReadWrite => 1,
            Self::ReadOnly => 2,
        }
    }
}

impl WireValue for AccessLevel {
    const MIN_V2: usize = 4;
    fn encode_v2(&self, out: &mut Vec<u8>) {
        v2::put_u32(out, self.v2_position());
    }
    fn decode_v2(r: &mut V2Reader<'_>) -> Result<Self, DecodeError> {
        let offset = r.offset();
        match r.u32()? {
            0 => Ok(Self::ReadWrite),
            1 => Ok(Self::ReadOnly),
            value => Err(DecodeError::InvalidEnumValue {
                offset,
                type_name: "AccessLevel",
                value: u64::from(value),
            }),
        }
    }
    fn encode_v3(&self, out: &mut Vec<u8>) {
        v3::put_uint(out, u64::from(self.v3_value()));
    }
    fn decode_v3(r: &mut V3Reader<'_>) -> Result<Self, DecodeError> {
        let offset = r.offset();
        match r.uint(u64::from(u8::MAX), "AccessLevel")? {
            1 => Ok(Self::ReadWrite),
            2 => Ok(Self::ReadOnly),
            value => Err(DecodeError::InvalidEnumValue {
                offset,
                type_name: "AccessLevel",
                value,
            }),
        }
    }
}

/// Values of `RegisterSchemaRequest.schema_type` (a plain `u8` on the wire, so that an
/// unsupported value reaches the server, which answers 2024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaType {
    /// 0: JSON Schema.
    Json,
    /// 1: Avro schema JSON.
    Avro,
    /// 2: base64 `FileDescriptorSet` + `:` + message name.
    Protobuf,
}

impl SchemaType {
    /// The byte on the wire.
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::Json => 0,
            Self::Avro => 1,
            Self::Protobuf => 2,
        }
    }

    /// Parses the wire byte.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::Json),
            1 => Some(Self::Avro),
            2 => Some(Self::Protobuf),
            _ => None,
        }
    }
}

/// Values of `WatchResponseEvent.operation` and `WatchRequest.operation_types`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchOperation {
    /// 0: a committed delete; no version fields.
    Delete,
    /// 1: committed batches; `from` and `to` set.
    Write,
    /// 2: reserved, never emitted.
    Read,
    /// 3: a committed trim; `keep_from` set.
    TrimStart,
    /// 4: reserved, never emitted.
    Details,
    /// 5: a batch with version 1 committed; no version fields.
    Create,
}

impl WatchOperation {
    /// The byte on the wire.
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::Delete => 0,
            Self::Write => 1,
            Self::Read => 2,
            Self::TrimStart => 3,
            Self::Details => 4,
            Self::Create => 5,
        }
    }

    /// Parses the wire byte.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::Delete),
            1 => Some(Self::Write),
            2 => Some(Self::Read),
            3 => Some(Self::TrimStart),
            4 => Some(Self::Details),
            5 => Some(Self::Create),
            _ => None,
        }
    }
}
