//! One stream-protocol connection: the only code here that touches the socket.
//!
//! The loop reads one frame, hands it to [`dispatch`](super::dispatch), writes exactly one
//! answer (a reply, or an eviction in the reply's place) and only then reads the next frame
//! (lockstep, stream protocol §1.3). While it waits for a frame it also watches:
//!
//! * the server's drain signal: a connection between requests closes at once, a request in
//!   flight is finished and answered first;
//! * the stale timer (when a heartbeat interval is configured): a connection silent for
//!   1.2 intervals that is a member of a consumer group is removed from its groups, sent an
//!   `Eviction StaleClient` and closed (an unsolicited eviction is always followed by close);
//! * the login deadline: a connection without a session for `stream_login_timeout_ms` (from
//!   its accept, or from the end of its last session) is sent an `Eviction NoSession` and
//!   closed, whatever it sent meanwhile (a ping or part of a header keeps nothing open);
//! * the idle timeout: a session that completes no request (heartbeat pings count) for
//!   `stream_idle_timeout_ms` is sent an `Eviction StaleClient` and closed.
//!
//! While a deferred request (`POLL_MESSAGES_DEFERRED`, `FETCH_MESSAGES`, 0.12.2 wire) waits,
//! the loop goes on reading frames (at most [`MAX_HELD`], held in order for after it): a
//! `CANCEL_DEFERRED_REQUEST` with the waiting request's id stops the wait, the request is
//! answered `TransientNotAccepted` and the cancel is not answered (0.12.2 wire). A cancel
//! that finds nothing waiting is dropped unanswered.
//!
//! The eviction answering the `login_max_failures_per_connection`-th failed login is followed
//! by close. Every answer must be written within `stream_write_timeout_ms`, or the connection
//! closes (a client that stopped reading holds nothing).
//!
//! Framing: the 256-byte header's `size` is checked against `stream_max_frame_size` (before
//! login: `stream_max_prelogin_frame_size`, a few KiB, enough for every command served before
//! login) as soon as it is readable, before any room is made for the body; a frame too small or too large, a
//! non-request frame, a read error or a truncated frame closes this connection only. Reads are
//! cancel-safe (`read_buf` into a buffer), so the select never loses bytes. A frame above
//! [`UNBUDGETED_FRAME`](crate::budget::UNBUDGETED_FRAME) first reserves its bytes in the
//! server's request budget ([`crate::budget`]) and only then gets room for its body; one that
//! finds no room within [`STREAM_WAIT`](crate::budget::STREAM_WAIT) is answered
//! `TransientNotAccepted` at once and its body is skipped as it arrives.
//!
//! On exit (EOF, error, eviction, drain) the connection's session ends as on logout: it leaves
//! its consumer groups (which rebalance) and its entry leaves the clients table.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes, BytesMut};
use eddy_auth::sessions::{stale_after, ClientId, Transport};
use eddy_codec::stream::ReplyFrame;
use eddy_wire::stream::{
    peek_frame_len, EvictionHeader, EvictionReason, HeaderBytes, RequestHeader, WireError,
    HEADER_SIZE,
};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tracing::Instrument as _;

use super::dispatch;
use super::handler::Outcome;
use super::StreamState;
use crate::budget::{RequestBudget, Reservation, STREAM_WAIT};
use crate::listener::{Conn, ConnectionContext};
use crate::metrics::Protocol;
use eddy_replicated::stream::error::StreamError;

/// Bytes made room for when the next frame's size is not known yet.
const READ_CHUNK: usize = 8 * 1024;
/// Replies up to this size are written as one buffer.
const COALESCE_BYTES: usize = 64 * 1024;
/// Frames read ahead while a deferred request waits (then reading pauses until it is answered).
const MAX_HELD: usize = 64;
/// The requests that may wait, and so may be cancelled (0.12.2 wire).
const DEFERRED_CODES: [u32; 2] = [
    eddy_codec::stream::CommandCode::PollMessagesDeferred.code(),
    eddy_codec::stream::CommandCode::FetchMessages.code(),
];
/// `CANCEL_DEFERRED_REQUEST`.
const CANCEL_CODE: u32 = eddy_codec::stream::CommandCode::CancelDeferredRequest.code();

