//! Stream partitions under the simulator (`--store streams`): every node runs the server's own
//! partition groups, [`PartitionMachine`] over the group's Raft log (which *is* the
//! partition's message log), on the node's crash-simulating
//! [`MemBackend`](eddy_log::MemBackend).
//!
//! * **Requests** are Iggy `SEND_MESSAGES` frames as the SDK sends them (the 256-byte request
//!   header of the partition operation, then the body naming stream 1, topic 1 and the
//!   partition, with a batch of one to three messages built by the codec, each carrying its
//!   operation). The node that takes one decodes it as the server's dispatch does (frame,
//!   header, route, body), checks it names that node's partition, admits the batch
//!   ([`admit`]) and stamps it as the server's leader does ([`PartitionGroup::stamp`]: the
//!   offset predicted after what it applied and what it proposed and has not seen answered);
//!   the entry is then proposed. A prediction that went stale (a proposal ahead of it was
//!   lost) is refused at apply on every member, as in the server.
//! * **Disks**: the group logs' durability reports wait for the simulator's sync; a crash, a
//!   torn tail, a full disk or failing fdatasyncs hit them, and a restart re-applies the
//!   committed entries from the log, as in the server.
//! * **Answers**: each apply's outcome on a node is recorded by index; when a client is told
//!   its operation applied there, the member answers as the server does (the server's
//!   [`send_reply`] in a reply frame, or the status of a stale stamp), the client decodes that
//!   frame as the SDK does, and it must say what the apply did (the base offset); the answer
//!   (appended at offset b, or stale) goes to the [`Ledger`]. A proposal the group refuses is
//!   answered with the server's status for it (`TransientNotAccepted`), on which the SDK looks
//!   for the leader again (the engine's leader hint stands in for that lookup). Metadata
//!   operations are proposed as the store's encoded operations (not as Iggy commands).
//! * **Final check** ([`StoreFactory::check_final`]), on every member after the drain: each
//!   partition polls the same messages at the same offsets on every member, offsets run from 0
//!   without a gap, a batch's messages sit at consecutive offsets in order, nothing stored was
//!   never sent, and every batch a client was told was appended at offset b is there, whole.
//!   Iggy sends carry no idempotency key: a send retried after an unknown outcome may be
//!   stored twice (counted, and bounded by the consensus checker's count of attempts).
//!
//! * **Metadata**: the metadata group (`GroupId(0)`) runs the server's [`MetadataMachine`]
//!   (snapshots every few entries, so its log is compacted and lagging members install
//!   snapshots). Clients race to create streams, topics and consumer groups and to store
//!   consumer offsets (standalone and group, plain and forward-only) on a few streams, and run
//!   lifecycles on fresh ids: streams and topics created, offsets stored, then deleted with
//!   everything under them; users and their tokens created and deleted
//!   ([`stream_metadata`](crate::stream_metadata)). The final check replays the agreed log with the answers
//!   the members gave at each index through a model of those operations and compares it with
//!   every member's state. (The metadata's partitions are not the partition groups here:
//!   those are fixed for the run.)
//!
//! * **`DELETE_SEGMENTS`**: the nemesis has a partition's leader propose a `Forget` through
//!   the end of its oldest sealed segment, as the server's leader does; on partitions without
//!   a retention cap (odd-numbered groups) every member must then serve from the same offset.
//!
//! * **Polls**: while the faults go on, clients poll random partitions on random members
//!   from random offsets (what the member applied, as the server's poll reads it); a message
//!   served at an offset must be the one every other poll got there in the same purge
//!   generation, and the one every member finally holds there if it is still served.
//!
//! * **Purges**: the nemesis has a partition's leader propose a `Purge` with the partition's
//!   purge generation, as the metadata's purge reaches it in the server; every other one
//!   proposes the generation already held again (the server's `repurge` after a lost
//!   leader), which must apply at most once. The final check finds in the agreed log the
//!   purges that applied (a generation above the partition's): every member must be at the
//!   generation they leave, and a send acknowledged at an entry before the last of them is
//!   counted as purged (offsets restart at 0 after a purge), every later one checked.
//!
//! * **Retention**: the nemesis's compaction gives a member's even-numbered partition groups a
//!   size cap (two segments), as a topic's `max_topic_size` does; that member's upkeep then records the cut,
//!   stops serving what lies below it and drops those sealed segments and that part of the
//!   Raft log, so a lagging or rebuilt member gets the partition's snapshot at its visible
//!   floor, then every entry after it. Members cut at their own points: the final check
//!   compares what all of them still serve, and acknowledged sends below a member's cut are
//!   counted as deleted by retention.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{BufMut, Bytes, BytesMut};
use eddy_codec::stream::batch::{admit, Message, StoredBatch};
use eddy_codec::stream::commands::send_messages::{SendMessages, SendMessagesReply};
use eddy_codec::stream::{
    reply_payload, route, CodecError, CommandCode, ErrorCode, Identifier, Partitioning, ReplyFrame,
    Request, Route, WireDecode, WireEncode,
};
use eddy_consensus::logstore::RaftLog;
use eddy_consensus::{GroupId, GroupStore, NodeId, ProposeError, Replicated, StoreError};
use eddy_log::{Cache, CommitPool, Durability, LogConfig};
use eddy_replicated::groups::{partition_dir, partition_group_id, METADATA_GROUP};
use eddy_replicated::metadata::{MetadataMachine, NoEffects};
use eddy_replicated::partition::{PartitionGroup, PartitionMachine, Proposals};
use eddy_replicated::stream::error::{ClusterError, StreamError};
use eddy_replicated::stream::{send_reply, Stampable};
use eddy_stream_store::metadata::{decode_op, encode_op};
use eddy_stream_store::replicated::{ApplyOutcome, PartitionEntry};
use eddy_stream_store::replicated_metadata::{MetadataApplied, MetadataView};
use eddy_stream_store::{MetadataState, PartitionAddr, RetentionPolicy};
use eddy_wire::stream::{decode_with_limit, Decoded, Header, Operation, RequestHeader};

