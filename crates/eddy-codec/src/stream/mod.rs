//! Stream protocol (Iggy binary protocol, SDK 0.11.0-edge.4): every command's request and
//! reply, the shared encodings, the reply conventions, the error code table, the command table
//! and the message batch.
//!
//! A request frame is a 256-byte header (see `eddy_wire::stream`) and a body:
//!
//! ```text
//! header byte 176 = operation ----+--> 1 Register      -> commands::login_register::RegisterAttempts
//!                                 +--> 2 NonReplicated -> code at bytes 196..200 -> Request::decode
//!                                 +--> 3, 128..=162    -> CommandCode::for_operation -> Request::decode
//! ```
//!
//! * [`request`]: [`Request`] (one enum of all requests), [`route`], [`Request::decode_frame`].
//! * [`commands`]: one file per command; each request type implements [`Command`] with its
//!   reply payload type.
//! * [`reply`]: [`ReplyFrame`] (success with result section where the operation wants one,
//!   status errors, rejection sections) and the client-side [`reply_payload`].
//! * [`batch`]: [`build_batch`], [`admit`] + [`AdmittedBatch::stamp`], [`StoredBatch`] and its
//!   zero-copy [`PollRecord`] slices.
//! * [`command_table`]: the one [`COMMANDS`] table (code, name, operation, replicated,
//!   pre-auth, [`RequiredPermission`]).
//! * [`error_code`]: [`ErrorCode`], every `IggyError` code.
//! * Shared encodings: [`name`], [`identifier`], [`polling`], [`permissions`],
//!   [`user_headers`], [`entities`]; options blocks come from `eddy_options`.
//! * [`v0_12`]: the replies of the 0.12.2 wire (the edge.9 SDK), re-encoded from the 0.11
//!   ones the handlers build.
//!
//! Invariants: decoders never panic and never size an allocation from a wire count beyond
//! what the remaining bytes can hold; batch bodies are never copied between receipt, storage
//! and poll replies; a reply never pairs a non-zero status with a body.

pub mod batch;
pub mod codec;
pub mod command_table;
pub mod commands;
pub mod entities;
pub mod error;
pub mod error_code;
pub mod identifier;
pub mod name;
pub mod permissions;
pub mod polling;
pub mod reply;
pub mod request;
pub mod user_headers;
pub mod v0_12;

pub use batch::{
    admit, build_batch, AdmittedBatch, BatchHeader, FrameHeader, Message, PollRecord,
    PolledMessage, StampedBatch, StoredBatch,
};
pub use codec::{WireDecode, WireEncode};
pub use command_table::{CommandCode, CommandSpec, RequiredPermission, COMMANDS};
pub use commands::Command;
pub use error::{BatchError, CodecError};
pub use error_code::ErrorCode;
pub use identifier::{Consumer, ConsumerKind, Identifier, Partitioning};
pub use name::WireName;
pub use permissions::{GlobalPermissions, Permissions, StreamPermissions, TopicPermissions};
pub use polling::{AckLevel, OptionalPartition, PollingStrategy};
pub use reply::{reply_payload, ReplyFrame};
pub use request::{route, Request, Route};

/// Entry points for `fuzz/` targets; `cargo test` replays the committed corpus through them.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing {
    use bytes::Bytes;
    use eddy_wire::stream::{decode_with_limit, Decoded, Header};

    use super::batch::{admit, StoredBatch};
    use super::command_table::COMMANDS;
    use super::request::Request;

    /// Treats `data` as a request frame (if it frames) and as a bare body for every command
    /// code; whatever decodes must re-encode to something that decodes to the same request.
    pub fn fuzz_request(data: &[u8]) {
        if let Ok(Decoded::Complete(frame)) = decode_with_limit(data, 1 << 20) {
            if let Header::Request(header) = frame.header {
                let _ = Request::decode_frame(&header, &Bytes::copy_from_slice(frame.body));
            }
        }
        let body = Bytes::copy_from_slice(data);
        for spec in &COMMANDS {
            if let Ok(request) = Request::decode(spec.code, &body) {
                let encoded = Bytes::from(request.to_vec());
                assert_eq!(encoded.len(), request.encoded_len());
                let again =
                    Request::decode(spec.code, &encoded).expect("a re-encoded request decodes");
                assert_eq!(again, request, "re-encoding is stable");
            }
        }
    }

    /// Treats `data` as a received batch: admission, stamping, parsing as stored and slicing
    /// must agree with each other and never panic.
    pub fn fuzz_batch(data: &[u8]) {
        let bytes = Bytes::copy_from_slice(data);
        let count = bytes.get(48..52).map_or(0, |raw| {
            u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])
        });
        if let Ok(admitted) = admit(bytes.clone(), count) {
            // The stored bytes are the same whether stamped in place (a buffer nothing else
            // holds), into a copy (a shared one) or as a `StampedBatch`.
            let copied = admitted.clone().stamp_into_bytes(3, 100, 5);
            let in_place = admit(Bytes::from(data.to_vec()), count)
                .expect("admitted once, admitted again")
                .stamp_into_bytes(3, 100, 5);
            let stamped = admitted.stamp(3, 100, 5);
            assert_eq!(copied, stamped.to_vec(), "stamped into a copy");
            assert_eq!(in_place, stamped.to_vec(), "stamped in place");
            let stored =
                StoredBatch::parse(Bytes::from(stamped.to_vec())).expect("a stamped batch parses");
            stored.verify().expect("a stamped batch verifies");
            for start in [100, 101, 99 + u64::from(count)] {
                if let Ok(record) = stored.slice(start, 2) {
                    let mut whole = record.header_bytes().to_vec();
                    whole.extend_from_slice(record.frames());
                    StoredBatch::parse(Bytes::from(whole))
                        .and_then(|s| s.verify())
                        .expect("a slice is a valid batch");
                }
            }
        }
        if let Ok(stored) = StoredBatch::parse(bytes) {
            let _ = stored.verify();
            let _ = stored.slice(stored.first_offset().saturating_add(1), 1);
        }
    }
}
