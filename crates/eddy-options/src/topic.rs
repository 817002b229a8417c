//! Typed topic options: strict parsing of a request block, defaults, resolution, the canonical
//! ("explicit") and "derived" blocks reported in topic replies (spec §3.12, §5.8.3).

use crate::block::{OptionEntry, OptionsBlock};
use crate::catalog::{keys, spec, Mode, Scope};
use crate::error::OptionsError;
use crate::parse::{micros_to_secs, parse_byte_size, parse_duration_micros};
use crate::tlv::ValueKind;

/// Smallest explicit segment size.
pub const MIN_SEGMENT_SIZE: u64 = 1024 * 1024;
/// Largest explicit segment size.
pub const MAX_SEGMENT_SIZE: u64 = 1024 * 1024 * 1024;
/// Segment sizes must be a multiple of this.
pub const SEGMENT_SIZE_ALIGNMENT: u64 = 512;
/// Upper bound of `messages_required_to_save`.
pub const MAX_MESSAGES_REQUIRED_TO_SAVE: u32 = 16 * 1024 * 1024;
/// Upper bound of `size_of_messages_required_to_save`.
pub const MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: u64 = 1024 * 1024 * 1024;
/// Cap of `segment_size * partitions_count` when preallocating.
pub const MAX_PREALLOCATED_TOPIC_BYTES: u64 = 64 * 1024 * 1024 * 1024;
/// Longest human expiry accepted as text, in seconds (`u32::MAX`).
pub const MAX_EXPIRY_TEXT_SECS: u64 = u32::MAX as u64;
/// `message_expiry` sentinel: never expire.
pub const NEVER_EXPIRE: u64 = u64::MAX;
/// `max_topic_size` sentinel: unlimited.
pub const UNLIMITED: u64 = u64::MAX;

/// Topic compression (topic header byte, spec §3.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Compression {
    /// 1: none.
    #[default]
    None = 1,
    /// 2: gzip.
    Gzip = 2,
}

impl Compression {
    /// The wire byte.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Decodes the wire byte (1 or 2).
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::None),
            2 => Some(Self::Gzip),
            _ => None,
        }
    }

    /// The canonical string value.
    pub const fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
        }
    }

    /// Parses `none`/`gzip`, case-insensitively.
    pub fn from_name(text: &str) -> Option<Self> {
        if text.eq_ignore_ascii_case("none") {
            Some(Self::None)
        } else if text.eq_ignore_ascii_case("gzip") {
            Some(Self::Gzip)
        } else {
            None
        }
    }
}

/// Concrete values of every topic setting: used both for defaults and for a resolved topic.
// Each flag is an independent option of the catalog, not a state machine in disguise.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopicSettings {
    /// Compression.
    pub compression_algorithm: Compression,
    /// Retention in µs; [`NEVER_EXPIRE`] = never.
    pub message_expiry: u64,
    /// Size cap in bytes; [`UNLIMITED`] = none.
    pub max_topic_size: u64,
    /// Segment size in bytes.
    pub segment_size: u64,
    /// Acknowledge only after fsync.
    pub enforce_fsync: bool,
    /// The `durability` word the topic shows (`true` = persisted): what the client asked, or
    /// what `enforce_fsync` implies when it did not ask. It never weakens acks: `replicated`
    /// asks for a majority's copy, and eddy's majority copies are fsynced, so only
    /// `enforce_fsync = false` acknowledges from the page cache.
    pub durability_persisted: bool,
    /// Messages buffered before a save.
    pub messages_required_to_save: u32,
    /// Bytes buffered before a save.
    pub size_of_messages_required_to_save: u64,
    /// Preallocate segment files.
    pub preallocate_segments: bool,
    /// Acknowledge consumer offset stores only after fsync (`consumer_offset_durability =
    /// persisted`).
    pub consumer_offset_fsync: bool,
    /// The partition set is fixed at creation (`partition_resize_policy = fixed`).
    pub fixed_partitions: bool,
}

/// The `durability` / `consumer_offset_durability` word of a setting.
const fn durability_name(persisted: bool) -> &'static str {
    if persisted {
        "persisted"
    } else {
        "replicated"
    }
}

/// The `partition_resize_policy` word of a setting.
const fn resize_policy_name(fixed: bool) -> &'static str {
    if fixed {
        "fixed"
    } else {
        "mutable"
    }
}

impl TopicSettings {
    /// eddy's defaults: like the reference server's, except that acks are durable
    /// (`enforce_fsync = true`) unless a topic opts out.
    pub const EDDY_DEFAULTS: Self = Self {
        enforce_fsync: true,
        durability_persisted: true,
        consumer_offset_fsync: true,
        ..Self::REFERENCE_DEFAULTS
    };

