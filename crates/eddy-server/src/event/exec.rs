//! Execution of routed, admitted requests on the event store (their refusals become codes in
//! `errors`).
//!
//! Every mutation is acknowledged only when the store's completion resolves, i.e. after the
//! record is fdatasynced and visible (§4.12); its refusals mean nothing was written. Reads,
//! details and listings see committed data only, and run on the blocking pool because a cold
//! index block or log segment is read from disk. Mutations are submitted inline while this
//! server's bytes in flight stay low, from the blocking pool past that (`crate::offload`); a
//! write with schema work to do and every registration are submitted from the blocking pool,
//! because the store waits for its schema threads (at most its validation deadline).

use std::sync::Arc;

use eddy_codec::event as codec;
use eddy_codec::event::{EventRequest, EventResponse, ServerError};
use eddy_event_store as st;
use eddy_event_store::{EventStore, EventStoreError};
use eddy_log::Completion;
use eddy_wire::event::RequestType;

use super::EventService;
use eddy_replicated::event::change::{
    cluster_error, key, respond, store_error, Change, ChangeKind, StoreChange,
};
use eddy_replicated::event::errors::{details_error, list_error, read_error};
use eddy_replicated::shard::EventClusterError;
// Synchronous store work runs off the reactor (a cold index block or segment is a disk read).
use crate::offload::blocking;

fn stored_event(e: st::StoredEvent) -> codec::Event {
    codec::Event {
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

fn read_query(f: codec::ReadFilters, max_bytes: u64) -> st::ReadQuery {
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
        max_batches: st::DEFAULT_READ_MAX_BATCHES,
        max_bytes,
    }
}

/// A change (write, trim, delete, schema registration): converted, then handed to the store,
/// which runs the whole check order (§4.3: routing, input checks, schema validation,
/// per-aggregate checks) and answers once; on a cluster member prepared here and proposed to
/// its shard's group, whose apply answers. A change with schema work to do is prepared or
/// submitted from the blocking pool (the store waits for its schema threads).
async fn apply_change(svc: &EventService, change: Change) -> Result<EventResponse, ServerError> {
    let placement = *svc.store.placement();
    let (kind, correlation_id) = (change.kind(), change.correlation_id());
    let may_wait = change.may_wait(&svc.store);
    let outcome = if let Some(cluster) = svc.cluster() {
        let cluster = cluster.map_err(|e| cluster_error(kind, e, placement))?;
        let prepared = if may_wait {
            let store = Arc::clone(&svc.store);
            blocking(move || change.prepare(&store)).await
        } else {
            change.prepare(&svc.store)
        }?;
        // A `NotLeader`, here or from the member the change was forwarded to, means nothing
        // was proposed: while leadership moves (a transfer, an election) the change is tried
        // again, on whichever member leads then, for a bounded time.
        // Both protocols' forwarding wait the same: see `cluster::streams::FORWARD_PATIENCE`.
        let patience = tokio::time::Instant::now() + crate::cluster::streams::FORWARD_PATIENCE;
        let submitted = loop {
            let submitted = cluster.submit(prepared.shard, &prepared.command).await;
            let Err(EventClusterError::NotLeader { .. }) = &submitted else {
                break submitted;
            };
            // Another member leads the shard: it takes the change from here, so a client
            // connected to any member is served (the published client's bare connection
            // does not follow redirects).
            match cluster
                .forward(prepared.shard, correlation_id, &prepared.command)
                .await
            {
                // A conflict comes back typed; the connection answers it in its version.
                Ok(response) => {
                    return match ServerError::from_conflict_response(&response) {
                        Some(conflict) => Err(conflict),
                        None => Ok(response),
                    }
                }
                Err(EventClusterError::NotLeader { .. })
                    if tokio::time::Instant::now() < patience =>
                {
                    tokio::time::sleep(crate::cluster::streams::FORWARD_RETRY).await;
                }
                // The client gets the redirect; the operator sees why it was not served here.
                Err(e) => {
                    tracing::warn!(shard = prepared.shard, error = %e, "a change could not be forwarded to its shard's leader; answered with a redirect");
                    break submitted;
                }
            }
        };
        submitted.map_err(|e| cluster_error(kind, e, placement))
    } else {
        let bytes = change.payload_bytes();
        match change.request {
            StoreChange::Write(r) => submit(svc, bytes, may_wait, move |store| store.write(r))
                .await
                .map(st::replicated::Applied::Write),
            StoreChange::Trim(r) => submit(svc, 0, false, move |store| store.trim(r))
                .await
                .map(st::replicated::Applied::Trim),
            StoreChange::Delete(r) => submit(svc, 0, false, move |store| store.delete(&r))
                .await
                .map(st::replicated::Applied::Delete),
            StoreChange::Schema(r) => submit(svc, 0, true, move |store| store.register_schema(r))
                .await
                .map(|()| st::replicated::Applied::Schema),
        }
        .map_err(|e| store_error(kind, &e, placement))
    };
    respond(kind, correlation_id, outcome)
}

/// Answers a change another member forwarded to this one as its shard's leader: proposes
/// the command that member prepared (never forwarding it again) and encodes the client's
/// response, success or refusal.
pub(crate) async fn answer_forwarded(
    svc: Arc<EventService>,
    request: bytes::Bytes,
) -> bytes::Bytes {
    use crate::cluster::events::{
        decode_forward, encode_forward_answer, forward_not_leader, forward_refusal,
    };
    let Some((shard, correlation_id, command)) = decode_forward(&request) else {
        return forward_refusal("not a forwarded change");
    };
    let Some(Ok(cluster)) = svc.cluster() else {
        return forward_refusal("not a running cluster member");
    };
    let kind = ChangeKind::of(&command);
    let placement = *svc.store.placement();
    let outcome = match cluster.submit(shard, &command).await {
        // Leadership moved on (or is moving): nothing was proposed, the sender may try again.
        Err(EventClusterError::NotLeader { .. }) => return forward_not_leader(),
        outcome => outcome.map_err(|e| cluster_error(kind, e, placement)),
    };
    // An OCC conflict travels typed, with its conflicting entries, whatever the client's
    // version: the forwarding member answers it as that version wants.
    let response = respond(kind, correlation_id, outcome).unwrap_or_else(|e| {
        match e.conflict_answer(correlation_id, u64::MAX) {
            Some(Ok(conflict)) => conflict,
            _ => EventResponse::Error(e.to_response(correlation_id)),
        }
    });
    encode_forward_answer(&response)
}

/// Submits a mutation of `bytes` payload bytes and awaits its completion. The submission runs
/// inline unless it `may_wait` (schema work) or this server has enough bytes in flight that a
/// shard log may push back; then it runs on the blocking pool (see `crate::offload`).
async fn submit<T: Send + 'static>(
    svc: &EventService,
    bytes: u64,
    may_wait: bool,
    mutation: impl FnOnce(&EventStore) -> Completion<T, EventStoreError> + Send + 'static,
) -> Result<T, EventStoreError> {
    let (_in_flight, offload) = svc.in_flight.enter(bytes);
    let completion = if offload || may_wait {
        let store = Arc::clone(&svc.store);
        blocking(move || mutation(store.as_ref())).await
    } else {
        mutation(svc.store.as_ref())
    };
    completion.await
}

