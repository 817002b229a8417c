//! `eddy cluster status`: the members, their roles and how far behind each one is.
//!
//! Asks the member it connects to for `EDDY_CLUSTER_STATUS` (what that member knows: the
//! members it heard from, the groups it holds), then asks every other member it names, with
//! the same credentials and TLS settings. A group's leader is the one that knows each
//! replica's lag, so a member's lag is the largest its groups' leaders report. A member that
//! cannot be reached is listed as such; the command fails only when none answers.

use std::collections::BTreeMap;
use std::io::Write;

use clap::Args;
use eddy_client::StreamClient;
use eddy_codec::stream::commands::cluster_status::{
    ClusterStatus, GroupState, GROUP_EVENT_SHARD, GROUP_METADATA, GROUP_PARTITION, ROLE_CANDIDATE,
    ROLE_LEADER,
};
use serde_json::{json, Value};

use crate::conn::{login, ConnArgs, Settings};
use crate::error::CtlError;
use crate::output::{print_table, Table};

/// `eddy cluster status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// List every replicated group (its leader, term, commit index and each replica's lag)
    /// instead of the members.
    #[arg(long)]
    pub groups: bool,
}

/// One member's answer, or why there is none.
type Answer = Result<ClusterStatus, String>;

async fn ask(settings: &Settings, addr: &str) -> Answer {
    let Some(credentials) = &settings.credentials else {
        return Err("no credentials".into());
    };
    let mut client = StreamClient::connect(addr, &settings.connect)
        .await
        .map_err(|e| e.to_string())?;
    login(&mut client, credentials)
        .await
        .map_err(|e| e.one_line())?;
    client.cluster_status().await.map_err(|e| e.to_string())
}

/// Asks the configured member, then every member it names (by their advertised stream
/// addresses), one after another.
async fn gather(settings: &Settings) -> Result<BTreeMap<u64, (String, Answer)>, CtlError> {
    // `stream_client` refuses without credentials, naming how to give them.
    let first = settings.stream_client().await?.cluster_status().await?;
    let mut answers = BTreeMap::new();
    let others: Vec<(u64, String)> = first
        .members
        .0
        .iter()
        .filter(|m| m.id != first.node_id)
        .map(|m| (m.id, m.stream_address.0.clone()))
        .collect();
    answers.insert(first.node_id, (settings.stream_addr.clone(), Ok(first)));
    for (id, addr) in others {
        let answer = if addr.is_empty() {
            Err("never greeted the member asked".to_owned())
        } else {
            ask(settings, &addr).await
        };
        answers.insert(id, (addr, answer));
    }
    Ok(answers)
}

fn role_name(role: u8) -> &'static str {
    match role {
        ROLE_LEADER => "leader",
        ROLE_CANDIDATE => "candidate",
        _ => "follower",
    }
}

fn group_name(group: &GroupState) -> String {
    match group.kind {
        GROUP_METADATA => "metadata".to_owned(),
        GROUP_PARTITION => format!(
            "partition {}/{}/{}",
            group.stream_id, group.topic_id, group.partition_id
        ),
        GROUP_EVENT_SHARD => format!("event shard {}", group.id),
        _ => format!("group {}:{}", group.kind, group.id),
    }
}

/// The members table: one row per member, from its own answer and its groups' leaders'.
fn members_table(answers: &BTreeMap<u64, (String, Answer)>) -> Table {
    // Each member's largest lag, as the leaders of the groups report it.
    let mut lag: BTreeMap<u64, u64> = BTreeMap::new();
    for (_, answer) in answers.values() {
        let Ok(status) = answer else { continue };
        for group in &status.groups.0 {
            for l in &group.lag.0 {
                let worst = lag.entry(l.member).or_default();
                *worst = (*worst).max(l.behind);
            }
        }
    }
    // Each member's groups as a learner (being added: catching up, not voting yet), as the
    // groups' leaders (or, without one, any holder) list them; each group counted once.
    let mut learning: BTreeMap<u64, std::collections::BTreeSet<(u8, u64)>> = BTreeMap::new();
    for (_, answer) in answers.values() {
        let Ok(status) = answer else { continue };
        for group in &status.groups.0 {
            for &member in &group.learners.0 {
                learning
                    .entry(member)
                    .or_default()
                    .insert((group.kind, group.id));
            }
        }
    }
    let mut table = Table::new(vec![
        "id", "address", "state", "metadata", "term", "groups", "leads", "learns", "lag", "tls",
    ]);
    for (id, (addr, answer)) in answers {
        let row = match answer {
            Ok(status) => {
                let metadata = status.groups.0.iter().find(|g| g.kind == GROUP_METADATA);
                let leads = status
                    .groups
                    .0
                    .iter()
                    .filter(|g| g.role == ROLE_LEADER)
                    .count();
                let failed = status.groups.0.iter().filter(|g| g.failed).count();
                vec![
                    json!(id),
                    json!(addr),
                    json!(if failed > 0 {
                        format!("{failed} group(s) failed")
                    } else {
                        "up".to_owned()
                    }),
                    json!(metadata.map_or("-", |g| if g.learners.0.contains(id) {
                        "learner"
                    } else {
                        role_name(g.role)
                    })),
                    json!(metadata.map_or(0, |g| g.term)),
                    json!(status.groups.0.len()),
                    json!(leads),
                    json!(learning.get(id).map_or(0, std::collections::BTreeSet::len)),
                    json!(lag.get(id).copied().unwrap_or(0)),
                    json!(status.peer_tls),
                ]
            }
            Err(why) => vec![
                json!(id),
                json!(addr),
                json!(format!("unreachable: {why}")),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                json!(learning.get(id).map(std::collections::BTreeSet::len)),
                json!(lag.get(id).copied()),
                Value::Null,
            ],
        };
        table.push(row);
    }
    table
}

