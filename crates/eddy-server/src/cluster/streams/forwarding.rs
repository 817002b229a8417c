//! Stream writes a member does not lead, carried to the leader over the (authenticated) peer
//! link: a metadata operation to the metadata group's leader, a batch or a segment deletion
//! to the partition group's leader. The leader does it as its own (it never forwards again)
//! and answers with the outcome, so a client connected to any member is served: the newest
//! Iggy SDKs send every request to the member they reached.
//!
//! Request: `kind u8 (STREAM_FORWARD_KIND) · op u8 · fields`:
//! * op 1, commit: the operation as the metadata group's entries encode it;
//! * op 2, append: `stream u32 · topic u32 · partition u32 · count u32 · the admitted batch`;
//! * op 3, delete segments: `stream u32 · topic u32 · partition u32 · count u32`;
//! * op 4, transfer: `group u64 · to u64` (a membership change runs on member `to`).
//!
//! Answer: `status u8` then
//! * 0, done: nothing more (commit, delete segments) or `base_offset u64` (append);
//! * 1, refused: `tag u8 · detail` (0: the metadata state's refusal, bincode; 1: no such
//!   partition, `stream u32 · topic u32 · partition u32`; 2: transient, text; 3: text);
//! * 2, the member asked does not lead the group (or its leadership is moving): nothing was
//!   proposed, so the forwarding member asks again, whoever leads then, for a bounded time.
//!
//! Every integer is little-endian. A malformed request is refused (tag 3), never guessed.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use eddy_consensus::{GroupId, NodeId};
use eddy_stream_store::metadata::{decode_op, encode_op};
use eddy_stream_store::{MetadataError, MetadataOp, PartitionAddr, StampableBatch};

use super::ClusterStreams;
use eddy_replicated::groups::{partition_group_id, METADATA_GROUP};
use eddy_replicated::stream::error::ClusterError;

/// The first byte of a forwarded stream write on the peer link.
pub const STREAM_FORWARD_KIND: u8 = 3;

/// How long a write whose group's leadership is moving keeps being forwarded (a transfer
/// takes a round trip, an election about an election timeout); event changes wait the same.
pub const FORWARD_PATIENCE: Duration = Duration::from_secs(5);

/// The pause between two tries while a group's leadership moves.
pub const FORWARD_RETRY: Duration = Duration::from_millis(50);

const OP_COMMIT: u8 = 1;
const OP_APPEND: u8 = 2;
const OP_DELETE_SEGMENTS: u8 = 3;
const OP_TRANSFER: u8 = 4;

const DONE: u8 = 0;
const REFUSED: u8 = 1;
const NOT_THERE: u8 = 2;

const TAG_METADATA: u8 = 0;
const TAG_NO_PARTITION: u8 = 1;
const TAG_TRANSIENT: u8 = 2;
const TAG_OTHER: u8 = 3;

/// A forwarded stream write, decoded.
#[derive(Debug)]
enum Forwarded {
    Commit(MetadataOp),
    Append {
        addr: PartitionAddr,
        count: u32,
        batch: Bytes,
    },
    DeleteSegments {
        addr: PartitionAddr,
        count: u32,
    },
    /// Hand the group's leadership to `to` (a membership change runs there).
    Transfer {
        group: GroupId,
        to: NodeId,
    },
}

/// What one forwarding attempt came to.
enum Sent {
    /// The leader's answer after the status byte (done).
    Done(Bytes),
    /// Nobody (else) leads the group now, or the member asked does not: nothing was proposed.
    NotThere,
    Failed(ClusterError),
}

fn put_addr(b: &mut Vec<u8>, addr: PartitionAddr) {
    b.put_u32_le(addr.stream_id);
    b.put_u32_le(addr.topic_id);
    b.put_u32_le(addr.partition_id);
}

fn get_addr(b: &mut Bytes) -> Option<PartitionAddr> {
    (b.remaining() >= 12).then(|| PartitionAddr {
        stream_id: b.get_u32_le(),
        topic_id: b.get_u32_le(),
        partition_id: b.get_u32_le(),
    })
}

fn request(op: u8, capacity: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + capacity);
    b.put_u8(STREAM_FORWARD_KIND);
    b.put_u8(op);
    b
}

