//! The event store in a cluster: the request path of the replicated event shards. Each shard's
//! group applies its entries through the shard machine ([`EventShardMachine`], in
//! `eddy-replicated`, with the group ids, compaction and the out-of-band shard copy); this
//! module opens those groups on the Raft thread and takes changes from clients.
//!
//! Requests: the member that takes a change checks it (routing, schemas, limits), encodes it
//! and, when it leads the shard's group, proposes it; otherwise the client is sent to the
//! leader's client address. The answer is the apply's outcome on this member, after the entry
//! is committed (durable on a majority) and the record durable here.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use eddy_consensus::logstore::RaftLog;
use eddy_consensus::{GroupId, NodeId, Replicated, Role, Runner, StoreError};
use eddy_event_store::replicated::{Applied, Command, EventApplied};
use eddy_event_store::EventStore;
use eddy_replicated::groups::{event_group_id, EVENTS_DIR, METADATA_GROUP};
use eddy_replicated::shard::{
    refused, stopped, EventClusterError, EventCompaction, EventShardMachine,
};
use eddy_replicated::stream::error::ClusterError;

use super::raft_groups::{AsCluster, ClusterOutcome, GroupStorage};
use super::transport::{props, Directory};

impl From<EventApplied> for ClusterOutcome {
    fn from(o: EventApplied) -> Self {
        ClusterOutcome::Event(o)
    }
}

/// Opens the group store of event shard `shard` (its Raft log under [`EVENTS_DIR`]).
///
/// # Errors
/// The log or the machine does not open.
pub fn open_shard_group(
    storage: &GroupStorage,
    store: &Arc<EventStore>,
    shard: u32,
    compaction: EventCompaction,
) -> Result<Replicated<AsCluster<EventShardMachine>>, StoreError> {
    let log = RaftLog::open_sealed(
        Arc::clone(&storage.backend),
        PathBuf::from(EVENTS_DIR).join(format!("shard-{shard:03}")),
        storage.log,
        &storage.pool,
        Arc::clone(&storage.cache),
        storage.cipher.clone(),
    )?;
    let machine = EventShardMachine::open(
        Arc::clone(store),
        shard,
        &log,
        Arc::clone(&storage.backend),
        compaction,
    )?;
    Replicated::open(log, AsCluster(machine))
}

/// The replicated event store's request path (cheap to clone).
#[derive(Clone)]
pub struct ClusterEvents {
    runner: Runner<ClusterOutcome>,
    store: Arc<EventStore>,
    directory: Directory,
    me: NodeId,
    forwarder: Option<super::transport::Forwarder>,
}

impl std::fmt::Debug for ClusterEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterEvents").finish_non_exhaustive()
    }
}

/// The out-of-band request kind of a change forwarded to its shard's leader (kind 1 is a
/// shard's records, for a snapshot copy).
pub const FORWARD_KIND: u8 = 2;

/// A change forwarded to its shard's leader: `kind u8 (2) · shard u32 · correlation flag u8 ·
/// correlation id u128 · the prepared command` ([`Command::encode`]).
pub fn encode_forward(shard: u32, correlation_id: Option<u128>, command: &Command) -> Bytes {
    let encoded = command.encode();
    let mut b = bytes::BytesMut::with_capacity(22 + encoded.len());
    bytes::BufMut::put_u8(&mut b, FORWARD_KIND);
    bytes::BufMut::put_u32_le(&mut b, shard);
    bytes::BufMut::put_u8(&mut b, u8::from(correlation_id.is_some()));
    bytes::BufMut::put_u128_le(&mut b, correlation_id.unwrap_or(0));
    b.extend_from_slice(&encoded);
    b.freeze()
}

