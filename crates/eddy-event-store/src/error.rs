//! The event store's error type: a [`Refusal`] (each means nothing was written) or a failure
//! of the log machinery underneath. The server maps it to the protocol's error codes (§5.2 of
//! the event protocol) in one place; the code of each refusal is noted on its variant, and
//! `part` fields index the request's `writes` / `deletes`.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use eddy_log::{Corruption, IoOp, LogError};

use crate::placement::RoutingRule;
use crate::types::AggregateKey;

/// One part of [`Refusal::VersionConflicts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionMismatch {
    /// The part.
    pub part: usize,
    /// The aggregate.
    pub key: AggregateKey,
    /// What the request expected.
    pub expected: u64,
    /// The current version (write-ahead).
    pub current: u64,
}

impl Refusal {
    /// Every version conflict of an OCC refusal (one for [`Refusal::VersionConflict`]), in
    /// part order; empty for other refusals.
    pub fn version_conflicts(&self) -> Vec<VersionMismatch> {
        match self {
            Self::VersionConflict {
                part,
                key,
                expected,
                current,
            } => vec![VersionMismatch {
                part: *part,
                key: *key,
                expected: *expected,
                current: *current,
            }],
            Self::VersionConflicts { conflicts } => conflicts.clone(),
            _ => Vec::new(),
        }
    }

    /// The OCC refusal of `conflicts` (in part order, at least one).
    pub(crate) fn of_conflicts(mut conflicts: Vec<VersionMismatch>) -> Self {
        if conflicts.len() == 1 {
            let c = conflicts.remove(0);
            Self::VersionConflict {
                part: c.part,
                key: c.key,
                expected: c.expected,
                current: c.current,
            }
        } else {
            Self::VersionConflicts { conflicts }
        }
    }
}

/// Everything the event store can answer with besides success: a [`Refusal`] of the request
/// (nothing was written; the server answers with the refusal's own code) or a failure of the
/// storage underneath.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventStoreError {
    /// The request was refused by validation; nothing was written.
    #[error("event store request refused")]
    Refused(#[from] Refusal),
    /// The log machinery failed (I/O, corruption, a full disk, a fail-stopped log, a limit,
    /// shutdown): for a mutation, nothing is acknowledged.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The shard's index cannot be flushed (writing its run fails: a full disk, an I/O error)
    /// and its memory budget is used up, so the shard refuses mutations; nothing was written.
    /// The flush is retried with backoff, and the shard takes writes again once one succeeds.
    #[error(
        "shard {shard} refuses writes: its index cannot be written to disk (retried with backoff)"
    )]
    IndexBacklog {
        /// The shard.
        shard: u32,
        /// The flush failure.
        #[source]
        source: Arc<EventStoreError>,
    },
    /// Looking an event's schema up failed (2014): the write was refused before validation.
    #[error("cannot look the event's schema up")]
    SchemaLookup {
        /// The cause.
        #[source]
        source: Box<EventStoreError>,
    },
    /// A configuration value is out of its allowed range.
    #[error("invalid configuration: {field} = {value}")]
    InvalidConfig {
        /// The configuration field.
        field: &'static str,
        /// The rejected value.
        value: u64,
    },
}

/// Why the event store refused a request. Every refusal means nothing was written; refusals
/// are deterministic (the same request against the same state is refused the same way).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
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
    /// A watch pinned to no shard names none of the ids its routing rule shards by (9002).
    #[error("a watch must name at least one id of the set the store routes by ({rule:?})")]
    WatchFilterRequired {
        /// The store's routing rule.
        rule: RoutingRule,
        /// Shards of the store.
        num_shards: u32,
    },
    /// The same aggregate appears twice in one request.
    #[error("aggregate listed twice in one request (part {part})")]
    DuplicateKey {
        /// The second occurrence.
        part: usize,
    },
    /// A part has no events and no `expected_version` (2000).
    #[error("part {part} has no events")]
    EmptyEvents {
        /// The part.
        part: usize,
    },
    /// A part without events that is not a guard (it allows create or enforces idempotency),
    /// or a write whose parts are all guards (2014; 2000 for a 0.2.0 client).
    #[error("part {part} has no events and is not a guard of a write that appends")]
    MalformedGuard {
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
    /// Several parts' `expected_version` differ from their aggregates' versions (write: 2003;
    /// delete: 4002), in part order: after the first conflicting part the request's other
    /// parts are checked for their versions only, so a client learns every stale guard at
    /// once. One conflict alone is [`Refusal::VersionConflict`].
    #[error("{} parts expected other versions than their aggregates are at", .conflicts.len())]
    VersionConflicts {
        /// Every conflicting part, at least two.
        conflicts: Vec<VersionMismatch>,
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
    /// A replicated entry the shard already holds a record of (or a later one, copied from a
    /// peer's snapshot): applying it again would store it twice, so it writes nothing.
    #[error("replicated entry {index} is already in the shard")]
    AlreadyApplied {
        /// The entry's index.
        index: u64,
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
    /// A registration's schema type is not one the protocol knows (2019).
    #[error("schema type {schema_type} is not supported")]
    SchemaTypeUnsupported {
        /// The type byte.
        schema_type: u8,
    },
    /// A registration's schema text does not compile, or is too large (2021).
    #[error("the schema does not compile: {parse_error}")]
    SchemaInvalid {
        /// The type byte.
        schema_type: u8,
        /// Why (the parser's message, clipped to [`MAX_ERROR_TEXT`](crate::schema::MAX_ERROR_TEXT)).
        parse_error: String,
    },
    /// An event's payload does not validate against its registered schema (2022).
    #[error("event {event_type_major}.{event_type_minor} (client sequence {client_seq}) does not match its schema: {validation_error}")]
    SchemaValidationFailed {
        /// Event type.
        event_type_major: u64,
        /// Event type revision.
        event_type_minor: u64,
        /// The event's client sequence.
        client_seq: u64,
        /// Why (clipped).
        validation_error: String,
    },
    /// The stored schema of an event's type no longer compiles (2023).
    #[error("the schema of event {event_type_major}.{event_type_minor} does not compile: {compilation_error}")]
    SchemaCompilationFailed {
        /// Event type.
        event_type_major: u64,
        /// Event type revision.
        event_type_minor: u64,
        /// The event's client sequence.
        client_seq: u64,
        /// Why (clipped).
        compilation_error: String,
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

impl EventStoreError {
    /// An I/O failure of `op` on `path`.
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::io(op, path, source).into()
    }

    /// Bytes at `offset` of `path` do not verify.
    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, kind: Corruption) -> Self {
        LogError::corrupt(path, offset, kind).into()
    }

    /// The refusal, when the request was refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            EventStoreError::Refused(r) => Some(r),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = EventStoreError> = std::result::Result<T, E>;
