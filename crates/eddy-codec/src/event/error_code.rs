//! The error codes of spec §5.2 ([`ErrorCode`], with name and connection policy) and
//! [`ServerError`], one typed constructor per code that renders the exact JSON context
//! clients parse.
//!
//! Key spellings are part of the contract: the 0.2.0 client reads `requested`,
//! `minimum_available`, `last_client_seq`, `attempted_client_seq`, `expected_version`,
//! `current_aggregate_version`, `active_subscribers` and `max_subscribers` with a JSON
//! parser, and finds `"leader_address":"` and `"num_shards":` by substring. Every message is
//! a compact JSON object of at most [`MAX_ERROR_MESSAGE_LEN`] bytes (10xxx included, as
//! `{"detail":"…"}`; no client parses those).

use super::json::JsonObject;
use super::model::AggregateConflict;
use super::responses::{
    DeleteConflictResponse, ErrorResponse, EventResponse, WriteConflictResponse,
    MAX_ERROR_MESSAGE_LEN,
};

/// What the server does with the connection after sending an error frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterError {
    /// Keep serving requests (clients reuse the connection after ordinary errors).
    KeepOpen,
    /// Close (Identify failures, 10004 and watch errors).
    Close,
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $name:literal, $after:ident; )*) => {
        /// Every error code of the protocol (`msg: src/error_codes.rs`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        #[repr(u32)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant = $code, )*
        }

        impl ErrorCode {
            /// Every code, ascending.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The number on the wire.
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// Looks a number up.
            pub const fn from_code(code: u32) -> Option<Self> {
                match code {
                    $( $code => Some(Self::$variant), )*
                    _ => None,
                }
            }

            /// The upstream constant name (e.g. `WRITE_NOT_LEADER`).
            pub const fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $name, )*
                }
            }

            /// Whether the connection stays open after this error.
            pub const fn after_error(self) -> AfterError {
                match self {
                    $( Self::$variant => AfterError::$after, )*
                }
            }
        }
    };
}

