//! What the simulated clients propose: a [`Workload`] chooses each operation's group and
//! payload, and finds an operation's id in an applied payload again.
//!
//! Every operation has a run-wide unique [`OpId`]; every retry of it carries the same id (and
//! the same payload), so the checker can tell a duplicate caused by a retry after an unknown
//! outcome from one that nothing explains.

use bytes::{BufMut, Bytes, BytesMut};
use eddy_consensus::GroupId;

use crate::rng::SimRng;

/// A client operation's id, unique in a run.
pub type OpId = u64;

/// Chooses operations and recognizes them once applied.
pub trait Workload {
    /// Every group of the cluster; every node runs all of them.
    fn groups(&self) -> Vec<GroupId>;
    /// The group a client's next operation goes to.
    fn choose_group(&mut self, rng: &mut SimRng) -> GroupId;
    /// The payload of operation `id` on `group` (it must carry `id`, see [`Workload::op_id`]).
    fn payload(&mut self, group: GroupId, id: OpId, rng: &mut SimRng) -> Bytes;
    /// The operation a payload applied in `group` belongs to (`None`: not a client
    /// operation).
    fn op_id(&self, group: GroupId, payload: &[u8]) -> Option<OpId>;
}

/// A metadata group taking a small share of small operations and a few data groups taking
/// the rest, with payloads of varied sizes.
#[derive(Debug, Clone)]
pub struct MixedWorkload {
    data_groups: u64,
}

/// First byte of every payload [`MixedWorkload`] makes.
const TAG: u8 = 0xE5;
/// Percent of operations that go to the metadata group.
const METADATA_PERCENT: u64 = 10;

impl MixedWorkload {
    /// The metadata group plus `data_groups` data groups (`GroupId(1)..`).
    pub fn new(data_groups: u64) -> Self {
        MixedWorkload { data_groups }
    }
}

impl Workload for MixedWorkload {
    fn groups(&self) -> Vec<GroupId> {
        std::iter::once(GroupId::METADATA)
            .chain((1..=self.data_groups).map(GroupId))
            .collect()
    }

    fn choose_group(&mut self, rng: &mut SimRng) -> GroupId {
        if self.data_groups == 0 || rng.below(100) < METADATA_PERCENT {
            GroupId::METADATA
        } else {
            GroupId(rng.range(1, self.data_groups))
        }
    }

    fn payload(&mut self, group: GroupId, id: OpId, rng: &mut SimRng) -> Bytes {
        let pad = if group == GroupId::METADATA {
            rng.below(32)
        } else {
            rng.below(512)
        };
        let mut out = BytesMut::with_capacity(17 + usize::try_from(pad).expect("small"));
        out.put_u8(TAG);
        out.put_u64_le(id);
        out.put_u64_le(group.0);
        for _ in 0..pad {
            out.put_u8(rng.below(256) as u8);
        }
        out.freeze()
    }

    fn op_id(&self, _group: GroupId, payload: &[u8]) -> Option<OpId> {
        if payload.len() < 17 || payload[0] != TAG {
            return None;
        }
        Some(u64::from_le_bytes(
            payload[1..9].try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_their_id_and_groups_get_their_share() {
        let mut w = MixedWorkload::new(3);
        assert_eq!(w.groups(), [GroupId(0), GroupId(1), GroupId(2), GroupId(3)]);
        let mut rng = SimRng::new(1);
        let mut per_group = [0u32; 4];
        for id in 0..4000 {
            let g = w.choose_group(&mut rng);
            per_group[usize::try_from(g.0).unwrap()] += 1;
            let p = w.payload(g, id, &mut rng);
            assert_eq!(w.op_id(g, &p), Some(id));
        }
        assert!((250..=550).contains(&per_group[0]), "{per_group:?}");
        assert!(per_group[1..].iter().all(|&n| n > 1000), "{per_group:?}");
        assert_eq!(w.op_id(GroupId(1), b""), None);
        assert_eq!(w.op_id(GroupId(1), &[0u8; 20]), None);
    }
}
