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
//! most `count` messages. eddy does not cut a reply at `max_bytes`: `count` bounds it, as for
//! `POLL_MESSAGES`.

use crate::stream::codec::wire_struct;
use crate::stream::commands::poll_messages::{PollMessages, PollMessagesReply};

/// The longest wait the protocol allows (600 s).
pub const MAX_WAIT_US: u64 = 600_000_000;
/// The least margin between the end of a wait and the request timeout.
pub const MIN_REPLY_MARGIN_US: u64 = 1_000_000;

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
    /// margin, `1 <= min_count <= count`.
    pub fn is_valid(&self) -> bool {
        self.wait_us <= MAX_WAIT_US
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
        ] {
            assert!(!invalid.is_valid(), "{invalid:?}");
        }
    }
}