error_codes! {
    /// Read below the trimmed floor.
    ReadUnavailableVersion = 1000, "READ_UNAVAILABLE_VERSION", KeepOpen;
    /// Read of a missing or deleted aggregate.
    ReadAggregateNotExists = 1001, "READ_AGGREGATE_NOT_EXISTS", KeepOpen;
    /// Internal cache-load contention.
    ReadCacheLoadLockTimeout = 1002, "READ_CACHE_LOAD_LOCK_TIMEOUT", KeepOpen;
    /// Internal scan error.
    ReadCacheLoadFileScan = 1003, "READ_CACHE_LOAD_FILE_SCAN", KeepOpen;
    /// Internal data read error.
    ReadFetchDatablocks = 1004, "READ_FETCH_DATABLOCKS", KeepOpen;
    /// Internal metadata read error.
    ReadFetchMetablocks = 1005, "READ_FETCH_METABLOCKS", KeepOpen;
    /// A single-aggregate write with no events.
    WriteEmptyEventsList = 2000, "WRITE_EMPTY_EVENTS_LIST", KeepOpen;
    /// An event with `event_type_major == 0`.
    WriteZeroEventType = 2001, "WRITE_ZERO_EVENT_TYPE", KeepOpen;
    /// Idempotency: already landed.
    WriteClientIdempotencyViolation = 2002, "WRITE_CLIENT_IDEMPOTENCY_VIOLATION", KeepOpen;
    /// `expected_version` differs from the current version.
    WriteOptimisticConcurrencyViolation = 2003, "WRITE_OPTIMISTIC_CONCURRENCY_VIOLATION", KeepOpen;
    /// Internal serialisation failure.
    WriteFailedToSerialiseDatablocks = 2004, "WRITE_FAILED_TO_SERIALISE_DATABLOCKS", KeepOpen;
    /// Missing aggregate and `allow_create == false`.
    WriteAggregateNotExists = 2005, "WRITE_AGGREGATE_NOT_EXISTS", KeepOpen;
    /// Deleted without `allow_recreate`.
    WriteAggregateRecreateNotAllowed = 2006, "WRITE_AGGREGATE_RECREATE_NOT_ALLOWED", KeepOpen;
    /// Replication failed; not applied.
    WriteReplicationError = 2007, "WRITE_REPLICATION_ERROR", KeepOpen;
    /// Local durability failure; not applied.
    WriteFsyncError = 2008, "WRITE_FSYNC_ERROR", KeepOpen;
    /// Internal.
    WriteCacheAggregateClientError = 2009, "WRITE_CACHE_AGGREGATE_CLIENT_ERROR", KeepOpen;
    /// Internal.
    WriteAggregateExistsCacheError = 2010, "WRITE_AGGREGATE_EXISTS_CACHE_ERROR", KeepOpen;
    /// This node cannot accept writes.
    WriteNotLeader = 2011, "WRITE_NOT_LEADER", KeepOpen;
    /// Leader shedding load.
    WriteReplicationBackpressure = 2012, "WRITE_REPLICATION_BACKPRESSURE", KeepOpen;
    /// Idempotency: duplicate of a write not yet committed.
    WriteInflightDuplicate = 2013, "WRITE_INFLIGHT_DUPLICATE", KeepOpen;
    /// 0.3.0: a write entry without events that is not a guard (a guard pins
    /// `expected_version`, and neither creates nor enforces idempotency).
    WriteMalformedGuardEntry = 2014, "WRITE_MALFORMED_GUARD_ENTRY", KeepOpen;
    /// 0.3.0: the write's typed conflict response would not fit the response limit.
    WriteConflictResponseTooLarge = 2015, "WRITE_CONFLICT_RESPONSE_TOO_LARGE", KeepOpen;
    /// Schema key already registered.
    RegisterSchemaAlreadyExists = 2020, "REGISTER_SCHEMA_ALREADY_EXISTS", KeepOpen;
    /// Schema too large or does not compile.
    RegisterSchemaInvalid = 2021, "REGISTER_SCHEMA_INVALID", KeepOpen;
    /// An event payload fails its schema.
    WriteSchemaValidationFailed = 2022, "WRITE_SCHEMA_VALIDATION_FAILED", KeepOpen;
    /// A stored schema is unusable.
    WriteSchemaCompilationFailed = 2023, "WRITE_SCHEMA_COMPILATION_FAILED", KeepOpen;
    /// `schema_type` not 0, 1 or 2.
    RegisterSchemaUnsupportedType = 2024, "REGISTER_SCHEMA_UNSUPPORTED_TYPE", KeepOpen;
    /// Internal.
    RegisterSchemaCacheLoadError = 2025, "REGISTER_SCHEMA_CACHE_LOAD_ERROR", KeepOpen;
    /// Durability failure.
    RegisterSchemaFsyncError = 2026, "REGISTER_SCHEMA_FSYNC_ERROR", KeepOpen;
    /// This node cannot accept writes (the 0.2.0 client follows the leader address).
    RegisterSchemaCannotAcceptWrites = 2027, "REGISTER_SCHEMA_CANNOT_ACCEPT_WRITES", KeepOpen;
    /// Replication failure.
    RegisterSchemaReplicationError = 2028, "REGISTER_SCHEMA_REPLICATION_ERROR", KeepOpen;
    /// Another shard failed or timed out.
    RegisterSchemaCoordinationFailed = 2029, "REGISTER_SCHEMA_COORDINATION_FAILED", KeepOpen;
    /// Trim of a missing or deleted aggregate.
    TrimAggregateNotExists = 3000, "TRIM_AGGREGATE_NOT_EXISTS", KeepOpen;
    /// Internal.
    TrimCacheError = 3001, "TRIM_CACHE_ERROR", KeepOpen;
    /// Replication failure; not applied.
    TrimReplicationError = 3002, "TRIM_REPLICATION_ERROR", KeepOpen;
    /// Durability failure.
    TrimFsyncError = 3003, "TRIM_FSYNC_ERROR", KeepOpen;
    /// `keep_from` above the current version.
    TrimIndexOutOfRange = 3004, "TRIM_INDEX_OUT_OF_RANGE", KeepOpen;
    /// This node cannot accept writes.
    TrimNotLeader = 3005, "TRIM_NOT_LEADER", KeepOpen;
    /// Shedding load.
    TrimReplicationBackpressure = 3006, "TRIM_REPLICATION_BACKPRESSURE", KeepOpen;
    /// Key missing, already deleted, or delete in flight.
    DeleteAggregateNotExists = 4000, "DELETE_AGGREGATE_NOT_EXISTS", KeepOpen;
    /// Empty `deletes` (routing answers 9002 first).
    DeleteEmptyDeleteList = 4001, "DELETE_EMPTY_DELETE_LIST", KeepOpen;
    /// `expected_version` differs from the current version.
    DeleteOptimisticConcurrencyViolation = 4002, "DELETE_OPTIMISTIC_CONCURRENCY_VIOLATION", KeepOpen;
    /// Internal.
    DeleteCacheError = 4003, "DELETE_CACHE_ERROR", KeepOpen;
    /// Replication failure; not applied.
    DeleteReplicationError = 4004, "DELETE_REPLICATION_ERROR", KeepOpen;
    /// Durability failure.
    DeleteFsyncError = 4005, "DELETE_FSYNC_ERROR", KeepOpen;
    /// This node cannot accept writes.
    DeleteNotLeader = 4006, "DELETE_NOT_LEADER", KeepOpen;
    /// Shedding load.
    DeleteReplicationBackpressure = 4007, "DELETE_REPLICATION_BACKPRESSURE", KeepOpen;
    /// 0.3.0: the delete's typed conflict response would not fit the response limit.
    DeleteConflictResponseTooLarge = 4008, "DELETE_CONFLICT_RESPONSE_TOO_LARGE", KeepOpen;
    /// List scan failure.
    ListOrgsDiskRead = 5000, "LIST_ORGS_DISK_READ", KeepOpen;
    /// List scan failure.
    ListAggregateTypesDiskRead = 5001, "LIST_AGGREGATE_TYPES_DISK_READ", KeepOpen;
    /// List scan failure.
    ListAggregatesDiskRead = 5002, "LIST_AGGREGATES_DISK_READ", KeepOpen;
    /// Replication port only.
    ReplicationBatchFsync = 6000, "REPLICATION_BATCH_FSYNC", KeepOpen;
    /// Replication port only.
    ReplicationBatchSerialiseDatablocks = 6001, "REPLICATION_BATCH_SERIALISE_DATABLOCKS", KeepOpen;
    /// Replication port only.
    ReplicationBatchWalSeqGap = 6002, "REPLICATION_BATCH_WAL_SEQ_GAP", KeepOpen;
    /// Internal.
    ExistsCacheError = 7000, "EXISTS_CACHE_ERROR", KeepOpen;
    /// Details of a never-existing aggregate.
    ExistsAggregateNotExists = 7001, "EXISTS_AGGREGATE_NOT_EXISTS", KeepOpen;
    /// Internal.
    ExistsMetablockReadError = 7002, "EXISTS_METABLOCK_READ_ERROR", KeepOpen;
    /// A watch reached the ordinary executor.
    WatchRequestInvalid = 8000, "WATCH_REQUEST_INVALID", KeepOpen;
    /// `requested_latency_ms` above the cap.
    WatchLatencyTooHigh = 8001, "WATCH_LATENCY_TOO_HIGH", Close;
    /// Watch internal I/O error.
    WatchReadIo = 8002, "WATCH_READ_IO", Close;
    /// Watch internal error.
    WatchReadSerialization = 8003, "WATCH_READ_SERIALIZATION", Close;
    /// Watch internal error.
    WatchReadOther = 8004, "WATCH_READ_OTHER", Close;
    /// Per-shard watch cap reached.
    WatchTooManySubscribers = 8005, "WATCH_TOO_MANY_SUBSCRIBERS", Close;
    /// No routing key.
    ShardRoutingNoKey = 9000, "SHARD_ROUTING_NO_KEY", KeepOpen;
    /// Ids span several shards.
    ShardRoutingMultipleShards = 9001, "SHARD_ROUTING_MULTIPLE_SHARDS", KeepOpen;
    /// Bad `shard_id`, empty map, or watch filters not matching the routing rule.
    ShardRoutingIncompatibleFilters = 9002, "SHARD_ROUTING_INCOMPATIBLE_FILTERS", KeepOpen;
    /// Nonce unparsable, too old or too far ahead.
    IdentifyInvalidNonce = 10001, "IDENTIFY_INVALID_NONCE", Close;
    /// Key or signature undecodable, or the signature does not verify.
    IdentifyInvalidSignature = 10002, "IDENTIFY_INVALID_SIGNATURE", Close;
    /// Request `client_id` differs from the RSA-verified id.
    IdentifyMismatch = 10003, "IDENTIFY_MISMATCH", KeepOpen;
    /// Identity required but the first frame is not Identify.
    IdentifyRequired = 10004, "IDENTIFY_REQUIRED", Close;
    /// API keys configured, Identify without one.
    AuthRequired = 10005, "AUTH_REQUIRED", Close;
    /// API key malformed or unknown.
    AuthInvalidKey = 10006, "AUTH_INVALID_KEY", Close;
    /// Read-only key on a mutating request.
    AuthInsufficientPermissions = 10007, "AUTH_INSUFFICIENT_PERMISSIONS", KeepOpen;
    /// The request could not be handed to its shard.
    ServerBusy = 11000, "SERVER_BUSY", KeepOpen;
}

