//! The foundation, as a user sees it: the real `eddy serve` process, real sockets, temp dirs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use eddy_tests::{http_get, server_bin, spawn, Eddy, Options};

fn s(v: &str) -> String {
    v.to_owned()
}

#[test]
fn health_and_metrics_over_http() {
    let eddy = Eddy::start(server_bin!());
    let (status, body) = http_get(eddy.addrs().http, "/health").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    // An open stream connection shows in the per-protocol gauge.
    let conn = TcpStream::connect(eddy.addrs().stream).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, metrics) = http_get(eddy.addrs().http, "/metrics").unwrap();
        assert_eq!(status, 200);
        assert!(metrics.contains("eddy_build_info{version=\""), "{metrics}");
        assert!(metrics.contains("eddy_uptime_seconds "), "{metrics}");
        assert!(
            metrics.contains("# TYPE eddy_requests_total counter"),
            "{metrics}"
        );
        if metrics.contains("eddy_open_connections{protocol=\"stream\"} 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gauge never showed the connection:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(conn);
    assert_eq!(http_get(eddy.addrs().http, "/nope").unwrap().0, 404);
}

#[test]
fn listens_on_all_four_ports_and_closes_unknown_bytes_cleanly() {
    let eddy = Eddy::start(server_bin!());
    let a = eddy.addrs();
    for addr in [a.stream, a.client, a.replication, a.http] {
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    }
    // Garbage on a protocol port closes that connection only; the server keeps serving.
    for addr in [a.stream, a.client, a.replication] {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"\xde\xad\xbe\xef not a frame").unwrap();
        let mut buf = [0u8; 16];
        let n = c.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "server answered garbage on {addr}");
    }
    // A single node's replication port does not keep a silent connection (its place under
    // the port's cap) for longer than a member's greeting may take.
    let mut silent = TcpStream::connect(a.replication).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(silent.read(&mut buf).unwrap_or(0), 0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "closed after {:?}",
        started.elapsed()
    );
    assert_eq!(http_get(a.http, "/health").unwrap().0, 200);
}

#[test]
fn second_server_on_the_same_data_dir_exits_at_once_naming_the_dir() {
    let eddy = Eddy::start(server_bin!());
    let dir = eddy.data_dir().display().to_string();
    let started = Instant::now();
    let (mut child, log) = spawn(
        std::path::Path::new(server_bin!()),
        &[
            s("--data-dir"),
            dir.clone(),
            s("--stream-port"),
            s("0"),
            s("--client-port"),
            s("0"),
            s("--replication-port"),
            s("0"),
            s("--http-port"),
            s("0"),
        ],
        &[],
    );
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .expect("an error line");
    assert!(err.contains(&dir) && err.contains("locked"), "{err}");
    // The first server is unaffected.
    assert_eq!(http_get(eddy.addrs().http, "/health").unwrap().0, 200);
}

#[test]
fn port_in_use_is_one_clear_line_and_nonzero() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, log) = spawn(
        std::path::Path::new(server_bin!()),
        &[
            s("--data-dir"),
            tmp.path().display().to_string(),
            s("--stream-port"),
            port.clone(),
            s("--client-port"),
            s("0"),
            s("--replication-port"),
            s("0"),
            s("--http-port"),
            s("0"),
        ],
        &[],
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let lines = log.wait_closed(Duration::from_secs(10));
    let errors: Vec<String> = lines
        .iter()
        .filter(|l| l.starts_with("eddy: error:"))
        .cloned()
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&port) && errors[0].contains("in use"),
        "{}",
        errors[0]
    );
    assert!(!log
        .lines()
        .iter()
        .any(|l| l.contains("panicked") || l.contains("backtrace")));
}

