//! `CREATE_TOPIC` (code 302, operation 132):
//! `[stream_id: Identifier][partitions_count: u32][name: WireName][options block to end]`.
//! `partitions_count` is an argument, never an option. The reply is the new topic's details.

use crate::stream::codec::wire_struct;
use crate::stream::commands::TrailingOptions;
use crate::stream::entities::TopicDetails;
use crate::stream::identifier::Identifier;
use crate::stream::name::WireName;

/// Most partitions one create/delete request may ask for.
pub const MAX_PARTITIONS_PER_REQUEST: u32 = 1000;

wire_struct! {
    /// Request body of `CREATE_TOPIC`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateTopic {
        /// Stream, by id or name.
        pub stream_id: Identifier,
        /// Partitions to create (0..=1000; 0 creates a topic without partitions).
        pub partitions_count: u32,
        /// Topic name (unique per stream).
        pub name: WireName,
        /// Topic options to the end of the body (see `eddy_options::TopicOptions`).
        pub options: TrailingOptions,
    }
}

crate::stream::commands::command!(CreateTopic, CreateTopic, TopicDetails);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::WireEncode;
    use crate::stream::commands::testing::*;
    use crate::stream::entities::{PartitionResponse, TopicHeader};
    use crate::stream::reply::RESULT_OK;
    use eddy_options::{TopicOptions, TopicSettings};

    /// Spec §1.13.4 request body and §5.8.3 worked reply (386 bytes).
    #[test]
    fn golden() {
        let request = CreateTopic {
            stream_id: Identifier::numeric(0),
            partitions_count: 1,
            name: WireName::new("test-topic").unwrap(),
            options: TrailingOptions::default(),
        };
        assert_eq!(
            round_trip(&request),
            hex("01 04 00 00 00 00 01 00 00 00 0a 74 65 73 74 2d 74 6f 70 69 63")
        );

        let created_at = 1_700_000_000_000_000;
        let reply = TopicDetails {
            topic: TopicHeader {
                id: 0,
                created_at,
                partitions_count: 1,
                message_expiry: u64::MAX,
                compression_algorithm: 1,
                max_topic_size: u64::MAX,
                size_bytes: 0,
                messages_count: 0,
                name: WireName::new("test-topic").unwrap(),
                options: TopicOptions::default().to_block(),
                derived_options: TopicOptions::default()
                    .derived_block(&TopicSettings::REFERENCE_DEFAULTS),
            },
            partitions: vec![PartitionResponse {
                id: 0,
                created_at,
                segments_count: 0,
                current_offset: 0,
                size_bytes: 0,
                messages_count: 0,
            }],
        };
        let mut body = RESULT_OK.to_vec();
        reply.encode(&mut body);
        // The derived block carries the 0.12.2 keys too (durability,
        // consumer_offset_durability, partition_resize_policy): 116 bytes past the reference.
        assert_eq!(body.len(), 502);
        assert_eq!(
            &body[..0x48],
            &hex(
                "00 00 00 00 00 00 00 00 00 40 1e 18 24 0a 06 00 01 00 00 00 \
                 ff ff ff ff ff ff ff ff 01 ff ff ff ff ff ff ff ff \
                 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
                 0a 74 65 73 74 2d 74 6f 70 69 63 00 00 00 00 86 01 00 00"
            )[..]
        );
        assert_eq!(
            &body[0x1ce..],
            &hex("00 00 00 00 00 40 1e 18 24 0a 06 00 00 00 00 00 \
                 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
                 00 00 00 00 00 00 00 00")[..]
        );
        round_trip_strict(&reply);
    }
}
