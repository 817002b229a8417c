//! Membership changes during a chaos run (`--membership`), made as an operator makes them:
//! a new member gets a host of its own (a namespace, a new node id, a new address) and is
//! started with `eddy serve --join`, then `eddy cluster replace OLD NEW=...` or
//! `eddy cluster add NEW=...` (and later `eddy cluster remove NEW`) runs against a current
//! member while the faults go on. A command that fails (its metadata leader died, no leader
//! within its patience) is run again after a second, through the next member: a failed
//! `replace` as `add` then `remove`, an `add` refused because the member is one already, or a
//! `remove` refused because it is no member, counting as done. A removed member's process is
//! stopped and its namespace deleted.
//!
//! The driver is polled by the run's loop (it never blocks on a command); at the end,
//! [`verify`] checks through `eddy cluster status` and the Iggy cluster metadata that the
//! groups and the metadata hold exactly the members the changes left.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::net::Net;
use super::schedule::{Change, ChangeKind, Target, LEADER_KILL_HOLD};
use super::workload::events::EventLoad;
use super::workload::Load;

/// Longest wait one command is given (`--wait`); the harness kills it a minute later.
const COMMAND_WAIT: Duration = Duration::from_secs(120);
/// Longest a change may take, re-runs included, before the run counts it as never completed.
pub const CHANGE_PATIENCE: Duration = Duration::from_secs(300);
/// Pause before a failed command is run again.
const RERUN_AFTER: Duration = Duration::from_secs(1);

/// Figures of the changes of a run.
#[derive(Debug, Default)]
pub struct Tally {
    pub planned: usize,
    pub started: usize,
    pub completed: usize,
    /// `eddy cluster` commands run, and of them the ones that failed (and were run again).
    pub commands: usize,
    pub failed_commands: usize,
    /// Metadata leaders killed while a change's command ran.
    pub leader_kills: usize,
    /// One line per change: what it did, how long it took.
    pub lines: Vec<String>,
}

/// Where a running change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The first `eddy cluster replace`.
    Replace,
    /// `eddy cluster add` (first, or again after a failed replace).
    Add,
    /// An added member serving until `until`, before its removal.
    Stay { until: Instant },
    /// `eddy cluster remove` of `Running::old`.
    Remove,
}

/// A command in flight.
struct InFlight {
    line: String,
    task: tokio::task::JoinHandle<Result<String, String>>,
}

struct Running {
    change: Change,
    new: u8,
    /// The member taken out (a replace's old one, or the added one of an add-then-remove).
    old: Option<u8>,
    step: Step,
    started: Instant,
    command: Option<InFlight>,
    next_try: Instant,
    /// When to kill the metadata leader (set when the step's first command starts).
    kill_at: Option<Instant>,
    /// Commands this change ran.
    commands: usize,
    last_error: Option<String>,
}

/// The membership side of a run.
pub struct Driver {
    plan: Vec<Change>,
    next: usize,
    running: Option<Running>,
    /// The members the cluster has once the running change is through (sorted).
    members: Vec<u8>,
    /// The processes the harness runs as members or members to be: the faults' targets.
    live: Vec<u8>,
    removed: Vec<u8>,
    next_id: u8,
    /// A leader killed mid-change and when it is restarted.
    leader_down: Option<(u8, Instant)>,
    load: Arc<Load>,
    events: Arc<EventLoad>,
    start: Instant,
    pub tally: Tally,
    pub failures: Vec<String>,
}

fn say(start: Instant, what: &str) {
    eprintln!(
        "chaos [{:>7.1}s] membership: {what}",
        start.elapsed().as_secs_f64()
    );
}

impl Driver {
    /// `plan` for a cluster founded by `1..=nodes`; `start` is the run's clock (for its
    /// narrative).
    pub fn new(
        plan: Vec<Change>,
        nodes: u8,
        load: Arc<Load>,
        events: Arc<EventLoad>,
        start: Instant,
    ) -> Self {
        let founders: Vec<u8> = (1..=nodes).collect();
        Self {
            tally: Tally {
                planned: plan.len(),
                ..Tally::default()
            },
            plan,
            next: 0,
            running: None,
            members: founders.clone(),
            live: founders,
            removed: Vec::new(),
            next_id: nodes + 1,
            leader_down: None,
            load,
            events,
            start,
            failures: Vec::new(),
        }
    }

