//! The fault schedule, drawn whole from the seed before the run: the same seed, options and
//! length always give the same list of episodes. An episode injects one fault (a kill, a
//! partition, a degraded network), holds it, heals it, then leaves a quiet gap. Which node is
//! the leader is only known when the episode starts, so "the leader" is a target of its own.

use std::fmt;
use std::time::Duration;

use super::rng::Rng;

/// Whom a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The metadata leader when the episode starts (any node if there is none).
    Leader,
    /// A fixed node (1-based).
    Node(u8),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Leader => f.write_str("leader"),
            Target::Node(n) => write!(f, "node {n}"),
        }
    }
}

/// One kind of fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// SIGKILL, restart when the episode heals.
    Kill(Target),
    /// SIGKILL two nodes (the majority of three): writes stop until they return.
    KillTwo(u8, u8),
    /// SIGKILL a node and delete its data directory; it restarts empty when the episode
    /// heals and is rebuilt from its peers (skipped, as a plain kill, while another node is
    /// still rebuilding: two lost directories at once can lose data).
    Wipe(u8),
    /// The node's veth link down: cut off from peers and clients.
    LinkDown(Target),
    /// nft drop rules both ways between the node and every peer (clients still reach it).
    Isolate(Target),
    /// nft drop rules on `to`'s side for packets from `from` (TCP sees both directions suffer).
    OneWayNft { from: u8, to: u8 },
    /// The proxy drops every Raft frame `from -> to` (`to` never hears `from`; the reverse
    /// link is intact).
    OneWayProxy { from: u8, to: u8 },
    /// Every replication link delays, loses, duplicates and reorders frames.
    Degrade {
        delay_ms: (u64, u64),
        loss: f64,
        duplicate: f64,
        reorder: bool,
    },
}

impl Fault {
    /// A short name for the tally.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill(Target::Leader) => "kill-leader",
            Fault::Kill(Target::Node(_)) => "kill-node",
            Fault::KillTwo(..) => "kill-majority",
            Fault::Wipe(_) => "wipe",
            Fault::LinkDown(_) => "link-down",
            Fault::Isolate(_) => "nft-isolate",
            Fault::OneWayNft { .. } => "nft-one-way",
            Fault::OneWayProxy { .. } => "proxy-one-way",
            Fault::Degrade { .. } => "proxy-degrade",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Kill(t) => write!(f, "SIGKILL {t}"),
            Fault::KillTwo(a, b) => write!(f, "SIGKILL nodes {a} and {b}"),
            Fault::Wipe(n) => write!(f, "SIGKILL node {n} and wipe its data directory"),
            Fault::LinkDown(t) => write!(f, "link of {t} down"),
            Fault::Isolate(t) => write!(f, "nft isolate {t}"),
            Fault::OneWayNft { from, to } => write!(f, "nft drop {from} -> {to}"),
            Fault::OneWayProxy { from, to } => write!(f, "proxy drops frames {from} -> {to}"),
            Fault::Degrade {
                delay_ms,
                loss,
                duplicate,
                reorder,
            } => write!(
                f,
                "proxy delay {}-{} ms, loss {loss:.2}, duplicate {duplicate:.2}, reorder {reorder}",
                delay_ms.0, delay_ms.1
            ),
        }
    }
}

/// One fault, when it starts (from the start of the fault phase) and how long it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub at: Duration,
    pub fault: Fault,
    pub hold: Duration,
    /// A degraded network held at the same time (only beside a fault outside the proxy).
    pub also: Option<Fault>,
}

/// Which faults a run may draw.
#[derive(Debug, Clone, Copy)]
#[allow(clippy::struct_excessive_bools)] // Independent switches, one per kind of fault.
pub struct Menu {
    /// nft rules work here.
    pub nft: bool,
    /// Allow killing two nodes at once (three-node clusters and up).
    pub majority_loss: bool,
    /// Allow wiping a node's data directory (half of the single-node kills become wipes;
    /// without it the schedule of a seed is what it always was).
    pub data_loss: bool,
    /// Allow a degraded network beside a kill, a wipe or a partition (about a third of them;
    /// without it the schedule of a seed is what it always was).
    pub concurrent: bool,
}

/// A degraded network: delay, loss, duplication and reordering on every link.
fn degrade(rng: &mut Rng) -> Fault {
    let lo = rng.between(0, 30);
    Fault::Degrade {
        delay_ms: (lo, lo + rng.between(0, 150)),
        loss: [0.0, 0.02, 0.1, 0.3][usize::try_from(rng.below(4)).expect("small")],
        duplicate: [0.0, 0.05][usize::try_from(rng.below(2)).expect("small")],
        reorder: rng.chance(0.5),
    }
}

