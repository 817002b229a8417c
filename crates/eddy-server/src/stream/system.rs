//! System commands: stats, cluster metadata, describe options, me, client, clients.

use eddy_codec::stream::codec::{Counted, LongString, ToEnd, F32};
use eddy_codec::stream::commands::cluster_change::{
    AddClusterMember, ClusterMemberChanged, RemoveClusterMember,
};
use eddy_codec::stream::commands::cluster_status::{ClusterStatus, MemberState};
use eddy_codec::stream::commands::describe_options::{DescribeOptions, OptionsCatalog};
use eddy_codec::stream::commands::get_cluster_metadata::{
    ClusterMetadata, ClusterNode, ROLE_FOLLOWER, ROLE_LEADER, STATUS_HEALTHY,
};
use eddy_codec::stream::commands::get_snapshot::{GetSnapshot, Snapshot};
use eddy_codec::stream::commands::get_stats::Stats;
use eddy_options::{DescribeOptionsReply, TopicSettings};

use super::handler::{Ctx, Outcome, SERVER_VERSION};
use super::{stats, views};
use eddy_replicated::stream::error::StreamError;

/// Cluster name of a single node.
pub const CLUSTER_NAME: &str = "single-node";
/// This node's name.
pub const NODE_NAME: &str = "eddy-node";

/// `GET_STATS`: process, host and storage figures.
pub(crate) fn get_stats(ctx: Ctx<'_>) -> Outcome {
    let state = ctx.state;
    let host = state.host.sample(&state.data_dir);
    let counts = stats::EntityCounts::of(state);
    let run_time = u64::try_from(state.started.elapsed().as_micros()).unwrap_or(u64::MAX);
    Outcome::payload(&Stats {
        process_id: std::process::id(),
        cpu_usage: F32(host.cpu_usage),
        total_cpu_usage: F32(host.total_cpu_usage),
        memory_usage: host.memory_usage,
        total_memory: host.total_memory,
        available_memory: host.available_memory,
        run_time,
        start_time: state.started_at_us,
        read_bytes: host.read_bytes,
        written_bytes: host.written_bytes,
        messages_size_bytes: counts.bytes,
        streams_count: counts.streams,
        topics_count: counts.topics,
        partitions_count: counts.partitions,
        segments_count: counts.segments,
        messages_count: counts.messages,
        clients_count: u32::try_from(state.clients.len()).unwrap_or(u32::MAX),
        consumer_groups_count: counts.groups,
        hostname: LongString::new(host.hostname),
        os_name: LongString::new(host.os_name),
        os_version: LongString::new(host.os_version),
        kernel_version: LongString::new(host.kernel_version),
        iggy_server_version: LongString::new(format!("eddy {SERVER_VERSION}")),
        iggy_server_semver: stats::packed_semver(SERVER_VERSION),
        cache_metrics: Counted(Vec::new()),
        threads_count: host.threads,
        free_disk_space: host.free_disk,
        total_disk_space: host.total_disk,
    })
}

/// `GET_SNAPSHOT_FILE`: a ZIP archive of the asked diagnostics (see `snapshot.rs`), built off
/// the reactor; refused with 9000 when it would not fit in one reply frame.
pub(crate) async fn snapshot(ctx: Ctx<'_>, request: GetSnapshot) -> Result<Outcome, StreamError> {
    let state = ctx.state;
    let inputs = super::snapshot::Inputs {
        data_dir: state.data_dir.clone(),
        config_toml: state.config_toml.clone(),
        host: state.host.sample(&state.data_dir),
    };
    let built = tokio::task::spawn_blocking(move || {
        super::snapshot::build(request.compression, &request.types, &inputs)
    })
    .await;
    let archive = match built {
        Ok(Ok(archive)) => archive,
        Ok(Err(e)) => {
            return Err(StreamError::SnapshotFailed {
                reason: e.to_string(),
            })
        }
        Err(e) => {
            return Err(StreamError::SnapshotFailed {
                reason: format!("snapshot task failed: {e}"),
            })
        }
    };
    let limit = (state.max_frame_size as usize).saturating_sub(eddy_wire::stream::HEADER_SIZE);
    if archive.len() > limit {
        return Err(StreamError::SnapshotFailed {
            reason: format!(
                "the archive is {} bytes, above the {limit}-byte reply limit",
                archive.len()
            ),
        });
    }
    Ok(Outcome::payload(&Snapshot(bytes::Bytes::from(archive))))
}

/// `GET_CLUSTER_METADATA`: exactly one node, this one, leader and healthy (so the SDK's
/// post-login leader probe stays on this connection).
pub(crate) async fn cluster_metadata(ctx: Ctx<'_>) -> Outcome {
    if let Some(cluster) = &ctx.state.cluster {
        // Named leader only once a quorum confirms the metadata group's leadership: an
        // isolated former leader lists no leader (the SDK waits for one) rather than itself.
        let confirmed = cluster.linearize_metadata().await.is_ok();
        return cluster_members(cluster, confirmed);
    }
    this_member_alone(ctx)
}

/// `GET_CLUSTER_METADATA` as one replica: this member alone, as the one a client sends every
/// request to. A single node's answer, and a cluster member's to a 0.12.2 client: that
/// client dials every replica listed and binds its session on each (`BIND_SESSION`), while
/// eddy's sessions live on the member that registered them; the member it reached serves
/// it whole instead (reads here, linearized; writes forwarded to their groups' leaders).
pub(crate) fn this_member_alone(ctx: Ctx<'_>) -> Outcome {
    let addr = ctx.state.node.stream_addr;
    Outcome::payload(&ClusterMetadata {
        name: LongString::new(CLUSTER_NAME),
        nodes: Counted(vec![ClusterNode {
            name: LongString::new(NODE_NAME),
            ip: LongString::new(addr.ip().to_string()),
            tcp_port: addr.port(),
            quic_port: 0,
            http_port: 0,
            websocket_port: 0,
            role: ROLE_LEADER,
            status: STATUS_HEALTHY,
        }]),
    })
}

