//! Hostile clients and failing storage against the real server (issue 18): what a client is
//! told when storage fails, credentials at start-up, login throttling, token revocation, the
//! stream port's deadlines and pre-login frame cap, the HTTP port's limits, and responsiveness
//! while storage is slow. Each test names the limit it checks; OPERATIONS.md lists them all.
#![allow(clippy::too_many_lines)]
// tests are exempt from the 100-line rule
// Metric samples compared here are small counts, exact in an f64.
#![allow(clippy::float_cmp)]

mod cluster_support;
mod event_support;
mod stream_support;

use std::time::Duration;

use celeriant_client_tokio::{json_event, ClientError, ReadError, ServerError};
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::ReadRequest;
use celeriant_wal::aggregate_key::AggregateKey;

/// A read that hits damaged storage is answered with its error code and a generic message: no
/// storage path, no operating-system text. The server log has both, under the reference the
/// client was given.
#[tokio::test]
async fn event_storage_failures_reach_clients_without_paths_or_os_texts() {
    let mut eddy = event_support::start(&["--num-shards", "1"]);
    let key = AggregateKey::new(1, 2, 3);
    {
        let mut conn = event_support::client(&eddy).await;
        for i in 0..20u64 {
            let mut e = json_event(5, &serde_json::json!({"i": i, "pad": "x".repeat(4000)}))
                .expect("event");
            e.client_seq = i + 1;
            conn.write_events(key.clone(), vec![e], 7)
                .await
                .expect("write");
        }
    }
    // A cold start, then the shard's log segments lose their bytes under the running server.
    eddy.restart();
    let events = eddy.data_dir().join("events");
    let segments: Vec<_> = eddy_tests::files_under(&events)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    assert!(
        !segments.is_empty(),
        "no event log segment under {events:?}"
    );
    for segment in &segments {
        std::fs::OpenOptions::new()
            .write(true)
            .open(segment)
            .and_then(|f| f.set_len(0))
            .expect("truncate a segment");
    }
    let mut conn = event_support::client(&eddy).await;
    let err = conn
        .read(ReadRequest {
            correlation_id: None,
            aggregate_key: key.clone(),
            filters: ReadFilters::new(1),
        })
        .await
        .expect_err("a read of bytes that are gone fails");
    let ClientError::Server(ServerError::Read {
        kind: ReadError::FetchDatablocks,
        error_message,
    }) = &err
    else {
        panic!("expected a read fetch error, got {err:?}");
    };
    let data_dir = eddy.data_dir().display().to_string();
    for leak in [
        data_dir.as_str(),
        "shard-",
        ".log",
        "os error",
        "No such",
        "eof",
    ] {
        assert!(
            !error_message.contains(leak),
            "the client was told {leak:?}: {error_message}"
        );
    }
    let reference = error_message
        .split("reference ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("no log reference in {error_message}"))
        .to_owned();
    let logged = eddy
        .log()
        .wait_for(Duration::from_secs(5), |l| {
            l.contains("event store failure") && l.contains(&format!("\"reference\":{reference}"))
        })
        .expect("the failure is logged under the client's reference");
    assert!(
        logged.contains("shard-"),
        "the log names the file: {logged}"
    );
}

/// The default-password warning comes from the stored credential: setting
/// `EDDY_ROOT_PASSWORD` on a data directory created with the default does not silence it (root
/// still logs in with `iggy`), and the server says the configured password is not in effect.
#[test]
fn default_password_warning_reads_the_stored_credential() {
    let warned_default = |l: &str| l.contains("published default password");
    let warned_differs = |l: &str| l.contains("is not the stored one");
    let mut eddy = stream_support::server();
    assert!(eddy.log().lines().iter().any(|l| warned_default(l)));
    assert!(!eddy.log().lines().iter().any(|l| warned_differs(l)));

    eddy.options_mut().env.push((
        "EDDY_ROOT_PASSWORD".to_owned(),
        "not-the-default".to_owned(),
    ));
    eddy.restart();
    let lines = eddy.log().lines();
    assert!(
        lines.iter().any(|l| warned_default(l)),
        "root still has the default password: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| warned_differs(l)),
        "the configured password is not in effect: {lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.contains("not-the-default")));

    // A data directory created with a configured password: no warning at all.
    let fresh = eddy_tests::Eddy::start_with(
        eddy_tests::server_bin!(),
        eddy_tests::Options {
            env: vec![("EDDY_ROOT_PASSWORD".to_owned(), "s3cret-pw".to_owned())],
            ..eddy_tests::Options::default()
        },
    );
    let lines = fresh.log().lines();
    assert!(!lines.iter().any(|l| warned_default(l) || warned_differs(l)));
}

/// A server bound to a host other than loopback refuses to start (exit 78, one line naming the
/// fix) while root would be created with, or still logs in with, the published default
/// password; `--allow-default-root-password` starts it with a warning. The stored password
/// decides: a directory created with the default is refused even when another password is
/// configured now, and one created with another password starts.
#[test]
fn a_reachable_host_with_the_default_root_password_refuses_to_start() {
    let bin = std::path::Path::new(eddy_tests::server_bin!());
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let args = |host: &str, extra: &[&str]| -> Vec<String> {
        [
            "--data-dir",
            data.to_str().unwrap(),
            "--host",
            host,
            "--log-format",
            "json",
        ]
        .into_iter()
        .chain(eddy_tests::EPHEMERAL_PORTS)
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect()
    };
    let refused = |args: &[String], env: &[(String, String)]| -> String {
        let (mut child, log) = eddy_tests::spawn(bin, args, env);
        let status = child.wait().unwrap();
        let lines = log.wait_closed(Duration::from_secs(10));
        assert_eq!(status.code(), Some(78), "{lines:#?}");
        let errors: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("eddy: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{lines:#?}");
        for needle in ["0.0.0.0", "default", "--allow-default-root-password"] {
            assert!(
                errors[0].contains(needle),
                "{needle} missing from {}",
                errors[0]
            );
        }
        errors[0].clone()
    };
    let started = |args: &[String], env: &[(String, String)]| -> Vec<String> {
        let (mut child, log) = eddy_tests::spawn(bin, args, env);
        let listening = log.wait_for(eddy_tests::START_TIMEOUT, |l| {
            eddy_tests::parse_listening(l).is_some()
        });
        let _ = child.kill();
        let _ = child.wait();
        let lines = log.wait_closed(Duration::from_secs(10));
        assert!(listening.is_some(), "{lines:#?}");
        lines
    };
    let secret = vec![(
        "EDDY_ROOT_PASSWORD".to_owned(),
        "not-the-default".to_owned(),
    )];

    // A new directory whose root user would get the default password: refused before root is
    // created.
    let err = refused(&args("0.0.0.0", &[]), &[]);
    assert!(err.contains("EDDY_ROOT_PASSWORD"), "{err}");
    // The same on loopback starts (and creates root with the default password).
    let lines = started(&args("127.0.0.1", &[]), &[]);
    assert!(lines
        .iter()
        .any(|l| l.contains("published default password")));
    // Stored default: refused on 0.0.0.0 even with another password configured now.
    let err = refused(&args("0.0.0.0", &[]), &secret);
    assert!(err.contains("CHANGE_PASSWORD"), "{err}");
    // With the opt-in it starts and warns.
    let lines = started(&args("0.0.0.0", &["--allow-default-root-password"]), &[]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("WARN") && l.contains("--allow-default-root-password")),
        "{lines:#?}"
    );

    // A directory created with another password starts on 0.0.0.0 without the opt-in.
    let other = tempfile::tempdir().unwrap();
    let other_data = other.path().join("data");
    let mut other_args = args("0.0.0.0", &[]);
    other_args[1] = other_data.to_str().unwrap().to_owned();
    let lines = started(&other_args, &secret);
    assert!(!lines
        .iter()
        .any(|l| l.contains("published default password")));
}

/// Cluster members warn about the published default root password as a single node does,
/// once they have applied the root user the first metadata leader created.
#[test]
fn cluster_members_warn_about_the_default_root_password() {
    let nodes = cluster_support::start_cluster(3);
    for (i, node) in nodes.iter().enumerate() {
        let warned = node.eddy.log().wait_for(Duration::from_secs(60), |l| {
            l.contains("WARN") && l.contains("published default password")
        });
        assert!(
            warned.is_some(),
            "member {} did not warn; its log:\n{}",
            i + 1,
            node.eddy.log().lines().join("\n")
        );
    }
}

/// `CHANGE_PASSWORD` with a wrong current password is a password guess: it is counted and
/// delayed like a failed login (the same per-connection and per-address failures, its own
/// metrics), the connection closes after `--login-max-failures-per-connection` failures, and
/// the right current password still changes it.
#[tokio::test]
async fn wrong_current_passwords_are_counted_and_delayed_like_logins() {
    use iggy::prelude::*;
    use stream_support::{code, login, root};
    let eddy = stream_support::server_with(&[
        "--login-max-failures-per-connection",
        "3",
        "--login-backoff-max-ms",
        "400",
    ]);
    let addrs = eddy.addrs();
    let admin = root(addrs.stream).await;
    let alice = admin
        .create_user("alice", "alice-pw", UserStatus::Active, None)
        .await
        .unwrap();
    let alice_id = stream_support::id(alice.id);
    let metric = |name: &'static str| {
        let http = addrs.http;
        async move {
            tokio::task::spawn_blocking(move || {
                let (_, body) = eddy_tests::http_get(http, "/metrics").expect("scrape");
                eddy_tests::metric_value(&body, name).unwrap_or(-1.0)
            })
            .await
            .unwrap()
        }
    };

    let session = login(addrs.stream, "alice", "alice-pw").await;
    for attempt in 1..=3 {
        let err = session
            .change_password(&alice_id, "guess", "new-password")
            .await
            .unwrap_err();
        assert_eq!(code(&err), 42, "attempt {attempt}: {err}");
    }
    // Two failures go free (as logins), the third would wait: none waited yet.
    assert_eq!(metric("eddy_password_change_failures_total").await, 3.0);
    assert_eq!(
        metric("eddy_password_change_attempts_delayed_total").await,
        0.0
    );
    assert_eq!(metric("eddy_login_failures_total").await, 0.0);
    // The third failure closed the connection.
    assert!(
        session.get_me().await.is_err(),
        "the connection is still open after three failures"
    );
    assert_eq!(metric("eddy_login_connections_closed_total").await, 1.0);

    // The address's failures delay the next attempts from it (100 ms after three, 200 ms after
    // four), a login included, on a new connection too.
    let session = login(addrs.stream, "alice", "alice-pw").await;
    assert_eq!(metric("eddy_login_attempts_delayed_total").await, 1.0);
    let started = std::time::Instant::now();
    let err = session
        .change_password(&alice_id, "guess", "new-password")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 42);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "a fourth guess from the address waited only {:?}",
        started.elapsed()
    );
    assert_eq!(metric("eddy_password_change_failures_total").await, 4.0);
    assert_eq!(
        metric("eddy_password_change_attempts_delayed_total").await,
        1.0
    );

    // The right current password still works (after its delay).
    session
        .change_password(&alice_id, "alice-pw", "new-password")
        .await
        .expect("the right current password changes it");
    login(addrs.stream, "alice", "new-password").await;
}

