//! zstd compression with the cluster dictionary (compression byte 1, `ZstdDict`).
//!
//! One dictionary per cluster. The server loads `<data-root>/`[`DICTIONARY_FILE_NAME`] when
//! present ([`Dictionary::from_bytes`]) and otherwise uses the built-in dictionary
//! ([`Dictionary::builtin`], trained by `cargo xtask train-dict` over the synthetic events of
//! [`super::sample`]). Clients receive the bytes in the Identify handshake and compare
//! dictionaries by [`Dictionary::sha256_hex`]: SHA-256 of the exact bytes as 64 lowercase
//! hex characters.
//!
//! Who compresses (the threshold is [`COMPRESSION_THRESHOLD`] = 1024 bytes):
//!
//! - server responses: only Read, Watch and the three List responses, only on a connection
//!   that completed Identify (so the client holds the dictionary), only when the serialised
//!   body is at least 1024 bytes ([`should_compress_response`]);
//! - client requests: only Write and `RegisterSchema`, only with a dictionary, only when the
//!   *payload* (sum of event values, or the schema text) is at least 1024 bytes
//!   ([`should_compress_request`]);
//! - fixed-size messages and the Identify response: never.
//!
//! Decompression safety: the declared `uncompressed_length` is checked against the limit
//! before anything is allocated, a zstd frame header that declares a different content size
//! is refused before allocating, the output buffer has exactly `uncompressed_length` bytes
//! of capacity (producing more is an error), and producing fewer is malformed too.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use super::error::{CompressionError, DictionaryError};
use super::types::{RequestType, ResponseType};

/// Bodies (responses) or payloads (requests) below this many bytes are never compressed.
pub const COMPRESSION_THRESHOLD: usize = 1024;

/// Compression level used when the configuration gives none (clients use 3 too).
pub const DEFAULT_COMPRESSION_LEVEL: i32 = 3;

/// Largest dictionary accepted from the data dir: 1 MiB, the protocol ceiling of the 0.3.0
/// clients (`DICTIONARY_CEILING_BYTES`), which read the Identify response under 1 MiB + 128
/// bytes whatever their response cap (0.2.0 read it under 64 MiB). A larger dictionary could
/// not reach them, so the server refuses to start with one; zstd dictionaries are normally
/// tens of KiB (the built-in one is 16 KiB).
pub const MAX_DICTIONARY_LEN: usize = 1024 * 1024;

/// File name of the cluster dictionary inside the data root.
pub const DICTIONARY_FILE_NAME: &str = "dictionary.zstd_dict";

/// Name of the built-in dictionary.
pub const BUILTIN_DICTIONARY_NAME: &str = "eddy-json-events-v1";

/// The built-in dictionary: `crates/eddy-wire/dict/default.dict`, produced by
/// `cargo xtask train-dict`.
pub const BUILTIN_DICTIONARY_BYTES: &[u8] = include_bytes!("../../dict/default.dict");

/// Every zstd dictionary starts with these bytes (`0xEC30A437` little-endian).
pub const ZSTD_DICTIONARY_MAGIC: [u8; 4] = [0x37, 0xA4, 0x30, 0xEC];

/// SHA-256 of `bytes` as 64 lowercase hex characters, no prefix or separators.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether a server response should be compressed: the type is compressible (Read, Watch,
/// List*), the connection identified (so the client holds the dictionary), and the
/// serialised body is at least [`COMPRESSION_THRESHOLD`] bytes.
pub fn should_compress_response(
    response_type: ResponseType,
    body_len: usize,
    connection_has_dict: bool,
) -> bool {
    connection_has_dict && response_type.compressible() && body_len >= COMPRESSION_THRESHOLD
}

/// The client rule: Write and `RegisterSchema` only, with a dictionary, when `payload_len`
/// (sum of `event_value` lengths, or `schema.len()`) is at least [`COMPRESSION_THRESHOLD`].
pub fn should_compress_request(
    request_type: RequestType,
    payload_len: usize,
    has_dict: bool,
) -> bool {
    has_dict
        && matches!(
            request_type,
            RequestType::Write | RequestType::RegisterSchema
        )
        && payload_len >= COMPRESSION_THRESHOLD
}

