//! Reply conventions (spec §5.0).
//!
//! Three ways to answer a request:
//!
//! 1. success: `status = 0`; for result-framed operations the body starts with `00 00 00 00`
//!    (result count 0) and the command's payload follows;
//! 2. error via status (works for every command): `status = code`, **empty body**;
//! 3. error via result section (result-framed operations only): `status = 0`, body
//!    `[count = 1][index = 0][code]`.
//!
//! ```text
//! result section   [count: u32] count x [index: u32][result: u32]
//! ```
//!
//! Invariants kept here: a non-zero status never travels with a body; a result section is
//! never sent on an operation that is not result-framed.

use bytes::Bytes;
use eddy_wire::stream::{HeaderBytes, Operation, ReplyHeader, RequestHeader, HEADER_SIZE};

use super::codec::WireEncode;
use super::error::CodecError;
use super::error_code::ErrorCode;

/// The result section of a successful result-framed reply.
pub const RESULT_OK: [u8; 4] = [0; 4];

/// A rejection result section: `[1][0][code]`.
pub fn rejection_section(code: u32) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..4].copy_from_slice(&1u32.to_le_bytes());
    out[8..].copy_from_slice(&code.to_le_bytes());
    out
}

/// A reply ready to be written: header plus body chunks (written in order, e.g. with vectored
/// writes, so stored message batches are never copied into a reply buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyFrame {
    /// The header; `size` always equals `256 + body_len()`.
    pub header: ReplyHeader,
    body: Vec<Bytes>,
}

impl ReplyFrame {
    fn build(
        request: &RequestHeader,
        status: u32,
        operation: Option<Operation>,
        body: Vec<Bytes>,
    ) -> Result<Self, CodecError> {
        let len = body.iter().map(Bytes::len).sum();
        let mut header = ReplyHeader::for_request(request, status, len)?;
        if let Some(operation) = operation {
            header.operation = operation;
        }
        Ok(Self { header, body })
    }

    /// A successful reply carrying `payload`, with a result section if the request's operation
    /// is result-framed.
    pub fn success<T: WireEncode + ?Sized>(
        request: &RequestHeader,
        payload: &T,
    ) -> Result<Self, CodecError> {
        let framed = is_result_framed(request);
        let mut body = Vec::with_capacity(payload.encoded_len() + if framed { 4 } else { 0 });
        if framed {
            body.extend_from_slice(&RESULT_OK);
        }
        payload.encode(&mut body);
        Self::build(request, 0, None, vec![Bytes::from(body)])
    }

    /// A successful reply whose payload is already split into chunks (for example a poll reply:
    /// prefix plus stored batch records).
    pub fn success_chunks(
        request: &RequestHeader,
        mut chunks: Vec<Bytes>,
    ) -> Result<Self, CodecError> {
        if is_result_framed(request) {
            chunks.insert(0, Bytes::from_static(&RESULT_OK));
        }
        Self::build(request, 0, None, chunks)
    }

    /// An error via the status channel: status = `code`, empty body. Valid for every command.
    pub fn status(request: &RequestHeader, code: ErrorCode) -> Result<Self, CodecError> {
        Self::build(request, code.code(), None, Vec::new())
    }

    /// An error via the result section when the operation is result-framed, else via status.
    pub fn rejection(request: &RequestHeader, code: ErrorCode) -> Result<Self, CodecError> {
        if is_result_framed(request) {
            let section = rejection_section(code.code());
            Self::build(request, 0, None, vec![Bytes::copy_from_slice(&section)])
        } else {
            Self::status(request, code)
        }
    }

    /// The body chunks.
    pub fn body(&self) -> &[Bytes] {
        &self.body
    }

    /// Total body length.
    pub fn body_len(&self) -> usize {
        self.body.iter().map(Bytes::len).sum()
    }

    /// The encoded header.
    pub fn header_bytes(&self) -> HeaderBytes {
        self.header.encode()
    }

    /// Header and body as chunks for a vectored write.
    pub fn into_chunks(self) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(self.body.len() + 1);
        out.push(Bytes::copy_from_slice(&self.header.encode()));
        out.extend(self.body);
        out
    }

    /// The whole frame in one buffer (copies the body; for tests and small replies).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_SIZE + self.body_len());
        out.extend_from_slice(&self.header.encode());
        for chunk in &self.body {
            out.extend_from_slice(chunk);
        }
        out
    }
}

fn is_result_framed(request: &RequestHeader) -> bool {
    request
        .operation()
        .is_ok_and(|op| op.is_result_framed(false))
}

/// Client side: interprets a reply the way the SDK does (spec §1.15) and returns the payload
/// the command decoder should see, or the error code it carries.
///
/// * non-zero status: `Err(ErrorReply { code: status })`;
/// * result-framed operation: a zero count is stripped, a non-zero count yields the first
///   entry's code, a malformed section is `InvalidValue`;
/// * otherwise the body as is.
pub fn reply_payload<'a>(header: &ReplyHeader, body: &'a [u8]) -> Result<&'a [u8], CodecError> {
    if header.status != 0 {
        return Err(CodecError::ErrorReply {
            code: header.status,
        });
    }
    if !header.operation.is_result_framed(body.is_empty()) {
        return Ok(body);
    }
    split_result_section(body)
}