/// `GET_CLUSTER_METADATA` on a cluster member: every member with the stream address it
/// advertised, the metadata group's leader as `Leader` (the SDK connects there), the others
/// as followers; a member this node cannot reach is `Unreachable`.
fn cluster_members(cluster: &crate::cluster::streams::ClusterStreams, confirmed: bool) -> Outcome {
    const STATUS_UNREACHABLE: u8 = 3;
    let nodes = cluster
        .members()
        .into_iter()
        .filter_map(|(id, hello, connected, leader)| {
            let stream = hello?
                .prop(crate::cluster::transport::props::STREAM)?
                .parse::<std::net::SocketAddr>()
                .ok()?;
            Some(ClusterNode {
                name: LongString::new(format!("eddy-{id}")),
                ip: LongString::new(stream.ip().to_string()),
                tcp_port: stream.port(),
                quic_port: 0,
                http_port: 0,
                websocket_port: 0,
                role: if leader && confirmed {
                    ROLE_LEADER
                } else {
                    ROLE_FOLLOWER
                },
                status: if connected {
                    STATUS_HEALTHY
                } else {
                    STATUS_UNREACHABLE
                },
            })
        })
        .collect();
    Outcome::payload(&ClusterMetadata {
        name: LongString::new("eddy-cluster"),
        nodes: Counted(nodes),
    })
}

/// `EDDY_CLUSTER_STATUS`: what this member knows of the cluster; a single node is a cluster
/// of one member, itself, holding no replicated group.
pub(crate) async fn cluster_status(ctx: Ctx<'_>) -> Outcome {
    if let Some(cluster) = &ctx.state.cluster {
        let cluster = cluster.clone();
        let status = tokio::task::spawn_blocking(move || cluster.status())
            .await
            .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()));
        return Outcome::payload(&status);
    }
    let node = &ctx.state.node;
    Outcome::payload(&ClusterStatus {
        node_id: node.id,
        peer_tls: false,
        members: Counted(vec![MemberState {
            id: node.id,
            stream_address: LongString::new(node.stream_addr.to_string()),
            connected: true,
        }]),
        groups: Counted(Vec::new()),
    })
}

/// `EDDY_CLUSTER_ADD_MEMBER` / `EDDY_CLUSTER_REMOVE_MEMBER`: changes the cluster's members
/// on its metadata leader (see `cluster::streams::membership`). A refusal or an unfinished
/// change is answered with its reason; a member that does not lead the metadata group
/// answers `TransientNotAccepted`.
pub(crate) async fn change_members(
    ctx: Ctx<'_>,
    add: Option<AddClusterMember>,
    remove: Option<RemoveClusterMember>,
) -> Result<Outcome, StreamError> {
    let Some(cluster) = &ctx.state.cluster else {
        return Ok(Outcome::payload(&ClusterMemberChanged {
            complete: false,
            groups: 0,
            message: LongString::new(
                "this server runs as a single node (no --peer): it has no cluster to change",
            ),
        }));
    };
    let changed = match (add, remove) {
        (Some(add), _) => cluster.add_member(add.id, add.replication_address.0).await,
        (None, Some(remove)) => cluster.remove_member(remove.id).await,
        (None, None) => {
            return Err(StreamError::Unavailable {
                command: eddy_codec::stream::command_table::CommandCode::AddClusterMember,
            })
        }
    };
    match changed {
        Ok(groups) => Ok(Outcome::payload(&ClusterMemberChanged {
            complete: true,
            groups,
            message: LongString::new(""),
        })),
        Err(e) if e.is_transient() => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "a cluster membership change was refused or did not complete");
            Ok(Outcome::payload(&ClusterMemberChanged {
                complete: false,
                groups: 0,
                message: LongString::new(e.to_string()),
            }))
        }
    }
}

/// `DESCRIBE_OPTIONS`: the catalog of a scope with eddy's defaults.
pub(crate) fn describe_options(request: DescribeOptions) -> Outcome {
    Outcome::payload(&OptionsCatalog(DescribeOptionsReply::for_scope(
        request.scope,
        &TopicSettings::EDDY_DEFAULTS,
    )))
}

/// `GET_ME` / `GET_CLIENT`: one connection with its consumer groups.
pub(crate) fn get_client(ctx: Ctx<'_>, client_id: u32) -> Result<Outcome, StreamError> {
    let info = ctx
        .state
        .clients
        .get(client_id)
        .ok_or(StreamError::NotFound(
            eddy_replicated::stream::error::Missing::Client,
        ))?;
    let groups = ctx.state.groups().groups_of(client_id);
    Ok(Outcome::payload(&views::client_details(&info, &groups)))
}

/// `GET_CLIENTS`: every connection.
pub(crate) fn get_clients(ctx: Ctx<'_>) -> Outcome {
    let clients = ctx.state.clients.list();
    let groups = ctx.state.groups();
    let list: Vec<_> = clients
        .iter()
        .map(|c| views::client_response(c, groups.groups_of(c.client_id).len()))
        .collect();
    drop(groups);
    Outcome::payload(&ToEnd(list))
}
