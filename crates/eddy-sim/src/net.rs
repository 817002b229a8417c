//! The simulated network between nodes: which directed links are cut, and how long a batch
//! takes (or whether it arrives at all, or twice).
//!
//! A batch is the frame one node sends another after one processing step (every message for
//! that peer, of every group). Delays are drawn per batch, so batches overtake each other;
//! a partition drops what is sent over a cut link and what was in flight when it was cut.

use std::collections::BTreeSet;

use eddy_consensus::NodeId;

use crate::config::{FaultConfig, Millis};
use crate::rng::SimRng;

/// The shape of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKind {
    /// A minority of nodes cannot talk with the rest, either way.
    Symmetric,
    /// Random directed links drop everything; their reverse still works.
    OneWay,
    /// One node is cut from every other, both ways.
    Isolate,
}

/// What happens to one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// The link is cut.
    Cut,
    /// Lost by the network.
    Lost,
    /// Delivered after each of these delays (two for a duplicate).
    Delivered {
        /// One delay per copy.
        delays: Vec<Millis>,
        /// A copy was held back so later batches overtake it.
        reordered: bool,
    },
}

/// Links, cuts and per-batch faults.
#[derive(Debug, Clone)]
pub struct Network {
    nodes: u64,
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Nodes cut from every other until let back in, whatever partitions come and heal.
    isolated: BTreeSet<NodeId>,
    /// Bumped at every partition and heal, so a scheduled heal only ends its own partition.
    epoch: u64,
}

impl Network {
    /// A fully connected network of nodes `1..=nodes`.
    pub fn new(nodes: u64) -> Self {
        Network {
            nodes,
            cut: BTreeSet::new(),
            isolated: BTreeSet::new(),
            epoch: 0,
        }
    }

