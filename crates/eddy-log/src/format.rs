//! The on-disk byte layouts: segment header, record header, index header and index entry.
//!
//! All integers are little-endian; every structure has a fixed size and its fields sit at fixed
//! offsets (pinned by `const` assertions below). The crate docs carry the diagrams; this module
//! is the single place that reads and writes the bytes.

use crate::error::Corruption;

/// Magic at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"EDDYSEG\0";
/// Magic at the start of every index file.
pub const INDEX_MAGIC: [u8; 8] = *b"EDDYIDX\0";
/// Magic at the start of every record (`"eREC"` read as a little-endian u32).
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"eREC");
/// The only segment, record and index format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Size of a segment file header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Size of a record header.
pub const RECORD_HEADER_LEN: usize = 48;
/// Size of an index file header.
pub const INDEX_HEADER_LEN: usize = 32;
/// Size of one index entry.
pub const INDEX_ENTRY_LEN: usize = 32;

/// Largest record payload the log accepts or believes when reading (checked before any
/// allocation): 64 MiB, the stream protocol's frame cap.
pub const MAX_RECORD_PAYLOAD: u32 = 64 * 1024 * 1024;
/// Largest number of sequence numbers one record may cover.
pub const MAX_RECORD_COUNT: u32 = 1 << 24;

const _: () = assert!(SEGMENT_HEADER_LEN == 8 + 4 + 4 + 8 + 4 + 4);
const _: () = assert!(RECORD_HEADER_LEN == 4 + 4 + 4 + 4 + 8 + 8 + 8 + 4 + 4);
const _: () = assert!(INDEX_HEADER_LEN == 8 + 4 + 4 + 8 + 4 + 4);
const _: () = assert!(INDEX_ENTRY_LEN == 8 + 8 + 8 + 4 + 4);

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(raw)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(raw)
}

// ------------------------------------------------------------------------------------------------
// Segment header.

/// Encodes the header of a segment whose first record will carry `base_seq`.
pub fn encode_segment_header(base_seq: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_LEN];
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    // 12..16 flags: zero.
    out[16..24].copy_from_slice(&base_seq.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    // 28..32 reserved: zero.
    out
}

/// Decodes a segment header, returning its base sequence number.
pub fn decode_segment_header(bytes: &[u8]) -> Result<u64, Corruption> {
    if bytes.len() < SEGMENT_HEADER_LEN {
        return Err(Corruption::Truncated);
    }
    let bytes = &bytes[..SEGMENT_HEADER_LEN];
    if bytes[0..8] != SEGMENT_MAGIC {
        return Err(Corruption::BadSegmentHeader);
    }
    if crc32c::crc32c(&bytes[0..24]) != u32_at(bytes, 24) {
        return Err(Corruption::BadSegmentHeader);
    }
    let version = u32_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(Corruption::UnknownVersion(version));
    }
    if u32_at(bytes, 12) != 0 || u32_at(bytes, 28) != 0 {
        return Err(Corruption::BadSegmentHeader);
    }
    Ok(u64_at(bytes, 16))
}

// ------------------------------------------------------------------------------------------------
// Record header.

/// The fields of a record header, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Number of sequence numbers the record covers (at least 1).
    pub count: u32,
    /// First sequence number covered.
    pub seq: u64,
    /// Timestamp (µs) chosen by the writer; non-decreasing along a log.
    pub timestamp: u64,
    /// Length of this file that was durable when the record was written: every byte below it
    /// had been synced. Recovery uses it to tell a torn tail from interior damage.
    pub synced_len: u64,
    /// Application tag (0 for partition batches).
    pub tag: u32,
    /// CRC-32C of the payload.
    pub payload_crc: u32,
}