/// Strips a result section: count 0 returns the rest, count > 0 the first code as an error.
pub fn split_result_section(body: &[u8]) -> Result<&[u8], CodecError> {
    let malformed = |reason| CodecError::InvalidValue {
        field: "result section",
        offset: 0,
        reason,
    };
    let count_bytes = body
        .get(..4)
        .ok_or_else(|| malformed("result-framed body shorter than 4 bytes"))?;
    let mut raw = [0u8; 4];
    raw.copy_from_slice(count_bytes);
    let count = u32::from_le_bytes(raw) as usize;
    if count == 0 {
        return Ok(&body[4..]);
    }
    let needed = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(4))
        .ok_or_else(|| malformed("result count overflows"))?;
    if body.len() < needed {
        return Err(malformed("result section shorter than its count"));
    }
    raw.copy_from_slice(&body[8..12]);
    Err(CodecError::ErrorReply {
        code: u32::from_le_bytes(raw),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(operation: Operation) -> RequestHeader {
        let mut header = RequestHeader::new(operation, 0).unwrap();
        header.client = 7;
        header.request = 3;
        header.session = 9;
        header
    }

    struct Raw(&'static [u8]);

    impl WireEncode for Raw {
        fn encoded_len(&self) -> usize {
            self.0.len()
        }
        fn encode(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(self.0);
        }
    }

    #[test]
    fn success_framing_follows_operation() {
        let framed = ReplyFrame::success(&request(Operation::CreateStream), &Raw(b"xy")).unwrap();
        assert_eq!(framed.to_vec()[HEADER_SIZE..], [0, 0, 0, 0, b'x', b'y']);
        assert_eq!(framed.header.operation, Operation::CreateStream);
        assert_eq!(framed.header.frame.size, 262);
        assert_eq!(framed.header.client, 7);
        assert_eq!(framed.header.request, 3);
        let plain = ReplyFrame::success(&request(Operation::NonReplicated), &Raw(b"xy")).unwrap();
        assert_eq!(plain.to_vec()[HEADER_SIZE..], *b"xy");
        let send = ReplyFrame::success(&request(Operation::SendMessages), &Raw(b"")).unwrap();
        assert_eq!(send.body_len(), 0);
        let segments = ReplyFrame::success(&request(Operation::DeleteSegments), &Raw(b"")).unwrap();
        assert_eq!(
            segments.body_len(),
            0,
            "delete segments is not result-framed"
        );
        let offsets =
            ReplyFrame::success(&request(Operation::StoreConsumerOffset), &Raw(b"")).unwrap();
        assert_eq!(offsets.to_vec()[HEADER_SIZE..], [0, 0, 0, 0]);
    }

    #[test]
    fn errors_never_mix_status_and_body() {
        let status =
            ReplyFrame::status(&request(Operation::CreateStream), ErrorCode::Unauthorized).unwrap();
        assert_eq!(status.header.status, 41);
        assert_eq!(status.body_len(), 0);
        let rejection = ReplyFrame::rejection(
            &request(Operation::CreateStream),
            ErrorCode::StreamNameAlreadyExists,
        )
        .unwrap();
        assert_eq!(rejection.header.status, 0);
        assert_eq!(
            rejection.to_vec()[HEADER_SIZE..],
            [1, 0, 0, 0, 0, 0, 0, 0, 0xf4, 0x03, 0, 0]
        );
        let fallback = ReplyFrame::rejection(
            &request(Operation::SendMessages),
            ErrorCode::InvalidBatchChecksum,
        )
        .unwrap();
        assert_eq!(fallback.header.status, 4039);
        assert_eq!(fallback.body_len(), 0);
    }

    #[test]
    fn client_side_interpretation() {
        let framed = ReplyFrame::success(&request(Operation::CreateStream), &Raw(b"xy")).unwrap();
        let bytes = framed.to_vec();
        assert_eq!(
            reply_payload(&framed.header, &bytes[HEADER_SIZE..]).unwrap(),
            b"xy"
        );
        let rejection =
            ReplyFrame::rejection(&request(Operation::DeleteTopic), ErrorCode::TopicIdNotFound)
                .unwrap();
        let bytes = rejection.to_vec();
        assert_eq!(
            reply_payload(&rejection.header, &bytes[HEADER_SIZE..]),
            Err(CodecError::ErrorReply { code: 2010 })
        );
        let status = ReplyFrame::status(
            &request(Operation::NonReplicated),
            ErrorCode::Unauthenticated,
        )
        .unwrap();
        assert_eq!(
            reply_payload(&status.header, &[]),
            Err(CodecError::ErrorReply { code: 40 })
        );
        assert!(split_result_section(&[]).is_err());
        assert!(split_result_section(&[2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]).is_err());
        let login = ReplyHeader::new(Operation::Register, 0, 0).unwrap();
        assert_eq!(
            reply_payload(&login, &[]).unwrap(),
            b"",
            "empty register body passes"
        );
    }
}
