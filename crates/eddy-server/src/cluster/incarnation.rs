//! Incarnations: how members notice that one of them lost its data directory.
//!
//! Each member's Raft directory holds `member.id`, a random 64-bit incarnation written when
//! the directory is created; a member whose directory was wiped starts with a new one. Every
//! greeting carries the sender's incarnation and the incarnations it knows of its peers
//! (`knows`, persisted in `peers.known`). Then:
//!
//! * a member that sees a peer greet with another incarnation than the one it knew tells its
//!   Raft node the peer lost its state (`Node::peer_lost_state`: the groups it leads rebuild
//!   that peer from the start, never counting it for entries it no longer holds);
//! * a member whose peer greets it knowing another incarnation of it learns that it lost its
//!   own state (`Node::set_rebuilding`: it neither votes nor campaigns until it has caught up
//!   with a leader's commit index), before any Raft message from that connection is handled.
//!
//! A brand-new cluster's members know nobody, so none of them rebuilds. A member that
//! restarts on its directory keeps its incarnation, so nothing happens.
//!
//! The greeting that reveals the loss is the one a peer composed before it learned the new
//! incarnation; if that one never arrives (the connection broke right then), every later
//! greeting of that peer knows the new incarnation already. So a member that saw a peer come
//! back also lists it as lost (`lost`, persisted in `peers.lost`) in its greetings until the
//! peer greets it saying it has rebuilt that incarnation (`rebuilt`, persisted in
//! `member.rebuilt` by [`Incarnations::mark_rebuilt`]); a member listed as lost under its
//! current incarnation, and not rebuilt, learns it lost its state from any such greeting.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use eddy_consensus::wire::Hello;
use eddy_consensus::NodeId;

/// File holding this member's incarnation (16 hex digits).
pub const MEMBER_FILE: &str = "member.id";
/// File holding the peers' incarnations this member knows (`id incarnation` lines).
pub const KNOWN_FILE: &str = "peers.known";
/// File holding the peers this member saw come back without their state and that have not
/// said they rebuilt since (`id incarnation` lines).
pub const LOST_FILE: &str = "peers.lost";
/// File holding this member's incarnation once it has rebuilt what it lost (16 hex digits).
pub const REBUILT_FILE: &str = "member.rebuilt";
/// Greeting property: the sender's incarnation (hex).
pub const PROP_INCARNATION: &str = "incarnation";
/// Greeting property: the incarnations the sender knows (`id:hex,id:hex`).
pub const PROP_KNOWS: &str = "knows";
/// Greeting property: the peers the sender saw come back without their state and not yet
/// rebuilt (`id:hex,id:hex`).
pub const PROP_LOST: &str = "lost";
/// Greeting property: the sender's incarnation, once it has rebuilt what it lost (hex).
pub const PROP_REBUILT: &str = "rebuilt";

/// What a greeting revealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observed {
    /// The peer came back with a new incarnation: it lost its state.
    pub peer_lost_state: bool,
    /// The peer knew another incarnation of this member: this member lost its state.
    pub lost_own_state: bool,
}

/// This member's incarnation and what it knows of its peers'.
#[derive(Debug)]
pub struct Incarnations {
    me: NodeId,
    mine: u64,
    known: Mutex<BTreeMap<NodeId, u64>>,
    lost: Mutex<BTreeMap<NodeId, u64>>,
    rebuilt: std::sync::atomic::AtomicBool,
    dir: PathBuf,
}

/// Reads `id incarnation` lines (`None`: no file).
fn read_pairs(dir: &Path, name: &str) -> std::io::Result<BTreeMap<NodeId, u64>> {
    let invalid = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{name} does not parse"),
        )
    };
    let mut pairs = BTreeMap::new();
    match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let (id, inc) = line.split_once(' ').ok_or_else(invalid)?;
                let id: NodeId = id.parse().map_err(|_| invalid())?;
                let inc = u64::from_str_radix(inc.trim(), 16).map_err(|_| invalid())?;
                pairs.insert(id, inc);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(pairs)
}