    /// The reference server's defaults (spec §3.12), for byte-exact comparisons.
    pub const REFERENCE_DEFAULTS: Self = Self {
        compression_algorithm: Compression::None,
        message_expiry: NEVER_EXPIRE,
        max_topic_size: UNLIMITED,
        segment_size: 1024 * 1024 * 1024,
        enforce_fsync: false,
        durability_persisted: false,
        messages_required_to_save: 1024,
        size_of_messages_required_to_save: 1024 * 1024,
        preallocate_segments: false,
        consumer_offset_fsync: false,
        fixed_partitions: false,
    };

    /// The canonical value bytes of `key` in these settings (`None` for a foreign key).
    pub fn canonical_value(&self, key: &str) -> Option<Vec<u8>> {
        Some(match key {
            keys::COMPRESSION_ALGORITHM => self.compression_algorithm.name().as_bytes().to_vec(),
            keys::MESSAGE_EXPIRY => self.message_expiry.to_le_bytes().to_vec(),
            keys::MAX_TOPIC_SIZE => self.max_topic_size.to_le_bytes().to_vec(),
            keys::SEGMENT_SIZE => self.segment_size.to_le_bytes().to_vec(),
            keys::ENFORCE_FSYNC => vec![u8::from(self.enforce_fsync)],
            keys::MESSAGES_REQUIRED_TO_SAVE => {
                self.messages_required_to_save.to_le_bytes().to_vec()
            }
            keys::SIZE_OF_MESSAGES_REQUIRED_TO_SAVE => self
                .size_of_messages_required_to_save
                .to_le_bytes()
                .to_vec(),
            keys::PREALLOCATE_SEGMENTS => vec![u8::from(self.preallocate_segments)],
            keys::DURABILITY => durability_name(self.durability_persisted)
                .as_bytes()
                .to_vec(),
            keys::CONSUMER_OFFSET_DURABILITY => durability_name(self.consumer_offset_fsync)
                .as_bytes()
                .to_vec(),
            keys::PARTITION_RESIZE_POLICY => resize_policy_name(self.fixed_partitions)
                .as_bytes()
                .to_vec(),
            _ => return None,
        })
    }
}

impl Default for TopicSettings {
    fn default() -> Self {
        Self::EDDY_DEFAULTS
    }
}

/// The settings a client explicitly asked for (`None` = not sent, or sent as the 0
/// "server default" sentinel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TopicOptions {
    /// `compression_algorithm`.
    pub compression_algorithm: Option<Compression>,
    /// `message_expiry` in µs.
    pub message_expiry: Option<u64>,
    /// `max_topic_size` in bytes.
    pub max_topic_size: Option<u64>,
    /// `segment_size` in bytes.
    pub segment_size: Option<u64>,
    /// `enforce_fsync`.
    pub enforce_fsync: Option<bool>,
    /// `messages_required_to_save`.
    pub messages_required_to_save: Option<u32>,
    /// `size_of_messages_required_to_save`.
    pub size_of_messages_required_to_save: Option<u64>,
    /// `preallocate_segments`.
    pub preallocate_segments: Option<bool>,
    /// `durability` (`true` = persisted), the newer SDKs' key: `persisted` is
    /// `enforce_fsync = true`; `replicated` is shown as asked and acknowledged after fsync
    /// all the same (a majority's copies are fsynced in eddy).
    pub durability: Option<bool>,
    /// `consumer_offset_durability` (`true` = persisted).
    pub consumer_offset_durability: Option<bool>,
    /// `partition_resize_policy` (`true` = fixed).
    pub fixed_partitions: Option<bool>,
}

fn invalid(key: &'static str, reason: &'static str) -> OptionsError {
    OptionsError::InvalidValue { key, reason }
}

fn text<'a>(entry: &OptionEntry<'a>, key: &'static str) -> Result<&'a str, OptionsError> {
    std::str::from_utf8(entry.value).map_err(|_| invalid(key, "string value is not utf-8"))
}

fn fixed<const N: usize>(
    entry: &OptionEntry<'_>,
    key: &'static str,
) -> Result<[u8; N], OptionsError> {
    let mut out = [0u8; N];
    if entry.value.len() != N {
        return Err(invalid(key, "value has the wrong size for its kind"));
    }
    out.copy_from_slice(entry.value);
    Ok(out)
}

fn wrong_kind(key: &'static str) -> OptionsError {
    invalid(key, "value kind not accepted for this key")
}

fn parse_bool(entry: &OptionEntry<'_>, key: &'static str) -> Result<bool, OptionsError> {
    match ValueKind::from_code(entry.kind) {
        Some(ValueKind::Bool) => match entry.value {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(invalid(key, "bool must be one byte 0 or 1")),
        },
        Some(ValueKind::String) => match text(entry, key)? {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(invalid(key, "expected \"true\" or \"false\"")),
        },
        _ => Err(wrong_kind(key)),
    }
}

