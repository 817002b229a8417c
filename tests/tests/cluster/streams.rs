//! A three-node cluster of real `eddy serve` processes on loopback (127.0.0.1-3), driven by
//! the published Iggy SDK: a client that logs in on a follower is moved to the leader, the
//! leader gets SIGKILL while producers send, a new leader takes over, the killed node
//! restarts and catches up, a follower whose data directory was wiped is rebuilt from its
//! peers, the two of them then carry the cluster, and every acknowledged batch is there
//! exactly once, in order, at contiguous offsets. An operator's `DELETE_SEGMENTS` cuts every
//! member at the same offset.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::cluster_support::{start_cluster, within, Node};
use crate::stream_support::{id, sized_messages};
use eddy_tests::{http_get, metric_value};
use iggy::prelude::*;

/// An SDK client logged in as root through `addr` (the SDK moves to the leader it finds),
/// retried until the cluster has elected a leader and created the root user.
async fn client_via(addr: SocketAddr) -> IggyClient {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let client = IggyClient::builder()
            .with_tcp()
            .with_server_address(addr.to_string())
            .with_reconnection_max_retries(Some(0))
            .build()
            .expect("client builds");
        if client.connect().await.is_ok() && client.login_user("iggy", "iggy").await.is_ok() {
            return client;
        }
        assert!(Instant::now() < deadline, "no login through {addr}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The node ids the cluster reports as leader, and the number of nodes.
async fn leader_of(client: &IggyClient) -> (Option<u16>, usize) {
    let meta = client
        .get_cluster_metadata()
        .await
        .expect("cluster metadata");
    let leader = meta
        .nodes
        .iter()
        .find(|n| n.role == ClusterNodeRole::Leader)
        .map(|n| n.endpoints.tcp);
    (leader, meta.nodes.len())
}

/// Creates stream `s` with topic `t` of one partition (ids 0), the layout most tests write to.
async fn stream_s_topic_t(client: &IggyClient) {
    client.create_stream("s").await.expect("create stream");
    client
        .create_topic(
            &id(0),
            "t",
            &TopicCreateOptions {
                partitions_count: Some(1),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .expect("create topic");
}

/// The stream addresses of the nodes that are up.
fn live(nodes: &[Option<Node>], down: &[usize]) -> Vec<SocketAddr> {
    nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| !down.contains(i))
        .filter_map(|(_, n)| n.as_ref().map(|n| n.stream))
        .collect()
}

/// Sends one 5-message batch tagged `name#attempt`, retrying (a new tag per attempt) on a
/// fresh client through each live node in turn for up to 20 s; returns the acknowledged tag.
async fn send_with_retry(addrs: &[SocketAddr], name: &str, attempt: &mut u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for addr in addrs {
            let client = client_via(*addr).await;
            *attempt += 1;
            let tag = format!("{name}#{attempt}");
            let mut messages = batch(&tag, 5);
            let sent = client
                .send_messages(
                    &id(0),
                    &id(0),
                    &Partitioning::partition_id(0),
                    &mut messages,
                )
                .await;
            if sent.is_ok() {
                return tag;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the cluster never took batch {name}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn batch(tag: &str, n: usize) -> Vec<IggyMessage> {
    (0..n)
        .map(|i| {
            IggyMessage::builder()
                .payload(format!("{tag}/{i}").into_bytes().into())
                .build()
                .expect("message")
        })
        .collect()
}

/// Every message of partition 0, in offset order: (offset, payload).
async fn all_messages(client: &IggyClient) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let polled = client
            .poll_messages(
                &id(0),
                &id(0),
                Some(0),
                &Consumer::new(id(1)),
                &PollingStrategy::offset(out.len() as u64),
                1_000,
                false,
            )
            .await
            .expect("poll");
        if polled.messages.is_empty() {
            return out;
        }
        for m in polled.messages {
            out.push((
                m.header.offset,
                String::from_utf8(m.payload.to_vec()).expect("utf-8"),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_lose_their_leader_without_losing_an_acknowledged_batch() {
    within(Duration::from_secs(300), async {
        let mut nodes: Vec<Option<Node>> = start_cluster(3).into_iter().map(Some).collect();

        // Find the leader, then log in on a follower: the SDK's post-login probe of
        // GET_CLUSTER_METADATA moves the client to the leader, so a replicated command succeeds
        // (a follower would forward it to the leader: see `newest_sdks_through_a_cluster_follower`).
        let probe = client_via(nodes[0].as_ref().unwrap().stream).await;
        let (leader_port, count) = leader_of(&probe).await;
        assert_eq!(count, 3, "every member is listed");
        let leader_port = leader_port.expect("a leader is listed");
        let follower = live(&nodes, &[])
            .into_iter()
            .find(|a| a.port() != leader_port)
            .unwrap();
        let first = client_via(follower).await;
        first
            .create_stream("orders")
            .await
            .expect("create stream through a follower");
        first
            .create_topic(
                &id(0),
                "placed",
                &TopicCreateOptions {
                    partitions_count: Some(1),
                    ..TopicCreateOptions::default()
                },
            )
            .await
            .expect("create topic");
        // /health names each member's role; /metrics has the cluster's gauges.
        let mut roles = Vec::new();
        for node in nodes.iter().flatten() {
            let http = node.eddy.addrs().http;
            let (status, body) = http_get(http, "/health").unwrap();
            assert_eq!(status, 200, "{body}");
            roles.push(body.trim().to_owned());
            let (_, metrics) = http_get(http, "/metrics").unwrap();
            assert!(metric_value(&metrics, "eddy_cluster_term").is_some_and(|t| t >= 1.0));
            assert!(metrics.contains("eddy_cluster_role "), "{metrics}");
        }
        roles.sort();
        assert_eq!(roles, ["follower", "follower", "leader"]);
        // `eddy cluster status` through a follower agrees: every member up over mutual TLS,
        // one metadata leader (the one clients are sent to), every group led by someone.
        let members = cluster_status_cli(follower, false);
        assert_eq!(members.len(), 3, "{members:?}");
        assert!(
            members
                .iter()
                .all(|m| m["state"] == "up" && m["tls"] == true),
            "{members:?}"
        );
        let leaders: Vec<_> = members
            .iter()
            .filter(|m| m["metadata"] == "leader")
            .collect();
        assert_eq!(leaders.len(), 1, "{members:?}");
        assert!(
            leaders[0]["address"]
                .as_str()
                .unwrap()
                .ends_with(&format!(":{leader_port}")),
            "{members:?}"
        );
        // A group just created (the topic's partition) elects its leader within a moment.
        let led = |groups: &[serde_json::Value]| {
            groups
                .iter()
                .all(|g| g["leader"].is_u64() && g["voters"].as_array().unwrap().len() == 3)
        };
        let started = Instant::now();
        let mut groups = cluster_status_cli(follower, true);
        while !led(&groups) && started.elapsed() < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            groups = cluster_status_cli(follower, true);
        }
        assert!(led(&groups), "every group has a leader: {groups:?}");
        assert!(
            groups.iter().any(|g| g["group"] == "metadata"),
            "{groups:?}"
        );
        assert!(
            groups
                .iter()
                .any(|g| g["group"].as_str().unwrap().starts_with("partition ")),
            "{groups:?}"
        );
        let mut acked: Vec<String> = Vec::new();
        let mut attempt = 0u32;
        for n in 0..10 {
            acked.push(
                send_with_retry(&live(&nodes, &[]), &format!("before-{n}"), &mut attempt).await,
            );
        }

        // The leader's process dies mid-stream.
        let dead = nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(|n| n.stream.port() == leader_port))
            .expect("the leader is one of the nodes");
        nodes[dead].as_mut().unwrap().eddy.kill();
        let killed_at = Instant::now();
        let survivor = live(&nodes, &[dead])[0];
        for n in 0..10 {
            acked.push(
                send_with_retry(&live(&nodes, &[dead]), &format!("after-{n}"), &mut attempt).await,
            );
            if n == 0 {
                assert!(
                    killed_at.elapsed() < Duration::from_secs(15),
                    "the first write after the kill took {:?}",
                    killed_at.elapsed()
                );
            }
        }

        // The dead member is listed, as unreachable, by the survivors.
        let members = cluster_status_cli(survivor, false);
        assert_eq!(members.len(), 3, "{members:?}");
        assert_eq!(
            members
                .iter()
                .filter(|m| m["state"].as_str().unwrap().starts_with("unreachable"))
                .count(),
            1,
            "{members:?}"
        );

        // The old leader restarts on its directory and catches up. Then a follower loses its
        // data directory and comes back empty: its peers notice (a new incarnation), it does not
        // vote until rebuilt from them. Then the third node dies, so the cluster goes on with the
        // restarted node and the rebuilt one: whatever they missed must have reached them.
        nodes[dead].as_mut().unwrap().eddy.crash_restart();
        let wiped = (0..3).find(|&i| i != dead).unwrap();
        let third = (0..3).find(|&i| i != dead && i != wiped).unwrap();
        let third_stream = nodes[third].as_ref().unwrap().stream;
        caught_up(third_stream, dead as u64 + 1).await;
        {
            let node = nodes[wiped].as_mut().unwrap();
            node.eddy.kill();
            std::fs::remove_dir_all(node.eddy.data_dir()).unwrap();
            node.eddy.restart();
            assert!(
                node.eddy
                    .log()
                    .wait_for(Duration::from_secs(10), |l| l.contains("lost its state"))
                    .is_some(),
                "the wiped node learns it lost its state"
            );
        }
        acked.push(send_with_retry(&live(&nodes, &[]), "while-rebuilding", &mut attempt).await);
        // Rebuilt (its rebuilding mark gone, so it votes again) and holding every entry.
        let mark = nodes[wiped]
            .as_ref()
            .unwrap()
            .eddy
            .data_dir()
            .join("raft/rebuilding");
        let deadline = Instant::now() + Duration::from_secs(60);
        while mark.exists() {
            assert!(
                Instant::now() < deadline,
                "the wiped member was never rebuilt"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        caught_up(third_stream, wiped as u64 + 1).await;
        nodes[third].as_mut().unwrap().eddy.kill();
        for n in 0..5 {
            acked.push(
                send_with_retry(&live(&nodes, &[third]), &format!("last-{n}"), &mut attempt).await,
            );
        }

        // Every acknowledged batch exactly once, in acknowledgement order; offsets contiguous.
        let reader = client_via(live(&nodes, &[third])[0]).await;
        let all = all_messages(&reader).await;
        for (i, (offset, _)) in all.iter().enumerate() {
            assert_eq!(*offset, i as u64, "offsets are contiguous");
        }
        let mut seen: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (pos, (_, payload)) in all.iter().enumerate() {
            let (tag, _) = payload.rsplit_once('/').expect("tag/index");
            seen.entry(tag.to_owned()).or_default().push(pos);
        }
        let mut last = None;
        for tag in &acked {
            let at = seen
                .get(tag)
                .unwrap_or_else(|| panic!("acknowledged batch {tag} lost"));
            assert_eq!(at.len(), 5, "batch {tag} stored exactly once");
            assert!(
                last < Some(at[0]),
                "batch {tag} out of acknowledgement order"
            );
            last = Some(at[0]);
        }
        // Unacknowledged attempts (a send that failed over) are there at most once.
        for (tag, at) in &seen {
            assert_eq!(at.len(), 5, "attempt {tag} stored once or not at all");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_keep_every_acknowledged_batch_after_losing_two() {
    within(Duration::from_secs(300), async {
        let mut nodes: Vec<Option<Node>> = start_cluster(5).into_iter().map(Some).collect();
        let client = client_via(nodes[4].as_ref().unwrap().stream).await;
        let (leader_port, count) = leader_of(&client).await;
        assert_eq!(count, 5);
        let leader_port = leader_port.expect("a leader");
        stream_s_topic_t(&client).await;
        let mut acked = Vec::new();
        let mut attempt = 0u32;
        for n in 0..5 {
            acked.push(send_with_retry(&live(&nodes, &[]), &format!("a-{n}"), &mut attempt).await);
        }
        // The leader and one follower die: three of five are a majority.
        let leader = nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(|n| n.stream.port() == leader_port))
            .unwrap();
        let follower = (0..5).find(|&i| i != leader).unwrap();
        for i in [leader, follower] {
            nodes[i].as_mut().unwrap().eddy.kill();
        }
        for n in 0..5 {
            acked.push(
                send_with_retry(
                    &live(&nodes, &[leader, follower]),
                    &format!("b-{n}"),
                    &mut attempt,
                )
                .await,
            );
        }
        let reader = client_via(live(&nodes, &[leader, follower])[0]).await;
        let all = all_messages(&reader).await;
        let payloads: Vec<&str> = all.iter().map(|(_, p)| p.as_str()).collect();
        for (i, (offset, _)) in all.iter().enumerate() {
            assert_eq!(*offset, i as u64);
        }
        for tag in &acked {
            let n = payloads
                .iter()
                .filter(|p| p.rsplit_once('/').is_some_and(|(t, _)| t == tag))
                .count();
            assert_eq!(n, 5, "batch {tag}");
        }
    })
    .await;
}

/// Segment files of every partition group in a member's data directory.
fn segment_files(data_dir: &std::path::Path) -> usize {
    let Ok(groups) = std::fs::read_dir(data_dir.join("raft/partitions")) else {
        return 0;
    };
    groups
        .flatten()
        .filter_map(|g| std::fs::read_dir(g.path()).ok())
        .flat_map(Iterator::flatten)
        .filter(|f| f.path().extension().is_some_and(|e| e == "log"))
        .count()
}

/// The offset of the first message a poll from `strategy` returns on partition 0.
async fn try_first_offset(
    client: &IggyClient,
    strategy: PollingStrategy,
) -> Result<u64, IggyError> {
    let polled = client
        .poll_messages(
            &id(0),
            &id(0),
            Some(0),
            &Consumer::new(id(1)),
            &strategy,
            1,
            false,
        )
        .await?;
    Ok(polled.messages[0].header.offset)
}

async fn first_offset(client: &IggyClient, strategy: PollingStrategy) -> u64 {
    try_first_offset(client, strategy).await.expect("poll")
}

/// Stream "s" with topic "t": one partition of 1 MiB segments (the smallest; a topic's
/// segment size holds on a cluster too), whose messages expire after `expiry`.
async fn segmented_topic(client: &IggyClient, expiry: Option<Duration>) {
    client.create_stream("s").await.expect("create stream");
    client
        .create_topic(
            &id(0),
            "t",
            &TopicCreateOptions {
                partitions_count: Some(1),
                segment_size: Some(IggyByteSize::from(1024 * 1024u64)),
                message_expiry: expiry.map(|e| IggyExpiry::ExpireDuration(IggyDuration::from(e))),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .expect("create topic");
}

/// Sends `batches` batches of 500 messages of 1,000 bytes to partition 0, tagged `seg<n>`.
async fn fill_segments(client: &IggyClient, batches: usize) {
    for n in 0..batches {
        let mut msgs = sized_messages(&format!("seg{n}"), 500, 1000);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut msgs)
            .await
            .expect("send");
    }
}

/// The index of the member whose stream port the cluster reports as its leader's.
async fn leader_index(client: &IggyClient, nodes: &[Option<Node>]) -> (usize, u16) {
    let port = leader_of(client).await.0.expect("a leader");
    let at = nodes
        .iter()
        .position(|n| n.as_ref().is_some_and(|n| n.stream.port() == port))
        .expect("the leader is a member");
    (at, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_cuts_every_member_at_the_same_offset() {
    within(Duration::from_secs(300), async {
        let mut nodes: Vec<Option<Node>> = start_cluster(3).into_iter().map(Some).collect();
        let client = client_via(nodes[0].as_ref().unwrap().stream).await;
        segmented_topic(&client, None).await;
        fill_segments(&client, 7).await;
        // Figures are the answering member's own: one that follows the partition may be a
        // batch behind its leader.
        let deadline = Instant::now() + Duration::from_secs(20);
        let segments = loop {
            let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
            let segments = topic.partitions[0].segments_count;
            if segments >= 4 {
                break segments;
            }
            assert!(Instant::now() < deadline, "{segments} segments of 1 MiB");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };

        client
            .delete_segments(&id(0), &id(0), 0, 2)
            .await
            .expect("delete segments");
        // Served from the cut at once; offsets never renumber.
        let first = first_offset(&client, PollingStrategy::first()).await;
        assert!(first > 0, "the two oldest segments are gone");
        assert_eq!(
            first_offset(&client, PollingStrategy::offset(0)).await,
            first
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
            let current = topic.partitions[0].current_offset;
            if current == 3499 {
                break;
            }
            assert!(
                current < 3499 && Instant::now() < deadline,
                "current offset {current}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Every member deletes its own files (two segments each: the members started together,
        // so they rolled at the same records) at its next retention run.
        let want = usize::try_from(segments).unwrap() - 2;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now: Vec<usize> = nodes
                .iter()
                .map(|n| segment_files(n.as_ref().unwrap().eddy.data_dir()))
                .collect();
            if now.iter().all(|n| *n == want) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "segment files {now:?}, want {want} on each member"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let topic = client.get_topic(&id(0), &id(0)).await.unwrap().unwrap();
        assert_eq!(topic.partitions[0].segments_count, segments - 2);

        // A follower applied the same cut: once it leads, it serves from the same offset, and
        // so does the old leader after its restart.
        let (leader, leader_port) = leader_index(&client, &nodes).await;
        drop(client);
        nodes[leader].as_mut().unwrap().eddy.kill();
        let survivor = live(&nodes, &[leader])[0];
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let c = client_via(survivor).await;
            if leader_of(&c).await.0.is_some_and(|p| p != leader_port) {
                break c;
            }
            assert!(Instant::now() < deadline, "no new leader");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let polled = try_first_offset(&client, PollingStrategy::first()).await;
            if let Ok(offset) = polled {
                assert_eq!(offset, first, "the new leader's cut");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the new leader never served: {polled:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        nodes[leader].as_mut().unwrap().eddy.restart();
        // The restarted member resumes from its recorded cut: its files stay deleted.
        assert_eq!(
            segment_files(nodes[leader].as_ref().unwrap().eddy.data_dir()),
            want
        );
    })
    .await;
}

/// Polls partition 0 of `s`/`t` on the member at `stream` itself (the `eddy` command line
/// talks to the address it is given: no move to the leader), with `strategy` (`--first`,
/// `--last`, ...) and `-n 1`: the message's offset and payload, or why not (while the member
/// cannot answer).
/// `eddy cluster status -o json` (with `--groups`: the groups table) through `stream`, as
/// root: the rows it printed.
fn cluster_status_cli(stream: SocketAddr, groups: bool) -> Vec<serde_json::Value> {
    let mut args = vec!["cluster", "status", "-o", "json"];
    if groups {
        args.push("--groups");
    }
    let out = eddy_cli(stream, &args).unwrap();
    assert!(
        out.status.success(),
        "eddy cluster status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Waits (up to 30 s) until the groups `eddy cluster status --groups` through `stream` lists
/// satisfy `wanted`.
async fn status_groups_become(
    stream: SocketAddr,
    what: &str,
    wanted: impl Fn(&[serde_json::Value]) -> bool,
) {
    let started = Instant::now();
    loop {
        let groups = cluster_status_cli(stream, true);
        if wanted(&groups) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: eddy cluster status --groups shows {groups:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A group's member ids under `key` (`voters`, `learners`) in a status row.
fn member_ids(group: &serde_json::Value, key: &str) -> Vec<u64> {
    group[key]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default()
}

/// Waits (up to 30 s) until every group's voters and learners satisfy `wanted`.
async fn groups_become(stream: SocketAddr, what: &str, wanted: impl Fn(&[u64], &[u64]) -> bool) {
    status_groups_become(stream, what, |groups| {
        !groups.is_empty()
            && groups
                .iter()
                .all(|g| wanted(&member_ids(g, "voters"), &member_ids(g, "learners")))
    })
    .await;
}

/// Waits (up to 60 s) until every group's leader, as `eddy cluster status --groups` through
/// `via` shows them, reports `member` no entry behind (or `member` leads the group).
async fn caught_up(via: SocketAddr, member: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let groups = cluster_status_cli(via, true);
        let done = !groups.is_empty()
            && groups.iter().all(|g| {
                g["leader"].as_u64() == Some(member)
                    || (g["leader"].is_u64() && g["lag"][member.to_string()] == 0)
            });
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "member {member} never caught up: {groups:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `eddy ARGS` as root against the member whose stream port is `stream`, with nothing of
/// this process's `EDDY_*` environment or the user's config file leaking in.
fn eddy_cli(stream: SocketAddr, args: &[&str]) -> std::io::Result<std::process::Output> {
    let home = tempfile::tempdir()?;
    let mut cmd = std::process::Command::new(eddy_tests::server_bin!());
    for (k, _) in std::env::vars() {
        if k.starts_with("EDDY_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .env("EDDY_STREAM_ADDR", stream.to_string())
        .env("EDDY_USERNAME", "iggy")
        .env("EDDY_PASSWORD", "iggy")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
}

fn poll_member(stream: SocketAddr, strategy: &str) -> Result<(u64, String), String> {
    let out = eddy_cli(
        stream,
        &[
            "poll",
            "s",
            "t",
            "--partition",
            "0",
            strategy,
            "-n",
            "1",
            "-o",
            "json",
        ],
    )
    .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let m = v.get(0).ok_or("no message")?;
    match (m["offset"].as_u64(), m["payload"].as_str()) {
        (Some(offset), Some(payload)) => Ok((offset, payload.to_owned())),
        _ => Err(format!("unexpected message {m}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_wiped_after_retention_deleted_what_it_missed_is_rebuilt_from_a_snapshot() {
    within(Duration::from_secs(300), async {
        let mut nodes: Vec<Option<Node>> = start_cluster(3).into_iter().map(Some).collect();
        let client = client_via(nodes[0].as_ref().unwrap().stream).await;
        segmented_topic(&client, Some(Duration::from_secs(2))).await;
        let (leader, _) = leader_index(&client, &nodes).await;
        let lost = (0..3).find(|&i| i != leader).expect("a follower");
        nodes[lost].as_mut().unwrap().eddy.kill();

        // What the lost member misses: sealed segments that expire and are deleted.
        fill_segments(&client, 5).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let first = loop {
            let first = first_offset(&client, PollingStrategy::first()).await;
            if first > 0 {
                break first;
            }
            assert!(Instant::now() < deadline, "retention never deleted a segment");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };

        // Its directory is lost; it comes back empty and is rebuilt from its peers.
        {
            let node = nodes[lost].as_mut().unwrap();
            std::fs::remove_dir_all(node.eddy.data_dir()).unwrap();
            node.eddy.restart();
        }
        let mut more = sized_messages("after", 10, 100);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut more)
            .await
            .expect("send after the restart");
        let lost_stream = nodes[lost].as_ref().unwrap().stream;
        let deadline = Instant::now() + Duration::from_secs(60);
        // Retention keeps deleting segments as they expire, so the member is compared with
        // the leader's cut of the moment, which never moves back.
        let mut cut = first;
        loop {
            let head = poll_member(lost_stream, "--first");
            let tail = poll_member(lost_stream, "--last");
            let now = first_offset(&client, PollingStrategy::first()).await;
            assert!(now >= cut, "the first offset moved back from {cut} to {now}");
            cut = now;
            if let (Ok(head), Ok(tail)) = (&head, &tail) {
                if head.0 == cut && tail.0 == 2509 {
                    // The cut's first message and the newest, byte for byte.
                    let i = cut % 500;
                    assert!(
                        head.1.starts_with(&format!("seg{}-{i}-", cut / 500)),
                        "{}",
                        &head.1[..20.min(head.1.len())]
                    );
                    assert!(tail.1.starts_with("after-9-"), "{}", tail.1);
                    break;
                }
            }
            if Instant::now() >= deadline {
                let log = nodes[lost].as_ref().unwrap().eddy.log().lines();
                panic!(
                    "the wiped member serves {head:?} .. {tail:?}, want {cut} .. 2509; its log:\n{}",
                    log[log.len().saturating_sub(40)..].join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        // Rebuilt, the member clears its rebuilding mark. A crash before that leaves the mark:
        // it comes back still rebuilding (no votes until it has caught up), then clears it.
        let marker = nodes[lost]
            .as_ref()
            .unwrap()
            .eddy
            .data_dir()
            .join("raft/rebuilding");
        let deadline = Instant::now() + Duration::from_secs(30);
        while marker.exists() {
            assert!(Instant::now() < deadline, "the rebuilt member kept its mark");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // ...and records that it rebuilt this incarnation (its greetings say so, and its peers
        // stop listing it as lost).
        // (written just after the mark is removed: waited for, not raced).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !marker.with_file_name("member.rebuilt").exists() {
            assert!(Instant::now() < deadline, "member.rebuilt never written");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        {
            let node = nodes[lost].as_mut().unwrap();
            node.eddy.kill();
            std::fs::write(&marker, "rebuilding\n").unwrap();
            node.eddy.restart();
            assert!(
                node.eddy
                    .log()
                    .wait_for(Duration::from_secs(10), |l| l
                        .contains("was rebuilding lost state"))
                    .is_some(),
                "the restarted member knows it is still rebuilding"
            );
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while marker.exists() {
            assert!(Instant::now() < deadline, "the member never caught up again");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Caught up again, it serves from the leader's cut of the moment.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = first_offset(&client, PollingStrategy::first()).await;
            let head = poll_member(lost_stream, "--first").map(|m| m.0);
            if head == Ok(now) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the member serves from {head:?}, the leader from {now}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// A TLS connection to a member's replication port presenting `cert`/`key` (PEM files of
/// some CA), trusting `ca`, expecting the member named `name`.
async fn tls_dial(
    addr: SocketAddr,
    (cert, key): (&std::path::Path, &std::path::Path),
    ca: &std::path::Path,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    let socket = tokio::net::TcpStream::connect(addr).await?;
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from(name.to_owned()).unwrap(), socket)
        .await
}

/// Sends `frames` and reads until the member closes (at most 8 s): what it answered.
async fn answer_to<S>(mut socket: S, frames: &[bytes::Bytes]) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    for frame in frames {
        if socket.write_all(frame).await.is_err() {
            break;
        }
    }
    let _ = socket.flush().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(8), async {
        let mut chunk = [0u8; 4096];
        loop {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the member kept the connection open");
    answer
}

/// What a member's `/metrics` says of `name` (a counter or an integer gauge).
fn metric_of(node: &Node, name: &str) -> u64 {
    let (_, metrics) = http_get(node.eddy.addrs().http, "/metrics").unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

/// The attacks of issue #36, replayed against a three-member cluster with peer TLS: from a
/// process with no certificate, with member 2's valid certificate claiming to be member 3,
/// with a certificate of another CA, and from a second process of member 3 (its data
/// directory and certificate copied). No frame of theirs reaches Raft, no record leaves, no
/// member fails or stands down, and the root password and the metadata are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_on_the_network_can_speak_for_a_member() {
    use eddy_consensus::wire::{encode_fetch, encode_hello, encode_raft, Hello, HEADER_LEN};
    within(
        Duration::from_secs(300),
        Box::pin(async {
            let nodes = start_cluster(3);
            let client = client_via(nodes[0].stream).await;
            client.create_stream("kept").await.expect("create stream");
            let terms: Vec<u64> = nodes
                .iter()
                .map(|n| metric_of(n, "eddy_cluster_term"))
                .collect();
            let (leader, _) = leader_of(&client).await;
            for n in &nodes {
                assert_eq!(metric_of(n, "eddy_cluster_peer_tls"), 1);
            }

            // What an attacker would send: greetings claiming members (with a made-up cluster id
            // and an incarnation claim about the leader), a forged append to the metadata group,
            // a fetch of event records, and a first frame announcing 80 MiB.
            let forged_hello = |claimed: u64| {
                encode_hello(&Hello {
                    node_id: claimed,
                    cluster: 0x5eed,
                    props: vec![
                        ("knows".into(), "1:1,2:1,3:1".into()),
                        ("stream".into(), "203.0.113.9:8090".into()),
                    ],
                })
            };
            let append = encode_raft(&[(
                eddy_consensus::GroupId(0),
                bytes::Bytes::from_static(b"\x08\x03forged append"),
            )]);
            let fetch = |claimed: u64| encode_fetch(claimed, 0x5eed, b"\x01records of shard 0");
            let mut huge = forged_hello(2)[..HEADER_LEN].to_vec();
            huge[8..12].copy_from_slice(&(80u32 << 20).to_le_bytes());
            let huge = bytes::Bytes::from(huge);

            // 1. No certificate: plaintext, to every member.
            for node in &nodes {
                let replication = node.eddy.addrs().replication;
                for frames in [
                    vec![forged_hello(2), append.clone()],
                    vec![fetch(2)],
                    vec![huge.clone()],
                ] {
                    let socket = tokio::net::TcpStream::connect(replication).await.unwrap();
                    let answer = answer_to(socket, &frames).await;
                    assert!(
                        answer.is_empty() || !answer.starts_with(b"eRPL"),
                        "a plaintext peer was answered with a frame"
                    );
                }
            }

            // 2. Member 2's valid certificate against member 1, claiming to be member 3.
            let certs = nodes[0].certs.dir().to_path_buf();
            let member2 = (certs.join("node-2.pem"), certs.join("node-2.key"));
            let ca = certs.join("ca.pem");
            let replication1 = nodes[0].eddy.addrs().replication;
            for frames in [vec![forged_hello(3), append.clone()], vec![fetch(3)]] {
                let socket = tls_dial(replication1, (&member2.0, &member2.1), &ca, "node-1.eddy")
                    .await
                    .expect("member 2's certificate is valid");
                let answer = answer_to(socket, &frames).await;
                assert!(
                    answer.is_empty(),
                    "member 1 answered an impostor: {answer:?}"
                );
            }

            // 3. A certificate naming member 2 from another CA.
            let rogue = eddy_tests::ClusterCerts::issue(eddy_tests::server_bin!(), 3);
            let rogue2 = (
                rogue.dir().join("node-2.pem"),
                rogue.dir().join("node-2.key"),
            );
            if let Ok(socket) =
                tls_dial(replication1, (&rogue2.0, &rogue2.1), &ca, "node-1.eddy").await
            {
                let answer = answer_to(socket, &[forged_hello(2), append.clone()]).await;
                assert!(answer.is_empty(), "a rogue certificate was answered");
            }

            // 4. A second process of member 3: its data directory and certificate copied, on
            // another host. Members 1 and 2 refuse it while member 3 is live.
            let twin_dir = tempfile::tempdir().unwrap();
            let twin_data = twin_dir.path().join("data");
            let copied = std::process::Command::new("cp")
                .arg("-a")
                .arg(nodes[2].eddy.data_dir())
                .arg(&twin_data)
                .status()
                .unwrap();
            assert!(copied.success());
            let _ = std::fs::remove_file(twin_data.join("eddy.lock"));
            let mut args = vec![
                "--data-dir".to_owned(),
                twin_data.display().to_string(),
                "--host".to_owned(),
                "127.0.0.4".to_owned(),
                "--node-id".to_owned(),
                "3".to_owned(),
            ];
            args.extend(nodes[0].certs.flags(3));
            for (i, node) in nodes.iter().enumerate().take(2) {
                args.push("--peer".to_owned());
                args.push(format!("{}={}", i + 1, node.eddy.addrs().replication));
            }
            for port in [
                "--stream-port",
                "--client-port",
                "--http-port",
                "--replication-port",
            ] {
                args.extend([port.to_owned(), "0".to_owned()]);
            }
            let (mut twin, twin_log) =
                eddy_tests::spawn(std::path::Path::new(eddy_tests::server_bin!()), &args, &[]);
            let refused = twin_log.wait_for(Duration::from_secs(30), |l| {
                l.contains("a peer refused this member") && l.contains("another process")
            });
            let _ = twin.kill();
            let _ = twin.wait();
            assert!(
                refused.is_some(),
                "the twin was not refused: {:?}",
                twin_log.lines()
            );

            // Nothing happened: each member counted the refusals, none stood down or failed,
            // the root password still works and the metadata holds only what clients made.
            let refused_identity =
                "eddy_cluster_peer_connections_refused_total{reason=\"identity\"}";
            assert!(metric_of(&nodes[0], refused_identity) >= 2);
            // The twin dials both members and is killed at the first refusal it logs, so one
            // of them (either) counted it.
            let refused_duplicate =
                "eddy_cluster_peer_connections_refused_total{reason=\"duplicate\"}";
            assert!(
                metric_of(&nodes[0], refused_duplicate) + metric_of(&nodes[1], refused_duplicate)
                    >= 1
            );
            for (n, term) in nodes.iter().zip(&terms) {
                assert_eq!(
                    metric_of(n, "eddy_cluster_term"),
                    *term,
                    "a member's term moved"
                );
                assert_eq!(metric_of(n, "eddy_cluster_failed_groups"), 0);
                // Exported (frames towards a peer not yet up at start may have been dropped).
                let _ = metric_of(n, "eddy_cluster_peer_frames_dropped_total");
                let (status, body) = http_get(n.eddy.addrs().http, "/health").unwrap();
                assert_eq!(status, 200, "{body}");
            }
            let fresh = client_via(nodes[1].stream).await;
            assert_eq!(leader_of(&fresh).await.0, leader, "the leader changed");
            let streams = fresh.get_streams().await.expect("streams");
            let names: Vec<&str> = streams.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["kept"]);
            // Member 1's directory of members still has member 2's own address.
            let meta = fresh.get_cluster_metadata().await.unwrap();
            assert!(
                meta.nodes.iter().all(|n| !n.ip.contains("203.0.113.9")),
                "{meta:?}"
            );
        }),
    )
    .await;
}

/// Waits (up to 10 s) until every thread of process `pid` is stopped (`T` in
/// `/proc/PID/task/*/stat`).
async fn every_thread_stopped(pid: u32) {
    let started = Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
        let stopped = tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                // `pid (comm) state ...`: the state follows the last ')'.
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            })
        });
        if stopped {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "process {pid} never stopped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads are linearizable: with both followers frozen (SIGSTOP), the leader can no longer
/// confirm it leads, so it serves no read (metadata, poll or event read) and names no leader,
/// instead of answering from state a new leader may already have overwritten. Once the
/// followers are back, reads are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_serves_no_read() {
    use celeriant_client_tokio::CeleriantClient;
    use celeriant_msg::request::read_filters::ReadFilters;
    use celeriant_msg::request::requests::ReadRequest;
    within(
        Duration::from_secs(240),
        Box::pin(async {
            let nodes = start_cluster(3);
            let client = client_via(nodes[0].stream).await;
            stream_s_topic_t(&client).await;
            let mut attempt = 0;
            send_with_retry(&[nodes[0].stream], "kept", &mut attempt).await;
            let (leader_port, _) = leader_of(&client).await;
            let leader = nodes
                .iter()
                .position(|n| Some(n.stream.port()) == leader_port)
                .expect("a leader");
            let key = celeriant_wal::aggregate_key::AggregateKey::new(1, 2, 3);
            let event_addr = nodes[leader].eddy.addrs().client.to_string();
            let mut events = CeleriantClient::connect(&event_addr).await.unwrap();
            events
                .write_events(
                    key.clone(),
                    vec![
                        celeriant_client_tokio::json_event(1, &serde_json::json!({"a": 1}))
                            .unwrap(),
                    ],
                    1,
                )
                .await
                .expect("event write on the leader");
            let read = || ReadRequest {
                correlation_id: None,
                aggregate_key: key.clone(),
                filters: ReadFilters::new(1),
            };
            let first_read = events.read(read()).await;
            assert!(first_read.is_ok(), "{first_read:?}");

            for (i, node) in nodes.iter().enumerate() {
                if i != leader {
                    node.eddy.signal(libc::SIGSTOP);
                }
            }
            // kill(2) returns before every thread stopped: a thread the signal did not pick
            // runs on (it may answer the leader) until the group stop reaches it, which waits
            // for the picked thread to leave the kernel (an fdatasync under load).
            for (i, node) in nodes.iter().enumerate() {
                if i != leader {
                    every_thread_stopped(node.eddy.pid()).await;
                }
            }
            let limit = Duration::from_secs(8);
            // Nor does it check a login against metadata it cannot confirm is current (a
            // password changed through the majority would still be accepted there).
            let login = tokio::time::timeout(limit, async {
                let mut raw = eddy_client::stream::StreamClient::connect(
                    &nodes[leader].stream.to_string(),
                    &eddy_client::ConnectOptions::default(),
                )
                .await?;
                raw.login_user("iggy", "iggy").await
            })
            .await;
            assert!(
                !matches!(login, Ok(Ok(_))),
                "an isolated leader accepted a login"
            );
            let streams = tokio::time::timeout(limit, client.get_streams()).await;
            assert!(
                !matches!(streams, Ok(Ok(_))),
                "an isolated leader served metadata"
            );
            let polled = tokio::time::timeout(
                limit,
                client.poll_messages(
                    &id(0),
                    &id(0),
                    Some(0),
                    &Consumer::new(id(1)),
                    &PollingStrategy::offset(0),
                    10,
                    false,
                ),
            )
            .await;
            assert!(
                !matches!(polled, Ok(Ok(_))),
                "an isolated leader served a poll"
            );
            let event_read = tokio::time::timeout(limit, events.read(read())).await;
            assert!(
                !matches!(event_read, Ok(Ok(_))),
                "an isolated leader served an event read"
            );
            let meta = tokio::time::timeout(limit, client.get_cluster_metadata()).await;
            if let Ok(Ok(meta)) = meta {
                assert!(
                    meta.nodes.iter().all(|n| n.role != ClusterNodeRole::Leader),
                    "an isolated leader named a leader: {meta:?}"
                );
            }

            for (i, node) in nodes.iter().enumerate() {
                if i != leader {
                    node.eddy.signal(libc::SIGCONT);
                }
            }
            let healed = client_via(nodes[leader].stream).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(streams) = healed.get_streams().await {
                    assert_eq!(streams.len(), 1);
                    break;
                }
                assert!(Instant::now() < deadline, "reads never came back");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }),
    )
    .await;
}

/// `eddy cluster add/remove ...` as root through `stream`: its stdout, or why it failed.
fn cluster_change_cli(stream: SocketAddr, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["cluster"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--wait", "120"]);
    let out = eddy_cli(stream, &all).map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Checks that `held` (a member's messages) has every acknowledged payload once, or twice
/// when its send was retried after an unknown outcome (`send_one` says which).
fn held_once(what: &str, held: &[String], acked: &[(String, bool)]) {
    for (payload, uncertain) in acked {
        let copies = held.iter().filter(|p| *p == payload).count();
        assert!(
            copies == 1 || (*uncertain && copies == 2),
            "{what}: {payload} ({copies} copies, retried: {uncertain}): {held:?}"
        );
    }
}

/// Waits (up to 30 s) until the Iggy cluster metadata `reader` gets lists `members` members,
/// one of them leader.
async fn metadata_lists(reader: &IggyClient, members: usize) {
    let started = Instant::now();
    loop {
        let (leader, listed) = leader_of(reader).await;
        if leader.is_some() && listed == members {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "cluster metadata: leader {leader:?}, {listed} members, not {members}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends one message with `payload` through any of `addrs` (retried while the cluster
/// elects); the SDK follows the leader. True when an earlier attempt's send failed with an
/// unknown outcome (it may have landed too: the edge.4 SDK has no idempotent producer).
async fn send_one(addrs: &[SocketAddr], payload: &str) -> bool {
    match try_send_one(addrs, payload).await {
        Ok(uncertain) => uncertain,
        Err(e) => panic!("{e}"),
    }
}

/// [`send_one`], with its failure (no member took it within 60 s) as an error.
async fn try_send_one(addrs: &[SocketAddr], payload: &str) -> Result<bool, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut uncertain = false;
    let mut last = String::new();
    loop {
        for &addr in addrs {
            let client = IggyClient::builder()
                .with_tcp()
                .with_server_address(addr.to_string())
                .with_reconnection_max_retries(Some(0))
                .build()
                .expect("client builds");
            if let Err(e) = client.connect().await {
                last = format!("{addr}: connect: {e}");
                continue;
            }
            if let Err(e) = client.login_user("iggy", "iggy").await {
                last = format!("{addr}: login: {e}");
                continue;
            }
            let mut messages = vec![IggyMessage::builder()
                .payload(payload.as_bytes().to_vec().into())
                .build()
                .expect("message")];
            let sent = client
                .send_messages(
                    &id(0),
                    &id(0),
                    &Partitioning::partition_id(0),
                    &mut messages,
                )
                .await;
            match sent {
                Ok(_) => return Ok(uncertain),
                Err(e) => last = format!("{addr}: send: {e}"),
            }
            uncertain = true;
        }
        if Instant::now() >= deadline {
            return Err(format!("no member took {payload:?}; last: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the member at `stream` serves `payload` as partition 0's last message.
async fn serves_last(stream: SocketAddr, payload: &str) {
    serves(stream, "--last", payload).await;
}

/// Waits until the member at `stream` serves `payload` as partition 0's message at
/// `strategy` (`--first`, `--last`).
async fn serves(stream: SocketAddr, strategy: &str, payload: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match poll_member(stream, strategy) {
            Ok((_, p)) if p == payload => return,
            other => assert!(
                Instant::now() < deadline,
                "{stream} does not serve {payload:?} ({strategy}): {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes event `version` (allowing creation at version 1) of aggregate 9/9/1 through any
/// of the event ports `addrs`, retried while the cluster elects (a write that landed while
/// its answer was lost finds its version taken).
async fn write_event(addrs: &[SocketAddr], version: u64) {
    use celeriant_client_tokio::{CeleriantClient, ClientError, ServerError, WriteEventsOptions};
    let key = celeriant_wal::aggregate_key::AggregateKey::new(9, 9, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for &addr in addrs {
            let Ok(c) = CeleriantClient::connect(&addr.to_string()).await else {
                continue;
            };
            let mut c = c.with_timeout(Duration::from_secs(10));
            let event = celeriant_client_tokio::json_event(1, &serde_json::json!({ "v": version }))
                .expect("event encodes");
            let written = c
                .write_events_with(
                    key.clone(),
                    vec![event],
                    1,
                    WriteEventsOptions {
                        allow_create: version == 1,
                        expected_version: Some(version - 1),
                        enforce_client_idempotency: false,
                    },
                )
                .await;
            match written {
                Ok(_) => return,
                Err(ClientError::Server(ServerError::Write { error_message, .. }))
                    if error_message
                        .contains(&format!("\"current_aggregate_version\":{version}")) =>
                {
                    return
                }
                Err(_) => {}
            }
        }
        assert!(Instant::now() < deadline, "no member took event {version}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the member at event port `addr` serves aggregate 9/9/1 at `version`.
async fn serves_event(addr: SocketAddr, version: u64) {
    use celeriant_msg::request::requests::AggregateDetailsRequest;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(c) = celeriant_client_tokio::CeleriantClient::connect(&addr.to_string()).await {
            let mut c = c.with_timeout(Duration::from_secs(10));
            let details = c
                .aggregate_details(AggregateDetailsRequest {
                    correlation_id: None,
                    aggregate_key: celeriant_wal::aggregate_key::AggregateKey::new(9, 9, 1),
                })
                .await;
            if details.is_ok_and(|d| d.max_aggregate_version >= version) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{addr} does not serve event {version}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_added_at_run_time_votes_and_a_removed_one_is_not_needed() {
    within(Duration::from_secs(300), async {
        let plan = crate::cluster_support::Plan::new(3, 4);
        let mut nodes: Vec<Option<Node>> = (0..3)
            .map(|i| Some(plan.start(i, 0..3, &[], false)))
            .collect();
        let client = client_via(nodes[0].as_ref().unwrap().stream).await;
        stream_s_topic_t(&client).await;
        let founders: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        send_one(&founders, "before").await;
        let events: Vec<SocketAddr> = nodes
            .iter()
            .flatten()
            .map(|n| n.eddy.addrs().client)
            .collect();
        write_event(&events, 1).await;

        // A producer writes throughout the changes; every message it was acknowledged must
        // be there at the end.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = {
            let stop = std::sync::Arc::clone(&stop);
            let mut targets: Vec<SocketAddr> = founders.clone();
            targets.rotate_left(2);
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for n in 0..400 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let payload = format!("w-{n}");
                    let uncertain = send_one(&targets, &payload).await;
                    acked.push((payload, Instant::now(), uncertain));
                }
                acked
            })
        };

        // Add member 4: the command records it and waits for its catch-up; the new process
        // joins with the founders as --peer, learning the cluster's id from them.
        let via = founders[1];
        let replication = plan.replication(3);
        let adding = tokio::task::spawn_blocking(move || {
            cluster_change_cli(via, &["add", &format!("4={replication}")])
        });
        let fourth = plan.start(3, 0..3, &[], true);
        let added = adding.await.unwrap().expect("eddy cluster add 4");
        assert!(added.contains("add member 4"), "{added}");
        eprintln!("{added}");
        let fourth_stream = fourth.stream;
        let fourth_events = fourth.eddy.addrs().client;
        nodes.push(Some(fourth));
        // It holds what was written before it joined.
        serves(fourth_stream, "--first", "before").await;
        serves_event(fourth_events, 1).await;
        caught_up(via, 4).await;
        // Adding it again is refused with the reason.
        let again = cluster_change_cli(via, &["add", &format!("4={}", plan.replication(3))]);
        assert!(
            again.as_ref().is_err_and(|e| e.contains("already")),
            "{again:?}"
        );
        // `eddy cluster status` shows it a voter of every group, a learner of none.
        groups_become(via, "member 4 votes everywhere", |v, l| {
            v.contains(&4) && v.len() == 4 && l.is_empty()
        })
        .await;
        let members = cluster_status_cli(via, false);
        let fourth_row = members
            .iter()
            .find(|m| m["id"] == 4)
            .expect("member 4 listed");
        assert_eq!(fourth_row["learns"], 0, "{members:?}");
        assert_ne!(fourth_row["metadata"], "learner", "{members:?}");

        // Remove member 1 (whichever member leads), then stop it.
        let removed = cluster_change_cli(fourth_stream, &["remove", "1"]).expect("remove 1");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked = producer.await.unwrap();
        assert!(!acked.is_empty());
        let longest_gap = acked
            .windows(2)
            .map(|w| w[1].1 - w[0].1)
            .max()
            .unwrap_or_default();
        eprintln!(
            "{} messages acknowledged during the changes, longest gap between two {longest_gap:?}",
            acked.len()
        );
        let acked: Vec<(String, bool)> = acked.into_iter().map(|(p, _, u)| (p, u)).collect();
        assert!(removed.contains("remove member 1"), "{removed}");
        eprintln!("{removed}");
        nodes[0].take().unwrap().eddy.kill();
        // No group counts member 1 among its voters or learners any more.
        groups_become(fourth_stream, "member 1 is in no group", |v, l| {
            !v.contains(&1) && v.len() == 3 && l.is_empty()
        })
        .await;
        // Members 2, 3 and 4 vote now: with member 2 killed too, 3 and 4 are a majority,
        // which they are only if member 4 votes.
        nodes[1].take().unwrap().eddy.kill();
        let rest: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        send_one(&rest, "after-remove").await;
        for &member in &rest {
            serves_last(member, "after-remove").await;
        }
        // Every message acknowledged during the changes is there, once, on what remains.
        let reader = client_via(fourth_stream).await;
        let held: Vec<String> = all_messages(&reader)
            .await
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        held_once("acknowledged during the changes", &held, &acked);
        let events: Vec<SocketAddr> = nodes
            .iter()
            .flatten()
            .map(|n| n.eddy.addrs().client)
            .collect();
        write_event(&events, 2).await;
        for &member in &events {
            serves_event(member, 2).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_whose_leader_dies_half_way_is_finished_by_the_next_leader() {
    within(Duration::from_secs(300), async {
        let plan = crate::cluster_support::Plan::new(3, 4);
        let mut nodes: Vec<Option<Node>> = (0..3)
            .map(|i| Some(plan.start(i, 0..3, &[], false)))
            .collect();
        let founders: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        let client = client_via(founders[0]).await;
        stream_s_topic_t(&client).await;
        send_one(&founders, "before").await;

        // The metadata leader runs the add; member 4 is not running yet, so the change stops
        // at its catch-up, a learner on the metadata group: the leader dies there.
        let (leader_port, members) = leader_of(&client).await;
        assert_eq!(members, 3);
        let leader = founders
            .iter()
            .position(|a| Some(a.port()) == leader_port)
            .expect("the metadata leader is a founder");
        let survivors: Vec<SocketAddr> = founders
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != leader)
            .map(|(_, &a)| a)
            .collect();
        let add = format!("4={}", plan.replication(3));
        let adding = {
            let (via, add) = (survivors[0], add.clone());
            tokio::task::spawn_blocking(move || cluster_change_cli(via, &["add", &add]))
        };
        status_groups_become(
            survivors[0],
            "member 4 a learner of the metadata group",
            |groups| {
                groups
                    .iter()
                    .any(|g| g["group"] == "metadata" && member_ids(g, "learners").contains(&4))
            },
        )
        .await;
        nodes[leader].as_mut().unwrap().eddy.kill();
        let fourth = plan.start(3, 0..3, &[], true);
        let fourth_stream = fourth.stream;
        nodes.push(Some(fourth));
        // The first run failed with its leader, or followed the next one and finished.
        let first = adding.await.unwrap();
        eprintln!("first run, its leader killed: {first:?}");
        send_one(&survivors, "during").await;
        // Run again through a survivor: the next leader finishes what the first began.
        let again = cluster_change_cli(survivors[1], &["add", &add]);
        assert!(
            again.is_ok()
                || (first.is_ok() && again.as_ref().is_err_and(|e| e.contains("already"))),
            "first {first:?}, again {again:?}"
        );
        // The killed member comes back on its directory and catches up.
        nodes[leader].as_mut().unwrap().eddy.restart();
        let all: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        send_one(&all, "after").await;
        groups_become(fourth_stream, "every member votes everywhere", |v, l| {
            v == [1, 2, 3, 4] && l.is_empty()
        })
        .await;
        for &member in &all {
            serves(member, "--first", "before").await;
            serves_last(member, "after").await;
        }
        // The Iggy cluster metadata lists exactly the four members, one of them leader.
        let reader = client_via(fourth_stream).await;
        metadata_lists(&reader, 4).await;
        let held: Vec<String> = all_messages(&reader)
            .await
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        assert_eq!(held, ["before", "during", "after"], "each once, in order");
    })
    .await;
}

/// Prints the last lines of each member's log when the test fails while it is held (a
/// cluster scenario's failure is read from what the members said).
struct LogsOnPanic(std::sync::Mutex<Vec<(String, eddy_tests::Log)>>);

impl LogsOnPanic {
    fn new() -> Self {
        LogsOnPanic(std::sync::Mutex::new(Vec::new()))
    }

    /// Watches `node`'s log under `name` (again after a restart: a new log).
    fn watch(&self, name: impl Into<String>, node: &Node) {
        self.0
            .lock()
            .unwrap()
            .push((name.into(), node.eddy.log().clone()));
    }
}

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for (name, log) in self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            let lines = log.lines();
            let head = &lines[..lines.len().min(60)];
            let tail = &lines[lines.len().saturating_sub(60).max(head.len())..];
            eprintln!(
                "--- {name} ---\n{}\n...\n{}",
                head.join("\n"),
                tail.join("\n")
            );
        }
    }
}

/// `eddy cluster replace` brings a fresh host on a new port in for a founder (add, then
/// remove) while a producer writes, and the metadata leader is killed as the add finishes,
/// in the middle of the remove; a second `remove` through a survivor finishes what the first
/// began. Afterwards the replaced member is in no group, every acknowledged message is on
/// every current member once, and the Iggy cluster metadata lists exactly the current
/// members with one leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_whose_leader_dies_in_the_remove_is_finished_by_the_next_leader() {
    within(Duration::from_secs(300), async {
        let plan = crate::cluster_support::Plan::new(3, 4);
        let mut nodes: Vec<Option<Node>> = (0..3)
            .map(|i| Some(plan.start(i, 0..3, &[], false)))
            .collect();
        let logs = LogsOnPanic::new();
        for (i, node) in nodes.iter().flatten().enumerate() {
            logs.watch(format!("member {}", i + 1), node);
        }
        let founders: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        let client = client_via(founders[0]).await;
        stream_s_topic_t(&client).await;
        send_one(&founders, "before").await;
        let (leader_port, _) = leader_of(&client).await;
        let leader = founders
            .iter()
            .position(|a| Some(a.port()) == leader_port)
            .expect("the metadata leader is a founder");
        // The founder replaced is not the leader; the third founder stays throughout.
        let old = (0..3).find(|&i| i != leader).unwrap();
        let stays = (0..3).find(|&i| i != leader && i != old).unwrap();
        let old_id = (old + 1).to_string();

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = {
            let stop = std::sync::Arc::clone(&stop);
            let targets = vec![founders[stays], founders[leader]];
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for n in 0..400 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let payload = format!("w-{n}");
                    match try_send_one(&targets, &payload).await {
                        Ok(uncertain) => acked.push((payload, uncertain)),
                        Err(e) => return Err(e),
                    }
                }
                Ok(acked)
            })
        };

        let new = format!("4={}", plan.replication(3));
        let replacing = {
            let (via, old_id, new) = (founders[stays], old_id.clone(), new.clone());
            tokio::task::spawn_blocking(move || {
                cluster_change_cli(via, &["replace", &old_id, &new])
            })
        };
        let fourth = plan.start(3, 0..3, &[], true);
        logs.watch("member 4", &fourth);
        let fourth_stream = fourth.stream;
        nodes.push(Some(fourth));
        // The remove began when some group no longer counts the old member among its voters.
        let old_number = old as u64 + 1;
        status_groups_become(founders[stays], "the remove began", |groups| {
            groups
                .iter()
                .any(|g| !member_ids(g, "voters").contains(&old_number))
        })
        .await;
        nodes[leader].as_mut().unwrap().eddy.kill();
        let first = replacing.await.unwrap();
        eprintln!("replace, its leader killed in the remove: {first:?}");
        // Run the remove again through the member that stayed: the next leader finishes it,
        // or the metadata already dropped the member (the groups still holding it are then
        // reconciled by the next leader, checked below).
        let again = cluster_change_cli(founders[stays], &["remove", &old_id]);
        eprintln!("remove again: {again:?}");
        assert!(
            again.is_ok() || again.as_ref().is_err_and(|e| e.contains("is no member")),
            "first {first:?}, again {again:?}"
        );
        let old_id: u64 = old_id.parse().unwrap();
        let leader_id = leader as u64 + 1;
        let current = {
            let mut ids = vec![leader_id, stays as u64 + 1, 4];
            ids.sort_unstable();
            ids
        };
        // The killed leader comes back on its directory, catches up and votes again.
        nodes[leader].as_mut().unwrap().eddy.restart();
        logs.watch(
            format!("member {} restarted", leader + 1),
            nodes[leader].as_ref().unwrap(),
        );
        groups_become(
            fourth_stream,
            "the replaced member is in no group",
            |v, l| v == current.as_slice() && l.is_empty(),
        )
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked = match producer.await.unwrap() {
            Ok(acked) => acked,
            Err(e) => {
                for (i, node) in nodes.iter().enumerate() {
                    if let Some(node) = node {
                        let lines = node.eddy.log().lines();
                        let tail = &lines[lines.len().saturating_sub(60)..];
                        eprintln!("--- member {} ---\n{}", i + 1, tail.join("\n"));
                    }
                }
                panic!("writes stopped during the replace: {e}");
            }
        };
        assert!(!acked.is_empty());
        // The replaced member is not needed: stopped, the three current ones take writes.
        nodes[old].take().unwrap().eddy.kill();
        let rest: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        send_one(&rest, "after").await;
        for &member in &rest {
            serves(member, "--first", "before").await;
            serves_last(member, "after").await;
        }
        for &member in &rest {
            let reader = client_via(member).await;
            let held: Vec<String> = all_messages(&reader)
                .await
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            held_once(
                &format!("{member}: acknowledged during the replace"),
                &held,
                &acked,
            );
        }
        // The Iggy cluster metadata and `eddy cluster status` list exactly the current members.
        let reader = client_via(fourth_stream).await;
        metadata_lists(&reader, 3).await;
        let listed: Vec<u64> = cluster_status_cli(fourth_stream, false)
            .iter()
            .filter_map(|m| m["id"].as_u64())
            .collect();
        assert!(!listed.contains(&old_id), "{listed:?}");
        assert_eq!(listed.len(), 3, "{listed:?}");
    })
    .await;
}

/// A node started as a cluster of one (`--cluster`, no `--peer`) holds data and grows to
/// three members with two `eddy cluster add`s while a producer writes, without a restart:
/// the new members hold everything written before and during the changes, every group ends
/// with the three as voters, the Iggy cluster metadata lists the three, and with the first
/// member killed the two others take and serve writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_one_holding_data_grows_to_three_without_a_restart() {
    within(Duration::from_secs(300), async {
        let plan = crate::cluster_support::Plan::new(3, 3);
        let logs = LogsOnPanic::new();
        let first = plan.start(0, 0..1, &["--cluster"], false);
        logs.watch("member 1", &first);
        let one = first.stream;
        let one_events = first.eddy.addrs().client;
        let mut nodes: Vec<Option<Node>> = vec![Some(first)];
        let client = client_via(one).await;
        stream_s_topic_t(&client).await;
        send_one(&[one], "before").await;
        write_event(&[one_events], 1).await;
        let (leader, members) = leader_of(&client).await;
        assert_eq!((leader, members), (Some(one.port()), 1), "a cluster of one");

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = {
            let stop = std::sync::Arc::clone(&stop);
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for n in 0..400 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let payload = format!("w-{n}");
                    let uncertain = send_one(&[one], &payload).await;
                    acked.push((payload, uncertain));
                }
                acked
            })
        };

        for i in 1..3u8 {
            let add = format!("{}={}", i + 1, plan.replication(i));
            let adding =
                tokio::task::spawn_blocking(move || cluster_change_cli(one, &["add", &add]));
            let node = plan.start(i, 0..i, &[], true);
            logs.watch(format!("member {}", i + 1), &node);
            nodes.push(Some(node));
            let added = adding.await.unwrap().expect("eddy cluster add");
            assert!(added.contains(&format!("add member {}", i + 1)), "{added}");
        }
        groups_become(one, "three voters everywhere", |v, l| {
            v == [1, 2, 3] && l.is_empty()
        })
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked = producer.await.unwrap();
        assert!(!acked.is_empty());

        let streams: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        let events: Vec<SocketAddr> = nodes
            .iter()
            .flatten()
            .map(|n| n.eddy.addrs().client)
            .collect();
        for (&member, &member_events) in streams.iter().zip(&events) {
            serves(member, "--first", "before").await;
            serves_event(member_events, 1).await;
            let held: Vec<String> = all_messages(&client_via(member).await)
                .await
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            held_once(
                &format!("{member}: acknowledged while the cluster grew"),
                &held,
                &acked,
            );
        }
        let reader = client_via(streams[2]).await;
        metadata_lists(&reader, 3).await;

        // The first member is no longer needed: the two others are a majority.
        nodes[0].take().unwrap().eddy.kill();
        send_one(&streams[1..], "after").await;
        write_event(&events[1..], 2).await;
        for (&member, &member_events) in streams[1..].iter().zip(&events[1..]) {
            serves_last(member, "after").await;
            serves_event(member_events, 2).await;
        }
    })
    .await;
}

/// Removing the metadata leader itself while another member is down: the leader hands each
/// of its leaderships to a voter that is caught up and heard from (not merely the first one
/// listed, which may be the member that is down: then nothing moved, and every retry of the
/// command got the same refusal), and the command, following the leadership, finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_is_removed_while_another_member_is_down() {
    within(Duration::from_secs(300), async {
        let plan = crate::cluster_support::Plan::new(4, 4);
        let logs = LogsOnPanic::new();
        let mut nodes: Vec<Option<Node>> = (0..4)
            .map(|i| Some(plan.start(i, 0..4, &[], false)))
            .collect();
        for (i, node) in nodes.iter().flatten().enumerate() {
            logs.watch(format!("member {}", i + 1), node);
        }
        let all: Vec<SocketAddr> = nodes.iter().flatten().map(|n| n.stream).collect();
        let client = client_via(all[0]).await;
        stream_s_topic_t(&client).await;
        send_one(&all, "before").await;
        let (leader_port, _) = leader_of(&client).await;
        let leader = all
            .iter()
            .position(|a| Some(a.port()) == leader_port)
            .expect("a leader");
        // Every other member in turn could be the first voter listed: the one down is the
        // lowest other id, the command goes through the highest.
        let down = (0..4).find(|&i| i != leader).unwrap();
        let via = (0..4).rev().find(|&i| i != leader).unwrap();
        nodes[down].as_mut().unwrap().eddy.kill();
        let leader_id = (leader + 1).to_string();
        let removed =
            cluster_change_cli(all[via], &["remove", &leader_id]).expect("eddy cluster remove");
        assert!(
            removed.contains(&format!("remove member {leader_id}")),
            "{removed}"
        );
        let mut current: Vec<u64> = (1..=4u64).filter(|&id| id != leader as u64 + 1).collect();
        current.sort_unstable();
        groups_become(all[via], "the old leader is in no group", |v, l| {
            v == current.as_slice() && l.is_empty()
        })
        .await;
        nodes[leader].take().unwrap().eddy.kill();
        let live: Vec<SocketAddr> = (0..4)
            .filter(|&i| i != leader && i != down)
            .map(|i| all[i])
            .collect();
        send_one(&live, "after").await;
        for &member in &live {
            serves_last(member, "after").await;
        }
    })
    .await;
}