    /// Whether `from` can currently reach `to`.
    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.cut.contains(&(from, to))
            || self.isolated.contains(&from)
            || self.isolated.contains(&to)
    }

    /// Cuts `node` from every other, both ways, until [`Network::let_in`] (heals leave it
    /// cut).
    pub fn isolate_for_good(&mut self, node: NodeId) {
        self.isolated.insert(node);
    }

    /// Ends [`Network::isolate_for_good`].
    pub fn let_in(&mut self, node: NodeId) {
        self.isolated.remove(&node);
    }

    /// The nodes cut for good.
    pub fn isolated(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.isolated.iter().copied()
    }

    /// Whether any link is cut.
    pub fn partitioned(&self) -> bool {
        !self.cut.is_empty()
    }

    /// The current partition's number.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Cuts links as `kind` says (choices from `rng`); returns the new epoch.
    pub fn partition(&mut self, kind: PartitionKind, rng: &mut SimRng) -> u64 {
        self.cut.clear();
        let all: Vec<NodeId> = (1..=self.nodes).collect();
        match kind {
            PartitionKind::Symmetric | PartitionKind::Isolate => {
                let size = if kind == PartitionKind::Isolate {
                    1
                } else {
                    rng.range(1, self.nodes / 2)
                };
                let mut rest = all.clone();
                let mut side = Vec::new();
                for _ in 0..size {
                    side.push(rest.remove(rng.index(rest.len())));
                }
                for &a in &side {
                    for &b in &rest {
                        self.cut.insert((a, b));
                        self.cut.insert((b, a));
                    }
                }
            }
            PartitionKind::OneWay => {
                let links = rng.range(1, self.nodes);
                for _ in 0..links {
                    let a = all[rng.index(all.len())];
                    let b = all[rng.index(all.len())];
                    // One way only: never both directions of a pair.
                    if a != b && !self.cut.contains(&(b, a)) {
                        self.cut.insert((a, b));
                    }
                }
                if self.cut.is_empty() {
                    self.cut.insert((1, 2));
                }
            }
        }
        self.epoch += 1;
        self.epoch
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.cut.clear();
        self.epoch += 1;
    }

    /// The cut links, for traces.
    pub fn cut_links(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.cut.iter().copied()
    }

    /// Decides a batch's fate under `faults` (all faults off when `calm`).
    pub fn fate(
        &self,
        from: NodeId,
        to: NodeId,
        faults: &FaultConfig,
        calm: bool,
        rng: &mut SimRng,
    ) -> Fate {
        if self.is_cut(from, to) {
            return Fate::Cut;
        }
        if !calm && rng.chance(faults.loss) {
            return Fate::Lost;
        }
        let mut reordered = false;
        let mut delay = |rng: &mut SimRng| {
            let mut d = faults.delay_min_ms + rng.exponential(faults.delay_mean_ms);
            if !calm && rng.chance(faults.reorder) {
                d += rng.range(1, faults.reorder_max_ms.max(1));
                reordered = true;
            }
            d.max(1)
        };
        let mut delays = vec![delay(rng)];
        if !calm && rng.chance(faults.duplicate) {
            delays.push(delay(rng));
        }
        Fate::Delivered { delays, reordered }
    }

    /// The delay of a client's request or answer (clients are never partitioned).
    pub fn client_delay(faults: &FaultConfig, rng: &mut SimRng) -> Millis {
        (faults.delay_min_ms + rng.exponential(faults.delay_mean_ms)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reachable(net: &Network, n: u64) -> usize {
        (1..=n)
            .flat_map(|a| (1..=n).map(move |b| (a, b)))
            .filter(|&(a, b)| a != b && !net.is_cut(a, b))
            .count()
    }

    #[test]
    fn partitions_cut_what_their_kind_says_and_heal_restores_everything() {
        let mut rng = SimRng::new(3);
        for _ in 0..50 {
            let mut net = Network::new(5);
            net.partition(PartitionKind::Isolate, &mut rng);
            // One node cut both ways: 4 x 2 directed links gone out of 20.
            assert_eq!(reachable(&net, 5), 12);
            let alone = (1..=5)
                .find(|&a| (1..=5).all(|b| a == b || net.is_cut(a, b)))
                .unwrap();
            assert!((1..=5).all(|b| b == alone || net.is_cut(b, alone)));

            net.partition(PartitionKind::Symmetric, &mut rng);
            let cut: Vec<_> = net.cut_links().collect();
            assert!(cut.iter().all(|&(a, b)| net.is_cut(b, a)), "symmetric");
            // A minority side of 1 or 2 nodes: 8 or 12 directed links.
            assert!([8, 12].contains(&cut.len()), "{cut:?}");

            net.partition(PartitionKind::OneWay, &mut rng);
            assert!(net.partitioned());
            assert!(
                net.cut_links().all(|(a, b)| !net.is_cut(b, a)),
                "one-way cuts leave the reverse link"
            );
            let epoch = net.epoch();
            net.heal();
            assert!(!net.partitioned());
            assert_eq!(reachable(&net, 5), 20);
            assert!(net.epoch() > epoch);
        }
    }

    #[test]
    fn batch_fates_follow_the_fault_probabilities() {
        let mut rng = SimRng::new(9);
        let net = Network::new(3);
        let calm = FaultConfig::default();
        for _ in 0..1000 {
            match net.fate(1, 2, &calm, false, &mut rng) {
                Fate::Delivered { delays, reordered } => {
                    assert_eq!(delays.len(), 1);
                    assert!(delays[0] >= 1 && !reordered);
                }
                other => panic!("a fault-free network did {other:?}"),
            }
        }
        let faulty = FaultConfig {
            loss: 0.2,
            duplicate: 0.2,
            reorder: 0.2,
            reorder_max_ms: 100,
            ..FaultConfig::default()
        };
        let (mut lost, mut dup, mut reord) = (0, 0, 0);
        for _ in 0..5000 {
            match net.fate(1, 2, &faulty, false, &mut rng) {
                Fate::Lost => lost += 1,
                Fate::Delivered { delays, reordered } => {
                    dup += usize::from(delays.len() == 2);
                    reord += usize::from(reordered);
                }
                Fate::Cut => panic!("not partitioned"),
            }
        }
        for (name, n) in [("lost", lost), ("duplicated", dup), ("reordered", reord)] {
            assert!((500..=1500).contains(&n), "{name}: {n}");
        }
        // Calm: the same probabilities are ignored.
        assert!((0..1000).all(|_| matches!(
            net.fate(1, 2, &faulty, true, &mut rng),
            Fate::Delivered { ref delays, reordered: false } if delays.len() == 1
        )));
    }
}
