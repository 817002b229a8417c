//! Message batch properties: producer batches pass admission, any flipped bit is rejected with
//! the error of the region it hit, stamping and slicing keep the bodies in place.

use bytes::Bytes;
use eddy_codec::stream::batch::{
    admit, build_batch, Message, StoredBatch, BATCH_HEADER_SIZE, FRAME_HEADER_SIZE,
};
use eddy_codec::stream::user_headers::{HeaderField, UserHeaders};
use eddy_codec::stream::BatchError;
use proptest::prelude::*;

fn messages() -> Vec<Message> {
    let mut headers = UserHeaders::new();
    headers
        .insert("trace", HeaderField::string("abc").unwrap())
        .unwrap();
    let mut with_headers = Message::new(3, 1_000_020, &b"third"[..]);
    with_headers.user_headers = Bytes::from(headers.encode().unwrap());
    vec![
        Message::new(1, 1_000_000, &b"first"[..]),
        Message::new(2, 1_000_010, &b"second message"[..]),
        with_headers,
    ]
}

/// What part of a batch a byte belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    HeaderField(usize),
    HeaderReserved,
    FrameChecksum,
    FrameId,
    FrameOffsetDelta,
    FrameTimestampDelta,
    FrameLengths,
    FrameReserved,
    Body,
}

fn regions(batch: &[u8]) -> Vec<Region> {
    let mut out = Vec::with_capacity(batch.len());
    for at in 0..BATCH_HEADER_SIZE {
        out.push(if at < 52 {
            Region::HeaderField(at)
        } else {
            Region::HeaderReserved
        });
    }
    let mut pos = BATCH_HEADER_SIZE;
    while pos < batch.len() {
        let payload = u32::from_le_bytes(batch[pos + 36..pos + 40].try_into().unwrap()) as usize;
        let headers = u32::from_le_bytes(batch[pos + 32..pos + 36].try_into().unwrap()) as usize;
        for at in 0..FRAME_HEADER_SIZE {
            out.push(match at {
                0..=7 => Region::FrameChecksum,
                8..=23 => Region::FrameId,
                24..=27 => Region::FrameOffsetDelta,
                28..=31 => Region::FrameTimestampDelta,
                32..=39 => Region::FrameLengths,
                _ => Region::FrameReserved,
            });
        }
        out.extend(std::iter::repeat_n(Region::Body, payload + headers));
        pos += FRAME_HEADER_SIZE + payload + headers;
    }
    assert_eq!(out.len(), batch.len());
    out
}

#[test]
fn producer_batches_are_admitted() {
    let batch = build_batch(&messages()).unwrap();
    let admitted = admit(batch.clone(), 3).unwrap();
    assert_eq!(admitted.message_count(), 3);
    assert_eq!(admitted.first_origin_timestamp(), 1_000_000);
    assert_eq!(admitted.last_origin_timestamp(), 1_000_020);
    assert_eq!(admitted.as_bytes(), &batch);
}

#[test]
fn every_flipped_bit_is_rejected_with_the_error_of_its_region() {
    let batch = build_batch(&messages()).unwrap().to_vec();
    let regions = regions(&batch);
    for (at, region) in regions.iter().enumerate() {
        for bit in 0..8 {
            let mut corrupt = batch.clone();
            corrupt[at] ^= 1 << bit;
            let err = admit(Bytes::from(corrupt), 3).expect_err("a flipped bit must be rejected");
            let ok = match region {
                Region::HeaderField(f) if (32..40).contains(f) => matches!(
                    err,
                    BatchError::LengthMismatch { .. } | BatchError::TooLarge { .. }
                ),
                Region::HeaderField(f) if (40..48).contains(f) => {
                    matches!(err, BatchError::BatchChecksum { .. })
                }
                Region::HeaderField(f) if (48..52).contains(f) => matches!(
                    err,
                    BatchError::CountMismatch { .. } | BatchError::TooManyMessages { .. }
                ),
                Region::HeaderField(_) => matches!(err, BatchError::BatchChecksum { .. }),
                Region::HeaderReserved => matches!(err, BatchError::HeaderReserved { .. }),
                Region::FrameReserved => matches!(err, BatchError::FrameReserved { .. }),
                Region::FrameOffsetDelta => matches!(err, BatchError::OffsetDelta { .. }),
                Region::FrameChecksum
                | Region::FrameId
                | Region::FrameTimestampDelta
                | Region::Body => matches!(err, BatchError::MessageChecksum { .. }),
                Region::FrameLengths => matches!(
                    err,
                    BatchError::Truncated { .. }
                        | BatchError::FrameReserved { .. }
                        | BatchError::OffsetDelta { .. }
                        | BatchError::MessageChecksum { .. }
                        | BatchError::CountMismatch { .. }
                ),
            };
            assert!(ok, "byte {at} bit {bit} ({region:?}): {err:?}");
        }
    }
}