fn decode_request(mut request: Bytes) -> Option<Forwarded> {
    if request.remaining() < 2 || request.get_u8() != STREAM_FORWARD_KIND {
        return None;
    }
    match request.get_u8() {
        OP_COMMIT => decode_op(&request).ok().map(Forwarded::Commit),
        OP_APPEND => {
            let addr = get_addr(&mut request)?;
            let count = (request.remaining() >= 4).then(|| request.get_u32_le())?;
            Some(Forwarded::Append {
                addr,
                count,
                batch: request,
            })
        }
        OP_DELETE_SEGMENTS => {
            let addr = get_addr(&mut request)?;
            let count = (request.remaining() == 4).then(|| request.get_u32_le())?;
            Some(Forwarded::DeleteSegments { addr, count })
        }
        OP_TRANSFER if request.remaining() == 16 => Some(Forwarded::Transfer {
            group: GroupId(request.get_u64_le()),
            to: request.get_u64_le(),
        }),
        _ => None,
    }
}

fn done(body: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(1 + body.len());
    b.put_u8(DONE);
    b.extend_from_slice(body);
    b.into()
}

fn refusal(tag: u8, detail: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(2 + detail.len());
    b.put_u8(REFUSED);
    b.put_u8(tag);
    b.extend_from_slice(detail);
    b.into()
}

/// The answer to a forwarded write that failed with `e` on the member asked.
/// The answer of a member that does not lead the group: nothing was proposed, ask again.
pub fn not_there() -> Bytes {
    Bytes::from_static(&[NOT_THERE])
}

fn answer_error(e: &ClusterError) -> Bytes {
    match e {
        ClusterError::NotLeader(_) => not_there(),
        ClusterError::Metadata(refused) => refusal(TAG_METADATA, &refused.to_bytes()),
        ClusterError::NoPartition(addr) => {
            let mut detail = Vec::with_capacity(12);
            put_addr(&mut detail, *addr);
            refusal(TAG_NO_PARTITION, &detail)
        }
        e if e.is_transient() => refusal(TAG_TRANSIENT, e.to_string().as_bytes()),
        e => refusal(TAG_OTHER, e.to_string().as_bytes()),
    }
}

fn decode_answer(mut answer: Bytes) -> Sent {
    let malformed = || {
        Sent::Failed(ClusterError::Forwarded {
            transient: true,
            message: "the leader's answer to a forwarded write was malformed".into(),
        })
    };
    if answer.is_empty() {
        return malformed();
    }
    match answer.get_u8() {
        DONE => Sent::Done(answer),
        NOT_THERE if answer.is_empty() => Sent::NotThere,
        REFUSED if !answer.is_empty() => {
            let tag = answer.get_u8();
            let text = || String::from_utf8_lossy(&answer).into_owned();
            Sent::Failed(match tag {
                TAG_METADATA => match MetadataError::from_bytes(&answer) {
                    Some(refused) => ClusterError::Metadata(refused),
                    None => return malformed(),
                },
                TAG_NO_PARTITION => match get_addr(&mut answer) {
                    Some(addr) if answer.is_empty() => ClusterError::NoPartition(addr),
                    _ => return malformed(),
                },
                TAG_TRANSIENT => ClusterError::Forwarded {
                    transient: true,
                    message: text(),
                },
                TAG_OTHER => ClusterError::Forwarded {
                    transient: false,
                    message: text(),
                },
                _ => return malformed(),
            })
        }
        _ => malformed(),
    }
}

impl ClusterStreams {
    /// Carries requests for groups this member does not lead to their leaders over
    /// `forwarder` (without one, such requests are refused with `NotLeader`).
    #[must_use]
    pub fn with_forwarder(mut self, forwarder: crate::cluster::transport::Forwarder) -> Self {
        self.forwarder = Some(forwarder);
        self
    }

    /// The leader of `group` as this member knows it; when none is known, the metadata
    /// leader (which answers "not there" unless it leads the group: asked again).
    fn leader_of(&self, group: GroupId) -> Option<NodeId> {
        let view = self.runner.view();
        view.get(group)
            .and_then(|v| v.leader)
            .or_else(|| view.get(METADATA_GROUP).and_then(|v| v.leader))
    }

    /// Sends `request` once to `group`'s leader.
    async fn send_once(&self, group: GroupId, request: &[u8]) -> Sent {
        let Some(forwarder) = &self.forwarder else {
            return Sent::Failed(ClusterError::NotLeader("group (no forwarding here)"));
        };
        match self.leader_of(group) {
            Some(leader) if leader != self.me => match forwarder.request(leader, request).await {
                Ok(answer) => decode_answer(answer),
                // It may have reached the leader: never sent twice, the client decides.
                Err(e) => Sent::Failed(ClusterError::Forwarded {
                    transient: true,
                    message: format!("forwarding to member {leader}: {e}"),
                }),
            },
            _ => Sent::NotThere,
        }
    }

