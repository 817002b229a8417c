//! The `DESCRIBE_OPTIONS` reply (spec §3.13):
//!
//! ```text
//! [count: u32]
//! count x:
//!   [key_len: u8 (1..=255)][key]
//!   [kind: u8 (1..=15)]
//!   [default_len: u32][default bytes]      encoded in `kind`'s encoding; empty if none
//!   [description_len: u32][description]    UTF-8 (decoded lossily, as the SDK does)
//! ```

use crate::catalog::Scope;
use crate::error::OptionsError;
use crate::tlv::ValueKind;
use crate::topic::TopicSettings;

/// Smallest encoded entry (1-byte key, empty default and description).
const MIN_ENTRY_LEN: usize = 1 + 1 + 1 + 4 + 4;
/// Longest default value or description accepted when decoding.
pub const MAX_DESCRIBE_FIELD_LEN: usize = 64 * 1024;

/// One described option.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OptionDescriptor {
    /// The key (1..=255 bytes).
    pub key: String,
    /// Canonical kind.
    pub kind: ValueKind,
    /// Default value in the kind's encoding (empty if none).
    pub default: Vec<u8>,
    /// Free text.
    pub description: String,
}

/// The reply body.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DescribeOptionsReply {
    /// The catalog entries, in catalog order.
    pub entries: Vec<OptionDescriptor>,
}

impl DescribeOptionsReply {
    /// The catalog of `scope` with defaults taken from `defaults` (topic scope only).
    pub fn for_scope(scope: Scope, defaults: &TopicSettings) -> Self {
        let entries = scope
            .catalog()
            .iter()
            .map(|spec| OptionDescriptor {
                key: spec.key.to_owned(),
                kind: spec.kind,
                default: defaults.canonical_value(spec.key).unwrap_or_default(),
                description: spec.description.to_owned(),
            })
            .collect();
        Self { entries }
    }

    /// Exact encoded size.
    pub fn encoded_len(&self) -> usize {
        4 + self
            .entries
            .iter()
            .map(|e| 1 + e.key.len() + 1 + 4 + e.default.len() + 4 + e.description.len())
            .sum::<usize>()
    }