#[test]
fn structural_rejections() {
    let batch = build_batch(&messages()).unwrap();
    assert!(matches!(
        admit(batch.clone(), 2),
        Err(BatchError::CountMismatch {
            declared: 2,
            found: 3
        })
    ));
    let mut trailing = batch.to_vec();
    trailing.push(0);
    assert!(matches!(
        admit(Bytes::from(trailing), 3),
        Err(BatchError::LengthMismatch { .. })
    ));
    for cut in 0..batch.len() {
        assert!(admit(batch.slice(..cut), 3).is_err(), "prefix {cut}");
    }
    assert_eq!(build_batch(&[]), Err(BatchError::Empty));
    assert!(build_batch(&[Message::new(1, 0, Bytes::new())]).is_err());
    let spread = [
        Message::new(1, 0, &b"a"[..]),
        Message::new(2, 1 << 33, &b"b"[..]),
    ];
    assert!(matches!(
        build_batch(&spread),
        Err(BatchError::InvalidMessage { index: 1, .. })
    ));
}

#[test]
fn stamping_rewrites_only_the_header() {
    let batch = build_batch(&messages()).unwrap();
    let frames_ptr = batch[BATCH_HEADER_SIZE..].as_ptr();
    let stamped = admit(batch, 3).unwrap().stamp(4, 1000, 77);
    assert_eq!(
        stamped.frames().as_ptr(),
        frames_ptr,
        "frames are not copied"
    );
    assert_eq!(stamped.base_offset(), 1000);
    assert_eq!(stamped.last_offset(), 1002);
    assert_eq!(stamped.base_timestamp(), 77);
    assert_eq!(stamped.header().partition_id, 4);
    let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
    stored.verify().unwrap();
    assert_eq!(stored.len(), stamped.len());
    let [head, frames] = stamped.chunks();
    assert_eq!(head.len(), BATCH_HEADER_SIZE);
    assert_eq!(frames.as_ptr(), frames_ptr);
}

#[test]
fn slicing_does_not_copy_bodies() {
    let stamped = admit(build_batch(&messages()).unwrap(), 3)
        .unwrap()
        .stamp(0, 10, 5);
    let stored_bytes = Bytes::from(stamped.to_vec());
    let stored = StoredBatch::parse(stored_bytes.clone()).unwrap();

    let whole = stored.slice(0, 100).unwrap();
    assert_eq!(whole.header_bytes().as_ptr(), stored_bytes.as_ptr());
    assert_eq!(
        whole.frames().as_ptr(),
        stored_bytes[BATCH_HEADER_SIZE..].as_ptr()
    );

    let middle = stored.slice(11, 1).unwrap();
    let second_frame = BATCH_HEADER_SIZE + FRAME_HEADER_SIZE + 5;
    assert_eq!(
        middle.frames().as_ptr(),
        stored_bytes[second_frame..].as_ptr(),
        "a sliced view shares the stored bytes"
    );
    let messages: Vec<_> = middle.messages().collect();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].offset, 11);
    assert_eq!(&messages[0].payload[..], b"second message");
    assert_eq!(
        messages[0].payload.as_ptr(),
        stored_bytes[second_frame + FRAME_HEADER_SIZE..].as_ptr()
    );

    let tail = stored.slice(11, 5).unwrap();
    assert_eq!(tail.message_count(), 2);
    let mut rebuilt = tail.header_bytes().to_vec();
    rebuilt.extend_from_slice(tail.frames());
    StoredBatch::parse(Bytes::from(rebuilt))
        .unwrap()
        .verify()
        .unwrap();

    assert!(matches!(
        stored.slice(13, 1),
        Err(BatchError::OutOfRange { .. })
    ));
    assert!(matches!(stored.slice(5, 6), Ok(r) if r.message_count() == 1));
    assert!(
        stored.slice(5, 5).is_err(),
        "offsets 5..10 end before the batch"
    );
    assert!(stored.slice(12, 0).is_err());
}