impl RecordHeader {
    /// Total bytes the record occupies in its file.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN as u64 + u64::from(self.payload_len)
    }

    /// The sequence number following the record.
    pub fn end_seq(&self) -> u64 {
        self.seq + u64::from(self.count)
    }

    /// Encodes the header, computing its header checksum.
    pub fn encode(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut out = [0u8; RECORD_HEADER_LEN];
        out[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        out[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        out[12..16].copy_from_slice(&self.count.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.timestamp.to_le_bytes());
        out[32..40].copy_from_slice(&self.synced_len.to_le_bytes());
        out[40..44].copy_from_slice(&self.tag.to_le_bytes());
        out[44..48].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&out[8..RECORD_HEADER_LEN]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies a header found at byte `position` of its file. Verifies the magic,
    /// the header checksum and the structural fields, not the payload.
    pub fn decode(bytes: &[u8], position: u64) -> Result<RecordHeader, Corruption> {
        if bytes.len() < RECORD_HEADER_LEN {
            return Err(Corruption::Truncated);
        }
        if u32_at(bytes, 0) != RECORD_MAGIC {
            return Err(Corruption::BadRecordMagic);
        }
        if crc32c::crc32c(&bytes[8..RECORD_HEADER_LEN]) != u32_at(bytes, 4) {
            return Err(Corruption::HeaderChecksum);
        }
        let header = RecordHeader {
            payload_len: u32_at(bytes, 8),
            count: u32_at(bytes, 12),
            seq: u64_at(bytes, 16),
            timestamp: u64_at(bytes, 24),
            synced_len: u64_at(bytes, 32),
            tag: u32_at(bytes, 40),
            payload_crc: u32_at(bytes, 44),
        };
        // A header with a valid checksum but impossible fields was written by a buggy build or
        // crafted; either way it is not ours to trust.
        if header.payload_len > MAX_RECORD_PAYLOAD {
            return Err(Corruption::BadHeaderField("payload_len"));
        }
        if header.count == 0 || header.count > MAX_RECORD_COUNT {
            return Err(Corruption::BadHeaderField("count"));
        }
        if header.seq.checked_add(u64::from(header.count)).is_none() {
            return Err(Corruption::BadHeaderField("seq"));
        }
        if header.synced_len > position {
            return Err(Corruption::BadHeaderField("synced_len"));
        }
        Ok(header)
    }

    /// Verifies `payload` against the header's payload checksum and length.
    pub fn verify_payload(&self, payload: &[u8]) -> Result<(), Corruption> {
        if payload.len() as u64 != u64::from(self.payload_len) {
            return Err(Corruption::Truncated);
        }
        if crc32c::crc32c(payload) != self.payload_crc {
            return Err(Corruption::PayloadChecksum);
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// Index file.

/// What an index entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// The record at `position` starts with sequence `seq` and carries `timestamp`.
    Record,
    /// The segment is sealed: its file is exactly `position` bytes long, its records end just
    /// before sequence `seq`, and its newest timestamp is `timestamp`.
    Seal,
}

/// One index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Sequence number (see [`IndexKind`]).
    pub seq: u64,
    /// Timestamp (see [`IndexKind`]).
    pub timestamp: u64,
    /// Byte position in the segment file (see [`IndexKind`]).
    pub position: u64,
    /// Entry kind.
    pub kind: IndexKind,
}

impl IndexEntry {
    /// Encodes the entry with its checksum.
    pub fn encode(&self) -> [u8; INDEX_ENTRY_LEN] {
        let mut out = [0u8; INDEX_ENTRY_LEN];
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..16].copy_from_slice(&self.timestamp.to_le_bytes());
        out[16..24].copy_from_slice(&self.position.to_le_bytes());
        let kind: u32 = match self.kind {
            IndexKind::Record => 0,
            IndexKind::Seal => 1,
        };
        out[24..28].copy_from_slice(&kind.to_le_bytes());
        let crc = crc32c::crc32c(&out[0..28]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies one entry. A zero-filled entry fails its checksum.
    pub fn decode(bytes: &[u8]) -> Result<IndexEntry, Corruption> {
        if bytes.len() < INDEX_ENTRY_LEN {
            return Err(Corruption::Truncated);
        }
        if crc32c::crc32c(&bytes[0..28]) != u32_at(bytes, 28) {
            return Err(Corruption::FileChecksum);
        }
        let kind = match u32_at(bytes, 24) {
            0 => IndexKind::Record,
            1 => IndexKind::Seal,
            _ => return Err(Corruption::BadHeaderField("index kind")),
        };
        Ok(IndexEntry {
            seq: u64_at(bytes, 0),
            timestamp: u64_at(bytes, 8),
            position: u64_at(bytes, 16),
            kind,
        })
    }
}

/// Encodes the header of the index of the segment starting at `base_seq`.
pub fn encode_index_header(base_seq: u64) -> [u8; INDEX_HEADER_LEN] {
    let mut out = [0u8; INDEX_HEADER_LEN];
    out[0..8].copy_from_slice(&INDEX_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(INDEX_ENTRY_LEN as u32).to_le_bytes());
    out[16..24].copy_from_slice(&base_seq.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes an index header, returning its base sequence number.
pub fn decode_index_header(bytes: &[u8]) -> Result<u64, Corruption> {
    if bytes.len() < INDEX_HEADER_LEN {
        return Err(Corruption::Truncated);
    }
    if bytes[0..8] != INDEX_MAGIC || crc32c::crc32c(&bytes[0..24]) != u32_at(bytes, 24) {
        return Err(Corruption::BadSegmentHeader);
    }
    let version = u32_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(Corruption::UnknownVersion(version));
    }
    // The entry size is pinned: a parser of one stride must never read another (lesson 6).
    if u32_at(bytes, 12) != INDEX_ENTRY_LEN as u32 || u32_at(bytes, 28) != 0 {
        return Err(Corruption::BadSegmentHeader);
    }
    Ok(u64_at(bytes, 16))
}

/// The file name of the segment starting at `base_seq`.
pub fn segment_file_name(base_seq: u64) -> String {
    format!("{base_seq:020}.log")
}

/// The file name of the index of the segment starting at `base_seq`.
pub fn index_file_name(base_seq: u64) -> String {
    format!("{base_seq:020}.index")
}

/// Parses a segment or index file name, returning its base and whether it is an index.
pub fn parse_file_name(name: &str) -> Option<(u64, bool)> {
    let (stem, is_index) = if let Some(stem) = name.strip_suffix(".log") {
        (stem, false)
    } else if let Some(stem) = name.strip_suffix(".index") {
        (stem, true)
    } else {
        return None;
    };
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().map(|base| (base, is_index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> RecordHeader {
        RecordHeader {
            payload_len: 5,
            count: 3,
            seq: 10,
            timestamp: 1_700_000_000_000_000,
            synced_len: 32,
            tag: 7,
            payload_crc: crc32c::crc32c(b"hello"),
        }
    }

    #[test]
    fn segment_header_golden() {
        let bytes = encode_segment_header(0x0102);
        assert_eq!(&bytes[0..8], b"EDDYSEG\0");
        assert_eq!(&bytes[8..12], &[1, 0, 0, 0]);
        assert_eq!(&bytes[16..24], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode_segment_header(&bytes), Ok(0x0102));
        for cut in 0..SEGMENT_HEADER_LEN {
            assert_eq!(
                decode_segment_header(&bytes[..cut]),
                Err(Corruption::Truncated)
            );
        }
        for i in 0..SEGMENT_HEADER_LEN {
            let mut damaged = bytes;
            damaged[i] ^= 0x40;
            assert!(decode_segment_header(&damaged).is_err(), "byte {i}");
        }
    }

    #[test]
    fn record_header_golden_layout() {
        let bytes = header().encode();
        assert_eq!(&bytes[0..4], b"eREC");
        assert_eq!(&bytes[8..12], &5u32.to_le_bytes());
        assert_eq!(&bytes[12..16], &3u32.to_le_bytes());
        assert_eq!(&bytes[16..24], &10u64.to_le_bytes());
        assert_eq!(&bytes[32..40], &32u64.to_le_bytes());
        assert_eq!(&bytes[40..44], &7u32.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(bytes[4..8].try_into().unwrap()),
            crc32c::crc32c(&bytes[8..48])
        );
        let decoded = RecordHeader::decode(&bytes, 100).unwrap();
        assert_eq!(decoded, header());
        assert!(decoded.verify_payload(b"hello").is_ok());
        assert_eq!(
            decoded.verify_payload(b"hellO"),
            Err(Corruption::PayloadChecksum)
        );
        assert_eq!(decoded.record_len(), 53);
        assert_eq!(decoded.end_seq(), 13);
    }

    #[test]
    fn record_header_every_prefix_and_flip() {
        let bytes = header().encode();
        for cut in 0..RECORD_HEADER_LEN {
            assert_eq!(
                RecordHeader::decode(&bytes[..cut], 100),
                Err(Corruption::Truncated)
            );
        }
        for i in 0..RECORD_HEADER_LEN {
            for bit in 0..8 {
                let mut damaged = bytes;
                damaged[i] ^= 1 << bit;
                assert!(RecordHeader::decode(&damaged, 100).is_err(), "byte {i}");
            }
        }
    }

    #[test]
    fn record_header_rejects_impossible_fields() {
        let mut h = header();
        h.count = 0;
        assert!(RecordHeader::decode(&h.encode(), 100).is_err());
        let mut h = header();
        h.payload_len = MAX_RECORD_PAYLOAD + 1;
        assert!(RecordHeader::decode(&h.encode(), 100).is_err());
        let mut h = header();
        h.synced_len = 101;
        assert!(RecordHeader::decode(&h.encode(), 100).is_err());
        let mut h = header();
        h.seq = u64::MAX;
        assert!(RecordHeader::decode(&h.encode(), 100).is_err());
    }

    #[test]
    fn zero_filled_index_entry_does_not_verify() {
        assert!(IndexEntry::decode(&[0u8; INDEX_ENTRY_LEN]).is_err());
        assert!(decode_index_header(&[0u8; INDEX_HEADER_LEN]).is_err());
        assert!(RecordHeader::decode(&[0u8; RECORD_HEADER_LEN], 0).is_err());
    }

    #[test]
    fn index_header_pins_the_entry_size() {
        let mut bytes = encode_index_header(9);
        assert_eq!(decode_index_header(&bytes), Ok(9));
        bytes[12] = 24;
        let crc = crc32c::crc32c(&bytes[0..24]);
        bytes[24..28].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_index_header(&bytes).is_err());
    }

    #[test]
    fn file_names() {
        assert_eq!(segment_file_name(42), "00000000000000000042.log");
        assert_eq!(
            parse_file_name("00000000000000000042.log"),
            Some((42, false))
        );
        assert_eq!(
            parse_file_name("00000000000000000042.index"),
            Some((42, true))
        );
        assert_eq!(parse_file_name("42.log"), None);
        assert_eq!(parse_file_name("0000000000000000004x.log"), None);
        assert_eq!(parse_file_name("99999999999999999999.log"), None);
    }

    proptest! {
        #[test]
        fn record_header_roundtrip(payload_len in 0..=MAX_RECORD_PAYLOAD, count in 1..=MAX_RECORD_COUNT,
                                   seq in 0..u64::MAX / 2, timestamp: u64, synced_len in 0u64..1000,
                                   tag: u32, payload_crc: u32) {
            let h = RecordHeader { payload_len, count, seq, timestamp, synced_len, tag, payload_crc };
            prop_assert_eq!(RecordHeader::decode(&h.encode(), 1000), Ok(h));
        }

        #[test]
        fn index_entry_roundtrip(seq: u64, timestamp: u64, position: u64, seal: bool) {
            let e = IndexEntry { seq, timestamp, position,
                                 kind: if seal { IndexKind::Seal } else { IndexKind::Record } };
            prop_assert_eq!(IndexEntry::decode(&e.encode()), Ok(e));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), pos: u64) {
            let _ = RecordHeader::decode(&bytes, pos);
            let _ = IndexEntry::decode(&bytes);
            let _ = decode_index_header(&bytes);
            let _ = decode_segment_header(&bytes);
        }
    }
}