#[test]
fn unwritable_data_dir_and_bad_config_exit_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad_dir = file.join("data");
    let (mut child, log) = spawn(
        std::path::Path::new(server_bin!()),
        &[s("--data-dir"), bad_dir.display().to_string()],
        &[],
    );
    assert_eq!(child.wait().unwrap().code(), Some(1));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .unwrap();
    assert!(err.contains(&bad_dir.display().to_string()), "{err}");

    let cfg = tmp.path().join("eddy.toml");
    std::fs::write(&cfg, "max_request_size = 5\n").unwrap();
    let (mut child, log) = spawn(
        std::path::Path::new(server_bin!()),
        &[s("--config"), cfg.display().to_string()],
        &[],
    );
    assert_eq!(child.wait().unwrap().code(), Some(78));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .unwrap();
    assert!(err.contains("max_request_size"), "{err}");

    // A peer list that names this node itself is a configuration error (exit 78) that says
    // which setting is wrong.
    let (mut child, log) = spawn(
        std::path::Path::new(server_bin!()),
        &[
            s("--data-dir"),
            tmp.path().join("cluster").display().to_string(),
            s("--node-id"),
            s("1"),
            s("--peer"),
            s("1=127.0.0.2:10001"),
        ],
        &[],
    );
    assert_eq!(child.wait().unwrap().code(), Some(78));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .unwrap();
    assert!(err.contains("peers") && err.contains("own id"), "{err}");

    // A bad environment value is refused by the argument parser (usage error, exit 2).
    let (mut child, _log) = spawn(
        std::path::Path::new(server_bin!()),
        &[],
        &[(s("EDDY_STREAM_PORT"), s("not-a-port"))],
    );
    assert_eq!(child.wait().unwrap().code(), Some(2));
}

#[test]
fn flags_beat_env_beat_file_beat_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("eddy.toml");
    std::fs::write(
        &cfg,
        "max_connections = 11\nwal_compression_level = 5\ndrain_timeout_ms = 1234\n",
    )
    .unwrap();
    let eddy = Eddy::start_with(
        server_bin!(),
        Options {
            args: vec![
                s("--config"),
                cfg.display().to_string(),
                s("--max-connections"),
                s("33"),
            ],
            env: vec![
                (s("EDDY_MAX_CONNECTIONS"), s("22")),
                (s("EDDY_WAL_COMPRESSION_LEVEL"), s("6")),
            ],
            ..Options::default()
        },
    );
    let line = eddy
        .log()
        .wait_for(Duration::from_secs(5), |l| l.contains("starting eddy"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let config = v["config"].as_str().unwrap();
    assert!(config.contains("max_connections: 33"), "{config}");
    assert!(config.contains("wal_compression_level: 6"), "{config}");
    assert!(config.contains("drain_timeout_ms: 1234"), "{config}");
    assert!(config.contains("max_request_size: 16777216"), "{config}");
    assert!(!line.contains("\"iggy\"") || config.contains("root_password: \"<redacted>\""));
}

#[test]
fn sigterm_drains_and_exits_zero_then_the_lock_is_free() {
    let mut eddy = Eddy::start_with(
        server_bin!(),
        Options {
            args: vec![s("--drain-timeout-ms"), s("2000")],
            ..Options::default()
        },
    );
    // An idle client connection must not hold shutdown past the drain timeout.
    let _idle = TcpStream::connect(eddy.addrs().client).unwrap();
    let started = Instant::now();
    let status = eddy.stop(Duration::from_secs(10));
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Restarting on the same dir works: the lock was released.
    eddy.restart();
    assert_eq!(http_get(eddy.addrs().http, "/health").unwrap().0, 200);
    eddy.signal(libc::SIGINT);
    assert!(eddy.wait_exit(Duration::from_secs(10)).unwrap().success());
}

#[test]
fn help_lists_every_option_with_default_and_env() {
    let out = std::process::Command::new(server_bin!())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, env, default) in [
        ("--data-dir", "EDDY_DATA_DIR", "./eddy-data"),
        ("--host", "EDDY_HOST", "127.0.0.1"),
        ("--stream-port", "EDDY_STREAM_PORT", "8090"),
        ("--client-port", "EDDY_CLIENT_PORT", "10000"),
        ("--replication-port", "EDDY_REPLICATION_PORT", "10001"),
        ("--http-port", "EDDY_HTTP_PORT", "10002"),
        ("--max-request-size", "EDDY_MAX_REQUEST_SIZE", "16777216"),
        (
            "--require-client-identity",
            "EDDY_REQUIRE_CLIENT_IDENTITY",
            "false",
        ),
        ("--tls-mode", "EDDY_TLS_MODE", "disabled"),
        ("--tls-client-auth", "EDDY_TLS_CLIENT_AUTH", "require"),
        (
            "--insecure-allow-plaintext-auth",
            "EDDY_INSECURE_ALLOW_PLAINTEXT_AUTH",
            "false",
        ),
        ("--wal-compression-level", "EDDY_WAL_COMPRESSION_LEVEL", "3"),
        ("--log-format", "EDDY_LOG_FORMAT", "text"),
        ("--root-username", "EDDY_ROOT_USERNAME", "iggy"),
    ] {
        let at = help.find(flag).unwrap_or_else(|| panic!("{flag} missing"));
        let section = &help[at..];
        let end = section[2..].find("\n  -").map_or(section.len(), |e| e + 2);
        let section = &section[..end];
        assert!(section.contains(env), "{flag}: {section}");
        assert!(
            section.contains(&format!("[default: {default}]")),
            "{flag}: {section}"
        );
    }
    let top = std::process::Command::new(server_bin!())
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8(top.stdout).unwrap().contains("serve"));
}