    /// Forwards `request` to `group`'s leader until one takes it, this member leads the
    /// group (`Ok(None)`: do it here), or [`FORWARD_PATIENCE`] ran out.
    async fn forward(
        &self,
        group: GroupId,
        request: &[u8],
        what: &'static str,
    ) -> Result<Option<Bytes>, ClusterError> {
        let patience = tokio::time::Instant::now() + FORWARD_PATIENCE;
        loop {
            if self.leads(group) || self.forwarder.is_none() {
                return Ok(None);
            }
            match self.send_once(group, request).await {
                Sent::Done(body) => return Ok(Some(body)),
                Sent::Failed(e) => return Err(e),
                Sent::NotThere if tokio::time::Instant::now() < patience => {
                    tokio::time::sleep(FORWARD_RETRY).await;
                }
                Sent::NotThere => return Err(ClusterError::NotLeader(what)),
            }
        }
    }

    /// Commits a metadata operation through the metadata group: proposed here when this
    /// member leads it, otherwise forwarded to its leader. Returns once it is committed and
    /// applied here.
    ///
    /// # Errors
    /// No leader within [`FORWARD_PATIENCE`], not committed, or refused by the state.
    pub async fn commit(&self, op: &MetadataOp) -> Result<(), ClusterError> {
        if !self.is_metadata_leader() && self.forwarder.is_some() {
            let mut request = request(OP_COMMIT, 64);
            request.extend(encode_op(op).map_err(|e| ClusterError::Encode(e.to_string()))?);
            if self
                .forward(METADATA_GROUP, &request, "metadata group")
                .await?
                .is_some()
            {
                // Applied here too before the caller reads what it made (a created stream's
                // details): the leader had committed it when this member asks for its
                // commit index, so this member waits until it applied that far.
                return self.linearize_metadata().await;
            }
        }
        self.commit_here(op).await.map(drop)
    }

    /// Whether a batch for `addr` is appended here ([`ClusterStreams::append`]) rather than
    /// forwarded ([`ClusterStreams::forward_append`]): this member leads the partition's
    /// group, or it cannot forward.
    pub fn appends_here(&self, addr: PartitionAddr) -> bool {
        self.forwarder.is_none()
            || self
                .groups
                .get(addr)
                .is_some_and(|(uid, _)| self.leads(partition_group_id(uid)))
    }

    /// Sends an admitted batch of `count` messages for `addr` to the partition's leader,
    /// which appends it as its own; returns the batch's base offset.
    ///
    /// # Errors
    /// No such partition, no leader within [`FORWARD_PATIENCE`] (or this member became it:
    /// `NotLeader`, the client retries), or the leader's refusal.
    pub async fn forward_append(
        &self,
        addr: PartitionAddr,
        count: u32,
        batch: &[u8],
    ) -> Result<u64, ClusterError> {
        let (uid, _) = self
            .groups
            .get(addr)
            .ok_or(ClusterError::NoPartition(addr))?;
        let mut request = request(OP_APPEND, 16 + batch.len());
        put_addr(&mut request, addr);
        request.put_u32_le(count);
        request.extend_from_slice(batch);
        match self
            .forward(partition_group_id(uid), &request, "partition's group")
            .await?
        {
            Some(mut body) if body.len() == 8 => Ok(body.get_u64_le()),
            Some(_) => Err(ClusterError::Forwarded {
                transient: true,
                message: "the leader's answer to a forwarded batch was malformed".into(),
            }),
            None => Err(ClusterError::NotLeader("partition's group")),
        }
    }