/// Data at rest is the server user's only: after writes on both protocols every directory
/// under the data directory (and `--log-dir`) is 0700 and every file 0600. A data directory
/// that already exists open to others gets a warning naming the fix.
#[tokio::test]
async fn data_and_logs_are_readable_by_the_server_user_only() {
    use iggy::prelude::*;
    use std::os::unix::fs::PermissionsExt as _;
    let logs = tempfile::tempdir().unwrap();
    let log_dir = logs.path().join("eddy-logs");
    let mut eddy = stream_support::server_with(&["--log-dir", log_dir.to_str().unwrap()]);
    let addrs = eddy.addrs();
    let admin = stream_support::root(addrs.stream).await;
    stream_support::stream_and_topic(&admin, "s", "t", 2).await;
    admin
        .send_messages(
            &stream_support::named("s"),
            &stream_support::named("t"),
            &Partitioning::partition_id(0),
            &mut stream_support::messages(&["a", "b"]),
        )
        .await
        .unwrap();
    admin
        .create_user("bob", "bob-password", UserStatus::Active, None)
        .await
        .unwrap();
    let mut events = event_support::client(&eddy).await;
    let event = json_event(3, &serde_json::json!({"x": 1})).unwrap();
    events
        .write_events(AggregateKey::new(1, 2, 3), vec![event], 4)
        .await
        .unwrap();
    drop((admin, events));
    // A clean stop writes what a shutdown writes (snapshots, index runs), then a restart.
    eddy.restart();

    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for root in [eddy.data_dir(), log_dir.as_path()] {
        assert_eq!(mode(root), 0o700, "{}", root.display());
        let files = eddy_tests::files_under(root);
        assert!(files.len() > 5 || root == log_dir, "{files:?}");
        for file in &files {
            assert_eq!(mode(file), 0o600, "{}", file.display());
            let mut dir = file.parent();
            while let Some(d) = dir.filter(|d| d.starts_with(root)) {
                assert_eq!(mode(d), 0o700, "{}", d.display());
                dir = d.parent();
            }
        }
    }
    let names: Vec<String> = eddy_tests::files_under(eddy.data_dir())
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    for expected in ["eddy.lock", "dictionary.zstd_dict", "streams", "events"] {
        assert!(
            names.iter().any(|n| n.contains(expected)),
            "{expected}: {names:#?}"
        );
    }
    assert!(
        !eddy.log().lines().iter().any(|l| l.contains("chmod 700")),
        "a directory the server made is fine"
    );

    // An existing directory open to others: left as it is, with a warning.
    std::fs::set_permissions(eddy.data_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    eddy.restart();
    let warned = eddy
        .log()
        .lines()
        .into_iter()
        .find(|l| l.contains("chmod 700"))
        .expect("a warning about the open data directory");
    assert!(warned.contains("WARN"), "{warned}");
    assert!(
        warned.contains(&eddy.data_dir().display().to_string()),
        "{warned}"
    );
}

/// API keys without `--require-client-identity` would serve anonymous clients read-write: the
/// server refuses to start (exit 78, naming both ways out) unless `--allow-anonymous-clients`
/// says so, and then warns.
#[test]
fn api_keys_without_required_identity_need_the_explicit_opt_in() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    eddy_tests::write_api_keys(&data);
    let mut args: Vec<String> = [
        "--data-dir",
        data.to_str().unwrap(),
        "--insecure-allow-plaintext-auth",
        "--log-format",
        "json",
    ]
    .into_iter()
    .chain(eddy_tests::EPHEMERAL_PORTS)
    .map(str::to_owned)
    .collect();
    let bin = std::path::Path::new(eddy_tests::server_bin!());
    let (mut child, log) = eddy_tests::spawn(bin, &args, &[]);
    assert_eq!(child.wait().unwrap().code(), Some(78));
    let err = log
        .wait_for(Duration::from_secs(5), |l| l.starts_with("eddy: error:"))
        .expect("one error line");
    for needle in [
        "api_keys.toml",
        "--require-client-identity",
        "--allow-anonymous-clients",
    ] {
        assert!(err.contains(needle), "{needle} missing from {err}");
    }

    args.push("--allow-anonymous-clients".to_owned());
    let (mut child, log) = eddy_tests::spawn(bin, &args, &[]);
    let started = log.wait_for(eddy_tests::START_TIMEOUT, |l| {
        eddy_tests::parse_listening(l).is_some()
    });
    let warned = log
        .lines()
        .iter()
        .any(|l| l.contains("--allow-anonymous-clients") && l.contains("WARN"));
    let _ = child.kill();
    let _ = child.wait();
    assert!(started.is_some(), "{:#?}", log.lines());
    assert!(warned, "{:#?}", log.lines());
}