/// The files of a log directory, sorted.
fn log_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn log_files_get_the_startup_lines_and_keep_at_most_n_rotations() {
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().join("logs");
    let mut eddy = Eddy::start_with(
        server_bin!(),
        Options {
            args: vec![
                s("--log-dir"),
                dir.display().to_string(),
                s("--log-max-file-bytes"),
                s("4096"),
                s("--log-max-files"),
                s("2"),
            ],
            ..Options::default()
        },
    );
    // The startup lines go to stderr and to the file, one JSON object per line (they may
    // already fill more than the 4 KiB of one file: read the rotated ones too). The file
    // writer runs beside stderr's, so the last line may reach the file a moment after the
    // test saw it on stderr: read until it is there (bounded).
    let read_messages = || -> (String, Vec<String>) {
        let text: String = log_files(&dir)
            .iter()
            .rev()
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
            .collect();
        let messages = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| v["message"].as_str().unwrap_or_default().to_owned())
            .collect();
        (text, messages)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (text, messages) = loop {
        let (text, messages) = read_messages();
        if messages.iter().any(|m| m == "listening") || std::time::Instant::now() > deadline {
            break (text, messages);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Every whole line is one JSON object (a line being written may be read half).
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "a JSON line: {line}"
        );
    }
    assert!(
        messages.iter().any(|m| m == "starting eddy"),
        "{messages:?}"
    );
    assert!(messages.iter().any(|m| m == "listening"), "{messages:?}");
    assert!(!text.contains('\u{1b}'), "no colour codes in files");
    assert!(eddy.log().lines().iter().any(|l| l.contains("listening")));
    // Each start writes a few KiB (the configuration line alone is long): the file rotates
    // past 4 KiB, and only the two newest rotated files are kept.
    for _ in 0..6 {
        eddy.restart();
    }
    eddy.stop(Duration::from_secs(10));
    let files = log_files(&dir);
    assert_eq!(files, ["eddy.log", "eddy.log.1", "eddy.log.2"], "{files:?}");
    for file in &files {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.ends_with('\n'), "{file} holds whole lines");
    }
    // A log directory that cannot be created is one line and exit 1.
    let blocker = logs.path().join("file");
    std::fs::write(&blocker, b"").unwrap();
    let (mut child, log) = spawn(
        std::path::Path::new(server_bin!()),
        &[
            s("--data-dir"),
            logs.path().join("data2").display().to_string(),
            s("--log-dir"),
            blocker.join("sub").display().to_string(),
        ],
        &[],
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let lines = log.wait_closed(Duration::from_secs(10));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cannot write the log file")),
        "{lines:?}"
    );
}