fn parse_u64(
    entry: &OptionEntry<'_>,
    key: &'static str,
    from_text: impl Fn(&str) -> Option<u64>,
) -> Result<u64, OptionsError> {
    match ValueKind::from_code(entry.kind) {
        Some(ValueKind::Uint64) => Ok(u64::from_le_bytes(fixed(entry, key)?)),
        Some(ValueKind::String) => {
            from_text(text(entry, key)?).ok_or_else(|| invalid(key, "unparsable text value"))
        }
        _ => Err(wrong_kind(key)),
    }
}

/// A `durability` word: `persisted` is `true`, `replicated` `false` (any ASCII case).
fn parse_durability(entry: &OptionEntry<'_>, key: &'static str) -> Result<bool, OptionsError> {
    if ValueKind::from_code(entry.kind) != Some(ValueKind::String) {
        return Err(wrong_kind(key));
    }
    match text(entry, key)? {
        word if word.eq_ignore_ascii_case("persisted") => Ok(true),
        word if word.eq_ignore_ascii_case("replicated") => Ok(false),
        _ => Err(invalid(key, "expected \"persisted\" or \"replicated\"")),
    }
}

fn expiry_from_text(text: &str) -> Option<u64> {
    match text {
        "unlimited" | "Unlimited" | "none" | "None" | "never_expire" => Some(NEVER_EXPIRE),
        "default" | "Default" | "server_default" | "Server_default" => Some(0),
        other => parse_duration_micros(other)
            .filter(|micros| micros_to_secs(*micros) <= MAX_EXPIRY_TEXT_SECS),
    }
}

fn max_size_from_text(text: &str) -> Option<u64> {
    match text {
        "unlimited" | "Unlimited" => Some(UNLIMITED),
        "0" | "server_default" | "none" | "None" => Some(0),
        other => parse_byte_size(other),
    }
}

fn byte_size_from_text(text: &str) -> Option<u64> {
    match text {
        "0" | "unlimited" | "Unlimited" | "none" | "None" => Some(0),
        other => parse_byte_size(other),
    }
}

impl TopicOptions {
    /// Parses a request block strictly: every key must be in the topic catalog (and updatable
    /// in [`Mode::Update`]), every value of an accepted kind and within bounds. Errors name the
    /// first bad key. Sentinel zeros (`message_expiry`, `max_topic_size`, `segment_size`,
    /// `size_of_messages_required_to_save` = 0) mean "server default" and parse to `None`.
    pub fn parse(block: &OptionsBlock, mode: Mode) -> Result<Self, OptionsError> {
        let mut parsed = Self::default();
        for entry in block.entries() {
            let unsupported = || OptionsError::UnsupportedKey {
                scope: Scope::Topic.name(),
                key: entry.key.to_owned(),
            };
            let Some(spec) = spec(Scope::Topic, entry.key) else {
                return Err(unsupported());
            };
            if mode == Mode::Update && !spec.updatable {
                return Err(unsupported());
            }
            parsed.absorb(&entry, spec.key)?;
        }
        // `persisted` with `enforce_fsync = false` asks for two things; `replicated` with
        // `enforce_fsync = true` is met by the fsync.
        if let (Some(false), Some(true)) = (parsed.enforce_fsync, parsed.durability) {
            return Err(invalid(
                keys::DURABILITY,
                "contradicts enforce_fsync (persisted is enforce_fsync = true)",
            ));
        }
        Ok(parsed)
    }

