//! Execution of routed, admitted requests on the event store, and the mapping of its refusals
//! to the protocol's error codes (§5.2).
//!
//! Every mutation is acknowledged only when the store's completion resolves, i.e. after the
//! record is fdatasynced and visible (§4.12); its refusals mean nothing was written. Reads,
//! details and listings see committed data only, and run on the blocking pool because a cold
//! index block or log segment is read from disk.
//!
//! A storage failure (as opposed to a refusal) reaches the client as its request type's code
//! with a generic text and a log reference ([`detail`]): paths and OS error texts stay in the
//! server log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use eddy_codec::event as wire;
use eddy_codec::event::{EventRequest, EventResponse, ServerError};
use eddy_storage::events as st;
use eddy_storage::{Completion, EventError, EventStore, StorageError};

use super::schema;
use super::EventService;

pub(super) fn key(k: &wire::AggregateKey) -> st::AggregateKey {
    st::AggregateKey::new(k.org_id, k.aggregate_type_id, k.aggregate_id)
}

fn chain(e: &StorageError) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Numbers the storage failures logged by [`detail`], so a client's error names its log line.
static FAILURE_REFERENCE: AtomicU64 = AtomicU64::new(1);

/// What a client is told about a storage failure. A refusal (the request's own fault, its text
/// names no file) is described in full; anything else (an I/O error, corruption, a fail-stopped
/// log, a full disk) would hand storage paths and operating-system texts to a client that may
/// not even be identified, so it is logged here with its whole cause chain and the client gets
/// a generic text carrying the reference of that log line.
pub(super) fn detail(e: &StorageError) -> String {
    match e {
        StorageError::Event(_) | StorageError::LimitExceeded { .. } => chain(e),
        StorageError::Shutdown => "the server is shutting down".to_owned(),
        _ => {
            let reference = FAILURE_REFERENCE.fetch_add(1, Ordering::Relaxed);
            tracing::error!(reference, error = %chain(e), "event store failure");
            format!("internal storage error (server log reference {reference})")
        }
    }
}

fn event_error(e: &StorageError) -> Option<&EventError> {
    match e {
        StorageError::Event(ev) => Some(ev),
        _ => None,
    }
}

/// Routing refusals the store may still raise (the server routes first, so these are only
/// reached if the layouts ever disagreed).
fn routing(e: &EventError) -> Option<ServerError> {
    match e {
        EventError::CrossShard { num_shards } => Some(ServerError::ShardRoutingMultipleShards {
            num_shards: u64::from(*num_shards),
        }),
        EventError::NoSuchShard { shard, num_shards } => Some(ServerError::invalid_shard_id(
            *shard,
            u64::from(*num_shards),
        )),
        _ => None,
    }
}

fn write_error(e: &StorageError, num_shards: u64) -> ServerError {
    let Some(ev) = event_error(e) else {
        return ServerError::WriteFsyncError { detail: detail(e) };
    };
    if let Some(r) = routing(ev) {
        return r;
    }
    match ev {
        EventError::EmptyRequest => ServerError::empty_write(num_shards),
        EventError::EmptyEvents { .. } => ServerError::WriteEmptyEventsList,
        EventError::ZeroEventType { client_seq, .. } => ServerError::WriteZeroEventType {
            client_seq: *client_seq,
        },
        EventError::NotFound { .. } => ServerError::WriteAggregateNotExists,
        EventError::RecreateNotAllowed { .. } | EventError::Deleted { .. } => {
            ServerError::WriteAggregateRecreateNotAllowed
        }
        EventError::VersionConflict {
            expected, current, ..
        } => ServerError::WriteOptimisticConcurrencyViolation {
            expected_version: *expected,
            current_aggregate_version: *current,
        },
        EventError::Duplicate {
            last_client_seq,
            attempted_client_seq,
            ..
        } => ServerError::WriteClientIdempotencyViolation {
            last_client_seq: *last_client_seq,
            attempted_client_seq: *attempted_client_seq,
        },
        EventError::InFlightDuplicate {
            last_client_seq,
            attempted_client_seq,
            ..
        } => ServerError::WriteInflightDuplicate {
            last_client_seq: *last_client_seq,
            attempted_client_seq: *attempted_client_seq,
        },
        other => ServerError::WriteFailedToSerialiseDatablocks {
            detail: other.to_string(),
        },
    }
}