use crate::client::leader_hint;
use crate::config::Millis;
use crate::logdir::Disk;
use crate::recorded::{agree, answers_agree, AppliedLog, Recorder, Recording, Records};
use crate::rng::SimRng;
use crate::store::{DiskFault, StoreFactory};
use crate::stream_metadata::{MetadataOps, Model};
use crate::workload::{OpId, Workload};

/// First byte of every message payload the workload sends; the operation id (u64 LE) and the
/// message's place in its batch (u8) follow.
const TAG: u8 = 0x5E;
/// Most messages in one send.
const MAX_MESSAGES: u64 = 3;
/// Percent of operations that go to the metadata group.
const METADATA_PERCENT: u64 = 15;
/// The metadata machine writes a snapshot (and may drop its log) every this many entries.
const METADATA_SNAPSHOT_EVERY: u64 = 32;

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a node answered for the entry it applied at an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Appended at this base offset, this many messages.
    Appended(u64, u32),
    /// Refused: the batch was stamped for an offset another batch took.
    Stale,
    /// A metadata operation applied.
    Applied,
    /// A metadata operation refused by the state (every member alike).
    Refused(String),
    /// Anything else (nothing appended by this entry).
    Other(String),
}

/// What the clients sent and were told, shared by the workload and the factory.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every send: its partition's group and message count.
    proposed: BTreeMap<OpId, (GroupId, u32)>,
    /// The answers clients got, per operation, with the index of the entry answered.
    told: BTreeMap<OpId, Vec<(u64, Answer)>>,
}

/// The partitions of the whole simulated cluster: the factory of every node's directory.
#[derive(Debug)]
pub struct StreamFactory {
    pool: CommitPool,
    cache: Arc<Cache>,
    group_log: LogConfig,
    ledger: Arc<Mutex<Ledger>>,
    applied: AppliedLog,
    /// Each partition's purge generation, as the metadata would hold it.
    purge_generations: BTreeMap<GroupId, u64>,
    /// Purges proposed so far (every other one proposes the held generation again).
    purges_proposed: u64,
    /// What clients' polls were served during the run: (partition, purge generation,
    /// offset) -> (operation, place in its batch).
    observed: BTreeMap<(GroupId, u64, u64), (OpId, u8)>,
}

/// A proposal's client attempt: (operation, attempt number).
type AttemptId = (OpId, u64);

/// One node's data directory: its disk, its partitions' readable sides while it runs, the
/// entries it proposed and has not seen answered, and what its machines applied and answered.
#[derive(Debug, Default)]
pub struct StreamDir {
    disk: Disk,
    metadata: Option<MetadataView>,
    groups: BTreeMap<GroupId, PartitionGroup>,
    pending: Proposals<GroupId, AttemptId>,
    /// The request header of each send this member took and proposed, until answered.
    headers: BTreeMap<AttemptId, RequestHeader>,
    /// The header of the send being answered (set when it settles).
    answering: Option<RequestHeader>,
    records: Records<Answer>,
    /// Each partition's retention policy on this member (its configuration: kept across
    /// restarts).
    retention: BTreeMap<GroupId, Arc<Mutex<Option<RetentionPolicy>>>>,
}

impl StreamFactory {
    /// The factory; `ledger` is shared with the workload.
    pub fn new(ledger: Arc<Mutex<Ledger>>) -> Self {
        StreamFactory {
            pool: CommitPool::inline(),
            cache: Arc::new(Cache::new(4 << 20)),
            group_log: LogConfig {
                // Small segments: rolls and reads across segments happen.
                segment_size: 8192,
                index_interval: 1024,
                durability: Durability::Background {
                    max_unsynced_records: u64::MAX,
                    max_unsynced_bytes: u64::MAX,
                },
                ..LogConfig::default()
            },
            ledger,
            applied: AppliedLog::default(),
            purge_generations: BTreeMap::new(),
            purges_proposed: 0,
            observed: BTreeMap::new(),
        }
    }

    fn open_metadata(
        &mut self,
        dir: &mut StreamDir,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        let backend = Arc::new(dir.disk.backend.clone());
        let log = RaftLog::open(
            backend.clone(),
            "raft/metadata",
            self.group_log,
            &self.pool,
            Arc::clone(&self.cache),
        )?;
        let (machine, view) = MetadataMachine::open(
            backend,
            log.dir(),
            METADATA_SNAPSHOT_EVERY,
            Box::new(NoEffects),
        )?;
        let recorder = dir.records.recorder(METADATA_GROUP);
        let replicated = Replicated::open(
            log,
            Recording::new(
                machine,
                recorder,
                Box::new(|_, outcome, r| judge_metadata(outcome, r)),
            ),
        )?;
        dir.metadata = Some(view);
        let log = replicated.raft_log().log().clone();
        Ok(Box::new(dir.disk.hold(METADATA_GROUP, log, replicated)))
    }
}