impl ErrorCode {
    /// An `ErrorResponse` with this code and a hand-built context, for the rare case where
    /// a [`ServerError`] variant does not fit (prefer the typed variants: they carry the key
    /// spellings clients parse). The JSON is shortened to fit like every other message.
    pub fn response(self, correlation_id: Option<u128>, context: &JsonObject) -> ErrorResponse {
        ErrorResponse {
            correlation_id,
            error_code: self.code(),
            error_message: context.render(MAX_ERROR_MESSAGE_LEN),
        }
    }
}

/// Why an API key was refused (10006); each reason has upstream's sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InvalidKeyReason {
    /// Not standard base64.
    Format,
    /// Not exactly 32 decoded bytes.
    Length,
    /// No stored hash matches.
    Unknown,
}

/// Which id set a watch must name under the server's routing rule (9002 detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutingField {
    /// `--routing-rule org_id`.
    Org,
    /// `--routing-rule aggregate_type_id`.
    AggregateType,
    /// `--routing-rule aggregate_id` (default).
    Aggregate,
}

/// A server-side failure with its context; [`ServerError::to_response`] turns it into the
/// `ErrorResponse` to send. `detail` strings are free text and are shortened if the message
/// would exceed [`MAX_ERROR_MESSAGE_LEN`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // Fields are named after the JSON keys they render to.
pub enum ServerError {
    /// 1000 `{"requested":r,"minimum_available":m}`.
    ReadUnavailableVersion {
        requested: u64,
        minimum_available: u64,
    },
    /// 1001 `{}`.
    ReadAggregateNotExists,
    /// 1002 `{}`.
    ReadCacheLoadLockTimeout,
    /// 1003 `{"detail":"…"}`.
    ReadCacheLoadFileScan { detail: String },
    /// 1004 `{"detail":"…"}` or `{}`.
    ReadFetchDatablocks { detail: Option<String> },
    /// 1005 `{"detail":"…"}`.
    ReadFetchMetablocks { detail: String },
    /// 2000 `{}`.
    WriteEmptyEventsList,
    /// 2001 `{"client_seq":s}`.
    WriteZeroEventType { client_seq: u64 },
    /// 2002 `{"last_client_seq":l,"attempted_client_seq":a}`.
    WriteClientIdempotencyViolation {
        last_client_seq: u64,
        attempted_client_seq: u64,
    },
    /// 2003 `{"expected_version":e,"current_aggregate_version":c}`. `conflicts` (not in the
    /// JSON) is what a version 4/5 connection is told instead, as a `WriteConflictResponse`
    /// ([`ServerError::conflict_answer`]).
    WriteOptimisticConcurrencyViolation {
        expected_version: u64,
        current_aggregate_version: u64,
        conflicts: Vec<AggregateConflict>,
    },
    /// 2004 `{"detail":"…"}`.
    WriteFailedToSerialiseDatablocks { detail: String },
    /// 2005 `{}`.
    WriteAggregateNotExists,
    /// 2006 `{}`.
    WriteAggregateRecreateNotAllowed,
    /// 2007 `{"detail":"…"}`.
    WriteReplicationError { detail: String },
    /// 2008 `{"detail":"…"}`.
    WriteFsyncError { detail: String },
    /// 2009 `{}` or `{"detail":"…"}`.
    WriteCacheAggregateClientError { detail: Option<String> },
    /// 2010 `{}` or `{"detail":"…"}`.
    WriteAggregateExistsCacheError { detail: Option<String> },
    /// 2011 `{"leader_address":"host:port"}` or `{}`.
    WriteNotLeader { leader_address: Option<String> },
    /// 2012 `{}`.
    WriteReplicationBackpressure,
    /// 2013 `{"last_client_seq":l,"attempted_client_seq":a}`.
    WriteInflightDuplicate {
        last_client_seq: u64,
        attempted_client_seq: u64,
    },
    /// 2014 `{}` (versions 4/5 only).
    WriteMalformedGuardEntry,
    /// 2015 `{}` (versions 4/5 only).
    WriteConflictResponseTooLarge,
    /// 2020 `{"event_type_major":M,"event_type_minor":m}`.
    RegisterSchemaAlreadyExists {
        event_type_major: u64,
        event_type_minor: u64,
    },
    /// 2021 `{"schema_type":t,"parse_error":"…"}`.
    RegisterSchemaInvalid {
        schema_type: u8,
        parse_error: String,
    },
    /// 2022 `{"event_type_major":M,"event_type_minor":m,"client_seq":s,"validation_error":"…"}`.
    WriteSchemaValidationFailed {
        event_type_major: u64,
        event_type_minor: u64,
        client_seq: u64,
        validation_error: String,
    },
    /// 2023 `{"event_type_major":M,"event_type_minor":m,"client_seq":s,"compilation_error":"…"}`.
    WriteSchemaCompilationFailed {
        event_type_major: u64,
        event_type_minor: u64,
        client_seq: u64,
        compilation_error: String,
    },
    /// 2024 `{"schema_type":t}`.
    RegisterSchemaUnsupportedType { schema_type: u8 },
    /// 2025 `{}` or `{"detail":"…"}`.
    RegisterSchemaCacheLoadError { detail: Option<String> },
    /// 2026 `{"detail":"…"}`.
    RegisterSchemaFsyncError { detail: String },
    /// 2027 `{"leader_address":"host:port"}` or `{}`.
    RegisterSchemaCannotAcceptWrites { leader_address: Option<String> },
    /// 2028 `{"detail":"…"}`.
    RegisterSchemaReplicationError { detail: String },
    /// 2029 `{"failed_shard_count":f,"total_shards":t}`.
    RegisterSchemaCoordinationFailed {
        failed_shard_count: u64,
        total_shards: u64,
    },
    /// 3000 `{}`.
    TrimAggregateNotExists,
    /// 3001 `{}` or `{"detail":"…"}`.
    TrimCacheError { detail: Option<String> },
    /// 3002 `{"detail":"…"}`.
    TrimReplicationError { detail: String },
    /// 3003 `{"detail":"…"}`.
    TrimFsyncError { detail: String },
    /// 3004 `{"requested":k,"max_aggregate_version":v}`.
    TrimIndexOutOfRange {
        requested: u64,
        max_aggregate_version: u64,
    },
    /// 3005 `{"leader_address":"host:port"}` or `{}`.
    TrimNotLeader { leader_address: Option<String> },
    /// 3006 `{}`.
    TrimReplicationBackpressure,
    /// 4000 `{}`.
    DeleteAggregateNotExists,
    /// 4001 `{}`.
    DeleteEmptyDeleteList,
    /// 4002 `{"expected_version":e,"current_aggregate_version":c}`.
    DeleteOptimisticConcurrencyViolation {
        expected_version: u64,
        current_aggregate_version: u64,
        conflicts: Vec<AggregateConflict>,
    },
    /// 4003 `{}` or `{"detail":"…"}`.
    DeleteCacheError { detail: Option<String> },
    /// 4004 `{"detail":"…"}`.
    DeleteReplicationError { detail: String },
    /// 4005 `{"detail":"…"}`.
    DeleteFsyncError { detail: String },
    /// 4006 `{"leader_address":"host:port"}` or `{}`.
    DeleteNotLeader { leader_address: Option<String> },
    /// 4007 `{}`.
    DeleteReplicationBackpressure,
    /// 4008 `{}` (versions 4/5 only).
    DeleteConflictResponseTooLarge,
    /// 5000 `{"detail":"…"}`.
    ListOrgsDiskRead { detail: String },
    /// 5001 `{"detail":"…"}`.
    ListAggregateTypesDiskRead { detail: String },
    /// 5002 `{"detail":"…"}`.
    ListAggregatesDiskRead { detail: String },
    /// 6000 `{"detail":"…"}` (replication port).
    ReplicationBatchFsync { detail: String },
    /// 6001 `{"detail":"…"}` (replication port).
    ReplicationBatchSerialiseDatablocks { detail: String },
    /// 6002 `{"index":i,"expected":e,"actual":a}` (replication port).
    ReplicationBatchWalSeqGap {
        index: u64,
        expected: u64,
        actual: u64,
    },
    /// 7000 `{}` or `{"detail":"…"}`.
    ExistsCacheError { detail: Option<String> },
    /// 7001 `{}`.
    ExistsAggregateNotExists,
    /// 7002 `{"detail":"…"}`.
    ExistsMetablockReadError { detail: String },
    /// 8000 `{}`.
    WatchRequestInvalid,
    /// 8001 `{"requested_ms":r,"max_ms":m}`, then close.
    WatchLatencyTooHigh { requested_ms: u64, max_ms: u64 },
    /// 8002 `{"detail":"…"}`, then close.
    WatchReadIo { detail: String },
    /// 8003 `{"detail":"…"}`, then close.
    WatchReadSerialization { detail: String },
    /// 8004 `{"detail":"…"}`, then close.
    WatchReadOther { detail: String },
    /// 8005 `{"active_subscribers":a,"max_subscribers":m}`, then close.
    WatchTooManySubscribers {
        active_subscribers: u64,
        max_subscribers: u64,
    },
    /// 9000 `{}`.
    ShardRoutingNoKey,
    /// 9001 `{"num_shards":N}`.
    ShardRoutingMultipleShards { num_shards: u64 },
    /// 9002 `{"detail":"…","num_shards":N}`.
    ShardRoutingIncompatibleFilters { detail: String, num_shards: u64 },
    /// 10001 `{"detail":"Nonce expired or too far in the future"}`, then close.
    IdentifyInvalidNonce,
    /// 10002 `{"detail":"Invalid signature"}`, then close.
    IdentifyInvalidSignature,
    /// 10003 `{"detail":"client_id mismatch: request has X, connection verified as Y"}`.
    IdentifyMismatch {
        request_client_id: u128,
        verified_client_id: u128,
    },
    /// 10004 `{"detail":"Server requires client identity verification"}`, then close.
    IdentifyRequired,
    /// 10005 `{"detail":"API key required but not provided"}`, then close.
    AuthRequired,
    /// 10006 `{"detail":"Invalid API key…"}`, then close.
    AuthInvalidKey { reason: InvalidKeyReason },
    /// 10007 `{"detail":"Insufficient permissions for this operation"}`.
    AuthInsufficientPermissions,
    /// 11000 `{}`.
    ServerBusy,
}

