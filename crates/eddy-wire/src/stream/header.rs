//! The 256-byte headers of the stream protocol (spec §2).
//!
//! Every header is a `#[repr(C)]` struct whose field offsets are asserted at compile time against
//! the spec's tables, and whose encoder writes each field at `offset_of!` of that field, so the
//! struct layout *is* the wire layout. Decoding reads fields by offset from a `[u8; 256]`; no
//! alignment of the input is assumed and nothing is transmuted.
//!
//! ```text
//! common frame part (all headers)
//!   0      16         32       48     52     56      60  61      62              128
//!   +------+----------+--------+------+------+-------+---+-------+---------------+
//!   |chksum|chksum_bdy|cluster |size  |view  |release|cmd|replica|reserved_frame |
//!   +------+----------+--------+------+------+-------+---+-------+---------------+
//! request (command 5)
//!   128    144              160       168     176 177   184     192     196      200     256
//!   +------+----------------+---------+-------+---+-----+-------+-------+--------+-------+
//!   |client|request_checksum|timestamp|request|op |pad  |session|user_id|code u32|reserved|
//!   +------+----------------+---------+-------+---+-----+-------+-------+--------+-------+
//! reply (command 8)
//!   128              144     160    176 184    192       200     208 209 216    220      256
//!   +----------------+-------+------+---+------+---------+-------+---+---+------+--------+
//!   |request_checksum|context|client|op |commit|timestamp|request|opn|pad|status|reserved|
//!   +----------------+-------+------+---+------+---------+-------+---+---+------+--------+
//! eviction (command 13, header only)
//!   128    144     148         152            255    256
//!   +------+-------+-----------+--------------+------+
//!   |client|ver max|ver min    |reserved (103)|reason|
//!   +------+-------+-----------+--------------+------+
//! ```

use std::mem::{offset_of, size_of};

use super::command::Command;
use super::error::WireError;
use super::operation::Operation;

/// Size of every header, and the minimum frame size.
pub const HEADER_SIZE: usize = 256;
/// Offset of the u32 `size` field (total frame length including the header).
pub const SIZE_OFFSET: usize = 48;
/// Offset of the `command` byte (frame type).
pub const COMMAND_OFFSET: usize = 60;
/// Offset of the request's `operation` byte.
pub const REQUEST_OPERATION_OFFSET: usize = 176;
/// Offset of the request's non-replicated command code (u32).
pub const REQUEST_CODE_OFFSET: usize = 196;
/// Offset of the reply's `operation` byte.
pub const REPLY_OPERATION_OFFSET: usize = 208;
/// Offset of the reply's `status` (u32).
pub const REPLY_STATUS_OFFSET: usize = 216;
/// Offset of the eviction `reason` byte.
pub const EVICTION_REASON_OFFSET: usize = 255;
/// Length of the zero-filled tail of the frame part.
pub const RESERVED_FRAME_LEN: usize = 66;

/// One 256-byte header image.
pub type HeaderBytes = [u8; HEADER_SIZE];

#[inline]
fn get<const N: usize>(buf: &HeaderBytes, at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at..at + N]);
    out
}

#[inline]
fn get_u32(buf: &HeaderBytes, at: usize) -> u32 {
    u32::from_le_bytes(get(buf, at))
}

#[inline]
fn get_u64(buf: &HeaderBytes, at: usize) -> u64 {
    u64::from_le_bytes(get(buf, at))
}

#[inline]
fn get_u128(buf: &HeaderBytes, at: usize) -> u128 {
    u128::from_le_bytes(get(buf, at))
}

#[inline]
fn put(buf: &mut HeaderBytes, at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Reads the `size` field of a frame prefix, if at least 52 bytes are present.
pub fn read_size(prefix: &[u8]) -> Option<u32> {
    let bytes = prefix.get(SIZE_OFFSET..SIZE_OFFSET + 4)?;
    let mut out = [0u8; 4];
    out.copy_from_slice(bytes);
    Some(u32::from_le_bytes(out))
}

/// Converts a body length into the header's `size` field (`256 + len`), if it fits a u32.
pub fn frame_size_for_body(body_len: usize) -> Result<u32, WireError> {
    body_len
        .checked_add(HEADER_SIZE)
        .and_then(|total| u32::try_from(total).ok())
        .ok_or(WireError::BodyTooLarge {
            len: body_len,
            limit: u32::MAX,
        })
}

/// The first 128 bytes shared by every header (spec §2.1).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFields {
    /// Not used on client frames (0).
    pub checksum: u128,
    /// Not used on client frames (0).
    pub checksum_body: u128,
    /// Cluster id (0 from the SDK).
    pub cluster: u128,
    /// Total frame length including the header.
    pub size: u32,
    /// VSR view (0 from the SDK).
    pub view: u32,
    /// Release number (0 from the SDK; must be 0 on evictions).
    pub release: u32,
    /// Frame type.
    pub command: Command,
    /// Sender replica index.
    pub replica: u8,
    /// Zero.
    pub reserved_frame: [u8; RESERVED_FRAME_LEN],
}

