//! Hashes of the stream protocol (spec §2.8).
//!
//! * `XXH3-64` (seed 0, default secret): request bodies (`request_checksum`), message frames and
//!   batch checksums.
//! * `XXH32` (seed 0): the `MessagesKey` partition choice and the numeric key of a named consumer.
//!
//! Streaming over pieces ([`Xxh3Stream`]) yields the same value as a one-shot hash over their
//! concatenation.

/// XXH3-64 of `data`, seed 0.
#[inline]
pub fn xxh3_64(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

/// XXH32 of `data`, seed 0.
#[inline]
pub fn xxh32(data: &[u8]) -> u32 {
    xxhash_rust::xxh32::xxh32(data, 0)
}

/// The request header's `request_checksum`: XXH3-64 of the body zero-extended to u128.
#[inline]
pub fn request_checksum(body: &[u8]) -> u128 {
    u128::from(xxh3_64(body))
}

/// XXH3-64 of the empty input, the `request_checksum` of a Logout request.
pub const XXH3_EMPTY: u64 = 0x2d06_8005_38d3_94c2;

/// Streaming XXH3-64 (seed 0), for hashing data that arrives in pieces.
#[derive(Clone)]
pub struct Xxh3Stream(xxhash_rust::xxh3::Xxh3Default);

impl std::fmt::Debug for Xxh3Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Xxh3Stream").field(&self.0.digest()).finish()
    }
}

impl Default for Xxh3Stream {
    fn default() -> Self {
        Self::new()
    }
}

impl Xxh3Stream {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self(xxhash_rust::xxh3::Xxh3Default::new())
    }

    /// Feeds more bytes.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The hash of everything fed so far.
    pub fn digest(&self) -> u64 {
        self.0.digest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_test_vectors() {
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(xxh3_64(b""), XXH3_EMPTY);
        assert_eq!(xxh3_64(b"a"), 0xe6c6_32b6_1e96_4e1f);
        assert_eq!(xxh3_64(b"payload"), 0x32fe_61f0_5b2d_8d7b);
        assert_eq!(xxh3_64(b"hello world"), 0xd447_b1ea_40e6_988b);
        assert_eq!(xxh32(b"user-42"), 0x6181_9a7e);
    }

    #[test]
    fn streaming_equals_one_shot() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        for split in [0, 1, 7, 240, 256, 1024, 2999, 3000] {
            let mut stream = Xxh3Stream::new();
            stream.update(&data[..split]);
            stream.update(&data[split..]);
            assert_eq!(stream.digest(), xxh3_64(&data), "split {split}");
        }
    }

    #[test]
    fn request_checksum_is_zero_extended() {
        let value = request_checksum(b"");
        assert_eq!(value >> 64, 0);
        assert_eq!(value, u128::from(XXH3_EMPTY));
    }
}
