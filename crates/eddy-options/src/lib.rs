//! The option catalogs (topic, stream, user) of the stream protocol and their options block.
//!
//! Streams, topics and users carry a key/value options map encoded as a TLV block
//! (spec §3.10-§3.13):
//!
//! ```text
//! options block = pairs of TLV entries, keys of kind 2 (String):
//! +---------+--------------+-----+-----------+----------------+-------+
//! | 02      | key_len: u32 | key | kind: u8  | value_len: u32 | value |  ... repeated
//! +---------+--------------+-----+-----------+----------------+-------+
//! in requests: the last field, running to the end of the body (no prefix)
//! in replies:  [len: u32][block]
//! ```
//!
//! * [`tlv`]: the generic TLV block (also used for message user headers by `eddy-codec`).
//! * [`block`]: [`OptionsBlock`], a validated options block (limits: 1024 pairs, 100,000 bytes).
//! * [`catalog`]: scopes, [`OptionSpec`] catalogs, [`validate_block`].
//! * [`topic`]: typed [`TopicOptions`] (strict parsing with one clear error per bad key or
//!   value), [`TopicSettings`] defaults (eddy's `enforce_fsync` default is **true**), resolution,
//!   the explicit and derived blocks of topic replies.
//! * [`describe`]: the `DESCRIBE_OPTIONS` reply.
//!
//! Invariants: every length read from input is checked against a named limit before anything
//! is allocated; no function panics on any input; a block that passed [`block::validate`] tiles
//! exactly and has unique UTF-8 String keys.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod block;
pub mod catalog;
pub mod describe;
pub mod error;
pub mod parse;
pub mod tlv;
pub mod topic;

pub use block::{OptionEntry, OptionsBlock, MAX_OPTIONS, MAX_OPTIONS_BYTES};
pub use catalog::{keys, validate_block, Mode, OptionSpec, Scope, TOPIC_OPTIONS};
pub use describe::{DescribeOptionsReply, OptionDescriptor};
pub use error::{OptionsError, TlvError};
pub use tlv::{TlvEntry, ValueKind};
pub use topic::{Compression, TopicOptions, TopicSettings};

/// Entry points for `fuzz/` targets; `cargo test` replays the committed corpus through them.
/// Built for tests and with the `fuzzing` feature only: production builds do not carry it.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing {
    use super::{validate_block, DescribeOptionsReply, Mode, OptionsBlock, Scope, TopicOptions};

    /// Parses arbitrary bytes as a request options block and as a describe reply; whatever is
    /// accepted must re-encode consistently.
    pub fn fuzz_options_block(data: &[u8]) {
        if let Ok(block) = OptionsBlock::from_slice(data) {
            assert_eq!(block.as_bytes(), data);
            assert_eq!(block.entries().count(), block.len());
            for scope in [Scope::Topic, Scope::Stream, Scope::User] {
                let _ = validate_block(scope, &block, Mode::Create);
            }
            if let Ok(options) = TopicOptions::parse(&block, Mode::Create) {
                let canonical = options.to_block();
                assert_eq!(TopicOptions::parse(&canonical, Mode::Create), Ok(options));
                let _ = options.validate_create(1, &super::TopicSettings::EDDY_DEFAULTS);
            }
            let _ = TopicOptions::parse(&block, Mode::Update);
        }
        let mut prefixed = Vec::with_capacity(data.len() + 4);
        prefixed.extend_from_slice(&(data.len() as u32).to_le_bytes());
        prefixed.extend_from_slice(data);
        let _ = OptionsBlock::decode_prefixed(&prefixed);
        if let Ok(reply) = DescribeOptionsReply::decode(data) {
            let mut out = Vec::new();
            reply.encode(&mut out);
            assert_eq!(out.len(), reply.encoded_len());
        }
    }
}
