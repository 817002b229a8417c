//! `eddy status`: is the server up, what is it, how full is it.
//!
//! Sources, all the server's own: `PING` on the stream port (before login) and a list request
//! on the event port (whose routing refusal names the shard count), `GET_STATS` and
//! `GET_CLUSTER_METADATA` once logged in, and `/health` and `/metrics` on the HTTP port. The
//! role and peers come from `/metrics` (`eddy_cluster_role{role=...}`, `eddy_cluster_peers`)
//! when the server publishes them, else from the cluster metadata: one node is "single node".

use std::io::Write;
use std::time::Instant;

use clap::Args;
use eddy_client::{EventClient, StreamClient};
use eddy_codec::stream::commands::get_cluster_metadata::{ClusterMetadata, ROLE_LEADER};
use eddy_codec::stream::commands::get_stats::Stats;
use serde_json::{json, Value};

use crate::conn::{login, ConnArgs, Settings};
use crate::error::CtlError;
use crate::http;
use crate::output::{self, print_record, Format, Record};

/// Arguments of `eddy status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// What was learnt; `None` where a source did not answer.
#[derive(Debug)]
struct Findings {
    stream_ping: Result<f64, String>,
    event_ping: Result<(f64, u64), String>,
    health: Result<(u16, String), String>,
    metrics: Option<String>,
    stats: Option<Result<Stats, String>>,
    cluster: Option<ClusterMetadata>,
}

/// A non-negative float of seconds, truncated (uptimes are far below 2^53).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn whole_seconds(secs: f64) -> u64 {
    secs.max(0.0) as u64
}

fn millis(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e6).round() / 1e3
}

async fn probe(settings: &Settings) -> Findings {
    let mut found = Findings {
        stream_ping: Err(String::new()),
        event_ping: Err(String::new()),
        health: Err(String::new()),
        metrics: None,
        stats: None,
        cluster: None,
    };
    let started = Instant::now();
    match StreamClient::connect(&settings.stream_addr, &settings.connect).await {
        Ok(mut client) => {
            found.stream_ping = client
                .ping()
                .await
                .map(|()| millis(started))
                .map_err(|e| e.one_line());
            if let (Ok(_), Some(credentials)) = (&found.stream_ping, &settings.credentials) {
                match login(&mut client, credentials).await {
                    Ok(()) => {
                        found.stats = Some(client.stats().await.map_err(|e| e.one_line()));
                        found.cluster = client.cluster_metadata().await.ok();
                    }
                    Err(e) => found.stats = Some(Err(e.one_line())),
                }
            }
        }
        Err(e) => found.stream_ping = Err(e.one_line()),
    }
    let started = Instant::now();
    found.event_ping = match EventClient::connect(&settings.event_addr, &settings.connect).await {
        Ok(mut client) => client
            .num_shards()
            .await
            .map(|shards| (millis(started), shards))
            .map_err(|e| e.one_line()),
        Err(e) => Err(e.one_line()),
    };
    let timeout = settings.connect.request_timeout;
    found.health = http::get(&settings.http_addr, "/health", timeout)
        .await
        .map(|(code, body)| (code, body.trim().to_owned()))
        .map_err(|e| e.one_line());
    found.metrics = http::get(&settings.http_addr, "/metrics", timeout)
        .await
        .ok()
        .filter(|(code, _)| *code == 200)
        .map(|(_, body)| body);
    found
}

fn role_and_peers(found: &Findings) -> (Value, Value) {
    if let Some(metrics) = &found.metrics {
        if let Some(role) = http::metric_label(metrics, "eddy_cluster_role", "role") {
            let peers =
                http::metric(metrics, "eddy_cluster_peers", "").map_or(Value::Null, |p| json!(p));
            return (json!(role), peers);
        }
    }
    match &found.cluster {
        Some(cluster) if cluster.nodes.0.len() <= 1 => (json!("single node"), json!(0)),
        Some(cluster) => {
            let leader = cluster
                .nodes
                .0
                .iter()
                .find(|n| n.role == ROLE_LEADER)
                .map_or_else(String::new, |n| n.name.0.clone());
            (
                json!(format!("cluster {} (leader {leader})", cluster.name.0)),
                json!(cluster.nodes.0.len() - 1),
            )
        }
        None => (Value::Null, Value::Null),
    }
}

fn build(settings: &Settings, found: &Findings, human: bool) -> Record {
    let mut r = Record::new().field("stream_addr", settings.stream_addr.clone());
    r = match &found.stream_ping {
        Ok(ms) => r
            .field("stream", port_up(human, *ms))
            .field("stream_ping_ms", *ms),
        Err(e) => r
            .field("stream", port_down(human, e))
            .field("stream_error", e.clone()),
    };
    r = r.field("event_addr", settings.event_addr.clone());
    r = match &found.event_ping {
        Ok((ms, shards)) => r
            .field("events", port_up(human, *ms))
            .field("event_ping_ms", *ms)
            .field("event_shards", *shards),
        Err(e) => r
            .field("events", port_down(human, e))
            .field("event_error", e.clone()),
    };
    r = r.field("http_addr", settings.http_addr.clone());
    r = match &found.health {
        Ok((200, body)) => r.field("health", body.clone()),
        Ok((code, body)) => r.field("health", format!("{body} (HTTP {code})")),
        Err(e) => r.field(
            "health",
            if human {
                format!("unreachable: {e}")
            } else {
                "unreachable".into()
            },
        ),
    };
    r = with_version_and_uptime(r, found, human);
    let (role, peers) = role_and_peers(found);
    r = r.field("role", role).field("peers", peers);
    let metrics = found.metrics.as_deref().unwrap_or("");
    if let Some(tls) = http::metric(metrics, "eddy_cluster_peer_tls", "") {
        r = r.field(
            "replication",
            if tls >= 1.0 {
                "mutual TLS"
            } else {
                "PLAINTEXT, unauthenticated (--insecure-peer-plaintext)"
            },
        );
    }
    with_stats(r, found.stats.as_ref(), human)
}