/// Decodes [`encode_forward`]'s request: its shard, correlation id and command.
pub fn decode_forward(request: &Bytes) -> Option<(u32, Option<u128>, Command)> {
    if request.len() < 22 || request[0] != FORWARD_KIND {
        return None;
    }
    let shard = u32::from_le_bytes(request[1..5].try_into().ok()?);
    let correlation_id = match request[5] {
        0 => None,
        1 => Some(u128::from_le_bytes(request[6..22].try_into().ok()?)),
        _ => return None,
    };
    let command = Command::decode(&request.slice(22..)).ok()?;
    Some((shard, correlation_id, command))
}

/// The answer to a forwarded change: `status u8 (0) · response type id u32 · the response's
/// V2 body`, `status u8 (1) · why` (the leader could not take it), or `status u8 (2)` (the
/// member asked no longer leads the shard, or its leadership is moving: the change was
/// certainly not proposed, so the forwarding member may send it again).
pub fn encode_forward_answer(response: &eddy_codec::event::EventResponse) -> Bytes {
    let mut b = vec![0u8];
    b.extend_from_slice(&response.response_type().id().to_le_bytes());
    response.encode_body(eddy_wire::event::ProtocolVersion::V2, &mut b);
    b.into()
}

/// A refusal to take a forwarded change.
pub fn forward_refusal(why: &str) -> Bytes {
    let mut b = vec![1u8];
    b.extend_from_slice(why.as_bytes());
    b.into()
}

/// The answer of a member that does not (or no longer) lead the shard: nothing was proposed.
pub fn forward_not_leader() -> Bytes {
    Bytes::from_static(&[2])
}

/// Decodes the answer to a forwarded change (see [`encode_forward_answer`]).
pub(crate) fn decode_forward_answer(
    answer: &Bytes,
) -> Result<eddy_codec::event::EventResponse, EventClusterError> {
    let malformed = || EventClusterError::Unavailable("a malformed forwarded answer".into());
    match answer.first() {
        Some(0) if answer.len() >= 5 => {
            let id = u32::from_le_bytes(answer[1..5].try_into().map_err(|_| malformed())?);
            let kind = eddy_wire::event::ResponseType::from_id(id).ok_or_else(malformed)?;
            eddy_codec::event::EventResponse::decode_body(
                eddy_wire::event::ProtocolVersion::V2,
                kind,
                &answer[5..],
            )
            .map_err(|_| malformed())
        }
        Some(2) => Err(EventClusterError::NotLeader {
            leader_address: None,
        }),
        Some(1) => Err(EventClusterError::Unavailable(format!(
            "the leader did not take the forwarded change: {}",
            String::from_utf8_lossy(&answer[1..])
        ))),
        _ => Err(malformed()),
    }
}

impl ClusterEvents {
    /// The request path over node `me`'s event shard groups; `directory` gives members'
    /// client addresses.
    pub fn new(
        runner: Runner<ClusterOutcome>,
        store: Arc<EventStore>,
        directory: Directory,
        me: NodeId,
    ) -> Self {
        ClusterEvents {
            runner,
            store,
            directory,
            me,
            forwarder: None,
        }
    }

    /// Forwards changes this member does not lead over `forwarder` (to the shard's leader).
    #[must_use]
    pub fn with_forwarder(mut self, forwarder: super::transport::Forwarder) -> Self {
        self.forwarder = Some(forwarder);
        self
    }

    /// Sends a change this member prepared to its shard's leader, which proposes it as its
    /// own and answers with the client's response (success or refusal), so a client
    /// connected to any member is served. The leader never forwards it again.
    ///
    /// # Errors
    /// `NotLeader` when no other leader is known, there is no forwarder, or the member asked
    /// does not lead the shard (any more): in each case nothing was proposed. `Unavailable`
    /// when the leader cannot be reached or did not take it.
    pub async fn forward(
        &self,
        shard: u32,
        correlation_id: Option<u128>,
        command: &Command,
    ) -> Result<eddy_codec::event::EventResponse, EventClusterError> {
        let group = event_group_id(shard);
        let (Some(forwarder), Some((_, Some(leader)))) = (&self.forwarder, self.role(group)) else {
            return Err(self.not_leader(group));
        };
        if leader == self.me {
            return Err(self.not_leader(group));
        }
        let answer = forwarder
            .request(leader, &encode_forward(shard, correlation_id, command))
            .await
            .map_err(|e| EventClusterError::Unavailable(format!("forwarding to {leader}: {e}")))?;
        decode_forward_answer(&answer)
    }

