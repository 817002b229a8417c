//! The `eddy` command line as a person or a script uses it: a real `eddy serve` process on
//! free ports in a temp dir, and the real binary run as a subprocess for every command (the
//! test package's `eddy-test-server` is the `eddy` entry point, built where cargo can hand its
//! path to these tests). Each command's happy path, its JSON parsed back, and its main error
//! with the exit code a script would branch on.
#![allow(clippy::too_many_lines)] // tests are exempt from the 100-line rule

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use eddy_tests::{pki, server_bin, Eddy, Options};
use serde_json::Value;

const USAGE: i32 = 2;
const CONNECTION: i32 = 3;
const AUTH: i32 = 4;
const REFUSED: i32 = 5;

/// The CLI pointed at one server, logged in as root unless told otherwise.
struct Cli {
    env: Vec<(String, String)>,
    _home: tempfile::TempDir,
}

impl Cli {
    fn new(eddy: &Eddy) -> Self {
        let a = eddy.addrs();
        let home = tempfile::tempdir().unwrap();
        Self {
            env: vec![
                ("EDDY_STREAM_ADDR".into(), a.stream.to_string()),
                ("EDDY_EVENT_ADDR".into(), a.client.to_string()),
                ("EDDY_HTTP_ADDR".into(), a.http.to_string()),
                ("EDDY_USERNAME".into(), "iggy".into()),
                ("EDDY_PASSWORD".into(), "iggy".into()),
                // No config file of the machine's user leaks in.
                ("HOME".into(), home.path().display().to_string()),
                ("XDG_CONFIG_HOME".into(), home.path().display().to_string()),
            ],
            _home: home,
        }
    }

    /// Without credentials in the environment.
    fn anonymous(mut self) -> Self {
        self.env
            .retain(|(k, _)| k != "EDDY_USERNAME" && k != "EDDY_PASSWORD");
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(server_bin!());
        cmd.args(args);
        for (k, _) in std::env::vars() {
            if k.starts_with("EDDY_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd
    }

    /// Starts the command with stdout and stderr piped, for commands that keep running.
    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the eddy binary runs")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("the eddy binary runs")
    }

    fn run_with_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs, asserts success, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "eddy {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs with `-o json`, asserts success, parses stdout.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: not JSON:\n{text}"))
    }

    /// Runs with `-o jsonl`, asserts success, parses each line.
    fn jsonl(&self, args: &[&str]) -> Vec<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "jsonl"]);
        self.ok(&all)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Runs, asserts the exit code, returns the one stderr line.
    fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "eddy {args:?}: stdout {} stderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }
}

fn server() -> Eddy {
    Eddy::start_with(
        server_bin!(),
        Options {
            args: vec!["--num-shards".into(), "2".into()],
            ..Options::default()
        },
    )
}

fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line, got: {stderr}");
    assert!(lines[0].starts_with("eddy: error: "), "{stderr}");
    lines[0]
}

#[test]
fn status_of_a_running_server_and_of_a_stopped_one() {
    let mut eddy = server();
    let cli = Cli::new(&eddy);
    let status = cli.json(&["status"]);
    assert_eq!(status["stream"], "ok");
    assert_eq!(status["events"], "ok");
    assert_eq!(status["health"], "ok");
    assert_eq!(status["event_shards"], 2);
    assert_eq!(status["role"], "single node");
    assert_eq!(status["peers"], 0);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert!(status["uptime"].as_u64().is_some(), "{status}");
    assert_eq!(status["server_pid"], eddy.pid());
    assert_eq!(status["streams"], 0);
    assert!(status["disk_total"].as_u64().unwrap() >= status["disk_free"].as_u64().unwrap());
    let human = cli.ok(&["status"]);
    assert!(
        human.contains("role:") && human.contains("single node"),
        "{human}"
    );

    // Without credentials: reachability only, and a hint.
    let anonymous = Cli::new(&eddy).anonymous();
    let status = anonymous.json(&["status"]);
    assert_eq!(status["stream"], "ok");
    assert!(status["stats"].as_str().unwrap().contains("log in"));

    eddy.stop(Duration::from_secs(30));
    let out = cli.run(&["status", "-o", "json"]);
    assert_eq!(out.status.code(), Some(CONNECTION));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["stream"], "down");
    assert_eq!(status["events"], "down");
    assert_eq!(status["health"], "unreachable");
    let line = cli.fails(&["stream", "list"], CONNECTION);
    assert!(
        one_line(&line).contains("cannot connect") && line.contains("eddy serve"),
        "{line}"
    );
}

