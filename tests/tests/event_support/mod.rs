//! Shared helpers of the event-protocol tests: servers with event options, the published
//! client, and a raw-frame socket speaking V2 or V3 with the reference crates' codecs.
#![allow(dead_code)] // Each test binary uses a different subset.

use std::time::Duration;

use celeriant_client_tokio::CeleriantClient;
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::request::requests::IdentifyRequest;
use celeriant_msg::response::responses::IdentifyResponse;
use celeriant_wire::network::wire_header::{deserialise_versioned, serialise_heap_versioned};
use eddy_tests::{server_bin, Eddy, Options};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long a test waits for any single answer.
pub const ANSWER: Duration = Duration::from_secs(10);

pub fn s(v: &str) -> String {
    v.to_owned()
}

/// A server with the given extra flags.
pub fn start(args: &[&str]) -> Eddy {
    Eddy::start_with(
        server_bin!(),
        Options {
            args: args.iter().map(|a| s(a)).collect(),
            ..Options::default()
        },
    )
}

/// The event port as the client wants it.
pub fn addr(eddy: &Eddy) -> String {
    eddy.addrs().client.to_string()
}

/// A connected published client.
pub async fn client(eddy: &Eddy) -> CeleriantClient {
    CeleriantClient::connect(&addr(eddy))
        .await
        .expect("connect")
        .with_timeout(ANSWER)
}

/// The code of a client error that carries a server error response.
pub fn code_of(e: &celeriant_client_tokio::ClientError) -> Option<u32> {
    use celeriant_client_tokio::{ClientError, ServerError};
    match e {
        ClientError::Server(
            ServerError::List { error_code, .. }
            | ServerError::ShardRouting { error_code, .. }
            | ServerError::Replication { error_code, .. }
            | ServerError::Unknown { error_code, .. },
        ) => Some(*error_code),
        _ => None,
    }
}

/// One frame as received.
#[derive(Debug)]
pub struct RawFrame {
    pub version: u32,
    pub message_type: u32,
    pub compressed_length: u32,
    pub uncompressed_length: u32,
    pub compression: u8,
    pub body: Vec<u8>,
}

/// A raw socket on the event port.
pub struct Raw {
    pub s: TcpStream,
}

impl Raw {
    pub async fn connect(eddy: &Eddy) -> Self {
        let s = TcpStream::connect(eddy.addrs().client)
            .await
            .expect("connect");
        s.set_nodelay(true).unwrap();
        Self { s }
    }

    /// Sends a frame with an explicit header.
    pub async fn send_frame(
        &mut self,
        version: u32,
        message_type: u32,
        compression: u8,
        uncompressed_length: u32,
        body: &[u8],
    ) {
        let mut f = Vec::with_capacity(17 + body.len());
        f.extend_from_slice(&version.to_le_bytes());
        f.extend_from_slice(&message_type.to_le_bytes());
        f.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
        f.extend_from_slice(&uncompressed_length.to_le_bytes());
        f.push(compression);
        f.extend_from_slice(body);
        self.s.write_all(&f).await.expect("send");
    }

    /// Sends an uncompressed frame.
    pub async fn send(&mut self, version: u32, message_type: u32, body: &[u8]) {
        let len = u32::try_from(body.len()).unwrap();
        self.send_frame(version, message_type, 0, len, body).await;
    }

    /// Sends a request encoded by the reference crates in `version`.
    pub async fn send_request(&mut self, request: &ClientRequest, version: u32) {
        let body = request.serialize_body(version).expect("encode");
        self.send(version, request.request_type() as u32, &body)
            .await;
    }

    /// Sends an Identify encoded by the reference crates in `version`.
    pub async fn send_identify(&mut self, request: &IdentifyRequest, version: u32) {
        let body = serialise_heap_versioned(request, version).expect("encode");
        self.send(version, 14, &body).await;
    }

    /// The next frame, or `None` when the server closed.
    pub async fn recv(&mut self) -> Option<RawFrame> {
        let mut h = [0u8; 17];
        match tokio::time::timeout(ANSWER, self.s.read_exact(&mut h)).await {
            Err(elapsed) => panic!("no answer within {ANSWER:?}: {elapsed}"),
            Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
        }
        let word = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().unwrap());
        let mut body = vec![0u8; word(8) as usize];
        tokio::time::timeout(ANSWER, self.s.read_exact(&mut body))
            .await
            .expect("body in time")
            .expect("body");
        Some(RawFrame {
            version: word(0),
            message_type: word(4),
            compressed_length: word(8),
            uncompressed_length: word(12),
            compression: h[16],
            body,
        })
    }

    /// The next response, decoded by the reference crates (decompressing with `dict`).
    pub async fn recv_response(&mut self, dict: Option<&[u8]>) -> (RawFrame, ClientResponse) {
        let f = self.recv().await.expect("a response");
        let body = if f.compression == 1 {
            let dict = dict.expect("a compressed frame needs the dictionary");
            celeriant_wire::codec::compression::decompress_with_dict(
                &f.body,
                f.uncompressed_length as usize,
                dict,
            )
            .expect("decompress")
        } else {
            f.body.clone()
        };
        let r = ClientResponse::deserialize_body(f.message_type, &body, f.version)
            .expect("decode response");
        (f, r)
    }

    /// The Identify response.
    pub async fn recv_identify(&mut self) -> (RawFrame, IdentifyResponse) {
        let f = self.recv().await.expect("identify answer");
        assert_eq!(f.message_type, 16, "identify response type: {f:?}");
        assert_eq!(f.compression, 0, "identify responses are never compressed");
        let r = deserialise_versioned(&f.body, f.version).expect("identify response");
        (f, r)
    }

    /// Asserts the server closes without sending another byte.
    pub async fn expect_closed(&mut self) {
        let mut b = [0u8; 1];
        match tokio::time::timeout(ANSWER, self.s.read(&mut b)).await {
            Err(elapsed) => panic!("connection still open after {ANSWER:?}: {elapsed}"),
            Ok(Ok(0) | Err(_)) => {}
            Ok(Ok(n)) => panic!("server sent {n} byte(s) instead of closing: {b:?}"),
        }
    }
}

/// The error code and message of an `ErrorResponse`.
pub fn error_of(r: &ClientResponse) -> (u32, String) {
    match r {
        ClientResponse::GenericError(e) => (e.error_code, e.error_message.clone()),
        other => panic!("expected an error response, got {other:?}"),
    }
}
