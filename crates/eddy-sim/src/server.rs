//! Both protocols on one cluster (`--store server`): every node runs what an eddy member runs,
//! on one Raft node, the metadata group, the stream partition groups ([`crate::streams`]) and
//! the event-store shard groups ([`crate::events`]), their clients interleaved. Each group
//! kind keeps its own disk per node (a crash or a fault hits both at once) and its own final
//! check.

use bytes::Bytes;
use eddy_consensus::{GroupId, GroupStore, NodeId, ProposeError, StoreError};
use eddy_replicated::groups::event_group_id;

use crate::config::Millis;
use crate::events::{EventDir, EventFactory, EventWorkload};
use crate::rng::SimRng;
use crate::store::{DiskFault, StoreFactory};
use crate::streams::{StreamDir, StreamFactory, StreamWorkload};
use crate::workload::{OpId, Workload};

/// Whether `group` is an event-store shard's group (the others are the stream store's).
fn is_event(group: GroupId) -> bool {
    group.0 >= event_group_id(0).0
}

/// The stream and event factories side by side.
#[derive(Debug)]
pub struct ServerFactory {
    streams: StreamFactory,
    events: EventFactory,
}

/// A node's data directory: the stream store's part and the event store's part.
#[derive(Debug)]
pub struct ServerDir {
    streams: StreamDir,
    events: EventDir,
}

/// Runs `$call` on the factory and directory part `$group` belongs to.
macro_rules! by_group {
    ($self:ident, $dir:expr, $group:expr, |$f:ident, $d:ident| $call:expr) => {
        if is_event($group) {
            let ($f, $d) = (&mut $self.events, &mut $dir.events);
            $call
        } else {
            let ($f, $d) = (&mut $self.streams, &mut $dir.streams);
            $call
        }
    };
}

impl StoreFactory for ServerFactory {
    type Outcome = u64;
    type Dir = ServerDir;

    fn create(&mut self, node: NodeId) -> ServerDir {
        ServerDir {
            streams: self.streams.create(node),
            events: self.events.create(node),
        }
    }

    fn open(
        &mut self,
        dir: &mut ServerDir,
        group: GroupId,
    ) -> Result<Box<dyn GroupStore<Outcome = u64>>, StoreError> {
        by_group!(self, dir, group, |f, d| f.open(d, group))
    }

    fn unsynced(&self, dir: &ServerDir) -> bool {
        self.streams.unsynced(&dir.streams) || self.events.unsynced(&dir.events)
    }

    fn sync(&mut self, dir: &mut ServerDir) {
        self.streams.sync(&mut dir.streams);
        self.events.sync(&mut dir.events);
    }

    fn crash(&mut self, dir: &mut ServerDir, tear: bool, rng: &mut SimRng) -> u64 {
        self.streams.crash(&mut dir.streams, tear, rng)
            + self.events.crash(&mut dir.events, tear, rng)
    }

    fn set_fault(&mut self, dir: &mut ServerDir, fault: Option<DiskFault>) {
        self.streams.set_fault(&mut dir.streams, fault);
        self.events.set_fault(&mut dir.events, fault);
    }

    fn copy_snapshot(
        &mut self,
        from: &ServerDir,
        to: &mut ServerDir,
        group: GroupId,
        data: &Bytes,
    ) -> Result<bool, String> {
        if is_event(group) {
            self.events
                .copy_snapshot(&from.events, &mut to.events, group, data)
        } else {
            self.streams
                .copy_snapshot(&from.streams, &mut to.streams, group, data)
        }
    }

    fn delete_segments(&mut self, dir: &mut ServerDir, group: GroupId) -> Option<Bytes> {
        by_group!(self, dir, group, |f, d| f.delete_segments(d, group))
    }

    fn observe(
        &mut self,
        dir: &mut ServerDir,
        group: GroupId,
        rng: &mut SimRng,
    ) -> Result<(), String> {
        by_group!(self, dir, group, |f, d| f.observe(d, group, rng))
    }

