//! The option catalogs (spec §3.12): which keys each scope accepts, their canonical kind, the
//! kinds accepted as input, and which keys an update may carry.
//!
//! | Key | Canonical kind | Input kinds | Updatable |
//! |---|---|---|---|
//! | `compression_algorithm` | String | String, Uint8 | yes |
//! | `message_expiry` | Uint64 | Uint64, String | yes |
//! | `max_topic_size` | Uint64 | Uint64, String | yes |
//! | `segment_size` | Uint64 | Uint64, String | no |
//! | `enforce_fsync` | Bool | Bool, String | no |
//! | `messages_required_to_save` | Uint32 | Uint32, String | no |
//! | `size_of_messages_required_to_save` | Uint64 | Uint64, String | no |
//! | `preallocate_segments` | Bool | Bool, String | no |
//! | `durability` | String | String | no |
//! | `consumer_offset_durability` | String | String | no |
//! | `partition_resize_policy` | String | String | no |
//!
//! The stream and user catalogs are empty. Defaults live in [`crate::topic::TopicSettings`]
//! because eddy's differ from the reference server's (`enforce_fsync` defaults to **true**).

use crate::block::OptionsBlock;
use crate::error::OptionsError;
use crate::tlv::ValueKind;
use crate::topic::TopicOptions;

/// The resource an options block belongs to; also the `DESCRIBE_OPTIONS` scope byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Scope {
    /// 1: topic options.
    Topic = 1,
    /// 2: stream options (empty catalog).
    Stream = 2,
    /// 3: user options (empty catalog).
    User = 3,
}

impl Scope {
    /// The wire byte.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Decodes the scope byte.
    pub const fn from_code(value: u8) -> Result<Self, OptionsError> {
        match value {
            1 => Ok(Self::Topic),
            2 => Ok(Self::Stream),
            3 => Ok(Self::User),
            _ => Err(OptionsError::UnknownScope { value }),
        }
    }

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Topic => "topic",
            Self::Stream => "stream",
            Self::User => "user",
        }
    }

    /// This scope's catalog.
    pub const fn catalog(self) -> &'static [OptionSpec] {
        match self {
            Self::Topic => &TOPIC_OPTIONS,
            Self::Stream => &STREAM_OPTIONS,
            Self::User => &USER_OPTIONS,
        }
    }
}

/// Whether a block creates a resource or patches an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Create: every catalog key is accepted.
    Create,
    /// Update: only updatable keys are accepted; absent keys keep their value.
    Update,
}

/// One catalog entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    /// The key.
    pub key: &'static str,
    /// The canonical kind (how the server stores and reports the value).
    pub kind: ValueKind,
    /// Kinds accepted in requests.
    pub accepts: &'static [ValueKind],
    /// Whether an update may carry this key.
    pub updatable: bool,
    /// Free-text description served by `DESCRIBE_OPTIONS`.
    pub description: &'static str,
}

/// Topic option keys.
pub mod keys {
    /// `compression_algorithm`.
    pub const COMPRESSION_ALGORITHM: &str = "compression_algorithm";
    /// `message_expiry`.
    pub const MESSAGE_EXPIRY: &str = "message_expiry";
    /// `max_topic_size`.
    pub const MAX_TOPIC_SIZE: &str = "max_topic_size";
    /// `segment_size`.
    pub const SEGMENT_SIZE: &str = "segment_size";
    /// `enforce_fsync`.
    pub const ENFORCE_FSYNC: &str = "enforce_fsync";
    /// `messages_required_to_save`.
    pub const MESSAGES_REQUIRED_TO_SAVE: &str = "messages_required_to_save";
    /// `size_of_messages_required_to_save`.
    pub const SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: &str = "size_of_messages_required_to_save";
    /// `preallocate_segments`.
    pub const PREALLOCATE_SEGMENTS: &str = "preallocate_segments";
    /// `durability` (the newer SDKs' word for when a send is acknowledged).
    pub const DURABILITY: &str = "durability";
    /// `consumer_offset_durability`.
    pub const CONSUMER_OFFSET_DURABILITY: &str = "consumer_offset_durability";
    /// `partition_resize_policy`.
    pub const PARTITION_RESIZE_POLICY: &str = "partition_resize_policy";
}

const STRING_OR_U8: &[ValueKind] = &[ValueKind::String, ValueKind::Uint8];
const U64_OR_STRING: &[ValueKind] = &[ValueKind::Uint64, ValueKind::String];
const U32_OR_STRING: &[ValueKind] = &[ValueKind::Uint32, ValueKind::String];
const BOOL_OR_STRING: &[ValueKind] = &[ValueKind::Bool, ValueKind::String];
const STRING_ONLY: &[ValueKind] = &[ValueKind::String];

