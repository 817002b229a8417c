//! Shared helpers of the `stream_*` test files: a server, SDK clients, raw frames.
//!
//! Each test file includes this module with `mod stream_support;`, so not every helper is used
//! by every file.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::str::FromStr as _;

use eddy_tests::{server_bin, Eddy, Options};
use iggy::prelude::*;

/// Starts a server with extra arguments.
pub fn server_with(args: &[&str]) -> Eddy {
    Eddy::start_with(
        server_bin!(),
        Options {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..Options::default()
        },
    )
}

/// Starts a server with default settings.
pub fn server() -> Eddy {
    server_with(&[])
}

/// An SDK client connected (not logged in) to `addr`, failing fast instead of reconnecting.
pub async fn connect(addr: SocketAddr) -> IggyClient {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(addr.to_string())
        .with_reconnection_max_retries(Some(0))
        .build()
        .expect("client builds");
    client.connect().await.expect("connects");
    client
}

/// An SDK client logged in as `username`.
pub async fn login(addr: SocketAddr, username: &str, password: &str) -> IggyClient {
    let client = connect(addr).await;
    client
        .login_user(username, password)
        .await
        .unwrap_or_else(|e| panic!("login as {username}: {e}"));
    client
}

/// An SDK client logged in as root (`iggy`/`iggy`).
pub async fn root(addr: SocketAddr) -> IggyClient {
    login(addr, "iggy", "iggy").await
}

/// A numeric identifier.
pub fn id(n: u32) -> Identifier {
    Identifier::numeric(n).expect("numeric id")
}

/// A named identifier.
pub fn named(name: &str) -> Identifier {
    Identifier::named(name).expect("named id")
}

/// Messages with the given payloads.
pub fn messages(payloads: &[&str]) -> Vec<IggyMessage> {
    payloads
        .iter()
        .map(|p| IggyMessage::from_str(p).expect("message"))
        .collect()
}

/// `n` messages of `size` bytes each, payloads tagged with `tag` and their index.
pub fn sized_messages(tag: &str, n: usize, size: usize) -> Vec<IggyMessage> {
    (0..n)
        .map(|i| {
            let mut payload = format!("{tag}-{i}-").into_bytes();
            payload.resize(size.max(payload.len()), b'x');
            IggyMessage::builder()
                .payload(bytes::Bytes::from(payload))
                .build()
                .expect("message")
        })
        .collect()
}

/// The payloads of polled messages as strings.
pub fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

/// The offsets of polled messages.
pub fn offsets(polled: &PolledMessages) -> Vec<u64> {
    polled.messages.iter().map(|m| m.header.offset).collect()
}

/// The error code of an SDK error.
pub fn code(error: &IggyError) -> u32 {
    error.as_code()
}

/// Creates stream `stream` with topic `topic` of `partitions` partitions; returns their ids.
pub async fn stream_and_topic(
    client: &IggyClient,
    stream: &str,
    topic: &str,
    partitions: u32,
) -> (u32, u32) {
    let s = client.create_stream(stream).await.expect("create stream");
    let t = client
        .create_topic(
            &id(s.id),
            topic,
            &TopicCreateOptions {
                partitions_count: Some(partitions),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .expect("create topic");
    (s.id, t.id)
}

pub mod raw;
