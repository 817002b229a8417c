//! One event-protocol connection: framing, the first-frame rules, routing, the
//! connection-level checks, dispatch and responses.
//!
//! A frame that holds more than [`UNBUDGETED_FRAME`](crate::budget::UNBUDGETED_FRAME) in
//! memory (its bytes, plus its decompressed body when compressed) reserves them in the
//! server's request budget ([`crate::budget`]) as soon as its header is read, before any room
//! is made for its body, and holds them until it has been answered. While they do not fit it
//! waits, until the frame's deadline (`client_connection_timeout_ms`): then the connection
//! closes, as for any frame not complete by then.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf as _, BytesMut};
use eddy_codec::event::{
    decode_request, encode_response, AfterError, ErrorResponse, EventRequest, EventResponse,
    ServerError, WatchRequest, WatchResponse,
};
use eddy_wire::event::{
    Compression, Decoded, EventHeader, ProtocolVersion, RequestFrameDecoder, RequestType,
    HEADER_LEN,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::identify::{self, Identity};
use super::{exec, watch};
use super::{metric_index, EventService};
use crate::budget::{RequestBudget, Reservation, UNBUDGETED_FRAME};
use crate::listener::{Conn, ConnectionContext};
use crate::metrics::Protocol;
use crate::Shared;
use eddy_replicated::event::errors;
use eddy_replicated::event::routing::{self, Route};

/// Why a connection ends without (another) response.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionEnd {
    /// The client closed between requests.
    #[error("client closed the connection")]
    Closed,
    /// The client closed in the middle of a frame.
    #[error("client closed the connection mid-frame ({buffered} bytes buffered)")]
    Truncated {
        /// Bytes of the unfinished frame.
        buffered: usize,
    },
    /// No complete request arrived before the deadline, or a response write stalled.
    #[error("client connection timeout")]
    Timeout,
    /// The server is draining.
    #[error("server is draining")]
    Draining,
    /// A frame that cannot be parsed (header, size class, version change, body).
    #[error("unparsable frame")]
    Frame(#[source] eddy_wire::event::FrameError),
    /// A body that cannot be decompressed or decoded.
    #[error("undecodable body")]
    Body(#[source] eddy_codec::event::EventCodecError),
    /// Socket failure.
    #[error("socket error")]
    Io(#[source] std::io::Error),
    /// The watcher sent a byte or closed: the push stream ends with the connection.
    #[error("watch ended by the client")]
    WatchEnded,
    /// A watch subscriber fell too far behind and was dropped.
    #[error("watch subscriber fell behind")]
    WatchOverflow,
    /// An error response whose code closes the connection was sent.
    #[error("closed after error {code}")]
    AfterError {
        /// The code sent.
        code: u32,
    },
}

/// What executing a request produced.
pub(super) enum Reply {
    /// A response to send; the connection stays open.
    Response(EventResponse),
    /// A failure, answered with an `ErrorResponse`; closes when its code says so.
    Error(ServerError),
}

/// Per-connection state.
pub(super) struct Connection {
    io: Conn,
    shared: Arc<Shared>,
    decoder: RequestFrameDecoder,
    buf: BytesMut,
    out: Vec<u8>,
    identity: Identity,
    /// The client completed Identify, so it holds the dictionary.
    has_dict: bool,
    /// The server's drain signal, registered once for the connection's life (a fresh
    /// `cancelled()` per read added and removed a waiter on every request).
    drain: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The read deadline's timer, armed once and moved only when it fires before the deadline
    /// of the request being read (a timer per read was inserted into and removed from the
    /// runtime's timer wheel on every request).
    idle: Pin<Box<tokio::time::Sleep>>,
    /// The request budget held by the frame being read or handled (one above
    /// `UNBUDGETED_FRAME`), returned when the next read begins.
    reserved: Option<Reservation>,
}

/// What a read of the request loop ended with.
enum ReadEvent {
    Drain,
    Idle,
    Read(std::io::Result<usize>),
}

/// Initial read buffer: one fixed frame plus room for a small pipelined one.
const INITIAL_BUFFER: usize = 4096;
/// Buffers that grew past this for one large frame are given back once it is handled, so an
/// idle connection never keeps a multi-megabyte allocation. The read buffer keeps at most what
/// a frame read without the request budget may take.
const MAX_RETAINED_BUFFER: usize = 256 * 1024;
/// The read buffer's counterpart of [`MAX_RETAINED_BUFFER`].
const MAX_RETAINED_READ_BUFFER: usize = UNBUDGETED_FRAME;

impl Connection {
    pub(super) fn new(io: Conn, ctx: ConnectionContext) -> Self {
        let shared = ctx.shared;
        let decoder = RequestFrameDecoder::new(shared.events.request_limits);
        let drain = Box::pin(ctx.drain.cancelled_owned());
        let idle = Box::pin(tokio::time::sleep(shared.events.timeout));
        Self {
            io,
            shared,
            decoder,
            buf: BytesMut::with_capacity(INITIAL_BUFFER),
            out: Vec::with_capacity(INITIAL_BUFFER),
            identity: Identity::default(),
            has_dict: false,
            drain,
            idle,
            reserved: None,
        }
    }

    fn svc(&self) -> &EventService {
        &self.shared.events
    }

    /// Serves until the connection ends; the reason is logged at debug level.
    pub(super) async fn run(mut self) {
        match self.serve().await {
            Ok(()) | Err(ConnectionEnd::Closed | ConnectionEnd::WatchEnded) => {}
            Err(end) => tracing::debug!(error = %end, "event connection ended"),
        }
        let _ = self.io.shutdown().await;
    }

    async fn serve(&mut self) -> Result<(), ConnectionEnd> {
        let (version, first) = self.next_request().await?;
        let started = Instant::now();
        let first = match first {
            EventRequest::Identify(req) => {
                let reply = match identify::verify(
                    &req,
                    self.shared.api_keys.as_ref(),
                    crate::clock::now_millis(),
                ) {
                    Ok(identity) => {
                        self.identity = identity;
                        let resp = identify::response(&req, identity, self.svc().dictionary());
                        Reply::Response(EventResponse::Identify(resp))
                    }
                    Err(e) => Reply::Error(e),
                };
                self.finish(
                    RequestType::Identify,
                    version,
                    req.correlation_id,
                    reply,
                    started,
                )
                .await?;
                self.has_dict = true;
                None
            }
            other if self.shared.config.require_client_identity => {
                let kind = other.request_type();
                let reply = Reply::Error(ServerError::IdentifyRequired);
                self.finish(kind, version, other.correlation_id(), reply, started)
                    .await?;
                return Err(ConnectionEnd::AfterError {
                    code: ServerError::IdentifyRequired.code().code(),
                });
            }
            other => Some(other),
        };
        if let Some(request) = first {
            self.handle(version, request, started).await?;
        }
        loop {
            let (version, request) = self.next_request().await?;
            self.handle(version, request, Instant::now()).await?;
        }
    }

    /// Routes, checks and executes one request, then answers it.
    async fn handle(
        &mut self,
        version: ProtocolVersion,
        request: EventRequest,
        started: Instant,
    ) -> Result<(), ConnectionEnd> {
        let kind = request.request_type();
        let correlation_id = request.correlation_id();
        let reply = match self.admit(&request) {
            Err(e) => Reply::Error(e),
            Ok(Route::Connection) => {
                // Identify after the first frame is refused by the frame decoder.
                debug_assert!(false, "identify routed after the first frame");
                return Err(ConnectionEnd::Closed);
            }
            Ok(Route::Watch(shard)) => match request {
                EventRequest::Watch(w) => return self.watch(version, w, shard, started).await,
                _ => unreachable!("only a watch routes to a watch"),
            },
            Ok(Route::Store) => match exec::execute(&self.shared.events, request).await {
                Ok(response) => Reply::Response(response),
                Err(e) => Reply::Error(e),
            },
        };
        self.finish(kind, version, correlation_id, reply, started)
            .await
    }

    /// Routing first, then the client-id and access-level checks of mutations (§1.9 step 3):
    /// the store routes what it executes, so a failed mutation check asks the placement
    /// whether a routing error comes first.
    fn admit(&self, request: &EventRequest) -> Result<Route, ServerError> {
        let placement = self.svc().placement();
        let route = routing::route(placement, request)?;
        let mutation_client = match request {
            EventRequest::Write(r) => Some(r.client_id),
            EventRequest::TrimStart(r) => Some(r.client_id),
            EventRequest::Delete(r) => Some(r.client_id),
            EventRequest::RegisterSchema(r) => Some(r.client_id),
            _ => None,
        };
        if let Some(client_id) = mutation_client {
            if let Err(refused) = self.identity.check_mutation(client_id) {
                return Err(routing::precedes_identity(placement, request).unwrap_or(refused));
            }
        }
        Ok(route)
    }

    /// Turns the connection into a watch push stream (§4.8): latency cap (8001), subscriber
    /// cap (8005), the immediate empty acknowledgement, then pushes of committed changes,
    /// heartbeats, and the end at the first inbound byte. Never returns `Ok`: an accepted
    /// watch (or a refused one, whose codes close) ends the connection.
    async fn watch(
        &mut self,
        version: ProtocolVersion,
        request: WatchRequest,
        shard: u32,
        started: Instant,
    ) -> Result<(), ConnectionEnd> {
        let kind = RequestType::Watch;
        let cid = request.correlation_id;
        let svc = Arc::clone(&self.shared.events);
        let max_ms = svc.max_requested_latency_ms;
        let latency = match request.requested_latency_ms {
            Some(requested_ms) if requested_ms > max_ms => {
                let e = ServerError::WatchLatencyTooHigh {
                    requested_ms,
                    max_ms,
                };
                return self
                    .finish(kind, version, cid, Reply::Error(e), started)
                    .await;
            }
            other => other.map(Duration::from_millis),
        };
        let (sink, mut rx) = watch::channel();
        let id = match svc.store.subscribe(
            shard,
            eddy_replicated::event::routing::filter(&request),
            sink,
        ) {
            Ok(id) => id,
            Err(e) => {
                let e = errors::subscribe_error(&e);
                return self
                    .finish(kind, version, cid, Reply::Error(e), started)
                    .await;
            }
        };
        let _subscription = watch::Subscription {
            store: Arc::clone(&svc.store),
            id,
        };
        let ack = Reply::Response(EventResponse::Watch(WatchResponse::default()));
        self.finish(kind, version, cid, ack, started).await?;
        if !self.buf.is_empty() {
            // The client sent more after its watch: that ends it.
            return Err(ConnectionEnd::WatchEnded);
        }
        let mut pending = watch::Pending::default();
        let mut last_frame = tokio::time::Instant::now();
        let mut byte = [0u8; 1];
        loop {
            let flush_at = match latency {
                Some(l) if !pending.is_empty() => last_frame + l,
                _ => last_frame + watch::HEARTBEAT,
            };
            tokio::select! {
                () = self.drain.as_mut() => return Err(ConnectionEnd::Draining),
                read = self.io.read(&mut byte) => {
                    // Data, FIN or an error: the subscriber is gone, and so is the connection
                    // (a watch never returns to the request loop).
                    return Err(match read {
                        Ok(_) => ConnectionEnd::WatchEnded,
                        Err(e) => ConnectionEnd::Io(e),
                    });
                }
                events = rx.recv() => {
                    let Some(events) = events else {
                        // Dropped by the store: too far behind.
                        return Err(ConnectionEnd::WatchOverflow);
                    };
                    pending.add(&events);
                    if latency.is_some() {
                        continue;
                    }
                }
                () = tokio::time::sleep_until(flush_at) => {}
            }
            let push = WatchResponse {
                events: pending.take(),
            };
            self.send(version, &EventResponse::Watch(push), kind)
                .await?;
            last_frame = tokio::time::Instant::now();
        }
    }

    /// Sends the reply, records metrics, and applies the error's connection policy.
    async fn finish(
        &mut self,
        kind: RequestType,
        version: ProtocolVersion,
        correlation_id: Option<u128>,
        reply: Reply,
        started: Instant,
    ) -> Result<(), ConnectionEnd> {
        let (response, close) = match reply {
            Reply::Response(r) => (r, None),
            Reply::Error(e) => {
                // A 0.3.0 client (versions 4/5) is told of an OCC conflict with a typed
                // conflict response: it takes an ErrorResponse 2003/4002 for a protocol error.
                let e = match version.typed_conflicts().then(|| {
                    e.conflict_answer(correlation_id, self.shared.events.max_response_size)
                }) {
                    Some(Some(Ok(conflict))) => {
                        return self.answer(kind, version, conflict, started).await
                    }
                    Some(Some(Err(too_large))) => too_large,
                    // 2014 is 0.3.0's: a 0.2.0 client is told what it was before guards, 2000.
                    None if e == ServerError::WriteMalformedGuardEntry => {
                        ServerError::WriteEmptyEventsList
                    }
                    _ => e,
                };
                let close = (e.after_error() == AfterError::Close).then(|| e.code().code());
                (EventResponse::Error(e.to_response(correlation_id)), close)
            }
        };
        let ok = !matches!(response, EventResponse::Error(_));
        let sent = self.send(version, &response, kind).await;
        self.shared.metrics.record_request(
            Protocol::Event,
            metric_index(kind),
            ok,
            started.elapsed(),
        );
        sent?;
        match close {
            Some(code) => Err(ConnectionEnd::AfterError { code }),
            None => Ok(()),
        }
    }

    /// Sends a typed conflict response (a refused change: recorded as a failure) and keeps
    /// the connection open.
    async fn answer(
        &mut self,
        kind: RequestType,
        version: ProtocolVersion,
        conflict: EventResponse,
        started: Instant,
    ) -> Result<(), ConnectionEnd> {
        let sent = self.send(version, &conflict, kind).await;
        self.shared.metrics.record_request(
            Protocol::Event,
            metric_index(kind),
            false,
            started.elapsed(),
        );
        sent
    }

    /// Encodes and writes one response under the write deadline. A body that cannot be
    /// encoded (above `max_response_size`) is replaced by the request type's error.
    pub(super) async fn send(
        &mut self,
        version: ProtocolVersion,
        response: &EventResponse,
        kind: RequestType,
    ) -> Result<(), ConnectionEnd> {
        self.out.clear();
        if let Err(e) = self.encode(version, response) {
            tracing::warn!(error = %e, request = ?kind, "response cannot be encoded");
            let fallback = too_large(kind, response.correlation_id(), &e);
            self.out.clear();
            self.encode(version, &EventResponse::Error(fallback))
                .map_err(ConnectionEnd::Body)?;
        }
        let deadline = self.svc().timeout;
        let io = &mut self.io;
        let out = &self.out;
        let written = match tokio::time::timeout(deadline, async {
            io.write_all(out).await?;
            io.flush().await
        })
        .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ConnectionEnd::Io(e)),
            Err(_) => Err(ConnectionEnd::Timeout),
        };
        if self.out.capacity() > MAX_RETAINED_BUFFER {
            self.out = Vec::with_capacity(INITIAL_BUFFER);
        }
        written
    }

    fn encode(
        &mut self,
        version: ProtocolVersion,
        response: &EventResponse,
    ) -> Result<(), eddy_codec::event::EventCodecError> {
        let svc = &self.shared.events;
        let max = svc.max_response_size;
        let compressible = self.has_dict && response.response_type().compressible();
        let out = &mut self.out;
        if compressible {
            svc.codecs
                .with(|codec| encode_response(response, version, out, Some(codec), max))
        } else {
            encode_response(response, version, out, None, max)
        }
        .map(|_| ())
    }

    /// Reads the next complete request frame under the idle deadline and decodes it.
    async fn next_request(&mut self) -> Result<(ProtocolVersion, EventRequest), ConnectionEnd> {
        // The previous request has been answered.
        self.reserved = None;
        let deadline = tokio::time::Instant::now() + self.svc().timeout;
        loop {
            let needed = match self
                .decoder
                .decode(&self.buf)
                .map_err(ConnectionEnd::Frame)?
            {
                Decoded::Frame(frame) => {
                    let version = frame.header.version;
                    let len = frame.len();
                    let svc = &self.shared.events;
                    let limits = svc.request_limits;
                    let decoded = if frame.header.compression == Compression::None {
                        decode_request(&frame, None, limits)
                    } else {
                        svc.codecs
                            .with(|codec| decode_request(&frame, Some(codec), limits))
                    };
                    self.buf.advance(len);
                    if self.buf.is_empty() && self.buf.capacity() > MAX_RETAINED_READ_BUFFER {
                        self.buf = BytesMut::with_capacity(INITIAL_BUFFER);
                    }
                    return decoded
                        .map(|request| (version, request))
                        .map_err(ConnectionEnd::Body);
                }
                Decoded::NeedMore { needed } => needed,
            };
            // The header (when present) passed the size caps, so `needed` is bounded by them;
            // a frame too large to read unbudgeted first holds its bytes in the budget, and
            // gets room for its body only once the buffer it has is full (a peer that sends a
            // header and stalls costs no more than its small buffer).
            if self.reserved.is_none() {
                let limit = self.svc().request_limits.max_body_len;
                if let Ok(Some(header)) = EventHeader::parse(&self.buf, limit) {
                    let bytes = frame_bytes(&header);
                    if RequestBudget::needs_reservation(bytes) {
                        self.reserved = Some(self.reserve(bytes, deadline).await?);
                    }
                }
            }
            if self.reserved.is_none() || self.buf.len() == self.buf.capacity() {
                self.buf.reserve(needed);
            }
            let event = tokio::select! {
                () = self.drain.as_mut() => ReadEvent::Drain,
                () = self.idle.as_mut() => ReadEvent::Idle,
                read = self.io.read_buf(&mut self.buf) => ReadEvent::Read(read),
            };
            match event {
                ReadEvent::Drain => return Err(ConnectionEnd::Draining),
                ReadEvent::Idle if tokio::time::Instant::now() >= deadline => {
                    return Err(ConnectionEnd::Timeout);
                }
                // Armed for an earlier request's deadline: move it to this one's.
                ReadEvent::Idle => self.idle.as_mut().reset(deadline),
                ReadEvent::Read(Err(e)) => return Err(ConnectionEnd::Io(e)),
                ReadEvent::Read(Ok(0)) if self.buf.is_empty() => return Err(ConnectionEnd::Closed),
                ReadEvent::Read(Ok(0)) => {
                    return Err(ConnectionEnd::Truncated {
                        buffered: self.buf.len(),
                    })
                }
                ReadEvent::Read(Ok(_)) => {}
            }
        }
    }
}

impl Connection {
    /// Reserves `bytes` of the request budget, waiting until `deadline` (then the connection
    /// ends as for any frame not complete by its deadline) or the drain.
    async fn reserve(
        &mut self,
        bytes: u64,
        deadline: tokio::time::Instant,
    ) -> Result<Reservation, ConnectionEnd> {
        let budget = &self.shared.budget;
        if let Some(reserved) = budget.try_reserve(bytes) {
            return Ok(reserved);
        }
        budget.count_wait();
        tokio::select! {
            reserved = budget.reserve_in_turn(bytes) => Ok(reserved),
            () = self.drain.as_mut() => Err(ConnectionEnd::Draining),
            () = tokio::time::sleep_until(deadline) => {
                budget.refused();
                tracing::debug!(bytes, "no room in --max-inflight-request-bytes before the frame's deadline");
                Err(ConnectionEnd::Timeout)
            }
        }
    }
}

/// What a frame holds in memory while it is read and handled: its bytes, and its decompressed
/// body when compressed.
fn frame_bytes(header: &EventHeader) -> u64 {
    let frame = HEADER_LEN as u64 + u64::from(header.compressed_length);
    match header.compression {
        Compression::None => frame,
        Compression::ZstdDict => frame + u64::from(header.uncompressed_length),
    }
}

/// The error sent when a response exceeds `max_response_size` (paging keeps this from
/// happening in practice; the error keeps the client's request/response pairing intact).
fn too_large(
    kind: RequestType,
    correlation_id: Option<u128>,
    cause: &eddy_codec::event::EventCodecError,
) -> ErrorResponse {
    let detail = format!("response too large: {cause}");
    let error = match kind {
        RequestType::ListOrgs => ServerError::ListOrgsDiskRead { detail },
        RequestType::ListAggregateTypes => ServerError::ListAggregateTypesDiskRead { detail },
        RequestType::ListAggregates => ServerError::ListAggregatesDiskRead { detail },
        RequestType::Watch => ServerError::WatchReadSerialization { detail },
        _ => ServerError::ReadFetchDatablocks {
            detail: Some(detail),
        },
    };
    error.to_response(correlation_id)
}
