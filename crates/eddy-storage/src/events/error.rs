//! Why the event store refused a request. Every refusal means nothing was written.
//!
//! The server maps each variant to its Celeriant error code (§5.2 of the event protocol); the
//! mapping is noted on each variant. `part` fields index the request's `writes` / `deletes`.

use super::types::AggregateKey;

/// A refused event-store request (carried by [`StorageError::Event`](crate::StorageError)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The request lists no aggregate (9002).
    #[error("the request lists no aggregate")]
    EmptyRequest,
    /// The aggregates of one request live on different shards (9001).
    #[error("the request's aggregates span shards ({num_shards} shards)")]
    CrossShard {
        /// Shards of the store.
        num_shards: u32,
    },
    /// A shard id at or above the shard count (9002).
    #[error("shard {shard} does not exist ({num_shards} shards)")]
    NoSuchShard {
        /// The shard asked for.
        shard: u64,
        /// Shards of the store.
        num_shards: u32,
    },
    /// The same aggregate appears twice in one request.
    #[error("aggregate listed twice in one request (part {part})")]
    DuplicateKey {
        /// The second occurrence.
        part: usize,
    },
    /// A part has no events (2000).
    #[error("part {part} has no events")]
    EmptyEvents {
        /// The part.
        part: usize,
    },
    /// An event has `event_type_major == 0` (2001).
    #[error("an event of part {part} has event type 0")]
    ZeroEventType {
        /// The part.
        part: usize,
        /// That event's client sequence.
        client_seq: u64,
    },
    /// The aggregate never existed (write without `allow_create`: 2005; read: 1001; details:
    /// 7001; trim: 3000; delete: 4000).
    #[error("aggregate does not exist")]
    NotFound {
        /// The part (0 for single-key requests).
        part: usize,
        /// The aggregate.
        key: AggregateKey,
    },
    /// The aggregate is soft-deleted (read: 1001; trim: 3000; delete: 4000, also while a delete
    /// is in flight).
    #[error("aggregate is deleted")]
    Deleted {
        /// The part.
        part: usize,
        /// The aggregate.
        key: AggregateKey,
    },
    /// A write to a deleted aggregate whose delete forbade recreation (2006).
    #[error("aggregate is deleted and may not be recreated")]
    RecreateNotAllowed {
        /// The part.
        part: usize,
        /// The aggregate.
        key: AggregateKey,
    },
    /// `expected_version` differs from the current version (write: 2003; delete: 4002).
    #[error("expected version {expected} but the aggregate is at {current}")]
    VersionConflict {
        /// The part.
        part: usize,
        /// The aggregate.
        key: AggregateKey,
        /// What the request expected.
        expected: u64,
        /// The current version (write-ahead: includes writes not yet acknowledged).
        current: u64,
    },
    /// Idempotency: a committed write already carried this client sequence (2002). The retry
    /// is answered with what was committed and is never written twice.
    #[error("client sequence {attempted_client_seq} already committed (high-water mark {last_client_seq})")]
    Duplicate {
        /// The part.
        part: usize,
        /// The aggregate.
        key: AggregateKey,
        /// The stored high-water mark.
        last_client_seq: u64,
        /// The smallest client sequence of the refused part.
        attempted_client_seq: u64,
        /// The aggregate version of the committed batch that set the mark.
        committed_version: u64,
    },
    /// Idempotency: the batch that set the mark is not durable yet (2013): back off and retry;
    /// it is not a success yet.
    #[error("client sequence {attempted_client_seq} duplicates a write still in flight")]
    InFlightDuplicate {
        /// The part.
        part: usize,
        /// The aggregate.
        key: AggregateKey,
        /// The in-flight high-water mark.
        last_client_seq: u64,
        /// The smallest client sequence of the refused part.
        attempted_client_seq: u64,
    },
    /// A read below the floor (1000).
    #[error("version {requested} is below the floor {minimum_available}")]
    Trimmed {
        /// The requested `from_version`.
        requested: u64,
        /// The floor.
        minimum_available: u64,
    },
    /// A trim past the current version (3004).
    #[error("cannot trim to {requested}: the aggregate is at {max_aggregate_version}")]
    TrimOutOfRange {
        /// The requested floor.
        requested: u64,
        /// The current version.
        max_aggregate_version: u64,
    },
    /// A schema (or an in-flight registration) exists for the key (2020).
    #[error("schema {event_type_major}.{event_type_minor} already registered")]
    SchemaExists {
        /// Event type.
        event_type_major: u64,
        /// Event type revision.
        event_type_minor: u64,
    },
    /// A value above a named limit.
    #[error("{what} = {value} exceeds the limit {limit}")]
    Limit {
        /// What was measured.
        what: &'static str,
        /// The value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// The shard already holds the maximum number of watch subscribers (8005).
    #[error("{active} watch subscribers on the shard (maximum {max})")]
    TooManySubscribers {
        /// Subscribers now.
        active: usize,
        /// The cap.
        max: usize,
    },
    /// An immutable setting differs from the one the store was created with.
    #[error("{field} is {requested} but the store was created with {stored}")]
    ImmutableConfig {
        /// The setting.
        field: &'static str,
        /// What the store was created with.
        stored: u64,
        /// What was asked for now.
        requested: u64,
    },
    /// The compression dictionary differs from the one the store was created with.
    #[error("the compression dictionary differs from the one the store was created with")]
    DictionaryMismatch,
}