    /// Appends the body to `out`. Keys longer than 255 bytes are an invariant violation
    /// (catalog keys are short).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for entry in &self.entries {
            assert!(
                !entry.key.is_empty() && entry.key.len() <= 255,
                "option key length out of 1..=255"
            );
            out.push(entry.key.len() as u8);
            out.extend_from_slice(entry.key.as_bytes());
            out.push(entry.kind.code());
            out.extend_from_slice(&(entry.default.len() as u32).to_le_bytes());
            out.extend_from_slice(&entry.default);
            out.extend_from_slice(&(entry.description.len() as u32).to_le_bytes());
            out.extend_from_slice(entry.description.as_bytes());
        }
    }

    /// Decodes a body; trailing bytes are ignored, as the SDK does.
    pub fn decode(buf: &[u8]) -> Result<Self, OptionsError> {
        let mut pos = 0usize;
        let take =
            |pos: &mut usize, n: usize, reason: &'static str| -> Result<&[u8], OptionsError> {
                let slice = buf
                    .get(*pos..pos.saturating_add(n))
                    .ok_or(OptionsError::Describe {
                        offset: *pos,
                        reason,
                    })?;
                *pos += n;
                Ok(slice)
            };
        let u32_at = |pos: &mut usize, reason| -> Result<u32, OptionsError> {
            let mut raw = [0u8; 4];
            raw.copy_from_slice(take(pos, 4, reason)?);
            Ok(u32::from_le_bytes(raw))
        };
        let count = u32_at(&mut pos, "truncated count")? as usize;
        if count > buf.len().saturating_sub(4) / MIN_ENTRY_LEN {
            return Err(OptionsError::Describe {
                offset: 0,
                reason: "count exceeds the body",
            });
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let key_len = take(&mut pos, 1, "truncated key length")?[0] as usize;
            if key_len == 0 {
                return Err(OptionsError::Describe {
                    offset: pos - 1,
                    reason: "empty key",
                });
            }
            let key_at = pos;
            let key = std::str::from_utf8(take(&mut pos, key_len, "truncated key")?)
                .map_err(|_| OptionsError::Describe {
                    offset: key_at,
                    reason: "key is not utf-8",
                })?
                .to_owned();
            let kind_at = pos;
            let kind = ValueKind::from_code(take(&mut pos, 1, "truncated kind")?[0]).ok_or(
                OptionsError::Describe {
                    offset: kind_at,
                    reason: "kind outside 1..=15",
                },
            )?;
            let default_len = u32_at(&mut pos, "truncated default length")? as usize;
            if default_len > MAX_DESCRIBE_FIELD_LEN {
                return Err(OptionsError::Describe {
                    offset: pos - 4,
                    reason: "default value too long",
                });
            }
            let default = take(&mut pos, default_len, "truncated default")?.to_vec();
            let description_len = u32_at(&mut pos, "truncated description length")? as usize;
            if description_len > MAX_DESCRIBE_FIELD_LEN {
                return Err(OptionsError::Describe {
                    offset: pos - 4,
                    reason: "description too long",
                });
            }
            let description =
                String::from_utf8_lossy(take(&mut pos, description_len, "truncated description")?)
                    .into_owned();
            entries.push(OptionDescriptor {
                key,
                kind,
                default,
                description,
            });
        }
        Ok(Self { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_defaults_match_spec_bytes() {
        let reply =
            DescribeOptionsReply::for_scope(Scope::Topic, &TopicSettings::REFERENCE_DEFAULTS);
        let defaults: Vec<(&str, u8, &[u8])> = reply
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.kind.code(), e.default.as_slice()))
            .collect();
        assert_eq!(
            defaults,
            [
                ("compression_algorithm", 2, &b"none"[..]),
                ("message_expiry", 12, &[0xff; 8][..]),
                ("max_topic_size", 12, &[0xff; 8][..]),
                ("segment_size", 12, &[0, 0, 0, 0x40, 0, 0, 0, 0][..]),
                ("enforce_fsync", 3, &[0][..]),
                ("messages_required_to_save", 11, &[0, 4, 0, 0][..]),
                (
                    "size_of_messages_required_to_save",
                    12,
                    &[0, 0, 0x10, 0, 0, 0, 0, 0][..]
                ),
                ("preallocate_segments", 3, &[0][..]),
                // The keys of the 0.12.2 wire (the edge.9 and Python SDKs).
                ("durability", 2, &b"replicated"[..]),
                ("consumer_offset_durability", 2, &b"replicated"[..]),
                ("partition_resize_policy", 2, &b"mutable"[..]),
            ]
        );
        let eddy = DescribeOptionsReply::for_scope(Scope::Topic, &TopicSettings::EDDY_DEFAULTS);
        assert_eq!(
            eddy.entries[4].default,
            [1],
            "eddy acks are durable by default"
        );
        assert_eq!(eddy.entries[8].default, b"persisted");
        assert_eq!(eddy.entries[9].default, b"persisted");
    }

    #[test]
    fn stream_and_user_are_empty() {
        for scope in [Scope::Stream, Scope::User] {
            let reply = DescribeOptionsReply::for_scope(scope, &TopicSettings::EDDY_DEFAULTS);
            let mut out = Vec::new();
            reply.encode(&mut out);
            assert_eq!(out, [0, 0, 0, 0]);
        }
    }

    #[test]
    fn round_trip_and_truncation() {
        let reply = DescribeOptionsReply::for_scope(Scope::Topic, &TopicSettings::EDDY_DEFAULTS);
        let mut out = Vec::new();
        reply.encode(&mut out);
        assert_eq!(out.len(), reply.encoded_len());
        assert_eq!(DescribeOptionsReply::decode(&out).unwrap(), reply);
        for cut in 0..out.len() {
            assert!(
                DescribeOptionsReply::decode(&out[..cut]).is_err(),
                "cut {cut}"
            );
        }
        let mut bad_kind = out.clone();
        bad_kind[4 + 1 + "compression_algorithm".len()] = 16;
        assert!(DescribeOptionsReply::decode(&bad_kind).is_err());
        assert!(DescribeOptionsReply::decode(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