/// A metadata apply's outcome as its client's answer.
fn judge_metadata(outcome: MetadataApplied, _: &Recorder<Answer>) -> Option<Answer> {
    match outcome {
        MetadataApplied::Applied(_) => Some(Answer::Applied),
        MetadataApplied::Refused(e) => Some(Answer::Refused(e.to_string())),
        MetadataApplied::Noop => None,
        MetadataApplied::Undecodable => Some(Answer::Other("undecodable".into())),
    }
}

/// The partition whose group is `group`: uid `group - 1`, partition `uid + 1` of topic 1.
fn addr_of(group: GroupId) -> PartitionAddr {
    PartitionAddr {
        stream_id: 1,
        topic_id: 1,
        partition_id: u32::try_from(group.0).expect("a few partitions"),
    }
}

/// Largest frame a simulated client sends.
const MAX_FRAME: u32 = 1 << 20;

/// A member's decoding of a client's frame, as the server's dispatch decodes it: the request
/// header, routed to `SEND_MESSAGES`, and its body.
fn decode_send(frame: &Bytes) -> Result<(RequestHeader, SendMessages), String> {
    let (header, body_len) = match decode_with_limit(frame, MAX_FRAME) {
        Ok(Decoded::Complete(f)) if f.len() == frame.len() => match f.header {
            Header::Request(header) => (header, f.body.len()),
            other => return Err(format!("a client sent {other:?}")),
        },
        other => return Err(format!("a send's frame does not decode whole: {other:?}")),
    };
    let code = match route(&header) {
        Ok(Route::Command(code)) => code,
        other => return Err(format!("a send routes to {other:?}")),
    };
    let body = frame.slice(frame.len() - body_len..);
    match Request::decode(code, &body) {
        Ok(Request::SendMessages(request)) if code == CommandCode::SendMessages => {
            Ok((header, request))
        }
        other => Err(format!("a send decodes as {other:?}")),
    }
}

/// A reply frame as the SDK reads it: the payload, or the refusal's code.
fn client_reply(frame: &[u8]) -> Result<Result<Bytes, u32>, String> {
    let (reply, body) = match decode_with_limit(frame, MAX_FRAME) {
        Ok(Decoded::Complete(f)) if f.len() == frame.len() => match f.header {
            Header::Reply(reply) => (reply, f.body),
            other => return Err(format!("the member answered {other:?}")),
        },
        other => return Err(format!("the reply does not decode whole: {other:?}")),
    };
    match reply_payload(&reply, body) {
        Ok(payload) => Ok(Ok(Bytes::copy_from_slice(payload))),
        Err(CodecError::ErrorReply { code }) => Ok(Err(code)),
        Err(e) => Err(format!("the reply does not decode: {e}")),
    }
}

/// A partition's apply outcome as its client's answer.
fn judge(outcome: ApplyOutcome, _: &Recorder<Answer>) -> Option<Answer> {
    Some(match outcome {
        ApplyOutcome::NoOp => return None,
        ApplyOutcome::Appended {
            base_offset,
            message_count,
            ..
        } => Answer::Appended(base_offset, message_count),
        ApplyOutcome::Refused { .. } => Answer::Stale,
        other => Answer::Other(format!("{other:?}")),
    })
}

impl StoreFactory for StreamFactory {
    type Outcome = u64;
    type Dir = StreamDir;

    fn create(&mut self, _node: NodeId) -> StreamDir {
        StreamDir {
            disk: Disk::default(),
            metadata: None,
            groups: BTreeMap::new(),
            pending: Proposals::default(),
            headers: BTreeMap::new(),
            answering: None,
            records: Records::sharing(Arc::clone(&self.applied)),
            retention: BTreeMap::new(),
        }
    }

    fn open(
        &mut self,
        dir: &mut StreamDir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        if group == METADATA_GROUP {
            return self.open_metadata(dir);
        }
        let backend = Arc::new(dir.disk.backend.clone());
        let log = RaftLog::open(
            backend.clone(),
            partition_dir(group.0 - 1),
            self.group_log,
            &self.pool,
            Arc::clone(&self.cache),
        )?;
        let (machine, readable) =
            PartitionMachine::open(addr_of(group), log.log().clone(), backend, log.dir())?;
        let policy = Arc::clone(dir.retention.entry(group).or_default());
        let machine = machine.with_retention(Box::new(move || *guard(&policy)));
        let machine = Recording::new(
            machine,
            dir.records.recorder(group),
            Box::new(|_, outcome, r| judge(outcome, r)),
        );
        let replicated = Replicated::open(log, machine)?;
        dir.groups.insert(group, readable);
        let log = replicated.raft_log().log().clone();
        Ok(Box::new(dir.disk.hold(group, log, replicated)))
    }

    fn unsynced(&self, dir: &StreamDir) -> bool {
        dir.disk.unsynced()
    }

    fn sync(&mut self, dir: &mut StreamDir) {
        dir.disk.sync();
    }

    fn crash(&mut self, dir: &mut StreamDir, tear: bool, rng: &mut SimRng) -> u64 {
        dir.metadata = None;
        dir.groups.clear();
        // Requests in flight die with the process.
        dir.pending.clear();
        dir.headers.clear();
        dir.answering = None;
        dir.disk.crash(tear, rng)
    }

    fn set_fault(&mut self, dir: &mut StreamDir, fault: Option<DiskFault>) {
        dir.disk.set_fault(fault);
    }