/// A reachable port's state: `ok`, with the ping time when `human`.
fn port_up(human: bool, ms: f64) -> Value {
    if human {
        json!(format!("ok ({ms} ms)"))
    } else {
        json!("ok")
    }
}

/// An unreachable port's state: `down`, with the error when `human`.
fn port_down(human: bool, error: &str) -> Value {
    if human {
        json!(format!("down: {error}"))
    } else {
        json!("down")
    }
}

/// Adds the server's version and uptime: from the metrics when the HTTP port answered,
/// else from the stats (when logged in); null when neither says.
fn with_version_and_uptime(r: Record, found: &Findings, human: bool) -> Record {
    let metrics = found.metrics.as_deref().unwrap_or("");
    let stats = found.stats.as_ref().and_then(|s| s.as_ref().ok());
    let version = http::metric_label(metrics, "eddy_build_info", "version")
        .or_else(|| stats.map(|s| s.iggy_server_version.0.clone()));
    let uptime = http::metric(metrics, "eddy_uptime_seconds", "")
        .map(whole_seconds)
        .or_else(|| stats.map(|s| s.run_time / 1_000_000));
    r.field("version", version.map_or(Value::Null, Value::String))
        .field(
            "uptime",
            match uptime {
                Some(s) if human => json!(output::duration(s)),
                Some(s) => json!(s),
                None => Value::Null,
            },
        )
}

/// Adds the server's stats (sizes readable when `human`), or why there are none: they
/// failed, or nobody logged in.
fn with_stats(r: Record, stats: Option<&Result<Stats, String>>, human: bool) -> Record {
    let size = |n: u64| {
        if human {
            json!(output::bytes(n))
        } else {
            json!(n)
        }
    };
    match stats {
        Some(Ok(s)) => r
            .field("server_pid", s.process_id)
            .field("streams", s.streams_count)
            .field("topics", s.topics_count)
            .field("partitions", s.partitions_count)
            .field("messages", s.messages_count)
            .field("messages_size", size(s.messages_size_bytes))
            .field("clients", s.clients_count)
            .field("memory", size(s.memory_usage))
            .field("disk_free", size(s.free_disk_space))
            .field("disk_total", size(s.total_disk_space)),
        Some(Err(e)) => r.field("stats", format!("unavailable: {e}")),
        None => r.field(
            "stats",
            "log in (--username/--password or --token) for stats and storage use",
        ),
    }
}

/// Runs `eddy status`; exits with the connection code when a protocol port is down.
pub async fn run(args: &StatusArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let found = probe(&settings).await;
    let record = build(&settings, &found, settings.format == Format::Table);
    print_record(out, settings.format, &record).map_err(CtlError::Output)?;
    let down: Vec<&str> = [
        found.stream_ping.is_err().then_some("stream"),
        found.event_ping.is_err().then_some("event"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if down.is_empty() {
        Ok(())
    } else {
        Err(CtlError::Down(down.join(" and ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::ConfigFile;
    use crate::error::EXIT_CONNECTION;

    #[test]
    fn a_server_without_cluster_metrics_is_a_single_node() {
        let found = Findings {
            stream_ping: Ok(0.5),
            event_ping: Ok((0.4, 2)),
            health: Ok((200, "ok".into())),
            metrics: Some(
                "eddy_build_info{version=\"9.9.9\"} 1\neddy_uptime_seconds 3700.2\n".into(),
            ),
            stats: None,
            cluster: Some(ClusterMetadata {
                name: eddy_codec::stream::codec::LongString::new("single-node"),
                nodes: eddy_codec::stream::codec::Counted(vec![]),
            }),
        };
        let settings = ConnArgs::default()
            .resolve_with(&ConfigFile::default())
            .unwrap();
        let json = build(&settings, &found, false).to_json();
        assert_eq!(json["role"], "single node");
        assert_eq!(json["version"], "9.9.9");
        assert_eq!(json["uptime"], 3700);
        assert_eq!(json["event_shards"], 2);
        let human = build(&settings, &found, true).to_json();
        assert_eq!(human["uptime"], "1h 1m 40s");
        assert_eq!(human["stream"], "ok (0.5 ms)");
        let clustered = Findings {
            metrics: Some("eddy_cluster_role{role=\"follower\"} 1\neddy_cluster_peers 2\n".into()),
            ..found
        };
        let json = build(&settings, &clustered, false).to_json();
        assert_eq!(json["role"], "follower");
        assert_eq!(json["peers"], 2.0);
        assert!(json.get("replication").is_none(), "{json}");
        let mut member = clustered;
        for (metric, shown) in [
            ("eddy_cluster_peer_tls 1\n", "mutual TLS"),
            ("eddy_cluster_peer_tls 0\n", "PLAINTEXT"),
        ] {
            member.metrics = Some(metric.into());
            let json = build(&settings, &member, false).to_json();
            assert!(
                json["replication"].as_str().unwrap().contains(shown),
                "{json}"
            );
        }
    }

    #[test]
    fn exit_code_of_a_down_server() {
        assert_eq!(CtlError::Down("stream".into()).exit_code(), EXIT_CONNECTION);
    }
}
