//! The plain, storage-owned types of the event store API: keys, requests, outcomes, stored
//! batches, list items and watch notifications. They mirror the Celeriant 0.2.0 wire model
//! field for field where one exists, without depending on the codec crates.

use bytes::Bytes;

/// An aggregate's address: (org, aggregate type, aggregate id), three u128s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct AggregateKey {
    /// Tenant.
    pub org_id: u128,
    /// Aggregate type.
    pub aggregate_type_id: u128,
    /// The stream's id.
    pub aggregate_id: u128,
}

impl AggregateKey {
    /// A key from its three ids.
    pub const fn new(org_id: u128, aggregate_type_id: u128, aggregate_id: u128) -> Self {
        AggregateKey {
            org_id,
            aggregate_type_id,
            aggregate_id,
        }
    }

    /// The 48 bytes `org ‖ type ‖ id`, each big-endian (sorts like the tuple).
    pub fn to_be_bytes(&self) -> [u8; 48] {
        let mut out = [0u8; 48];
        out[0..16].copy_from_slice(&self.org_id.to_be_bytes());
        out[16..32].copy_from_slice(&self.aggregate_type_id.to_be_bytes());
        out[32..48].copy_from_slice(&self.aggregate_id.to_be_bytes());
        out
    }
}

/// One event as a client sends it. `event_seq` is assigned by the store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewEvent {
    /// Client-chosen sequence (idempotency key together with the client id).
    pub client_seq: u64,
    /// Optional opaque id.
    pub event_id: Option<u128>,
    /// Client time of the event (opaque).
    pub event_timestamp: u64,
    /// Event type (0 is reserved and refused).
    pub event_type_major: u64,
    /// Event type revision.
    pub event_type_minor: u64,
    /// Opaque payload.
    pub value: Bytes,
    /// AES-GCM nonce of a client-side-encrypted payload (such batches are never compressed).
    pub iv: Option<[u8; 12]>,
}

/// The part of a write that targets one aggregate; becomes exactly one batch, unless it is a
/// guard ([`AggregateWrite::is_guard`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AggregateWrite {
    /// The aggregate.
    pub key: AggregateKey,
    /// The batch's events, in order (at least one, except in a guard).
    pub events: Vec<NewEvent>,
    /// May create the aggregate when it never existed.
    pub allow_create: bool,
    /// OCC guard: the current version must equal this (0 = "does not exist yet").
    pub expected_version: Option<u64>,
    /// Refuse when the smallest `client_seq` is not above this client's high-water mark.
    pub enforce_client_idempotency: bool,
}

impl AggregateWrite {
    /// A guard (the 0.3.0 client's `WriteBatch::guard`): no events, an `expected_version`, no
    /// create and no idempotency. Its version is checked in the same decision as the write's
    /// other parts and it writes nothing.
    pub fn is_guard(&self) -> bool {
        self.events.is_empty()
            && self.expected_version.is_some()
            && !self.allow_create
            && !self.enforce_client_idempotency
    }
}

/// A write request: one or more aggregates, committed atomically in one log record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteRequest {
    /// Writer identity; scopes idempotency.
    pub client_id: u128,
    /// Free-form actor id stored on every batch.
    pub user_id: Option<u128>,
    /// The parts (distinct keys, all on one shard).
    pub writes: Vec<AggregateWrite>,
    /// The server clock in the configured precision; the stored `server_timestamp` is
    /// `max(now, the shard's previous timestamp)`.
    pub now: u64,
}

/// What a committed write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The shard that holds the write.
    pub shard: u32,
    /// The log sequence number of the write's record in that shard.
    pub log_seq: u64,
    /// The batch's server timestamp.
    pub server_timestamp: u64,
    /// Per part that appends (guards write nothing), in request order: the committed
    /// aggregate version.
    pub versions: Vec<u64>,
}

impl WriteOutcome {
    /// What `WriteResponse.max_aggregate_version` carries: the version when the request wrote
    /// exactly one aggregate, `None` otherwise.
    pub fn max_aggregate_version(&self) -> Option<u64> {
        match self.versions.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }
}

