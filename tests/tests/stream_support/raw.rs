//! A minimal stream-protocol client over a raw socket, built on eddy's own codec: for what the
//! SDK never sends (garbage, legacy codes, every command of the table) and for byte-level checks.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use eddy_codec::stream::codec::{LongString, ShortString, WireEncode};
use eddy_codec::stream::commands::login_register::{ClientVersionInfo, LoginRegister};
use eddy_codec::stream::commands::login_register_with_pat::LoginRegisterWithPat;
use eddy_codec::stream::{reply_payload, Request, WireName};
use eddy_wire::stream::{
    EvictionHeader, Header, Operation, ReplyHeader, RequestHeader, HEADER_SIZE,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long a test waits for an answer before calling it a hang.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// What the server answered.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A reply frame.
    Reply {
        /// The header.
        header: ReplyHeader,
        /// The body.
        body: Vec<u8>,
    },
    /// An eviction frame.
    Evicted(EvictionHeader),
}

impl Answer {
    /// The error code the SDK would report: 0 for success, the status, the first result-section
    /// code, or an eviction's SDK code.
    pub fn code(&self) -> u32 {
        match self {
            Answer::Reply { header, body } => match reply_payload(header, body) {
                Ok(_) => 0,
                Err(eddy_codec::stream::CodecError::ErrorReply { code }) => code,
                Err(_) => 3,
            },
            Answer::Evicted(eviction) => eviction
                .reason()
                .map_or(40, eddy_wire::stream::EvictionReason::sdk_error_code),
        }
    }

    /// The eviction reason byte, if evicted.
    pub fn eviction(&self) -> Option<u8> {
        match self {
            Answer::Evicted(e) => Some(e.reason),
            Answer::Reply { .. } => None,
        }
    }

    /// The payload of a successful reply (result section stripped).
    pub fn payload(&self) -> Vec<u8> {
        match self {
            Answer::Reply { header, body } => reply_payload(header, body)
                .map_or_else(|e| panic!("not a success: {e}"), <[u8]>::to_vec),
            Answer::Evicted(e) => panic!("evicted with reason {}", e.reason),
        }
    }
}

/// A raw connection.
#[derive(Debug)]
pub struct Raw {
    /// The socket.
    pub socket: TcpStream,
    /// The client id stamped in headers.
    pub client: u128,
    request: u64,
    session: u64,
}

/// The version prefix the 0.11 SDK sends.
pub fn sdk_version() -> ClientVersionInfo {
    ClientVersionInfo {
        protocol_version: 0x2C00,
        sdk_name: WireName::new("rust-sdk").unwrap(),
        sdk_version: WireName::new("0.11.0-edge.4").unwrap(),
    }
}

/// A username/password Register body.
pub fn login_body(username: &str, password: &str) -> Vec<u8> {
    LoginRegister {
        client: sdk_version(),
        username: WireName::new(username).unwrap(),
        password: ShortString::new(password).unwrap(),
        context: LongString::default(),
    }
    .to_vec()
}

/// A token Register body.
pub fn token_body(token: &str) -> Vec<u8> {
    LoginRegisterWithPat {
        client: sdk_version(),
        token: ShortString::new(token).unwrap(),
        context: LongString::default(),
    }
    .to_vec()
}

impl Raw {
    /// Connects.
    pub async fn connect(addr: SocketAddr) -> Self {
        let socket = TcpStream::connect(addr).await.expect("connect");
        socket.set_nodelay(true).unwrap();
        Self {
            socket,
            client: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            request: 1,
            session: 0,
        }
    }

    /// Writes raw bytes.
    pub async fn write(&mut self, bytes: &[u8]) {
        self.socket.write_all(bytes).await.expect("write");
    }

    /// Reads one answer frame; `Err` when the server closed the connection.
    pub async fn read(&mut self) -> std::io::Result<Answer> {
        let mut header = [0u8; HEADER_SIZE];
        tokio::time::timeout(ANSWER_TIMEOUT, self.socket.read_exact(&mut header))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer"))??;
        let size = u32::from_le_bytes(header[48..52].try_into().unwrap()) as usize;
        let mut body = vec![0u8; size.saturating_sub(HEADER_SIZE)];
        self.socket.read_exact(&mut body).await?;
        match Header::decode(&header).expect("a valid answer header") {
            Header::Reply(header) => Ok(Answer::Reply { header, body }),
            Header::Eviction(e) => Ok(Answer::Evicted(e)),
            other => panic!("unexpected frame {other:?}"),
        }
    }

    /// True once the server has closed the connection (EOF or reset within the timeout).
    pub async fn closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(ANSWER_TIMEOUT, self.socket.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => true,
            Ok(Ok(_)) | Err(_) => false,
        }
    }

    /// Reads until the server closes the connection (EOF or reset) or `limit` passes: the
    /// bytes it sent before closing, or `None` if it is still open.
    pub async fn closed_within(&mut self, limit: Duration) -> Option<Vec<u8>> {
        let mut got = Vec::new();
        let read = tokio::time::timeout(limit, async {
            let mut buf = [0u8; 4096];
            loop {
                match self.socket.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        read.ok().map(|()| got)
    }

    /// A request header for `operation` (and `code` for reads) around `body`, filled the way
    /// the SDK fills it.
    pub fn header(&mut self, operation: Operation, code: u32, body: &[u8]) -> RequestHeader {
        eddy_client::stream::request_header(
            operation,
            code,
            body,
            self.client,
            self.session,
            &mut self.request,
        )
        .expect("a body below the frame limit")
    }

    /// Sends a frame and reads the answer.
    pub async fn send(&mut self, header: &RequestHeader, body: &[u8]) -> Answer {
        let mut frame = header.encode().to_vec();
        frame.extend_from_slice(body);
        self.write(&frame).await;
        self.read().await.expect("an answer")
    }

    /// Sends a request of the catalog the way the SDK would.
    pub async fn call(&mut self, request: &Request) -> Answer {
        let body = request.to_vec();
        let spec = request.code().spec();
        let operation = match request {
            Request::LoginRegister(_) | Request::LoginRegisterWithPat(_) | Request::Register(_) => {
                Operation::Register
            }
            _ => spec.operation.unwrap_or(Operation::NonReplicated),
        };
        let header = self.header(operation, request.code().code(), &body);
        let answer = self.send(&header, &body).await;
        if operation == Operation::Logout && answer.code() == 0 {
            self.session = 0;
        }
        answer
    }

    /// Logs in with a Register body; on success remembers the session.
    pub async fn register(&mut self, body: &[u8]) -> Answer {
        let header = self.header(Operation::Register, 0, body);
        let answer = self.send(&header, body).await;
        if answer.code() == 0 {
            let payload = answer.payload();
            self.session = u64::from_le_bytes(payload[4..12].try_into().unwrap());
            self.request = 1;
        }
        answer
    }

    /// Logs in with a username and password; panics on failure.
    pub async fn login(&mut self, username: &str, password: &str) {
        let answer = self.register(&login_body(username, password)).await;
        assert_eq!(answer.code(), 0, "login as {username}: {answer:?}");
    }

    /// Connects and logs in.
    pub async fn logged_in(addr: SocketAddr, username: &str, password: &str) -> Self {
        let mut raw = Self::connect(addr).await;
        raw.login(username, password).await;
        raw
    }
}

/// Bytes of a body, for requests built by hand.
pub fn bytes(v: &[u8]) -> Bytes {
    Bytes::copy_from_slice(v)
}
