//! Retention across the store: each topic's `message_expiry` and `max_topic_size` (shared
//! equally by its partitions), optionally held back by consumer offsets. Never blocks appends.

use eddy_log::SegmentSummary;

use crate::error::Result;
use crate::partition::{PartitionAddr, RetentionPolicy};

use super::config::MAX_BATCH_BYTES;
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
}

impl StreamStore {
    /// Applies every topic's retention (`message_expiry`, `max_topic_size` split equally over
    /// its partitions and floored at one segment plus one maximum batch) at time `now_us`.
    /// Never blocks appends.
    pub fn run_retention(&self, now_us: u64) -> Result<RetentionReport> {
        let plans: Vec<(PartitionAddr, RetentionPolicy)> = self.read_metadata(|state| {
            let mut plans = Vec::new();
            for stream in state.streams.values() {
                for topic in stream.topics.values() {
                    let count = topic.partitions.len().max(1) as u64;
                    let floor = topic.config.segment_size.saturating_add(MAX_BATCH_BYTES);
                    let max_bytes = topic
                        .config
                        .max_topic_size
                        .map(|max| (max / count).max(floor));
                    for p in topic.partitions.values() {
                        let keep_above = if self.config.retention_respects_consumer_offsets {
                            p.offsets.values().min().copied()
                        } else {
                            None
                        };
                        plans.push((
                            PartitionAddr {
                                stream_id: stream.id,
                                topic_id: topic.id,
                                partition_id: p.id,
                            },
                            RetentionPolicy {
                                message_expiry: topic.config.message_expiry,
                                max_bytes,
                                keep_above,
                            },
                        ));
                    }
                }
            }
            plans
        });
        let mut report = RetentionReport::default();
        for (addr, policy) in plans {
            let Some(partition) = self.registry.get(addr) else {
                continue;
            };
            let deleted = partition.apply_retention(&policy, now_us)?;
            if !deleted.is_empty() {
                report.deleted.push((addr, deleted));
            }
        }
        Ok(report)
    }
}
