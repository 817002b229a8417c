//! A proxy that prints every frame between the SDK and the server (`EDDY_COMPAT_TRACE=1`).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

fn u64_at(header: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(header: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"))
}

fn describe(direction: &str, header: &[u8], body: &[u8]) {
    let size = u32_at(header, 48);
    let hex = body.iter().take(96).fold(String::new(), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    });
    match header[60] {
        5 => eprintln!(
            "{direction} request op={} code={} request={} session={} incarnation={} size={size} body={hex}",
            header[176],
            u32_at(header, 196),
            u64_at(header, 168),
            u64_at(header, 184),
            u64_at(header, 200),
        ),
        8 => eprintln!(
            "{direction} reply op={} request={} status={} size={size} body={hex}",
            header[208],
            u64_at(header, 200),
            u32_at(header, 216),
        ),
        command => eprintln!("{direction} command={command} reason={} size={size}", header[255]),
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, direction: &'static str) {
    loop {
        let mut header = [0u8; 256];
        if from.read_exact(&mut header).await.is_err() {
            eprintln!("{direction} closed");
            return;
        }
        let size = u32_at(&header, 48) as usize;
        let mut body = vec![0u8; size.saturating_sub(256)];
        if from.read_exact(&mut body).await.is_err() {
            return;
        }
        describe(direction, &header, &body);
        if to.write_all(&header).await.is_err() || to.write_all(&body).await.is_err() {
            return;
        }
    }
}

/// Listens on a loopback port and relays each connection to `upstream`; returns the port.
pub async fn proxy(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(pump(client_read, server_write, "client>"));
            tokio::spawn(pump(server_read, client_write, "<server"));
        }
    });
    addr
}