    fn absorb(&mut self, entry: &OptionEntry<'_>, key: &'static str) -> Result<(), OptionsError> {
        match key {
            keys::COMPRESSION_ALGORITHM => {
                let value = match ValueKind::from_code(entry.kind) {
                    Some(ValueKind::Uint8) => Compression::from_code(fixed::<1>(entry, key)?[0])
                        .ok_or_else(|| invalid(key, "compression code must be 1 or 2"))?,
                    Some(ValueKind::String) => Compression::from_name(text(entry, key)?)
                        .ok_or_else(|| invalid(key, "expected \"none\" or \"gzip\""))?,
                    _ => return Err(wrong_kind(key)),
                };
                self.compression_algorithm = Some(value);
            }
            keys::MESSAGE_EXPIRY => {
                let value = parse_u64(entry, key, expiry_from_text)?;
                self.message_expiry = (value != 0).then_some(value);
            }
            keys::MAX_TOPIC_SIZE => {
                let value = parse_u64(entry, key, max_size_from_text)?;
                self.max_topic_size = (value != 0).then_some(value);
            }
            keys::SEGMENT_SIZE => {
                let value = parse_u64(entry, key, byte_size_from_text)?;
                if value != 0
                    && (!(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&value)
                        || !value.is_multiple_of(SEGMENT_SIZE_ALIGNMENT))
                {
                    return Err(invalid(
                        key,
                        "must be a multiple of 512 within 1 MiB..=1 GiB",
                    ));
                }
                self.segment_size = (value != 0).then_some(value);
            }
            keys::ENFORCE_FSYNC => self.enforce_fsync = Some(parse_bool(entry, key)?),
            keys::MESSAGES_REQUIRED_TO_SAVE => {
                let value = match ValueKind::from_code(entry.kind) {
                    Some(ValueKind::Uint32) => u32::from_le_bytes(fixed(entry, key)?),
                    Some(ValueKind::String) => text(entry, key)?
                        .parse()
                        .map_err(|_| invalid(key, "expected a decimal u32"))?,
                    _ => return Err(wrong_kind(key)),
                };
                if value == 0 || value > MAX_MESSAGES_REQUIRED_TO_SAVE {
                    return Err(invalid(key, "must be within 1..=16777216"));
                }
                self.messages_required_to_save = Some(value);
            }
            keys::SIZE_OF_MESSAGES_REQUIRED_TO_SAVE => {
                let value = parse_u64(entry, key, byte_size_from_text)?;
                if value > MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE {
                    return Err(invalid(key, "must be at most 1 GiB"));
                }
                self.size_of_messages_required_to_save = (value != 0).then_some(value);
            }
            keys::PREALLOCATE_SEGMENTS => self.preallocate_segments = Some(parse_bool(entry, key)?),
            keys::DURABILITY => self.durability = Some(parse_durability(entry, key)?),
            keys::CONSUMER_OFFSET_DURABILITY => {
                self.consumer_offset_durability = Some(parse_durability(entry, key)?);
            }
            keys::PARTITION_RESIZE_POLICY => {
                if ValueKind::from_code(entry.kind) != Some(ValueKind::String) {
                    return Err(wrong_kind(key));
                }
                self.fixed_partitions = Some(match text(entry, key)? {
                    word if word.eq_ignore_ascii_case("fixed") => true,
                    word if word.eq_ignore_ascii_case("mutable") => false,
                    _ => return Err(invalid(key, "expected \"mutable\" or \"fixed\"")),
                });
            }
            _ => unreachable!("every catalog key is handled"),
        }
        Ok(())
    }

    /// The settings with every absent option taken from `defaults`.
    pub fn resolve(&self, defaults: &TopicSettings) -> TopicSettings {
        TopicSettings {
            compression_algorithm: self
                .compression_algorithm
                .unwrap_or(defaults.compression_algorithm),
            message_expiry: self.message_expiry.unwrap_or(defaults.message_expiry),
            max_topic_size: self.max_topic_size.unwrap_or(defaults.max_topic_size),
            segment_size: self.segment_size.unwrap_or(defaults.segment_size),
            // `persisted` asks for fsync; `replicated` is met by eddy's fsynced majority and
            // weakens nothing (see `durability_persisted`).
            enforce_fsync: self
                .enforce_fsync
                .or(self.durability.filter(|persisted| *persisted))
                .unwrap_or(defaults.enforce_fsync),
            durability_persisted: self
                .durability
                .or(self.enforce_fsync)
                .unwrap_or(defaults.durability_persisted),
            messages_required_to_save: self
                .messages_required_to_save
                .unwrap_or(defaults.messages_required_to_save),
            size_of_messages_required_to_save: self
                .size_of_messages_required_to_save
                .unwrap_or(defaults.size_of_messages_required_to_save),
            preallocate_segments: self
                .preallocate_segments
                .unwrap_or(defaults.preallocate_segments),
            consumer_offset_fsync: self
                .consumer_offset_durability
                .unwrap_or(defaults.consumer_offset_fsync),
            fixed_partitions: self.fixed_partitions.unwrap_or(defaults.fixed_partitions),
        }
    }

    /// The cross-field checks of `CreateTopic`: the preallocation cap and an explicit
    /// `max_topic_size` not below the resolved segment size. Returns the resolved settings.
    pub fn validate_create(
        &self,
        partitions_count: u32,
        defaults: &TopicSettings,
    ) -> Result<TopicSettings, OptionsError> {
        let settings = self.resolve(defaults);
        if settings.preallocate_segments
            && settings
                .segment_size
                .saturating_mul(u64::from(partitions_count))
                > MAX_PREALLOCATED_TOPIC_BYTES
        {
            return Err(invalid(
                keys::PREALLOCATE_SEGMENTS,
                "segment_size x partitions_count exceeds 64 GiB",
            ));
        }
        if let Some(max) = self.max_topic_size {
            if max < settings.segment_size {
                return Err(OptionsError::MaxTopicSizeBelowSegment {
                    max_topic_size: max,
                    segment_size: settings.segment_size,
                });
            }
        }
        Ok(settings)
    }