/// A loaded cluster dictionary: the exact bytes, their SHA-256, and zstd's prepared
/// compression and decompression tables. Shared between threads behind an [`Arc`]; each
/// thread or connection compresses through its own [`DictCodec`].
pub struct Dictionary {
    bytes: Vec<u8>,
    sha256_hex: String,
    level: i32,
    cdict: CDict<'static>,
    ddict: DDict<'static>,
}

impl fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dictionary")
            .field("len", &self.bytes.len())
            .field("sha256_hex", &self.sha256_hex)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl Dictionary {
    /// Loads a dictionary from its file bytes (e.g. `<data-root>/dictionary.zstd_dict`).
    /// The bytes must start with the zstd dictionary magic, be at most
    /// [`MAX_DICTIONARY_LEN`] long, and be accepted by zstd; `level` is the compression level
    /// used with it.
    pub fn from_bytes(bytes: Vec<u8>, level: i32) -> Result<Self, DictionaryError> {
        if bytes.len() > MAX_DICTIONARY_LEN {
            return Err(DictionaryError::TooLarge {
                length: bytes.len(),
                max: MAX_DICTIONARY_LEN,
            });
        }
        if !bytes.starts_with(&ZSTD_DICTIONARY_MAGIC) {
            return Err(DictionaryError::BadMagic);
        }
        let range = zstd::compression_level_range();
        if !range.contains(&level) {
            return Err(DictionaryError::BadLevel {
                level,
                min: *range.start(),
                max: *range.end(),
            });
        }
        let cdict = CDict::try_create(&bytes, level).ok_or(DictionaryError::Rejected)?;
        let ddict = DDict::try_create(&bytes).ok_or(DictionaryError::Rejected)?;
        let sha256_hex = sha256_hex(&bytes);
        Ok(Self {
            bytes,
            sha256_hex,
            level,
            cdict,
            ddict,
        })
    }

    /// The built-in dictionary ([`BUILTIN_DICTIONARY_BYTES`]) at `level`.
    pub fn builtin(level: i32) -> Result<Self, DictionaryError> {
        Self::from_bytes(BUILTIN_DICTIONARY_BYTES.to_vec(), level)
    }

    /// The exact dictionary bytes (what Identify sends and what the file holds).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// SHA-256 of [`Self::bytes`], 64 lowercase hex characters.
    pub fn sha256_hex(&self) -> &str {
        &self.sha256_hex
    }

    /// Exact, case-sensitive comparison with a client's `known_dict_sha256`: when it matches,
    /// the Identify response omits the dictionary bytes.
    pub fn matches_sha(&self, known_dict_sha256: Option<&str>) -> bool {
        known_dict_sha256 == Some(self.sha256_hex.as_str())
    }

    /// Compression level used with this dictionary.
    pub fn level(&self) -> i32 {
        self.level
    }

    /// The dictionary id zstd records in frames compressed with it.
    pub fn id(&self) -> Option<u32> {
        self.ddict.get_dict_id().map(std::num::NonZeroU32::get)
    }
}

/// Per-thread (or per-connection) compression and decompression contexts bound to one
/// [`Dictionary`]. Cheap to keep, not to create: build one per worker and reuse it.
pub struct DictCodec {
    dict: Arc<Dictionary>,
    cctx: CCtx<'static>,
    dctx: DCtx<'static>,
    scratch: Vec<u8>,
}

impl fmt::Debug for DictCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DictCodec")
            .field("dict", &self.dict)
            .finish_non_exhaustive()
    }
}

fn zstd_error(code: usize) -> CompressionError {
    CompressionError::Zstd {
        reason: zstd_safe::get_error_name(code),
    }
}

impl DictCodec {
    /// Contexts for `dict`.
    pub fn new(dict: Arc<Dictionary>) -> Self {
        Self {
            dict,
            cctx: CCtx::create(),
            dctx: DCtx::create(),
            scratch: Vec::new(),
        }
    }

    /// The dictionary these contexts use.
    pub fn dictionary(&self) -> &Arc<Dictionary> {
        &self.dict
    }

