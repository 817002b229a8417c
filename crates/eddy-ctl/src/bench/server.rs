//! A server the benchmark starts itself: `BIN serve` in a fresh data directory on ports the
//! OS picks, its addresses read from its JSON `listening` log event, its pid known for CPU
//! accounting, stopped (SIGKILL) and its directory removed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::error::CtlError;

/// How long a server may take to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The addresses a started server reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    /// Stream protocol.
    pub stream: String,
    /// Event protocol.
    pub event: String,
    /// HTTP.
    pub http: String,
}

/// A running server started by the benchmark.
#[derive(Debug)]
pub struct LocalServer {
    child: Child,
    /// Its addresses.
    pub addrs: Addresses,
    dir: tempfile::TempDir,
}

/// The addresses in a `listening` log line (JSON, `--log-format json`), if it is one.
pub fn parse_listening(line: &str) -> Option<Addresses> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("message")?.as_str()? != "listening" {
        return None;
    }
    let field = |k: &str| v.get(k)?.as_str().map(str::to_owned);
    Some(Addresses {
        stream: field("stream")?,
        event: field("client")?,
        http: field("http")?,
    })
}

/// Waits until `GET /health` on `http` answers 200, up to `limit`.
fn wait_ready(http: &str, limit: Duration) -> Result<(), String> {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + limit;
    let mut last = String::from("no answer");
    while std::time::Instant::now() < deadline {
        let answer = std::net::TcpStream::connect(http).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /health HTTP/1.0\r\n\r\n")?;
            let mut head = [0u8; 12];
            s.read_exact(&mut head)?;
            Ok(String::from_utf8_lossy(&head).into_owned())
        });
        match answer {
            Ok(head) if head.ends_with(" 200") => return Ok(()),
            Ok(head) => last = head,
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("/health at {http}: {last}"))
}

impl LocalServer {
    /// Starts `bin serve` with `extra` arguments, its data directory under `parent` (or the
    /// system temp dir).
    pub fn start(bin: &Path, extra: &[String], parent: Option<&Path>) -> Result<Self, CtlError> {
        let dir = match parent {
            Some(p) => tempfile::Builder::new().prefix("eddy-bench-").tempdir_in(p),
            None => tempfile::Builder::new().prefix("eddy-bench-").tempdir(),
        }
        .map_err(|source| CtlError::Io {
            what: "create a data directory in",
            path: parent.map_or_else(std::env::temp_dir, Path::to_path_buf),
            source,
        })?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--log-format", "json", "--log-level", "info"])
            .args(["--stream-port", "0", "--client-port", "0"])
            .args(["--replication-port", "0", "--http-port", "0"])
            .args(extra)
            // The benchmark's own EDDY_* settings (addresses, credentials) are not the
            // server's: it gets the environment without them.
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| {
                let k = k.to_string_lossy();
                !k.starts_with("EDDY_") && k != "RUST_LOG"
            }))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| CtlError::Io {
            what: "start the server",
            path: bin.to_path_buf(),
            source,
        })?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (found, wait) = mpsc::channel();
        // Reads the log until the listening event, then keeps draining it so the server never
        // blocks on a full pipe.
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent {
                    if let Some(addrs) = parse_listening(&line) {
                        let _ = found.send(Ok(addrs));
                        sent = true;
                    } else {
                        tail.push(line);
                        if tail.len() > 20 {
                            tail.remove(0);
                        }
                    }
                }
            }
            if !sent {
                let _ = found.send(Err(tail.join("\n")));
            }
        });
        match wait.recv_timeout(START_TIMEOUT) {
            Ok(Ok(addrs)) => {
                // A cluster member (a cluster of one included) listens before its first
                // election and the root user's creation: loaded only once /health says ready.
                if let Err(e) = wait_ready(&addrs.http, START_TIMEOUT) {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CtlError::Failed(format!(
                        "the server {} did not become ready: {e}",
                        bin.display()
                    )));
                }
                Ok(Self { child, addrs, dir })
            }
            Ok(Err(log)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(CtlError::Failed(format!(
                    "the server {} did not start: {log}",
                    bin.display()
                )))
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(CtlError::Failed(format!(
                    "the server {} did not listen within {START_TIMEOUT:?}",
                    bin.display()
                )))
            }
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The directory holding its data (the raw-disk baseline writes beside it).
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The default server binary: this very executable (`eddy` serves as well as benchmarks).
pub fn default_binary() -> Result<PathBuf, CtlError> {
    std::env::current_exe().map_err(|source| CtlError::Io {
        what: "find",
        path: "the eddy executable".into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_event_names_every_address() {
        let line = r#"{"timestamp":"t","level":"INFO","message":"listening","stream":"127.0.0.1:1","client":"127.0.0.1:2","replication":"127.0.0.1:3","http":"127.0.0.1:4"}"#;
        assert_eq!(
            parse_listening(line),
            Some(Addresses {
                stream: "127.0.0.1:1".into(),
                event: "127.0.0.1:2".into(),
                http: "127.0.0.1:4".into()
            })
        );
        assert_eq!(parse_listening(r#"{"message":"starting eddy"}"#), None);
        assert_eq!(parse_listening("not json"), None);
    }
}