/// A trim request (raise the readable floor of one aggregate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrimRequest {
    /// The aggregate.
    pub key: AggregateKey,
    /// The new floor: versions below it become unreadable.
    pub keep_from_version: u64,
    /// Who asked.
    pub client_id: u128,
    /// Free-form actor id.
    pub user_id: Option<u128>,
    /// Server clock, as for writes.
    pub now: u64,
}

/// What a trim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimOutcome {
    /// False when the request was at or below the floor already (nothing written).
    pub written: bool,
    /// The floor now in force.
    pub floor: u64,
}

/// One aggregate of a delete request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggregateDelete {
    /// The aggregate.
    pub key: AggregateKey,
    /// A later write may recreate it.
    pub allow_recreate: bool,
    /// A recreate continues versions and event sequences (and makes old batches readable).
    pub allow_sequence_continuation: bool,
    /// OCC guard.
    pub expected_version: Option<u64>,
}

/// A delete request: soft-deletes every listed aggregate atomically.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteRequest {
    /// Who asked.
    pub client_id: u128,
    /// Free-form actor id.
    pub user_id: Option<u128>,
    /// The aggregates (distinct keys, all on one shard).
    pub deletes: Vec<AggregateDelete>,
    /// Server clock, as for writes.
    pub now: u64,
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The shard that holds the delete.
    pub shard: u32,
    /// The delete record's log sequence number.
    pub log_seq: u64,
}

/// A stored event as reads return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// As written.
    pub client_seq: u64,
    /// Assigned per aggregate (first event of a stream = 1).
    pub event_seq: u64,
    /// As written.
    pub event_id: Option<u128>,
    /// As written.
    pub event_timestamp: u64,
    /// As written.
    pub event_type_major: u64,
    /// As written.
    pub event_type_minor: u64,
    /// As written, byte for byte.
    pub value: Bytes,
    /// As written.
    pub iv: Option<[u8; 12]>,
}

/// A stored batch (one aggregate's part of one write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventBatch {
    /// The batch's aggregate version.
    pub version: u64,
    /// Writer's client id.
    pub client_id: u128,
    /// Writer's user id.
    pub user_id: Option<u128>,
    /// Server timestamp of the write.
    pub server_timestamp: u64,
    /// The events that survived event-level filters, in written order.
    pub events: Vec<StoredEvent>,
}

/// A read: the Celeriant `ReadFilters` plus the page bounds the server chooses. All bounds are
/// inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadQuery {
    /// First version wanted (must be at or above the floor).
    pub from_version: u64,
    /// Last version wanted.
    pub to_version: Option<u64>,
    /// Keep only events of these major types (`Some(empty)` = no filter).
    pub include_event_types: Option<Vec<u64>>,
    /// Drop batches written by this client.
    pub exclude_client_id: Option<u128>,
    /// Keep only batches written by this client.
    pub include_client_id: Option<u128>,
    /// Drop batches whose user id is this.
    pub exclude_user_id: Option<u128>,
    /// Keep only batches whose user id is this.
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
    /// At most this many batches per page (at least one is returned when any matches).
    pub max_batches: usize,
    /// Stop once the returned batches hold this many stored (uncompressed) bytes.
    pub max_bytes: u64,
}

impl Default for ReadQuery {
    fn default() -> Self {
        ReadQuery {
            from_version: 1,
            to_version: None,
            include_event_types: None,
            exclude_client_id: None,
            include_client_id: None,
            exclude_user_id: None,
            include_user_id: None,
            min_server_timestamp: None,
            max_server_timestamp: None,
            min_client_seq: None,
            max_client_seq: None,
            min_event_timestamp: None,
            max_event_timestamp: None,
            min_event_seq: None,
            max_event_seq: None,
            max_batches: super::DEFAULT_READ_MAX_BATCHES,
            max_bytes: super::DEFAULT_READ_MAX_BYTES,
        }
    }
}

impl ReadQuery {
    /// Everything from `from_version` on, with the default page bounds.
    pub fn from_version(from_version: u64) -> Self {
        ReadQuery {
            from_version,
            ..ReadQuery::default()
        }
    }
}

/// One page of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPage {
    /// Matching batches, ascending by version.
    pub batches: Vec<EventBatch>,
    /// Where to continue (`from_version` of the next request); `None` = nothing more in range.
    pub next_version: Option<u64>,
}