    /// The members the cluster has (or will have once the running change is through).
    pub fn members(&self) -> &[u8] {
        &self.members
    }

    /// The nodes the harness runs: members, a member being added, one being removed.
    pub fn live(&self) -> &[u8] {
        &self.live
    }

    /// Members removed so far.
    pub fn removed(&self) -> &[u8] {
        &self.removed
    }

    /// Whether a change runs.
    pub fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// Planned changes not begun yet.
    pub fn pending(&self) -> usize {
        self.plan.len() - self.next
    }

    /// Moves the changes on: restarts a leader killed mid-change once its time is up,
    /// begins the next planned change when its time came (`begin`: the fault phase is on,
    /// `elapsed` into it), collects a finished command and starts the next.
    pub async fn poll(
        &mut self,
        cluster: &mut Cluster,
        net: &Net,
        elapsed: Duration,
        begin: bool,
    ) -> Result<(), String> {
        let now = Instant::now();
        if let Some((n, at)) = self.leader_down {
            if now >= at {
                self.leader_down = None;
                cluster.start(n)?;
            }
        }
        if self.running.is_none() {
            if begin && self.next < self.plan.len() && elapsed >= self.plan[self.next].at {
                let change = self.plan[self.next].clone();
                self.next += 1;
                self.begin(change, cluster, net).await?;
            }
            return Ok(());
        }
        let Some(running) = self.running.as_mut() else {
            return Ok(());
        };
        if running.started.elapsed() > CHANGE_PATIENCE {
            let running = self.running.take().expect("running");
            let failure = format!(
                "membership change {} (new member {}) did not complete within {:?} and {} commands; last error: {}",
                running.change,
                running.new,
                CHANGE_PATIENCE,
                running.commands,
                running.last_error.as_deref().unwrap_or("none")
            );
            say(self.start, &failure);
            self.failures.push(failure);
            return Ok(());
        }
        // The leader dies in the middle of the command, as planned.
        if running.kill_at.is_some_and(|at| now >= at) {
            running.kill_at = None;
            if running.command.is_some() && self.leader_down.is_none() {
                if let Some(leader) = cluster.leader().await {
                    say(
                        self.start,
                        &format!(
                            "SIGKILL the metadata leader (node {leader}) while `{}` runs",
                            running.command.as_ref().map_or("", |c| c.line.as_str())
                        ),
                    );
                    cluster.kill(leader);
                    self.leader_down = Some((leader, Instant::now() + LEADER_KILL_HOLD));
                    self.tally.leader_kills += 1;
                }
            }
        }
        if let Step::Stay { until } = running.step {
            if now >= until {
                running.step = Step::Remove;
                running.old = Some(running.new);
                running.kill_at = running
                    .change
                    .kill_leader_in_remove
                    .map(|d| Instant::now() + d);
            } else {
                return Ok(());
            }
        }
        let finished = running
            .command
            .as_ref()
            .is_some_and(|c| c.task.is_finished());
        if finished {
            let command = running.command.take().expect("a command");
            let outcome = command
                .task
                .await
                .unwrap_or_else(|e| Err(format!("the command's task failed: {e}")));
            self.collect(&command.line, &outcome, cluster, net);
        }
        let Some(running) = self.running.as_mut() else {
            return Ok(());
        };
        let waits = matches!(running.step, Step::Stay { .. });
        if running.command.is_none() && !waits && Instant::now() >= running.next_try {
            let members: Vec<u8> = self.members.clone();
            let line = self.launch(cluster, &members);
            say(self.start, &format!("running `{line}`"));
        }
        Ok(())
    }

