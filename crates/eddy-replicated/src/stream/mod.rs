//! The stream protocol's side of the replicated state: the error every stream handler
//! answers with ([`error::StreamError`], and [`error::ClusterError`] for what the cluster
//! refused) and what a partition group's apply turns a send into ([`Stampable`],
//! [`send_reply`]). The server answers clients with these; the simulator checks it answers
//! the same.

use bytes::Bytes;
use eddy_codec::stream::commands::send_messages::{SendConfirmation, SendMessagesReply};
use eddy_codec::stream::AdmittedBatch;
use eddy_stream_store::{PartitionAddr, Stamp, StampableBatch};

pub mod error;

/// The codec's admitted batch as storage's [`StampableBatch`]: stamping rewrites the 256-byte
/// header in place when the received buffer is no longer shared (the usual case for a large
/// send), and copies the batch into a fresh buffer otherwise.
#[derive(Debug)]
pub struct Stampable(pub AdmittedBatch);

impl StampableBatch for Stampable {
    fn message_count(&self) -> u32 {
        self.0.message_count()
    }

    fn stamp(self, stamp: &Stamp) -> Bytes {
        self.0.stamp_into_bytes(
            u64::from(stamp.partition_id),
            stamp.base_offset,
            stamp.base_timestamp,
        )
    }
}

/// The `SEND_MESSAGES` reply for a batch appended to `addr` at `base_offset`.
pub fn send_reply(addr: PartitionAddr, base_offset: u64) -> SendMessagesReply {
    SendMessagesReply {
        confirmations: vec![SendConfirmation {
            stream_id: addr.stream_id,
            topic_id: addr.topic_id,
            partition_id: addr.partition_id,
            base_offset,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use eddy_codec::stream::{admit, build_batch, Message, StoredBatch};

    fn received_batch() -> Bytes {
        let batch = build_batch(&[
            Message::new(1, 1_000, &b"first"[..]),
            Message::new(2, 1_010, &b"second"[..]),
        ])
        .unwrap();
        // As the connection reads it: a frame split off a read buffer, the frame header dropped.
        let mut read = BytesMut::with_capacity(1024);
        read.extend_from_slice(&[0u8; 40]);
        read.extend_from_slice(&batch);
        let frame = read.split_to(read.len()).freeze();
        drop(read);
        frame.slice(40..)
    }

    const STAMP: Stamp = Stamp {
        partition_id: 3,
        base_offset: 70,
        base_timestamp: 9_000,
    };

    #[test]
    fn stamping_rewrites_an_unshared_batch_in_place() {
        let body = received_batch();
        let at = body.as_ptr();
        let stored = Stampable(admit(body, 2).unwrap()).stamp(&STAMP);
        assert_eq!(stored.as_ptr(), at, "no copy");
        let parsed = StoredBatch::parse(stored).unwrap();
        parsed.verify().unwrap();
        assert_eq!(parsed.base_offset(), 70);
        assert_eq!(parsed.header().partition_id, 3);
        assert_eq!(parsed.base_timestamp(), 9_000);
    }

    #[test]
    fn stamping_a_shared_batch_copies_it() {
        let body = received_batch();
        let kept = body.clone();
        let stored = Stampable(admit(body, 2).unwrap()).stamp(&STAMP);
        assert_ne!(stored.as_ptr(), kept.as_ptr());
        let parsed = StoredBatch::parse(stored).unwrap();
        parsed.verify().unwrap();
        assert_eq!(parsed.base_offset(), 70);
        assert_eq!(&kept[256..], &parsed.bytes()[256..], "frames unchanged");
    }
}
