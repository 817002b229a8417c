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
/// Greeting property: the sender's incarnation (hex).
pub const PROP_INCARNATION: &str = "incarnation";
/// Greeting property: the incarnations the sender knows (`id:hex,id:hex`).
pub const PROP_KNOWS: &str = "knows";

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
    dir: PathBuf,
}

fn random_u64() -> u64 {
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
        let mut known = BTreeMap::new();
        match std::fs::read_to_string(dir.join(KNOWN_FILE)) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    let (id, inc) = line
                        .split_once(' ')
                        .ok_or_else(|| invalid("peers.known does not parse"))?;
                    let id: NodeId = id
                        .parse()
                        .map_err(|_| invalid("peers.known does not parse"))?;
                    let inc = u64::from_str_radix(inc.trim(), 16)
                        .map_err(|_| invalid("peers.known does not parse"))?;
                    known.insert(id, inc);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok((
            Incarnations {
                me,
                mine,
                known: Mutex::new(known),
                dir: dir.to_path_buf(),
            },
            fresh,
        ))
    }

    /// The greeting properties: this member's incarnation and those it knows.
    pub fn props(&self) -> Vec<(String, String)> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let knows = known
            .iter()
            .map(|(id, inc)| format!("{id}:{inc:x}"))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            (PROP_INCARNATION.into(), format!("{:x}", self.mine)),
            (PROP_KNOWS.into(), knows),
        ]
    }

    /// Compares a peer's greeting with what this member knows, and remembers the peer's
    /// incarnation (durably) when it is new.
    pub fn observe(&self, hello: &Hello) -> Observed {
        let mut seen = Observed::default();
        let knew_me = hello.prop(PROP_KNOWS).and_then(|knows| {
            knows.split(',').find_map(|pair| {
                let (id, inc) = pair.split_once(':')?;
                (id.parse::<NodeId>().ok()? == self.me)
                    .then(|| u64::from_str_radix(inc, 16).ok())?
            })
        });
        if knew_me.is_some_and(|inc| inc != self.mine) {
            seen.lost_own_state = true;
        }
        let Some(theirs) = hello
            .prop(PROP_INCARNATION)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
        else {
            return seen;
        };
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match known.insert(hello.node_id, theirs) {
            Some(old) if old == theirs => return seen,
            Some(_) => seen.peer_lost_state = true,
            None => {}
        }
        let mut text = String::new();
        for (id, inc) in known.iter() {
            use std::fmt::Write as _;
            let _ = writeln!(text, "{id} {inc:x}");
        }
        drop(known);
        if let Err(e) = write_durably(&self.dir, KNOWN_FILE, &text) {
            tracing::warn!(error = %e, "cannot save the peers' incarnations; they are learned again at the next start");
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
}