const _: () = {
    assert!(size_of::<FrameFields>() == 128);
    assert!(offset_of!(FrameFields, checksum) == 0);
    assert!(offset_of!(FrameFields, checksum_body) == 16);
    assert!(offset_of!(FrameFields, cluster) == 32);
    assert!(offset_of!(FrameFields, size) == SIZE_OFFSET);
    assert!(offset_of!(FrameFields, view) == 52);
    assert!(offset_of!(FrameFields, release) == 56);
    assert!(offset_of!(FrameFields, command) == COMMAND_OFFSET);
    assert!(offset_of!(FrameFields, replica) == 61);
    assert!(offset_of!(FrameFields, reserved_frame) == 62);
    assert!(offset_of!(FrameFields, reserved_frame) + RESERVED_FRAME_LEN == 128);
};

impl FrameFields {
    /// A zeroed frame part with the given command and size.
    pub const fn new(command: Command, size: u32) -> Self {
        Self {
            checksum: 0,
            checksum_body: 0,
            cluster: 0,
            size,
            view: 0,
            release: 0,
            command,
            replica: 0,
            reserved_frame: [0; RESERVED_FRAME_LEN],
        }
    }

    /// Decodes the frame part; fails only on an unknown command byte.
    pub fn decode(buf: &HeaderBytes) -> Result<Self, WireError> {
        Ok(Self {
            checksum: get_u128(buf, offset_of!(Self, checksum)),
            checksum_body: get_u128(buf, offset_of!(Self, checksum_body)),
            cluster: get_u128(buf, offset_of!(Self, cluster)),
            size: get_u32(buf, offset_of!(Self, size)),
            view: get_u32(buf, offset_of!(Self, view)),
            release: get_u32(buf, offset_of!(Self, release)),
            command: Command::from_u8(buf[offset_of!(Self, command)])?,
            replica: buf[offset_of!(Self, replica)],
            reserved_frame: get(buf, offset_of!(Self, reserved_frame)),
        })
    }

    /// Writes the frame part into the first 128 bytes of `buf`.
    pub fn encode_into(&self, buf: &mut HeaderBytes) {
        put(
            buf,
            offset_of!(Self, checksum),
            &self.checksum.to_le_bytes(),
        );
        put(
            buf,
            offset_of!(Self, checksum_body),
            &self.checksum_body.to_le_bytes(),
        );
        put(buf, offset_of!(Self, cluster), &self.cluster.to_le_bytes());
        put(buf, offset_of!(Self, size), &self.size.to_le_bytes());
        put(buf, offset_of!(Self, view), &self.view.to_le_bytes());
        put(buf, offset_of!(Self, release), &self.release.to_le_bytes());
        buf[offset_of!(Self, command)] = self.command.as_u8();
        buf[offset_of!(Self, replica)] = self.replica;
        put(buf, offset_of!(Self, reserved_frame), &self.reserved_frame);
    }

    /// Body length announced by `size` (`size - 256`), if `size` is at least a header.
    pub fn body_len(&self) -> Option<usize> {
        (self.size as usize).checked_sub(HEADER_SIZE)
    }
}

/// The type-erased view used for dispatch: the frame part plus the raw per-command half.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenericHeader {
    /// Bytes 0..128.
    pub frame: FrameFields,
    /// Bytes 128..256, interpreted according to `frame.command`.
    pub reserved_command: [u8; 128],
}

const _: () = {
    assert!(size_of::<GenericHeader>() == HEADER_SIZE);
    assert!(offset_of!(GenericHeader, reserved_command) == 128);
};