/// The episodes of `length` of faults for `nodes` nodes under `seed`.
pub fn schedule(seed: u64, length: Duration, nodes: u8, menu: Menu) -> Vec<Episode> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut at = Duration::from_millis(rng.between(500, 2_000));
    let node = |rng: &mut Rng| u8::try_from(rng.between(1, u64::from(nodes))).expect("few nodes");
    let target = |rng: &mut Rng| {
        if rng.chance(0.5) {
            Target::Leader
        } else {
            Target::Node(node(rng))
        }
    };
    let pair = |rng: &mut Rng| {
        let a = node(rng);
        let mut b = node(rng);
        while b == a {
            b = node(rng);
        }
        (a, b)
    };
    loop {
        let hold = Duration::from_millis(rng.between(1_000, 6_000));
        if at + hold > length {
            break;
        }
        let fault = match rng.below(16) {
            0..=3 => Fault::Kill(Target::Leader),
            4 | 5 => {
                let n = node(&mut rng);
                if menu.data_loss && rng.chance(0.5) {
                    Fault::Wipe(n)
                } else {
                    Fault::Kill(Target::Node(n))
                }
            }
            6 if menu.majority_loss => {
                let (a, b) = pair(&mut rng);
                Fault::KillTwo(a, b)
            }
            7 | 8 => Fault::LinkDown(target(&mut rng)),
            9 | 10 if menu.nft => Fault::Isolate(target(&mut rng)),
            11 if menu.nft => {
                let (from, to) = pair(&mut rng);
                Fault::OneWayNft { from, to }
            }
            6 | 9..=12 => {
                let (from, to) = pair(&mut rng);
                Fault::OneWayProxy { from, to }
            }
            _ => degrade(&mut rng),
        };
        let beside_proxy = matches!(fault, Fault::OneWayProxy { .. } | Fault::Degrade { .. });
        let also =
            (menu.concurrent && !beside_proxy && rng.chance(0.35)).then(|| degrade(&mut rng));
        out.push(Episode {
            at,
            fault,
            hold,
            also,
        });
        at += hold + Duration::from_millis(rng.between(1_000, 4_000));
    }
    out
}

/// A kind of membership change (`--membership`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// `eddy cluster replace OLD NEW=...`: a fresh member (new node id, new host) in for a
    /// current one.
    Replace,
    /// `eddy cluster add NEW=...`; the cluster runs one member larger for a while; then
    /// `eddy cluster remove NEW`.
    AddRemove,
}

/// One membership change of a run, drawn from the seed like the faults (from a stream of its
/// own: the faults of a seed are the same with or without changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// When it may begin (from the start of the fault phase; later while the change before
    /// it still runs).
    pub at: Duration,
    pub kind: ChangeKind,
    /// The member a replace takes out, resolved among the members when it begins.
    pub old: Target,
    /// How long a member added by [`ChangeKind::AddRemove`] stays before its removal.
    pub stay: Duration,
    /// The metadata leader is SIGKILLed this long after the change's first command began
    /// (held [`LEADER_KILL_HOLD`], then restarted), when that command still runs.
    pub kill_leader: Option<Duration>,
    /// The same during an add-then-remove's remove.
    pub kill_leader_in_remove: Option<Duration>,
}

/// How long a leader killed in the middle of a change stays down.
pub const LEADER_KILL_HOLD: Duration = Duration::from_secs(3);

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ChangeKind::Replace => write!(f, "replace {} with a new member", self.old)?,
            ChangeKind::AddRemove => write!(
                f,
                "add a new member, remove it {:.1}s after it joined",
                self.stay.as_secs_f64()
            )?,
        }
        let kill = |d: Option<Duration>| d.map(|d| format!("{:.1}s", d.as_secs_f64()));
        if let Some(d) = kill(self.kill_leader) {
            write!(f, "; kill the metadata leader {d} into the first command")?;
        }
        if let Some(d) = kill(self.kill_leader_in_remove) {
            write!(f, "; kill the metadata leader {d} into the remove")?;
        }
        Ok(())
    }
}

/// The membership changes of `length` of faults for `nodes` founders under `seed`: one per
/// started 100 s (at least one, at most [`MAX_CHANGES`]), spread over the run, and at most
/// one replace (a second one could take out every founder a wiped founder's `--peer` flags
/// name, which would leave it nobody to rebuild from).
pub fn changes(seed: u64, length: Duration, nodes: u8) -> Vec<Change> {
    let mut rng = Rng::new(seed ^ 0x4D45_4D42_4552_5321);
    let count = (length.as_secs() / 100).clamp(1, u64::from(MAX_CHANGES));
    let mut replaced = false;
    let mut out = Vec::new();
    for k in 0..count {
        let slice = length.as_millis() as u64 / count;
        let at = Duration::from_millis(k * slice + rng.between(3_000, 8_000).min(slice / 2));
        let replace = !replaced && (k > 0 || seed.is_multiple_of(2));
        replaced |= replace;
        let old = if rng.chance(0.3) {
            Target::Leader
        } else {
            Target::Node(u8::try_from(rng.between(1, u64::from(nodes))).expect("few nodes"))
        };
        let stay = Duration::from_millis(rng.between(5_000, 20_000));
        let kill_leader = rng
            .chance(0.6)
            .then(|| Duration::from_millis(rng.between(500, 6_000)));
        let kill_leader_in_remove =
            (!replace && rng.chance(0.5)).then(|| Duration::from_millis(rng.between(200, 3_000)));
        out.push(Change {
            at,
            kind: if replace {
                ChangeKind::Replace
            } else {
                ChangeKind::AddRemove
            },
            old,
            stay,
            kill_leader,
            kill_leader_in_remove,
        });
    }
    out
}

/// Most membership changes in one run (each adds a member under a new node id).
pub const MAX_CHANGES: u8 = 3;