    /// Every other partition gets a size cap of two segments on this member (see the module
    /// docs; the others keep every acknowledged send checkable); the metadata group compacts
    /// after its own snapshots.
    fn compact(&mut self, dir: &mut StreamDir, group: GroupId, _through: u64) -> bool {
        if group == METADATA_GROUP || !group.0.is_multiple_of(2) {
            return false;
        }
        let policy = RetentionPolicy {
            max_bytes: Some(2 * self.group_log.segment_size),
            ..RetentionPolicy::default()
        };
        *guard(dir.retention.entry(group).or_default()) = Some(policy);
        true
    }

    fn state(&self, dir: &StreamDir, group: GroupId) -> Vec<(u64, Bytes)> {
        dir.records.state(group)
    }

    fn prepare(
        &mut self,
        dir: &mut StreamDir,
        group: GroupId,
        attempt: AttemptId,
        payload: Bytes,
        now: Millis,
    ) -> Result<Bytes, String> {
        if group == METADATA_GROUP {
            return Ok(payload);
        }
        let readable = dir
            .groups
            .get(&group)
            .ok_or_else(|| format!("{group}: not open on a running node"))?;
        let (header, request) = decode_send(&payload)?;
        let addr = addr_of(group);
        let routed = (
            request.stream_id.clone(),
            request.topic_id.clone(),
            request.partitioning.clone(),
        );
        if routed
            != (
                Identifier::numeric(addr.stream_id),
                Identifier::numeric(addr.topic_id),
                Partitioning::PartitionId(addr.partition_id),
            )
        {
            return Err(format!("{group}: a send for {routed:?} reached {addr:?}"));
        }
        // As the server's `SEND_MESSAGES`: the batch admitted, then stamped by the leader.
        let batch = admit(request.batch, request.messages_count)
            .map_err(|e| format!("a send not admitted: {e}"))?;
        dir.headers.insert(attempt, header);
        // As `ClusterStreams::append` stamps it: after this member's unanswered proposals.
        let stamped = dir
            .pending
            .stamp(group, attempt, readable, Stampable(batch), now * 1000)
            .map_err(|e| format!("a send not stamped: {e}"))?;
        Ok(stamped.entry)
    }

    fn delete_segments(&mut self, dir: &mut StreamDir, group: GroupId) -> Option<Bytes> {
        // As `ClusterStreams::delete_segments` on the partition's leader.
        let through_index = dir.groups.get(&group)?.partition().oldest_segments_end(1)?;
        PartitionEntry::Forget { through_index }.encode().ok()
    }

    /// A client polls the partition on this member from a random offset, as the server's
    /// poll reads it (what the member applied: committed data only).
    fn observe(
        &mut self,
        dir: &mut StreamDir,
        group: GroupId,
        rng: &mut SimRng,
    ) -> Result<(), String> {
        let Some(readable) = dir.groups.get(&group) else {
            return Ok(());
        };
        let partition = readable.partition();
        let generation = partition.generation();
        let from = rng.below(readable.predict([]).next_offset + 1);
        // A failing read is the client's error, not a wrong answer.
        let Ok(batches) = partition.read(from, 64, 16 << 10) else {
            return Ok(());
        };
        for batch in batches {
            let parsed = StoredBatch::parse(batch.bytes).map_err(|e| e.to_string())?;
            parsed.verify().map_err(|e| e.to_string())?;
            for message in parsed.record().messages() {
                let served = message_op(&message.payload)
                    .ok_or_else(|| format!("offset {}: a foreign message", message.offset))?;
                let seen = self
                    .observed
                    .entry((group, generation, message.offset))
                    .or_insert(served);
                if *seen != served {
                    return Err(format!(
                        "offset {} (purge generation {generation}) served {served:?}, another \
                         poll {seen:?}",
                        message.offset
                    ));
                }
            }
        }
        Ok(())
    }

    fn purge(&mut self, dir: &mut StreamDir, group: GroupId) -> Option<Bytes> {
        // As a purge reaches a partition in the server: the metadata holds the partition's
        // purge generation and its leader proposes it; every other call here is the
        // server's `repurge` of the generation already held (applied, or lost with a
        // leader), which must apply at most once.
        dir.groups.get(&group)?;
        self.purges_proposed += 1;
        let generation = self.purge_generations.entry(group).or_default();
        if self.purges_proposed % 2 == 1 || *generation == 0 {
            *generation += 1;
        }
        PartitionEntry::Purge {
            generation: *generation,
        }
        .encode()
        .ok()
    }

    fn settled(&mut self, dir: &mut StreamDir, group: GroupId, attempt: AttemptId) {
        dir.pending.answered(group, &attempt);
        dir.answering = dir.headers.remove(&attempt);
    }

