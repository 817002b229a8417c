//! Conversions between eddy's plain types and the engine's protobuf types.

use raft::eraftpb;

use crate::types::{EntryKind, HardState, LogEntry, Membership, Role};

pub(crate) fn entry_to_raft(entry: &LogEntry) -> eraftpb::Entry {
    let mut e = eraftpb::Entry {
        index: entry.index,
        term: entry.term,
        data: entry.data.clone(),
        ..Default::default()
    };
    e.set_entry_type(match entry.kind {
        EntryKind::Normal => eraftpb::EntryType::EntryNormal,
        EntryKind::ConfChange => eraftpb::EntryType::EntryConfChange,
        EntryKind::ConfChangeV2 => eraftpb::EntryType::EntryConfChangeV2,
    });
    e
}

pub(crate) fn entry_from_raft(entry: &eraftpb::Entry) -> LogEntry {
    LogEntry {
        index: entry.index,
        term: entry.term,
        kind: match entry.get_entry_type() {
            eraftpb::EntryType::EntryNormal => EntryKind::Normal,
            eraftpb::EntryType::EntryConfChange => EntryKind::ConfChange,
            eraftpb::EntryType::EntryConfChangeV2 => EntryKind::ConfChangeV2,
        },
        data: entry.data.clone(),
    }
}

pub(crate) fn hard_state_to_raft(state: HardState) -> eraftpb::HardState {
    eraftpb::HardState {
        term: state.term,
        vote: state.vote,
        commit: state.commit,
        ..Default::default()
    }
}

pub(crate) fn hard_state_from_raft(hs: &eraftpb::HardState) -> HardState {
    HardState {
        term: hs.term,
        vote: hs.vote,
        commit: hs.commit,
    }
}

pub(crate) fn role_from_raft(role: raft::StateRole) -> Role {
    match role {
        raft::StateRole::Leader => Role::Leader,
        raft::StateRole::Follower => Role::Follower,
        raft::StateRole::Candidate | raft::StateRole::PreCandidate => Role::Candidate,
    }
}

pub(crate) fn conf_state_to_raft(m: &Membership) -> eraftpb::ConfState {
    eraftpb::ConfState {
        voters: m.voters.clone(),
        learners: m.learners.clone(),
        voters_outgoing: m.voters_outgoing.clone(),
        learners_next: m.learners_next.clone(),
        auto_leave: m.auto_leave,
        ..Default::default()
    }
}

pub(crate) fn membership_from_raft(cs: &eraftpb::ConfState, index: u64) -> Membership {
    Membership {
        voters: cs.voters.clone(),
        learners: cs.learners.clone(),
        voters_outgoing: cs.voters_outgoing.clone(),
        learners_next: cs.learners_next.clone(),
        auto_leave: cs.auto_leave,
        index,
    }
}
