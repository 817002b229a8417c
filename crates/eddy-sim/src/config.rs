//! What a run simulates: the cluster's shape, its timing, and which faults to inject how often.
//!
//! Every probability is per opportunity (a batch sent, a nemesis step), every duration is in
//! virtual milliseconds. [`FaultConfig::default`] injects nothing.

/// Virtual milliseconds since the start of a run.
pub type Millis = u64;

/// The shape of one run (its seed included).
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Everything random in the run derives from it.
    pub seed: u64,
    /// Cluster members (3 or 5).
    pub nodes: u64,
    /// Data groups besides the metadata group.
    pub data_groups: u64,
    /// Concurrent simulated clients.
    pub clients: usize,
    /// The engine's tick period (the server's `--raft-tick-ms`).
    pub tick_ms: Millis,
    /// Faults are injected from the start until this time; then the network heals, crashed
    /// nodes restart and the cluster must make progress again.
    pub fault_ms: Millis,
    /// How long the workload goes on after the faults stop.
    pub calm_ms: Millis,
    /// After the faults stop, every group must acknowledge a proposal within this bound.
    pub liveness_ms: Millis,
    /// Mean pause between a client's operations.
    pub think_ms: Millis,
    /// What to inject.
    pub faults: FaultConfig,
    /// A membership change the run makes while the faults go on (`None`: the founding
    /// members stay).
    pub membership: Option<Scenario>,
}

/// A membership change a run makes on every group, proposed at a seeded time by the
/// simulator's driver, one change per group at a time, as the server's
/// `eddy cluster add/remove/replace` does: a new member is started with the groups' founding
/// voters, becomes a learner, catches up (at most 64 entries behind its leader) and then a
/// voter; a removed member is taken out of every group and then stopped; a change the engine
/// dropped (another was in flight) is proposed again at the next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A new member (node `nodes + 1`) joins every group.
    Add,
    /// A founding member leaves every group.
    Remove,
    /// A new member joins, then a founding member leaves.
    Replace,
    /// A founding member is cut from every other for good, then removed.
    RemovePartitioned,
    /// A new member is cut from every other for good, and added: it is a learner that never
    /// catches up, so it must never become a voter while the groups go on committing (it is
    /// let back in when the workload stops, and ends a caught-up learner).
    StuckLearner,
}

impl Scenario {
    /// Every scenario, in the order [`Scenario::for_seed`] cycles through.
    pub const ALL: [Scenario; 5] = [
        Scenario::Add,
        Scenario::Remove,
        Scenario::Replace,
        Scenario::RemovePartitioned,
        Scenario::StuckLearner,
    ];

    /// The scenario a campaign runs on `seed` (each in turn).
    pub fn for_seed(seed: u64) -> Self {
        Scenario::ALL[usize::try_from(seed % Scenario::ALL.len() as u64).expect("small")]
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Add => "add",
            Scenario::Remove => "remove",
            Scenario::Replace => "replace",
            Scenario::RemovePartitioned => "remove-partitioned",
            Scenario::StuckLearner => "stuck-learner",
        }
    }

    /// Whether it starts a new member.
    pub fn adds(self) -> bool {
        matches!(
            self,
            Scenario::Add | Scenario::Replace | Scenario::StuckLearner
        )
    }
}

impl SimConfig {
    /// A short run of `nodes` members with the given faults.
    pub fn new(seed: u64, nodes: u64, faults: FaultConfig) -> Self {
        SimConfig {
            seed,
            nodes,
            data_groups: 3,
            clients: 4,
            tick_ms: 100,
            fault_ms: 30_000,
            calm_ms: 10_000,
            liveness_ms: 10_000,
            think_ms: 40,
            faults,
            membership: None,
        }
    }

    /// Time at which the run stops issuing operations.
    pub fn end_ms(&self) -> Millis {
        self.fault_ms + self.calm_ms
    }
}