    fn acked(
        &mut self,
        dir: &mut StreamDir,
        group: GroupId,
        index: u64,
        op: OpId,
    ) -> Result<bool, String> {
        let answer = dir.records.answer(group, index).ok_or_else(|| {
            format!("op {op}: acknowledged at {group} index {index} with no answer recorded there")
        })?;
        if let Some(header) = dir.answering.take() {
            // The member answers the send as the server does, and the client decodes that.
            let reply = match &answer {
                Answer::Appended(base, _) => {
                    let payload = send_reply(addr_of(group), *base).to_vec();
                    ReplyFrame::success_chunks(&header, vec![Bytes::from(payload)])
                }
                Answer::Stale => {
                    let stale = StreamError::Cluster(ClusterError::Stale(0));
                    ReplyFrame::status(&header, stale.code())
                }
                other => return Err(format!("op {op}: a send applied as {other:?}")),
            }
            .map_err(|e| format!("op {op}: the reply does not frame: {e}"))?;
            let decoded = client_reply(&reply.to_vec())
                .map_err(|e| format!("op {op} at {group} index {index}: {e}"))?;
            let consistent = match (&answer, &decoded) {
                (Answer::Appended(base, _), Ok(payload)) => {
                    SendMessagesReply::decode_bytes(payload).is_ok_and(|r| {
                        r.confirmations.len() == 1
                            && r.confirmations[0].base_offset == *base
                            && r.confirmations[0].partition_id == addr_of(group).partition_id
                    })
                }
                (Answer::Stale, Err(code)) => *code == ErrorCode::TransientNotAccepted.code(),
                _ => false,
            };
            if !consistent {
                return Err(format!(
                    "op {op} at {group} index {index}: the member applied {answer:?} but its \
                     client decodes {decoded:?}"
                ));
            }
        }
        let settled = matches!(
            answer,
            Answer::Appended(..) | Answer::Applied | Answer::Refused(_)
        );
        guard(&self.ledger)
            .told
            .entry(op)
            .or_default()
            .push((index, answer));
        // A stale stamp is the server's transient refusal: the SDK sends again.
        Ok(settled)
    }

    fn told_error(
        &mut self,
        dir: &mut StreamDir,
        group: GroupId,
        error: ProposeError,
    ) -> Result<ProposeError, String> {
        let Some(header) = dir.answering.take() else {
            return Ok(error);
        };
        // As `ClusterStreams::append` refuses it, and the server answers that.
        let hint = leader_hint(&error);
        let refused = match error {
            ProposeError::NotLeader { .. } => ClusterError::NotLeader("partition's group"),
            other => ClusterError::NotCommitted(other),
        };
        let reply = ReplyFrame::status(&header, StreamError::Cluster(refused).code())
            .map_err(|e| format!("{group}: the refusal does not frame: {e}"))?;
        match client_reply(&reply.to_vec()).map_err(|e| format!("{group}: {e}"))? {
            // The SDK looks for the leader again (the engine's hint stands in for its lookup)
            // and sends again; it cannot tell whether the send was committed.
            Err(code) if code == ErrorCode::TransientNotAccepted.code() => {
                Ok(ProposeError::NotLeader {
                    group,
                    leader: hint,
                })
            }
            other => Err(format!("{group}: a refused send decodes as {other:?}")),
        }
    }

    fn check_final(&self, dirs: &[(NodeId, &StreamDir)]) -> Result<String, String> {
        let ledger = guard(&self.ledger);
        let metadata = check_metadata(dirs)?;
        let groups: Vec<GroupId> = dirs
            .first()
            .map(|(_, d)| d.groups.keys().copied().collect())
            .unwrap_or_default();
        let mut messages = 0;
        let mut duplicates = 0;
        let mut appended = 0;
        let mut deleted = 0;
        let mut purged = 0;
        let mut purges = 0;
        let mut polls_checked = 0;
        for group in groups {
            let (purged_at, generation, effective) = self.purges(group)?;
            purges += effective;
            let mut views = Vec::with_capacity(dirs.len());
            for (node, dir) in dirs {
                let readable = dir
                    .groups
                    .get(&group)
                    .ok_or_else(|| format!("node {node}: {group} not open at the end"))?;
                let held = poll_all(readable).map_err(|e| format!("node {node}, {group}: {e}"))?;
                let at = readable.partition().generation();
                if at != generation {
                    return Err(format!(
                        "node {node}, {group}: at purge generation {at}, the agreed log's \
                         purges make {generation}"
                    ));
                }
                // Where this member's retention left it (nothing visible: its next offset).
                let floor = held
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or_else(|| readable.predict([]).next_offset);
                check_partition(&ledger, group, &held, floor, purged_at)
                    .map_err(|e| format!("node {node}: {e}"))?;
                views.push((*node, floor, held));
            }
            // Odd-numbered partitions have no retention cap: only DELETE_SEGMENTS moves their
            // floor, and it names an index, so every member serves from the same offset.
            if !group.0.is_multiple_of(2) {
                if let (Some(first), Some(other)) = (
                    views.first(),
                    views.iter().find(|(_, floor, _)| *floor != views[0].1),
                ) {
                    return Err(format!(
                        "{group}: node {} serves from offset {}, node {} from {} (no retention \
                         here: only DELETE_SEGMENTS moves the floor, alike everywhere)",
                        first.0, first.1, other.0, other.1
                    ));
                }
            }
            // What every member still serves must be the same.
            let common = views.iter().map(|(_, floor, _)| *floor).max().unwrap_or(0);
            let views: Vec<(NodeId, BTreeMap<u64, Polled>)> = views
                .into_iter()
                .map(|(node, _, mut held)| (node, held.split_off(&common)))
                .collect();
            let held =
                agree(views).map_err(|e| format!("{group}: members differ at offset {e}"))?;
            let counts = check_partition(&ledger, group, &held, common, purged_at)?;
            // Every poll during the run served what the partition finally holds there.
            for ((_, _, offset), served) in self
                .observed
                .range((group, generation, common)..=(group, generation, u64::MAX))
            {
                if held.get(offset).map(|h| (h.0, h.1)) != Some(*served) {
                    return Err(format!(
                        "{group}: a poll was served {served:?} at offset {offset}, where every \
                         member finally holds {:?} (a read of data that was not committed)",
                        held.get(offset)
                    ));
                }
                polls_checked += 1;
            }
            messages += held.len();
            duplicates += counts.duplicates;
            appended += counts.checked;
            deleted += counts.deleted;
            purged += counts.purged;
        }
        let records: Vec<(NodeId, &Records<Answer>)> =
            dirs.iter().map(|(n, d)| (*n, &d.records)).collect();
        let compared = answers_agree(&records, |_| true)?;
        let stale = ledger
            .told
            .values()
            .flatten()
            .filter(|(_, a)| *a == Answer::Stale)
            .count();
        Ok(format!(
            "partitions agree: {messages} messages served by every member; {appended} sends \
             answered appended ({deleted} of them deleted by retention since), {purged} \
             appended before one of {purges} purges, {stale} stale, {duplicates} stored again \
             after a retry; {polls_checked} messages served to polls during the run found \
             again; {compared} answers the same on several \
             members; {metadata}"
        ))
    }
}

