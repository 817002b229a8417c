//! A simulated client's retry policy, modelled on the published clients: follow the leader a
//! node names, back off exponentially (with jitter) when there is none or the answer is
//! uncertain, give up after a bounded number of attempts.
//!
//! Each retry of an operation carries the same id. An attempt whose outcome is unknown (no
//! answer in time, a node that lost the entry's fate) may still commit, so a retry after it may
//! duplicate the operation: the checker allows that, and only that.

use std::collections::BTreeMap;

use eddy_consensus::{GroupId, NodeId, ProposeError};

use crate::config::Millis;
use crate::rng::SimRng;

/// What a client learned about one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Committed and applied at this index.
    Acked {
        /// The entry's index.
        index: u64,
    },
    /// The node refused or lost the proposal.
    Error(ProposeError),
    /// Applied, but the store's answer is a transient refusal the published clients retry
    /// (a stream batch stamped for an offset another batch took, an event shard stopped on
    /// this member): nothing was stored.
    Transient,
    /// The node was down: the connection was refused.
    Refused,
    /// No answer within the request timeout.
    TimedOut,
}

impl Answer {
    /// Whether the attempt may have committed although the client was not told so.
    pub fn uncertain(&self) -> bool {
        matches!(
            self,
            Answer::TimedOut
                | Answer::Error(
                    ProposeError::Unknown | ProposeError::Failed(_) | ProposeError::UnknownGroup(_)
                )
        )
    }
}

/// The leader a refusal names (a not-leader refusal's hint), if any.
pub fn leader_hint(error: &ProposeError) -> Option<NodeId> {
    match error {
        ProposeError::NotLeader { leader, .. } => *leader,
        _ => None,
    }
}

/// What the client does next with its current operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The operation is done (acknowledged).
    Done,
    /// Try again after a pause, at a node (`None`: any).
    Retry {
        /// The pause.
        after: Millis,
        /// Where to send it.
        to: Option<NodeId>,
    },
    /// Attempts exhausted: the operation's fate is left unknown.
    GiveUp,
}

/// First backoff step.
pub const BACKOFF_BASE_MS: Millis = 25;
/// Longest backoff.
pub const BACKOFF_MAX_MS: Millis = 1_000;
/// How long a client waits for an answer.
pub const REQUEST_TIMEOUT_MS: Millis = 3_000;
/// Attempts per operation before giving up.
pub const MAX_ATTEMPTS: u32 = 10;

/// Which leader the client believes in, per group.
#[derive(Debug, Clone, Default)]
pub struct Leaders(BTreeMap<GroupId, NodeId>);

impl Leaders {
    /// The believed leader of a group.
    pub fn get(&self, group: GroupId) -> Option<NodeId> {
        self.0.get(&group).copied()
    }

    /// Decides what follows `answer` to attempt number `attempt` (from 1) sent to `asked`.
    /// `max_attempts` of `None` retries forever.
    pub fn next(
        &mut self,
        group: GroupId,
        asked: NodeId,
        attempt: u32,
        answer: &Answer,
        max_attempts: Option<u32>,
        rng: &mut SimRng,
    ) -> Next {
        let backoff = |rng: &mut SimRng| {
            let step = BACKOFF_BASE_MS
                .saturating_mul(1 << attempt.min(10))
                .min(BACKOFF_MAX_MS);
            step + rng.below(step / 2 + 1)
        };
        if let Answer::Acked { .. } = answer {
            self.0.insert(group, asked);
            return Next::Done;
        }
        if max_attempts.is_some_and(|max| attempt >= max) {
            return Next::GiveUp;
        }
        match answer {
            Answer::Acked { .. } => unreachable!("handled above"),
            Answer::Error(ProposeError::NotLeader {
                leader: Some(leader),
                ..
            }) if *leader != asked => {
                // Redirected: go straight there (a short pause once the redirects pile up).
                self.0.insert(group, *leader);
                let after = if attempt < 3 { 0 } else { backoff(rng) };
                Next::Retry {
                    after,
                    to: Some(*leader),
                }
            }
            Answer::Error(ProposeError::Dropped | ProposeError::Superseded) | Answer::Transient => {
                Next::Retry {
                    after: backoff(rng),
                    to: self.get(group),
                }
            }
            _ => {
                // No leader known, or this node is in trouble: forget it, try anyone later.
                self.0.remove(&group);
                Next::Retry {
                    after: backoff(rng),
                    to: None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: GroupId = GroupId(1);

    #[test]
    fn redirects_are_followed_at_once_and_failures_back_off_up_to_a_cap() {
        let mut rng = SimRng::new(5);
        let mut l = Leaders::default();
        let redirect = Answer::Error(ProposeError::NotLeader {
            group: G,
            leader: Some(3),
        });
        assert_eq!(
            l.next(G, 1, 1, &redirect, Some(10), &mut rng),
            Next::Retry {
                after: 0,
                to: Some(3)
            }
        );
        assert_eq!(l.get(G), Some(3));
        // The node it was sent to times out: forgotten, backoff grows with the attempt.
        let mut last = 0;
        for attempt in 1..=9 {
            let Next::Retry { after, to } =
                l.next(G, 3, attempt, &Answer::TimedOut, Some(10), &mut rng)
            else {
                panic!("gave up early");
            };
            assert_eq!(to, None);
            assert!(after >= last.min(BACKOFF_MAX_MS) / 2 && after <= BACKOFF_MAX_MS * 3 / 2);
            last = after;
        }
        assert_eq!(l.get(G), None);
        assert_eq!(
            l.next(G, 3, 10, &Answer::TimedOut, Some(10), &mut rng),
            Next::GiveUp
        );
        assert!(matches!(
            l.next(G, 3, 50, &Answer::TimedOut, None, &mut rng),
            Next::Retry { .. }
        ));
        assert_eq!(
            l.next(G, 2, 4, &Answer::Acked { index: 9 }, Some(10), &mut rng),
            Next::Done
        );
        assert_eq!(l.get(G), Some(2));
    }

    #[test]
    fn only_answers_that_leave_the_outcome_open_are_uncertain() {
        assert!(Answer::TimedOut.uncertain());
        assert!(Answer::Error(ProposeError::Unknown).uncertain());
        assert!(Answer::Error(ProposeError::Failed(G)).uncertain());
        assert!(!Answer::Refused.uncertain());
        assert!(!Answer::Error(ProposeError::Dropped).uncertain());
        assert!(!Answer::Error(ProposeError::Superseded).uncertain());
        assert!(!Answer::Error(ProposeError::NotLeader {
            group: G,
            leader: None
        })
        .uncertain());
        assert!(!Answer::Acked { index: 1 }.uncertain());
    }
}
