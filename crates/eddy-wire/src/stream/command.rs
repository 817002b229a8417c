//! The frame type at header byte 60 (`Command`, spec §2.2).
//!
//! Not to be confused with the u32 *command codes* of the Iggy catalog (PING = 1, ...), which
//! live in `eddy-codec`'s command table: this enum says what kind of 256-byte header a frame
//! carries. Only [`Command::Request`], [`Command::Reply`] and [`Command::Eviction`] cross a
//! client connection; the rest are replica-to-replica.

use super::error::WireError;

/// Frame type, header byte 60. Every discriminant of spec §2.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Command {
    /// 0: invalid.
    Reserved = 0,
    /// 1: replica ping (not the client PING command).
    Ping = 1,
    /// 2: replica pong.
    Pong = 2,
    /// 3: reserved.
    PingClient = 3,
    /// 4: reserved.
    PongClient = 4,
    /// 5: client -> server request.
    Request = 5,
    /// 6: replication prepare.
    Prepare = 6,
    /// 7: replication prepare acknowledgement.
    PrepareOk = 7,
    /// 8: server -> client reply.
    Reply = 8,
    /// 9: replication commit.
    Commit = 9,
    /// 10: view change.
    StartViewChange = 10,
    /// 11: view change.
    DoViewChange = 11,
    /// 12: view change.
    StartView = 12,
    /// 13: server -> client eviction (header only).
    Eviction = 13,
    /// 14: replica authentication.
    ReplicaHello = 14,
    /// 15: replica authentication.
    ReplicaChallenge = 15,
    /// 16: replica authentication.
    ReplicaFinish = 16,
    /// 17: replica recovery.
    RequestStartView = 17,
    /// 18: journal repair.
    RequestPrepares = 18,
    /// 19: journal repair.
    RepairPrepare = 19,
    /// 20: journal repair.
    RepairDone = 20,
    /// 21: journal repair.
    RangeEvicted = 21,
    /// 22: state transfer.
    RequestStateTransfer = 22,
    /// 23: state transfer.
    StateTransferTarget = 23,
    /// 24: state transfer.
    RequestStateChunk = 24,
    /// 25: state transfer.
    StateChunk = 25,
    /// 26: backup -> primary login forwarding.
    ForwardRegister = 26,
    /// 27: primary -> backup.
    ForwardRegisterResult = 27,
    /// 28: backup -> primary.
    ForwardLogout = 28,
    /// 29: primary -> backup.
    ForwardLogoutResult = 29,
}

impl Command {
    /// Every discriminant, in order; `ALL[n] as u8 == n`.
    pub const ALL: [Command; 30] = [
        Self::Reserved,
        Self::Ping,
        Self::Pong,
        Self::PingClient,
        Self::PongClient,
        Self::Request,
        Self::Prepare,
        Self::PrepareOk,
        Self::Reply,
        Self::Commit,
        Self::StartViewChange,
        Self::DoViewChange,
        Self::StartView,
        Self::Eviction,
        Self::ReplicaHello,
        Self::ReplicaChallenge,
        Self::ReplicaFinish,
        Self::RequestStartView,
        Self::RequestPrepares,
        Self::RepairPrepare,
        Self::RepairDone,
        Self::RangeEvicted,
        Self::RequestStateTransfer,
        Self::StateTransferTarget,
        Self::RequestStateChunk,
        Self::StateChunk,
        Self::ForwardRegister,
        Self::ForwardRegisterResult,
        Self::ForwardLogout,
        Self::ForwardLogoutResult,
    ];

    /// The wire byte.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// Decodes the wire byte; values above 29 are invalid.
    pub const fn from_u8(value: u8) -> Result<Self, WireError> {
        if (value as usize) < Self::ALL.len() {
            Ok(Self::ALL[value as usize])
        } else {
            Err(WireError::UnknownCommand { value })
        }
    }

    /// Whether this frame type may appear on a client connection (request, reply, eviction).
    pub const fn is_client_facing(self) -> bool {
        matches!(self, Self::Request | Self::Reply | Self::Eviction)
    }
}

impl TryFrom<u8> for Command {
    type Error = WireError;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        Self::from_u8(value)
    }
}

const _: () = {
    let mut i = 0;
    while i < Command::ALL.len() {
        assert!(Command::ALL[i] as usize == i);
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_decodes_or_errors() {
        for value in 0..=u8::MAX {
            match Command::from_u8(value) {
                Ok(command) => assert_eq!(command.as_u8(), value),
                Err(err) => {
                    assert!(value > 29);
                    assert_eq!(err, WireError::UnknownCommand { value });
                }
            }
        }
    }

    #[test]
    fn client_facing_commands_are_the_three_of_the_spec() {
        let facing: Vec<u8> = Command::ALL
            .iter()
            .filter(|c| c.is_client_facing())
            .map(|c| c.as_u8())
            .collect();
        assert_eq!(facing, vec![5, 8, 13]);
    }
}
