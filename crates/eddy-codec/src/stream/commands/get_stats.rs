//! `GET_STATS` (code 10): empty request; the reply is a 108-byte numeric part, five
//! u32-prefixed strings, the semver, cache metrics, threads and disk space (spec §5.1.2).

use crate::stream::codec::{wire_struct, Counted, LongString, F32};

crate::stream::commands::empty_body! {
    /// Request body of `GET_STATS` (empty).
    GetStats
}

wire_struct! {
    /// One cache metric entry (32 bytes).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CacheMetric {
        /// Stream id.
        pub stream_id: u32,
        /// Topic id.
        pub topic_id: u32,
        /// Partition id.
        pub partition_id: u32,
        /// Cache hits.
        pub hits: u64,
        /// Cache misses.
        pub misses: u64,
        /// Hit ratio.
        pub hit_ratio: F32,
    }
}

wire_struct! {
    /// Reply payload of `GET_STATS`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Stats {
        /// Server process id.
        pub process_id: u32,
        /// CPU usage of the process, percent.
        pub cpu_usage: F32,
        /// Total CPU usage, percent.
        pub total_cpu_usage: F32,
        /// Process memory, bytes.
        pub memory_usage: u64,
        /// Total memory, bytes.
        pub total_memory: u64,
        /// Available memory, bytes.
        pub available_memory: u64,
        /// Uptime, µs.
        pub run_time: u64,
        /// Start time, µs since the epoch.
        pub start_time: u64,
        /// Bytes read.
        pub read_bytes: u64,
        /// Bytes written.
        pub written_bytes: u64,
        /// Stored message bytes.
        pub messages_size_bytes: u64,
        /// Streams.
        pub streams_count: u32,
        /// Topics.
        pub topics_count: u32,
        /// Partitions.
        pub partitions_count: u32,
        /// Segments.
        pub segments_count: u32,
        /// Messages.
        pub messages_count: u64,
        /// Connected clients.
        pub clients_count: u32,
        /// Consumer groups.
        pub consumer_groups_count: u32,
        /// Host name.
        pub hostname: LongString,
        /// OS name.
        pub os_name: LongString,
        /// OS version.
        pub os_version: LongString,
        /// Kernel version.
        pub kernel_version: LongString,
        /// Server version text.
        pub iggy_server_version: LongString,
        /// `major * 1_000_000 + minor * 1_000 + patch`; 0 = absent.
        pub iggy_server_semver: u32,
        /// Cache metrics (the reference sends none).
        pub cache_metrics: Counted<CacheMetric, 32>,
        /// Threads.
        pub threads_count: u32,
        /// Free disk space, bytes.
        pub free_disk_space: u64,
        /// Total disk space, bytes.
        pub total_disk_space: u64,
    }
}

crate::stream::commands::command!(GetStats, GetStats, Stats);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::Field;
    use crate::stream::commands::testing::*;

    #[test]
    fn layout_and_round_trip() {
        let stats = Stats {
            process_id: 1,
            cpu_usage: F32(1.5),
            total_cpu_usage: F32(3.0),
            memory_usage: 2,
            total_memory: 3,
            available_memory: 4,
            run_time: 5,
            start_time: 6,
            read_bytes: 7,
            written_bytes: 8,
            messages_size_bytes: 9,
            streams_count: 10,
            topics_count: 11,
            partitions_count: 12,
            segments_count: 13,
            messages_count: 14,
            clients_count: 15,
            consumer_groups_count: 16,
            hostname: LongString::new("host"),
            os_name: LongString::new("linux"),
            os_version: LongString::new("6"),
            kernel_version: LongString::new("6.1"),
            iggy_server_version: LongString::new("0.1.0"),
            iggy_server_semver: 1_000,
            cache_metrics: Counted(vec![CacheMetric {
                stream_id: 1,
                topic_id: 2,
                partition_id: 3,
                hits: 4,
                misses: 5,
                hit_ratio: F32(0.5),
            }]),
            threads_count: 4,
            free_disk_space: 100,
            total_disk_space: 200,
        };
        let bytes = round_trip_strict(&stats);
        assert_eq!(
            &bytes[104..108],
            &16u32.to_le_bytes(),
            "fixed part is 108 bytes"
        );
        assert_eq!(&bytes[108..112], &4u32.to_le_bytes());
        assert_eq!(
            stats.field_len(),
            108 + 8 + 9 + 5 + 7 + 9 + 4 + 4 + 32 + 4 + 16
        );
        assert!(round_trip(&GetStats).is_empty());
    }
}
