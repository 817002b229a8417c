//! The engine's `Storage` over a [`GroupStore`], with a cache of the newest entries.
//!
//! The engine reads entries back as soon as it has handed them over for persistence (before
//! they are durable) and keeps asking for the newest ones while it replicates them; the store
//! serves only durable entries. The cache holds every entry whose append has not completed
//! plus the most recent durable ones up to a byte budget, so replication to followers that keep
//! up never reads the disk.

use std::collections::VecDeque;

use raft::eraftpb;
use raft::{GetEntriesContext, RaftState, Storage};

use crate::convert::{conf_state_to_raft, entry_from_raft, entry_to_raft, hard_state_to_raft};
use crate::store::{GroupStore, StoreError};
use crate::types::{LogEntry, Membership, NodeId};

/// One append whose durability has not been reported yet.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    ticket: u64,
    first: u64,
    last: u64,
}

/// The engine-facing storage of one group.
pub(crate) struct Adapter<O> {
    pub(crate) store: Box<dyn GroupStore<Outcome = O>>,
    /// The group's current membership.
    membership: Membership,
    /// Contiguous entries ending at `last` (when non-empty).
    cache: VecDeque<LogEntry>,
    cache_bytes: u64,
    cache_budget: u64,
    /// Last appended index (durable or not).
    last: u64,
    /// Last index whose latest write is durable.
    durable_last: u64,
    in_flight: VecDeque<InFlight>,
    next_ticket: u64,
}

impl<O> std::fmt::Debug for Adapter<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("last", &self.last)
            .field("durable_last", &self.durable_last)
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl<O: Send + 'static> Adapter<O> {
    pub(crate) fn new(
        store: Box<dyn GroupStore<Outcome = O>>,
        voters: Vec<NodeId>,
        cache_budget: u64,
    ) -> Self {
        let last = store.last_index();
        let membership = store
            .membership()
            .unwrap_or_else(|| Membership::initial(voters));
        Adapter {
            store,
            membership,
            cache: VecDeque::new(),
            cache_bytes: 0,
            cache_budget,
            last,
            durable_last: last,
            in_flight: VecDeque::new(),
            next_ticket: 0,
        }
    }

    /// Last appended index (durable or not).
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// The group's current membership.
    pub(crate) fn membership(&self) -> &Membership {
        &self.membership
    }

    /// Records the group's membership (durable on return): a change applied at its index,
    /// or what a snapshot brought.
    pub(crate) fn record_membership(&mut self, membership: Membership) -> Result<(), StoreError> {
        self.store.save_membership(&membership)?;
        self.membership = membership;
        Ok(())
    }

    /// The ticket of the latest append handed to the store (0: none yet).
    pub(crate) fn last_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// Records entries handed to the store; returns the ticket its durability report carries.
    pub(crate) fn begin_append(&mut self, entries: &[LogEntry]) -> u64 {
        let first = entries[0].index;
        let last = entries[entries.len() - 1].index;
        debug_assert!(
            first <= self.last + 1,
            "gap before {first}: log ends at {}",
            self.last
        );
        while self.cache.back().is_some_and(|e| e.index >= first) {
            let e = self.cache.pop_back().expect("checked");
            self.cache_bytes -= e.size();
        }
        if self.cache.back().is_some_and(|e| e.index + 1 != first) {
            // Cannot happen (the cache ends at `last` and `first <= last + 1`), but a
            // non-contiguous cache would serve wrong entries: start it over instead.
            self.cache.clear();
            self.cache_bytes = 0;
        }
        for e in entries {
            self.cache_bytes += e.size();
            self.cache.push_back(e.clone());
        }
        self.last = last;
        self.durable_last = self.durable_last.min(first - 1);
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.in_flight.push_back(InFlight {
            ticket,
            first,
            last,
        });
        ticket
    }

    /// The append with `ticket` (and every earlier one) is durable.
    pub(crate) fn complete_append(&mut self, ticket: u64) {
        while let Some(done) = self.in_flight.front().copied() {
            if done.ticket > ticket {
                break;
            }
            self.in_flight.pop_front();
            // Later appends may already have replaced part of what this one wrote.
            let overwritten = self
                .in_flight
                .iter()
                .map(|f| f.first.saturating_sub(1))
                .min()
                .unwrap_or(u64::MAX);
            self.durable_last = self.durable_last.max(done.last.min(overwritten));
        }
        self.trim_cache();
    }

    /// The log now starts after a freshly installed snapshot.
    pub(crate) fn reset_to_snapshot(&mut self, index: u64) {
        self.cache.clear();
        self.cache_bytes = 0;
        self.in_flight.clear();
        self.last = index;
        self.durable_last = index;
    }

    fn trim_cache(&mut self) {
        while self.cache_bytes > self.cache_budget {
            match self.cache.front() {
                Some(e) if e.index <= self.durable_last && self.cache.len() > 1 => {
                    self.cache_bytes -= e.size();
                    self.cache.pop_front();
                }
                _ => break,
            }
        }
        // Entries below the store's first index were compacted away: never serve them.
        let first = self.store.first_index();
        while self.cache.front().is_some_and(|e| e.index < first) {
            let e = self.cache.pop_front().expect("checked");
            self.cache_bytes -= e.size();
        }
    }

    fn cached(&self, index: u64) -> Option<&LogEntry> {
        let front = self.cache.front()?.index;
        let offset = usize::try_from(index.checked_sub(front)?).ok()?;
        self.cache.get(offset)
    }

    fn to_raft_error(error: StoreError) -> raft::Error {
        match error {
            StoreError::Compacted { .. } => raft::Error::Store(raft::StorageError::Compacted),
            StoreError::Unavailable { .. } => raft::Error::Store(raft::StorageError::Unavailable),
            StoreError::SnapshotTemporarilyUnavailable => {
                raft::Error::Store(raft::StorageError::SnapshotTemporarilyUnavailable)
            }
            other => raft::Error::Store(raft::StorageError::Other(Box::new(other))),
        }
    }
}