impl StreamFactory {
    /// The purges of `group`'s agreed log (every entry any member applied): the index of the
    /// last one that applied (0: none), the generation they leave, and how many applied. A
    /// purge applies when its generation is above the partition's; a retried one is a no-op.
    fn purges(&self, group: GroupId) -> Result<(u64, u64, u64), String> {
        let applied = guard(&self.applied);
        let (mut at, mut generation, mut effective) = (0, 0, 0);
        for (index, payload) in applied.get(&group).into_iter().flatten() {
            let entry = PartitionEntry::decode(payload)
                .map_err(|e| format!("{group} index {index}: {e}"))?;
            if let PartitionEntry::Purge { generation: g } = entry {
                if g > generation {
                    (at, generation) = (*index, g);
                    effective += 1;
                }
            }
        }
        Ok((at, generation, effective))
    }
}

/// A polled message: (operation, place in its batch, its batch's append timestamp).
type Polled = (OpId, u8, u64);

/// The metadata every member holds is one state, and it is what the agreed log's applied
/// operations make of the model's few kinds.
fn check_metadata(dirs: &[(NodeId, &StreamDir)]) -> Result<String, String> {
    let mut views = Vec::with_capacity(dirs.len());
    for (node, dir) in dirs {
        let view = dir
            .metadata
            .as_ref()
            .ok_or_else(|| format!("node {node}: no metadata open at the end"))?;
        views.push((
            *node,
            BTreeMap::from([((), view.read(MetadataState::clone))]),
        ));
    }
    let held = agree(views).map_err(|e| format!("metadata states differ: {e}"))?;
    let state = &held[&()];
    let (_, first) = dirs.first().ok_or("no member")?;
    let mut model = Model::default();
    let mut unanswered = 0;
    for (index, payload) in first.records.state(METADATA_GROUP) {
        let answer = dirs
            .iter()
            .find_map(|(_, d)| d.records.answer(METADATA_GROUP, index));
        let op = decode_op(&payload).map_err(|e| format!("metadata index {index}: {e}"))?;
        match answer {
            Some(Answer::Applied) => model.apply(&op),
            Some(_) => {}
            // Applied only by members whose records were lost with their directories.
            None => unanswered += 1,
        }
    }
    if unanswered == 0 {
        model.matches(state)?;
    }
    Ok(format!(
        "metadata agrees: {} streams, {} consumer groups, {} offsets{}",
        state.streams.len(),
        model.counts().0,
        model.counts().1,
        if unanswered == 0 {
            String::new()
        } else {
            format!(" ({unanswered} entries with no answer on record: model not checked)")
        }
    ))
}

/// Every visible message of a partition, by offset.
fn poll_all(readable: &PartitionGroup) -> Result<BTreeMap<u64, Polled>, String> {
    let partition = readable.partition();
    let mut out = BTreeMap::new();
    let mut from = 0;
    loop {
        let batches = partition
            .read(from, u64::MAX, u64::MAX)
            .map_err(|e| e.to_string())?;
        let Some(last) = batches.last() else { break };
        let next = last.end_offset();
        for batch in batches {
            let parsed = StoredBatch::parse(batch.bytes).map_err(|e| e.to_string())?;
            parsed.verify().map_err(|e| e.to_string())?;
            let record = parsed.record();
            for message in record.messages() {
                let (op, place) = message_op(&message.payload)
                    .ok_or_else(|| format!("offset {}: a foreign message", message.offset))?;
                out.insert(message.offset, (op, place, message.timestamp));
            }
        }
        if next <= from {
            break;
        }
        from = next;
    }
    Ok(out)
}

/// What [`check_partition`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct PartitionCounts {
    /// Sends stored more than once (retried after an unknown outcome).
    duplicates: u64,
    /// Appended answers checked against the messages.
    checked: u64,
    /// Appended answers below the floor: deleted by retention since.
    deleted: u64,
    /// Appended answers to entries before the partition's last purge.
    purged: u64,
}

