//! A change (write, trim, delete, schema registration) as the server handles it, step by
//! step: the wire request converted to the store's ([`Change::from_request`]), prepared into
//! its shard's [`Command`] on the cluster member that takes it ([`Change::prepare`]), and the
//! outcome answered with the kind's codes ([`store_error`], [`cluster_error`], [`respond`]).
//!
//! The connection handler runs these steps around the store (one node) or around
//! `ClusterEvents::submit` (the server's) (a cluster
//! member); the simulator runs the very same steps around its simulated members, so what its
//! clients are told is what a published client would decode from this server.

use eddy_codec::event as codec;
use eddy_codec::event::{EventRequest, EventResponse, ServerError};
use eddy_event_store as st;
use eddy_event_store::replicated::{Applied, Command};
use eddy_event_store::{EventStore, EventStoreError, Placement};

use super::errors::{delete_error, register_error, trim_error, write_error};
use crate::shard::EventClusterError;

/// The store's key of a wire key.
pub fn key(k: &codec::AggregateKey) -> st::AggregateKey {
    st::AggregateKey::new(k.org_id, k.aggregate_type_id, k.aggregate_id)
}

/// Which change a request is (each kind has its own codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// A write of events to one or more aggregates.
    Write,
    /// A trim of an aggregate's oldest versions.
    Trim,
    /// A delete of aggregates.
    Delete,
    /// A schema registration, of this schema type.
    Schema {
        /// The registration's schema type (its refusal codes carry it).
        schema_type: u8,
    },
}

impl ChangeKind {
    /// The kind of change `command` is.
    pub fn of(command: &Command) -> Self {
        match command {
            Command::Write { .. } => ChangeKind::Write,
            Command::Trim(_) => ChangeKind::Trim,
            Command::Delete(_) => ChangeKind::Delete,
            Command::RegisterSchema(r) => ChangeKind::Schema {
                schema_type: r.schema_type,
            },
        }
    }
}

/// The store's form of a change request.
#[derive(Debug)]
pub enum StoreChange {
    Write(st::WriteRequest),
    Trim(st::TrimRequest),
    Delete(st::DeleteRequest),
    Schema(st::SchemaRegistration),
}

/// A change request in the store's terms, with what its answer needs.
#[derive(Debug)]
pub struct Change {
    kind: ChangeKind,
    correlation_id: Option<u128>,
    pub request: StoreChange,
}

/// A change prepared on the member that takes it: the command its shard's group applies.
#[derive(Debug)]
pub struct Prepared {
    /// The shard whose group takes it.
    pub shard: u32,
    /// The command proposed.
    pub command: Command,
    /// The change's kind.
    pub kind: ChangeKind,
    /// The request's correlation id (echoed in the answer).
    pub correlation_id: Option<u128>,
}

impl Change {
    /// The change `request` makes, stamped `now` (ms since the epoch, this server's clock);
    /// `None` for a request that changes nothing.
    pub fn from_request(request: EventRequest, now: u64) -> Option<Self> {
        let (kind, correlation_id, request) = match request {
            EventRequest::Write(w) => (
                ChangeKind::Write,
                w.correlation_id,
                StoreChange::Write(write_request(w, now)),
            ),
            EventRequest::TrimStart(r) => (
                ChangeKind::Trim,
                r.correlation_id,
                StoreChange::Trim(st::TrimRequest {
                    key: key(&r.aggregate_key),
                    keep_from_version: r.keep_from_aggregate_version,
                    client_id: r.client_id,
                    user_id: r.user_id,
                    now,
                }),
            ),
            EventRequest::Delete(r) => (
                ChangeKind::Delete,
                r.correlation_id,
                StoreChange::Delete(st::DeleteRequest {
                    client_id: r.client_id,
                    user_id: r.user_id,
                    now,
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
                }),
            ),
            EventRequest::RegisterSchema(r) => (
                ChangeKind::Schema {
                    schema_type: r.schema_type,
                },
                r.correlation_id,
                StoreChange::Schema(st::SchemaRegistration {
                    key: st::SchemaKey {
                        org_id: r.schema_key.org_id,
                        aggregate_type_id: r.schema_key.aggregate_type_id,
                        event_type_major: r.schema_key.event_type_major,
                        event_type_minor: r.schema_key.event_type_minor,
                    },
                    schema_type: r.schema_type,
                    schema: r.schema,
                    client_id: r.client_id,
                    user_id: r.user_id,
                    now,
                }),
            ),
            _ => return None,
        };
        Some(Change {
            kind,
            correlation_id,
            request,
        })
    }

    /// The change's kind.
    pub fn kind(&self) -> ChangeKind {
        self.kind
    }

    /// The request's correlation id.
    pub fn correlation_id(&self) -> Option<u128> {
        self.correlation_id
    }