/// Probabilities and durations of every fault the simulator injects.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Shortest one-way delay of a batch between nodes (and between a client and a node).
    pub delay_min_ms: Millis,
    /// Mean of the exponential delay added to the minimum.
    pub delay_mean_ms: Millis,
    /// A batch is lost.
    pub loss: f64,
    /// A batch is delivered twice (each copy with its own delay).
    pub duplicate: f64,
    /// A batch is held back by up to `reorder_max_ms`, so later ones overtake it.
    pub reorder: f64,
    /// Longest extra delay of a reordered batch.
    pub reorder_max_ms: Millis,
    /// Time an fsync takes, uniform in this range.
    pub fsync_ms: (Millis, Millis),
    /// An fsync takes `slow_fsync_ms` instead.
    pub slow_fsync: f64,
    /// Duration of a slow fsync.
    pub slow_fsync_ms: Millis,

    /// Period of the nemesis, which draws the faults below at every step.
    pub step_ms: Millis,
    /// A partition starts (when none is in force): symmetric split, one-way cuts or one node
    /// isolated, with equal odds.
    pub partition: f64,
    /// Mean duration of a partition before it heals.
    pub partition_mean_ms: Millis,
    /// A live node crashes.
    pub crash: f64,
    /// At a crash, part of the node's unsynced writes reaches the disk (a torn tail).
    pub torn: f64,
    /// Mean time a crashed node stays down.
    pub down_mean_ms: Millis,
    /// Most nodes down at once (crashed, or waiting to restart after a data loss).
    pub max_down: u64,
    /// A node loses its data directory (crash, fresh disk, restart), when that is survivable.
    /// Off in every profile; see [`FaultConfig::with_data_loss`].
    pub wipe: f64,
    /// A node's clock stalls (its ticks pause, then fire in a burst).
    pub clock_jump: f64,
    /// Mean length of a stall.
    pub clock_jump_mean_ms: Millis,
    /// A node's disk fails writes for a while (full, or I/O errors), failing the groups that
    /// write meanwhile.
    pub disk_fault: f64,
    /// Mean duration of a disk fault.
    pub disk_fault_mean_ms: Millis,
    /// A node discards the applied prefix of its logs (retention), so lagging members need
    /// snapshots.
    pub compact: f64,
    /// A snapshot whose data was copied out of band (an event shard's records) is lost before
    /// the node's engine sees it: the node holds records its group's log does not cover, and
    /// must neither apply their entries again nor lose them across a restart.
    pub snapshot_lost: f64,
    /// An operator's `DELETE_SEGMENTS` of one segment, on a group a node leads (stores that
    /// have segments: the partitions), as the server's leader proposes it.
    pub delete_segments: f64,
    /// An operator's purge of a partition (`PURGE_TOPIC`/`PURGE_STREAM` reach each partition
    /// as this), on a group a node leads, as the server's leader proposes it.
    pub purge: f64,
}

impl Default for FaultConfig {
    /// A healthy cluster: fast network, fast disks, no faults at all.
    fn default() -> Self {
        FaultConfig {
            delay_min_ms: 1,
            delay_mean_ms: 2,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_max_ms: 0,
            fsync_ms: (1, 3),
            slow_fsync: 0.0,
            slow_fsync_ms: 0,
            step_ms: 250,
            partition: 0.0,
            partition_mean_ms: 0,
            crash: 0.0,
            torn: 0.0,
            down_mean_ms: 0,
            max_down: 0,
            wipe: 0.0,
            clock_jump: 0.0,
            clock_jump_mean_ms: 0,
            disk_fault: 0.0,
            disk_fault_mean_ms: 0,
            compact: 0.0,
            snapshot_lost: 0.0,
            delete_segments: 0.0,
            purge: 0.0,
        }
    }
}

impl FaultConfig {
    /// Every kind of fault, each now and then; at most a minority of nodes down.
    pub fn light(nodes: u64) -> Self {
        FaultConfig {
            delay_mean_ms: 3,
            loss: 0.01,
            duplicate: 0.01,
            reorder: 0.02,
            reorder_max_ms: 50,
            slow_fsync: 0.01,
            slow_fsync_ms: 200,
            partition: 0.04,
            partition_mean_ms: 3_000,
            crash: 0.03,
            torn: 0.5,
            down_mean_ms: 2_000,
            max_down: (nodes - 1) / 2,
            clock_jump: 0.02,
            clock_jump_mean_ms: 2_000,
            disk_fault: 0.01,
            disk_fault_mean_ms: 1_000,
            compact: 0.05,
            snapshot_lost: 0.1,
            delete_segments: 0.03,
            purge: 0.02,
            ..FaultConfig::default()
        }
    }

    /// Everything more often and longer; any number of nodes may be down at once.
    pub fn heavy(nodes: u64) -> Self {
        FaultConfig {
            delay_mean_ms: 8,
            loss: 0.05,
            duplicate: 0.05,
            reorder: 0.1,
            reorder_max_ms: 300,
            slow_fsync: 0.05,
            slow_fsync_ms: 500,
            partition: 0.1,
            partition_mean_ms: 4_000,
            crash: 0.08,
            torn: 0.7,
            down_mean_ms: 3_000,
            max_down: nodes,
            clock_jump: 0.05,
            clock_jump_mean_ms: 4_000,
            disk_fault: 0.03,
            disk_fault_mean_ms: 2_000,
            compact: 0.1,
            snapshot_lost: 0.3,
            delete_segments: 0.08,
            purge: 0.05,
            ..FaultConfig::default()
        }
    }

    /// Adds data-directory losses (a few per run), one member at a time and only when the
    /// others hold everything committed. A member that lost its data rejoins under its old id
    /// as the server's does: it neither votes nor campaigns until it has rebuilt from a
    /// leader, leaders rebuild it from the start once they hear of the loss, and a leader
    /// stops counting an unreachable peer's acknowledgements beyond the commit index (so no
    /// entry commits on a copy the peer lost meanwhile).
    #[must_use]
    pub fn with_data_loss(mut self) -> Self {
        self.wipe = 0.02;
        self
    }

    /// A profile by name: `none`, `light` or `heavy`.
    pub fn profile(name: &str, nodes: u64) -> Option<Self> {
        match name {
            "none" => Some(FaultConfig::default()),
            "light" => Some(FaultConfig::light(nodes)),
            "heavy" => Some(FaultConfig::heavy(nodes)),
            _ => None,
        }
    }
}