fn message_strategy() -> impl Strategy<Value = Message> {
    (
        any::<u128>(),
        0u64..1_000_000,
        proptest::collection::vec(any::<u8>(), 1..200),
    )
        .prop_map(|(id, ts, payload)| Message::new(id, 1_700_000_000_000_000 + ts, payload))
}

proptest! {
    #[test]
    fn build_admit_stamp_slice(messages in proptest::collection::vec(message_strategy(), 1..12),
                               base in 0u64..1_000_000, start in 0u64..12, count in 1u32..12) {
        let n = messages.len() as u32;
        let batch = build_batch(&messages).unwrap();
        let stamped = admit(batch, n).unwrap().stamp(1, base, 42);
        let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
        stored.verify().unwrap();
        let all: Vec<_> = stored.record().messages().collect();
        prop_assert_eq!(all.len(), messages.len());
        for (i, (polled, sent)) in all.iter().zip(&messages).enumerate() {
            prop_assert_eq!(polled.offset, base + i as u64);
            prop_assert_eq!(polled.id, sent.id);
            prop_assert_eq!(&polled.payload, &sent.payload);
            prop_assert_eq!(polled.origin_timestamp, sent.origin_timestamp);
            prop_assert_eq!(polled.timestamp, 42);
        }
        match stored.slice(base + start, count) {
            Ok(record) => {
                let offsets: Vec<u64> = record.messages().map(|m| m.offset).collect();
                let expected: Vec<u64> = (base + start..(base + start + u64::from(count)).min(base + u64::from(n))).collect();
                prop_assert_eq!(offsets, expected);
                let mut whole = record.header_bytes().to_vec();
                whole.extend_from_slice(record.frames());
                let reparsed = StoredBatch::parse(Bytes::from(whole)).unwrap();
                prop_assert!(reparsed.verify().is_ok());
            }
            Err(_) => prop_assert!(start >= u64::from(n)),
        }
    }
}

proptest! {
    /// A byte budget's count: the slice of that many messages fits the budget and one more
    /// does not (or the range is exhausted).
    #[test]
    fn fitting_is_the_largest_slice_within_the_budget(
        messages in proptest::collection::vec(message_strategy(), 1..12),
        start in 0u64..13, count in 0u32..13, max_bytes in 0u64..3_000,
    ) {
        let n = messages.len() as u32;
        let batch = build_batch(&messages).unwrap();
        let stamped = admit(batch, n).unwrap().stamp(1, 100, 42);
        let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
        let fit = stored.fitting(100 + start, count, max_bytes).unwrap();
        let available = u32::try_from(u64::from(n).saturating_sub(start)).unwrap().min(count);
        prop_assert!(fit <= available);
        if fit > 0 {
            let record = stored.slice(100 + start, fit).unwrap();
            prop_assert_eq!(record.message_count(), fit);
            prop_assert!(record.len() as u64 <= max_bytes);
        }
        if fit < available {
            let more = stored.slice(100 + start, fit + 1).unwrap();
            prop_assert!(more.len() as u64 > max_bytes);
        }
    }
}

#[test]
fn fitting_counts_the_header_and_every_frame() {
    let messages = messages();
    let n = messages.len() as u32;
    let stamped = admit(build_batch(&messages).unwrap(), n)
        .unwrap()
        .stamp(1, 0, 42);
    let stored = StoredBatch::parse(Bytes::from(stamped.to_vec())).unwrap();
    let whole = stored.len() as u64;
    assert_eq!(stored.fitting(0, n, whole).unwrap(), n);
    assert_eq!(stored.fitting(0, n, whole - 1).unwrap(), n - 1);
    assert_eq!(stored.fitting(0, n, u64::MAX).unwrap(), n);
    assert_eq!(
        stored.fitting(0, n, BATCH_HEADER_SIZE as u64).unwrap(),
        0,
        "a header alone"
    );
    let one = stored.slice(0, 1).unwrap().len() as u64;
    assert_eq!(stored.fitting(0, n, one).unwrap(), 1);
    assert_eq!(
        stored.fitting(u64::from(n), n, u64::MAX).unwrap(),
        0,
        "past the batch"
    );
    assert_eq!(stored.fitting(0, 0, u64::MAX).unwrap(), 0);
}