/// Why a cluster member did not serve a read: it could not confirm it holds every
/// acknowledged change of the aggregate's shard.
const UNCONFIRMED: &str =
    "this member cannot confirm it is up to date with the shard's leader; retry";

/// On a cluster member, waits until the aggregate's shard here holds every change
/// acknowledged before now (a read that cannot be confirmed, on an isolated former leader or
/// while no leader is known, is refused with a retryable code rather than served stale).
async fn linearize(svc: &EventService, key: &st::AggregateKey) -> Result<(), ()> {
    match svc.cluster() {
        None => Ok(()),
        Some(Err(_)) => Err(()),
        Some(Ok(cluster)) => cluster
            .linearize(svc.store.shard_of(key))
            .await
            .map_err(|e| tracing::debug!(error = %e, "an event read was not confirmed")),
    }
}

/// Executes one request (not Identify, not Watch) on the store.
pub(super) async fn execute(
    svc: &Arc<EventService>,
    request: EventRequest,
) -> Result<EventResponse, ServerError> {
    let placement = *svc.store.placement();
    match request {
        EventRequest::AggregateDetails(r) => details(svc, r).await,
        EventRequest::Read(r) => read(svc, r, placement).await,
        request @ (EventRequest::Write(_)
        | EventRequest::TrimStart(_)
        | EventRequest::Delete(_)
        | EventRequest::RegisterSchema(_)) => {
            let change = Change::from_request(request, crate::clock::now_millis())
                .expect("a change request");
            apply_change(svc, change).await
        }
        EventRequest::ListOrgs(r) => list_orgs(svc, r, placement).await,
        EventRequest::ListAggregateTypes(r) => list_aggregate_types(svc, r, placement).await,
        EventRequest::ListAggregates(r) => list_aggregates(svc, r, placement).await,
        EventRequest::Watch(_) | EventRequest::Identify(_) => {
            // Both take over the connection and are handled before execution.
            Err(ServerError::WatchRequestInvalid)
        }
    }
}

