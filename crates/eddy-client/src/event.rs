//! [`EventClient`]: the Celeriant event protocol (port 10000) over eddy's own framing and
//! codecs, in version 2 (bincode bodies, what the Rust client speaks).
//!
//! One request at a time; every request carries a fresh correlation id and its answer must
//! echo it. An `ErrorResponse` becomes [`ClientError::EventRefused`] with the code and the
//! server's JSON context. No Identify is sent, so the server never compresses its answers and
//! no dictionary is needed. [`EventClient::watch`] turns the connection into a push stream.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use eddy_codec::event::{
    decode_response, encode_request, AggregateDetailsRequest, AggregateDetailsResponse,
    AggregateKey, DeleteRequest, Event, EventRequest, EventResponse, ListAggregateTypesRequest,
    ListAggregateTypesResponse, ListAggregatesRequest, ListAggregatesResponse, ListOrgsRequest,
    ListOrgsResponse, ReadFilters, ReadRequest, ReadResponse, RegisterSchemaRequest, SchemaKey,
    SingleAggregateDelete, SingleAggregateWrite, TrimStartRequest, WatchRequest, WatchResponse,
    WriteRequest, WriteResponse,
};
use eddy_wire::event::{
    decode_response_frame, Decoded, FrameLimits, ProtocolVersion, DEFAULT_MAX_REQUEST_LEN,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::error::ClientError;
use crate::transport::{connect, ConnectOptions, Transport};

/// Error code of a routing error naming the shard count (`SHARD_ROUTING_INCOMPATIBLE_FILTERS`).
pub const ROUTING_INCOMPATIBLE_FILTERS: u32 = 9002;
/// Error code of a write whose `expected_version` is not current (`WRITE_OCC_CONFLICT`).
pub const WRITE_OCC_CONFLICT: u32 = 2003;

/// What one aggregate's write asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// OCC guard: the aggregate's current version must equal this (0 = must not exist).
    pub expected_version: Option<u64>,
    /// Refuse events whose `client_seq` is not above this client's high-water mark.
    pub idempotent: bool,
    /// The write may create the aggregate.
    pub allow_create: bool,
    /// Free-form actor id stored on the batch.
    pub user_id: Option<u128>,
}

/// An event-protocol connection.
pub struct EventClient {
    io: Transport,
    addr: String,
    buf: BytesMut,
    version: ProtocolVersion,
    limits: FrameLimits,
    next_correlation: u128,
    timeout: Duration,
}

impl std::fmt::Debug for EventClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventClient")
            .field("addr", &self.addr)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// The number after `"num_shards":` in a routing error's message (the literal search the