/// Why a connection stopped reading frames.
#[derive(Debug, thiserror::Error)]
enum FrameError {
    /// The header cannot start a valid frame (size out of bounds, unknown command byte).
    #[error("invalid frame")]
    Invalid(#[source] WireError),
    /// The peer closed in the middle of a frame.
    #[error("connection closed inside a frame ({have} bytes buffered)")]
    Truncated {
        /// Bytes of the incomplete frame.
        have: usize,
    },
    /// The socket failed.
    #[error("socket failed")]
    Io(#[source] io::Error),
    /// An answer could not be written within `stream_write_timeout_ms` (the client stopped
    /// reading).
    #[error("write timed out")]
    WriteTimeout,
    /// A frame of `len` bytes found no room in the request budget within
    /// [`STREAM_WAIT`]: answered `TransientNotAccepted`, its body skipped.
    #[error("no room for a {len}-byte frame in the request budget")]
    Busy {
        /// The frame's size, header included.
        len: usize,
    },
    /// A frame holding room in the request budget did not finish arriving within
    /// `stream_frame_timeout_ms` of getting it (a trickled frame must not keep its room).
    #[error(
        "a frame holding room in the request budget did not arrive within stream_frame_timeout_ms"
    )]
    SlowFrame,
}

/// One whole frame and the budget its bytes hold until it has been answered.
#[derive(Debug)]
struct Frame {
    header: HeaderBytes,
    body: Bytes,
    _reserved: Option<Reservation>,
}

/// Accumulates bytes until a whole frame is buffered.
#[derive(Debug)]
struct FrameReader {
    buf: BytesMut,
    max_frame: u32,
    /// The budget reserved for the frame being read (one above `UNBUDGETED_FRAME`), and by
    /// when the rest of that frame must have arrived.
    reserved: Option<Reservation>,
    reserved_until: Option<tokio::time::Instant>,
    /// How long a frame that holds room in the budget may take to arrive.
    frame_timeout: Duration,
    /// Since when the frame being read has waited for room in the budget.
    waiting_since: Option<Instant>,
    /// Bytes of a refused frame's body still to be skipped.
    skip: usize,
}

impl FrameReader {
    fn new(max_frame: u32) -> Self {
        Self {
            buf: BytesMut::with_capacity(READ_CHUNK),
            max_frame,
            reserved: None,
            reserved_until: None,
            frame_timeout: Duration::from_millis(crate::config::DEFAULT_STREAM_FRAME_TIMEOUT_MS),
            waiting_since: None,
            skip: 0,
        }
    }

    /// Reserves a `len`-byte frame in `budget`, waiting at most [`STREAM_WAIT`] in all (the
    /// wait resumes where it was when the read was interrupted). Cancel-safe.
    async fn reserve(&mut self, budget: &RequestBudget, len: usize) -> Result<(), FrameError> {
        let bytes = len as u64;
        let reserved = if let Some(since) = self.waiting_since {
            wait(budget, bytes, since).await?
        } else if let Some(reserved) = budget.try_reserve(bytes) {
            reserved
        } else {
            let since = Instant::now();
            self.waiting_since = Some(since);
            budget.count_wait();
            wait(budget, bytes, since).await?
        };
        self.waiting_since = None;
        self.reserved = Some(reserved);
        self.reserved_until = Some(tokio::time::Instant::now() + self.frame_timeout);
        Ok(())
    }

    /// Gives up the frame whose header is buffered (it found no room in the budget): returns
    /// its header and skips its body, buffered or still to come.
    fn refuse(&mut self, len: usize) -> HeaderBytes {
        self.waiting_since = None;
        let mut header = [0u8; HEADER_SIZE];
        header.copy_from_slice(&self.buf[..HEADER_SIZE]);
        let buffered = self.buf.len().min(len);
        self.buf.advance(buffered);
        self.skip = len - buffered;
        header
    }