    /// Starts `change`: a namespace and a `--join` process for the new member, then its first
    /// command (at the next poll).
    async fn begin(
        &mut self,
        change: Change,
        cluster: &mut Cluster,
        net: &Net,
    ) -> Result<(), String> {
        if self.next_id > cluster.slots() {
            return Err(format!(
                "membership change {change}: no node number left ({} slots)",
                cluster.slots()
            ));
        }
        let new = self.next_id;
        self.next_id += 1;
        let old = match change.kind {
            ChangeKind::AddRemove => None,
            ChangeKind::Replace => Some(match change.old {
                Target::Leader => match cluster.leader().await {
                    Some(l) if self.members.contains(&l) => l,
                    _ => self.members[0],
                },
                Target::Node(k) => self.members[usize::from(k - 1) % self.members.len()],
            }),
        };
        say(
            self.start,
            &format!(
                "{change}: new member {new} at {}{}",
                cluster.replication_addr(new),
                old.map_or_else(String::new, |o| format!(", replacing member {o}"))
            ),
        );
        net.add_node(new)?;
        cluster.prepare_join(new, &self.members);
        cluster.start(new)?;
        self.live.push(new);
        self.tally.started += 1;
        let step = match change.kind {
            ChangeKind::Replace => Step::Replace,
            ChangeKind::AddRemove => Step::Add,
        };
        let now = Instant::now();
        self.running = Some(Running {
            kill_at: change.kill_leader.map(|d| now + d),
            change,
            new,
            old,
            step,
            started: now,
            command: None,
            next_try: now,
            commands: 0,
            last_error: None,
        });
        Ok(())
    }

    /// Runs the running change's next command in the background, through a running member
    /// (a different one at each attempt); returns its command line.
    fn launch(&mut self, cluster: &Cluster, members: &[u8]) -> String {
        let running = self.running.as_mut().expect("a change runs");
        let new_member = format!("{}={}", running.new, cluster.replication_addr(running.new));
        let args: Vec<String> = match running.step {
            Step::Replace => vec![
                "replace".into(),
                running.old.expect("a replace's old member").to_string(),
                new_member,
            ],
            Step::Add => vec!["add".into(), new_member],
            Step::Remove => vec![
                "remove".into(),
                running.old.expect("the member to remove").to_string(),
            ],
            Step::Stay { .. } => unreachable!("no command while an added member stays"),
        };
        let up: Vec<u8> = members
            .iter()
            .copied()
            .filter(|&m| cluster.is_running(m))
            .collect();
        let pool = if up.is_empty() { members.to_vec() } else { up };
        let via = pool[running.commands % pool.len()];
        running.commands += 1;
        self.tally.commands += 1;
        let line = format!("eddy cluster {} (through member {via})", args.join(" "));
        let task = tokio::spawn(eddy_cluster(
            cluster.bin().to_owned(),
            cluster.stream_addr(via),
            args,
        ));
        running.command = Some(InFlight {
            line: line.clone(),
            task,
        });
        line
    }

    /// Takes in a finished command's outcome.
    fn collect(
        &mut self,
        line: &str,
        outcome: &Result<String, String>,
        cluster: &mut Cluster,
        net: &Net,
    ) {
        let running = self.running.as_mut().expect("a change runs");
        let step = running.step;
        let error = match outcome {
            Ok(out) => {
                say(
                    self.start,
                    &format!("`{line}` done: {}", out.trim().replace('\n', "; ")),
                );
                None
            }
            Err(e) => Some(e.trim().replace('\n', " ")),
        };
        // What an operator reads from a failed command's message.
        let already_added = error
            .as_deref()
            .is_some_and(|e| e.contains("a member already"));
        let already_removed = error.as_deref().is_some_and(|e| e.contains("is no member"));
        if let Some(e) = &error {
            say(self.start, &format!("`{line}` failed: {e}"));
            self.tally.failed_commands += 1;
            running.last_error = Some(e.clone());
        }
        match step {
            Step::Replace if error.is_none() => {
                let new = running.new;
                self.added(new, cluster);
                self.finish_removal(cluster, net);
            }
            Step::Replace => {
                say(self.start, "running it again as `add`, then `remove`");
                let running = self.running.as_mut().expect("a change runs");
                running.step = Step::Add;
                running.next_try = Instant::now() + RERUN_AFTER;
            }
            Step::Add if error.is_none() || already_added => {
                let new = running.new;
                self.added(new, cluster);
                let running = self.running.as_mut().expect("a change runs");
                match running.change.kind {
                    ChangeKind::Replace => running.step = Step::Remove,
                    ChangeKind::AddRemove => {
                        running.step = Step::Stay {
                            until: Instant::now() + running.change.stay,
                        };
                    }
                }
            }
            Step::Remove if error.is_none() || already_removed => self.finish_removal(cluster, net),
            Step::Add | Step::Remove => {
                running.next_try = Instant::now() + RERUN_AFTER;
            }
            Step::Stay { .. } => unreachable!("no command while an added member stays"),
        }
    }

