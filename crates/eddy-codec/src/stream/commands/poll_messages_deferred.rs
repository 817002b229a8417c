//! `POLL_MESSAGES_DEFERRED` (code 106) of the 0.12.2 wire: a poll that may wait for messages
//! (`PollOptions` of the edge.9 SDK).
//!
//! ```text
//! request  [POLL_MESSAGES body][wait_us: u64][min_count: u32][max_bytes: u32]
//!          [request_timeout_us: u64]
//! reply    as POLL_MESSAGES (in the 0.12.2 layout: a 40-byte prefix)
//! ```
//!
//! The server answers once `min_count` messages are there or `wait_us` has passed, with at
//! most `count` messages and at most `max_bytes` of reply body (the 40-byte prefix, batch
//! headers and frames), except that a first message larger than that comes alone, so a read
//! always makes progress (the SDK's `PollOptions::max_bytes`). A `max_bytes` below
//! [`MIN_MAX_BYTES`] is refused, as the SDK refuses it before sending.

use crate::stream::batch::{BATCH_HEADER_SIZE, FRAME_HEADER_SIZE};
use crate::stream::codec::wire_struct;
use crate::stream::commands::poll_messages::{PollMessages, PollMessagesReply};
use crate::stream::v0_12::PartitionContext;

/// The longest wait the protocol allows (600 s).
pub const MAX_WAIT_US: u64 = 600_000_000;
/// The least margin between the end of a wait and the request timeout.
pub const MIN_REPLY_MARGIN_US: u64 = 1_000_000;
/// The 0.12.2 poll reply's prefix: partition, current offset, count, [`PartitionContext`].
pub const REPLY_PREFIX_LEN: u32 = (16 + PartitionContext::LEN) as u32;
/// The smallest byte limit that can return a message: the reply prefix, one batch header and
/// one frame header (the SDK's `MIN_DEFERRED_POLL_MAX_BYTES`).
pub const MIN_MAX_BYTES: u32 = REPLY_PREFIX_LEN + (BATCH_HEADER_SIZE + FRAME_HEADER_SIZE) as u32;

wire_struct! {
    /// Request body of `POLL_MESSAGES_DEFERRED`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PollMessagesDeferred {
        /// The poll.
        pub poll: PollMessages,
        /// How long to wait for `min_count` messages.
        pub wait_us: u64,
        /// Messages that end the wait early (1..=count).
        pub min_count: u32,
        /// Record bytes the reply may carry.
        pub max_bytes: u32,
        /// The client's deadline for the reply.
        pub request_timeout_us: u64,
    }
}

crate::stream::commands::command!(
    PollMessagesDeferred,
    PollMessagesDeferred,
    PollMessagesReply
);

impl PollMessagesDeferred {
    /// The protocol's bounds: a wait of at most 600 s inside the request timeout with a 1 s
    /// margin, `1 <= min_count <= count`, `max_bytes >= MIN_MAX_BYTES`.
    pub fn is_valid(&self) -> bool {
        self.max_bytes >= MIN_MAX_BYTES
            && self.wait_us <= MAX_WAIT_US
            && self.min_count >= 1
            && self.min_count <= self.poll.count
            && self.request_timeout_us > 0
            && (self.wait_us == 0
                || self.request_timeout_us >= self.wait_us.saturating_add(MIN_REPLY_MARGIN_US))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::identifier::{Consumer, Identifier};
    use crate::stream::polling::{OptionalPartition, PollingStrategy};

    #[test]
    fn request_round_trips_and_bounds() {
        let request = PollMessagesDeferred {
            poll: PollMessages {
                consumer: Consumer::new(Identifier::numeric(1)),
                stream_id: Identifier::numeric(1),
                topic_id: Identifier::numeric(1),
                partition: OptionalPartition(Some(0)),
                strategy: PollingStrategy::Offset(0),
                count: 5,
                auto_commit: false,
            },
            wait_us: 2_000_000,
            min_count: 1,
            max_bytes: 1 << 20,
            request_timeout_us: 30_000_000,
        };
        round_trip_strict(&request);
        assert!(request.is_valid());
        assert_eq!(MIN_MAX_BYTES, 344, "the SDK's MIN_DEFERRED_POLL_MAX_BYTES");
        assert!(PollMessagesDeferred {
            max_bytes: MIN_MAX_BYTES,
            ..request.clone()
        }
        .is_valid());
        for invalid in [
            PollMessagesDeferred {
                min_count: 0,
                ..request.clone()
            },
            PollMessagesDeferred {
                min_count: 6,
                ..request.clone()
            },
            PollMessagesDeferred {
                wait_us: MAX_WAIT_US + 1,
                request_timeout_us: u64::MAX,
                ..request.clone()
            },
            PollMessagesDeferred {
                request_timeout_us: 2_500_000,
                ..request.clone()
            },
            PollMessagesDeferred {
                max_bytes: MIN_MAX_BYTES - 1,
                ..request.clone()
            },
            PollMessagesDeferred {
                max_bytes: 0,
                ..request.clone()
            },
        ] {
            assert!(!invalid.is_valid(), "{invalid:?}");
        }
    }
}