    fn purge(&mut self, dir: &mut ServerDir, group: GroupId) -> Option<Bytes> {
        by_group!(self, dir, group, |f, d| f.purge(d, group))
    }

    fn compact(&mut self, dir: &mut ServerDir, group: GroupId, through: u64) -> bool {
        by_group!(self, dir, group, |f, d| f.compact(d, group, through))
    }

    fn state(&self, dir: &ServerDir, group: GroupId) -> Vec<(u64, Bytes)> {
        if is_event(group) {
            self.events.state(&dir.events, group)
        } else {
            self.streams.state(&dir.streams, group)
        }
    }

    fn prepare(
        &mut self,
        dir: &mut ServerDir,
        group: GroupId,
        attempt: (OpId, u64),
        payload: Bytes,
        now: Millis,
    ) -> Result<Bytes, String> {
        by_group!(self, dir, group, |f, d| f
            .prepare(d, group, attempt, payload, now))
    }

    fn settled(&mut self, dir: &mut ServerDir, group: GroupId, attempt: (OpId, u64)) {
        by_group!(self, dir, group, |f, d| f.settled(d, group, attempt));
    }

    fn acked(
        &mut self,
        dir: &mut ServerDir,
        group: GroupId,
        index: u64,
        op: OpId,
    ) -> Result<bool, String> {
        by_group!(self, dir, group, |f, d| f.acked(d, group, index, op))
    }

    fn told_error(
        &mut self,
        dir: &mut ServerDir,
        group: GroupId,
        error: ProposeError,
    ) -> Result<ProposeError, String> {
        by_group!(self, dir, group, |f, d| f.told_error(d, group, error))
    }

    fn stalled(&self, dir: &ServerDir) -> bool {
        self.streams.stalled(&dir.streams) || self.events.stalled(&dir.events)
    }

    fn check_final(&self, dirs: &[(NodeId, &ServerDir)]) -> Result<String, String> {
        let streams: Vec<(NodeId, &StreamDir)> =
            dirs.iter().map(|(n, d)| (*n, &d.streams)).collect();
        let events: Vec<(NodeId, &EventDir)> = dirs.iter().map(|(n, d)| (*n, &d.events)).collect();
        Ok(format!(
            "{}; {}",
            self.streams.check_final(&streams)?,
            self.events.check_final(&events)?
        ))
    }
}

/// Stream and event clients, interleaved.
#[derive(Debug)]
pub struct ServerWorkload {
    streams: StreamWorkload,
    events: EventWorkload,
}

impl Workload for ServerWorkload {
    fn groups(&self) -> Vec<GroupId> {
        let mut groups = self.streams.groups();
        groups.extend(self.events.groups());
        groups
    }

    fn choose_group(&mut self, rng: &mut SimRng) -> GroupId {
        if rng.chance(0.5) {
            self.streams.choose_group(rng)
        } else {
            self.events.choose_group(rng)
        }
    }

    fn payload(&mut self, group: GroupId, id: OpId, rng: &mut SimRng) -> Bytes {
        if is_event(group) {
            self.events.payload(group, id, rng)
        } else {
            self.streams.payload(group, id, rng)
        }
    }

    fn op_id(&self, group: GroupId, payload: &[u8]) -> Option<OpId> {
        if is_event(group) {
            self.events.op_id(group, payload)
        } else {
            self.streams.op_id(group, payload)
        }
    }
}

/// The factory and workload of one `--store server` run: `partitions` partition groups and as
/// many event shards, plus the metadata group.
pub fn pair(partitions: u64) -> (ServerFactory, ServerWorkload) {
    let (streams, stream_clients) = crate::streams::pair(partitions);
    let shards = u32::try_from(partitions).unwrap_or(1);
    let (events, event_clients) = crate::events::pair(shards);
    (
        ServerFactory { streams, events },
        ServerWorkload {
            streams: stream_clients,
            events: event_clients,
        },
    )
}