fn read_error(e: &StorageError) -> ServerError {
    match event_error(e) {
        Some(EventError::NotFound { .. } | EventError::Deleted { .. }) => {
            ServerError::ReadAggregateNotExists
        }
        Some(EventError::Trimmed {
            requested,
            minimum_available,
        }) => ServerError::ReadUnavailableVersion {
            requested: *requested,
            minimum_available: *minimum_available,
        },
        Some(ev) if routing(ev).is_some() => routing(ev).unwrap_or(ServerError::ShardRoutingNoKey),
        _ => ServerError::ReadFetchDatablocks {
            detail: Some(detail(e)),
        },
    }
}

fn details_error(e: &StorageError) -> ServerError {
    match event_error(e) {
        Some(EventError::NotFound { .. }) => ServerError::ExistsAggregateNotExists,
        _ => ServerError::ExistsMetablockReadError { detail: detail(e) },
    }
}

fn trim_error(e: &StorageError) -> ServerError {
    match event_error(e) {
        Some(EventError::NotFound { .. } | EventError::Deleted { .. }) => {
            ServerError::TrimAggregateNotExists
        }
        Some(EventError::TrimOutOfRange {
            requested,
            max_aggregate_version,
        }) => ServerError::TrimIndexOutOfRange {
            requested: *requested,
            max_aggregate_version: *max_aggregate_version,
        },
        _ => ServerError::TrimFsyncError { detail: detail(e) },
    }
}

fn delete_error(e: &StorageError, num_shards: u64) -> ServerError {
    match event_error(e) {
        Some(EventError::NotFound { .. } | EventError::Deleted { .. }) => {
            ServerError::DeleteAggregateNotExists
        }
        Some(EventError::VersionConflict {
            expected, current, ..
        }) => ServerError::DeleteOptimisticConcurrencyViolation {
            expected_version: *expected,
            current_aggregate_version: *current,
        },
        Some(EventError::EmptyRequest) => ServerError::empty_delete(num_shards),
        Some(ev) if routing(ev).is_some() => routing(ev).unwrap_or(ServerError::ShardRoutingNoKey),
        _ => ServerError::DeleteFsyncError { detail: detail(e) },
    }
}

fn list_error(kind: wire_list::Kind, e: &StorageError) -> ServerError {
    if let Some(r) = event_error(e).and_then(routing) {
        return r;
    }
    let detail = detail(e);
    match kind {
        wire_list::Kind::Orgs => ServerError::ListOrgsDiskRead { detail },
        wire_list::Kind::Types => ServerError::ListAggregateTypesDiskRead { detail },
        wire_list::Kind::Aggregates => ServerError::ListAggregatesDiskRead { detail },
    }
}

mod wire_list {
    /// Which list a failure belongs to.
    #[derive(Debug, Clone, Copy)]
    pub(super) enum Kind {
        Orgs,
        Types,
        Aggregates,
    }
}

// Synchronous store work runs off the reactor (a cold index block or segment is a disk read).
use crate::offload::blocking;

fn stored_event(e: st::StoredEvent) -> wire::Event {
    wire::Event {
        client_seq: e.client_seq,
        event_seq: e.event_seq,
        event_id: e.event_id,
        event_timestamp: e.event_timestamp,
        event_type_major: e.event_type_major,
        event_type_minor: e.event_type_minor,
        event_value: e.value,
        iv: e.iv,
    }
}

