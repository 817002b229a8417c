//! The `eddy` command line for people: every subcommand of the `eddy` binary except `serve`.
//!
//! - `eddy status`: is the server up, its version, uptime, role, storage use.
//! - Streams (Iggy protocol): `stream`, `topic`, `partition`, `send`, `poll`, `tail`, `user`,
//!   `token`.
//! - Cluster operators: `cluster certs` (the members' certificates for the replication port),
//!   `cluster status` (members, roles, groups led, lag).
//! - Events (Celeriant protocol): `events write|read|details|trim|delete|orgs|types|aggregates|
//!   watch|schema`.
//!
//! Every client subcommand talks through [`eddy_client`], which is built only on eddy's own
//! protocol crates. The binary adds [`Command`] to its clap tree (`#[command(flatten)]`) and
//! calls [`run`].
//!
//! Output goes to stdout (a table, or `--output json|jsonl`), errors to stderr as one line;
//! the exit code says what kind of failure it was ([`error::EXIT_CODES_HELP`]).
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod bench;
pub mod cluster;
pub mod cluster_change;
pub mod cluster_status;
pub mod conn;
pub mod error;
pub mod events;
pub mod http;
pub mod input;
pub mod output;
pub mod status;
pub mod streams;

use std::io::Write;
use std::process::ExitCode;

use clap::Subcommand;

pub use error::{CtlError, EXIT_CODES_HELP};

const CONNECTION_HELP: &str =
    "Connection: --addr HOST (all ports), or --stream-addr / --event-addr / --http-addr
HOST:PORT; credentials from --username/--password (EDDY_USERNAME/EDDY_PASSWORD), --token
(EDDY_TOKEN) or a TOML config file (--config, EDDY_CLI_CONFIG, ~/.config/eddy/cli.toml);
TLS with --tls-ca-file (and --tls-client-cert/--tls-client-key for mTLS).";

/// A subcommand's long help: what it does, examples, the connection flags, the exit codes.
fn help(about: &str, examples: &str) -> String {
    format!("{about}\n\n{examples}\n\n{CONNECTION_HELP}\n\n{EXIT_CODES_HELP}")
}

/// The client subcommands of `eddy`.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Show whether the server is up: both ports, health, version, uptime, role, storage.
    #[command(long_about = help(
        "Show whether the server is up: ping both protocol ports, /health, version, uptime, role
and peers (\"single node\" today), and, when logged in, stream counts and storage use.",
        "Examples:
  eddy status
  eddy status -u iggy -p iggy
  eddy status --addr 10.0.0.5 -o json"
    ))]
    Status(status::StatusArgs),
    /// List, show, create and delete streams.
    #[command(long_about = help(
        "List, show, create and delete streams (stream protocol).",
        "Examples:
  eddy stream list
  eddy stream create orders
  eddy stream get orders -o json
  eddy stream delete orders"
    ))]
    Stream(streams::StreamArgs),
    /// List, show, create and delete topics.
    #[command(long_about = help(
        "List, show, create and delete the topics of a stream.",
        "Examples:
  eddy topic list orders
  eddy topic create orders paid --partitions 3
  eddy topic create orders audit --message-expiry 7d --no-fsync
  eddy topic get orders paid
  eddy topic delete orders paid"
    ))]
    Topic(streams::TopicArgs),
    /// Add or remove partitions of a topic.
    #[command(long_about = help(
        "Add partitions to a topic, or remove its highest ones (with their messages).",
        "Examples:
  eddy partition create orders paid 2
  eddy partition delete orders paid 1"
    ))]
    Partition(streams::PartitionArgs),
    /// Send messages to a topic (arguments, stdin lines or a file).
    #[command(long_about = help(
        "Send messages to a topic: each argument is a message; without arguments each line of
stdin (or of --file) is one. Balanced over partitions unless --partition or --key is given.",
        "Examples:
  eddy send orders paid 'order 1' 'order 2'
  eddy send orders paid --key customer-7 -H source=cli 'order 3'
  seq 1 1000 | eddy send orders paid --partition 0"
    ))]
    Send(streams::SendArgs),
    /// Read messages from a topic once.
    #[command(long_about = help(
        "Read messages from a topic partition: from an offset, a timestamp, the first, the last,
or after the consumer's stored offset; as a consumer or as a member of a consumer group,
optionally storing the new offset (--auto-commit).",
        "Examples:
  eddy poll orders paid --first -n 100
  eddy poll orders paid --partition 1 --offset 42
  eddy poll orders paid --consumer billing --next --auto-commit -o jsonl
  eddy poll orders paid --group billing -n 50 --auto-commit"
    ))]
    Poll(streams::PollArgs),
    /// Print the last messages of a topic, and with -f keep following.
    #[command(long_about = help(
        "Print the last messages of each partition of a topic; with -f keep printing new ones as