/// A session logged in with a personal access token lasts only as long as the token: deleting
/// it or its expiry ends the session at its next request (status 40). Expired tokens are purged
/// at the next creation and periodically, and never count against the per-user limit.
#[tokio::test]
async fn token_sessions_end_with_their_token_and_expired_tokens_are_purged() {
    use iggy::prelude::*;
    use stream_support::{code, connect, root};
    let eddy = stream_support::server_with(&["--token-purge-interval-secs", "1"]);
    let addr = eddy.addrs().stream;
    let root = root(addr).await;

    // Deleted: the session that used it stops working; the password session goes on.
    let token = root
        .create_personal_access_token("deleted", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap()
        .token;
    let by_token = connect(addr).await;
    by_token
        .login_with_personal_access_token(&token)
        .await
        .unwrap();
    by_token.get_streams().await.expect("a token session works");
    root.delete_personal_access_token("deleted").await.unwrap();
    let err = by_token.get_streams().await.unwrap_err();
    assert_eq!(code(&err), 40, "deleted token's session: {err}");
    root.get_streams()
        .await
        .expect("the password session goes on");

    // Expired: the session stops at the expiry, without anyone deleting the token.
    let short = root
        .create_personal_access_token(
            "short",
            PersonalAccessTokenExpiry::ExpireDuration(Duration::from_millis(1500).into()),
        )
        .await
        .unwrap()
        .token;
    let by_short = connect(addr).await;
    by_short
        .login_with_personal_access_token(&short)
        .await
        .unwrap();
    by_short.get_streams().await.expect("works before expiry");
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let err = by_short.get_streams().await.unwrap_err();
    assert_eq!(code(&err), 40, "expired token's session: {err}");

    // The periodic purge removes it from the owner's list.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let names: Vec<String> = root
            .get_personal_access_tokens()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        if names.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "expired tokens still listed: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Expired tokens do not count against the limit: fill it with short-lived tokens, let them
    // expire, and a new one (reusing a name) is created at once.
    let limit = eddy_auth::token::MAX_TOKENS_PER_USER;
    let lifetime = Duration::from_secs(8);
    let filled = std::time::Instant::now();
    for i in 0..limit {
        root.create_personal_access_token(
            &format!("tok{i}"),
            PersonalAccessTokenExpiry::ExpireDuration(lifetime.into()),
        )
        .await
        .unwrap();
    }
    let full = root
        .create_personal_access_token("one-more", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap_err();
    assert_ne!(code(&full), 0, "the limit holds while they live");
    tokio::time::sleep(
        (filled + lifetime + Duration::from_millis(300)) - std::time::Instant::now(),
    )
    .await;
    root.create_personal_access_token("tok0", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .expect("expired tokens neither count nor keep their names");
}

/// The eviction reason in the first frame a server sent before closing.
fn eviction_reason(sent: &[u8]) -> Option<u8> {
    let header: [u8; eddy_wire::stream::HEADER_SIZE] = sent
        .get(..eddy_wire::stream::HEADER_SIZE)?
        .try_into()
        .ok()?;
    match eddy_wire::stream::Header::decode(&header).ok()? {
        eddy_wire::stream::Header::Eviction(e) => Some(e.reason),
        _ => None,
    }
}

/// The stream port's limits on slow and silent peers: a declared frame above the pre-login cap
/// closes at once (nothing reserved for it), a connection that sends part of a header and
/// stalls is closed at the login deadline, an idle session is closed at the idle timeout
/// while one that pings stays, and a logged-in client is served throughout.
#[tokio::test]
async fn stream_port_deadlines_and_prelogin_frame_cap() {
    use eddy_wire::stream::{EvictionReason, Operation, RequestHeader};
    use stream_support::raw::Raw;
    let eddy = stream_support::server_with(&[
        "--stream-login-timeout-ms",
        "3000",
        "--stream-idle-timeout-ms",
        "1500",
    ]);
    let addr = eddy.addrs().stream;
    let started = std::time::Instant::now();
    let mut half_open = Raw::connect(addr).await;
    let header = RequestHeader::new(Operation::NonReplicated, 0).unwrap();
    half_open.write(&header.encode()[..100]).await;

    // A 1 MiB frame declared before login: closed before the login deadline, body unread.
    let mut big = Raw::connect(addr).await;
    let mut header = RequestHeader::new(Operation::NonReplicated, 1 << 20).unwrap();
    header.client = big.client;
    header.command_code = 1;
    big.write(&header.encode()).await;
    assert!(
        big.closed_within(Duration::from_millis(2500))
            .await
            .is_some(),
        "a frame above the pre-login cap keeps its connection open"
    );

    // A pinging session outlives the idle timeout; the others are served meanwhile.
    let mut pinging = Raw::logged_in(addr, "iggy", "iggy").await;
    let mut idle = Raw::logged_in(addr, "iggy", "iggy").await;
    let ping = eddy_codec::stream::Request::Ping(eddy_codec::stream::commands::ping::Ping);
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(pinging.call(&ping).await.code(), 0);
    }
    let sent = idle
        .closed_within(Duration::from_secs(1))
        .await
        .expect("an idle session is closed");
    assert_eq!(
        eviction_reason(&sent),
        Some(EvictionReason::StaleClient as u8)
    );

    // The half-open connection: closed at the login deadline, not before.
    let sent = half_open
        .closed_within(Duration::from_secs(15))
        .await
        .expect("a stalled header is not held open for ever");
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "closed before its deadline"
    );
    assert_eq!(
        eviction_reason(&sent),
        Some(EvictionReason::NoSession as u8)
    );
    assert_eq!(pinging.call(&ping).await.code(), 0, "still served");
}

/// Failed logins are throttled: the connection closes after
/// `--login-max-failures-per-connection` failures, further attempts from the same address wait
/// a growing delay, Argon2id checks beyond `--max-concurrent-password-hashes` queue, and a
/// correct login still gets in.
#[tokio::test]
async fn failed_logins_are_throttled_and_close_their_connection() {
    use eddy_wire::stream::EvictionReason;
    use stream_support::raw::{login_body, Raw};
    let eddy = stream_support::server_with(&[
        "--login-max-failures-per-connection",
        "3",
        "--login-backoff-max-ms",
        "400",
        "--max-concurrent-password-hashes",
        "1",
    ]);
    let addr = eddy.addrs().stream;
    let mut raw = Raw::connect(addr).await;
    for _ in 0..3 {
        let answer = raw.register(&login_body("iggy", "wrong-password")).await;
        assert_eq!(
            answer.eviction(),
            Some(EvictionReason::InvalidCredentials as u8)
        );
    }
    assert!(
        raw.closed_within(Duration::from_secs(5)).await.is_some(),
        "the third failure closes the connection"
    );

    // The address has three failures: each further attempt waits 100 ms, 200 ms, then the cap.
    let started = std::time::Instant::now();
    for _ in 0..4 {
        let answer = Raw::connect(addr)
            .await
            .register(&login_body("iggy", "wrong-password"))
            .await;
        assert_eq!(
            answer.eviction(),
            Some(EvictionReason::InvalidCredentials as u8)
        );
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "four attempts after failures took only {took:?}"
    );

    // Concurrent attempts queue for the one Argon2id slot.
    let attempts: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                Raw::connect(addr)
                    .await
                    .register(&login_body("iggy", "wrong-password"))
                    .await
                    .eviction()
            })
        })
        .collect();
    for attempt in attempts {
        assert_eq!(
            attempt.await.unwrap(),
            Some(EvictionReason::InvalidCredentials as u8)
        );
    }
    let (status, body) = eddy_tests::http_get(eddy.addrs().http, "/metrics").unwrap();
    assert_eq!(status, 200);
    let metric = |name| eddy_tests::metric_value(&body, name).unwrap_or(-1.0);
    assert!(metric("eddy_password_hash_waits_total") >= 1.0, "{body}");
    assert!(metric("eddy_login_failures_total") >= 11.0, "{body}");
    assert_eq!(metric("eddy_login_connections_closed_total"), 1.0);
    assert_eq!(metric("eddy_password_hashes_in_flight"), 0.0);

    // The right password still logs in (after the address's delay).
    Raw::logged_in(addr, "iggy", "iggy").await;
}