    /// The next whole frame, `None` on a clean EOF between frames. Cancel-safe.
    async fn next<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        budget: &RequestBudget,
    ) -> Result<Option<Frame>, FrameError> {
        loop {
            if self.skip > 0 {
                let skipped = self.skip.min(self.buf.len());
                self.buf.advance(skipped);
                self.skip -= skipped;
            }
            let len = if self.skip > 0 {
                self.buf.reserve(READ_CHUNK);
                None
            } else {
                peek_frame_len(&self.buf, self.max_frame).map_err(FrameError::Invalid)?
            };
            match len {
                Some(len) if self.buf.len() >= len => {
                    let frame = self.buf.split_to(len);
                    if len > COALESCE_BYTES {
                        // A large frame gets its allocation to itself (the few bytes read past
                        // it move to a fresh buffer), so a send can stamp its batch in place.
                        let rest = std::mem::take(&mut self.buf);
                        self.buf.reserve(READ_CHUNK.max(rest.len()));
                        self.buf.extend_from_slice(&rest);
                    }
                    let frame = frame.freeze();
                    let mut header = [0u8; HEADER_SIZE];
                    header.copy_from_slice(&frame[..HEADER_SIZE]);
                    self.reserved_until = None;
                    return Ok(Some(Frame {
                        header,
                        body: frame.slice(HEADER_SIZE..),
                        _reserved: self.reserved.take(),
                    }));
                }
                // The size passed the limit: room for exactly the rest of this frame, once a
                // frame too large to read unbudgeted holds its bytes in the budget (and then
                // only once the buffer it has is full, so a peer that sends a header and
                // stalls costs no more than its small buffer).
                Some(len) => {
                    if self.reserved.is_none() && RequestBudget::needs_reservation(len as u64) {
                        self.reserve(budget, len).await?;
                    }
                    if self.reserved.is_none() || self.buf.len() == self.buf.capacity() {
                        self.buf.reserve(len - self.buf.len());
                    }
                }
                None => self.buf.reserve(READ_CHUNK),
            }
            let read = match self.reserved_until {
                Some(until) => tokio::time::timeout_at(until, io.read_buf(&mut self.buf))
                    .await
                    .map_err(|_| FrameError::SlowFrame)?,
                None => io.read_buf(&mut self.buf).await,
            }
            .map_err(FrameError::Io)?;
            if read == 0 {
                return if self.buf.is_empty() && self.skip == 0 {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated {
                        have: self.buf.len() + self.skip,
                    })
                };
            }
        }
    }
}

/// Waits for `bytes` of `budget` until [`STREAM_WAIT`] after `since`.
async fn wait(
    budget: &RequestBudget,
    bytes: u64,
    since: Instant,
) -> Result<Reservation, FrameError> {
    let deadline = tokio::time::Instant::from_std(since + STREAM_WAIT);
    tokio::time::timeout_at(deadline, budget.reserve_in_turn(bytes))
        .await
        .map_err(|_elapsed| FrameError::Busy {
            len: usize::try_from(bytes).unwrap_or(usize::MAX),
        })
}

/// Writes `chunks` in order and flushes.
async fn write_chunks<W: AsyncWrite + Unpin>(io: &mut W, chunks: &[Bytes]) -> io::Result<()> {
    let total: usize = chunks.iter().map(Bytes::len).sum();
    if chunks.len() == 1 {
        io.write_all(&chunks[0]).await?;
    } else if total <= COALESCE_BYTES {
        let mut buf = Vec::with_capacity(total);
        for chunk in chunks {
            buf.extend_from_slice(chunk);
        }
        io.write_all(&buf).await?;
    } else if io.is_write_vectored() {
        let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let written = io.write_vectored(rest).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut rest, written);
        }
    } else {
        for chunk in chunks {
            io.write_all(chunk).await?;
        }
    }
    io.flush().await
}

/// Serves one stream-protocol connection until EOF, error, eviction or drain.
pub async fn serve_connection(socket: Conn, ctx: ConnectionContext) {
    let client_id = ctx
        .shared
        .stream
        .clients
        .connect(ctx.peer.to_string(), Transport::Tcp);
    let span = tracing::debug_span!("client", client_id);
    serve(socket, ctx, client_id).instrument(span).await;
}

async fn serve(mut io: Conn, ctx: ConnectionContext, client_id: ClientId) {
    let shared = Arc::clone(&ctx.shared);
    let state = &shared.stream;
    if let Err(e) = run(&mut io, &ctx, state, client_id).await {
        tracing::debug!(error = %e, "connection closed");
    }
    // EOF, error, eviction or drain: the same cleanup as a logout.
    state.leave_all_groups(client_id);
    state.clients.disconnect(client_id);
    let _ = io.shutdown().await;
}