/// Writes `id incarnation` lines durably.
fn write_pairs(dir: &Path, name: &str, pairs: &BTreeMap<NodeId, u64>) {
    let mut text = String::new();
    for (id, inc) in pairs {
        use std::fmt::Write as _;
        let _ = writeln!(text, "{id} {inc:x}");
    }
    if let Err(e) = write_durably(dir, name, &text) {
        tracing::warn!(error = %e, file = name, "cannot save what this node knows of its peers' incarnations");
    }
}

/// `id:hex,id:hex` pairs of a greeting property.
fn parse_pairs(value: &str) -> impl Iterator<Item = (NodeId, u64)> + '_ {
    value.split(',').filter_map(|pair| {
        let (id, inc) = pair.split_once(':')?;
        Some((id.parse().ok()?, u64::from_str_radix(inc, 16).ok()?))
    })
}

fn format_pairs(pairs: &BTreeMap<NodeId, u64>) -> String {
    pairs
        .iter()
        .map(|(id, inc)| format!("{id}:{inc:x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// 64 random bits (from the kernel; a time-and-pid mix where it cannot be read).
pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return u64::from_le_bytes(bytes);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    #[allow(clippy::cast_possible_truncation)] // mixing bits, truncation intended
    let mixed = (now as u64) ^ (u64::from(std::process::id()) << 32);
    mixed | 1
}

/// File holding the cluster's id (16 hex digits), fixed when the member first starts.
pub const CLUSTER_FILE: &str = "cluster.id";

/// The cluster's id as this member holds it in `dir` (its `raft/` directory): read from
/// [`CLUSTER_FILE`], or, on the member's first start, `derived` (written durably). Every
/// greeting carries it and a peer whose id differs is refused. It is derived from what
/// every founding member is configured with (its member ids and cluster CA), as etcd derives
/// its cluster id from the initial members, so members agree on it without talking first;
/// once written it never changes, whatever later happens to the configuration.
///
/// # Errors
/// The file cannot be read, parsed or written.
pub fn cluster_id(dir: &Path, derived: u64) -> std::io::Result<u64> {
    match std::fs::read_to_string(dir.join(CLUSTER_FILE)) {
        Ok(text) => u64::from_str_radix(text.trim(), 16).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{CLUSTER_FILE} does not parse"),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_durably(dir, CLUSTER_FILE, &format!("{derived:016x}\n"))?;
            Ok(derived)
        }
        Err(e) => Err(e),
    }
}

/// File holding the members the cluster was founded with (decimal ids, one per line): the
/// founding voters of the metadata group, every event shard and every partition created
/// without a placement.
pub const FOUNDERS_FILE: &str = "founders";

/// The members this member's cluster was founded with: read from [`FOUNDERS_FILE`] in `dir`,
/// or, on the member's first start, `configured` (its `--node-id` and `--peer` ids, written
/// durably). Once written the founders never change: every member must found each group on
/// the same voters, whatever later happens to the members or to a member's `--peer` list.
///
/// # Errors
/// The file cannot be read, parsed or written, or lists no member.
pub fn founders(dir: &Path, configured: &[NodeId]) -> std::io::Result<Vec<NodeId>> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    match std::fs::read_to_string(dir.join(FOUNDERS_FILE)) {
        Ok(text) => {
            let mut ids = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(|l| {
                    l.parse::<NodeId>()
                        .map_err(|_| invalid(format!("{FOUNDERS_FILE}: {l:?} is not a member id")))
                })
                .collect::<std::io::Result<Vec<_>>>()?;
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                return Err(invalid(format!("{FOUNDERS_FILE} lists no member")));
            }
            Ok(ids)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut ids = configured.to_vec();
            ids.sort_unstable();
            ids.dedup();
            let mut text = ids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n");
            text.push('\n');
            write_durably(dir, FOUNDERS_FILE, &text)?;
            Ok(ids)
        }
        Err(e) => Err(e),
    }
}

