//! Stream protocol (Iggy binary protocol, SDK 0.11.0-edge.4): headers, framing and checksums.
//!
//! Every frame, in both directions, is a fixed 256-byte header followed by a variable body:
//!
//! ```text
//! +--------------------------- 256 bytes ---------------------------+------ size-256 bytes ------+
//! | header (layout chosen by byte 60 "command", see [`header`])      | body (may be empty)        |
//! +-----------------------------------------------------------------+----------------------------+
//! ```
//!
//! * [`header`]: `GenericHeader`, `RequestHeader`, `ReplyHeader`, `EvictionHeader`, with
//!   compile-time size and offset assertions.
//! * [`command`]: the frame type at byte 60. [`operation`]: the operation byte and its classes.
//! * [`checksum`]: XXH3-64 / XXH32 as specified, with the spec's test vectors.
//! * [`frame`]: `decode(&[u8])` distinguishing "need N more bytes" from "invalid".
//! * [`version`]: the packed protocol version and the login version gate.
//!
//! Invariants: no I/O, no runtime; the frame `size` is checked against a limit before any
//! allocation; no decoder panics on any input (proptests and the fuzz corpus check this).

pub mod checksum;
pub mod command;
pub mod error;
pub mod frame;
pub mod header;
pub mod operation;
pub mod version;

pub use checksum::{request_checksum, xxh32, xxh3_64};
pub use command::Command;
pub use error::WireError;
pub use frame::{
    decode, decode_with_limit, peek_frame_len, Decoded, Frame, FrameDecoder, Header, OwnedFrame,
    DEFAULT_MAX_FRAME_SIZE,
};
pub use header::{
    EvictionHeader, EvictionReason, FrameFields, GenericHeader, HeaderBytes, ReplyHeader,
    RequestHeader, HEADER_SIZE,
};
pub use operation::Operation;

/// Entry points for `fuzz/` targets; `cargo test` replays the committed corpus through them.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing {
    use super::frame::{decode_with_limit, Decoded, Header};

    /// Decodes a frame from arbitrary bytes and exercises every header accessor.
    pub fn fuzz_frame(data: &[u8]) {
        if let Ok(Decoded::Complete(frame)) = decode_with_limit(data, 1 << 20) {
            assert!(frame.len() <= data.len());
            match frame.header {
                Header::Request(h) => {
                    let _ = h.validate();
                    assert_eq!(&h.encode(), frame.header_bytes);
                }
                Header::Reply(h) => assert_eq!(&h.encode(), frame.header_bytes),
                Header::Eviction(h) => {
                    let _ = h.validate();
                    assert_eq!(&h.encode(), frame.header_bytes);
                }
                Header::Other(h) => assert_eq!(&h.encode(), frame.header_bytes),
            }
        }
    }
}