/// The stream guarantees over one partition's messages served from `floor` on (what retention
/// left).
fn check_partition(
    ledger: &Ledger,
    group: GroupId,
    held: &BTreeMap<u64, Polled>,
    floor: u64,
    purged_at: u64,
) -> Result<PartitionCounts, String> {
    // Where each send's batches start.
    let mut starts: BTreeMap<OpId, Vec<u64>> = BTreeMap::new();
    let mut open: Option<(OpId, u8, u32)> = None; // the batch being walked: op, next place, count
    let mut newest = 0;
    for (due, (&offset, &(op, place, timestamp))) in (floor..).zip(held) {
        if offset != due {
            return Err(format!(
                "{group}: offset {offset} where {due} was due (a gap)"
            ));
        }
        if timestamp < newest {
            return Err(format!(
                "{group}: offset {offset} stamped {timestamp} µs, before {newest} µs \
                 (timestamps went back)"
            ));
        }
        newest = timestamp;
        let Some(&(proposed_group, count)) = ledger.proposed.get(&op) else {
            return Err(format!("{group}: op {op} is stored but was never sent"));
        };
        if proposed_group != group {
            return Err(format!("{group}: op {op} was sent to {proposed_group}"));
        }
        match open {
            Some((o, next, c)) if o == op && next == place && u32::from(place) < c => {
                open = Some((op, place + 1, c));
            }
            _ if place == 0 => {
                if let Some((o, next, c)) = open {
                    if u32::from(next) != c {
                        return Err(format!("{group}: op {o}'s batch is cut at offset {offset}"));
                    }
                }
                starts.entry(op).or_default().push(offset);
                open = Some((op, 1, count));
            }
            _ => {
                return Err(format!(
                    "{group}: offset {offset} holds message {place} of op {op} out of its batch"
                ))
            }
        }
    }
    if let Some((o, next, c)) = open {
        if u32::from(next) != c {
            return Err(format!("{group}: op {o}'s batch is cut at its end"));
        }
    }
    let mut counts = PartitionCounts {
        duplicates: starts.values().map(|s| s.len() as u64 - 1).sum(),
        ..PartitionCounts::default()
    };
    for (op, answers) in &ledger.told {
        if ledger.proposed.get(op).map(|p| p.0) != Some(group) {
            continue;
        }
        for (index, answer) in answers {
            let Answer::Appended(base, count) = answer else {
                continue;
            };
            // Emptied by a later purge (offsets then restart at 0).
            if *index < purged_at {
                counts.purged += 1;
                continue;
            }
            if *base < floor {
                counts.deleted += 1;
                continue;
            }
            counts.checked += 1;
            if ledger.proposed[op].1 != *count {
                return Err(format!("op {op}: told {count} messages appended"));
            }
            if !starts.get(op).is_some_and(|s| s.contains(base)) {
                return Err(format!(
                    "{group}: op {op} was told appended at offset {base}, which holds {:?} \
                     (acknowledged send lost or moved)",
                    held.get(base)
                ));
            }
        }
    }
    Ok(counts)
}

/// The (operation, place) a message payload carries.
fn message_op(payload: &[u8]) -> Option<(OpId, u8)> {
    if payload.len() < 10 || payload[0] != TAG {
        return None;
    }
    Some((
        u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes")),
        payload[9],
    ))
}

/// Iggy sends to a few partitions.
#[derive(Debug)]
pub struct StreamWorkload {
    partitions: u64,
    ledger: Arc<Mutex<Ledger>>,
    metadata: MetadataOps,
}

impl StreamWorkload {
    /// Sends to `partitions` partitions; `ledger` is shared with the [`StreamFactory`].
    pub fn new(partitions: u64, ledger: Arc<Mutex<Ledger>>) -> Self {
        StreamWorkload {
            partitions,
            ledger,
            metadata: MetadataOps::default(),
        }
    }
}

impl Workload for StreamWorkload {
    fn groups(&self) -> Vec<GroupId> {
        std::iter::once(METADATA_GROUP)
            .chain((0..self.partitions).map(partition_group_id))
            .collect()
    }

    fn choose_group(&mut self, rng: &mut SimRng) -> GroupId {
        if rng.below(100) < METADATA_PERCENT {
            METADATA_GROUP
        } else {
            partition_group_id(rng.below(self.partitions))
        }
    }

    /// For a partition, the send's message count (u32 LE), then its batch as the SDK encodes
    /// it; for the metadata, an encoded operation carrying `id`.
    fn payload(&mut self, group: GroupId, id: OpId, rng: &mut SimRng) -> Bytes {
        if group == METADATA_GROUP {
            guard(&self.ledger).proposed.insert(id, (group, 0));
            let op = self.metadata.next(id, rng);
            return Bytes::from(encode_op(&op).expect("the workload's operations encode"));
        }
        let count = rng.range(1, MAX_MESSAGES);
        let messages: Vec<Message> = (0..count)
            .map(|place| {
                let pad = rng.below(200);
                let mut payload = BytesMut::with_capacity(10 + pad as usize);
                payload.put_u8(TAG);
                payload.put_u64_le(id);
                payload.put_u8(u8::try_from(place).expect("a few"));
                for _ in 0..pad {
                    payload.put_u8(rng.below(256) as u8);
                }
                Message {
                    id: (u128::from(id) << 8) | u128::from(place) | (1 << 100),
                    origin_timestamp: id,
                    payload: payload.freeze(),
                    user_headers: Bytes::new(),
                }
            })
            .collect();
        let addr = addr_of(group);
        let request = SendMessages::new(
            Identifier::numeric(addr.stream_id),
            Identifier::numeric(addr.topic_id),
            Partitioning::PartitionId(addr.partition_id),
            &messages,
        )
        .expect("a valid batch");
        let count = u32::try_from(count).expect("a few");
        guard(&self.ledger).proposed.insert(id, (group, count));
        // As the SDK frames a send: the partition operation, its client, no body checksum.
        let body = request.to_vec();
        let mut header =
            RequestHeader::new(Operation::SendMessages, body.len()).expect("a small frame");
        header.client = u128::from(id) + 1;
        header.session = 1;
        let mut out = BytesMut::with_capacity(256 + body.len());
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(&body);
        out.freeze()
    }