/// The lockstep loop.
async fn run(
    io: &mut Conn,
    ctx: &ConnectionContext,
    state: &StreamState,
    client_id: ClientId,
) -> Result<(), FrameError> {
    let metrics = Arc::clone(&ctx.shared.metrics);
    let limits = state.limits;
    let mut reader = FrameReader::new(limits.max_prelogin_frame_size);
    reader.frame_timeout = limits.frame_timeout;
    let stale = state.heartbeat.map(stale_after);
    let mut last_activity = Instant::now();
    let mut stale_from = last_activity;
    // Since when the connection has had no session (the login deadline runs from there).
    let mut unauthenticated_since = Some(last_activity);
    // The last non-zero client id seen in a header (evictions must carry one).
    let mut last_client: u128 = 1;
    // Frames read while a deferred request waited, answered in order before reading more.
    let mut held: std::collections::VecDeque<Result<Option<Frame>, FrameError>> =
        std::collections::VecDeque::new();
    loop {
        let logged_in = state.clients.session(client_id).is_some();
        match (logged_in, unauthenticated_since) {
            (true, Some(_)) => unauthenticated_since = None,
            (false, None) => unauthenticated_since = Some(Instant::now()),
            _ => {}
        }
        // Before login only small frames (login, ping, the handshake commands) are read.
        reader.max_frame = if logged_in {
            state.max_frame_size
        } else {
            limits.max_prelogin_frame_size
        };
        let stale_at = stale.map(|s| tokio::time::Instant::from_std(stale_from + s));
        let (closes_at, reason) = close_deadline(unauthenticated_since, last_activity, limits);
        let frame = if let Some(frame) = held.pop_front() {
            frame
        } else {
            tokio::select! {
                biased;
                () = ctx.drain.cancelled() => return Ok(()),
                () = sleep_until(closes_at.map(tokio::time::Instant::from_std)) => {
                    close_expired(io, state, client_id, logged_in, EvictionHeader::new(last_client, reason)).await;
                    return Ok(());
                }
                () = sleep_until(stale_at) => {
                    if evict_stale_member(io, state, client_id, last_client).await {
                        return Ok(());
                    }
                    stale_from = Instant::now();
                    continue;
                }
                frame = reader.next(io, &ctx.shared.budget) => frame,
            }
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(FrameError::Busy { len }) => {
                // No room for its body: answered at once, its body skipped as it arrives.
                let started = Instant::now();
                let header =
                    RequestHeader::decode(&reader.refuse(len)).map_err(FrameError::Invalid)?;
                ctx.shared.budget.refused();
                tracing::debug!(
                    client_id,
                    len,
                    "frame refused: no room in --max-inflight-request-bytes"
                );
                not_accepted(io, &metrics, &header, started, limits).await?;
                last_activity = Instant::now();
                stale_from = last_activity;
                continue;
            }
            Err(e) => return Err(e),
        };
        // Only request frames are valid from a client; anything else closes the connection.
        let header = RequestHeader::decode(&frame.header).map_err(FrameError::Invalid)?;
        if header.client != 0 {
            last_client = header.client;
        }
        let close = answer(
            io,
            ctx,
            client_id,
            logged_in,
            &header,
            frame.body,
            &mut reader,
            &mut held,
        )
        .await?;
        last_activity = Instant::now();
        stale_from = last_activity;
        if close {
            return Ok(());
        }
    }
}