/// 0.2.0 client does, §4.1).
pub fn parse_num_shards(message: &str) -> Option<u64> {
    let rest = &message[message.find("\"num_shards\":")? + "\"num_shards\":".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl EventClient {
    /// Connects.
    pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Self, ClientError> {
        let io = connect(addr, options).await?;
        Ok(Self {
            io,
            addr: addr.to_owned(),
            buf: BytesMut::with_capacity(64 * 1024),
            version: ProtocolVersion::V2,
            limits: FrameLimits::default_responses(),
            next_correlation: 1,
            timeout: options.request_timeout,
        })
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn send(&mut self, request: &EventRequest) -> Result<(), ClientError> {
        let mut frame = Vec::new();
        encode_request(
            request,
            self.version,
            &mut frame,
            None,
            DEFAULT_MAX_REQUEST_LEN,
        )
        .map_err(ClientError::EventCodec)?;
        self.io
            .write_all(&frame)
            .await
            .map_err(|source| ClientError::Io {
                addr: self.addr.clone(),
                source,
            })
    }

    /// Reads one response frame; `deadline` `None` waits for ever (watch pushes).
    async fn receive(&mut self, deadline: Option<Duration>) -> Result<EventResponse, ClientError> {
        let read = self.read_response();
        match deadline {
            Some(timeout) => {
                tokio::time::timeout(timeout, read)
                    .await
                    .map_err(|_| ClientError::Timeout {
                        addr: self.addr.clone(),
                        timeout,
                    })?
            }
            None => read.await,
        }
    }

    async fn read_response(&mut self) -> Result<EventResponse, ClientError> {
        loop {
            let decoded =
                decode_response_frame(&self.buf, self.limits).map_err(ClientError::EventFrame)?;
            match decoded {
                Decoded::Frame(frame) => {
                    let used = frame.len();
                    let response = decode_response(&frame, None, self.limits)
                        .map_err(ClientError::EventCodec)?;
                    self.buf.advance(used);
                    return Ok(response);
                }
                Decoded::NeedMore { needed } => {
                    self.buf.reserve(needed.max(4096));
                    let read = self.io.read_buf(&mut self.buf).await.map_err(|source| {
                        ClientError::Io {
                            addr: self.addr.clone(),
                            source,
                        }
                    })?;
                    if read == 0 {
                        return Err(ClientError::Closed {
                            addr: self.addr.clone(),
                        });
                    }
                }
            }
        }
    }

    /// Sends `request` with a fresh correlation id and returns its answer, or the server's
    /// refusal.
    pub async fn request(
        &mut self,
        mut request: EventRequest,
    ) -> Result<EventResponse, ClientError> {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        request.set_correlation_id(Some(correlation));
        self.send(&request).await?;
        let response = self.receive(Some(self.timeout)).await?;
        if let EventResponse::Error(e) = response {
            return Err(ClientError::event_refused(e.error_code, e.error_message));
        }
        if response.correlation_id() != Some(correlation) {
            return Err(ClientError::Unexpected("an answer to another request"));
        }
        if response.response_type() != request.request_type().success_response() {
            return Err(ClientError::Unexpected("an answer of another type"));
        }
        Ok(response)
    }

    /// A write request of any shape (several aggregates, atomically).
    pub async fn write(&mut self, request: WriteRequest) -> Result<WriteResponse, ClientError> {
        match self.request(EventRequest::Write(request)).await? {
            EventResponse::Write(r) => Ok(r),
            _ => Err(ClientError::Unexpected("not a write response")),
        }
    }

    /// Writes `events` to one aggregate as one batch; returns the new version.
    pub async fn write_events(
        &mut self,
        key: AggregateKey,
        events: Vec<Event>,
        client_id: u128,
        options: &WriteOptions,
    ) -> Result<Option<u64>, ClientError> {
        let write = SingleAggregateWrite {
            events,
            allow_create: options.allow_create,
            expected_version: options.expected_version,
            enforce_client_idempotency: options.idempotent,
        };
        let response = self
            .write(WriteRequest {
                correlation_id: None,
                client_id,
                user_id: options.user_id,
                writes: BTreeMap::from([(key, write)]),
            })
            .await?;
        Ok(response.max_aggregate_version)
    }

    /// One page of an aggregate's batches.
    pub async fn read(
        &mut self,
        key: AggregateKey,
        filters: ReadFilters,
    ) -> Result<ReadResponse, ClientError> {
        match self
            .request(EventRequest::Read(ReadRequest {
                correlation_id: None,
                aggregate_key: key,
                filters,
            }))
            .await?
        {
            EventResponse::Read(r) => Ok(r),
            _ => Err(ClientError::Unexpected("not a read response")),
        }
    }

    /// An aggregate's versions and state.
    pub async fn details(
        &mut self,
        key: AggregateKey,
    ) -> Result<AggregateDetailsResponse, ClientError> {
        match self
            .request(EventRequest::AggregateDetails(AggregateDetailsRequest {
                correlation_id: None,
                aggregate_key: key,
            }))
            .await?
        {
            EventResponse::AggregateDetails(r) => Ok(r),
            _ => Err(ClientError::Unexpected("not a details response")),
        }
    }

    /// Raises the readable floor of an aggregate to `keep_from`.
    pub async fn trim(
        &mut self,
        key: AggregateKey,
        keep_from: u64,
        client_id: u128,
    ) -> Result<(), ClientError> {
        self.request(EventRequest::TrimStart(TrimStartRequest {
            correlation_id: None,
            aggregate_key: key,
            keep_from_aggregate_version: keep_from,
            client_id,
            user_id: None,
        }))
        .await
        .map(|_| ())
    }

    /// Soft-deletes one aggregate.
    pub async fn delete(
        &mut self,
        key: AggregateKey,
        options: SingleAggregateDelete,
        client_id: u128,
    ) -> Result<(), ClientError> {
        self.request(EventRequest::Delete(DeleteRequest {
            correlation_id: None,
            client_id,
            user_id: None,
            deletes: BTreeMap::from([(key, options)]),
        }))
        .await
        .map(|_| ())
    }

    /// One page of the orgs of `shard`.
    pub async fn list_orgs(
        &mut self,
        shard: u64,
        cursor: Option<u64>,
    ) -> Result<ListOrgsResponse, ClientError> {
        match self
            .request(EventRequest::ListOrgs(ListOrgsRequest {
                correlation_id: None,
                shard_id: shard,
                cursor,
            }))
            .await?
        {
            EventResponse::ListOrgs(r) => Ok(r),
            _ => Err(ClientError::Unexpected("not a list-orgs response")),
        }
    }

    /// One page of the (org, aggregate type) pairs of `shard`.
    pub async fn list_aggregate_types(
        &mut self,
        shard: u64,
        org: Option<u128>,
        cursor: Option<u64>,
    ) -> Result<ListAggregateTypesResponse, ClientError> {
        match self
            .request(EventRequest::ListAggregateTypes(
                ListAggregateTypesRequest {
                    correlation_id: None,
                    shard_id: shard,
                    org_id: org,
                    cursor,
                },
            ))
            .await?
        {
            EventResponse::ListAggregateTypes(r) => Ok(r),
            _ => Err(ClientError::Unexpected("not a list-types response")),
        }
    }

    /// One page of the aggregates of `shard`.
    pub async fn list_aggregates(
        &mut self,
        shard: u64,
        org: Option<u128>,
        aggregate_type: Option<u128>,
        cursor: Option<u64>,
    ) -> Result<ListAggregatesResponse, ClientError> {
        match self
            .request(EventRequest::ListAggregates(ListAggregatesRequest {
                correlation_id: None,
                shard_id: shard,
                org_id: org,
                aggregate_type_id: aggregate_type,
                cursor,
            }))
            .await?
        {
            EventResponse::ListAggregates(r) => Ok(r),
            _ => Err(ClientError::Unexpected("not a list-aggregates response")),
        }
    }

    /// The server's shard count: a list request for a shard that cannot exist is refused with
    /// 9002, whose message names the count.
    pub async fn num_shards(&mut self) -> Result<u64, ClientError> {
        match self.list_orgs(u64::MAX, None).await {
            Err(ClientError::EventRefused { code, message, .. })
                if code == ROUTING_INCOMPATIBLE_FILTERS =>
            {
                parse_num_shards(&message).ok_or(ClientError::Unexpected(
                    "a routing error without num_shards",
                ))
            }
            Err(e) => Err(e),
            Ok(_) => Err(ClientError::Unexpected("a shard listed at u64::MAX")),
        }
    }

    /// Registers a JSON Schema for an event type.
    pub async fn register_schema(
        &mut self,
        key: SchemaKey,
        schema: String,
        client_id: u128,
    ) -> Result<(), ClientError> {
        self.request(EventRequest::RegisterSchema(RegisterSchemaRequest {
            correlation_id: None,
            client_id,
            user_id: None,
            schema_key: key,
            schema_type: eddy_codec::event::SchemaType::Json.as_u8(),
            schema,
        }))
        .await
        .map(|_| ())
    }

    /// Subscribes to committed changes of one shard (or of the ids the routing rule needs);
    /// the connection becomes a [`Watch`] once the server acknowledges.
    pub async fn watch(mut self, mut request: WatchRequest) -> Result<Watch, ClientError> {
        request.correlation_id = Some(self.next_correlation);
        self.next_correlation += 1;
        self.send(&EventRequest::Watch(request)).await?;
        match self.receive(Some(self.timeout)).await? {
            EventResponse::Watch(_) => Ok(Watch { client: self }),
            EventResponse::Error(e) => {
                Err(ClientError::event_refused(e.error_code, e.error_message))
            }
            _ => Err(ClientError::Unexpected("not a watch acknowledgement")),
        }
    }

    /// Subscribes to every change on every shard: one connection per shard.
    pub async fn watch_all(
        addr: &str,
        options: &ConnectOptions,
        operations: Option<BTreeSet<u8>>,
    ) -> Result<Vec<Watch>, ClientError> {
        let shards = Self::connect(addr, options).await?.num_shards().await?;
        let mut watches = Vec::new();
        for shard in 0..shards {
            let client = Self::connect(addr, options).await?;
            watches.push(
                client
                    .watch(WatchRequest {
                        shard_id: Some(shard),
                        operation_types: operations.clone(),
                        ..WatchRequest::default()
                    })
                    .await?,
            );
        }
        Ok(watches)
    }
}

/// An acknowledged watch: the server pushes [`WatchResponse`] frames (empty ones are 5 s
/// heartbeats).
#[derive(Debug)]
pub struct Watch {
    client: EventClient,
}

impl Watch {
    /// The next push (heartbeats included); an error ends the watch.
    pub async fn next(&mut self) -> Result<WatchResponse, ClientError> {
        match self.client.receive(None).await? {
            EventResponse::Watch(w) => Ok(w),
            EventResponse::Error(e) => {
                Err(ClientError::event_refused(e.error_code, e.error_message))
            }
            _ => Err(ClientError::Unexpected("not a watch push")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_shards_is_found_by_literal_search() {
        assert_eq!(
            parse_num_shards("{\"detail\":\"Invalid shard_id\",\"num_shards\":4}"),
            Some(4)
        );
        assert_eq!(parse_num_shards("{\"num_shards\":12,\"x\":1}"), Some(12));
        assert_eq!(parse_num_shards("{\"num_shards\": 4}"), None);
        assert_eq!(parse_num_shards("{}"), None);
    }
}