    /// The new member is one: the clients may use it.
    fn added(&mut self, new: u8, cluster: &Cluster) {
        if !self.members.contains(&new) {
            self.members.push(new);
            self.members.sort_unstable();
        }
        self.update_clients(cluster);
    }

    /// The running change's member is out: stop it, delete its host, and the change is done.
    fn finish_removal(&mut self, cluster: &mut Cluster, net: &Net) {
        let running = self.running.take().expect("a change runs");
        let old = running.old.expect("a member to remove");
        cluster.retire(old);
        net.remove_node(old);
        if self.leader_down.is_some_and(|(n, _)| n == old) {
            self.leader_down = None;
        }
        self.members.retain(|&m| m != old);
        self.live.retain(|&m| m != old);
        self.removed.push(old);
        self.tally.completed += 1;
        let line = format!(
            "{}: member {} in{}, {:.1}s, {} command(s)",
            running.change,
            running.new,
            if running.change.kind == ChangeKind::Replace {
                format!(", member {old} out")
            } else {
                " and out again".to_owned()
            },
            running.started.elapsed().as_secs_f64(),
            running.commands
        );
        say(
            self.start,
            &format!("change complete: {line}; members now {:?}", self.members),
        );
        self.tally.lines.push(line);
        self.update_clients(cluster);
    }

    /// Points the load's clients at the current members.
    fn update_clients(&self, cluster: &Cluster) {
        let stream: Vec<SocketAddr> = self
            .members
            .iter()
            .map(|&m| cluster.stream_addr(m))
            .collect();
        let events: Vec<SocketAddr> = self
            .members
            .iter()
            .map(|&m| cluster.client_addr(m))
            .collect();
        self.load.set_addrs(stream);
        self.events.set_addrs(&events);
    }
}

/// Runs `eddy cluster ARGS --wait ...` as root against the member whose stream port is
/// `stream`, with nothing of this process's `EDDY_*` environment or the user's files leaking
/// in; its stdout, or its stderr (or why it did not run) as the error.
async fn eddy_cluster(
    bin: PathBuf,
    stream: SocketAddr,
    args: Vec<String>,
) -> Result<String, String> {
    let out = eddy_cli(
        &bin,
        stream,
        &cluster_args(&args),
        COMMAND_WAIT + Duration::from_secs(60),
    )
    .await?;
    if out.0 {
        Ok(out.1)
    } else {
        Err(out.2)
    }
}

fn cluster_args(args: &[String]) -> Vec<String> {
    let mut all = vec!["cluster".to_owned()];
    all.extend_from_slice(args);
    all.extend(["--wait".to_owned(), COMMAND_WAIT.as_secs().to_string()]);
    all
}

/// Runs `bin ARGS` as the root user against `stream`, killed after `limit`: (success,
/// stdout, stderr).
async fn eddy_cli(
    bin: &Path,
    stream: SocketAddr,
    args: &[String],
    limit: Duration,
) -> Result<(bool, String, String), String> {
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new(bin);
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
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )),
        Ok(Err(e)) => Err(format!("eddy {}: {e}", args.join(" "))),
        Err(_) => Err(format!(
            "eddy {}: no answer within {limit:?}",
            args.join(" ")
        )),
    }
}

