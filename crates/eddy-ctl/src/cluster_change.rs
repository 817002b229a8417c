//! `eddy cluster add`, `remove` and `replace`: change the cluster's members at run time.
//!
//! Each asks the metadata group's leader (found from the member it connects to, through
//! `EDDY_CLUSTER_STATUS`) with `EDDY_CLUSTER_ADD_MEMBER` or `EDDY_CLUSTER_REMOVE_MEMBER`,
//! and follows the leadership when it moves (a leader asked to remove itself hands its
//! leaderships over and answers "not the leader"). `replace OLD NEW=HOST:PORT` adds the new
//! member, then removes the old one, so the group never has fewer voters than before.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use eddy_client::StreamClient;
use eddy_codec::stream::commands::cluster_change::ClusterMemberChanged;
use eddy_codec::stream::commands::cluster_status::GROUP_METADATA;
use eddy_codec::stream::ErrorCode;
use serde_json::json;

use crate::conn::{login, ConnArgs, Settings};
use crate::error::CtlError;
use crate::output::Format;

/// `eddy cluster add`.
#[derive(Debug, Clone, Args)]
pub struct AddArgs {
    /// The new member: its node id and where the others reach its replication port
    /// (`4=10.0.0.4:10001`). Start it with `eddy serve --node-id 4 --join --peer ...` (the
    /// current members), before or while this runs.
    #[arg(value_name = "ID=HOST:PORT")]
    pub member: String,
    /// Longest wait for the new member to catch up on every group, in seconds.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub wait: u64,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `eddy cluster remove`.
#[derive(Debug, Clone, Args)]
pub struct RemoveArgs {
    /// The member's node id.
    #[arg(value_name = "ID")]
    pub id: u64,
    /// Longest wait, in seconds.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub wait: u64,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `eddy cluster replace`.
#[derive(Debug, Clone, Args)]
pub struct ReplaceArgs {
    /// The member to replace (its node id).
    #[arg(value_name = "OLD")]
    pub old: u64,
    /// The member replacing it, as for `add` (`5=10.0.0.5:10001`).
    #[arg(value_name = "NEW=HOST:PORT")]
    pub new: String,
    /// Longest wait for each of the two changes, in seconds.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub wait: u64,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// One change to send.
#[derive(Debug, Clone)]
enum Change {
    Add { id: u64, address: String },
    Remove { id: u64 },
}

impl Change {
    fn describe(&self) -> String {
        match self {
            Change::Add { id, address } => format!("add member {id} at {address}"),
            Change::Remove { id } => format!("remove member {id}"),
        }
    }
}

/// Parses `ID=HOST:PORT`.
fn parse_member(text: &str) -> Result<(u64, String), CtlError> {
    let usage = || {
        CtlError::Usage(format!(
            "{text:?}: expected ID=HOST:PORT (4=10.0.0.4:10001)"
        ))
    };
    let (id, address) = text.split_once('=').ok_or_else(usage)?;
    let id: u64 = id.trim().parse().map_err(|_| usage())?;
    let (host, port) = address.rsplit_once(':').ok_or_else(usage)?;
    if id == 0 || host.is_empty() || port.parse::<u16>().is_err() {
        return Err(usage());
    }
    Ok((id, address.to_owned()))
}

/// `eddy cluster add`.
///
/// # Errors
/// Bad arguments, no leader found, or the change refused or unfinished.
pub async fn add(args: &AddArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let (id, address) = parse_member(&args.member)?;
    let settings = args.conn.resolve()?;
    let change = Change::Add { id, address };
    let done = apply(&settings, &change, Duration::from_secs(args.wait)).await?;
    report(&settings, out, &[(change, done)])
}

/// `eddy cluster remove`.
///
/// # Errors
/// No leader found, or the change refused or unfinished.
pub async fn remove(args: &RemoveArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let change = Change::Remove { id: args.id };
    let done = apply(&settings, &change, Duration::from_secs(args.wait)).await?;
    report(&settings, out, &[(change, done)])
}

/// `eddy cluster replace`: add, then remove.
///
/// # Errors
/// Bad arguments, no leader found, or either change refused or unfinished (a failed add
/// leaves the old member in place).
pub async fn replace(args: &ReplaceArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let (id, address) = parse_member(&args.new)?;
    if id == args.old {
        return Err(CtlError::Usage(
            "the new member needs another node id than the one it replaces".into(),
        ));
    }
    let settings = args.conn.resolve()?;
    let wait = Duration::from_secs(args.wait);
    let add = Change::Add { id, address };
    let added = apply(&settings, &add, wait).await?;
    let remove = Change::Remove { id: args.old };
    let removed = apply(&settings, &remove, wait).await?;
    report(&settings, out, &[(add, added), (remove, removed)])
}

/// How long a change keeps looking for the metadata leader (an election, a hand-over).
const FIND_LEADER: Duration = Duration::from_secs(30);

/// Sends `change` to the metadata leader, following leadership moves for up to
/// [`FIND_LEADER`]; the change itself may then take up to `wait`.
async fn apply(
    settings: &Settings,
    change: &Change,
    wait: Duration,
) -> Result<ClusterMemberChanged, CtlError> {
    let deadline = Instant::now() + FIND_LEADER;
    loop {
        let attempt = async {
            let mut client = leader_client(settings).await?;
            let answer = match change {
                Change::Add { id, address } => client.add_cluster_member(*id, address, wait).await,
                Change::Remove { id } => client.remove_cluster_member(*id, wait).await,
            };
            answer.map_err(CtlError::from)
        };
        match attempt.await {
            Ok(changed) if changed.complete => return Ok(changed),
            Ok(changed) => {
                return Err(CtlError::Failed(format!(
                    "{}: {}",
                    change.describe(),
                    changed.message.0
                )))
            }
            // Not (or no longer) the leader, or none known yet: ask again.
            Err(e) if is_not_leader(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.context(change.describe())),
        }
    }
}

fn is_not_leader(e: &CtlError) -> bool {
    match e {
        CtlError::Client(c) => c.code() == Some(ErrorCode::TransientNotAccepted as u32),
        CtlError::Context { source, .. } => is_not_leader(source),
        CtlError::Failed(_) => true,
        _ => false,
    }
}

/// A logged-in client of the metadata leader, as the configured member knows it.
async fn leader_client(settings: &Settings) -> Result<StreamClient, CtlError> {
    let mut first = settings.stream_client().await?;
    let status = first.cluster_status().await?;
    let leader = status
        .groups
        .0
        .iter()
        .find(|g| g.kind == GROUP_METADATA)
        .map(|g| g.leader)
        .filter(|&l| l != 0)
        .ok_or_else(|| CtlError::Failed("the member knows no metadata leader".into()))?;
    if leader == status.node_id {
        return Ok(first);
    }
    let address = status
        .members
        .0
        .iter()
        .find(|m| m.id == leader)
        .map(|m| m.stream_address.0.clone())
        .filter(|a| !a.is_empty())
        .ok_or_else(|| CtlError::Failed(format!("the leader {leader}'s address is unknown")))?;
    let credentials = settings
        .credentials
        .as_ref()
        .ok_or_else(|| CtlError::Usage("no credentials".into()))?;
    let mut client = StreamClient::connect(&address, &settings.connect).await?;
    login(&mut client, credentials).await?;
    Ok(client)
}

fn report(
    settings: &Settings,
    out: &mut dyn Write,
    done: &[(Change, ClusterMemberChanged)],
) -> Result<(), CtlError> {
    for (change, changed) in done {
        match settings.format {
            Format::Json => {
                let value = json!({
                    "change": change.describe(),
                    "complete": changed.complete,
                    "groups": changed.groups,
                });
                writeln!(out, "{value}").map_err(CtlError::Output)?;
            }
            _ => writeln!(
                out,
                "{}: done on {} replicated groups",
                change.describe(),
                changed.groups
            )
            .map_err(CtlError::Output)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_as_id_host_port() {
        assert_eq!(
            parse_member("4=10.0.0.4:10001").unwrap(),
            (4, "10.0.0.4:10001".to_owned())
        );
        assert_eq!(
            parse_member("12=node-12.example:7").unwrap(),
            (12, "node-12.example:7".to_owned())
        );
        for bad in ["4", "x=h:1", "0=h:1", "4=h", "4=:1", "4=h:99999"] {
            assert!(parse_member(bad).is_err(), "{bad}");
        }
    }
}