/// What `AggregateDetails` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateDetails {
    /// Lowest readable version (1, or the trim floor).
    pub min_aggregate_version: u64,
    /// Current version (for a deleted aggregate: the version at deletion).
    pub max_aggregate_version: u64,
    /// Last assigned event sequence.
    pub max_event_seq: u64,
    /// Soft-deleted.
    pub is_deleted: bool,
    /// The delete's flag (false if never deleted).
    pub allow_recreate: bool,
    /// The delete's flag (false if never deleted).
    pub allow_sequence_continuation: bool,
    /// Server timestamp of the aggregate's newest record (batch, trim or delete).
    pub last_server_timestamp: u64,
    /// Client id on that record.
    pub last_client_id: u128,
    /// User id on that record.
    pub last_user_id: Option<u128>,
}

/// One page of a listing: items and the cursor of the next page (`None` = exhausted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass back as the next cursor; `None` when the shard is exhausted.
    pub next_cursor: Option<u64>,
}

/// An aggregate type seen on a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AggregateTypeItem {
    /// Tenant.
    pub org_id: u128,
    /// Aggregate type.
    pub aggregate_type_id: u128,
}

/// One aggregate of a listing, with its statistics (every field of the 0.2.0
/// `AggregateListItem` has a real value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateListItem {
    /// The aggregate.
    pub key: AggregateKey,
    /// Soft-deleted (and not recreated).
    pub is_deleted: bool,
    /// Batches written to its current incarnation (a fresh recreate starts every figure of
    /// this item afresh; a continued one keeps counting the batches it makes readable again).
    pub event_batch_count: u64,
    /// Smallest client event timestamp seen (0 = none).
    pub min_event_timestamp: u64,
    /// Largest client event timestamp seen.
    pub max_event_timestamp: u64,
    /// Readable floor.
    pub min_aggregate_version: u64,
    /// Current version.
    pub max_aggregate_version: u64,
    /// First event sequence of the current incarnation (1 unless continued).
    pub min_event_seq: u64,
    /// Last assigned event sequence.
    pub max_event_seq: u64,
    /// Server timestamp of its first batch.
    pub min_server_timestamp: u64,
    /// Server timestamp of its newest record.
    pub max_server_timestamp: u64,
    /// Event bytes as stored (after compression).
    pub compressed_size: u64,
    /// Event bytes before compression.
    pub uncompressed_size: u64,
}

/// A schema registration's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SchemaKey {
    /// Tenant.
    pub org_id: u128,
    /// Aggregate type.
    pub aggregate_type_id: u128,
    /// Event type.
    pub event_type_major: u64,
    /// Event type revision.
    pub event_type_minor: u64,
}

/// A schema registration (the server validates the schema text; storage keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchemaRegistration {
    /// Which events it governs.
    pub key: SchemaKey,
    /// 0 JSON Schema, 1 Avro, 2 Protobuf (stored as given).
    pub schema_type: u8,
    /// The schema text.
    pub schema: String,
    /// Who registered it.
    pub client_id: u128,
    /// Free-form actor id.
    pub user_id: Option<u128>,
    /// Server clock, as for writes.
    pub now: u64,
}

/// A stored schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchema {
    /// 0 JSON Schema, 1 Avro, 2 Protobuf.
    pub schema_type: u8,
    /// The schema text, as registered.
    pub schema: String,
    /// When it was registered (server timestamp).
    pub registered_at: u64,
}

/// A watch notification's operation (the wire's operation codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchOperation {
    /// A committed delete (code 0).
    Delete,
    /// Committed event batches (code 1).
    Write,
    /// A committed trim (code 3).
    TrimStart,
    /// A batch with version 1 committed (code 5).
    Create,
}

impl WatchOperation {
    /// The wire code.
    pub fn code(self) -> u8 {
        match self {
            WatchOperation::Delete => 0,
            WatchOperation::Write => 1,
            WatchOperation::TrimStart => 3,
            WatchOperation::Create => 5,
        }
    }
}

/// One watch notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WatchEvent {
    /// The aggregate.
    pub key: AggregateKey,
    /// What happened.
    pub operation: WatchOperation,
    /// Write: lowest version covered.
    pub from_version: Option<u64>,
    /// Write: highest version covered.
    pub to_version: Option<u64>,
    /// TrimStart: the new floor.
    pub keep_from_version: Option<u64>,
}
