//! One file per command: its request and its reply, encode and decode on both sides.
//!
//! Request types encode the request body (the bytes after the 256-byte header); reply types
//! encode the reply *payload*: the result section of result-framed operations is added and
//! stripped by [`crate::stream::reply`]. Empty payloads use [`Empty`]; single-object reads that
//! answer "not found" with an empty body use [`Maybe`].

use super::codec::{Field, Reader, WireDecode, WireEncode};
use super::command_table::CommandCode;
use super::error::CodecError;

/// A request type of the catalog, tied to its code and reply payload type.
pub trait Command: WireEncode + WireDecode {
    /// The command code.
    const CODE: CommandCode;
    /// The reply payload.
    type Reply: WireEncode + WireDecode;
}

macro_rules! command {
    ($request:ty, $code:ident, $reply:ty) => {
        impl $crate::stream::commands::Command for $request {
            const CODE: $crate::stream::command_table::CommandCode =
                $crate::stream::command_table::CommandCode::$code;
            type Reply = $reply;
        }
    };
}
pub(crate) use command;

macro_rules! empty_body {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name;

        impl $crate::stream::codec::Field for $name {
            fn field_len(&self) -> usize {
                0
            }
            fn put(&self, _out: &mut Vec<u8>) {}
            fn take(
                _reader: &mut $crate::stream::codec::Reader<'_>,
                _name: &'static str,
            ) -> Result<Self, $crate::stream::error::CodecError> {
                Ok(Self)
            }
        }

        $crate::stream::codec::body_via_field!($name);
    };
}
pub(crate) use empty_body;

empty_body! {
    /// An empty payload (bytes after the result section, if any, are ignored).
    Empty
}

/// A reply that is empty when the object does not exist (`Ok(None)` in the SDK).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Maybe<T>(pub Option<T>);

impl<T: Field> WireEncode for Maybe<T> {
    fn encoded_len(&self) -> usize {
        self.0.as_ref().map_or(0, Field::field_len)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        if let Some(value) = &self.0 {
            value.put(out);
        }
    }
}

impl<T: Field> WireDecode for Maybe<T> {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        if body.is_empty() {
            return Ok(Self(None));
        }
        Ok(Self(Some(T::take(&mut Reader::new(body), "reply")?)))
    }
}

/// An options block in a request: the last field, running to the end of the body, validated
/// structurally (catalog checks are the server's, with `eddy_options`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TrailingOptions(pub eddy_options::OptionsBlock);

impl Field for TrailingOptions {
    fn field_len(&self) -> usize {
        self.0.encoded_len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0.as_bytes());
    }

    fn take(reader: &mut Reader<'_>, _name: &'static str) -> Result<Self, CodecError> {
        Ok(Self(eddy_options::OptionsBlock::from_slice(reader.rest())?))
    }
}

pub mod cancel_deferred_request;
pub mod change_password;
pub mod cluster_change;
pub mod cluster_status;
pub mod create_consumer_group;
pub mod create_partitions;
pub mod create_personal_access_token;
pub mod create_stream;
pub mod create_topic;
pub mod create_user;
pub mod delete_consumer_group;
pub mod delete_consumer_offset;
pub mod delete_partitions;
pub mod delete_personal_access_token;
pub mod delete_segments;
pub mod delete_stream;
pub mod delete_topic;
pub mod delete_user;
pub mod describe_options;
pub mod fetch_messages;
pub mod flush_unsaved_buffer;
pub mod get_client;
pub mod get_clients;
pub mod get_cluster_metadata;
pub mod get_consumer_group;
pub mod get_consumer_groups;
pub mod get_consumer_offset;
pub mod get_me;
pub mod get_metadata_changes;
pub mod get_partition_route;
pub mod get_personal_access_tokens;
pub mod get_snapshot;
pub mod get_stats;
pub mod get_stream;
pub mod get_streams;
pub mod get_topic;
pub mod get_topics;
pub mod get_user;
pub mod get_users;
pub mod join_consumer_group;
pub mod leave_consumer_group;
pub mod login_register;
pub mod login_register_with_pat;
pub mod login_user;
pub mod login_with_personal_access_token;
pub mod logout_user;
pub mod ping;
pub mod poll_messages;
pub mod poll_messages_deferred;
pub mod purge_stream;
pub mod purge_topic;
pub mod send_messages;
pub mod store_consumer_offset;
pub mod sync_consumer_group;
pub mod update_permissions;
pub mod update_resource;
pub mod update_stream;
pub mod update_topic;
pub mod update_user;

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Encode/decode identity, exact length, and no panic on any prefix (each prefix either
    /// decodes or errors cleanly).
    pub(crate) fn round_trip<T>(value: &T) -> Vec<u8>
    where
        T: WireEncode + WireDecode + PartialEq + std::fmt::Debug,
    {
        let bytes = value.to_vec();
        assert_eq!(bytes.len(), value.encoded_len());
        assert_eq!(&T::decode(&bytes).expect("decodes"), value);
        for cut in 0..bytes.len() {
            let _ = T::decode(&bytes[..cut]);
        }
        bytes
    }

    /// Like [`round_trip`], and every strict prefix must fail to decode.
    pub(crate) fn round_trip_strict<T>(value: &T) -> Vec<u8>
    where
        T: WireEncode + WireDecode + PartialEq + std::fmt::Debug,
    {
        let bytes = round_trip(value);
        for cut in 0..bytes.len() {
            assert!(
                T::decode(&bytes[..cut]).is_err(),
                "prefix {cut} of {value:?}"
            );
        }
        bytes
    }

    pub(crate) fn hex(text: &str) -> Vec<u8> {
        text.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).expect("hex"))
            .collect()
    }
}