/// The topic catalog, in the order `DESCRIBE_OPTIONS` serves it.
pub const TOPIC_OPTIONS: [OptionSpec; 11] = [
    OptionSpec {
        key: keys::COMPRESSION_ALGORITHM,
        kind: ValueKind::String,
        accepts: STRING_OR_U8,
        updatable: true,
        description: "compression of stored messages: \"none\" or \"gzip\" (uint8 1 or 2)",
    },
    OptionSpec {
        key: keys::MESSAGE_EXPIRY,
        kind: ValueKind::Uint64,
        accepts: U64_OR_STRING,
        updatable: true,
        description: "retention in microseconds (or a duration such as \"7 days\"); \
                      0 = server default, u64::MAX = never expire",
    },
    OptionSpec {
        key: keys::MAX_TOPIC_SIZE,
        kind: ValueKind::Uint64,
        accepts: U64_OR_STRING,
        updatable: true,
        description: "size cap in bytes (or a size such as \"1 GiB\"); 0 = server default, \
                      u64::MAX = unlimited; must not be below the segment size",
    },
    OptionSpec {
        key: keys::SEGMENT_SIZE,
        kind: ValueKind::Uint64,
        accepts: U64_OR_STRING,
        updatable: false,
        description: "segment size in bytes, a multiple of 512 within 1 MiB..=1 GiB; 0 = default",
    },
    OptionSpec {
        key: keys::ENFORCE_FSYNC,
        kind: ValueKind::Bool,
        accepts: BOOL_OR_STRING,
        updatable: false,
        description: "acknowledge sends only after fsync; eddy defaults to true",
    },
    OptionSpec {
        key: keys::MESSAGES_REQUIRED_TO_SAVE,
        kind: ValueKind::Uint32,
        accepts: U32_OR_STRING,
        updatable: false,
        description: "messages buffered before a save, 1..=16777216",
    },
    OptionSpec {
        key: keys::SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
        kind: ValueKind::Uint64,
        accepts: U64_OR_STRING,
        updatable: false,
        description: "bytes buffered before a save, at most 1 GiB; 0 = default",
    },
    OptionSpec {
        key: keys::PREALLOCATE_SEGMENTS,
        kind: ValueKind::Bool,
        accepts: BOOL_OR_STRING,
        updatable: false,
        description: "preallocate segment files; segment_size x partitions must stay within 64 GiB",
    },
    OptionSpec {
        key: keys::DURABILITY,
        kind: ValueKind::String,
        accepts: STRING_ONLY,
        updatable: false,
        description: "when a send is acknowledged: \"persisted\" after fdatasync (on a majority \
                      in a cluster), \"replicated\" once a majority holds it in memory; eddy \
                      defaults to persisted (the same setting as enforce_fsync)",
    },
    OptionSpec {
        key: keys::CONSUMER_OFFSET_DURABILITY,
        kind: ValueKind::String,
        accepts: STRING_ONLY,
        updatable: false,
        description: "when a consumer offset store is acknowledged: \"persisted\" or \
                      \"replicated\"; eddy defaults to persisted",
    },
    OptionSpec {
        key: keys::PARTITION_RESIZE_POLICY,
        kind: ValueKind::String,
        accepts: STRING_ONLY,
        updatable: false,
        description: "\"mutable\" (default): partitions may be added and deleted; \"fixed\": \
                      the partition set is fixed at creation",
    },
];

/// The stream catalog: empty, every key is unsupported.
pub const STREAM_OPTIONS: [OptionSpec; 0] = [];
/// The user catalog: empty, every key is unsupported.
pub const USER_OPTIONS: [OptionSpec; 0] = [];

/// Looks a key up in a scope's catalog.
pub fn spec(scope: Scope, key: &str) -> Option<&'static OptionSpec> {
    scope.catalog().iter().find(|spec| spec.key == key)
}

/// Checks every key and value of `block` against `scope`'s catalog in `mode`, with a clear
/// error for the first bad key or value. For topics this is [`TopicOptions::parse`]; stream
/// and user blocks must be empty.
pub fn validate_block(scope: Scope, block: &OptionsBlock, mode: Mode) -> Result<(), OptionsError> {
    match scope {
        Scope::Topic => TopicOptions::parse(block, mode).map(|_| ()),
        Scope::Stream | Scope::User => match block.entries().next() {
            Some(entry) => Err(OptionsError::UnsupportedKey {
                scope: scope.name(),
                key: entry.key.to_owned(),
            }),
            None => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes() {
        for code in 0..=u8::MAX {
            match Scope::from_code(code) {
                Ok(scope) => assert_eq!(scope.code(), code),
                Err(err) => assert_eq!(err, OptionsError::UnknownScope { value: code }),
            }
        }
        assert_eq!(Scope::Topic.catalog().len(), 11);
        assert!(Scope::Stream.catalog().is_empty());
        assert!(Scope::User.catalog().is_empty());
    }

    #[test]
    fn updatable_keys_are_the_three_of_the_spec() {
        let updatable: Vec<&str> = TOPIC_OPTIONS
            .iter()
            .filter(|s| s.updatable)
            .map(|s| s.key)
            .collect();
        assert_eq!(
            updatable,
            [
                keys::COMPRESSION_ALGORITHM,
                keys::MESSAGE_EXPIRY,
                keys::MAX_TOPIC_SIZE
            ]
        );
        for spec in TOPIC_OPTIONS {
            assert!(spec.accepts.contains(&spec.kind), "{}", spec.key);
        }
    }

    #[test]
    fn stream_and_user_reject_every_key() {
        let block =
            OptionsBlock::from_entries([("retention", ValueKind::Uint64, &[1u8; 8][..])]).unwrap();
        for scope in [Scope::Stream, Scope::User] {
            assert_eq!(
                validate_block(scope, &block, Mode::Create),
                Err(OptionsError::UnsupportedKey {
                    scope: scope.name(),
                    key: "retention".into()
                })
            );
            assert!(validate_block(scope, &OptionsBlock::empty(), Mode::Update).is_ok());
        }
    }
}