    /// Applies an update (parsed with [`Mode::Update`]) to a topic's current settings:
    /// present keys replace, absent keys keep their value.
    pub fn apply_update(&self, current: &TopicSettings) -> Result<TopicSettings, OptionsError> {
        if let Some(max) = self.max_topic_size {
            if max < current.segment_size {
                return Err(OptionsError::MaxTopicSizeBelowSegment {
                    max_topic_size: max,
                    segment_size: current.segment_size,
                });
            }
        }
        Ok(self.resolve(current))
    }

    fn present(
        &self,
        settings: &TopicSettings,
    ) -> [(&'static str, ValueKind, Option<Vec<u8>>); 11] {
        let value = |set: bool, key: &str| {
            if set {
                settings.canonical_value(key)
            } else {
                None
            }
        };
        [
            (
                keys::COMPRESSION_ALGORITHM,
                ValueKind::String,
                value(
                    self.compression_algorithm.is_some(),
                    keys::COMPRESSION_ALGORITHM,
                ),
            ),
            (
                keys::CONSUMER_OFFSET_DURABILITY,
                ValueKind::String,
                value(
                    self.consumer_offset_durability.is_some(),
                    keys::CONSUMER_OFFSET_DURABILITY,
                ),
            ),
            (
                keys::DURABILITY,
                ValueKind::String,
                value(self.durability.is_some(), keys::DURABILITY),
            ),
            (
                keys::ENFORCE_FSYNC,
                ValueKind::Bool,
                value(self.enforce_fsync.is_some(), keys::ENFORCE_FSYNC),
            ),
            (
                keys::MAX_TOPIC_SIZE,
                ValueKind::Uint64,
                value(self.max_topic_size.is_some(), keys::MAX_TOPIC_SIZE),
            ),
            (
                keys::MESSAGE_EXPIRY,
                ValueKind::Uint64,
                value(self.message_expiry.is_some(), keys::MESSAGE_EXPIRY),
            ),
            (
                keys::MESSAGES_REQUIRED_TO_SAVE,
                ValueKind::Uint32,
                value(
                    self.messages_required_to_save.is_some(),
                    keys::MESSAGES_REQUIRED_TO_SAVE,
                ),
            ),
            (
                keys::PARTITION_RESIZE_POLICY,
                ValueKind::String,
                value(
                    self.fixed_partitions.is_some(),
                    keys::PARTITION_RESIZE_POLICY,
                ),
            ),
            (
                keys::PREALLOCATE_SEGMENTS,
                ValueKind::Bool,
                value(
                    self.preallocate_segments.is_some(),
                    keys::PREALLOCATE_SEGMENTS,
                ),
            ),
            (
                keys::SEGMENT_SIZE,
                ValueKind::Uint64,
                value(self.segment_size.is_some(), keys::SEGMENT_SIZE),
            ),
            (
                keys::SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
                ValueKind::Uint64,
                value(
                    self.size_of_messages_required_to_save.is_some(),
                    keys::SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
                ),
            ),
        ]
    }

    fn block_of(entries: &[(&'static str, ValueKind, Option<Vec<u8>>)]) -> OptionsBlock {
        let selected = entries
            .iter()
            .filter_map(|(key, kind, value)| value.as_deref().map(|v| (*key, *kind, v)));
        // Catalog keys with canonical values always form a valid block.
        OptionsBlock::from_entries(selected).unwrap_or_default()
    }

    /// The explicit block: the keys the client set, in canonical kinds, keys in byte order.
    pub fn to_block(&self) -> OptionsBlock {
        let settings = self.resolve(&TopicSettings::REFERENCE_DEFAULTS);
        Self::block_of(&self.present(&settings))
    }

    /// The derived block: the resolved value of every key the client did *not* set, keys in
    /// byte order (spec §5.8.3).
    pub fn derived_block(&self, settings: &TopicSettings) -> OptionsBlock {
        let inverse = Self {
            compression_algorithm: self
                .compression_algorithm
                .xor(Some(settings.compression_algorithm)),
            message_expiry: self.message_expiry.xor(Some(settings.message_expiry)),
            max_topic_size: self.max_topic_size.xor(Some(settings.max_topic_size)),
            segment_size: self.segment_size.xor(Some(settings.segment_size)),
            enforce_fsync: self.enforce_fsync.xor(Some(settings.enforce_fsync)),
            durability: self.durability.xor(Some(settings.durability_persisted)),
            consumer_offset_durability: self
                .consumer_offset_durability
                .xor(Some(settings.consumer_offset_fsync)),
            fixed_partitions: self.fixed_partitions.xor(Some(settings.fixed_partitions)),
            messages_required_to_save: self
                .messages_required_to_save
                .xor(Some(settings.messages_required_to_save)),
            size_of_messages_required_to_save: self
                .size_of_messages_required_to_save
                .xor(Some(settings.size_of_messages_required_to_save)),
            preallocate_segments: self
                .preallocate_segments
                .xor(Some(settings.preallocate_segments)),
        };
        Self::block_of(&inverse.present(settings))
    }
}

const _: () = {
    // The entries of `present` are listed in byte order of their keys.
    assert!(keys::COMPRESSION_ALGORITHM.as_bytes()[0] < keys::ENFORCE_FSYNC.as_bytes()[0]);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn block(entries: &[(&str, ValueKind, &[u8])]) -> OptionsBlock {
        OptionsBlock::from_entries(entries.iter().copied()).unwrap()
    }

    #[test]
    fn parses_every_accepted_form() {
        let parsed = TopicOptions::parse(
            &block(&[
                ("compression_algorithm", ValueKind::Uint8, &[2]),
                ("message_expiry", ValueKind::String, b"7 days"),
                ("max_topic_size", ValueKind::String, b"2 GiB"),
                ("segment_size", ValueKind::String, b"128MiB"),
                ("enforce_fsync", ValueKind::String, b"false"),
                ("messages_required_to_save", ValueKind::String, b"500"),
                (
                    "size_of_messages_required_to_save",
                    ValueKind::Uint64,
                    &2_097_152u64.to_le_bytes(),
                ),
                ("preallocate_segments", ValueKind::Bool, &[1]),
            ]),
            Mode::Create,
        )
        .unwrap();
        assert_eq!(parsed.compression_algorithm, Some(Compression::Gzip));
        assert_eq!(parsed.message_expiry, Some(7 * 86_400 * 1_000_000));
        assert_eq!(parsed.max_topic_size, Some(2 << 30));
        assert_eq!(parsed.segment_size, Some(128 << 20));
        assert_eq!(parsed.enforce_fsync, Some(false));
        assert_eq!(parsed.messages_required_to_save, Some(500));
        assert_eq!(parsed.size_of_messages_required_to_save, Some(2_097_152));
        assert_eq!(parsed.preallocate_segments, Some(true));
        let reparsed = TopicOptions::parse(&parsed.to_block(), Mode::Create).unwrap();
        assert_eq!(
            reparsed, parsed,
            "canonical block parses back to the same options"
        );
    }

    #[test]
    fn sentinels_and_words() {
        let parsed = TopicOptions::parse(
            &block(&[
                ("message_expiry", ValueKind::String, b"server_default"),
                ("max_topic_size", ValueKind::String, b"unlimited"),
                ("segment_size", ValueKind::Uint64, &0u64.to_le_bytes()),
            ]),
            Mode::Create,
        )
        .unwrap();
        assert_eq!(parsed.message_expiry, None);
        assert_eq!(parsed.max_topic_size, Some(UNLIMITED));
        assert_eq!(parsed.segment_size, None);
        let never = TopicOptions::parse(
            &block(&[("message_expiry", ValueKind::String, b"never_expire")]),
            Mode::Update,
        )
        .unwrap();
        assert_eq!(never.message_expiry, Some(NEVER_EXPIRE));
    }

    #[test]
    fn every_bad_value_names_its_key() {
        let cases: &[(&str, ValueKind, &[u8])] = &[
            ("compression_algorithm", ValueKind::Uint8, &[3]),
            ("compression_algorithm", ValueKind::String, b"zstd"),
            ("compression_algorithm", ValueKind::Uint16, &[1, 0]),
            ("message_expiry", ValueKind::Uint32, &[1, 0, 0, 0]),
            ("message_expiry", ValueKind::String, b"soon"),
            ("message_expiry", ValueKind::String, b"200 years"),
            ("max_topic_size", ValueKind::Uint64, &[1, 0, 0]),
            ("segment_size", ValueKind::Uint64, &1000u64.to_le_bytes()),
            (
                "segment_size",
                ValueKind::Uint64,
                &((1u64 << 20) + 1).to_le_bytes(),
            ),
            ("segment_size", ValueKind::String, b"2 GiB"),
            ("enforce_fsync", ValueKind::Bool, &[2]),
            ("enforce_fsync", ValueKind::String, b"yes"),
            (
                "messages_required_to_save",
                ValueKind::Uint32,
                &0u32.to_le_bytes(),
            ),
            (
                "messages_required_to_save",
                ValueKind::Uint32,
                &(16_777_217u32).to_le_bytes(),
            ),
            (
                "size_of_messages_required_to_save",
                ValueKind::String,
                b"2 GiB",
            ),
            ("preallocate_segments", ValueKind::Uint8, &[1]),
        ];
        for (key, kind, value) in cases {
            let err =
                TopicOptions::parse(&block(&[(key, *kind, value)]), Mode::Create).expect_err(key);
            match err {
                OptionsError::InvalidValue { key: got, .. } => assert_eq!(got, *key),
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
    }

    /// The keys newer SDKs send (issue 39): `durability = persisted` is `enforce_fsync =
    /// true`, `replicated` is shown as asked but weakens no ack; `consumer_offset_durability`
    /// and `partition_resize_policy` are settings of their own.
    #[test]
    fn durability_and_resize_policy() {
        let parsed = TopicOptions::parse(
            &block(&[
                ("durability", ValueKind::String, b"replicated"),
                (
                    "consumer_offset_durability",
                    ValueKind::String,
                    b"Persisted",
                ),
                ("partition_resize_policy", ValueKind::String, b"fixed"),
            ]),
            Mode::Create,
        )
        .unwrap();
        let settings = parsed.resolve(&TopicSettings::EDDY_DEFAULTS);
        assert!(
            settings.enforce_fsync,
            "replicated (every newer SDK's default) keeps acks durable"
        );
        assert!(!settings.durability_persisted);
        assert!(settings.consumer_offset_fsync);
        assert!(settings.fixed_partitions);
        let explicit = parsed.to_block();
        assert_eq!(explicit.get("durability").unwrap().value, b"replicated");
        assert_eq!(
            explicit.get("consumer_offset_durability").unwrap().value,
            b"persisted"
        );
        let derived = parsed.derived_block(&settings);
        assert_eq!(derived.get("enforce_fsync").unwrap().value, &[1]);
        assert!(derived.get("durability").is_none());
        // `enforce_fsync = false` alone is the one way to page-cache acks, and reads as
        // replicated; `persisted` alone asks for fsync.
        let page_cache = TopicOptions::parse(
            &block(&[("enforce_fsync", ValueKind::Bool, &[0])]),
            Mode::Create,
        )
        .unwrap();
        let resolved = page_cache.resolve(&TopicSettings::EDDY_DEFAULTS);
        assert!(!resolved.enforce_fsync && !resolved.durability_persisted);
        assert_eq!(
            page_cache
                .derived_block(&resolved)
                .get("durability")
                .unwrap()
                .value,
            b"replicated"
        );
        let persisted = TopicOptions::parse(
            &block(&[("durability", ValueKind::String, b"persisted")]),
            Mode::Create,
        )
        .unwrap()
        .resolve(&TopicSettings::REFERENCE_DEFAULTS);
        assert!(persisted.enforce_fsync && persisted.durability_persisted);
        let both = TopicOptions::parse(
            &block(&[
                ("durability", ValueKind::String, b"replicated"),
                ("enforce_fsync", ValueKind::Bool, &[1]),
            ]),
            Mode::Create,
        )
        .unwrap()
        .resolve(&TopicSettings::EDDY_DEFAULTS);
        assert!(both.enforce_fsync && !both.durability_persisted);
        // The defaults: persisted both ways, mutable.
        let defaults = TopicOptions::default().resolve(&TopicSettings::EDDY_DEFAULTS);
        assert!(defaults.enforce_fsync && defaults.consumer_offset_fsync);
        assert!(!defaults.fixed_partitions);
        for (key, kind, value) in [
            ("durability", ValueKind::String, &b"quorum"[..]),
            ("durability", ValueKind::Bool, &[1][..]),
            (
                "partition_resize_policy",
                ValueKind::String,
                &b"elastic"[..],
            ),
            ("consumer_offset_durability", ValueKind::Uint8, &[1][..]),
        ] {
            assert!(
                TopicOptions::parse(&block(&[(key, kind, value)]), Mode::Create).is_err(),
                "{key} {kind:?} {value:?}"
            );
        }
        let contradiction = block(&[
            ("durability", ValueKind::String, b"persisted"),
            ("enforce_fsync", ValueKind::Bool, &[0]),
        ]);
        assert!(TopicOptions::parse(&contradiction, Mode::Create).is_err());
        let agreement = block(&[
            ("durability", ValueKind::String, b"persisted"),
            ("enforce_fsync", ValueKind::Bool, &[1]),
        ]);
        assert!(TopicOptions::parse(&agreement, Mode::Create).is_ok());
        let update = block(&[("durability", ValueKind::String, b"persisted")]);
        assert!(TopicOptions::parse(&update, Mode::Update).is_err());
    }

    #[test]
    fn unknown_and_non_updatable_keys() {
        let partitions = block(&[("partitions_count", ValueKind::Uint32, &[7, 0, 0, 0])]);
        assert_eq!(
            TopicOptions::parse(&partitions, Mode::Create),
            Err(OptionsError::UnsupportedKey {
                scope: "topic",
                key: "partitions_count".into()
            })
        );
        let create_only = block(&[(
            "segment_size",
            ValueKind::Uint64,
            &(1u64 << 20).to_le_bytes(),
        )]);
        assert!(TopicOptions::parse(&create_only, Mode::Create).is_ok());
        assert!(matches!(
            TopicOptions::parse(&create_only, Mode::Update),
            Err(OptionsError::UnsupportedKey { .. })
        ));
    }

    #[test]
    fn cross_field_checks() {
        let small_cap = TopicOptions {
            max_topic_size: Some(1 << 20),
            ..TopicOptions::default()
        };
        assert_eq!(
            small_cap.validate_create(1, &TopicSettings::EDDY_DEFAULTS),
            Err(OptionsError::MaxTopicSizeBelowSegment {
                max_topic_size: 1 << 20,
                segment_size: 1 << 30
            })
        );
        let with_segment = TopicOptions {
            segment_size: Some(1 << 20),
            ..small_cap
        };
        assert!(with_segment
            .validate_create(1, &TopicSettings::EDDY_DEFAULTS)
            .is_ok());
        let prealloc = TopicOptions {
            preallocate_segments: Some(true),
            ..TopicOptions::default()
        };
        assert!(prealloc
            .validate_create(64, &TopicSettings::EDDY_DEFAULTS)
            .is_ok());
        assert!(prealloc
            .validate_create(65, &TopicSettings::EDDY_DEFAULTS)
            .is_err());
        let current = TopicSettings::EDDY_DEFAULTS;
        assert!(small_cap.apply_update(&current).is_err());
        let patch = TopicOptions {
            compression_algorithm: Some(Compression::Gzip),
            ..TopicOptions::default()
        };
        let updated = patch.apply_update(&current).unwrap();
        assert_eq!(updated.compression_algorithm, Compression::Gzip);
        assert_eq!(updated.segment_size, current.segment_size);
    }

    #[test]
    fn eddy_defaults_enforce_fsync() {
        const { assert!(TopicSettings::EDDY_DEFAULTS.enforce_fsync) };
        assert!(TopicSettings::default().enforce_fsync);
        const { assert!(!TopicSettings::REFERENCE_DEFAULTS.enforce_fsync) };
        assert!(
            TopicOptions::default()
                .resolve(&TopicSettings::default())
                .enforce_fsync
        );
    }

    /// Spec §5.8.3: the derived block for a topic created without options (reference defaults).
    #[test]
    fn golden_derived_block() {
        let derived = TopicOptions::default().derived_block(&TopicSettings::REFERENCE_DEFAULTS);
        assert_eq!(derived.encoded_len(), 390);
        let keys: Vec<&str> = derived.entries().map(|e| e.key).collect();
        assert_eq!(
            keys,
            [
                "compression_algorithm",
                "consumer_offset_durability",
                "durability",
                "enforce_fsync",
                "max_topic_size",
                "message_expiry",
                "messages_required_to_save",
                "partition_resize_policy",
                "preallocate_segments",
                "segment_size",
                "size_of_messages_required_to_save"
            ]
        );
        let mut expected = Vec::new();
        let mut push = |key: &str, kind: u8, value: &[u8]| {
            expected.push(2);
            expected.extend_from_slice(&(key.len() as u32).to_le_bytes());
            expected.extend_from_slice(key.as_bytes());
            expected.push(kind);
            expected.extend_from_slice(&(value.len() as u32).to_le_bytes());
            expected.extend_from_slice(value);
        };
        push("compression_algorithm", 2, b"none");
        push("consumer_offset_durability", 2, b"replicated");
        push("durability", 2, b"replicated");
        push("enforce_fsync", 3, &[0]);
        push("max_topic_size", 12, &[0xff; 8]);
        push("message_expiry", 12, &[0xff; 8]);
        push("messages_required_to_save", 11, &[0, 4, 0, 0]);
        push("partition_resize_policy", 2, b"mutable");
        push("preallocate_segments", 3, &[0]);
        push("segment_size", 12, &[0, 0, 0, 0x40, 0, 0, 0, 0]);
        push(
            "size_of_messages_required_to_save",
            12,
            &[0, 0, 0x10, 0, 0, 0, 0, 0],
        );
        assert_eq!(derived.as_bytes(), &expected[..]);

        let explicit = TopicOptions {
            message_expiry: Some(5),
            ..TopicOptions::default()
        };
        let settings = explicit.resolve(&TopicSettings::EDDY_DEFAULTS);
        let derived = explicit.derived_block(&settings);
        assert!(derived.get("message_expiry").is_none());
        assert_eq!(derived.get("enforce_fsync").unwrap().value, &[1]);
        assert_eq!(derived.get("durability").unwrap().value, b"persisted");
        assert_eq!(
            derived.get("consumer_offset_durability").unwrap().value,
            b"persisted"
        );
        assert_eq!(
            explicit.to_block().get("message_expiry").unwrap().value,
            &5u64.to_le_bytes()
        );
        assert_eq!(explicit.to_block().len(), 1);
    }
}