/// The groups table: every group once, as its leader (or, without one, any holder) reports it.
fn groups_table(answers: &BTreeMap<u64, (String, Answer)>) -> Table {
    let mut groups: BTreeMap<(u8, u64), GroupState> = BTreeMap::new();
    for (_, answer) in answers.values() {
        let Ok(status) = answer else { continue };
        for group in &status.groups.0 {
            let entry = groups
                .entry((group.kind, group.id))
                .or_insert_with(|| group.clone());
            if group.role == ROLE_LEADER {
                *entry = group.clone();
            }
        }
    }
    let mut table = Table::new(vec![
        "group", "leader", "term", "commit", "voters", "learners", "lag",
    ]);
    for group in groups.values() {
        let lag: serde_json::Map<String, Value> = group
            .lag
            .0
            .iter()
            .map(|l| (l.member.to_string(), json!(l.behind)))
            .collect();
        table.push(vec![
            json!(group_name(group)),
            if group.leader == 0 {
                Value::Null
            } else {
                json!(group.leader)
            },
            json!(group.term),
            json!(group.commit),
            json!(group.voters.0),
            json!(group.learners.0),
            Value::Object(lag),
        ]);
    }
    table
}

/// Runs `eddy cluster status`.
pub async fn run(args: &StatusArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let answers = gather(&settings).await?;
    let table = if args.groups {
        groups_table(&answers)
    } else {
        members_table(&answers)
    };
    print_table(out, settings.format, &table).map_err(CtlError::Output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_codec::stream::codec::{Counted, LongString};
    use eddy_codec::stream::commands::cluster_status::{MemberLag, MemberState, ROLE_FOLLOWER};

    fn group(kind: u8, id: u64, role: u8, leader: u64, lag: &[(u64, u64)]) -> GroupState {
        GroupState {
            kind,
            id,
            stream_id: 1,
            topic_id: 1,
            partition_id: u32::try_from(id).unwrap(),
            role,
            leader,
            term: 3,
            commit: 40,
            applied: 40,
            last_index: 41,
            failed: false,
            lag: Counted(
                lag.iter()
                    .map(|&(member, behind)| MemberLag { member, behind })
                    .collect(),
            ),
            voters: Counted(vec![1, 2, 3]),
            learners: Counted(Vec::new()),
        }
    }

    /// The metadata group as member 4, being added, sees it: a learner.
    fn learning(mut group: GroupState) -> GroupState {
        group.learners = Counted(vec![4]);
        group
    }

    fn member(id: u64) -> MemberState {
        MemberState {
            id,
            stream_address: LongString::new(format!("127.0.0.{id}:8090")),
            connected: true,
        }
    }

    #[test]
    fn lag_comes_from_the_leaders_and_an_unreachable_member_is_listed() {
        let one = ClusterStatus {
            node_id: 1,
            peer_tls: true,
            members: Counted(vec![member(1), member(2), member(3)]),
            groups: Counted(vec![
                learning(group(GROUP_METADATA, 0, ROLE_LEADER, 1, &[(2, 0), (3, 7)])),
                group(GROUP_PARTITION, 5, ROLE_FOLLOWER, 2, &[]),
            ]),
        };
        let four = ClusterStatus {
            node_id: 4,
            groups: Counted(vec![learning(group(
                GROUP_METADATA,
                0,
                ROLE_FOLLOWER,
                1,
                &[],
            ))]),
            ..one.clone()
        };
        let two = ClusterStatus {
            node_id: 2,
            groups: Counted(vec![
                group(GROUP_METADATA, 0, ROLE_FOLLOWER, 1, &[]),
                group(GROUP_PARTITION, 5, ROLE_LEADER, 2, &[(1, 2), (3, 9)]),
            ]),
            ..one.clone()
        };
        let answers = BTreeMap::from([
            (1, ("127.0.0.1:8090".to_owned(), Ok(one))),
            (2, ("127.0.0.2:8090".to_owned(), Ok(two))),
            (3, ("127.0.0.3:8090".to_owned(), Err("refused".to_owned()))),
            (4, ("127.0.0.4:8090".to_owned(), Ok(four))),
        ]);
        let members = members_table(&answers).objects();
        assert_eq!(members[0]["metadata"], "leader");
        assert_eq!(members[0]["leads"], 1);
        assert_eq!(members[0]["lag"], 2);
        assert_eq!(members[1]["metadata"], "follower");
        assert_eq!(members[2]["lag"], 9, "the worst any leader reports");
        assert!(members[2]["state"]
            .as_str()
            .unwrap()
            .starts_with("unreachable"));
        assert_eq!(members[3]["metadata"], "learner");
        assert_eq!(members[3]["learns"], 1, "one group, however many report it");
        assert_eq!(members[0]["learns"], 0);
        let groups = groups_table(&answers).objects();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["group"], "metadata");
        assert_eq!(groups[0]["lag"]["3"], 7);
        assert_eq!(groups[1]["group"], "partition 1/1/5");
        assert_eq!(groups[1]["leader"], 2);
        assert_eq!(groups[0]["learners"], json!([4]));
        assert_eq!(groups[1]["voters"], json!([1, 2, 3]));
        assert_eq!(groups[1]["learners"], json!([]));
    }
}