impl GenericHeader {
    /// Decodes any header; fails only on an unknown command byte.
    pub fn decode(buf: &HeaderBytes) -> Result<Self, WireError> {
        Ok(Self {
            frame: FrameFields::decode(buf)?,
            reserved_command: get(buf, offset_of!(Self, reserved_command)),
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> HeaderBytes {
        let mut buf = [0u8; HEADER_SIZE];
        self.frame.encode_into(&mut buf);
        put(
            &mut buf,
            offset_of!(Self, reserved_command),
            &self.reserved_command,
        );
        buf
    }
}

/// Client -> server request header (spec §2.3).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Bytes 0..128; `command` is always [`Command::Request`].
    pub frame: FrameFields,
    /// Client id (random, non-zero).
    pub client: u128,
    /// XXH3-64 of the body zero-extended, for Register, Logout and metadata-plane requests; else 0.
    pub request_checksum: u128,
    /// Always 0 from the SDK.
    pub timestamp: u64,
    /// Request number (spec §1.5).
    pub request: u64,
    /// Raw operation byte; see [`RequestHeader::operation`]. Kept raw so a server can still
    /// answer a request whose operation is invalid.
    pub operation: u8,
    /// Zero.
    pub operation_padding: [u8; 7],
    /// Session from the login reply; 0 before login.
    pub session: u64,
    /// Always 0 from clients; never trusted.
    pub user_id: u32,
    /// Non-replicated command code when `operation == 2`, else 0 (bytes 196..200).
    pub command_code: u32,
    /// Bytes 200..256, zero.
    pub reserved: [u8; 56],
}

const _: () = {
    assert!(size_of::<RequestHeader>() == HEADER_SIZE);
    assert!(offset_of!(RequestHeader, client) == 128);
    assert!(offset_of!(RequestHeader, request_checksum) == 144);
    assert!(offset_of!(RequestHeader, timestamp) == 160);
    assert!(offset_of!(RequestHeader, request) == 168);
    assert!(offset_of!(RequestHeader, operation) == REQUEST_OPERATION_OFFSET);
    assert!(offset_of!(RequestHeader, operation_padding) == 177);
    assert!(offset_of!(RequestHeader, session) == 184);
    assert!(offset_of!(RequestHeader, user_id) == 192);
    assert!(offset_of!(RequestHeader, command_code) == REQUEST_CODE_OFFSET);
    assert!(offset_of!(RequestHeader, reserved) == 200);
    assert!(offset_of!(RequestHeader, reserved) + 56 == HEADER_SIZE);
};

impl RequestHeader {
    /// A request header for `operation` with a body of `body_len` bytes, everything else zero.
    pub fn new(operation: Operation, body_len: usize) -> Result<Self, WireError> {
        Ok(Self {
            frame: FrameFields::new(Command::Request, frame_size_for_body(body_len)?),
            client: 0,
            request_checksum: 0,
            timestamp: 0,
            request: 0,
            operation: operation.as_u8(),
            operation_padding: [0; 7],
            session: 0,
            user_id: 0,
            command_code: 0,
            reserved: [0; 56],
        })
    }

    /// Decodes a request header; fails if byte 60 is not 5.
    pub fn decode(buf: &HeaderBytes) -> Result<Self, WireError> {
        let frame = FrameFields::decode(buf)?;
        if frame.command != Command::Request {
            return Err(WireError::UnexpectedCommand {
                expected: Command::Request,
                found: frame.command,
            });
        }
        Ok(Self {
            frame,
            client: get_u128(buf, offset_of!(Self, client)),
            request_checksum: get_u128(buf, offset_of!(Self, request_checksum)),
            timestamp: get_u64(buf, offset_of!(Self, timestamp)),
            request: get_u64(buf, offset_of!(Self, request)),
            operation: buf[offset_of!(Self, operation)],
            operation_padding: get(buf, offset_of!(Self, operation_padding)),
            session: get_u64(buf, offset_of!(Self, session)),
            user_id: get_u32(buf, offset_of!(Self, user_id)),
            command_code: get_u32(buf, offset_of!(Self, command_code)),
            reserved: get(buf, offset_of!(Self, reserved)),
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> HeaderBytes {
        let mut buf = [0u8; HEADER_SIZE];
        self.encode_into(&mut buf);
        buf
    }

    /// Encodes the header into `buf`, overwriting all 256 bytes.
    pub fn encode_into(&self, buf: &mut HeaderBytes) {
        self.frame.encode_into(buf);
        put(buf, offset_of!(Self, client), &self.client.to_le_bytes());
        put(
            buf,
            offset_of!(Self, request_checksum),
            &self.request_checksum.to_le_bytes(),
        );
        put(
            buf,
            offset_of!(Self, timestamp),
            &self.timestamp.to_le_bytes(),
        );
        put(buf, offset_of!(Self, request), &self.request.to_le_bytes());
        buf[offset_of!(Self, operation)] = self.operation;
        put(
            buf,
            offset_of!(Self, operation_padding),
            &self.operation_padding,
        );
        put(buf, offset_of!(Self, session), &self.session.to_le_bytes());
        put(buf, offset_of!(Self, user_id), &self.user_id.to_le_bytes());
        put(
            buf,
            offset_of!(Self, command_code),
            &self.command_code.to_le_bytes(),
        );
        put(buf, offset_of!(Self, reserved), &self.reserved);
    }

    /// The typed operation.
    pub fn operation(&self) -> Result<Operation, WireError> {
        Operation::from_u8(self.operation)
    }

    /// Body length announced by the header.
    pub fn body_len(&self) -> Option<usize> {
        self.frame.body_len()
    }

    /// The checks the reference server applies before anything else (spec §2.3):
    /// `client != 0`; `operation` valid and not `Reserved`; Register has session 0 and request 0;
    /// operations other than Register/NonReplicated have session > 0 and request > 0.
    pub fn validate(&self) -> Result<Operation, WireError> {
        const fn bad(field: &'static str, rule: &'static str) -> WireError {
            WireError::InvalidField {
                header: "request",
                field,
                rule,
            }
        }
        if self.client == 0 {
            return Err(bad("client", "must be non-zero"));
        }
        let operation = self.operation()?;
        match operation {
            Operation::Reserved => return Err(bad("operation", "must not be reserved (0)")),
            Operation::Register => {
                if self.session != 0 {
                    return Err(bad("session", "must be 0 on register"));
                }
                if self.request != 0 {
                    return Err(bad("request", "must be 0 on register"));
                }
            }
            Operation::NonReplicated => {}
            _ => {
                if self.session == 0 {
                    return Err(bad("session", "must be non-zero after login"));
                }
                if self.request == 0 {
                    return Err(bad("request", "must be non-zero after login"));
                }
            }
        }
        Ok(operation)
    }
}

/// Server -> client reply header (spec §2.4).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    /// Bytes 0..128; `command` is always [`Command::Reply`].
    pub frame: FrameFields,
    /// Echo of the request's `request_checksum`.
    pub request_checksum: u128,
    /// 0.
    pub context: u128,
    /// Echo of the request's `client`.
    pub client: u128,
    /// Informational (commit number, or session for non-replicated replies).
    pub op: u64,
    /// Informational (current commit number).
    pub commit: u64,
    /// Echo of the request's `timestamp`.
    pub timestamp: u64,
    /// Echo of the request's `request`.
    pub request: u64,
    /// The request's operation (decides result framing on the client).
    pub operation: Operation,
    /// Zero.
    pub operation_padding: [u8; 7],
    /// 0 = success; otherwise an error code and the body must be empty.
    pub status: u32,
    /// Zero.
    pub reserved: [u8; 36],
}

const _: () = {
    assert!(size_of::<ReplyHeader>() == HEADER_SIZE);
    assert!(offset_of!(ReplyHeader, request_checksum) == 128);
    assert!(offset_of!(ReplyHeader, context) == 144);
    assert!(offset_of!(ReplyHeader, client) == 160);
    assert!(offset_of!(ReplyHeader, op) == 176);
    assert!(offset_of!(ReplyHeader, commit) == 184);
    assert!(offset_of!(ReplyHeader, timestamp) == 192);
    assert!(offset_of!(ReplyHeader, request) == 200);
    assert!(offset_of!(ReplyHeader, operation) == REPLY_OPERATION_OFFSET);
    assert!(offset_of!(ReplyHeader, operation_padding) == 209);
    assert!(offset_of!(ReplyHeader, status) == REPLY_STATUS_OFFSET);
    assert!(offset_of!(ReplyHeader, reserved) == 220);
    assert!(offset_of!(ReplyHeader, reserved) + 36 == HEADER_SIZE);
};

impl ReplyHeader {
    /// A zeroed reply with the given operation, status and body length.
    pub fn new(operation: Operation, status: u32, body_len: usize) -> Result<Self, WireError> {
        Ok(Self {
            frame: FrameFields::new(Command::Reply, frame_size_for_body(body_len)?),
            request_checksum: 0,
            context: 0,
            client: 0,
            op: 0,
            commit: 0,
            timestamp: 0,
            request: 0,
            operation,
            operation_padding: [0; 7],
            status,
            reserved: [0; 36],
        })
    }

    /// The reply to `request`: echoes `cluster`, `request_checksum`, `client`, `timestamp`,
    /// `request` and the operation (an invalid operation byte is answered as `NonReplicated`,
    /// which is not result-framed, so only a status can travel).
    pub fn for_request(
        request: &RequestHeader,
        status: u32,
        body_len: usize,
    ) -> Result<Self, WireError> {
        let operation = match request.operation() {
            Ok(Operation::Reserved) | Err(_) => Operation::NonReplicated,
            Ok(op) => op,
        };
        let mut reply = Self::new(operation, status, body_len)?;
        reply.frame.cluster = request.frame.cluster;
        reply.request_checksum = request.request_checksum;
        reply.client = request.client;
        reply.timestamp = request.timestamp;
        reply.request = request.request;
        Ok(reply)
    }

    /// Decodes a reply header; fails if byte 60 is not 8 or the operation byte is invalid
    /// (the SDK's rule, spec §1.15).
    pub fn decode(buf: &HeaderBytes) -> Result<Self, WireError> {
        let frame = FrameFields::decode(buf)?;
        if frame.command != Command::Reply {
            return Err(WireError::UnexpectedCommand {
                expected: Command::Reply,
                found: frame.command,
            });
        }
        Ok(Self {
            frame,
            request_checksum: get_u128(buf, offset_of!(Self, request_checksum)),
            context: get_u128(buf, offset_of!(Self, context)),
            client: get_u128(buf, offset_of!(Self, client)),
            op: get_u64(buf, offset_of!(Self, op)),
            commit: get_u64(buf, offset_of!(Self, commit)),
            timestamp: get_u64(buf, offset_of!(Self, timestamp)),
            request: get_u64(buf, offset_of!(Self, request)),
            operation: Operation::from_u8(buf[offset_of!(Self, operation)])?,
            operation_padding: get(buf, offset_of!(Self, operation_padding)),
            status: get_u32(buf, offset_of!(Self, status)),
            reserved: get(buf, offset_of!(Self, reserved)),
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> HeaderBytes {
        let mut buf = [0u8; HEADER_SIZE];
        self.encode_into(&mut buf);
        buf
    }

    /// Encodes the header into `buf`, overwriting all 256 bytes.
    pub fn encode_into(&self, buf: &mut HeaderBytes) {
        self.frame.encode_into(buf);
        put(
            buf,
            offset_of!(Self, request_checksum),
            &self.request_checksum.to_le_bytes(),
        );
        put(buf, offset_of!(Self, context), &self.context.to_le_bytes());
        put(buf, offset_of!(Self, client), &self.client.to_le_bytes());
        put(buf, offset_of!(Self, op), &self.op.to_le_bytes());
        put(buf, offset_of!(Self, commit), &self.commit.to_le_bytes());
        put(
            buf,
            offset_of!(Self, timestamp),
            &self.timestamp.to_le_bytes(),
        );
        put(buf, offset_of!(Self, request), &self.request.to_le_bytes());
        buf[offset_of!(Self, operation)] = self.operation.as_u8();
        put(
            buf,
            offset_of!(Self, operation_padding),
            &self.operation_padding,
        );
        put(buf, offset_of!(Self, status), &self.status.to_le_bytes());
        put(buf, offset_of!(Self, reserved), &self.reserved);
    }

    /// Body length announced by the header.
    pub fn body_len(&self) -> Option<usize> {
        self.frame.body_len()
    }
}

/// Why the server ends a session (eviction byte 255, spec §1.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EvictionReason {
    /// 0: never valid on the wire.
    Reserved = 0,
    /// 1: replicated request on an unbound connection.
    NoSession = 1,
    /// 2: unused.
    ClientReleaseTooLow = 2,
    /// 3: unused.
    ClientReleaseTooHigh = 3,
    /// 4: internal operation sent by a client.
    InvalidRequestOperation = 4,
    /// 5: body rejected deep in admission.
    InvalidRequestBody = 5,
    /// 6: unused.
    InvalidRequestBodySize = 6,
    /// 7: older session epoch than the registered one.
    SessionTooLow = 7,
    /// 8: unused.
    SessionReleaseMismatch = 8,
    /// 9: login with bad username/password.
    InvalidCredentials = 9,
    /// 10: login with unknown/expired token.
    InvalidToken = 10,
    /// 11: login of an inactive user.
    UserInactive = 11,
    /// 12: login bookkeeping failed.
    SessionError = 12,
    /// 13: heartbeat verifier evicted an idle group member.
    StaleClient = 13,
    /// 14: protocol version outside the accepted window (carried in the header).
    IncompatibleProtocol = 14,
    /// 15: undecodable login body or a legacy login code.
    MalformedLogin = 15,
}

impl EvictionReason {
    /// The wire byte.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// Decodes a reason byte (0..=15).
    pub const fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            0 => Self::Reserved,
            1 => Self::NoSession,
            2 => Self::ClientReleaseTooLow,
            3 => Self::ClientReleaseTooHigh,
            4 => Self::InvalidRequestOperation,
            5 => Self::InvalidRequestBody,
            6 => Self::InvalidRequestBodySize,
            7 => Self::SessionTooLow,
            8 => Self::SessionReleaseMismatch,
            9 => Self::InvalidCredentials,
            10 => Self::InvalidToken,
            11 => Self::UserInactive,
            12 => Self::SessionError,
            13 => Self::StaleClient,
            14 => Self::IncompatibleProtocol,
            15 => Self::MalformedLogin,
            _ => return Err(WireError::InvalidEvictionReason { value }),
        })
    }

    /// The error code the SDK reports for this reason (spec §1.9 table).
    pub const fn sdk_error_code(self) -> u32 {
        match self {
            Self::Reserved
            | Self::ClientReleaseTooLow
            | Self::ClientReleaseTooHigh
            | Self::InvalidRequestOperation
            | Self::InvalidRequestBody
            | Self::InvalidRequestBodySize => 3,
            Self::NoSession
            | Self::SessionTooLow
            | Self::SessionReleaseMismatch
            | Self::UserInactive
            | Self::SessionError => 40,
            Self::InvalidCredentials => 42,
            Self::InvalidToken => 53,
            Self::StaleClient => 30,
            Self::IncompatibleProtocol => 14003,
            Self::MalformedLogin => 4,
        }
    }
}

/// Server -> client eviction header; the frame never has a body (spec §2.5).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvictionHeader {
    /// Bytes 0..128; `command` is always [`Command::Eviction`], `size` 256.
    pub frame: FrameFields,
    /// The request's client (non-zero).
    pub client: u128,
    /// Packed max accepted version, only for `IncompatibleProtocol`.
    pub server_protocol_version: u32,
    /// Packed min accepted version, only for `IncompatibleProtocol`.
    pub server_protocol_version_min: u32,
    /// Zero.
    pub reserved: [u8; 103],
    /// Raw reason byte; see [`EvictionHeader::reason`].
    pub reason: u8,
}

const _: () = {
    assert!(size_of::<EvictionHeader>() == HEADER_SIZE);
    assert!(offset_of!(EvictionHeader, client) == 128);
    assert!(offset_of!(EvictionHeader, server_protocol_version) == 144);
    assert!(offset_of!(EvictionHeader, server_protocol_version_min) == 148);
    assert!(offset_of!(EvictionHeader, reserved) == 152);
    assert!(offset_of!(EvictionHeader, reason) == EVICTION_REASON_OFFSET);
};

impl EvictionHeader {
    /// An eviction for `client` with `reason` and an empty version window.
    pub const fn new(client: u128, reason: EvictionReason) -> Self {
        Self {
            frame: FrameFields::new(Command::Eviction, HEADER_SIZE as u32),
            client,
            server_protocol_version: 0,
            server_protocol_version_min: 0,
            reserved: [0; 103],
            reason: reason.as_u8(),
        }
    }

    /// An `IncompatibleProtocol` eviction carrying the accepted window `[min, max]`.
    pub const fn incompatible_protocol(client: u128, max: u32, min: u32) -> Self {
        let mut header = Self::new(client, EvictionReason::IncompatibleProtocol);
        header.server_protocol_version = max;
        header.server_protocol_version_min = min;
        header
    }

    /// The typed reason.
    pub fn reason(&self) -> Result<EvictionReason, WireError> {
        EvictionReason::from_u8(self.reason)
    }

    /// Decodes an eviction header; fails only if byte 60 is not 13 (the SDK reads any reason).
    pub fn decode(buf: &HeaderBytes) -> Result<Self, WireError> {
        let frame = FrameFields::decode(buf)?;
        if frame.command != Command::Eviction {
            return Err(WireError::UnexpectedCommand {
                expected: Command::Eviction,
                found: frame.command,
            });
        }
        Ok(Self {
            frame,
            client: get_u128(buf, offset_of!(Self, client)),
            server_protocol_version: get_u32(buf, offset_of!(Self, server_protocol_version)),
            server_protocol_version_min: get_u32(
                buf,
                offset_of!(Self, server_protocol_version_min),
            ),
            reserved: get(buf, offset_of!(Self, reserved)),
            reason: buf[offset_of!(Self, reason)],
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> HeaderBytes {
        let mut buf = [0u8; HEADER_SIZE];
        self.frame.encode_into(&mut buf);
        put(
            &mut buf,
            offset_of!(Self, client),
            &self.client.to_le_bytes(),
        );
        put(
            &mut buf,
            offset_of!(Self, server_protocol_version),
            &self.server_protocol_version.to_le_bytes(),
        );
        put(
            &mut buf,
            offset_of!(Self, server_protocol_version_min),
            &self.server_protocol_version_min.to_le_bytes(),
        );
        put(&mut buf, offset_of!(Self, reserved), &self.reserved);
        buf[offset_of!(Self, reason)] = self.reason;
        buf
    }

    /// The strict upstream validation (spec §2.5): size 256, release 0, client non-zero, both
    /// reserved regions zero, reason valid and not 0, window `1 <= min <= max` only for
    /// `IncompatibleProtocol` and zero otherwise.
    pub fn validate(&self) -> Result<EvictionReason, WireError> {
        const fn bad(field: &'static str, rule: &'static str) -> WireError {
            WireError::InvalidField {
                header: "eviction",
                field,
                rule,
            }
        }
        if self.frame.size as usize != HEADER_SIZE {
            return Err(bad("size", "must be 256"));
        }
        if self.frame.release != 0 {
            return Err(bad("release", "must be 0"));
        }
        if self.client == 0 {
            return Err(bad("client", "must be non-zero"));
        }
        if self.frame.reserved_frame.iter().any(|&b| b != 0) {
            return Err(bad("reserved_frame", "must be zero"));
        }
        if self.reserved.iter().any(|&b| b != 0) {
            return Err(bad("reserved", "must be zero"));
        }
        let reason = self.reason()?;
        match reason {
            EvictionReason::Reserved => return Err(bad("reason", "must not be 0")),
            EvictionReason::IncompatibleProtocol => {
                if self.server_protocol_version_min == 0
                    || self.server_protocol_version < self.server_protocol_version_min
                {
                    return Err(bad(
                        "server_protocol_version",
                        "window must be 1 <= min <= max",
                    ));
                }
            }
            _ => {
                if self.server_protocol_version != 0 || self.server_protocol_version_min != 0 {
                    return Err(bad(
                        "server_protocol_version",
                        "must be zero for this reason",
                    ));
                }
            }
        }
        Ok(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

    fn hex(text: &str) -> Vec<u8> {
        text.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    fn place(buf: &mut HeaderBytes, at: usize, text: &str) {
        let bytes = hex(text);
        buf[at..at + bytes.len()].copy_from_slice(&bytes);
    }

    /// Spec §1.13.1: the `LOGIN_REGISTER` request header.
    #[test]
    fn golden_login_register_request_header() {
        let mut expected = [0u8; HEADER_SIZE];
        place(
            &mut expected,
            0x30,
            "29 01 00 00 00 00 00 00 00 00 00 00 05 00 00 00",
        );
        place(
            &mut expected,
            0x80,
            "10 32 54 76 98 ba dc fe ef cd ab 89 67 45 23 01",
        );
        place(
            &mut expected,
            0x90,
            "1d 7e 58 c1 b2 d6 a9 87 00 00 00 00 00 00 00 00",
        );
        place(
            &mut expected,
            0xb0,
            "01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
        );
        let decoded = RequestHeader::decode(&expected).unwrap();
        assert_eq!(decoded.frame.size, 297);
        assert_eq!(decoded.client, CLIENT);
        assert_eq!(decoded.request_checksum, 0x87a9_d6b2_c158_7e1d);
        assert_eq!(decoded.operation().unwrap(), Operation::Register);
        assert_eq!(decoded.validate().unwrap(), Operation::Register);

        let mut built = RequestHeader::new(Operation::Register, 41).unwrap();
        built.client = CLIENT;
        built.request_checksum = 0x87a9_d6b2_c158_7e1d;
        assert_eq!(built.encode(), expected);
    }

    /// Spec §1.13.2: PING request.
    #[test]
    fn golden_ping_request_header() {
        let mut expected = [0u8; HEADER_SIZE];
        place(
            &mut expected,
            0x30,
            "00 01 00 00 00 00 00 00 00 00 00 00 05 00 00 00",
        );
        place(
            &mut expected,
            0x80,
            "10 32 54 76 98 ba dc fe ef cd ab 89 67 45 23 01",
        );
        place(
            &mut expected,
            0xa0,
            "00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00",
        );
        place(
            &mut expected,
            0xb0,
            "02 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00",
        );
        place(
            &mut expected,
            0xc0,
            "00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00",
        );
        let mut built = RequestHeader::new(Operation::NonReplicated, 0).unwrap();
        built.client = CLIENT;
        built.request = 1;
        built.session = 7;
        built.command_code = 1;
        assert_eq!(built.encode(), expected);
        assert_eq!(RequestHeader::decode(&expected).unwrap(), built);
    }

    /// Spec §1.13.7: logout carries XXH3 of the empty body.
    #[test]
    fn golden_logout_request_checksum_bytes() {
        let mut built = RequestHeader::new(Operation::Logout, 0).unwrap();
        built.client = CLIENT;
        built.request = 3;
        built.session = 7;
        built.request_checksum = super::super::checksum::request_checksum(b"");
        let bytes = built.encode();
        assert_eq!(&bytes[144..152], &hex("c2 94 d3 38 05 80 06 2d")[..]);
        assert_eq!(bytes[176], 3);
    }

    /// Spec §1.13.1: the login reply header.
    #[test]
    fn golden_login_reply_header() {
        let mut expected = [0u8; HEADER_SIZE];
        place(
            &mut expected,
            0x30,
            "21 01 00 00 00 00 00 00 00 00 00 00 08 00 00 00",
        );
        place(
            &mut expected,
            0x80,
            "1d 7e 58 c1 b2 d6 a9 87 00 00 00 00 00 00 00 00",
        );
        place(
            &mut expected,
            0xa0,
            "10 32 54 76 98 ba dc fe ef cd ab 89 67 45 23 01",
        );
        place(
            &mut expected,
            0xb0,
            "07 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00",
        );
        place(
            &mut expected,
            0xd0,
            "01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
        );
        let decoded = ReplyHeader::decode(&expected).unwrap();
        assert_eq!(decoded.frame.size, 289);
        assert_eq!(decoded.operation, Operation::Register);
        assert_eq!(decoded.status, 0);
        assert_eq!(decoded.op, 7);
        assert_eq!(decoded.commit, 7);
        assert_eq!(decoded.encode(), expected);

        let mut request = RequestHeader::new(Operation::Register, 41).unwrap();
        request.client = CLIENT;
        request.request_checksum = 0x87a9_d6b2_c158_7e1d;
        let mut reply = ReplyHeader::for_request(&request, 0, 33).unwrap();
        reply.op = 7;
        reply.commit = 7;
        assert_eq!(reply.encode(), expected);
    }

    /// Spec §2.5: an `IncompatibleProtocol` eviction and the `InvalidCredentials` variant.
    #[test]
    fn golden_eviction_headers() {
        let mut expected = [0u8; HEADER_SIZE];
        place(
            &mut expected,
            0x30,
            "00 01 00 00 00 00 00 00 00 00 00 00 0d 00 00 00",
        );
        place(
            &mut expected,
            0x80,
            "10 32 54 76 98 ba dc fe ef cd ab 89 67 45 23 01",
        );
        place(
            &mut expected,
            0x90,
            "00 2c 00 00 00 2c 00 00 00 00 00 00 00 00 00 00",
        );
        expected[0xff] = 0x0e;
        let built = EvictionHeader::incompatible_protocol(CLIENT, 0x2C00, 0x2C00);
        assert_eq!(built.encode(), expected);
        let decoded = EvictionHeader::decode(&expected).unwrap();
        assert_eq!(decoded, built);
        assert_eq!(
            decoded.validate().unwrap(),
            EvictionReason::IncompatibleProtocol
        );

        place(&mut expected, 0x90, "00 00 00 00 00 00 00 00");
        expected[0xff] = 0x09;
        let built = EvictionHeader::new(CLIENT, EvictionReason::InvalidCredentials);
        assert_eq!(built.encode(), expected);
        assert_eq!(
            built.validate().unwrap().sdk_error_code(),
            42,
            "invalid credentials surfaces as error 42"
        );
    }

    #[test]
    fn eviction_validation_rejects_each_broken_rule() {
        let good = EvictionHeader::new(CLIENT, EvictionReason::NoSession);
        assert!(good.validate().is_ok());
        let mut bad = good;
        bad.client = 0;
        assert!(bad.validate().is_err());
        let mut bad = good;
        bad.reason = 0;
        assert!(bad.validate().is_err());
        let mut bad = good;
        bad.reason = 16;
        assert!(bad.validate().is_err());
        let mut bad = good;
        bad.reserved[5] = 1;
        assert!(bad.validate().is_err());
        let mut bad = good;
        bad.frame.reserved_frame[0] = 1;
        assert!(bad.validate().is_err());
        let mut bad = good;
        bad.server_protocol_version = 1;
        assert!(bad.validate().is_err());
        let bad = EvictionHeader::incompatible_protocol(CLIENT, 1, 2);
        assert!(bad.validate().is_err());
        let mut bad = good;
        bad.frame.size = 257;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn request_validation_rules() {
        let mut header = RequestHeader::new(Operation::CreateStream, 12).unwrap();
        assert!(header.validate().is_err(), "client 0");
        header.client = 1;
        assert!(header.validate().is_err(), "session 0 after login");
        header.session = 1;
        assert!(header.validate().is_err(), "request 0 after login");
        header.request = 1;
        assert_eq!(header.validate().unwrap(), Operation::CreateStream);
        header.operation = 0;
        assert!(header.validate().is_err());
        header.operation = 70;
        assert_eq!(
            header.validate(),
            Err(WireError::InvalidOperation { value: 70 })
        );
        let mut register = RequestHeader::new(Operation::Register, 0).unwrap();
        register.client = 1;
        register.session = 1;
        assert!(register.validate().is_err());
        let mut ping = RequestHeader::new(Operation::NonReplicated, 0).unwrap();
        ping.client = 1;
        assert!(ping.validate().is_ok(), "ping works before login");
    }

    #[test]
    fn typed_decoders_reject_other_commands() {
        let reply = ReplyHeader::new(Operation::NonReplicated, 0, 0)
            .unwrap()
            .encode();
        assert!(matches!(
            RequestHeader::decode(&reply),
            Err(WireError::UnexpectedCommand { .. })
        ));
        assert!(EvictionHeader::decode(&reply).is_err());
        let mut bad_op = reply;
        bad_op[REPLY_OPERATION_OFFSET] = 99;
        assert_eq!(
            ReplyHeader::decode(&bad_op),
            Err(WireError::InvalidOperation { value: 99 })
        );
        let mut bad_cmd = reply;
        bad_cmd[COMMAND_OFFSET] = 30;
        assert!(GenericHeader::decode(&bad_cmd).is_err());
    }

    #[test]
    fn reply_for_invalid_operation_is_not_result_framed() {
        let mut request = RequestHeader::new(Operation::NonReplicated, 0).unwrap();
        request.operation = 200;
        let reply = ReplyHeader::for_request(&request, 3, 0).unwrap();
        assert_eq!(reply.operation, Operation::NonReplicated);
        assert_eq!(reply.status, 3);
    }

    #[test]
    fn generic_header_round_trips_every_byte() {
        let mut buf = [0u8; HEADER_SIZE];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31);
        }
        buf[COMMAND_OFFSET] = 9;
        let generic = GenericHeader::decode(&buf).unwrap();
        assert_eq!(generic.encode(), buf);
        buf[COMMAND_OFFSET] = 5;
        assert_eq!(RequestHeader::decode(&buf).unwrap().encode(), buf);
        buf[COMMAND_OFFSET] = 13;
        assert_eq!(EvictionHeader::decode(&buf).unwrap().encode(), buf);
        buf[COMMAND_OFFSET] = 8;
        buf[REPLY_OPERATION_OFFSET] = 161;
        assert_eq!(ReplyHeader::decode(&buf).unwrap().encode(), buf);
    }

    #[test]
    fn frame_size_limits() {
        assert_eq!(frame_size_for_body(0).unwrap(), 256);
        assert!(frame_size_for_body(u32::MAX as usize).is_err());
        assert_eq!(read_size(&[0u8; 51]), None);
    }
}