/// `--replicated-durability memory` gives `durability = replicated` Iggy's meaning (page-cache
/// acks on a single node); an explicit `enforce_fsync` still decides, and `persisted` stays
/// fsynced.
#[test]
fn replicated_durability_memory_takes_iggys_meaning() {
    let eddy = Eddy::start_with(
        server_bin!(),
        Options {
            args: vec!["--replicated-durability".into(), "memory".into()],
            ..Options::default()
        },
    );
    let cli = Cli::new(&eddy);
    cli.ok(&["stream", "create", "s"]);
    for (topic, options, fsync) in [
        ("replicated", &["durability=replicated"][..], false),
        (
            "replicated-fsync",
            &["durability=replicated", "enforce_fsync=true"][..],
            true,
        ),
        ("persisted", &["durability=persisted"][..], true),
        ("unsaid", &[][..], true),
    ] {
        let mut args = vec!["topic", "create", "s", topic];
        for option in options {
            args.extend(["--option", option]);
        }
        cli.ok(&args);
        let got = cli.json(&["topic", "get", "s", topic]);
        assert_eq!(got["options"]["enforce_fsync"], fsync, "{topic}: {got}");
    }
}

/// A single node is a cluster of one: itself, up, holding no replicated group; a user without
/// `read_servers` is refused.
#[test]
fn cluster_status_of_a_single_node() {
    let eddy = server();
    let cli = Cli::new(&eddy);
    let members = cli.json(&["cluster", "status"]);
    assert_eq!(members.as_array().unwrap().len(), 1, "{members}");
    assert_eq!(members[0]["id"], 1);
    assert_eq!(members[0]["state"], "up");
    assert_eq!(members[0]["groups"], 0);
    assert_eq!(members[0]["tls"], false);
    assert_eq!(
        members[0]["address"],
        eddy.addrs().stream.to_string().as_str()
    );
    assert_eq!(
        cli.json(&["cluster", "status", "--groups"]),
        Value::Array(vec![])
    );
    cli.ok(&["user", "create", "reader", "reader-pass"]);
    let denied = cli.fails(
        &["cluster", "status", "-u", "reader", "-p", "reader-pass"],
        REFUSED,
    );
    assert!(denied.contains("Unauthorized (code 41)"), "{denied}");
}