/// `eddy cluster status [--groups] -o json` through the first of `members` that answers.
async fn status(
    bin: &Path,
    members: &[SocketAddr],
    groups: bool,
) -> Result<Vec<serde_json::Value>, String> {
    let mut args: Vec<String> = ["cluster", "status", "-o", "json"]
        .map(str::to_owned)
        .to_vec();
    if groups {
        args.push("--groups".to_owned());
    }
    let mut last = String::from("no member to ask");
    for &stream in members {
        match eddy_cli(bin, stream, &args, Duration::from_secs(30)).await {
            Ok((true, out, _)) => match serde_json::from_str::<serde_json::Value>(&out) {
                Ok(serde_json::Value::Array(rows)) => return Ok(rows),
                other => last = format!("{stream}: not a JSON array: {other:?}"),
            },
            Ok((false, _, err)) => last = format!("{stream}: {}", err.trim()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A status row's member ids under `key` (`voters`, `learners`).
fn ids(row: &serde_json::Value, key: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = row[key]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// After the run: every group of `eddy cluster status --groups` has exactly `members` as
/// voters, no learner and a leader (no removed member anywhere), `eddy cluster status` lists
/// exactly `members`, and the Iggy cluster metadata lists exactly their addresses with one
/// leader; each waited for up to `within`. Returns the failures.
pub async fn verify(
    cluster: &Cluster,
    members: &[u8],
    removed: &[u8],
    within: Duration,
) -> Vec<String> {
    let bin = cluster.bin().to_owned();
    let streams: Vec<SocketAddr> = members.iter().map(|&m| cluster.stream_addr(m)).collect();
    let want: Vec<u64> = members.iter().map(|&m| u64::from(m)).collect();
    let gone: Vec<u64> = removed.iter().map(|&m| u64::from(m)).collect();
    let mut failures = Vec::new();
    let deadline = Instant::now() + within;
    // Every group: exactly the members vote, nobody learns, a leader.
    loop {
        let wrong: Result<Vec<String>, String> = status(&bin, &streams, true).await.map(|rows| {
            let mut wrong: Vec<String> = rows
                .iter()
                .filter(|g| {
                    ids(g, "voters") != want
                        || !ids(g, "learners").is_empty()
                        || !g["leader"].is_u64()
                })
                .map(|g| {
                    format!(
                        "{}: leader {}, voters {:?}, learners {:?}",
                        g["group"],
                        g["leader"],
                        ids(g, "voters"),
                        ids(g, "learners")
                    )
                })
                .collect();
            if rows.is_empty() {
                wrong.push("no group listed".to_owned());
            }
            for g in &rows {
                let held = [ids(g, "voters"), ids(g, "learners")].concat();
                if let Some(r) = gone.iter().find(|r| held.contains(r)) {
                    wrong.push(format!("{}: removed member {r} still in it", g["group"]));
                }
            }
            wrong
        });
        match wrong {
            Ok(w) if w.is_empty() => break,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(500)).await,
            Ok(w) => {
                failures.push(format!(
                    "eddy cluster status --groups: {} group(s) not exactly members {want:?}: {}",
                    w.len(),
                    w.iter().take(8).cloned().collect::<Vec<_>>().join("; ")
                ));
                break;
            }
            Err(e) => {
                failures.push(format!("eddy cluster status --groups: {e}"));
                break;
            }
        }
    }
    // The members `eddy cluster status` lists.
    loop {
        let listed: Result<Vec<u64>, String> = status(&bin, &streams, false).await.map(|rows| {
            let mut listed: Vec<u64> = rows.iter().filter_map(|r| r["id"].as_u64()).collect();
            listed.sort_unstable();
            listed
        });
        match listed {
            Ok(l) if l == want => break,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(500)).await,
            other => {
                failures.push(format!(
                    "eddy cluster status lists {other:?}, the members are {want:?}"
                ));
                break;
            }
        }
    }
    // The Iggy cluster metadata (what the SDK follows).
    let ips: Vec<String> = {
        let mut ips: Vec<String> = members
            .iter()
            .map(|&m| cluster.stream_addr(m).ip().to_string())
            .collect();
        ips.sort();
        ips
    };
    loop {
        let seen = iggy_metadata(&streams).await;
        match &seen {
            Ok((listed, leaders)) if *listed == ips && *leaders == 1 => break,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(500)).await,
            other => {
                failures.push(format!(
                    "the Iggy cluster metadata lists (addresses, leaders) {other:?}, the members are at {ips:?}"
                ));
                break;
            }
        }
    }
    failures
}

/// The addresses (sorted) and the number of leaders the Iggy cluster metadata lists, through
/// the first member that answers.
async fn iggy_metadata(streams: &[SocketAddr]) -> Result<(Vec<String>, usize), String> {
    use iggy::prelude::*;
    let mut next = 0;
    let client = super::workload::connect(streams, &mut next)
        .await
        .ok_or("no member took a login")?;
    let meta = tokio::time::timeout(Duration::from_secs(10), client.get_cluster_metadata())
        .await
        .map_err(|_| "GET_CLUSTER_METADATA timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let mut listed: Vec<String> = meta.nodes.iter().map(|n| n.ip.clone()).collect();
    listed.sort();
    let leaders = meta
        .nodes
        .iter()
        .filter(|n| n.role == ClusterNodeRole::Leader)
        .count();
    Ok((listed, leaders))
}