fn read_query(f: wire::ReadFilters, max_bytes: u64) -> st::ReadQuery {
    st::ReadQuery {
        from_version: f.from_aggregate_version,
        to_version: f.to_aggregate_version,
        include_event_types: f.include_event_types,
        exclude_client_id: f.exclude_client_id,
        include_client_id: f.include_client_id,
        exclude_user_id: f.exclude_user_id,
        include_user_id: f.include_user_id,
        min_server_timestamp: f.min_server_timestamp,
        max_server_timestamp: f.max_server_timestamp,
        min_client_seq: f.min_client_seq,
        max_client_seq: f.max_client_seq,
        min_event_timestamp: f.min_event_timestamp,
        max_event_timestamp: f.max_event_timestamp,
        min_event_seq: f.min_event_seq,
        max_event_seq: f.max_event_seq,
        max_batches: eddy_storage::events::DEFAULT_READ_MAX_BATCHES,
        max_bytes,
    }
}

/// The schema keys of a write's unencrypted events, with what a 2022 answer names for each.
fn schema_checks(w: &wire::WriteRequest) -> Vec<(st::SchemaKey, (u64, u64, u64))> {
    w.writes
        .iter()
        .flat_map(|(k, part)| {
            part.events.iter().filter(|e| e.iv.is_none()).map(|e| {
                (
                    st::SchemaKey {
                        org_id: k.org_id,
                        aggregate_type_id: k.aggregate_type_id,
                        event_type_major: e.event_type_major,
                        event_type_minor: e.event_type_minor,
                    },
                    (e.event_type_major, e.event_type_minor, e.client_seq),
                )
            })
        })
        .collect()
}

/// Validates every unencrypted event of a write against its registered schema (2022/2023).
/// CPU-bound: runs on the blocking pool.
fn validate_schemas(svc: &EventService, w: &wire::WriteRequest) -> Result<(), ServerError> {
    for (k, part) in &w.writes {
        for e in part.events.iter().filter(|e| e.iv.is_none()) {
            let skey = st::SchemaKey {
                org_id: k.org_id,
                aggregate_type_id: k.aggregate_type_id,
                event_type_major: e.event_type_major,
                event_type_minor: e.event_type_minor,
            };
            let found = svc.schemas.lookup(&svc.store, &skey).map_err(|err| {
                ServerError::WriteCacheAggregateClientError {
                    detail: Some(detail(&err)),
                }
            })?;
            match found {
                Ok(None) => {}
                Ok(Some(compiled)) => compiled.validate(&e.event_value).map_err(|msg| {
                    ServerError::WriteSchemaValidationFailed {
                        event_type_major: e.event_type_major,
                        event_type_minor: e.event_type_minor,
                        client_seq: e.client_seq,
                        validation_error: msg,
                    }
                })?,
                Err(msg) => {
                    return Err(ServerError::WriteSchemaCompilationFailed {
                        event_type_major: e.event_type_major,
                        event_type_minor: e.event_type_minor,
                        client_seq: e.client_seq,
                        compilation_error: msg,
                    })
                }
            }
        }
    }
    Ok(())
}

/// Schema validation of a write, off the reactor and within the validation deadline; the
/// write comes back when it passes. Skipped when every key is known to have no schema.
async fn validated(
    svc: &Arc<EventService>,
    w: wire::WriteRequest,
) -> Result<wire::WriteRequest, ServerError> {
    let checks = schema_checks(&w);
    let Some(&(_, (major, minor, client_seq))) = checks.first() else {
        return Ok(w);
    };
    if svc.schemas.known_absent(checks.iter().map(|(k, _)| k)) {
        return Ok(w);
    }
    let service = Arc::clone(svc);
    let outcome = svc
        .schemas
        .bounded(move || {
            let result = validate_schemas(&service, &w);
            (w, result)
        })
        .await;
    match outcome {
        Ok((w, Ok(()))) => Ok(w),
        Ok((_, Err(e))) => Err(e),
        Err(unfinished) => Err(ServerError::WriteSchemaValidationFailed {
            event_type_major: major,
            event_type_minor: minor,
            client_seq,
            validation_error: unfinished.text(),
        }),
    }
}