#[test]
fn streams_topics_and_partitions() {
    let eddy = server();
    let cli = Cli::new(&eddy);
    assert_eq!(cli.json(&["stream", "list"]), Value::Array(vec![]));
    let created = cli.json(&["stream", "create", "orders"]);
    assert_eq!(created["name"], "orders");
    let topic = cli.json(&["topic", "create", "orders", "paid", "--partitions", "3"]);
    assert_eq!(topic["partitions"], 3);
    cli.ok(&[
        "topic",
        "create",
        "orders",
        "audit",
        "--no-fsync",
        "--message-expiry",
        "1h",
    ]);
    let streams = cli.json(&["stream", "list"]);
    assert_eq!(streams[0]["name"], "orders");
    assert_eq!(streams[0]["topics"], 2);
    let topics = cli.jsonl(&["topic", "list", "orders"]);
    let names: Vec<&str> = topics.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["paid", "audit"]);
    let audit = cli.json(&["topic", "get", "orders", "audit"]);
    assert_eq!(audit["options"]["enforce_fsync"], false);
    assert_eq!(audit["options"]["message_expiry"], 3_600_000_000_u64);
    // What every newer SDK sends by default: shown as asked, and acknowledged after fsync
    // all the same (only `enforce_fsync = false` gives page-cache acks).
    cli.ok(&[
        "topic",
        "create",
        "orders",
        "sdk-default",
        "--option",
        "durability=replicated",
    ]);
    let sdk_default = cli.json(&["topic", "get", "orders", "sdk-default"]);
    assert_eq!(sdk_default["options"]["durability"], "replicated");
    assert_eq!(sdk_default["options"]["enforce_fsync"], true);
    cli.ok(&["topic", "delete", "orders", "sdk-default"]);
    cli.ok(&["partition", "create", "orders", "paid", "2"]);
    assert_eq!(
        cli.json(&["topic", "get", "orders", "paid"])["partitions"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    cli.ok(&["partition", "delete", "orders", "paid", "4"]);
    let stream = cli.json(&["stream", "get", "0"]);
    assert_eq!(stream["topics"][0]["partitions"], 1, "{stream}");
    let human = cli.ok(&["stream", "list"]);
    assert!(human.starts_with("ID  NAME"), "{human}");

    // The main errors, each with its exit code and one line on stderr.
    let line = cli.fails(&["stream", "delete", "missing"], REFUSED);
    assert!(
        one_line(&line).contains("delete stream \"missing\""),
        "{line}"
    );
    let line = cli.fails(&["topic", "get", "orders", "missing"], REFUSED);
    assert!(one_line(&line).contains("not found"), "{line}");
    let line = cli.fails(&["stream", "create", "orders"], REFUSED);
    assert!(one_line(&line).contains("code"), "{line}");
    let line = cli.fails(&["stream", "list", "-p", "wrong"], AUTH);
    assert!(
        one_line(&line).contains("login as user \"iggy\" refused"),
        "{line}"
    );
    let anonymous = Cli::new(&eddy).anonymous();
    let line = anonymous.fails(&["stream", "list"], USAGE);
    assert!(one_line(&line).contains("no credentials"), "{line}");
    anonymous.fails(&["stream", "frobnicate"], USAGE);

    // Credentials from a config file; flags still win over it.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cli.toml");
    std::fs::write(&config, "username = \"iggy\"\npassword = \"iggy\"\n").unwrap();
    let path = config.display().to_string();
    assert_eq!(
        anonymous.json(&["stream", "list", "--config", &path])[0]["name"],
        "orders"
    );
    anonymous.fails(&["stream", "list", "--config", &path, "-p", "nope"], AUTH);
    std::fs::write(&config, "user = \"typo\"\n").unwrap();
    let line = anonymous.fails(&["stream", "list", "--config", &path], USAGE);
    assert!(line.contains("user"), "{line}");

    cli.ok(&["topic", "delete", "orders", "audit"]);
    cli.ok(&["stream", "delete", "orders"]);
    assert_eq!(cli.json(&["stream", "list"]), Value::Array(vec![]));
}

fn payloads(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m["payload"].as_str().unwrap())
        .collect()
}