    /// Event payload bytes it writes (what this server counts in flight).
    pub fn payload_bytes(&self) -> u64 {
        match &self.request {
            StoreChange::Write(w) => w
                .writes
                .iter()
                .flat_map(|w| w.events.iter())
                .map(|e| e.value.len() as u64)
                .sum(),
            _ => 0,
        }
    }

    /// Whether the store may wait for its schema threads to take it (a write with schema work
    /// to do, every registration): the server then calls it from the blocking pool.
    pub fn may_wait(&self, store: &EventStore) -> bool {
        match &self.request {
            StoreChange::Write(w) => store.needs_schema_work(w),
            StoreChange::Schema(_) => true,
            StoreChange::Trim(_) | StoreChange::Delete(_) => false,
        }
    }

    /// Checks the change against `store` (routing, input checks, schemas) and turns it into
    /// its shard's command, as the member that takes it does before proposing.
    ///
    /// # Errors
    /// The kind's refusal code.
    pub fn prepare(self, store: &EventStore) -> Result<Prepared, ServerError> {
        let placement = *store.placement();
        let kind = self.kind;
        let (shard, command) = match self.request {
            StoreChange::Write(w) => store.prepare_write(w),
            StoreChange::Trim(t) => Ok(store.prepare_trim(t)),
            StoreChange::Delete(d) => store.prepare_delete(d),
            StoreChange::Schema(s) => store.prepare_schema(s),
        }
        .map_err(|e| store_error(kind, &e, placement))?;
        Ok(Prepared {
            shard,
            command,
            kind,
            correlation_id: self.correlation_id,
        })
    }
}

/// The store's request of a wire write.
fn write_request(w: codec::WriteRequest, now: u64) -> st::WriteRequest {
    st::WriteRequest {
        client_id: w.client_id,
        user_id: w.user_id,
        now,
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
    }
}

/// The code a `kind` change gets when the store refuses or fails it.
pub fn store_error(kind: ChangeKind, e: &EventStoreError, placement: Placement) -> ServerError {
    match kind {
        ChangeKind::Write => write_error(e, placement),
        ChangeKind::Trim => trim_error(e),
        ChangeKind::Delete => delete_error(e, placement),
        ChangeKind::Schema { schema_type } => register_error(e, schema_type),
    }
}

/// The answer to a change the cluster did not take: the kind's not-leader code with the
/// leader's client address (the published client follows it), its backpressure code when no
/// majority takes it now, or the store's refusal.
pub fn cluster_error(kind: ChangeKind, e: EventClusterError, placement: Placement) -> ServerError {
    match e {
        EventClusterError::NotLeader { leader_address } => match kind {
            ChangeKind::Write => ServerError::WriteNotLeader { leader_address },
            ChangeKind::Trim => ServerError::TrimNotLeader { leader_address },
            ChangeKind::Delete => ServerError::DeleteNotLeader { leader_address },
            ChangeKind::Schema { .. } => {
                ServerError::RegisterSchemaCannotAcceptWrites { leader_address }
            }
        },
        EventClusterError::Unavailable(why) => {
            tracing::debug!(reason = %why, "a change was not committed");
            match kind {
                ChangeKind::Write => ServerError::WriteReplicationBackpressure,
                ChangeKind::Trim => ServerError::TrimReplicationBackpressure,
                ChangeKind::Delete => ServerError::DeleteReplicationBackpressure,
                ChangeKind::Schema { .. } => {
                    ServerError::RegisterSchemaReplicationError { detail: why }
                }
            }
        }
        EventClusterError::Store(e) => store_error(kind, &e, placement),
    }
}

/// The response to a `kind` change whose outcome is `outcome`.
///
/// # Errors
/// `outcome`'s error, or (a bug) an outcome of another kind.
pub fn respond(
    kind: ChangeKind,
    correlation_id: Option<u128>,
    outcome: Result<Applied, ServerError>,
) -> Result<EventResponse, ServerError> {
    match (kind, outcome?) {
        (ChangeKind::Write, Applied::Write(w)) => Ok(EventResponse::Write(codec::WriteResponse {
            correlation_id,
            max_aggregate_version: w.max_aggregate_version(),
        })),
        (ChangeKind::Trim, Applied::Trim(_)) => {
            Ok(EventResponse::TrimStart(codec::TrimStartResponse {
                correlation_id,
            }))
        }
        (ChangeKind::Delete, Applied::Delete(_)) => {
            Ok(EventResponse::Delete(codec::DeleteResponse {
                correlation_id,
            }))
        }
        (ChangeKind::Schema { .. }, Applied::Schema) => Ok(EventResponse::RegisterSchema(
            codec::RegisterSchemaResponse { correlation_id },
        )),
        (_, other) => {
            tracing::error!(
                ?other,
                ?kind,
                "a change answered with another kind's outcome"
            );
            Err(ServerError::WriteReplicationBackpressure)
        }
    }
}
