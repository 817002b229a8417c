//! The replication port's frames: a greeting that says who a node is and where its clients
//! connect, then batches of engine messages tagged with their group.
//!
//! Pure bytes, no I/O: the server owns the sockets. Every length is checked against its limit
//! before anything is allocated, and a frame either decodes whole, asks for more bytes, or is
//! refused (the connection is then closed).
//!
//! ```text
//! frame  = magic "eRPL" (4) | kind u8 | reserved 3 (0) | body_len u32 | body CRC-32C u32 | body
//! hello  = version u16 (1) | node_id u64 | cluster u64 | props u16 | props × (key, value)
//!          where a string is len u16 + UTF-8 bytes
//! raft   = count u32 | count × (group u64 | len u32 | engine message, protobuf)
//! fetch  = node_id u64 | cluster u64 | request (the application's bytes)
//! answer = the application's bytes
//! ```
//! A connection opens with a hello (replication: engine messages follow, one way) or with a
//! fetch (an out-of-band request, answered on the same connection by one answer per fetch:
//! an event shard's records copied for a snapshot).
//! All integers little-endian.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::types::{GroupId, NodeId};

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"eRPL";
/// Frame header length.
pub const HEADER_LEN: usize = 16;
/// Largest frame body accepted (a batch can carry one whole 64 MiB entry plus headers).
pub const MAX_BODY: usize = 80 * 1024 * 1024;
/// Largest greeting body.
pub const MAX_HELLO: usize = 64 * 1024;
/// Greeting version.
pub const HELLO_VERSION: u16 = 1;
const KIND_HELLO: u8 = 1;
const KIND_RAFT: u8 = 2;
const KIND_FETCH: u8 = 3;
const KIND_ANSWER: u8 = 4;

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The first frame on every connection, both ways.
    Hello(Hello),
    /// Engine messages, each for one group (still encoded: [`crate::Node::receive`] decodes).
    Raft(Vec<(GroupId, Bytes)>),
    /// An out-of-band request of a peer (it says who it is: no hello precedes it).
    Fetch {
        /// The sender's `--node-id`.
        node_id: NodeId,
        /// The sender's cluster fingerprint (see [`Hello::cluster`]).
        cluster: u64,
        /// The request, in the application's encoding.
        request: Bytes,
    },
    /// The answer to a fetch, in the application's encoding.
    Answer(Bytes),
}

/// Who a node is and where its clients connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's `--node-id`.
    pub node_id: NodeId,
    /// Fingerprint of the cluster the sender was configured for (members and their ids); a
    /// node refuses peers whose fingerprint differs from its own.
    pub cluster: u64,
    /// Named properties (advertised addresses, shard layout...), in the sender's order.
    pub props: Vec<(String, String)>,
}