    /// `DELETE_SEGMENTS` of a replicated partition: done by the partition's leader (this
    /// member, or the one it is forwarded to); see `delete_segments_here`.
    ///
    /// # Errors
    /// No leader, not committed, or no such partition.
    pub async fn delete_segments(
        &self,
        addr: PartitionAddr,
        count: u32,
    ) -> Result<(), ClusterError> {
        if !self.appends_here(addr) {
            let (uid, _) = self
                .groups
                .get(addr)
                .ok_or(ClusterError::NoPartition(addr))?;
            let mut request = request(OP_DELETE_SEGMENTS, 16);
            put_addr(&mut request, addr);
            request.put_u32_le(count);
            if self
                .forward(partition_group_id(uid), &request, "partition's group")
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
        self.delete_segments_here(addr, count).await
    }

    /// Answers a stream write another member forwarded to this one: done here as this
    /// member's own (never forwarded again), answered with its outcome, or with "not
    /// there" when this member does not lead the group. `batch` turns a forwarded batch and
    /// its message count into what [`ClusterStreams::append`] takes (`None`: not admissible).
    pub async fn answer_forwarded<B: StampableBatch>(
        &self,
        request: Bytes,
        batch: impl FnOnce(Bytes, u32) -> Option<B>,
    ) -> Bytes {
        let Some(forwarded) = decode_request(request) else {
            return refusal(TAG_OTHER, b"not a forwarded stream write");
        };
        match forwarded {
            Forwarded::Commit(op) => match self.commit_here(&op).await {
                Ok(_) => done(&[]),
                Err(e) => answer_error(&e),
            },
            Forwarded::Append {
                addr,
                count,
                batch: bytes,
            } => {
                let Some(admitted) = batch(bytes, count) else {
                    return refusal(TAG_OTHER, b"the forwarded batch is not admissible");
                };
                match self
                    .append(addr, admitted, crate::clock::now_micros())
                    .await
                {
                    Ok(appended) => done(&appended.base_offset.to_le_bytes()),
                    Err(e) => answer_error(&e),
                }
            }
            Forwarded::DeleteSegments { addr, count } => {
                match self.delete_segments_here(addr, count).await {
                    Ok(()) => done(&[]),
                    Err(e) => answer_error(&e),
                }
            }
            Forwarded::Transfer { group, to } => {
                // Only to a caught-up, live voter; asked again at the changer's next pass.
                self.runner.with(move |node| {
                    node.transfer_leader_if_ready(group, to);
                });
                done(&[])
            }
        }
    }

    /// Asks `group`'s leader (another member) to hand its leadership to this member, once:
    /// a membership change runs here. Its outcome shows as this member's role later.
    pub(super) async fn ask_to_transfer(&self, group: GroupId) {
        let mut request = request(OP_TRANSFER, 16);
        request.put_u64_le(group.0);
        request.put_u64_le(self.me);
        if let Sent::Failed(e) = self.send_once(group, &request).await {
            tracing::debug!(?group, error = %e, "asking for a group's leadership failed");
        }
    }
}

/// For `crate::fuzzing`: decodes `request` as a forwarded stream write and `answer` as the
/// answer to one; each decodes or is refused.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fuzz_forwarded(request: Option<Bytes>, answer: Option<Bytes>) {
    if let Some(request) = request {
        let _ = decode_request(request);
    }
    if let Some(answer) = answer {
        let _ = decode_answer(answer);
    }
}

