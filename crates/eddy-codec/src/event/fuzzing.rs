//! Fuzz entry points of the event body codecs (not part of the supported API).
//!
//! Each `fuzz_*` function is the whole body of one target under `fuzz/fuzz_targets/` and is
//! replayed over the committed corpus by `tests/codec/event_fuzz_corpus.rs`. Input layout: the
//! first byte selects the message type (below 0x80 a request, otherwise a response, taken
//! modulo the table length), the rest is the body.

use eddy_wire::event::{ProtocolVersion, RequestType, ResponseType};

use super::{EventRequest, EventResponse};

/// The selector byte for `kind` (inverse of the selection the targets do).
pub fn request_selector(kind: RequestType) -> u8 {
    RequestType::ALL
        .iter()
        .position(|&k| k == kind)
        .map_or(0, |i| i as u8)
}

/// The selector byte for `kind`.
pub fn response_selector(kind: ResponseType) -> u8 {
    0x80 | ResponseType::ALL
        .iter()
        .position(|&k| k == kind)
        .map_or(0, |i| i as u8)
}

/// Decodes, and checks that whatever decodes survives encode → decode unchanged.
fn check(version: ProtocolVersion, data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if selector < 0x80 {
        let kind = RequestType::ALL[usize::from(selector) % RequestType::ALL.len()];
        if let Ok(request) = EventRequest::decode_body(version, kind, body) {
            assert_eq!(request.request_type(), kind);
            let mut again = Vec::new();
            request.encode_body(version, &mut again);
            let back = EventRequest::decode_body(version, kind, &again)
                .expect("re-encoded request decodes");
            assert_eq!(back, request);
        }
    } else {
        let kind = ResponseType::ALL[usize::from(selector & 0x7f) % ResponseType::ALL.len()];
        if let Ok(response) = EventResponse::decode_body(version, kind, body) {
            assert_eq!(response.response_type(), kind);
            let mut again = Vec::new();
            response.encode_body(version, &mut again);
            let back = EventResponse::decode_body(version, kind, &again)
                .expect("re-encoded response decodes");
            // An over-long error message is cut when encoded; everything else is unchanged.
            if let (EventResponse::Error(orig), EventResponse::Error(cut)) = (&response, &back) {
                assert!(orig.error_message.starts_with(&cut.error_message));
                assert_eq!(orig.error_code, cut.error_code);
            } else {
                assert_eq!(back, response);
            }
        }
    }
}

/// Target `event_body_v2`: the V2 (bincode) body decoders.
pub fn fuzz_body_v2(data: &[u8]) {
    check(ProtocolVersion::V2, data);
}

/// Target `event_body_v3`: the V3 (`MessagePack`) body decoders.
pub fn fuzz_body_v3(data: &[u8]) {
    check(ProtocolVersion::V3, data);
}