/// Answers an `AggregateDetails` request, once the aggregate's shard here is confirmed up to
/// date.
async fn details(
    svc: &Arc<EventService>,
    r: codec::AggregateDetailsRequest,
) -> Result<EventResponse, ServerError> {
    let svc2 = Arc::clone(svc);
    let k = key(&r.aggregate_key);
    linearize(svc, &k)
        .await
        .map_err(|()| ServerError::ExistsMetablockReadError {
            detail: UNCONFIRMED.into(),
        })?;
    let found = blocking(move || svc2.store.details(&k))
        .await
        .map_err(|e| details_error(&e))?;
    let d = found;
    Ok(EventResponse::AggregateDetails(
        codec::AggregateDetailsResponse {
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

/// Answers a `Read` request, once the aggregate's shard here is confirmed up to date.
async fn read(
    svc: &Arc<EventService>,
    r: codec::ReadRequest,
    placement: st::Placement,
) -> Result<EventResponse, ServerError> {
    let svc2 = Arc::clone(svc);
    let k = key(&r.aggregate_key);
    linearize(svc, &k)
        .await
        .map_err(|()| ServerError::ReadCacheLoadLockTimeout)?;
    let query = read_query(r.filters, svc.read_page_bytes);
    let page = blocking(move || svc2.store.read(&k, &query))
        .await
        .map_err(|e| read_error(&e, placement))?;
    Ok(EventResponse::Read(codec::ReadResponse {
        correlation_id: r.correlation_id,
        event_batches: page
            .batches
            .into_iter()
            .map(|b| codec::AggregateEventBatch {
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

/// Answers a `ListOrgs` request: a page of one shard's organisations.
async fn list_orgs(
    svc: &Arc<EventService>,
    r: codec::ListOrgsRequest,
    placement: st::Placement,
) -> Result<EventResponse, ServerError> {
    let svc2 = Arc::clone(svc);
    let page = blocking(move || svc2.store.list_orgs(r.shard_id, r.cursor, svc2.list_page))
        .await
        .map_err(|e| list_error(RequestType::ListOrgs, &e, placement))?;
    Ok(EventResponse::ListOrgs(codec::ListOrgsResponse {
        correlation_id: r.correlation_id,
        orgs: page
            .items
            .into_iter()
            .map(|org_id| codec::OrgListItem { org_id })
            .collect(),
        next_cursor: page.next_cursor,
    }))
}

/// Answers a `ListAggregateTypes` request: a page of an organisation's aggregate types on one
/// shard.
async fn list_aggregate_types(
    svc: &Arc<EventService>,
    r: codec::ListAggregateTypesRequest,
    placement: st::Placement,
) -> Result<EventResponse, ServerError> {
    let svc2 = Arc::clone(svc);
    let page = blocking(move || {
        svc2.store
            .list_aggregate_types(r.shard_id, r.org_id, r.cursor, svc2.list_page)
    })
    .await
    .map_err(|e| list_error(RequestType::ListAggregateTypes, &e, placement))?;
    Ok(EventResponse::ListAggregateTypes(
        codec::ListAggregateTypesResponse {
            correlation_id: r.correlation_id,
            aggregate_types: page
                .items
                .into_iter()
                .map(|t| codec::AggregateTypeListItem {
                    org_id: t.org_id,
                    aggregate_type_id: t.aggregate_type_id,
                })
                .collect(),
            next_cursor: page.next_cursor,
        },
    ))
}

/// Answers a `ListAggregates` request: a page of one aggregate type's aggregates on one shard.
async fn list_aggregates(
    svc: &Arc<EventService>,
    r: codec::ListAggregatesRequest,
    placement: st::Placement,
) -> Result<EventResponse, ServerError> {
    let svc2 = Arc::clone(svc);
    let page = blocking(move || {
        svc2.store.list_aggregates(
            r.shard_id,
            r.org_id,
            r.aggregate_type_id,
            r.cursor,
            svc2.list_page,
        )
    })
    .await
    .map_err(|e| list_error(RequestType::ListAggregates, &e, placement))?;
    Ok(EventResponse::ListAggregates(
        codec::ListAggregatesResponse {
            correlation_id: r.correlation_id,
            aggregates: page
                .items
                .into_iter()
                .map(|a| codec::AggregateListItem {
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
