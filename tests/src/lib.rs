//! Shared harness for eddy's cross-crate tests: spawn the real server process on free ports in a
//! temp dir, wait until it listens, talk to it over real sockets, stop it with real signals.
//!
//! Every test gets its own data directory and OS-assigned ports (`--*-port 0`); the harness
//! learns the bound addresses from the server's JSON `listening` log event, so tests never race
//! for ports.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod pki;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Path of the server binary under test. Use in integration tests of this package.
#[macro_export]
macro_rules! server_bin {
    () => {
        env!("CARGO_BIN_EXE_eddy-test-server")
    };
}

/// How long a server may take to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The addresses a running server reported.
#[derive(Debug, Clone, Copy)]
pub struct Addrs {
    /// Stream (Iggy) port.
    pub stream: SocketAddr,
    /// Event (Celeriant) port.
    pub client: SocketAddr,
    /// Replication port.
    pub replication: SocketAddr,
    /// HTTP admin port.
    pub http: SocketAddr,
}

#[derive(Default)]
struct LogState {
    lines: VecDeque<String>,
    closed: bool,
}

/// Captured stderr of a child process, readable while it runs.
#[derive(Clone, Default)]
pub struct Log(Arc<(Mutex<LogState>, Condvar)>);

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Log")
    }
}

impl Log {
    fn capture(stream: impl Read + Send + 'static) -> Self {
        let log = Log::default();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let (lock, cv) = &*sink.0;
                lock.lock().unwrap().lines.push_back(line);
                cv.notify_all();
            }
            let (lock, cv) = &*sink.0;
            lock.lock().unwrap().closed = true;
            cv.notify_all();
        });
        log
    }

    /// Waits until the stream closes (the process exited and its stderr is drained), up to
    /// `timeout`, and returns every line.
    pub fn wait_closed(&self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut state = lock.lock().unwrap();
        while !state.closed {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = cv.wait_timeout(state, deadline - now).unwrap().0;
        }
        state.lines.iter().cloned().collect()
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.0 .0.lock().unwrap().lines.iter().cloned().collect()
    }

    /// Waits until a line satisfies `pred` (returns it) or the stream closes or `timeout` passes.
    pub fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut seen = 0;
        let mut state = lock.lock().unwrap();
        loop {
            while seen < state.lines.len() {
                if pred(&state.lines[seen]) {
                    return Some(state.lines[seen].clone());
                }
                seen += 1;
            }
            let now = Instant::now();
            if state.closed || now >= deadline {
                return None;
            }
            state = cv.wait_timeout(state, deadline - now).unwrap().0;
        }
    }
}

/// Flags that put every listener on an OS-assigned port (the bound ports are in the
/// `listening` log event).
pub const EPHEMERAL_PORTS: [&str; 8] = [
    "--stream-port",
    "0",
    "--client-port",
    "0",
    "--replication-port",
    "0",
    "--http-port",
    "0",
];

/// Options for starting a server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra command-line arguments after `serve`.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Do not pass `--*-port 0` (the test chooses ports itself).
    pub keep_ports: bool,
}

/// A running `eddy serve` process with its own data directory.
#[derive(Debug)]
pub struct Eddy {
    bin: PathBuf,
    child: Option<Child>,
    log: Log,
    addrs: Option<Addrs>,
    data_dir: PathBuf,
    options: Options,
    _tmp: Option<Arc<tempfile::TempDir>>,
}

/// A cluster's replication-port certificates, written by the binary's own
/// `eddy cluster certs` into a temporary directory that lives as long as this value.
#[derive(Debug, Clone)]
pub struct ClusterCerts {
    dir: Arc<tempfile::TempDir>,
}

impl ClusterCerts {
    /// Runs `bin cluster certs` for members `1..=members`.
    pub fn issue(bin: impl AsRef<std::ffi::OsStr>, members: u64) -> Self {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let nodes: Vec<String> = (1..=members).map(|i| i.to_string()).collect();
        let out = Command::new(bin)
            .args(["cluster", "certs", "--out"])
            .arg(dir.path())
            .args(["--nodes", &nodes.join(",")])
            .output()
            .expect("run eddy cluster certs");
        assert!(
            out.status.success(),
            "eddy cluster certs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ClusterCerts { dir }
    }

    /// The directory holding `ca.pem`, `ca.key`, `node-N.pem` and `node-N.key`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `eddy serve` flags of member `id`.
    pub fn flags(&self, id: u64) -> Vec<String> {
        let path = |name: String| self.dir.path().join(name).display().to_string();
        vec![
            "--peer-tls-cert".to_owned(),
            path(format!("node-{id}.pem")),
            "--peer-tls-key".to_owned(),
            path(format!("node-{id}.key")),
            "--peer-tls-ca".to_owned(),
            path("ca.pem".to_owned()),
        ]
    }
}

/// Starts `bin serve` with `args` and `env`, capturing stderr. Does not wait for anything.
pub fn spawn(bin: &Path, args: &[String], env: &[(String, String)]) -> (Child, Log) {
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // A test's environment must not leak EDDY_* settings into the child unless asked.
    for (k, _) in std::env::vars() {
        if k.starts_with("EDDY_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the server binary");
    let log = Log::capture(child.stderr.take().expect("piped stderr"));
    (child, log)
}

fn field_addr(v: &serde_json::Value, name: &str) -> Option<SocketAddr> {
    v.get(name)?.as_str()?.parse().ok()
}

/// Parses the server's JSON `listening` event.
pub fn parse_listening(line: &str) -> Option<Addrs> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("message")?.as_str()? != "listening" {
        return None;
    }
    Some(Addrs {
        stream: field_addr(&v, "stream")?,
        client: field_addr(&v, "client")?,
        replication: field_addr(&v, "replication")?,
        http: field_addr(&v, "http")?,
    })
}

impl Eddy {
    /// Starts a server in a fresh temp data dir on OS-assigned ports and waits until it listens.
    pub fn start(bin: &str) -> Self {
        Self::start_with(bin, Options::default())
    }