fn with_detail(detail: Option<&str>) -> JsonObject {
    match detail {
        Some(d) => JsonObject::new().str("detail", d),
        None => JsonObject::new(),
    }
}

fn leader(address: Option<&str>) -> JsonObject {
    match address {
        Some(a) => JsonObject::new().str("leader_address", a),
        None => JsonObject::new(),
    }
}

fn occ(expected: u64, current: u64) -> JsonObject {
    JsonObject::new()
        .uint("expected_version", expected)
        .uint("current_aggregate_version", current)
}

fn seqs(last: u64, attempted: u64) -> JsonObject {
    JsonObject::new()
        .uint("last_client_seq", last)
        .uint("attempted_client_seq", attempted)
}

impl ServerError {
    /// 9002 for a Write with an empty `writes` map.
    pub fn empty_write(num_shards: u64) -> Self {
        Self::ShardRoutingIncompatibleFilters {
            detail: "Write request must contain at least one write operation.".to_owned(),
            num_shards,
        }
    }

    /// 9002 for a Delete with an empty `deletes` map.
    pub fn empty_delete(num_shards: u64) -> Self {
        Self::ShardRoutingIncompatibleFilters {
            detail: "Delete request must contain at least one delete operation.".to_owned(),
            num_shards,
        }
    }

    /// 9002 for a `shard_id` at or above the shard count (what ends the clients' shard
    /// discovery).
    pub fn invalid_shard_id(shard_id: u64, num_shards: u64) -> Self {
        Self::ShardRoutingIncompatibleFilters {
            detail: format!("Invalid shard_id {shard_id}. Must be less than {num_shards} (total number of shards)."),
            num_shards,
        }
    }

    /// 9002 for a watch without the id set the routing rule needs.
    pub fn watch_filter_required(field: RoutingField, num_shards: u64) -> Self {
        let detail = match field {
            RoutingField::Org => "Must specify at least one organisation. Server is setup to shard by organisation.",
            RoutingField::AggregateType => {
                "Must specify at least one aggregate type. Server is setup to shard by aggregate type."
            }
            RoutingField::Aggregate => "Must specify at least one aggregate. Server is setup to shard by aggregate.",
        };
        Self::ShardRoutingIncompatibleFilters {
            detail: detail.to_owned(),
            num_shards,
        }
    }