async fn write(
    svc: &Arc<EventService>,
    w: wire::WriteRequest,
) -> Result<EventResponse, ServerError> {
    let n = u64::from(svc.placement.num_shards());
    // Input checks come before per-aggregate ones (§4.3 step 4), schema validation last; the
    // store repeats the input checks, so only the schema pass is done here first when needed.
    for part in w.writes.values() {
        if part.events.is_empty() {
            return Err(ServerError::WriteEmptyEventsList);
        }
        if let Some(e) = part.events.iter().find(|e| e.event_type_major == 0) {
            return Err(ServerError::WriteZeroEventType {
                client_seq: e.client_seq,
            });
        }
    }
    let w = validated(svc, w).await?;
    let correlation_id = w.correlation_id;
    let request = st::WriteRequest {
        client_id: w.client_id,
        user_id: w.user_id,
        now: super::conn::now_millis(),
        writes: w
            .writes
            .into_iter()
            .map(|(k, part)| st::AggregateWrite {
                key: key(&k),
                events: part
                    .events
                    .into_iter()
                    .map(|e| st::NewEvent {
                        client_seq: e.client_seq,
                        event_id: e.event_id,
                        event_timestamp: e.event_timestamp,
                        event_type_major: e.event_type_major,
                        event_type_minor: e.event_type_minor,
                        value: e.event_value,
                        iv: e.iv,
                    })
                    .collect(),
                allow_create: part.allow_create,
                expected_version: part.expected_version,
                enforce_client_idempotency: part.enforce_client_idempotency,
            })
            .collect(),
    };
    let bytes = request
        .writes
        .iter()
        .flat_map(|w| w.events.iter())
        .map(|e| e.value.len() as u64)
        .sum();
    let outcome = submit(svc, bytes, move |store| store.write(request))
        .await
        .map_err(|e| write_error(&e, n))?;
    Ok(EventResponse::Write(wire::WriteResponse {
        correlation_id,
        max_aggregate_version: outcome.max_aggregate_version(),
    }))
}

async fn register_schema(
    svc: &Arc<EventService>,
    r: wire::RegisterSchemaRequest,
) -> Result<EventResponse, ServerError> {
    if wire::SchemaType::from_u8(r.schema_type).is_none() {
        return Err(ServerError::RegisterSchemaUnsupportedType {
            schema_type: r.schema_type,
        });
    }
    if r.schema.len() > svc.max_schema_size {
        return Err(schema::invalid(
            r.schema_type,
            format!(
                "Schema exceeds maximum size of {} bytes",
                svc.max_schema_size
            ),
        ));
    }
    // Compiling may compile regexes and descriptors: off the reactor, within the deadline.
    let (schema_type, text) = (r.schema_type, r.schema);
    let (text, compiled) = svc
        .schemas
        .bounded(move || {
            let compiled = schema::compile(schema_type, &text);
            (text, compiled)
        })
        .await
        .map_err(|unfinished| schema::invalid(schema_type, unfinished.text()))?;
    let compiled = compiled.map_err(|e| schema::invalid(schema_type, e))?;
    let skey = st::SchemaKey {
        org_id: r.schema_key.org_id,
        aggregate_type_id: r.schema_key.aggregate_type_id,
        event_type_major: r.schema_key.event_type_major,
        event_type_minor: r.schema_key.event_type_minor,
    };
    let registration = st::SchemaRegistration {
        key: skey,
        schema_type,
        schema: text,
        client_id: r.client_id,
        user_id: r.user_id,
        now: super::conn::now_millis(),
    };
    match svc.store.register_schema(registration).await {
        Ok(()) => {
            svc.schemas.insert(skey, Some(Arc::new(compiled)));
            Ok(EventResponse::RegisterSchema(
                wire::RegisterSchemaResponse {
                    correlation_id: r.correlation_id,
                },
            ))
        }
        Err(e) => Err(match event_error(&e) {
            Some(EventError::SchemaExists {
                event_type_major,
                event_type_minor,
            }) => ServerError::RegisterSchemaAlreadyExists {
                event_type_major: *event_type_major,
                event_type_minor: *event_type_minor,
            },
            Some(EventError::Limit { .. }) => schema::invalid(schema_type, detail(&e)),
            _ => ServerError::RegisterSchemaFsyncError { detail: detail(&e) },
        }),
    }
}