/// Runs one request and writes its answer (a deferred one while reading the frames that follow
/// it into `held`); true when the connection is to close after too many failed logins or
/// password changes.
#[allow(clippy::too_many_arguments)]
async fn answer(
    io: &mut Conn,
    ctx: &ConnectionContext,
    client_id: ClientId,
    logged_in: bool,
    header: &RequestHeader,
    body: Bytes,
    reader: &mut FrameReader,
    held: &mut std::collections::VecDeque<Result<Option<Frame>, FrameError>>,
) -> Result<bool, FrameError> {
    let state = &ctx.shared.stream;
    let metrics = &ctx.shared.metrics;
    let limits = state.limits;
    let started = Instant::now();
    let deferred = logged_in
        && header.operation == eddy_wire::stream::Operation::NonReplicated.as_u8()
        && DEFERRED_CODES.contains(&header.command_code);
    let work = dispatch::handle(state, client_id, header, body);
    let (metric, result) = if deferred {
        let answer = wait_or_cancel(work, header, io, reader, &ctx.shared.budget, held).await;
        let Some(answer) = answer else {
            tracing::debug!(
                client_id,
                request = header.request,
                "deferred request cancelled"
            );
            not_accepted(io, metrics, header, started, limits).await?;
            return Ok(false);
        };
        answer
    } else {
        work.await
    };
    if matches!(result, Ok(Outcome::NoReply)) {
        // A cancel that found nothing waiting: never answered.
        metrics.record_request(Protocol::Stream, metric, true, started.elapsed());
        return Ok(false);
    }
    let evicted = matches!(result, Ok(Outcome::Evict(_)));
    let wrong_password = matches!(result, Err(StreamError::WrongPassword));
    let (chunks, ok) = reply(header, result);
    metrics.record_request(Protocol::Stream, metric, ok, started.elapsed());
    write_bounded(io, &chunks, limits).await?;
    if (evicted || wrong_password)
        && state.clients.login_failures(client_id) >= state.login.max_failures_per_connection
    {
        tracing::info!(client_id, peer = %ctx.peer, "closing a connection after too many failed logins or password changes");
        state.login.closed_connection();
        return Ok(true);
    }
    Ok(false)
}

/// When a connection is closed for want of activity, and why: `stream_login_timeout_ms`
/// after it was left without a session (`unauthenticated_since`), else
/// `stream_idle_timeout_ms` after its last request (if set).
fn close_deadline(
    unauthenticated_since: Option<Instant>,
    last_activity: Instant,
    limits: super::ConnectionLimits,
) -> (Option<Instant>, EvictionReason) {
    match unauthenticated_since {
        Some(since) => (
            Some(since + limits.login_timeout),
            EvictionReason::NoSession,
        ),
        None => (
            limits.idle_timeout.map(|idle| last_activity + idle),
            EvictionReason::StaleClient,
        ),
    }
}

/// Ends a connection past its [`close_deadline`]: a session leaves its consumer groups, and
/// the client is sent `eviction` (best effort).
async fn close_expired(
    io: &mut Conn,
    state: &StreamState,
    client_id: ClientId,
    logged_in: bool,
    eviction: EvictionHeader,
) {
    if logged_in {
        tracing::info!(
            client_id,
            "closing a session idle for longer than stream_idle_timeout_ms"
        );
        state.leave_all_groups(client_id);
    } else {
        tracing::info!(
            client_id,
            "closing a connection not logged in within stream_login_timeout_ms"
        );
    }
    let _ = write_bounded(
        io,
        &[Bytes::copy_from_slice(&eviction.encode())],
        state.limits,
    )
    .await;
}

/// A consumer-group member gone stale (no heartbeat in time) leaves its groups and is sent an
/// eviction (best effort): true then, and the connection ends. False for a client in no group.
async fn evict_stale_member(
    io: &mut Conn,
    state: &StreamState,
    client_id: ClientId,
    last_client: u128,
) -> bool {
    if !state.groups().is_member_anywhere(client_id) {
        return false;
    }
    tracing::info!(client_id, "evicting a stale consumer-group member");
    state.leave_all_groups(client_id);
    let eviction = EvictionHeader::new(last_client, EvictionReason::StaleClient);
    let _ = write_bounded(
        io,
        &[Bytes::copy_from_slice(&eviction.encode())],
        state.limits,
    )
    .await;
    true
}

/// Answers `header`'s request, which was not run, with `TransientNotAccepted` (the client
/// may retry), counting it as a failed request started at `started`.
async fn not_accepted(
    io: &mut Conn,
    metrics: &crate::metrics::Metrics,
    header: &RequestHeader,
    started: Instant,
    limits: super::ConnectionLimits,
) -> Result<(), FrameError> {
    let code = eddy_codec::stream::ErrorCode::TransientNotAccepted;
    metrics.record_request(
        Protocol::Stream,
        dispatch::metric_of(header),
        false,
        started.elapsed(),
    );
    write_bounded(io, &status_reply(header, code), limits).await
}