impl Hello {
    /// A property's value.
    pub fn prop(&self, key: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The first four bytes are not the magic.
    #[error("not a replication frame (bad magic)")]
    BadMagic,
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Reserved header bytes are not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// The declared body is over its limit.
    #[error("frame body of {len} bytes is over the limit of {max}")]
    TooLarge {
        /// Declared length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The body does not match its checksum.
    #[error("frame body checksum mismatch")]
    Checksum,
    /// The body is malformed.
    #[error("malformed {what}")]
    Malformed {
        /// The part that is malformed.
        what: &'static str,
    },
    /// An unsupported greeting version.
    #[error("unsupported hello version {0}")]
    Version(u16),
}

/// The snapshot an encoded engine message carries (its index, term and bytes), if it is one:
/// what a member must prepare for before its node sees the message (an event shard's records
/// are copied out of band first). Cheap for every other message: the type is the first field
/// of the encoding, and only a snapshot is decoded whole.
pub fn snapshot_in(message: &Bytes) -> Option<crate::types::Snapshot> {
    // Field 1 (msg_type, varint) comes first whenever it is not 0; MsgSnapshot is 7.
    let snapshot_type = raft::eraftpb::MessageType::MsgSnapshot as u8;
    if message.len() < 2 || message[0] != 0x08 || message[1] != snapshot_type {
        return None;
    }
    let decoded = crate::node::decode_message(message).ok()?;
    if decoded.get_msg_type() != raft::eraftpb::MessageType::MsgSnapshot {
        return None;
    }
    let snap = decoded.get_snapshot();
    Some(crate::types::Snapshot {
        meta: crate::types::SnapshotMeta {
            index: snap.get_metadata().index,
            term: snap.get_metadata().term,
        },
        // The store's bytes, without the members the node reads in front of them.
        data: crate::adapter::unwrap_snapshot(&snap.data).1,
    })
}

/// Encodes a greeting frame.
pub fn encode_hello(hello: &Hello) -> Bytes {
    framed(KIND_HELLO, 256, |body| {
        body.put_u16_le(HELLO_VERSION);
        body.put_u64_le(hello.node_id);
        body.put_u64_le(hello.cluster);
        let count = u16::try_from(hello.props.len()).expect("a handful of properties");
        body.put_u16_le(count);
        for (k, v) in &hello.props {
            put_str(body, k);
            put_str(body, v);
        }
    })
}

/// Encodes an out-of-band request (at most [`MAX_HELLO`] bytes of `request` as a
/// connection's first frame, [`MAX_BODY`] after it).
pub fn encode_fetch(node_id: NodeId, cluster: u64, request: &[u8]) -> Bytes {
    framed(KIND_FETCH, 16 + request.len(), |body| {
        body.put_u64_le(node_id);
        body.put_u64_le(cluster);
        body.put_slice(request);
    })
}

/// Encodes the answer to a fetch (at most [`MAX_BODY`] bytes).
pub fn encode_answer(answer: &[u8]) -> Bytes {
    framed(KIND_ANSWER, answer.len(), |body| body.put_slice(answer))
}

/// Encodes a batch of already-encoded engine messages.
pub fn encode_raft(messages: &[(GroupId, Bytes)]) -> Bytes {
    let len: usize = messages.iter().map(|(_, m)| 12 + m.len()).sum::<usize>() + 4;
    // Written straight into the frame: an append carries whole batches, and each copy of it
    // is CPU a leader spends per follower.
    framed(KIND_RAFT, len, |body| {
        body.put_u32_le(u32::try_from(messages.len()).expect("bounded batch"));
        for (group, message) in messages {
            body.put_u64_le(group.0);
            body.put_u32_le(u32::try_from(message.len()).expect("message under 4 GiB"));
            body.put_slice(message);
        }
    })
}

fn put_str(buf: &mut BytesMut, s: &str) {
    let len = u16::try_from(s.len()).expect("short property");
    buf.put_u16_le(len);
    buf.put_slice(s.as_bytes());
}

/// A frame of `kind` whose body `write` appends (about `len` bytes) behind the header; the
/// header's length and checksum are filled in afterwards.
fn framed(kind: u8, len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN + len);
    out.put_slice(&MAGIC);
    out.put_u8(kind);
    out.put_slice(&[0; 3]);
    out.put_u32_le(0);
    out.put_u32_le(0);
    debug_assert_eq!(out.len(), HEADER_LEN);
    write(&mut out);
    let body_len = u32::try_from(out.len() - HEADER_LEN).expect("bounded body");
    let crc = crc32c::crc32c(&out[HEADER_LEN..]);
    out[8..12].copy_from_slice(&body_len.to_le_bytes());
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out.freeze()
}

/// Decodes one frame from the front of `buf`: `Ok(None)` when more bytes are needed, otherwise
/// the frame and the bytes it used. Limits are checked from the header, before the body is
/// awaited or anything is allocated.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
    decode_with(buf, |kind| match kind {
        KIND_HELLO | KIND_FETCH => Ok(MAX_HELLO),
        KIND_RAFT | KIND_ANSWER => Ok(MAX_BODY),
        other => Err(WireError::UnknownKind(other)),
    })
}

