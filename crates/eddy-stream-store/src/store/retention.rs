//! Retention across the store: each topic's `message_expiry` (per partition) and
//! `max_topic_size` (over the whole topic), optionally held back by consumer offsets. Never
//! blocks appends.
//!
//! Size retention measures a topic as its size figure does (the stored batch bytes of every
//! segment of every partition, active ones included) and, while that is above
//! `max_topic_size`, deletes the topic's oldest sealed segment: the one whose newest message is
//! oldest, whichever partition holds it. Active segments are never deleted, so a topic whose
//! active segments alone exceed the size keeps them (and nothing else).

use std::sync::Arc;

use eddy_log::SegmentSummary;

use crate::error::Result;
use crate::partition::{Partition, PartitionAddr, RetentionPolicy};

use super::StreamStore;

/// Per-partition outcome of a retention run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Deleted segments by partition.
    pub deleted: Vec<(PartitionAddr, Vec<SegmentSummary>)>,
}

impl RetentionReport {
    /// Total deleted segments.
    pub fn segments(&self) -> usize {
        self.deleted.iter().map(|(_, s)| s.len()).sum()
    }

    fn add(&mut self, addr: PartitionAddr, deleted: Vec<SegmentSummary>) {
        if deleted.is_empty() {
            return;
        }
        match self.deleted.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, segments)) => segments.extend(deleted),
            None => self.deleted.push((addr, deleted)),
        }
    }
}

/// One topic's retention settings and partitions, read from the metadata.
struct TopicPlan {
    message_expiry: Option<u64>,
    max_topic_size: Option<u64>,
    /// Each partition with its consumer pin (see [`RetentionPolicy::keep_above`]).
    partitions: Vec<(PartitionAddr, Option<u64>)>,
}

/// A partition taking part in a size run: its segments when the run started and how many of
/// them (oldest first) the run deletes.
struct SizeCandidate {
    addr: PartitionAddr,
    partition: Arc<Partition>,
    keep_above: Option<u64>,
    segments: Vec<SegmentSummary>,
    planned: usize,
}

impl SizeCandidate {
    /// The next segment the run may delete: sealed, not the last one, not pinned.
    fn next(&self) -> Option<&SegmentSummary> {
        let seg = self.segments.get(self.planned)?;
        let last = self.planned + 1 >= self.segments.len();
        let pinned = self
            .keep_above
            .is_some_and(|pin| seg.end > pin.saturating_add(1));
        (seg.sealed && !last && !pinned).then_some(seg)
    }
}

impl StreamStore {
    /// Applies every topic's retention at time `now_us`: `message_expiry` per partition, then
    /// `max_topic_size` over the whole topic (see the module docs). Never blocks appends.
    pub fn run_retention(&self, now_us: u64) -> Result<RetentionReport> {
        let plans: Vec<TopicPlan> = self.read_metadata(|state| {
            let mut plans = Vec::new();
            for stream in state.streams.values() {
                for topic in stream.topics.values() {
                    let partitions = topic
                        .partitions
                        .values()
                        .map(|p| {
                            let keep_above = if self.config.retention_respects_consumer_offsets {
                                p.offsets.values().min().copied()
                            } else {
                                None
                            };
                            let addr = PartitionAddr {
                                stream_id: stream.id,
                                topic_id: topic.id,
                                partition_id: p.id,
                            };
                            (addr, keep_above)
                        })
                        .collect();
                    plans.push(TopicPlan {
                        message_expiry: topic.config.message_expiry,
                        max_topic_size: topic.config.max_topic_size,
                        partitions,
                    });
                }
            }
            plans
        });
        let mut report = RetentionReport::default();
        for plan in plans {
            if plan.message_expiry.is_some() {
                for &(addr, keep_above) in &plan.partitions {
                    let Some(partition) = self.registry.get(addr) else {
                        continue;
                    };
                    let policy = RetentionPolicy {
                        message_expiry: plan.message_expiry,
                        max_bytes: None,
                        keep_above,
                    };
                    report.add(addr, partition.apply_retention(&policy, now_us)?);
                }
            }
            if let Some(max) = plan.max_topic_size {
                self.apply_topic_size(&plan.partitions, max, &mut report)?;
            }
        }
        Ok(report)
    }

    /// Deletes the topic's oldest sealed segments while its stored bytes exceed `max`.
    fn apply_topic_size(
        &self,
        partitions: &[(PartitionAddr, Option<u64>)],
        max: u64,
        report: &mut RetentionReport,
    ) -> Result<()> {
        let mut candidates: Vec<SizeCandidate> = partitions
            .iter()
            .filter_map(|&(addr, keep_above)| {
                let partition = self.registry.get(addr)?;
                let segments = partition.log().segments();
                Some(SizeCandidate {
                    addr,
                    partition,
                    keep_above,
                    segments,
                    planned: 0,
                })
            })
            .collect();
        let mut total: u64 = candidates
            .iter()
            .flat_map(|c| &c.segments)
            .map(SegmentSummary::payload_bytes)
            .sum();
        while total > max {
            // The oldest deletable segment of the topic: smallest newest timestamp, then the
            // lowest partition id.
            let oldest = candidates
                .iter_mut()
                .filter_map(|c| {
                    let seg = c.next()?;
                    Some((seg.max_timestamp.unwrap_or(0), c.addr.partition_id, c))
                })
                .min_by_key(|(ts, partition_id, _)| (*ts, *partition_id));
            let Some((_, _, candidate)) = oldest else {
                break;
            };
            let bytes = candidate.segments[candidate.planned].payload_bytes();
            total = total.saturating_sub(bytes);
            candidate.planned += 1;
        }
        for c in candidates.into_iter().filter(|c| c.planned > 0) {
            let bases: Vec<u64> = c.segments[..c.planned].iter().map(|s| s.base).collect();
            report.add(c.addr, c.partition.delete_sealed_segments(&bases)?);
        }
        Ok(())
    }
}