/// PING on the stream port and `/health` stay responsive while storage is slow: concurrent
/// creations of large topics (thousands of partition files made under the metadata lock) and
/// readers of the metadata behind them must not take the runtime's workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_and_health_stay_responsive_while_storage_is_slow() {
    use iggy::prelude::*;
    use stream_support::raw::Raw;
    use stream_support::{id, root};
    let eddy = stream_support::server();
    let addrs = eddy.addrs();
    let admin = root(addrs.stream).await;
    let stream = admin.create_stream("slow").await.unwrap().id;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));

    // Creators keep making 200-partition topics until the pinger has measured at least
    // `busy_at_least` of slow storage (a fixed amount of work is too quick on an idle machine).
    let busy_at_least = Duration::from_millis(1500);
    let creating = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut work: Vec<tokio::task::JoinHandle<Result<(), String>>> = Vec::new();
    for creator in 0..3 {
        let creating = std::sync::Arc::clone(&creating);
        work.push(tokio::spawn(async move {
            let client = root(addrs.stream).await;
            let mut round = 0;
            while creating.load(std::sync::atomic::Ordering::Relaxed) && round < 50 {
                client
                    .create_topic(
                        &id(stream),
                        &format!("big-{creator}-{round}"),
                        &TopicCreateOptions {
                            partitions_count: Some(200),
                            ..TopicCreateOptions::default()
                        },
                    )
                    .await
                    .map_err(|e| format!("create a large topic: {e}"))?;
                round += 1;
            }
            Ok(())
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..4 {
        let stop = std::sync::Arc::clone(&stop);
        readers.push(tokio::spawn(async move {
            let client = root(addrs.stream).await;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .get_streams()
                    .await
                    .map_err(|e| format!("list streams: {e}"))?;
            }
            Ok(())
        }));
    }

    let started = std::time::Instant::now();
    let mut pinger = Raw::logged_in(addrs.stream, "iggy", "iggy").await;
    let ping = eddy_codec::stream::Request::Ping(eddy_codec::stream::commands::ping::Ping);
    let (mut worst_ping, mut worst_health) = (Duration::ZERO, Duration::ZERO);
    while work.iter().any(|w| !w.is_finished()) {
        if started.elapsed() >= busy_at_least {
            creating.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        let t = std::time::Instant::now();
        assert_eq!(pinger.call(&ping).await.code(), 0);
        worst_ping = worst_ping.max(t.elapsed());
        let t = std::time::Instant::now();
        let (status, _) = tokio::task::spawn_blocking(move || {
            eddy_tests::http_get(addrs.http, "/health").expect("health answers")
        })
        .await
        .unwrap();
        assert_eq!(status, 200);
        worst_health = worst_health.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let busy = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in work.into_iter().chain(readers) {
        if let Err(e) = w.await.unwrap() {
            panic!("{e}; server log:\n{}", eddy.log().lines().join("\n"));
        }
    }
    assert!(
        busy >= busy_at_least,
        "storage was not slow enough to test anything ({busy:?})"
    );
    assert!(
        worst_ping < Duration::from_millis(750),
        "a ping waited {worst_ping:?} during {busy:?} of slow storage"
    );
    assert!(
        worst_health < Duration::from_millis(750),
        "/health waited {worst_health:?} during {busy:?} of slow storage"
    );
}

/// The HTTP admin port: connections beyond `--http-max-connections` wait for a slot, a client
/// that sends no request head is closed at `--http-header-read-timeout-ms`, and one that stops
/// reading its responses is closed at `--http-write-timeout-ms`; `/health` is answered
/// throughout.
#[test]
fn http_port_caps_connections_and_closes_slow_clients() {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;
    let eddy = stream_support::server_with(&[
        "--http-max-connections",
        "3",
        "--http-header-read-timeout-ms",
        "1000",
        "--http-write-timeout-ms",
        "1000",
    ]);
    let http = eddy.addrs().http;
    let metric = |name: &str| {
        let (status, body) = eddy_tests::http_get(http, "/metrics").expect("scrape");
        assert_eq!(status, 200);
        eddy_tests::metric_value(&body, name)
    };

    // Three silent connections hold every slot until the header timeout closes them.
    let silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(http).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t = std::time::Instant::now();
    let (status, _) = eddy_tests::http_get(http, "/health").unwrap();
    let waited = t.elapsed();
    assert_eq!(status, 200);
    assert!(
        waited >= Duration::from_millis(400),
        "served at once while three connections held every slot ({waited:?})"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert!(
                        !matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ),
                        "a silent connection is still open"
                    );
                    break;
                }
            }
        }
    }

    // A client that pipelines scrapes and never reads: closed once its writes stall.
    let mut stalled = TcpStream::connect(http).unwrap();
    let requests = "GET /metrics HTTP/1.1\r\nhost: eddy\r\n\r\n".repeat(300);
    stalled.write_all(requests.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        metric("eddy_http_open_connections"),
        Some(2.0),
        "it is served"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while metric("eddy_http_open_connections") != Some(1.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "a client that stopped reading still holds its connection"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(stalled);
}

/// Celeriant's and Iggy's metric names are served beside eddy's, from the same state.
#[tokio::test]
async fn metrics_carry_celeriant_and_iggy_names() {
    use celeriant_client_tokio::{WatchConnection, WatchOptions};
    use celeriant_msg::request::requests::WatchRequest;
    use iggy::prelude::*;
    // One shard: one watch subscription (the client watches every shard it is not pinned to).
    let eddy = stream_support::server_with(&["--num-shards", "1"]);
    let addrs = eddy.addrs();
    let admin = stream_support::root(addrs.stream).await;
    stream_support::stream_and_topic(&admin, "s", "t", 3).await;
    admin
        .send_messages(
            &stream_support::named("s"),
            &stream_support::named("t"),
            &Partitioning::partition_id(0),
            &mut stream_support::messages(&["a", "b"]),
        )
        .await
        .unwrap();

    let _watch = WatchConnection::connect(
        &event_support::addr(&eddy),
        WatchRequest {
            correlation_id: None,
            requested_latency_ms: None,
            shard_id: None,
            orgs: None,
            aggregate_types: None,
            aggregates: None,
            operation_types: None,
        },
        WatchOptions {
            timeout: Some(event_support::ANSWER),
            ..WatchOptions::default()
        },
    )
    .await
    .unwrap();
    let mut conn = event_support::client(&eddy).await;
    let key = AggregateKey::new(1, 1, 1);
    let event = json_event(3, &serde_json::json!({"x": 1})).unwrap();
    conn.write_events(key.clone(), vec![event], 9)
        .await
        .unwrap();
    let _ = conn
        .read(ReadRequest {
            correlation_id: None,
            aggregate_key: AggregateKey::new(1, 1, 404),
            filters: ReadFilters::new(1),
        })
        .await
        .expect_err("no such aggregate");

    // A request is counted right after its answer is sent: scrape until the last one shows.
    let mut body = String::new();
    for _ in 0..50 {
        body = tokio::task::spawn_blocking(move || {
            eddy_tests::http_get(addrs.http, "/metrics")
                .expect("scrape")
                .1
        })
        .await
        .unwrap();
        if eddy_tests::metric_value(&body, "celeriant_read_errors_total") == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let value = |name| {
        eddy_tests::metric_value(&body, name).unwrap_or_else(|| panic!("{name} missing: {body}"))
    };
    assert_eq!(value("celeriant_writes_total"), 1.0);
    assert_eq!(value("celeriant_write_errors_total"), 0.0);
    assert_eq!(value("celeriant_reads_total"), 0.0);
    assert_eq!(value("celeriant_read_errors_total"), 1.0);
    assert_eq!(value("celeriant_watch_subscribers_active"), 1.0);
    assert_eq!(value("celeriant_client_connections_active"), 2.0);
    assert_eq!(value("celeriant_write_duration_seconds_count"), 1.0);
    assert_eq!(value("celeriant_node_role"), 1.0);
    assert_eq!(value("streams"), 1.0);
    assert_eq!(value("topics"), 1.0);
    assert_eq!(value("partitions"), 3.0);
    assert_eq!(value("messages"), 2.0);
    assert_eq!(value("users"), 1.0);
    assert_eq!(value("clients"), 1.0);
    assert!(value("segments") >= 3.0);
    assert!(value("http_requests_total") >= 1.0);
    assert!(value("eddy_open_connections{protocol=\"event\"}") >= 2.0);
}

/// Seconds the hostile-client soak runs: `EDDY_SOAK_SECONDS` (`cargo xtask soak`), a few in
/// the default test run.
fn soak_seconds() -> u64 {
    std::env::var("EDDY_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// Hostile clients on every port for a bounded time: half-open stream connections, login
/// floods, clients that stop reading on the stream, event and HTTP ports, and silent HTTP
/// connections. Meanwhile a well-behaved client pings, writes an event and checks `/health`,
/// each answered within a bound; afterwards every hostile connection is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_hostile_clients() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use stream_support::raw::{login_body, Raw};
    use tokio::io::AsyncWriteExt as _;
    let seconds = soak_seconds();
    let eddy = stream_support::server_with(&[
        "--stream-login-timeout-ms",
        "1000",
        "--stream-idle-timeout-ms",
        "2000",
        "--stream-write-timeout-ms",
        "1000",
        "--client-connection-timeout-ms",
        "1000",
        "--http-header-read-timeout-ms",
        "1000",
        "--http-write-timeout-ms",
        "1000",
        "--http-max-connections",
        "64",
        "--login-backoff-max-ms",
        "200",
    ]);
    let addrs = eddy.addrs();
    let stop = Arc::new(AtomicBool::new(false));
    let mut hostile = Vec::new();
    let running = |stop: &Arc<AtomicBool>| !stop.load(Ordering::Relaxed);

    // Half-open stream connections: part of a header, then nothing.
    let s = Arc::clone(&stop);
    hostile.push(tokio::spawn(async move {
        let mut held = std::collections::VecDeque::new();
        while running(&s) {
            if let Ok(mut c) = tokio::net::TcpStream::connect(addrs.stream).await {
                let _ = c.write_all(&[0u8; 100]).await;
                held.push_back(c);
            }
            if held.len() > 50 {
                held.pop_front();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }));
    // Login floods: wrong passwords on fresh connections.
    for _ in 0..3 {
        let s = Arc::clone(&stop);
        hostile.push(tokio::spawn(async move {
            while running(&s) {
                let mut c = Raw::connect(addrs.stream).await;
                let _ = c.register(&login_body("iggy", "not-the-password")).await;
            }
        }));
    }
    // Clients that stop reading: pipelined pings on the stream port, pipelined reads on the
    // event port, pipelined scrapes and silent connections on the HTTP port.
    let s = Arc::clone(&stop);
    hostile.push(tokio::spawn(async move {
        let mut held = Vec::new();
        while running(&s) {
            let mut raw = Raw::logged_in(addrs.stream, "iggy", "iggy").await;
            let mut frames = Vec::new();
            for _ in 0..20_000 {
                let header = raw.header(eddy_wire::stream::Operation::NonReplicated, 1, &[]);
                frames.extend_from_slice(&header.encode());
            }
            let mut socket = raw.socket;
            let _ =
                tokio::time::timeout(Duration::from_millis(500), socket.write_all(&frames)).await;
            held.push(socket);
            let mut ev = tokio::net::TcpStream::connect(addrs.client).await.unwrap();
            let read = celeriant_msg::process_client_requests::ClientRequest::Read(ReadRequest {
                correlation_id: None,
                aggregate_key: AggregateKey::new(1, 1, 1),
                filters: ReadFilters::new(1),
            });
            let body = read.serialize_body(2).unwrap();
            let mut frame = Vec::new();
            for _ in 0..2_000 {
                frame.extend_from_slice(&2u32.to_le_bytes());
                frame.extend_from_slice(&(read.request_type() as u32).to_le_bytes());
                frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
                frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
                frame.push(0);
                frame.extend_from_slice(&body);
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), ev.write_all(&frame)).await;
            held.push(ev);
            let mut web = tokio::net::TcpStream::connect(addrs.http).await.unwrap();
            let scrapes = "GET /metrics HTTP/1.1\r\nhost: eddy\r\n\r\n".repeat(200);
            let _ = web.write_all(scrapes.as_bytes()).await;
            held.push(web);
            held.push(tokio::net::TcpStream::connect(addrs.http).await.unwrap());
            if held.len() > 40 {
                held.drain(..4);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }));

    // The well-behaved client.
    let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
    let mut good = Raw::logged_in(addrs.stream, "iggy", "iggy").await;
    let mut events = event_support::client(&eddy).await;
    let ping = eddy_codec::stream::Request::Ping(eddy_codec::stream::commands::ping::Ping);
    let mut seq = 0u64;
    let mut worst = Duration::ZERO;
    while std::time::Instant::now() < deadline {
        let t = std::time::Instant::now();
        assert_eq!(good.call(&ping).await.code(), 0);
        seq += 1;
        let mut e = json_event(1, &serde_json::json!({"seq": seq})).unwrap();
        e.client_seq = seq;
        events
            .write_events(AggregateKey::new(7, 7, 7), vec![e], 3)
            .await
            .expect("an event write during the soak");
        let (status, _) = tokio::task::spawn_blocking(move || {
            eddy_tests::http_get(addrs.http, "/health").expect("/health during the soak")
        })
        .await
        .unwrap();
        assert_eq!(status, 200);
        worst = worst.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in hostile {
        task.await.unwrap();
    }
    assert!(seq > 0);
    assert!(
        worst < Duration::from_secs(3),
        "a round of the well-behaved client took {worst:?}"
    );

    // Every hostile connection is closed by the server's own limits (the sockets the tasks held
    // are dropped now; what remains open is the good client's).
    let settle = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, body) = tokio::task::spawn_blocking(move || {
            eddy_tests::http_get(addrs.http, "/metrics").expect("scrape")
        })
        .await
        .unwrap();
        let open = |p: &str| {
            eddy_tests::metric_value(&body, &format!("eddy_open_connections{{protocol=\"{p}\"}}"))
                .unwrap_or(-1.0)
        };
        let http = eddy_tests::metric_value(&body, "eddy_http_open_connections").unwrap_or(-1.0);
        if open("stream") <= 1.0 && open("event") <= 1.0 && http <= 1.0 {
            assert!(eddy_tests::metric_value(&body, "eddy_login_failures_total").unwrap() > 0.0);
            break;
        }
        assert!(
            std::time::Instant::now() < settle,
            "connections left open: stream {} event {} http {http}",
            open("stream"),
            open("event")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(good);
}