#[test]
fn send_poll_and_tail() {
    let eddy = server();
    let cli = Cli::new(&eddy);
    cli.ok(&["stream", "create", "s"]);
    cli.ok(&["topic", "create", "s", "t", "--partitions", "2"]);

    // From arguments, with headers, to one partition.
    let sent = cli.json(&[
        "send",
        "s",
        "t",
        "a",
        "b",
        "c",
        "--partition",
        "0",
        "-H",
        "source=cli",
    ]);
    assert_eq!(sent[0]["partition"], 0);
    assert_eq!(sent[0]["first_offset"], 0);
    assert_eq!(sent[0]["messages"], 3);
    // From stdin lines, in two batches.
    let out = cli.run_with_stdin(
        &[
            "send",
            "s",
            "t",
            "--partition",
            "0",
            "--batch-size",
            "2",
            "-o",
            "json",
        ],
        "d\ne\n\nf\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batches: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(batches.as_array().unwrap().len(), 2);
    assert_eq!(batches[1]["first_offset"], 5);
    // From a file, by key: the same key always lands on the same partition.
    cli.ok(&["topic", "create", "s", "keyed", "--partitions", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("messages.txt");
    std::fs::write(&file, "k1\nk2\n").unwrap();
    let file = file.display().to_string();
    let keyed = cli.json(&["send", "s", "keyed", "--file", &file, "--key", "customer-7"]);
    let again = cli.json(&["send", "s", "keyed", "k3", "--key", "customer-7"]);
    assert_eq!(keyed[0]["partition"], again[0]["partition"]);
    let keyed_partition = keyed[0]["partition"].as_u64().unwrap().to_string();

    let all = cli.json(&["poll", "s", "t", "--first", "-n", "100"]);
    assert_eq!(
        payloads(all.as_array().unwrap()),
        ["a", "b", "c", "d", "e", "f"]
    );
    assert_eq!(all[0]["headers"]["source"], "cli");
    assert_eq!(all[5]["offset"], 5);
    let from = cli.jsonl(&["poll", "s", "t", "--offset", "4", "-n", "1"]);
    assert_eq!(payloads(&from), ["e"]);
    let last = cli.json(&["poll", "s", "t", "--last", "-n", "2"]);
    assert_eq!(payloads(last.as_array().unwrap()), ["e", "f"]);
    let keyed_poll = cli.json(&[
        "poll",
        "s",
        "keyed",
        "--partition",
        &keyed_partition,
        "-n",
        "5",
    ]);
    assert_eq!(payloads(keyed_poll.as_array().unwrap()), ["k1", "k2", "k3"]);
    let since = all[3]["timestamp"].as_u64().unwrap();
    let by_time = cli.json(&[
        "poll",
        "s",
        "t",
        "--timestamp",
        &since.to_string(),
        "-n",
        "100",
    ]);
    assert!(payloads(by_time.as_array().unwrap()).contains(&"f"));

    // A consumer's offset moves with --auto-commit, so --next continues.
    let billing = [
        "poll",
        "s",
        "t",
        "--consumer",
        "billing",
        "--next",
        "-n",
        "4",
        "--auto-commit",
    ];
    let first = cli.json(&billing);
    assert_eq!(payloads(first.as_array().unwrap()), ["a", "b", "c", "d"]);
    let next = cli.json(&billing);
    assert_eq!(payloads(next.as_array().unwrap()), ["e", "f"]);

    // A missing topic is a refusal.
    let line = cli.fails(&["poll", "s", "missing"], REFUSED);
    one_line(&line);
    cli.fails(&["send", "s", "t"], USAGE);

    // tail -f: the last messages, then what arrives while it follows.
    let mut tail = cli.spawn(&[
        "tail",
        "s",
        "t",
        "-f",
        "-n",
        "1",
        "--partition",
        "0",
        "--limit",
        "3",
        "-o",
        "jsonl",
        "--interval-ms",
        "50",
    ]);
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["payload"], "f");
    cli.ok(&["send", "s", "t", "--partition", "0", "g", "h"]);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let rest: Vec<Value> = rest
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(payloads(&rest), ["g", "h"]);
    assert!(wait(&mut tail).success(), "tail stops after --limit");
}

fn wait(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the child did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn consumer_groups_users_permissions_and_tokens() {
    let eddy = server();
    let cli = Cli::new(&eddy);
    cli.ok(&["stream", "create", "s"]);
    cli.ok(&["topic", "create", "s", "t"]);
    cli.ok(&["send", "s", "t", "one", "two"]);

    let users = cli.json(&["user", "list"]);
    assert_eq!(users[0]["username"], "iggy");
    let alice = cli.json(&[
        "user",
        "create",
        "alice",
        "s3cret-1",
        "--global",
        "read_streams,read_topics",
        "--stream",
        "s=poll_messages",
    ]);
    assert_eq!(alice["username"], "alice");
    let details = cli.json(&["user", "get", "alice"]);
    assert_eq!(
        details["permissions"]["global"],
        serde_json::json!(["read_streams", "read_topics"])
    );
    assert_eq!(
        details["permissions"]["streams"]["0"]["granted"],
        serde_json::json!(["poll_messages"])
    );

    // Alice may read and poll but not create.
    let mut as_alice = Cli::new(&eddy).anonymous();
    as_alice.env.push(("EDDY_USERNAME".into(), "alice".into()));
    as_alice
        .env
        .push(("EDDY_PASSWORD".into(), "s3cret-1".into()));
    assert_eq!(as_alice.json(&["stream", "list"])[0]["name"], "s");
    assert_eq!(
        payloads(as_alice.json(&["poll", "s", "t"]).as_array().unwrap()),
        ["one", "two"]
    );
    let line = as_alice.fails(&["stream", "create", "mine"], REFUSED);
    assert!(line.contains("Unauthorized"), "{line}");
    cli.ok(&["user", "permissions", "alice", "--global", "all"]);
    as_alice.ok(&["stream", "create", "mine"]);
    cli.ok(&[
        "user",
        "password",
        "alice",
        "--current",
        "s3cret-1",
        "--new",
        "s3cret-2",
    ]);
    as_alice.fails(&["stream", "list"], AUTH);

    // Groups: a member polls what it was assigned and commits it.
    create_group(&eddy, "s", "t", "workers");
    let polled = cli.json(&["poll", "s", "t", "--group", "workers", "--auto-commit"]);
    assert_eq!(payloads(polled.as_array().unwrap()), ["one", "two"]);
    let again = cli.json(&["poll", "s", "t", "--group", "workers", "--auto-commit"]);
    assert_eq!(
        again,
        Value::Array(vec![]),
        "the group's offset was committed"
    );
    cli.fails(&["poll", "s", "t", "--group", "nobody"], REFUSED);

    // Tokens: created once, listed by name, usable to log in, deleted.
    let token = cli.json(&["token", "create", "deploy", "--expiry", "3600"]);
    let secret = token["token"].as_str().unwrap().to_owned();
    let listed = cli.json(&["token", "list"]);
    assert_eq!(listed[0]["name"], "deploy");
    assert!(listed[0]["expires"].as_u64().unwrap() > 0);
    let mut by_token = Cli::new(&eddy).anonymous();
    by_token.env.push(("EDDY_TOKEN".into(), secret.clone()));
    assert_eq!(by_token.json(&["stream", "list"])[0]["name"], "s");
    cli.ok(&["token", "delete", "deploy"]);
    let line = by_token.fails(&["stream", "list"], AUTH);
    assert!(one_line(&line).contains("access token"), "{line}");

    cli.ok(&["user", "delete", "alice"]);
    cli.fails(&["user", "get", "alice"], REFUSED);
}

/// Consumer groups are created through the published SDK here (the CLI joins existing ones).
fn create_group(eddy: &Eddy, stream: &str, topic: &str, group: &str) {
    use iggy::prelude::*;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = IggyClient::builder()
            .with_tcp()
            .with_server_address(eddy.addrs().stream.to_string())
            .with_reconnection_max_retries(Some(0))
            .build()
            .unwrap();
        client.connect().await.unwrap();
        client.login_user("iggy", "iggy").await.unwrap();
        client
            .create_consumer_group(
                &Identifier::named(stream).unwrap(),
                &Identifier::named(topic).unwrap(),
                group,
            )
            .await
            .unwrap();
    });
}

#[test]
fn events_write_read_occ_lists_schemas_and_watch() {
    let eddy = server();
    let cli = Cli::new(&eddy);

    // watch first, so it sees the writes below.
    let mut watch = cli.spawn(&[
        "events", "watch", "--org", "1", "--ops", "write", "--limit", "2", "-o", "jsonl",
    ]);
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut ready = String::new();
    BufReader::new(watch.stderr.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("watching 2 shard(s)"), "{ready}");

    let written = cli.json(&[
        "events",
        "write",
        "1/2/3",
        "{\"amount\":10}",
        "{\"amount\":5}",
        "--event-type",
        "7",
    ]);
    assert_eq!(written["version"], 1);
    assert_eq!(written["events"], 2);
    let out = cli.run_with_stdin(
        &[
            "events",
            "write",
            "1/2/3",
            "--event-type",
            "8",
            "--expected-version",
            "1",
            "-o",
            "json",
        ],
        "{\"n\":1}\n{\"n\":2}\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["version"],
        2
    );
    // Both writes reach the watcher, in version order for one aggregate.
    let mut versions = Vec::new();
    for _ in 0..2 {
        let line = watched.next().expect("a watch line").unwrap();
        let push: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(push["aggregate"], "1/2/3");
        assert_eq!(push["operation"], "write");
        versions.push(push["to_version"].as_u64().unwrap());
    }
    assert_eq!(versions, [1, 2]);
    assert!(wait(&mut watch).success());

    // OCC: a stale expected version is refused with the server's code and context.
    let line = cli.fails(
        &["events", "write", "1/2/3", "{}", "--expected-version", "1"],
        REFUSED,
    );
    assert!(
        one_line(&line).contains("2003") && line.contains("\"current_aggregate_version\":2"),
        "{line}"
    );
    // Idempotency: a repeated key is refused, a higher one accepted.
    cli.ok(&[
        "events",
        "write",
        "1/2/3",
        "{\"try\":1}",
        "--idempotency-key",
        "10",
        "--client-id",
        "42",
    ]);
    let line = cli.fails(
        &[
            "events",
            "write",
            "1/2/3",
            "{\"try\":2}",
            "--idempotency-key",
            "10",
            "--client-id",
            "42",
        ],
        REFUSED,
    );
    assert!(line.contains("2002"), "{line}");
    assert_eq!(
        cli.json(&[
            "events",
            "write",
            "1/2/3",
            "{\"try\":3}",
            "--idempotency-key",
            "11",
            "--client-id",
            "42"
        ])["version"],
        4
    );

    let events = cli.json(&["events", "read", "1/2/3"]);
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 6);
    assert_eq!(events[0]["payload"]["amount"], 10);
    assert_eq!(events[0]["type"], "7.0");
    assert_eq!(events[3]["version"], 2);
    assert_eq!(events[3]["payload"]["n"], 2);
    let filtered = cli.jsonl(&[
        "events",
        "read",
        "1/2/3",
        "--from",
        "2",
        "--to",
        "2",
        "--event-types",
        "8",
    ]);
    assert_eq!(filtered.len(), 2);
    assert_eq!(
        cli.jsonl(&["events", "read", "1/2/3", "--limit", "3"])
            .len(),
        3
    );
    let details = cli.json(&["events", "details", "1/2/3"]);
    assert_eq!(details["max_version"], 4);
    assert_eq!(details["max_event_seq"], 6);
    assert_eq!(details["deleted"], false);
    cli.fails(&["events", "read", "9/9/9"], REFUSED);
    cli.fails(&["events", "read", "not-a-key"], USAGE);
    cli.fails(&["events", "write", "1/2/3", "{not json"], USAGE);

    cli.ok(&["events", "write", "2/5/8", "{}"]);
    let orgs = cli.json(&["events", "orgs"]);
    assert_eq!(orgs, serde_json::json!([{"org": "1"}, {"org": "2"}]));
    let types = cli.json(&["events", "types", "--org", "2"]);
    assert_eq!(types, serde_json::json!([{"org": "2", "type": "5"}]));
    let aggregates = cli.json(&["events", "aggregates"]);
    let keys: Vec<&str> = aggregates
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["aggregate"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["1/2/3", "2/5/8"]);

    // Schemas validate later writes of their event type.
    cli.ok(&[
        "events",
        "schema",
        "register",
        "1",
        "2",
        "9",
        "{\"type\":\"object\",\"required\":[\"x\"]}",
    ]);
    cli.ok(&["events", "write", "1/2/3", "{\"x\":1}", "-t", "9"]);
    let line = cli.fails(
        &["events", "write", "1/2/3", "{\"y\":1}", "-t", "9"],
        REFUSED,
    );
    assert!(line.contains("2022"), "{line}");

    cli.ok(&["events", "trim", "1/2/3", "3"]);
    assert_eq!(cli.json(&["events", "details", "1/2/3"])["min_version"], 3);
    cli.ok(&["events", "delete", "2/5/8"]);
    assert_eq!(cli.json(&["events", "details", "2/5/8"])["deleted"], true);
    assert_eq!(
        cli.json(&["events", "aggregates"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        cli.json(&["events", "aggregates", "--include-deleted"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn tls_with_a_ca_file_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::generate(dir.path());
    let path = |p: &std::path::Path| p.display().to_string();
    let eddy = Eddy::start_with(
        server_bin!(),
        Options {
            args: vec![
                "--tls-mode".into(),
                "strict".into(),
                "--tls-cert".into(),
                path(&pki.server_cert),
                "--tls-key".into(),
                path(&pki.server_key),
                "--tls-ca-cert".into(),
                path(&pki.ca_cert),
            ],
            ..Options::default()
        },
    );
    let cli = Cli::new(&eddy);
    let (ca, cert, key) = (
        path(&pki.ca_cert),
        path(&pki.client_cert),
        path(&pki.client_key),
    );
    let tls = [
        "--tls-ca-file",
        ca.as_str(),
        "--tls-server-name",
        "localhost",
        "--tls-client-cert",
        cert.as_str(),
        "--tls-client-key",
        key.as_str(),
    ];
    let mut args = vec!["stream", "create", "secure"];
    args.extend(tls);
    cli.ok(&args);
    let mut args = vec!["events", "write", "1/1/1", "{}"];
    args.extend(tls);
    cli.ok(&args);
    let mut args = vec!["status"];
    args.extend(tls);
    assert_eq!(cli.json(&args)["streams"], 1);

    // The default (plaintext) cannot talk to a TLS port; nor can a client without its
    // certificate when the server requires one.
    cli.fails(&["stream", "list", "--timeout", "3"], CONNECTION);
    let line = cli.fails(
        &[
            "stream",
            "list",
            "--tls-ca-file",
            &ca,
            "--tls-server-name",
            "localhost",
        ],
        CONNECTION,
    );
    one_line(&line);
    let line = cli.fails(&["stream", "list", "--tls"], USAGE);
    assert!(line.contains("--tls-ca-file"), "{line}");
}