    /// As [`Eddy::start`], with extra arguments and environment.
    pub fn start_with(bin: &str, options: Options) -> Self {
        let tmp = Arc::new(tempfile::tempdir().expect("temp dir"));
        let data_dir = tmp.path().join("data");
        let mut eddy = Eddy {
            bin: PathBuf::from(bin),
            child: None,
            log: Log::default(),
            addrs: None,
            data_dir,
            options,
            _tmp: Some(tmp),
        };
        eddy.boot();
        eddy
    }

    fn boot(&mut self) {
        let mut args = vec![
            "--data-dir".to_owned(),
            self.data_dir.display().to_string(),
            "--log-format".to_owned(),
            "json".to_owned(),
        ];
        if !self.options.keep_ports {
            args.extend(EPHEMERAL_PORTS.map(str::to_owned));
        }
        args.extend(self.options.args.iter().cloned());
        let (child, log) = spawn(&self.bin, &args, &self.options.env);
        self.child = Some(child);
        let line = log.wait_for(START_TIMEOUT, |l| parse_listening(l).is_some());
        let Some(line) = line else {
            let status = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            panic!(
                "server did not start (status {status:?}); stderr:\n{}",
                log.lines().join("\n")
            );
        };
        self.addrs = parse_listening(&line);
        self.log = log;
    }

    /// The bound addresses.
    pub fn addrs(&self) -> Addrs {
        self.addrs.expect("server is running")
    }

    /// The options the next (re)start uses: a test changes flags or environment between
    /// restarts on the same data directory.
    pub fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    /// The data directory (kept across restarts).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server's stderr so far.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: i32) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid fits");
        send_signal(pid, sig);
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits for the exit status (panics after `timeout`).
    pub fn stop(&mut self, timeout: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(timeout)
            .unwrap_or_else(|| panic!("server did not exit within {timeout:?} of SIGTERM"))
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops (SIGTERM) and starts again on the same data directory and options.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            let status = self.stop(Duration::from_secs(30));
            assert!(status.success(), "server exited with {status}");
        }
        self.boot();
    }

    /// Kills (SIGKILL) and starts again on the same data directory.
    pub fn crash_restart(&mut self) {
        self.kill();
        self.boot();
    }
}

impl Drop for Eddy {
    fn drop(&mut self) {
        self.kill();
    }
}

#[allow(unsafe_code)]
fn send_signal(pid: libc::pid_t, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions; it only takes integers.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// Every file under `dir`, at any depth (a directory that cannot be read, or went away while
/// the server runs, is skipped).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// Every file under `dir` that contains `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|path| {
            std::fs::read(path)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle)
        })
        .collect()
}

/// The value of the unlabelled Prometheus sample `name` in a `/metrics` body.
pub fn metric_value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A minimal blocking HTTP GET: returns (status code, body).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {raw:?}")))?;
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Writes an `api_keys.toml` into `data_dir` (created if missing) whose four keys hash to a
/// fixed value: enough to turn API keys on.
pub fn write_api_keys(data_dir: &Path) {
    std::fs::create_dir_all(data_dir).expect("create the data dir");
    let hash = "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd";
    std::fs::write(
        data_dir.join("api_keys.toml"),
        format!("[keys]\nprimary_rw = \"{hash}\"\nsecondary_rw = \"{hash}\"\nprimary_ro = \"{hash}\"\nsecondary_ro = \"{hash}\"\n"),
    )
    .expect("write api_keys.toml");
}

/// A free TCP port on loopback (bound then released; only for tests that must name a port).
/// A port below the kernel's ephemeral range (32768 and up here) that is free on every
/// loopback host a test cluster uses (127.0.0.1-9) and not handed out before in this process:
/// for a server that must come back on the same port after a kill. A port from the ephemeral
/// range can be taken meanwhile as the source port of any outgoing connection on the machine,
/// and the restart then fails to bind.
pub fn stable_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seed = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
    let mut x = seed | 1;
    for _ in 0..10_000 {
        // xorshift: a spread of candidates, different in each test process.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + u16::try_from(x % 12_000).expect("below 12,000");
        if given.contains(&port) {
            continue;
        }
        let free = (1..=9).all(|host| {
            std::net::TcpListener::bind((std::net::Ipv4Addr::new(127, 0, 0, host), port)).is_ok()
        });
        if free {
            given.push(port);
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// An ephemeral port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}