    /// The store (reads serve what this member applied).
    pub fn store(&self) -> &Arc<EventStore> {
        &self.store
    }

    /// Waits until this member's `shard` shows readers every change acknowledged before now:
    /// it applied them, as the shard group's leader and a quorum confirm (see
    /// [`super::streams::linearized`]), and the records those entries queued are visible (a
    /// follower's apply queues a record that its log commits a moment later).
    ///
    /// # Errors
    /// The shard's leadership cannot be confirmed (no leader known, or this member is cut
    /// off from a quorum), or its records do not become visible within the read wait (this
    /// member's log failed).
    pub async fn linearize(&self, shard: u32) -> Result<(), ClusterError> {
        const WHAT: &str = "event shard's group";
        super::streams::linearized(&self.runner, event_group_id(shard), WHAT).await?;
        let visible = self.store.visible_barrier(shard);
        match tokio::time::timeout(super::streams::READ_CONFIRM_WAIT, visible).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::warn!(shard, error = %e, "applied event records did not become visible");
                Err(ClusterError::NotLeader(WHAT))
            }
            Err(_) => Err(ClusterError::NotLeader(WHAT)),
        }
    }

    /// Every shard's group id.
    pub fn group_ids(&self) -> Vec<GroupId> {
        (0..self.store.num_shards()).map(event_group_id).collect()
    }

    fn role(&self, group: GroupId) -> Option<(Role, Option<NodeId>)> {
        self.runner.view().get(group).map(|v| (v.role, v.leader))
    }

    /// The advertised client address of `node`.
    fn client_address(&self, node: NodeId) -> Option<String> {
        let info = self.directory.get(node)?;
        info.hello.prop(props::CLIENT).map(str::to_owned)
    }

    /// Proposes `command` to `shard`'s group and returns its outcome once it is committed and
    /// applied here.
    ///
    /// # Errors
    /// Not the shard's leader (with the leader's client address), not committed, or the
    /// store's refusal.
    pub async fn submit(
        &self,
        shard: u32,
        command: &Command,
    ) -> Result<Applied, EventClusterError> {
        let group = event_group_id(shard);
        // Elsewhere the change is forwarded to the shard's leader (`forward`).
        if !matches!(self.role(group), Some((Role::Leader, _))) {
            return Err(self.not_leader(group));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.propose(
            group,
            command.encode(),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        let outcome = match rx.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => return Err(refused(&e, || self.leader_address(group))),
            Err(_) => return Err(EventClusterError::Unavailable("the node stopped".into())),
        };
        match outcome {
            ClusterOutcome::Event(EventApplied::Applied(done)) => Ok(done.await?),
            ClusterOutcome::Event(EventApplied::Stopped) => Err(stopped(shard)),
            other => Err(EventClusterError::Unavailable(format!(
                "event shard {shard}'s group answered {other:?}"
            ))),
        }
    }

    fn not_leader(&self, group: GroupId) -> EventClusterError {
        EventClusterError::NotLeader {
            leader_address: self.leader_address(group),
        }
    }

    /// The client address of `group`'s leader as this member knows it (or, when none is
    /// known, of the metadata leader, which forwards), unless that is this member.
    fn leader_address(&self, group: GroupId) -> Option<String> {
        let leader = self
            .role(group)
            .and_then(|(_, l)| l)
            .or_else(|| self.role(METADATA_GROUP).and_then(|(_, l)| l));
        leader
            .filter(|l| *l != self.me)
            .and_then(|l| self.client_address(l))
    }
}

#[cfg(test)]
mod tests;