/// For `crate::fuzzing`: one request of each op and one answer of each status (name, bytes,
/// whether it is an answer).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn forwarded_seeds() -> Vec<(String, Vec<u8>, bool)> {
    let addr = PartitionAddr {
        stream_id: 1,
        topic_id: 2,
        partition_id: 3,
    };
    let mut commit = request(OP_COMMIT, 0);
    commit.extend(encode_op(&MetadataOp::DeleteStream { id: 7 }).unwrap_or_default());
    let mut append = request(OP_APPEND, 0);
    put_addr(&mut append, addr);
    append.put_u32_le(1);
    append.extend_from_slice(&[0; 64]);
    let mut delete = request(OP_DELETE_SEGMENTS, 0);
    put_addr(&mut delete, addr);
    delete.put_u32_le(2);
    let mut transfer = request(OP_TRANSFER, 0);
    transfer.put_u64_le(5);
    transfer.put_u64_le(2);
    let refused = MetadataError::StreamNotFound(4);
    vec![
        ("stream_commit".into(), commit, false),
        ("stream_append".into(), append, false),
        ("stream_delete_segments".into(), delete, false),
        ("stream_transfer".into(), transfer, false),
        ("stream_done".into(), done(&[]).to_vec(), true),
        (
            "stream_appended".into(),
            done(&9u64.to_le_bytes()).to_vec(),
            true,
        ),
        (
            "stream_refused".into(),
            answer_error(&ClusterError::Metadata(refused)).to_vec(),
            true,
        ),
        (
            "stream_not_there".into(),
            answer_error(&ClusterError::NotLeader("x")).to_vec(),
            true,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_stream_store::error::Entity;

    fn addr() -> PartitionAddr {
        PartitionAddr {
            stream_id: 1,
            topic_id: 2,
            partition_id: 3,
        }
    }

    #[test]
    fn requests_round_trip_and_malformed_ones_are_refused() {
        let op = MetadataOp::DeleteStream { id: 7 };
        let mut commit = request(OP_COMMIT, 0);
        commit.extend(encode_op(&op).unwrap());
        assert!(matches!(
            decode_request(commit.into()),
            Some(Forwarded::Commit(MetadataOp::DeleteStream { id: 7 }))
        ));
        let mut append = request(OP_APPEND, 0);
        put_addr(&mut append, addr());
        append.put_u32_le(2);
        append.extend_from_slice(b"batch");
        match decode_request(append.into()) {
            Some(Forwarded::Append {
                addr: a,
                count,
                batch,
            }) => {
                assert_eq!((a, count, &batch[..]), (addr(), 2, &b"batch"[..]));
            }
            other => panic!("{other:?}"),
        }
        let mut delete = request(OP_DELETE_SEGMENTS, 0);
        put_addr(&mut delete, addr());
        delete.put_u32_le(4);
        assert!(matches!(
            decode_request(delete.clone().into()),
            Some(Forwarded::DeleteSegments { count: 4, .. })
        ));
        let mut transfer = request(OP_TRANSFER, 16);
        transfer.put_u64_le(9);
        transfer.put_u64_le(2);
        assert!(matches!(
            decode_request(transfer.into()),
            Some(Forwarded::Transfer {
                group: GroupId(9),
                to: 2
            })
        ));
        // Truncated, trailing, unknown op, another kind, garbage operation.
        let mut trailing = delete.clone();
        trailing.push(0);
        for bad in [
            &delete[..delete.len() - 1],
            &trailing[..],
            &[STREAM_FORWARD_KIND, 9][..],
            &[STREAM_FORWARD_KIND, OP_TRANSFER, 1][..],
            &[2, OP_COMMIT][..],
            &[STREAM_FORWARD_KIND, OP_COMMIT, 0xff, 0xff][..],
            &[][..],
        ] {
            assert!(
                decode_request(Bytes::copy_from_slice(bad)).is_none(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn answers_keep_what_the_client_is_told() {
        assert!(matches!(decode_answer(done(&[])), Sent::Done(b) if b.is_empty()));
        assert!(matches!(
            decode_answer(answer_error(&ClusterError::NotLeader("x"))),
            Sent::NotThere
        ));
        let taken = MetadataError::NameTaken {
            entity: Entity::Stream,
            name: "s".into(),
        };
        assert!(matches!(
            decode_answer(answer_error(&ClusterError::Metadata(taken.clone()))),
            Sent::Failed(ClusterError::Metadata(e)) if e == taken
        ));
        let limit = MetadataError::Limit {
            what: "name length".into(),
            value: 300,
            limit: 255,
        };
        assert!(matches!(
            decode_answer(answer_error(&ClusterError::Metadata(limit.clone()))),
            Sent::Failed(ClusterError::Metadata(e)) if e == limit
        ));
        assert!(matches!(
            decode_answer(answer_error(&ClusterError::NoPartition(addr()))),
            Sent::Failed(ClusterError::NoPartition(a)) if a == addr()
        ));
        assert!(matches!(
            decode_answer(answer_error(&ClusterError::Stale(5))),
            Sent::Failed(e) if e.is_transient()
        ));
        assert!(matches!(
            decode_answer(answer_error(&ClusterError::Encode("bug".into()))),
            Sent::Failed(e) if !e.is_transient()
        ));
        for bad in [
            &[][..],
            &[7][..],
            &[REFUSED][..],
            &[REFUSED, 9][..],
            &[NOT_THERE, 0][..],
        ] {
            assert!(
                matches!(decode_answer(Bytes::copy_from_slice(bad)), Sent::Failed(e) if e.is_transient()),
                "{bad:?}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever a peer sends (a member's certificate is needed to send anything), the
        /// decoders answer or refuse; they never panic.
        #[test]
        fn any_bytes_decode_or_are_refused(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            op in 0u8..5,
            status in 0u8..4,
        ) {
            let mut request = vec![STREAM_FORWARD_KIND, op];
            request.extend_from_slice(&bytes);
            let _ = decode_request(request.into());
            let _ = decode_request(Bytes::copy_from_slice(&bytes));
            let mut answer = vec![status];
            answer.extend_from_slice(&bytes);
            let _ = decode_answer(answer.into());
        }
    }
}
