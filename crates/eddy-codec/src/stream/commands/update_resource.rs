//! `UPDATE_RESOURCE` (code 16, operation 150) of the 0.12.2 wire: one option patch of a
//! topic, a stream or a user. It replaces `UPDATE_TOPIC`, `UPDATE_STREAM` and `UPDATE_USER`
//! there; the renamed fields (`name`, `username`, `status`) travel as options.
//!
//! ```text
//! request  [scope: u8 (1 topic, 2 stream, 3 user)][stream_id][topic_id]   topic
//!                                                  [stream_id]             stream
//!                                                  [user_id]               user
//!          [reset_count: u8][reset key: WireName]*
//!          [options block to the end of the body]
//! reply    empty (result-framed, as every metadata reply)
//! ```

use crate::stream::codec::{Field, Reader};
use crate::stream::commands::{Empty, TrailingOptions};
use crate::stream::error::CodecError;
use crate::stream::identifier::Identifier;
use crate::stream::name::WireName;

/// What a patch applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceTarget {
    /// Scope 1.
    Topic {
        /// Stream, by id or name.
        stream_id: Identifier,
        /// Topic, by id or name.
        topic_id: Identifier,
    },
    /// Scope 2.
    Stream {
        /// Stream, by id or name.
        stream_id: Identifier,
    },
    /// Scope 3.
    User {
        /// User, by id or name.
        user_id: Identifier,
    },
}

impl Field for ResourceTarget {
    fn field_len(&self) -> usize {
        1 + match self {
            Self::Topic {
                stream_id,
                topic_id,
            } => stream_id.field_len() + topic_id.field_len(),
            Self::Stream { stream_id } => stream_id.field_len(),
            Self::User { user_id } => user_id.field_len(),
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Topic {
                stream_id,
                topic_id,
            } => {
                out.push(1);
                stream_id.put(out);
                topic_id.put(out);
            }
            Self::Stream { stream_id } => {
                out.push(2);
                stream_id.put(out);
            }
            Self::User { user_id } => {
                out.push(3);
                user_id.put(out);
            }
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let offset = reader.position();
        Ok(match reader.u8(name)? {
            1 => Self::Topic {
                stream_id: Identifier::take(reader, name)?,
                topic_id: Identifier::take(reader, name)?,
            },
            2 => Self::Stream {
                stream_id: Identifier::take(reader, name)?,
            },
            3 => Self::User {
                user_id: Identifier::take(reader, name)?,
            },
            _ => {
                return Err(CodecError::InvalidValue {
                    field: name,
                    offset,
                    reason: "resource scope must be 1, 2 or 3",
                })
            }
        })
    }
}

/// The keys a patch resets to their defaults: `[count: u8][WireName]*`, no key twice.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetKeys(pub Vec<WireName>);

impl Field for ResetKeys {
    fn field_len(&self) -> usize {
        1 + self.0.iter().map(Field::field_len).sum::<usize>()
    }

    fn put(&self, out: &mut Vec<u8>) {
        debug_assert!(u8::try_from(self.0.len()).is_ok());
        out.push(self.0.len() as u8);
        for key in &self.0 {
            key.put(out);
        }
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let count = reader.u8(name)?;
        let mut keys: Vec<WireName> = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let offset = reader.position();
            let key = WireName::take(reader, name)?;
            if keys.iter().any(|k| k == &key) {
                return Err(CodecError::InvalidValue {
                    field: name,
                    offset,
                    reason: "a reset key is named twice",
                });
            }
            keys.push(key);
        }
        Ok(Self(keys))
    }
}

crate::stream::codec::wire_struct! {
    /// Request body of `UPDATE_RESOURCE`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct UpdateResource {
        /// The resource.
        pub target: ResourceTarget,
        /// Keys reset to their defaults.
        pub reset: ResetKeys,
        /// Keys set, to the end of the body.
        pub options: TrailingOptions,
    }
}

crate::stream::commands::command!(UpdateResource, UpdateResource, Empty);

impl UpdateResource {
    /// The stream and topic the patch names, for resolution and permissions.
    pub fn target_ids(&self) -> (Option<&Identifier>, Option<&Identifier>) {
        match &self.target {
            ResourceTarget::Topic {
                stream_id,
                topic_id,
            } => (Some(stream_id), Some(topic_id)),
            ResourceTarget::Stream { stream_id } => (Some(stream_id), None),
            ResourceTarget::User { .. } => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::WireDecode;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        let options = eddy_options::OptionsBlock::from_entries([(
            "name",
            eddy_options::ValueKind::String,
            &b"renamed"[..],
        )])
        .unwrap();
        // The options run to the end of the body, so a cut there still decodes.
        round_trip(&UpdateResource {
            target: ResourceTarget::Topic {
                stream_id: Identifier::numeric(1),
                topic_id: Identifier::named("orders").unwrap(),
            },
            reset: ResetKeys(vec![WireName::new("message_expiry").unwrap()]),
            options: TrailingOptions(options),
        });
        round_trip(&UpdateResource {
            target: ResourceTarget::User {
                user_id: Identifier::numeric(7),
            },
            reset: ResetKeys::default(),
            options: TrailingOptions::default(),
        });
    }

    /// The bytes the edge.9 SDK sends for a stream rename (`update_stream` with a name).
    #[test]
    fn sdk_stream_rename() {
        let body =
            hex("02 01 04 05 00 00 00 00 02 04 00 00 00 6e 61 6d 65 02 03 00 00 00 6e 65 77");
        let request = UpdateResource::decode(&body).unwrap();
        assert_eq!(
            request.target,
            ResourceTarget::Stream {
                stream_id: Identifier::numeric(5)
            }
        );
        assert!(request.reset.0.is_empty());
        assert_eq!(request.options.0.get("name").unwrap().value, b"new");
        assert!(UpdateResource::decode(&hex("04 01 04 05 00 00 00 00")).is_err());
        assert!(
            UpdateResource::decode(&hex("02 01 04 05 00 00 00 02 01 61 01 61")).is_err(),
            "a key reset twice"
        );
    }
}