they arrive (one line, or one JSON object with -o jsonl, per message). Ctrl-C stops.",
        "Examples:
  eddy tail orders paid
  eddy tail orders paid -f -n 0
  eddy tail orders paid -f -o jsonl --limit 100"
    ))]
    Tail(streams::TailArgs),
    /// Users and their permissions.
    #[command(long_about = help(
        "List, show, create and delete users; change passwords; replace permissions.",
        "Examples:
  eddy user list
  eddy user create alice s3cret --global read_streams --stream orders=poll_messages,send_messages
  eddy user permissions alice --topic orders/paid=all
  eddy user password alice --current s3cret --new n3w-s3cret
  eddy user delete alice"
    ))]
    User(streams::UserArgs),
    /// Personal access tokens of the logged-in user.
    #[command(long_about = help(
        "Create, list and delete your personal access tokens. A token is printed once, at
creation; log in with it with --token (or EDDY_TOKEN).",
        "Examples:
  eddy token create ci-deploy --expiry 86400
  eddy token list
  EDDY_TOKEN=... eddy stream list
  eddy token delete ci-deploy"
    ))]
    Token(streams::TokenArgs),
    /// Event store: write, read, details, trim, delete, lists, watch, schemas.
    #[command(long_about = help(
        "The event store (Celeriant protocol). Aggregates are ORG/TYPE/ID; payloads are JSON.",
        "Examples:
  eddy events write 1/2/3 '{\"amount\":10}' --event-type 7 --expected-version 0
  eddy events read 1/2/3 -o jsonl
  eddy events details 1/2/3
  eddy events aggregates --org 1
  eddy events watch --org 1"
    ))]
    Events(events::EventsArgs),
    /// Load benchmarks with a live progress bar, a summary, a JSON result and an HTML report.
    #[command(long_about = help(
        "Benchmarks: `streams` (producers then consumers, durable and not, against the raw disk),
`events` (N connections writing one event per request, plain and OCC, against the network
floor and PostgreSQL), `compare` (two result files side by side). A server is started from
this binary (or --server PATH) in a temp directory unless --running is given. Progress goes
to stderr, the summary to stdout, result.json and report.html (throughput over time, latency
percentiles) to --out.",
        "Examples:
  eddy bench streams --producers 4 --batches 200
  eddy bench events --connections 100,1000 --seconds 10 --floor --pg
  eddy bench events --compare ./eddy-before --repeat 3
  eddy bench compare eddy-bench/events-1/result.json eddy-bench/events-2/result.json"
    ))]
    Bench(bench::BenchArgs),
    /// Cluster operations: `certs` writes the members' replication-port certificates,
    /// `status` shows the members, their roles and lag, `add`/`remove`/`replace` change them.
    #[command(long_about = help(
        "Cluster operations. `certs` writes a cluster CA (ca.pem, ca.key) and a certificate and
key per member (node-N.pem, node-N.key) naming its node id, for the replication port's
mutual TLS (--peer-tls-cert, --peer-tls-key, --peer-tls-ca of `eddy serve`). Keys are written
0600; existing files are kept unless --force. With --ca-cert/--ca-key it signs with an
existing CA: how a member's certificate is renewed, or a new member's issued. It runs
locally: no server is contacted.
`status` asks the member it connects to what it knows of the cluster (EDDY_CLUSTER_STATUS,
which needs the read_servers permission), then every member that one names, with the same
credentials: each member's state, its role in the metadata group and term, the groups it
holds and leads, and its lag (the most entries any group's leader reports it behind). With
--groups it lists every group instead: leader, term, commit index, replicas and their lag.
A single node is a cluster of one.
`add ID=HOST:PORT` adds a member (start it with `eddy serve --node-id ID --join --peer ...`):
a learner on every group, a voter once caught up; `remove ID` takes one out of every group;
`replace OLD NEW=HOST:PORT` adds the new member, then removes the old. They need the
manage_servers permission, go to the metadata leader and return once the change is complete.",
        "Examples:
  eddy cluster certs --out ./certs --nodes 1,2,3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3
  eddy cluster certs --out ./certs --nodes 2 --ca-cert certs/ca.pem --ca-key certs/ca.key --force
  eddy cluster status --addr 10.0.0.1 --username root
  eddy cluster status --groups -o json
  eddy cluster add 4=10.0.0.4:10001 --addr 10.0.0.1 --username root
  eddy cluster replace 1 5=10.0.0.5:10001 --addr 10.0.0.2 --username root"
    ))]
    Cluster(cluster::ClusterArgs),
}

/// Runs a subcommand, printing its output to stdout and its error (one line) to stderr;
/// returns the process exit code.
pub fn run(command: &Command) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = execute(command, &mut out);
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eddy: error: {}", e.one_line());
            ExitCode::from(e.exit_code())
        }
    }
}