/// The frame answering `header`'s request with `result`, and whether the request counts as a
/// success (failures are logged: a server fault as a warning, with its whole chain).
fn reply(header: &RequestHeader, result: Result<Outcome, StreamError>) -> (Vec<Bytes>, bool) {
    match result {
        Ok(Outcome::Reply(payload)) => match ReplyFrame::success_chunks(header, payload) {
            Ok(frame) => (frame.into_chunks(), true),
            Err(e) => {
                tracing::warn!(error = %e, "reply too large to frame");
                (
                    status_reply(header, eddy_codec::stream::ErrorCode::Error),
                    false,
                )
            }
        },
        Ok(Outcome::Evict(eviction)) => (vec![Bytes::copy_from_slice(&eviction.encode())], false),
        Ok(Outcome::NoReply) => (Vec::new(), true),
        Err(e) => {
            if e.is_server_fault() {
                // The whole chain: a storage failure names its file and the OS error.
                let error = eddy_replicated::error_chain(&e);
                tracing::warn!(%error, code = e.code().code(), "request failed");
            } else {
                tracing::debug!(error = %e, code = e.code().code(), "request refused");
            }
            (status_reply(header, e.code()), false)
        }
    }
}

/// Runs a deferred request's `work` while reading the frames that follow it into `held` (at
/// most [`MAX_HELD`], and none after a frame that could not be read whole): `None` when one of
/// them cancels it (a `CANCEL_DEFERRED_REQUEST` with its request id; the cancel is not
/// kept), its answer otherwise.
async fn wait_or_cancel<F>(
    work: F,
    header: &RequestHeader,
    io: &mut Conn,
    reader: &mut FrameReader,
    budget: &RequestBudget,
    held: &mut std::collections::VecDeque<Result<Option<Frame>, FrameError>>,
) -> Option<F::Output>
where
    F: std::future::Future,
{
    tokio::pin!(work);
    let mut reading = held.is_empty();
    loop {
        tokio::select! {
            biased;
            answer = &mut work => return Some(answer),
            next = reader.next(io, budget), if reading && held.len() < MAX_HELD => {
                match next {
                    Ok(Some(frame)) => {
                        let cancels = RequestHeader::decode(&frame.header).is_ok_and(|h| {
                            h.command_code == CANCEL_CODE
                                && h.operation == eddy_wire::stream::Operation::NonReplicated.as_u8()
                                && h.request == header.request
                                && h.session == header.session
                        });
                        if cancels {
                            return None;
                        }
                        held.push_back(Ok(Some(frame)));
                    }
                    // EOF, a frame too large for the budget, a broken one: handled in turn.
                    other => {
                        held.push_back(other);
                        reading = false;
                    }
                }
            }
        }
    }
}

/// [`write_chunks`] within `stream_write_timeout_ms`.
async fn write_bounded(
    io: &mut Conn,
    chunks: &[Bytes],
    limits: super::ConnectionLimits,
) -> Result<(), FrameError> {
    match tokio::time::timeout(limits.write_timeout, write_chunks(io, chunks)).await {
        Ok(written) => written.map_err(FrameError::Io),
        Err(_elapsed) => Err(FrameError::WriteTimeout),
    }
}