/// Replaces `dir/name` with `text` durably (temporary file, fsync, rename, directory fsync).
pub(crate) fn write_durably(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

impl Incarnations {
    /// Reads (or, in a new directory, creates) this member's incarnation and the peers' it
    /// knows, in `dir` (the member's `raft/` directory, which must exist). Returns whether the
    /// incarnation is new.
    ///
    /// # Errors
    /// The files cannot be read or written, or do not parse.
    pub fn open(dir: &Path, me: NodeId) -> std::io::Result<(Self, bool)> {
        let invalid =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
        let (mine, fresh) = match std::fs::read_to_string(dir.join(MEMBER_FILE)) {
            Ok(text) => (
                u64::from_str_radix(text.trim(), 16)
                    .map_err(|_| invalid("member.id does not parse"))?,
                false,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mine = random_u64();
                write_durably(dir, MEMBER_FILE, &format!("{mine:016x}\n"))?;
                (mine, true)
            }
            Err(e) => return Err(e),
        };
        let known = read_pairs(dir, KNOWN_FILE)?;
        let lost = read_pairs(dir, LOST_FILE)?;
        let rebuilt = match std::fs::read_to_string(dir.join(REBUILT_FILE)) {
            Ok(text) => u64::from_str_radix(text.trim(), 16).ok() == Some(mine),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        Ok((
            Incarnations {
                me,
                mine,
                known: Mutex::new(known),
                lost: Mutex::new(lost),
                rebuilt: std::sync::atomic::AtomicBool::new(rebuilt),
                dir: dir.to_path_buf(),
            },
            fresh,
        ))
    }

    /// The greeting properties: this member's incarnation, those it knows, the peers it
    /// knows lost their state, and whether it rebuilt its own.
    pub fn props(&self) -> Vec<(String, String)> {
        let knows = format_pairs(&self.known.lock().unwrap_or_else(PoisonError::into_inner));
        let lost = format_pairs(&self.lost.lock().unwrap_or_else(PoisonError::into_inner));
        let mut props = vec![
            (PROP_INCARNATION.into(), format!("{:x}", self.mine)),
            (PROP_KNOWS.into(), knows),
            (PROP_LOST.into(), lost),
        ];
        if self.rebuilt.load(std::sync::atomic::Ordering::SeqCst) {
            props.push((PROP_REBUILT.into(), format!("{:x}", self.mine)));
        }
        props
    }

    /// This member has rebuilt what it lost (every group caught up): recorded durably, and
    /// said in its greetings, so its peers stop listing it as lost.
    pub fn mark_rebuilt(&self) {
        if let Err(e) = write_durably(&self.dir, REBUILT_FILE, &format!("{:016x}\n", self.mine)) {
            tracing::warn!(error = %e, "cannot record that this node has rebuilt its state");
        }
        self.rebuilt
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Compares a peer's greeting with what this member knows, and remembers the peer's
    /// incarnation (durably) when it is new.
    pub fn observe(&self, hello: &Hello) -> Observed {
        let mut seen = Observed::default();
        let knew_me = hello.prop(PROP_KNOWS).and_then(|knows| {
            parse_pairs(knows).find_map(|(id, inc)| (id == self.me).then_some(inc))
        });
        if knew_me.is_some_and(|inc| inc != self.mine) {
            seen.lost_own_state = true;
        }
        let listed_lost = hello.prop(PROP_LOST).is_some_and(|lost| {
            parse_pairs(lost).any(|(id, inc)| id == self.me && inc == self.mine)
        });
        if listed_lost && !self.rebuilt.load(std::sync::atomic::Ordering::SeqCst) {
            seen.lost_own_state = true;
        }
        let Some(theirs) = hello
            .prop(PROP_INCARNATION)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
        else {
            return seen;
        };
        let rebuilt = hello
            .prop(PROP_REBUILT)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            == Some(theirs);
        {
            let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            match known.insert(hello.node_id, theirs) {
                Some(old) if old == theirs => {}
                changed => {
                    seen.peer_lost_state = changed.is_some();
                    write_pairs(&self.dir, KNOWN_FILE, &known);
                }
            }
        }
        let mut lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
        let listed = lost.get(&hello.node_id) == Some(&theirs);
        if seen.peer_lost_state && !rebuilt && !listed {
            lost.insert(hello.node_id, theirs);
            write_pairs(&self.dir, LOST_FILE, &lost);
        } else if listed && rebuilt {
            lost.remove(&hello.node_id);
            write_pairs(&self.dir, LOST_FILE, &lost);
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(id: NodeId, props: Vec<(String, String)>) -> Hello {
        Hello {
            node_id: id,
            cluster: 0,
            props,
        }
    }

    #[test]
    fn the_founders_are_written_once_and_kept_whatever_the_peer_list_says_later() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(founders(dir.path(), &[3, 1, 2]).unwrap(), vec![1, 2, 3]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FOUNDERS_FILE)).unwrap(),
            "1\n2\n3\n"
        );
        // A later start with another list keeps the founders.
        assert_eq!(founders(dir.path(), &[2, 3, 4]).unwrap(), vec![1, 2, 3]);
        std::fs::write(dir.path().join(FOUNDERS_FILE), "1\nx\n").unwrap();
        assert!(founders(dir.path(), &[1]).is_err());
        std::fs::write(dir.path().join(FOUNDERS_FILE), "\n").unwrap();
        assert!(founders(dir.path(), &[1]).is_err());
    }

    #[test]
    fn a_wiped_member_is_noticed_by_its_peers_and_by_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let (d1, d2) = (tmp.path().join("1"), tmp.path().join("2"));
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let (one, fresh) = Incarnations::open(&d1, 1).unwrap();
        assert!(fresh);
        let (two, _) = Incarnations::open(&d2, 2).unwrap();
        // A new cluster: nobody knew anybody.
        assert_eq!(one.observe(&hello(2, two.props())), Observed::default());
        assert_eq!(two.observe(&hello(1, one.props())), Observed::default());
        // A restart on the same directory keeps the incarnation and the knowledge.
        drop(two);
        let (two, fresh) = Incarnations::open(&d2, 2).unwrap();
        assert!(!fresh);
        assert_eq!(one.observe(&hello(2, two.props())), Observed::default());
        // Node 2 loses its directory: node 1's greeting, made before it learns, tells node 2;
        // node 2's greeting tells node 1.
        std::fs::remove_dir_all(&d2).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let (two, fresh) = Incarnations::open(&d2, 2).unwrap();
        assert!(fresh);
        let from_one = hello(1, one.props());
        let seen = one.observe(&hello(2, two.props()));
        assert!(seen.peer_lost_state && !seen.lost_own_state);
        let seen = two.observe(&from_one);
        assert!(seen.lost_own_state && !seen.peer_lost_state);
        // Learned durably: node 1 after a restart does not report it again.
        drop(one);
        let (one, _) = Incarnations::open(&d1, 1).unwrap();
        assert_eq!(one.observe(&hello(2, two.props())), Observed::default());
    }

    #[test]
    fn a_wiped_member_whose_revealing_greeting_was_lost_still_learns_until_it_rebuilt() {
        let tmp = tempfile::tempdir().unwrap();
        let (d1, d2) = (tmp.path().join("1"), tmp.path().join("2"));
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let (one, _) = Incarnations::open(&d1, 1).unwrap();
        let (two, _) = Incarnations::open(&d2, 2).unwrap();
        one.observe(&hello(2, two.props()));
        two.observe(&hello(1, one.props()));
        // Node 2 is wiped; node 1 sees its new incarnation, but the answer that knew the old
        // one never reaches node 2.
        std::fs::remove_dir_all(&d2).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let (two, _) = Incarnations::open(&d2, 2).unwrap();
        assert!(one.observe(&hello(2, two.props())).peer_lost_state);
        // Every later greeting of node 1 knows the new incarnation, and lists node 2 as lost:
        // node 2 learns from it, and node 1 keeps listing it across its own restart.
        drop(one);
        let (one, _) = Incarnations::open(&d1, 1).unwrap();
        let later = hello(1, one.props());
        assert!(two.observe(&later).lost_own_state);
        // Rebuilt: node 2 ignores stale lists, and says so; node 1 then stops listing it.
        two.mark_rebuilt();
        assert!(!two.observe(&later).lost_own_state);
        assert_eq!(one.observe(&hello(2, two.props())), Observed::default());
        assert!(!two.observe(&hello(1, one.props())).lost_own_state);
        // A restart of node 2 keeps its rebuilt incarnation; a new wipe does not.
        drop(two);
        let (two, fresh) = Incarnations::open(&d2, 2).unwrap();
        assert!(!fresh);
        assert!(!two.observe(&later).lost_own_state);
        std::fs::remove_dir_all(&d2).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let (two, _) = Incarnations::open(&d2, 2).unwrap();
        assert!(one.observe(&hello(2, two.props())).peer_lost_state);
        assert!(two.observe(&hello(1, one.props())).lost_own_state);
    }
}