/// Runs a subcommand, writing its output to `out`. Client commands run on a small runtime of
/// their own; `bench` sizes its runtimes itself.
pub fn execute(command: &Command, out: &mut dyn Write) -> Result<(), CtlError> {
    match command {
        Command::Bench(args) => return bench::run(args, out),
        Command::Cluster(args) if !cluster::needs_server(args) => return cluster::run(args, out),
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CtlError::Failed(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(async {
        match command {
            Command::Status(args) => status::run(args, out).await,
            Command::Stream(args) => streams::stream(args, out).await,
            Command::Topic(args) => streams::topic(args, out).await,
            Command::Partition(args) => streams::partition(args, out).await,
            Command::Send(args) => streams::send(args, out).await,
            Command::Poll(args) => streams::poll(args, out).await,
            Command::Tail(args) => streams::tail(args, out).await,
            Command::User(args) => streams::user(args, out).await,
            Command::Token(args) => streams::token(args, out).await,
            Command::Events(args) => events::run(args, out).await,
            Command::Bench(args) => bench::run(args, out),
            Command::Cluster(args) => cluster::run_remote(args, out).await,
        }
    });
    // Watch and tail tasks may still be blocked on sockets: do not wait for them.
    runtime.shutdown_background();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A stand-in for the binary's top-level parser.
    #[derive(Debug, Parser)]
    #[command(name = "eddy")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("eddy").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn the_tree_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_documents_exit_codes_and_examples() {
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            let about = sub
                .get_long_about()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(
                about.contains(EXIT_CODES_HELP),
                "{} --help lacks the exit codes",
                sub.get_name()
            );
            assert!(
                about.contains(CONNECTION_HELP),
                "{} --help lacks the connection help",
                sub.get_name()
            );
            assert!(
                about.contains("Examples:"),
                "{} --help lacks examples",
                sub.get_name()
            );
        }
    }

    #[test]
    fn connection_flags_go_anywhere_in_the_line() {
        let Command::Stream(a) =
            parse(&["stream", "list", "--stream-addr", "h:1", "-o", "json"]).unwrap()
        else {
            panic!("stream");
        };
        assert_eq!(a.conn.stream_addr.as_deref(), Some("h:1"));
        assert_eq!(a.conn.output, output::Format::Json);
        let Command::Stream(a) = parse(&["stream", "-u", "x", "-p", "y", "create", "s"]).unwrap()
        else {
            panic!("stream");
        };
        assert_eq!(a.conn.username.as_deref(), Some("x"));
        assert!(matches!(a.command, streams::StreamCommand::Create { ref name } if name == "s"));
    }

    #[test]
    fn usage_errors_are_clap_errors() {
        assert!(parse(&["stream"]).is_err(), "a subcommand is required");
        assert!(
            parse(&["poll", "s", "t", "--first", "--last"]).is_err(),
            "one strategy"
        );
        assert!(parse(&["send", "s", "t", "--partition", "1", "--key", "k"]).is_err());
        assert!(parse(&["events", "read"]).is_err(), "the key is required");
        assert!(parse(&["stream", "list", "-o", "xml"]).is_err());
        let e = parse(&["bogus"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    /// Checks that no argument below `c` reuses the id of a global argument of `c` or of
    /// its ancestors (`inherited`).
    fn walk(c: &clap::Command, inherited: &[String]) {
        let mut globals = inherited.to_vec();
        globals.extend(
            c.get_arguments()
                .filter(|a| a.is_global_set())
                .map(|a| a.get_id().to_string()),
        );
        for sub in c.get_subcommands() {
            for a in sub.get_arguments().filter(|a| !a.is_global_set()) {
                assert!(
                    !globals.contains(&a.get_id().to_string()),
                    "{} shadows the global --{}",
                    sub.get_name(),
                    a.get_id()
                );
            }
            walk(sub, &globals);
        }
    }

    #[test]
    fn subcommand_arguments_never_shadow_the_connection_flags() {
        let Command::User(u) = parse(&["user", "create", "alice", "pw1", "-u", "root"]).unwrap()
        else {
            panic!("user");
        };
        assert_eq!(u.conn.username.as_deref(), Some("root"));
        assert!(
            matches!(u.command, streams::UserCommand::Create { ref name, .. } if name == "alice")
        );
        // Every argument id of every subcommand is distinct from the global ones above it.
        let cmd = Cli::command();
        walk(&cmd, &[]);
    }

    #[test]
    fn poll_and_send_arguments() {
        let Command::Poll(p) = parse(&[
            "poll",
            "orders",
            "paid",
            "--offset",
            "5",
            "-n",
            "3",
            "--auto-commit",
        ])
        .unwrap() else {
            panic!("poll");
        };
        assert_eq!((p.offset, p.count, p.auto_commit), (Some(5), 3, true));
        let Command::Send(s) = parse(&[
            "send", "orders", "paid", "a", "b", "-H", "k=v", "--key", "c",
        ])
        .unwrap() else {
            panic!("send");
        };
        assert_eq!(s.messages, ["a", "b"]);
        assert_eq!(s.headers, ["k=v"]);
        let Command::Events(e) =
            parse(&["events", "write", "1/2/3", "{}", "--expected-version", "0"]).unwrap()
        else {
            panic!("events");
        };
        let events::EventsCommand::Write(w) = e.command else {
            panic!("write");
        };
        assert_eq!(w.expected_version, Some(0));
    }
}