fn status_reply(header: &RequestHeader, code: eddy_codec::stream::ErrorCode) -> Vec<Bytes> {
    match ReplyFrame::status(header, code) {
        Ok(frame) => frame.into_chunks(),
        // An empty body always frames.
        Err(_) => unreachable!("a header-only reply always fits a frame"),
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body_len: usize) -> Vec<u8> {
        let mut header =
            RequestHeader::new(eddy_wire::stream::Operation::NonReplicated, body_len).unwrap();
        header.client = 9;
        header.command_code = 1;
        let mut out = header.encode().to_vec();
        out.extend(std::iter::repeat_n(7u8, body_len));
        out
    }

    #[tokio::test]
    async fn reads_frames_split_anywhere() {
        let budget = RequestBudget::new(1 << 20);
        let mut bytes = frame(3);
        bytes.extend(frame(0));
        for cut in [1, 51, 52, 255, 256, 258, 259, 300] {
            let (mut a, mut b) = tokio::io::duplex(1024);
            let data = bytes.clone();
            let writer = tokio::spawn(async move {
                a.write_all(&data[..cut]).await.unwrap();
                tokio::task::yield_now().await;
                a.write_all(&data[cut..]).await.unwrap();
            });
            let mut reader = FrameReader::new(1 << 20);
            let first = reader.next(&mut b, &budget).await.unwrap().unwrap();
            assert_eq!(&first.header[..], &bytes[..256]);
            assert_eq!(&first.body[..], &[7, 7, 7]);
            let second = reader.next(&mut b, &budget).await.unwrap().unwrap();
            assert!(second.body.is_empty());
            writer.await.unwrap();
            assert!(
                reader.next(&mut b, &budget).await.unwrap().is_none(),
                "clean eof"
            );
        }
    }

    #[tokio::test]
    async fn oversized_and_truncated_frames_are_errors() {
        let budget = RequestBudget::new(1 << 20);
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&frame(2000)[..300]).await.unwrap();
        let mut reader = FrameReader::new(1024);
        assert!(matches!(
            reader.next(&mut b, &budget).await,
            Err(FrameError::Invalid(WireError::FrameTooLarge { .. }))
        ));
        assert!(
            reader.buf.capacity() < 64 * 1024,
            "no room made for the body"
        );

        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&frame(10)[..260]).await.unwrap();
        drop(a);
        let mut reader = FrameReader::new(1024);
        assert!(matches!(
            reader.next(&mut b, &budget).await,
            Err(FrameError::Truncated { have: 260 })
        ));

        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let mut small = frame(0);
        small[48..52].copy_from_slice(&100u32.to_le_bytes());
        a.write_all(&small).await.unwrap();
        let mut reader = FrameReader::new(1024);
        assert!(matches!(
            reader.next(&mut b, &budget).await,
            Err(FrameError::Invalid(WireError::FrameTooSmall { .. }))
        ));
    }

    #[tokio::test]
    async fn large_frames_hold_the_budget_and_refused_ones_are_skipped() {
        let budget = RequestBudget::new(1 << 20);
        let big = frame(100 * 1024);
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let mut reader = FrameReader::new(1 << 20);
        let writer = {
            let big = big.clone();
            tokio::spawn(async move {
                a.write_all(&big).await.unwrap();
                a
            })
        };
        let read = reader.next(&mut b, &budget).await.unwrap().unwrap();
        assert_eq!(read.body.len(), 100 * 1024);
        assert_eq!(budget.in_flight(), big.len() as u64, "held until answered");
        drop(read);
        assert_eq!(budget.in_flight(), 0);
        let mut a = writer.await.unwrap();

        // No room: the read waits (and can be interrupted) without making room for the body.
        let all = budget.try_reserve(1 << 20).unwrap();
        a.write_all(&big[..300]).await.unwrap();
        let waited =
            tokio::time::timeout(Duration::from_millis(100), reader.next(&mut b, &budget)).await;
        assert!(waited.is_err(), "waits for room");
        assert!(
            reader.buf.capacity() < 64 * 1024,
            "no room made for the body"
        );
        assert!(reader.waiting_since.is_some());
        // Refused (as after STREAM_WAIT): the rest of its body is skipped, the next frame read.
        let header = reader.refuse(big.len());
        assert_eq!(&header[..], &big[..HEADER_SIZE]);
        drop(all);
        let mut rest = big[300..].to_vec();
        rest.extend(frame(5));
        let writer = tokio::spawn(async move { a.write_all(&rest).await.unwrap() });
        let next = reader.next(&mut b, &budget).await.unwrap().unwrap();
        assert_eq!(&next.body[..], &[7; 5]);
        assert_eq!(budget.in_flight(), 0);
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn vectored_and_coalesced_writes_keep_order() {
        for sizes in [vec![10usize], vec![3, 4, 5], vec![40_000, 40_000, 7]] {
            let chunks: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, n)| Bytes::from(vec![u8::try_from(i).unwrap(); *n]))
                .collect();
            let (mut a, mut b) = tokio::io::duplex(1 << 20);
            write_chunks(&mut a, &chunks).await.unwrap();
            drop(a);
            let mut out = Vec::new();
            b.read_to_end(&mut out).await.unwrap();
            let expected: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(out, expected);
        }
    }
}