impl<O: Send + 'static> Storage for Adapter<O> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let mut hard = self.store.hard_state();
        // The persisted commit index is trusted only as far as the state machine got. A
        // follower saves a new commit index in the same step that replaces a conflicting tail
        // with the leader's entries; if those entries are lost (a crash before their sync, a
        // failed write) the commit index survives over the old tail, and applying under it
        // would apply entries that were never committed (found by the simulator, seed 427
        // heavy). Raft needs no durable commit index: the leader sends it again.
        hard.commit = self.store.applied_index();
        Ok(RaftState::new(
            hard_state_to_raft(hard),
            conf_state_to_raft(&self.membership),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<eraftpb::Entry>> {
        let max = max_size.into().unwrap_or(u64::MAX);
        let first = self.store.first_index();
        if low < first {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let cache_first = self.cache.front().map_or(self.last + 1, |e| e.index);
        let mut out = Vec::new();
        let mut size = 0u64;
        if low < cache_first {
            let upto = high.min(cache_first);
            let stored = self
                .store
                .entries(low, upto, max)
                .map_err(Self::to_raft_error)?;
            let complete = stored.len() as u64 == upto - low;
            for e in &stored {
                size += e.size();
                out.push(entry_to_raft(e));
            }
            if !complete || upto == high {
                return Ok(out);
            }
        }
        for index in low.max(cache_first)..high {
            let e = self
                .cached(index)
                .ok_or(raft::Error::Store(raft::StorageError::Unavailable))?;
            if !out.is_empty() && size + e.size() > max {
                break;
            }
            size += e.size();
            out.push(entry_to_raft(e));
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let snap = self.store.snapshot_meta();
        if idx == snap.index {
            return Ok(snap.term);
        }
        if idx < snap.index {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if idx > self.last {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        if let Some(e) = self.cached(idx) {
            return Ok(e.term);
        }
        self.store.term(idx).map_err(Self::to_raft_error)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.store.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last)
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<eraftpb::Snapshot> {
        let snap = self.store.snapshot().map_err(Self::to_raft_error)?;
        // The current members, with the index of the change that made them, ride in front
        // of the store's bytes: a snapshot may end before that change (a partition's ends at
        // its visible floor), and its receiver must be in the configuration for the engine
        // to take it, then skip the changes it is sent again up to that index.
        let mut out = eraftpb::Snapshot {
            data: wrap_snapshot(&self.membership, &snap.data),
            ..Default::default()
        };
        let meta = out.mut_metadata();
        meta.index = snap.meta.index;
        meta.term = snap.meta.term;
        meta.set_conf_state(conf_state_to_raft(&self.membership));
        Ok(out)
    }
}

/// Magic of the envelope in front of a snapshot's store bytes (see [`wrap_snapshot`]).
const SNAPSHOT_MAGIC: [u8; 8] = *b"EDSNAP01";

/// A snapshot's bytes as sent: [`SNAPSHOT_MAGIC`], the membership's length (u32 LE) and
/// encoding ([`Membership::encode`]), then the store's bytes.
pub(crate) fn wrap_snapshot(membership: &Membership, data: &[u8]) -> bytes::Bytes {
    let encoded = membership.encode();
    let mut out = Vec::with_capacity(12 + encoded.len() + data.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&u32::try_from(encoded.len()).expect("small").to_le_bytes());
    out.extend_from_slice(&encoded);
    out.extend_from_slice(data);
    out.into()
}

/// A snapshot's membership and store bytes; bytes without the envelope (a snapshot from a
/// member of an older version) are the store's, with no membership.
pub(crate) fn unwrap_snapshot(data: &bytes::Bytes) -> (Option<Membership>, bytes::Bytes) {
    let parsed = (|| {
        if data.get(..8)? != SNAPSHOT_MAGIC {
            return None;
        }
        let len = u32::from_le_bytes(data.get(8..12)?.try_into().ok()?) as usize;
        let (membership, rest) = Membership::decode(data.get(12..12 + len)?)?;
        rest.is_empty().then_some((membership, 12 + len))
    })();
    match parsed {
        Some((membership, at)) => (Some(membership), data.slice(at..)),
        None => (None, data.clone()),
    }
}

/// Entries from the engine's type, for the store.
pub(crate) fn entries_from_raft(entries: &[eraftpb::Entry]) -> Vec<LogEntry> {
    entries.iter().map(entry_from_raft).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_carries_its_members_in_front_of_the_store_bytes() {
        let m = Membership {
            voters: vec![1, 2, 4],
            learners: vec![5],
            voters_outgoing: vec![1, 2, 3],
            learners_next: vec![3],
            auto_leave: true,
            index: 77,
        };
        let wrapped = wrap_snapshot(&m, b"store bytes");
        assert_eq!(
            unwrap_snapshot(&wrapped),
            (Some(m.clone()), bytes::Bytes::from_static(b"store bytes"))
        );
        // An older member's snapshot (no envelope) is the store's bytes as they are, and so
        // is anything whose envelope does not decode whole.
        let plain = bytes::Bytes::from_static(b"EDSNAP01 but not an envelope");
        assert_eq!(unwrap_snapshot(&plain), (None, plain.clone()));
        for cut in 0..wrapped.len() - 11 {
            let (found, _) = unwrap_snapshot(&wrapped.slice(..cut));
            assert!(
                found.is_none() || cut >= 12 + m.encode().len(),
                "cut at {cut}"
            );
        }
        let encoded = m.encode();
        assert_eq!(Membership::decode(&encoded), Some((m, &[][..])));
        assert_eq!(Membership::decode(&encoded[..encoded.len() - 1]), None);
    }
}