    /// Compresses `input` as one zstd frame (content size recorded) and returns the
    /// compressed bytes; the slice borrows an internal buffer reused across calls.
    pub fn compress(&mut self, input: &[u8]) -> Result<&[u8], CompressionError> {
        self.scratch.clear();
        self.scratch.reserve(zstd_safe::compress_bound(input.len()));
        self.cctx
            .compress_using_cdict(&mut self.scratch, input, &self.dict.cdict)
            .map_err(zstd_error)?;
        Ok(&self.scratch)
    }

    /// Decompresses a `ZstdDict` body into exactly `uncompressed_length` bytes.
    ///
    /// Refused before allocating: `uncompressed_length > max_len`, or a zstd frame header
    /// declaring another content size. Refused after: output that would exceed
    /// `uncompressed_length` (zstd stops at the buffer's capacity) or falls short of it.
    pub fn decompress(
        &mut self,
        input: &[u8],
        uncompressed_length: u32,
        max_len: u64,
    ) -> Result<Vec<u8>, CompressionError> {
        decompress_checked(
            &mut self.dctx,
            &self.dict.ddict,
            input,
            uncompressed_length,
            max_len,
        )
    }
}

fn decompress_checked(
    dctx: &mut DCtx<'static>,
    ddict: &DDict<'static>,
    input: &[u8],
    uncompressed_length: u32,
    max_len: u64,
) -> Result<Vec<u8>, CompressionError> {
    if u64::from(uncompressed_length) > max_len {
        return Err(CompressionError::TooLarge {
            length: u64::from(uncompressed_length),
            max: max_len,
        });
    }
    match zstd_safe::get_frame_content_size(input) {
        Ok(Some(declared)) if declared != u64::from(uncompressed_length) => {
            return Err(CompressionError::DeclaredSizeMismatch {
                declared,
                expected: uncompressed_length,
            });
        }
        Ok(_) => {}
        Err(_) => {
            return Err(CompressionError::Zstd {
                reason: "corrupt or truncated frame header",
            });
        }
    }
    let expected = uncompressed_length as usize;
    let mut out = Vec::with_capacity(expected);
    let written = dctx
        .decompress_using_ddict(&mut out, input, ddict)
        .map_err(zstd_error)?;
    if written != expected {
        return Err(CompressionError::ShortOutput {
            actual: written,
            expected: uncompressed_length,
        });
    }
    debug_assert_eq!(out.len(), expected);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::sample::SampleEvents;

    fn codec() -> DictCodec {
        DictCodec::new(Arc::new(
            Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap(),
        ))
    }

    #[test]
    fn builtin_dictionary_loads_and_has_a_lowercase_sha() {
        let dict = Dictionary::builtin(DEFAULT_COMPRESSION_LEVEL).unwrap();
        assert!(dict.bytes().starts_with(&ZSTD_DICTIONARY_MAGIC));
        assert_eq!(dict.sha256_hex().len(), 64);
        assert!(dict
            .sha256_hex()
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(dict.id().is_some());
        assert!(dict.matches_sha(Some(dict.sha256_hex())));
        assert!(!dict.matches_sha(Some(&dict.sha256_hex().to_uppercase())));
        assert!(!dict.matches_sha(None));
    }

    #[test]
    fn sha256_hex_matches_a_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn dictionary_loading_rejects_bad_input() {
        assert_eq!(
            Dictionary::from_bytes(b"not a dict".to_vec(), 3).unwrap_err(),
            DictionaryError::BadMagic
        );
        assert!(matches!(
            Dictionary::from_bytes(vec![0x37; MAX_DICTIONARY_LEN + 1], 3).unwrap_err(),
            DictionaryError::TooLarge { .. }
        ));
        assert!(matches!(
            Dictionary::from_bytes(BUILTIN_DICTIONARY_BYTES.to_vec(), 1000).unwrap_err(),
            DictionaryError::BadLevel { level: 1000, .. }
        ));
        // Magic followed by garbage entropy tables.
        let mut corrupt = ZSTD_DICTIONARY_MAGIC.to_vec();
        corrupt.extend_from_slice(&[0xff; 64]);
        assert_eq!(
            Dictionary::from_bytes(corrupt, 3).unwrap_err(),
            DictionaryError::Rejected
        );
    }

    #[test]
    fn round_trips_sample_events() {
        let mut codec = codec();
        for event in SampleEvents::new(7).take(50) {
            let compressed = codec.compress(&event).unwrap().to_vec();
            let len = u32::try_from(event.len()).unwrap();
            let back = codec.decompress(&compressed, len, 1 << 20).unwrap();
            assert_eq!(back, event);
        }
    }

    #[test]
    fn dictionary_beats_plain_zstd_on_small_events() {
        let mut codec = codec();
        let events: Vec<Vec<u8>> = SampleEvents::new(99).take(200).collect();
        let raw: usize = events.iter().map(Vec::len).sum();
        let with_dict: usize = events
            .iter()
            .map(|e| codec.compress(e).unwrap().len())
            .sum();
        let without: usize = events
            .iter()
            .map(|e| {
                zstd::bulk::compress(e, DEFAULT_COMPRESSION_LEVEL)
                    .unwrap()
                    .len()
            })
            .sum();
        assert!(
            with_dict * 2 < without,
            "dict {with_dict} vs plain {without} (raw {raw})"
        );
    }

    #[test]
    fn refuses_a_decompression_bomb() {
        let mut codec = codec();
        let bomb = vec![b'a'; 1 << 20];
        let compressed = codec.compress(&bomb).unwrap().to_vec();
        assert!(compressed.len() < 1024);
        // Claimed length above the limit: refused before allocating.
        assert!(matches!(
            codec
                .decompress(&compressed, 1 << 20, 64 * 1024)
                .unwrap_err(),
            CompressionError::TooLarge { .. }
        ));
        // Claimed length within the limit but smaller than the content: refused.
        assert!(matches!(
            codec.decompress(&compressed, 4096, 64 * 1024).unwrap_err(),
            CompressionError::DeclaredSizeMismatch {
                declared: 1_048_576,
                expected: 4096
            }
        ));
        // Same bomb without a content size in the frame header: zstd stops at the capacity.
        let mut encoder =
            zstd::stream::Encoder::with_dictionary(Vec::new(), 3, BUILTIN_DICTIONARY_BYTES)
                .unwrap();
        std::io::Write::write_all(&mut encoder, &bomb).unwrap();
        let no_size = encoder.finish().unwrap();
        assert!(matches!(
            zstd_safe::get_frame_content_size(&no_size),
            Ok(None)
        ));
        assert!(matches!(
            codec.decompress(&no_size, 4096, 64 * 1024).unwrap_err(),
            CompressionError::Zstd { .. }
        ));
        // Claiming more than the content: short output.
        let small = codec.compress(b"hello hello hello").unwrap().to_vec();
        assert!(matches!(
            codec.decompress(&small, 100, 64 * 1024).unwrap_err(),
            CompressionError::DeclaredSizeMismatch { .. }
        ));
    }

    #[test]
    fn garbage_never_panics() {
        let mut codec = codec();
        for len in 0..64u8 {
            let garbage: Vec<u8> = (0..len)
                .map(|i| i.wrapping_mul(37).wrapping_add(len))
                .collect();
            assert!(codec.decompress(&garbage, 100, 1000).is_err());
        }
    }

    #[test]
    fn compression_rules_follow_the_spec() {
        assert!(should_compress_response(ResponseType::Read, 1024, true));
        assert!(!should_compress_response(ResponseType::Read, 1023, true));
        assert!(!should_compress_response(ResponseType::Read, 4096, false));
        assert!(!should_compress_response(
            ResponseType::Identify,
            14_000,
            true
        ));
        assert!(!should_compress_response(ResponseType::Error, 2000, true));
        assert!(should_compress_response(ResponseType::Watch, 2000, true));
        assert!(should_compress_response(
            ResponseType::ListAggregates,
            2000,
            true
        ));
        assert!(should_compress_request(RequestType::Write, 1024, true));
        assert!(!should_compress_request(RequestType::Write, 1023, true));
        assert!(!should_compress_request(RequestType::Write, 5000, false));
        assert!(!should_compress_request(RequestType::Read, 5000, true));
        assert!(should_compress_request(
            RequestType::RegisterSchema,
            5000,
            true
        ));
    }
}