/// Decodes a frame of a connection whose first frame was a fetch (its member is proved by
/// then): as [`decode`], but a fetch may be as large as any frame (a change forwarded to its
/// shard's leader carries the change).
pub fn decode_next_fetch(buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
    decode_with(buf, |kind| match kind {
        KIND_HELLO => Ok(MAX_HELLO),
        KIND_FETCH | KIND_RAFT | KIND_ANSWER => Ok(MAX_BODY),
        other => Err(WireError::UnknownKind(other)),
    })
}

/// Decodes the first frame of an accepted connection, as [`decode`] does, but only a hello
/// or a fetch is accepted, and no frame over [`MAX_HELLO`]: nothing larger is buffered for a
/// peer that has not yet said who it is.
pub fn decode_first(buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
    decode_with(buf, |kind| match kind {
        KIND_HELLO | KIND_FETCH => Ok(MAX_HELLO),
        KIND_RAFT | KIND_ANSWER => Err(WireError::Malformed {
            what: "first frame (not a hello or a fetch)",
        }),
        other => Err(WireError::UnknownKind(other)),
    })
}

fn decode_with(
    buf: &mut BytesMut,
    limit: impl FnOnce(u8) -> Result<usize, WireError>,
) -> Result<Option<Frame>, WireError> {
    if buf.len() < HEADER_LEN {
        if buf.len() >= 4 && buf[..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        return Ok(None);
    }
    if buf[..4] != MAGIC {
        return Err(WireError::BadMagic);
    }
    let kind = buf[4];
    if buf[5..8] != [0; 3] {
        return Err(WireError::Reserved);
    }
    let len = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
    let max = limit(kind)?;
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    if buf.len() < HEADER_LEN + len {
        buf.reserve(HEADER_LEN + len - buf.len());
        return Ok(None);
    }
    let crc = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes"));
    let mut whole = buf.split_to(HEADER_LEN + len);
    whole.advance(HEADER_LEN);
    let body = whole.freeze();
    if crc32c::crc32c(&body) != crc {
        return Err(WireError::Checksum);
    }
    match kind {
        KIND_HELLO => decode_hello(body).map(|h| Some(Frame::Hello(h))),
        KIND_FETCH => {
            let mut body = body;
            if body.remaining() < 16 {
                return Err(WireError::Malformed { what: "fetch" });
            }
            let node_id = body.get_u64_le();
            let cluster = body.get_u64_le();
            Ok(Some(Frame::Fetch {
                node_id,
                cluster,
                request: body,
            }))
        }
        KIND_ANSWER => Ok(Some(Frame::Answer(body))),
        _ => decode_raft(&body).map(|m| Some(Frame::Raft(m))),
    }
}

fn decode_hello(mut body: Bytes) -> Result<Hello, WireError> {
    let malformed = WireError::Malformed { what: "hello" };
    if body.remaining() < 20 {
        return Err(malformed);
    }
    let version = body.get_u16_le();
    if version != HELLO_VERSION {
        return Err(WireError::Version(version));
    }
    let node_id = body.get_u64_le();
    let cluster = body.get_u64_le();
    let count = body.get_u16_le();
    let mut props = Vec::with_capacity(usize::from(count).min(64));
    for _ in 0..count {
        let k = get_str(&mut body).ok_or(WireError::Malformed { what: "hello" })?;
        let v = get_str(&mut body).ok_or(WireError::Malformed { what: "hello" })?;
        props.push((k, v));
    }
    if body.has_remaining() {
        return Err(malformed);
    }
    Ok(Hello {
        node_id,
        cluster,
        props,
    })
}

fn get_str(body: &mut Bytes) -> Option<String> {
    if body.remaining() < 2 {
        return None;
    }
    let len = usize::from(body.get_u16_le());
    if body.remaining() < len {
        return None;
    }
    String::from_utf8(body.split_to(len).to_vec()).ok()
}

fn decode_raft(body: &Bytes) -> Result<Vec<(GroupId, Bytes)>, WireError> {
    let malformed = || WireError::Malformed { what: "raft batch" };
    let mut rest = body.clone();
    if rest.remaining() < 4 {
        return Err(malformed());
    }
    let count = rest.get_u32_le() as usize;
    // Every message takes at least 12 bytes: a count beyond that is a lie, refused before
    // anything is allocated for it.
    if count > rest.remaining() / 12 {
        return Err(malformed());
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        if rest.remaining() < 12 {
            return Err(malformed());
        }
        let group = GroupId(rest.get_u64_le());
        let len = rest.get_u32_le() as usize;
        if rest.remaining() < len {
            return Err(malformed());
        }
        out.push((group, rest.split_to(len)));
    }
    if rest.has_remaining() {
        return Err(malformed());
    }
    Ok(out)
}

/// Feeds arbitrary bytes to the decoder (fuzzing and corpus replay): never panics.
#[doc(hidden)]
pub fn fuzz_decode(data: &[u8]) {
    let _ = decode_first(&mut BytesMut::from(data));
    let _ = decode_next_fetch(&mut BytesMut::from(data));
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = decode(&mut buf) {
        if let Frame::Raft(messages) = frame {
            for (_, m) in messages {
                let _ = crate::node::decode_message(&m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hello_round_trips() {
        let hello = Hello {
            node_id: 3,
            cluster: 0xfeed,
            props: vec![
                ("stream".into(), "127.0.0.3:8090".into()),
                ("client".into(), "127.0.0.3:10000".into()),
            ],
        };
        let mut buf = BytesMut::from(&encode_hello(&hello)[..]);
        assert_eq!(decode(&mut buf), Ok(Some(Frame::Hello(hello))));
        assert!(buf.is_empty());
    }

    #[test]
    fn fetches_and_answers_round_trip() {
        let mut buf = BytesMut::from(&encode_fetch(2, 0xfeed, b"give me shard 3")[..]);
        buf.extend_from_slice(&encode_answer(b"records"));
        assert_eq!(
            decode(&mut buf),
            Ok(Some(Frame::Fetch {
                node_id: 2,
                cluster: 0xfeed,
                request: Bytes::from_static(b"give me shard 3"),
            }))
        );
        assert_eq!(
            decode(&mut buf),
            Ok(Some(Frame::Answer(Bytes::from_static(b"records"))))
        );
        assert!(buf.is_empty());
        // A fetch too short to say who sent it is refused.
        let mut short = BytesMut::from(&framed(KIND_FETCH, 8, |b| b.put_u64_le(2))[..]);
        assert_eq!(
            decode(&mut short),
            Err(WireError::Malformed { what: "fetch" })
        );
    }

    #[test]
    fn only_a_snapshot_message_is_seen_as_one() {
        use protobuf::Message as _;
        use raft::eraftpb::{Message, MessageType};
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.to = 2;
        m.mut_snapshot().mut_metadata().index = 40;
        m.mut_snapshot().mut_metadata().term = 3;
        m.mut_snapshot().data = Bytes::from_static(b"where the shard stood");
        let bytes = Bytes::from(m.write_to_bytes().unwrap());
        let snap = snapshot_in(&bytes).unwrap();
        assert_eq!((snap.meta.index, snap.meta.term), (40, 3));
        assert_eq!(&snap.data[..], b"where the shard stood");
        m.set_msg_type(MessageType::MsgAppend);
        let append = Bytes::from(m.write_to_bytes().unwrap());
        assert!(snapshot_in(&append).is_none());
        assert!(snapshot_in(&Bytes::from_static(&[0x08, 7, 0xff])).is_none());
    }

    #[test]
    fn raft_frame_layout_is_pinned() {
        let frame = encode_raft(&[
            (GroupId(7), Bytes::from_static(b"abc")),
            (GroupId(1 << 62), Bytes::new()),
        ]);
        let mut body = Vec::new();
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&7u64.to_le_bytes());
        body.extend_from_slice(&3u32.to_le_bytes());
        body.extend_from_slice(b"abc");
        body.extend_from_slice(&(1u64 << 62).to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        let mut expected = MAGIC.to_vec();
        expected.extend_from_slice(&[KIND_RAFT, 0, 0, 0]);
        expected.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
        expected.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        expected.extend_from_slice(&body);
        assert_eq!(&frame[..], &expected[..]);
        let mut buf = BytesMut::from(&frame[..]);
        assert_eq!(
            decode(&mut buf),
            Ok(Some(Frame::Raft(vec![
                (GroupId(7), Bytes::from_static(b"abc")),
                (GroupId(1 << 62), Bytes::new()),
            ])))
        );
    }

    #[test]
    fn partial_frames_ask_for_more_and_garbage_is_refused() {
        let whole = encode_raft(&[(GroupId(7), Bytes::from_static(b"abc"))]);
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert_eq!(decode(&mut buf), Ok(None), "cut at {cut}");
        }
        let mut bad = BytesMut::from(&whole[..]);
        bad[HEADER_LEN + 2] ^= 1;
        assert_eq!(decode(&mut bad), Err(WireError::Checksum));
        let mut magic = BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]);
        assert_eq!(decode(&mut magic), Err(WireError::BadMagic));
        let mut huge = BytesMut::from(&whole[..HEADER_LEN]);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&mut huge), Err(WireError::TooLarge { .. })));
    }

    #[test]
    fn a_first_frame_is_a_small_hello_or_fetch() {
        let hello = encode_hello(&Hello {
            node_id: 2,
            cluster: 9,
            props: vec![],
        });
        let mut buf = BytesMut::from(&hello[..]);
        assert!(matches!(decode_first(&mut buf), Ok(Some(Frame::Hello(_)))));
        let fetch = encode_fetch(2, 9, b"req");
        let mut buf = BytesMut::from(&fetch[..]);
        assert!(matches!(
            decode_first(&mut buf),
            Ok(Some(Frame::Fetch { .. }))
        ));
        // Engine messages or an answer before any greeting: refused from the header alone,
        // nothing reserved for their bodies.
        for frame in [
            encode_raft(&[(GroupId(0), Bytes::from_static(b"x"))]),
            encode_answer(b"x"),
        ] {
            let mut buf = BytesMut::from(&frame[..HEADER_LEN]);
            assert!(decode_first(&mut buf).is_err());
            assert!(buf.capacity() < 1024);
        }
        // A greeting that claims to be larger than a greeting may be.
        let mut huge = BytesMut::from(&hello[..HEADER_LEN]);
        huge[8..12].copy_from_slice(&(80u32 << 20).to_le_bytes());
        assert_eq!(
            decode_first(&mut huge),
            Err(WireError::TooLarge {
                len: 80 << 20,
                max: MAX_HELLO
            })
        );
        assert!(huge.capacity() < 1024);
    }

    proptest! {
        #[test]
        fn raft_batches_round_trip(
            messages in proptest::collection::vec((any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64)), 0..8)
        ) {
            let messages: Vec<(GroupId, Bytes)> =
                messages.into_iter().map(|(g, m)| (GroupId(g), Bytes::from(m))).collect();
            let encoded = encode_raft(&messages);
            let mut buf = BytesMut::from(&encoded[..]);
            buf.extend_from_slice(&encoded);
            prop_assert_eq!(decode(&mut buf), Ok(Some(Frame::Raft(messages.clone()))));
            prop_assert_eq!(decode(&mut buf), Ok(Some(Frame::Raft(messages))));
            prop_assert!(buf.is_empty());
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            fuzz_decode(&data);
        }
    }
}