    /// The error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::ReadUnavailableVersion { .. } => ErrorCode::ReadUnavailableVersion,
            Self::ReadAggregateNotExists => ErrorCode::ReadAggregateNotExists,
            Self::ReadCacheLoadLockTimeout => ErrorCode::ReadCacheLoadLockTimeout,
            Self::ReadCacheLoadFileScan { .. } => ErrorCode::ReadCacheLoadFileScan,
            Self::ReadFetchDatablocks { .. } => ErrorCode::ReadFetchDatablocks,
            Self::ReadFetchMetablocks { .. } => ErrorCode::ReadFetchMetablocks,
            Self::WriteEmptyEventsList => ErrorCode::WriteEmptyEventsList,
            Self::WriteZeroEventType { .. } => ErrorCode::WriteZeroEventType,
            Self::WriteClientIdempotencyViolation { .. } => {
                ErrorCode::WriteClientIdempotencyViolation
            }
            Self::WriteOptimisticConcurrencyViolation { .. } => {
                ErrorCode::WriteOptimisticConcurrencyViolation
            }
            Self::WriteFailedToSerialiseDatablocks { .. } => {
                ErrorCode::WriteFailedToSerialiseDatablocks
            }
            Self::WriteAggregateNotExists => ErrorCode::WriteAggregateNotExists,
            Self::WriteAggregateRecreateNotAllowed => ErrorCode::WriteAggregateRecreateNotAllowed,
            Self::WriteReplicationError { .. } => ErrorCode::WriteReplicationError,
            Self::WriteFsyncError { .. } => ErrorCode::WriteFsyncError,
            Self::WriteCacheAggregateClientError { .. } => {
                ErrorCode::WriteCacheAggregateClientError
            }
            Self::WriteAggregateExistsCacheError { .. } => {
                ErrorCode::WriteAggregateExistsCacheError
            }
            Self::WriteNotLeader { .. } => ErrorCode::WriteNotLeader,
            Self::WriteReplicationBackpressure => ErrorCode::WriteReplicationBackpressure,
            Self::WriteInflightDuplicate { .. } => ErrorCode::WriteInflightDuplicate,
            Self::WriteMalformedGuardEntry => ErrorCode::WriteMalformedGuardEntry,
            Self::WriteConflictResponseTooLarge => ErrorCode::WriteConflictResponseTooLarge,
            Self::RegisterSchemaAlreadyExists { .. } => ErrorCode::RegisterSchemaAlreadyExists,
            Self::RegisterSchemaInvalid { .. } => ErrorCode::RegisterSchemaInvalid,
            Self::WriteSchemaValidationFailed { .. } => ErrorCode::WriteSchemaValidationFailed,
            Self::WriteSchemaCompilationFailed { .. } => ErrorCode::WriteSchemaCompilationFailed,
            Self::RegisterSchemaUnsupportedType { .. } => ErrorCode::RegisterSchemaUnsupportedType,
            Self::RegisterSchemaCacheLoadError { .. } => ErrorCode::RegisterSchemaCacheLoadError,
            Self::RegisterSchemaFsyncError { .. } => ErrorCode::RegisterSchemaFsyncError,
            Self::RegisterSchemaCannotAcceptWrites { .. } => {
                ErrorCode::RegisterSchemaCannotAcceptWrites
            }
            Self::RegisterSchemaReplicationError { .. } => {
                ErrorCode::RegisterSchemaReplicationError
            }
            Self::RegisterSchemaCoordinationFailed { .. } => {
                ErrorCode::RegisterSchemaCoordinationFailed
            }
            Self::TrimAggregateNotExists => ErrorCode::TrimAggregateNotExists,
            Self::TrimCacheError { .. } => ErrorCode::TrimCacheError,
            Self::TrimReplicationError { .. } => ErrorCode::TrimReplicationError,
            Self::TrimFsyncError { .. } => ErrorCode::TrimFsyncError,
            Self::TrimIndexOutOfRange { .. } => ErrorCode::TrimIndexOutOfRange,
            Self::TrimNotLeader { .. } => ErrorCode::TrimNotLeader,
            Self::TrimReplicationBackpressure => ErrorCode::TrimReplicationBackpressure,
            Self::DeleteAggregateNotExists => ErrorCode::DeleteAggregateNotExists,
            Self::DeleteEmptyDeleteList => ErrorCode::DeleteEmptyDeleteList,
            Self::DeleteOptimisticConcurrencyViolation { .. } => {
                ErrorCode::DeleteOptimisticConcurrencyViolation
            }
            Self::DeleteCacheError { .. } => ErrorCode::DeleteCacheError,
            Self::DeleteReplicationError { .. } => ErrorCode::DeleteReplicationError,
            Self::DeleteFsyncError { .. } => ErrorCode::DeleteFsyncError,
            Self::DeleteNotLeader { .. } => ErrorCode::DeleteNotLeader,
            Self::DeleteReplicationBackpressure => ErrorCode::DeleteReplicationBackpressure,
            Self::DeleteConflictResponseTooLarge => ErrorCode::DeleteConflictResponseTooLarge,
            Self::ListOrgsDiskRead { .. } => ErrorCode::ListOrgsDiskRead,
            Self::ListAggregateTypesDiskRead { .. } => ErrorCode::ListAggregateTypesDiskRead,
            Self::ListAggregatesDiskRead { .. } => ErrorCode::ListAggregatesDiskRead,
            Self::ReplicationBatchFsync { .. } => ErrorCode::ReplicationBatchFsync,
            Self::ReplicationBatchSerialiseDatablocks { .. } => {
                ErrorCode::ReplicationBatchSerialiseDatablocks
            }
            Self::ReplicationBatchWalSeqGap { .. } => ErrorCode::ReplicationBatchWalSeqGap,
            Self::ExistsCacheError { .. } => ErrorCode::ExistsCacheError,
            Self::ExistsAggregateNotExists => ErrorCode::ExistsAggregateNotExists,
            Self::ExistsMetablockReadError { .. } => ErrorCode::ExistsMetablockReadError,
            Self::WatchRequestInvalid => ErrorCode::WatchRequestInvalid,
            Self::WatchLatencyTooHigh { .. } => ErrorCode::WatchLatencyTooHigh,
            Self::WatchReadIo { .. } => ErrorCode::WatchReadIo,
            Self::WatchReadSerialization { .. } => ErrorCode::WatchReadSerialization,
            Self::WatchReadOther { .. } => ErrorCode::WatchReadOther,
            Self::WatchTooManySubscribers { .. } => ErrorCode::WatchTooManySubscribers,
            Self::ShardRoutingNoKey => ErrorCode::ShardRoutingNoKey,
            Self::ShardRoutingMultipleShards { .. } => ErrorCode::ShardRoutingMultipleShards,
            Self::ShardRoutingIncompatibleFilters { .. } => {
                ErrorCode::ShardRoutingIncompatibleFilters
            }
            Self::IdentifyInvalidNonce => ErrorCode::IdentifyInvalidNonce,
            Self::IdentifyInvalidSignature => ErrorCode::IdentifyInvalidSignature,
            Self::IdentifyMismatch { .. } => ErrorCode::IdentifyMismatch,
            Self::IdentifyRequired => ErrorCode::IdentifyRequired,
            Self::AuthRequired => ErrorCode::AuthRequired,
            Self::AuthInvalidKey { .. } => ErrorCode::AuthInvalidKey,
            Self::AuthInsufficientPermissions => ErrorCode::AuthInsufficientPermissions,
            Self::ServerBusy => ErrorCode::ServerBusy,
        }
    }

    /// Whether the connection stays open after sending this error.
    pub fn after_error(&self) -> AfterError {
        self.code().after_error()
    }

    /// The JSON context of the error.
    #[allow(clippy::too_many_lines)] // a flat table, one exhaustive match: no error goes without its context
    pub fn context(&self) -> JsonObject {
        let empty = JsonObject::new;
        let detail = |d: &str| JsonObject::new().str("detail", d);
        match self {
            Self::ReadUnavailableVersion {
                requested,
                minimum_available,
            } => JsonObject::new()
                .uint("requested", *requested)
                .uint("minimum_available", *minimum_available),
            Self::ReadAggregateNotExists
            | Self::ReadCacheLoadLockTimeout
            | Self::WriteEmptyEventsList
            | Self::WriteAggregateNotExists
            | Self::WriteAggregateRecreateNotAllowed
            | Self::WriteReplicationBackpressure
            | Self::TrimAggregateNotExists
            | Self::TrimReplicationBackpressure
            | Self::DeleteAggregateNotExists
            | Self::DeleteEmptyDeleteList
            | Self::DeleteReplicationBackpressure
            | Self::WriteMalformedGuardEntry
            | Self::WriteConflictResponseTooLarge
            | Self::DeleteConflictResponseTooLarge
            | Self::ExistsAggregateNotExists
            | Self::WatchRequestInvalid
            | Self::ShardRoutingNoKey
            | Self::ServerBusy => empty(),
            Self::ReadCacheLoadFileScan { detail: d }
            | Self::ReadFetchMetablocks { detail: d }
            | Self::WriteFailedToSerialiseDatablocks { detail: d }
            | Self::WriteReplicationError { detail: d }
            | Self::WriteFsyncError { detail: d }
            | Self::RegisterSchemaFsyncError { detail: d }
            | Self::RegisterSchemaReplicationError { detail: d }
            | Self::TrimReplicationError { detail: d }
            | Self::TrimFsyncError { detail: d }
            | Self::DeleteReplicationError { detail: d }
            | Self::DeleteFsyncError { detail: d }
            | Self::ListOrgsDiskRead { detail: d }
            | Self::ListAggregateTypesDiskRead { detail: d }
            | Self::ListAggregatesDiskRead { detail: d }
            | Self::ReplicationBatchFsync { detail: d }
            | Self::ReplicationBatchSerialiseDatablocks { detail: d }
            | Self::ExistsMetablockReadError { detail: d }
            | Self::WatchReadIo { detail: d }
            | Self::WatchReadSerialization { detail: d }
            | Self::WatchReadOther { detail: d } => detail(d),
            Self::ReadFetchDatablocks { detail: d }
            | Self::WriteCacheAggregateClientError { detail: d }
            | Self::WriteAggregateExistsCacheError { detail: d }
            | Self::RegisterSchemaCacheLoadError { detail: d }
            | Self::TrimCacheError { detail: d }
            | Self::DeleteCacheError { detail: d }
            | Self::ExistsCacheError { detail: d } => with_detail(d.as_deref()),
            Self::WriteZeroEventType { client_seq } => JsonObject::new().uint("client_seq", *client_seq),
            Self::WriteClientIdempotencyViolation {
                last_client_seq,
                attempted_client_seq,
            }
            | Self::WriteInflightDuplicate {
                last_client_seq,
                attempted_client_seq,
            } => seqs(*last_client_seq, *attempted_client_seq),
            Self::WriteOptimisticConcurrencyViolation {
                expected_version,
                current_aggregate_version,
                ..
            }
            | Self::DeleteOptimisticConcurrencyViolation {
                expected_version,
                current_aggregate_version,
                ..
            } => occ(*expected_version, *current_aggregate_version),
            Self::WriteNotLeader { leader_address }
            | Self::RegisterSchemaCannotAcceptWrites { leader_address }
            | Self::TrimNotLeader { leader_address }
            | Self::DeleteNotLeader { leader_address } => leader(leader_address.as_deref()),
            Self::RegisterSchemaAlreadyExists {
                event_type_major,
                event_type_minor,
            } => JsonObject::new()
                .uint("event_type_major", *event_type_major)
                .uint("event_type_minor", *event_type_minor),
            Self::RegisterSchemaInvalid { schema_type, parse_error } => JsonObject::new()
                .uint("schema_type", u64::from(*schema_type))
                .str("parse_error", parse_error.as_str()),
            Self::WriteSchemaValidationFailed {
                event_type_major,
                event_type_minor,
                client_seq,
                validation_error,
            } => JsonObject::new()
                .uint("event_type_major", *event_type_major)
                .uint("event_type_minor", *event_type_minor)
                .uint("client_seq", *client_seq)
                .str("validation_error", validation_error.as_str()),
            Self::WriteSchemaCompilationFailed {
                event_type_major,
                event_type_minor,
                client_seq,
                compilation_error,
            } => JsonObject::new()
                .uint("event_type_major", *event_type_major)
                .uint("event_type_minor", *event_type_minor)
                .uint("client_seq", *client_seq)
                .str("compilation_error", compilation_error.as_str()),
            Self::RegisterSchemaUnsupportedType { schema_type } => {
                JsonObject::new().uint("schema_type", u64::from(*schema_type))
            }
            Self::RegisterSchemaCoordinationFailed {
                failed_shard_count,
                total_shards,
            } => JsonObject::new()
                .uint("failed_shard_count", *failed_shard_count)
                .uint("total_shards", *total_shards),
            Self::TrimIndexOutOfRange {
                requested,
                max_aggregate_version,
            } => JsonObject::new()
                .uint("requested", *requested)
                .uint("max_aggregate_version", *max_aggregate_version),
            Self::ReplicationBatchWalSeqGap { index, expected, actual } => JsonObject::new()
                .uint("index", *index)
                .uint("expected", *expected)
                .uint("actual", *actual),
            Self::WatchLatencyTooHigh { requested_ms, max_ms } => JsonObject::new()
                .uint("requested_ms", *requested_ms)
                .uint("max_ms", *max_ms),
            Self::WatchTooManySubscribers {
                active_subscribers,
                max_subscribers,
            } => JsonObject::new()
                .uint("active_subscribers", *active_subscribers)
                .uint("max_subscribers", *max_subscribers),
            Self::ShardRoutingMultipleShards { num_shards } => JsonObject::new().uint("num_shards", *num_shards),
            Self::ShardRoutingIncompatibleFilters { detail: d, num_shards } => {
                JsonObject::new().str("detail", d.as_str()).uint("num_shards", *num_shards)
            }
            Self::IdentifyInvalidNonce => detail("Nonce expired or too far in the future"),
            Self::IdentifyInvalidSignature => detail("Invalid signature"),
            Self::IdentifyMismatch {
                request_client_id,
                verified_client_id,
            } => detail(&format!(
                "client_id mismatch: request has {request_client_id}, connection verified as {verified_client_id}"
            )),
            Self::IdentifyRequired => detail("Server requires client identity verification"),
            Self::AuthRequired => detail("API key required but not provided"),
            Self::AuthInvalidKey { reason } => detail(match reason {
                InvalidKeyReason::Format => "Invalid API key format",
                InvalidKeyReason::Length => "Invalid API key length",
                InvalidKeyReason::Unknown => "Invalid API key",
            }),
            Self::AuthInsufficientPermissions => detail("Insufficient permissions for this operation"),
        }
    }

    /// The `error_message`: the context as compact JSON within [`MAX_ERROR_MESSAGE_LEN`].
    pub fn message(&self) -> String {
        self.context().render(MAX_ERROR_MESSAGE_LEN)
    }

    /// The `ErrorResponse` answering a request with `correlation_id`.
    pub fn to_response(&self, correlation_id: Option<u128>) -> ErrorResponse {
        ErrorResponse {
            correlation_id,
            error_code: self.code().code(),
            error_message: self.message(),
        }
    }

    /// The OCC violation a typed conflict response stands for (the inverse of
    /// [`Self::conflict_answer`]): how a cluster member turns a leader's forwarded conflict back
    /// into the error its own client's version is answered with. `None` for other responses.
    pub fn from_conflict_response(response: &EventResponse) -> Option<Self> {
        let (conflicts, write) = match response {
            EventResponse::WriteConflict(r) => (&r.conflicts, true),
            EventResponse::DeleteConflict(r) => (&r.conflicts, false),
            _ => return None,
        };
        let first = conflicts.first();
        let expected_version = first.map_or(0, |c| c.expected);
        let current_aggregate_version = first.map_or(0, |c| c.current);
        let conflicts = conflicts.clone();
        Some(if write {
            Self::WriteOptimisticConcurrencyViolation {
                expected_version,
                current_aggregate_version,
                conflicts,
            }
        } else {
            Self::DeleteOptimisticConcurrencyViolation {
                expected_version,
                current_aggregate_version,
                conflicts,
            }
        })
    }

    /// What a version 4/5 connection (the 0.3.0 clients) is told instead of an OCC violation:
    /// the typed conflict response listing `conflicts` (13 for a write, 14 for a delete), or
    /// 2015/4008 when that body could exceed `max_body_len`. `None` for every other error,
    /// which is answered with its `ErrorResponse` as on versions 2/3 (the 0.3.0 client takes
    /// an `ErrorResponse` 2003/4002 for a protocol error and drops the connection).
    pub fn conflict_answer(
        &self,
        correlation_id: Option<u128>,
        max_body_len: u64,
    ) -> Option<Result<EventResponse, ServerError>> {
        let (conflicts, too_large) = match self {
            Self::WriteOptimisticConcurrencyViolation { conflicts, .. } => {
                (conflicts, Self::WriteConflictResponseTooLarge)
            }
            Self::DeleteOptimisticConcurrencyViolation { conflicts, .. } => {
                (conflicts, Self::DeleteConflictResponseTooLarge)
            }
            _ => return None,
        };
        let count = u64::try_from(conflicts.len()).unwrap_or(u64::MAX);
        if super::responses::conflict_response_body_bound(count) > max_body_len {
            return Some(Err(too_large));
        }
        let conflicts = conflicts.clone();
        Some(Ok(match self {
            Self::WriteOptimisticConcurrencyViolation { .. } => {
                EventResponse::WriteConflict(WriteConflictResponse {
                    correlation_id,
                    conflicts,
                })
            }
            _ => EventResponse::DeleteConflict(DeleteConflictResponse {
                correlation_id,
                conflicts,
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut previous = 0;
        for &code in ErrorCode::ALL {
            assert!(code.code() > previous, "ascending and unique");
            previous = code.code();
            assert_eq!(ErrorCode::from_code(code.code()), Some(code));
            assert!(code
                .name()
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_'));
        }
        // 71 of 0.2.0 and 2014, 2015, 4008 of 0.3.0.
        assert_eq!(ErrorCode::ALL.len(), 74);
        assert_eq!(
            ErrorCode::from_code(2014),
            Some(ErrorCode::WriteMalformedGuardEntry)
        );
        assert_eq!(
            ErrorCode::from_code(4008),
            Some(ErrorCode::DeleteConflictResponseTooLarge)
        );
        assert_eq!(ErrorCode::from_code(2016), None);
        assert_eq!(ErrorCode::from_code(4009), None);
        let closing: Vec<u32> = ErrorCode::ALL
            .iter()
            .filter(|c| c.after_error() == AfterError::Close)
            .map(|c| c.code())
            .collect();
        assert_eq!(
            closing,
            [8001, 8002, 8003, 8004, 8005, 10001, 10002, 10004, 10005, 10006]
        );
    }

    #[test]
    fn messages_have_the_exact_key_spellings() {
        let cases: Vec<(ServerError, u32, &str)> = vec![
            (
                ServerError::ReadUnavailableVersion {
                    requested: 1,
                    minimum_available: 3,
                },
                1000,
                r#"{"requested":1,"minimum_available":3}"#,
            ),
            (ServerError::ReadAggregateNotExists, 1001, "{}"),
            (
                ServerError::WriteZeroEventType { client_seq: 4 },
                2001,
                r#"{"client_seq":4}"#,
            ),
            (
                ServerError::WriteClientIdempotencyViolation {
                    last_client_seq: 5,
                    attempted_client_seq: 2,
                },
                2002,
                r#"{"last_client_seq":5,"attempted_client_seq":2}"#,
            ),
            (
                ServerError::WriteOptimisticConcurrencyViolation {
                    expected_version: 0,
                    current_aggregate_version: 1,
                    conflicts: Vec::new(),
                },
                2003,
                r#"{"expected_version":0,"current_aggregate_version":1}"#,
            ),
            (
                ServerError::WriteNotLeader {
                    leader_address: Some("10.0.0.2:10000".into()),
                },
                2011,
                r#"{"leader_address":"10.0.0.2:10000"}"#,
            ),
            (
                ServerError::WriteNotLeader {
                    leader_address: None,
                },
                2011,
                "{}",
            ),
            (
                ServerError::RegisterSchemaInvalid {
                    schema_type: 0,
                    parse_error: "Schema exceeds maximum size of 16384 bytes".into(),
                },
                2021,
                r#"{"schema_type":0,"parse_error":"Schema exceeds maximum size of 16384 bytes"}"#,
            ),
            (
                ServerError::RegisterSchemaUnsupportedType { schema_type: 9 },
                2024,
                r#"{"schema_type":9}"#,
            ),
            (
                ServerError::TrimIndexOutOfRange {
                    requested: 9,
                    max_aggregate_version: 5,
                },
                3004,
                r#"{"requested":9,"max_aggregate_version":5}"#,
            ),
            (
                ServerError::WatchLatencyTooHigh {
                    requested_ms: 5000,
                    max_ms: 2000,
                },
                8001,
                r#"{"requested_ms":5000,"max_ms":2000}"#,
            ),
            (
                ServerError::WatchTooManySubscribers {
                    active_subscribers: 3,
                    max_subscribers: 3,
                },
                8005,
                r#"{"active_subscribers":3,"max_subscribers":3}"#,
            ),
            (
                ServerError::ShardRoutingMultipleShards { num_shards: 4 },
                9001,
                r#"{"num_shards":4}"#,
            ),
            (
                ServerError::invalid_shard_id(4, 4),
                9002,
                r#"{"detail":"Invalid shard_id 4. Must be less than 4 (total number of shards).","num_shards":4}"#,
            ),
            (
                ServerError::empty_write(2),
                9002,
                r#"{"detail":"Write request must contain at least one write operation.","num_shards":2}"#,
            ),
            (
                ServerError::IdentifyMismatch {
                    request_client_id: 7,
                    verified_client_id: 9,
                },
                10003,
                r#"{"detail":"client_id mismatch: request has 7, connection verified as 9"}"#,
            ),
            (
                ServerError::AuthInvalidKey {
                    reason: InvalidKeyReason::Length,
                },
                10006,
                r#"{"detail":"Invalid API key length"}"#,
            ),
            (ServerError::ServerBusy, 11000, "{}"),
        ];
        for (error, code, json) in cases {
            assert_eq!(error.code().code(), code);
            assert_eq!(error.message(), json);
            let response = error.to_response(Some(42));
            assert_eq!(response.correlation_id, Some(42));
            assert_eq!(response.error_code, code);
        }
    }

    #[test]
    fn hand_built_contexts_use_the_same_rules() {
        let response = ErrorCode::WriteFsyncError.response(
            Some(3),
            &JsonObject::new()
                .uint("divergent_wal_seq", 9)
                .uint("barrier", 4),
        );
        assert_eq!(response.error_code, 2008);
        assert_eq!(
            response.error_message,
            r#"{"divergent_wal_seq":9,"barrier":4}"#
        );
        let long = ErrorCode::ReadFetchDatablocks
            .response(None, &JsonObject::new().str("detail", "z".repeat(5000)));
        assert!(long.error_message.len() <= MAX_ERROR_MESSAGE_LEN);
    }

    #[test]
    fn long_messages_are_truncated_into_valid_json() {
        let error = ServerError::WriteSchemaValidationFailed {
            event_type_major: 3,
            event_type_minor: 1,
            client_seq: 77,
            validation_error: "\"bad\" ✗ ".repeat(2000),
        };
        let message = error.message();
        assert!(message.len() <= MAX_ERROR_MESSAGE_LEN);
        let parsed: serde_json::Value = serde_json::from_str(&message).unwrap();
        assert_eq!(parsed["client_seq"], 77);
        assert_eq!(parsed["event_type_major"], 3);
    }

    #[test]
    fn substring_parsers_of_the_client_find_their_values() {
        let message = ServerError::ShardRoutingIncompatibleFilters {
            detail: "x".repeat(5000),
            num_shards: 12,
        }
        .message();
        let at = message.find("\"num_shards\":").unwrap() + "\"num_shards\":".len();
        let digits: String = message[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        assert_eq!(digits, "12");
        let message = ServerError::TrimNotLeader {
            leader_address: Some("node-b:10000".into()),
        }
        .message();
        assert!(message.contains("\"leader_address\":\"node-b:10000\""));
    }

    #[test]
    fn only_occ_violations_become_typed_conflicts_and_they_respect_the_limit() {
        let key = crate::event::AggregateKey {
            org_id: 1,
            aggregate_type_id: 2,
            aggregate_id: 3,
        };
        let conflicts = vec![AggregateConflict {
            key,
            expected: 4,
            current: 7,
        }];
        let write = ServerError::WriteOptimisticConcurrencyViolation {
            expected_version: 4,
            current_aggregate_version: 7,
            conflicts: conflicts.clone(),
        };
        assert_eq!(
            write.conflict_answer(Some(9), 1 << 20),
            Some(Ok(EventResponse::WriteConflict(WriteConflictResponse {
                correlation_id: Some(9),
                conflicts: conflicts.clone(),
            })))
        );
        let delete = ServerError::DeleteOptimisticConcurrencyViolation {
            expected_version: 4,
            current_aggregate_version: 7,
            conflicts,
        };
        assert!(matches!(
            delete.conflict_answer(None, 1 << 20),
            Some(Ok(EventResponse::DeleteConflict(_)))
        ));
        assert_eq!(
            write.conflict_answer(None, 98),
            Some(Err(ServerError::WriteConflictResponseTooLarge))
        );
        assert_eq!(
            delete.conflict_answer(None, 98),
            Some(Err(ServerError::DeleteConflictResponseTooLarge))
        );
        assert_eq!(
            write.conflict_answer(None, 99).map(|r| r.is_ok()),
            Some(true)
        );
        assert_eq!(
            ServerError::WriteEmptyEventsList.conflict_answer(None, 1 << 20),
            None
        );
        // A forwarded conflict comes back as the same error.
        for e in [&write, &delete] {
            let Some(Ok(typed)) = e.conflict_answer(None, 1 << 20) else {
                panic!("typed")
            };
            assert_eq!(
                ServerError::from_conflict_response(&typed).as_ref(),
                Some(e)
            );
        }
        // The JSON of versions 2/3 does not change.
        assert_eq!(
            write.message(),
            r#"{"expected_version":4,"current_aggregate_version":7}"#
        );
    }
}