    fn op_id(&self, group: GroupId, payload: &[u8]) -> Option<OpId> {
        if group == METADATA_GROUP {
            return self.metadata.op_id(&decode_op(payload).ok()?);
        }
        let entry = PartitionEntry::decode(&Bytes::copy_from_slice(payload)).ok()?;
        let PartitionEntry::Append { batch, .. } = entry else {
            return None;
        };
        let record = StoredBatch::parse(batch).ok()?.record();
        let first = record.messages().next()?;
        message_op(&first.payload).map(|(op, _)| op)
    }
}

/// The factory and workload of one `--store streams` run, sharing one ledger.
pub fn pair(partitions: u64) -> (StreamFactory, StreamWorkload) {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    (
        StreamFactory::new(Arc::clone(&ledger)),
        StreamWorkload::new(partitions, ledger),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_check_catches_a_gap_a_cut_batch_a_lost_send_a_stranger_and_time_going_back() {
        let g = GroupId(1);
        let mut ledger = Ledger::default();
        ledger.proposed.insert(1, (g, 2));
        ledger.proposed.insert(2, (g, 1));
        ledger.told.insert(1, vec![(3, Answer::Appended(0, 2))]);
        ledger
            .told
            .insert(2, vec![(4, Answer::Stale), (5, Answer::Appended(2, 1))]);
        let good = BTreeMap::from([(0, (1, 0, 0)), (1, (1, 1, 1)), (2, (2, 0, 2))]);
        assert_eq!(
            check_partition(&ledger, g, &good, 0, 0).map(|c| (c.duplicates, c.checked)),
            Ok((0, 2))
        );
        let again = BTreeMap::from([
            (0, (1, 0, 0)),
            (1, (1, 1, 1)),
            (2, (2, 0, 2)),
            (3, (2, 0, 3)),
        ]);
        assert_eq!(
            check_partition(&ledger, g, &again, 0, 0).map(|c| (c.duplicates, c.checked)),
            Ok((1, 2))
        );

        let gap = BTreeMap::from([(0, (1, 0, 0)), (1, (1, 1, 1)), (3, (2, 0, 3))]);
        assert!(check_partition(&ledger, g, &gap, 0, 0)
            .unwrap_err()
            .contains("gap"));
        let cut = BTreeMap::from([(0, (1, 0, 0)), (1, (2, 0, 1))]);
        assert!(check_partition(&ledger, g, &cut, 0, 0)
            .unwrap_err()
            .contains("cut"));
        let lost = BTreeMap::from([(0, (1, 0, 0)), (1, (1, 1, 1))]);
        assert!(check_partition(&ledger, g, &lost, 0, 0)
            .unwrap_err()
            .contains("lost"));
        let stranger = BTreeMap::from([(0, (9, 0, 0))]);
        assert!(check_partition(&ledger, g, &stranger, 0, 0)
            .unwrap_err()
            .contains("never sent"));
        // Retention cut the first send: its answer can no longer be checked.
        let cut = BTreeMap::from([(2, (2, 0, 2))]);
        // A purge at index 4 emptied the partition: the first send (acknowledged at index 3)
        // is gone, offsets restarted at 0 and the second send sits there now.
        let after_purge = BTreeMap::from([(0, (2, 0, 9))]);
        let mut purged = Ledger {
            proposed: ledger.proposed.clone(),
            ..Ledger::default()
        };
        purged.told.insert(1, vec![(3, Answer::Appended(0, 2))]);
        purged.told.insert(2, vec![(5, Answer::Appended(0, 1))]);
        let counts = check_partition(&purged, g, &after_purge, 0, 4).unwrap();
        assert_eq!((counts.checked, counts.purged), (1, 1));
        assert!(check_partition(&purged, g, &after_purge, 0, 0)
            .unwrap_err()
            .contains("lost or moved"));
        let counts = check_partition(&ledger, g, &cut, 2, 0).unwrap();
        assert_eq!((counts.checked, counts.deleted), (1, 1));
        let back = BTreeMap::from([(0, (1, 0, 5)), (1, (1, 1, 5)), (2, (2, 0, 4))]);
        assert!(check_partition(&ledger, g, &back, 0, 0)
            .unwrap_err()
            .contains("went back"));
    }

    #[test]
    fn sends_are_recognized_once_stamped() {
        let (mut factory, mut w) = pair(2);
        let mut dir = factory.create(1);
        let group = partition_group_id(1);
        let _store = factory.open(&mut dir, group).unwrap();
        let mut rng = SimRng::new(5);
        let payload = w.payload(group, 77, &mut rng);
        let entry = factory
            .prepare(&mut dir, group, (77, 1), payload, 10)
            .unwrap();
        assert_eq!(w.op_id(group, &entry), Some(77));
        assert_eq!(dir.pending.waiting(group), 1);
        factory.settled(&mut dir, group, (77, 1));
        assert_eq!(dir.pending.waiting(group), 0);
        // The send was a client's frame: a refusal reaches that client as the server's code.
        let redirect = ProposeError::NotLeader {
            group,
            leader: Some(2),
        };
        assert_eq!(
            factory
                .told_error(&mut dir, group, redirect.clone())
                .unwrap(),
            redirect
        );
        // A frame cut short, or for another partition, is not taken.
        let payload = w.payload(group, 78, &mut rng);
        let cut = payload.slice(..payload.len() - 1);
        assert!(factory.prepare(&mut dir, group, (78, 1), cut, 10).is_err());
        let other = partition_group_id(0);
        let _other = factory.open(&mut dir, other).unwrap();
        assert!(factory
            .prepare(&mut dir, other, (78, 1), payload, 10)
            .unwrap_err()
            .contains("reached"));
    }
}