/// Submits a mutation of `bytes` payload bytes and awaits its completion. The submission runs
/// inline unless this server has enough bytes in flight that a shard log may push back; then
/// it runs on the blocking pool (see `crate::offload`).
async fn submit<T: Send + 'static>(
    svc: &EventService,
    bytes: u64,
    mutation: impl FnOnce(&EventStore) -> Completion<T> + Send + 'static,
) -> Result<T, StorageError> {
    let (_in_flight, offload) = svc.in_flight.enter(bytes);
    let completion = if offload {
        let store = Arc::clone(&svc.store);
        blocking(move || mutation(store.as_ref())).await
    } else {
        mutation(svc.store.as_ref())
    };
    completion.await
}

/// Executes one request (not Identify, not Watch) on `shard`.
pub(super) async fn execute(
    svc: &Arc<EventService>,
    shard: u32,
    request: EventRequest,
) -> Result<EventResponse, ServerError> {
    let num_shards = u64::from(svc.placement.num_shards());
    match request {
        EventRequest::AggregateDetails(r) => {
            let svc2 = Arc::clone(svc);
            let k = key(&r.aggregate_key);
            let found = blocking(move || svc2.store.details(&k))
                .await
                .map_err(|e| details_error(&e))?;
            let d = found;
            Ok(EventResponse::AggregateDetails(
                wire::AggregateDetailsResponse {
                    correlation_id: r.correlation_id,
                    min_aggregate_version: d.min_aggregate_version,
                    max_aggregate_version: d.max_aggregate_version,
                    max_event_seq: d.max_event_seq,
                    is_deleted: d.is_deleted,
                    allow_recreate: d.allow_recreate,
                    allow_sequence_continuation: d.allow_sequence_continuation,
                    last_server_timestamp: d.last_server_timestamp,
                    last_client_id: d.last_client_id,
                    last_user_id: d.last_user_id,
                },
            ))
        }
        EventRequest::Read(r) => {
            let svc2 = Arc::clone(svc);
            let k = key(&r.aggregate_key);
            let query = read_query(r.filters, svc.read_page_bytes);
            let page = blocking(move || svc2.store.read(&k, &query))
                .await
                .map_err(|e| read_error(&e))?;
            Ok(EventResponse::Read(wire::ReadResponse {
                correlation_id: r.correlation_id,
                event_batches: page
                    .batches
                    .into_iter()
                    .map(|b| wire::AggregateEventBatch {
                        aggregate_version: b.version,
                        client_id: b.client_id,
                        user_id: b.user_id,
                        server_timestamp: b.server_timestamp,
                        events: b.events.into_iter().map(stored_event).collect(),
                    })
                    .collect(),
                next_aggregate_version: page.next_version,
            }))
        }
        EventRequest::Write(w) => write(svc, w).await,
        EventRequest::TrimStart(r) => {
            let request = st::TrimRequest {
                key: key(&r.aggregate_key),
                keep_from_version: r.keep_from_aggregate_version,
                client_id: r.client_id,
                user_id: r.user_id,
                now: super::conn::now_millis(),
            };
            submit(svc, 0, move |store| store.trim(request))
                .await
                .map_err(|e| trim_error(&e))?;
            Ok(EventResponse::TrimStart(wire::TrimStartResponse {
                correlation_id: r.correlation_id,
            }))
        }
        EventRequest::Delete(r) => {
            let request = st::DeleteRequest {
                client_id: r.client_id,
                user_id: r.user_id,
                now: super::conn::now_millis(),
                deletes: r
                    .deletes
                    .iter()
                    .map(|(k, d)| st::AggregateDelete {
                        key: key(k),
                        allow_recreate: d.allow_recreate,
                        allow_sequence_continuation: d.allow_sequence_continuation,
                        expected_version: d.expected_version,
                    })
                    .collect(),
            };
            submit(svc, 0, move |store| store.delete(&request))
                .await
                .map_err(|e| delete_error(&e, num_shards))?;
            Ok(EventResponse::Delete(wire::DeleteResponse {
                correlation_id: r.correlation_id,
            }))
        }
        EventRequest::ListOrgs(r) => {
            let svc2 = Arc::clone(svc);
            let page = blocking(move || {
                svc2.store
                    .list_orgs(u64::from(shard), r.cursor, svc2.list_page)
            })
            .await
            .map_err(|e| list_error(wire_list::Kind::Orgs, &e))?;
            Ok(EventResponse::ListOrgs(wire::ListOrgsResponse {
                correlation_id: r.correlation_id,
                orgs: page
                    .items
                    .into_iter()
                    .map(|org_id| wire::OrgListItem { org_id })
                    .collect(),
                next_cursor: page.next_cursor,
            }))
        }
        EventRequest::ListAggregateTypes(r) => {
            let svc2 = Arc::clone(svc);
            let page = blocking(move || {
                svc2.store.list_aggregate_types(
                    u64::from(shard),
                    r.org_id,
                    r.cursor,
                    svc2.list_page,
                )
            })
            .await
            .map_err(|e| list_error(wire_list::Kind::Types, &e))?;
            Ok(EventResponse::ListAggregateTypes(
                wire::ListAggregateTypesResponse {
                    correlation_id: r.correlation_id,
                    aggregate_types: page
                        .items
                        .into_iter()
                        .map(|t| wire::AggregateTypeListItem {
                            org_id: t.org_id,
                            aggregate_type_id: t.aggregate_type_id,
                        })
                        .collect(),
                    next_cursor: page.next_cursor,
                },
            ))
        }
        EventRequest::ListAggregates(r) => {
            let svc2 = Arc::clone(svc);
            let page = blocking(move || {
                svc2.store.list_aggregates(
                    u64::from(shard),
                    r.org_id,
                    r.aggregate_type_id,
                    r.cursor,
                    svc2.list_page,
                )
            })
            .await
            .map_err(|e| list_error(wire_list::Kind::Aggregates, &e))?;
            Ok(EventResponse::ListAggregates(
                wire::ListAggregatesResponse {
                    correlation_id: r.correlation_id,
                    aggregates: page
                        .items
                        .into_iter()
                        .map(|a| wire::AggregateListItem {
                            is_deleted: a.is_deleted,
                            org_id: a.key.org_id,
                            aggregate_type_id: a.key.aggregate_type_id,
                            aggregate_id: a.key.aggregate_id,
                            event_batch_count: a.event_batch_count,
                            min_event_timestamp: a.min_event_timestamp,
                            max_event_timestamp: a.max_event_timestamp,
                            min_aggregate_version: a.min_aggregate_version,
                            max_aggregate_version: a.max_aggregate_version,
                            min_event_seq: a.min_event_seq,
                            max_event_seq: a.max_event_seq,
                            min_server_timestamp: a.min_server_timestamp,
                            max_server_timestamp: a.max_server_timestamp,
                            compressed_size: a.compressed_size,
                            uncompressed_size: a.uncompressed_size,
                        })
                        .collect(),
                    next_cursor: page.next_cursor,
                },
            ))
        }
        EventRequest::RegisterSchema(r) => register_schema(svc, r).await,
        EventRequest::Watch(_) | EventRequest::Identify(_) => {
            // Both take over the connection and are handled before execution.
            Err(ServerError::WatchRequestInvalid)
        }
    }
}
