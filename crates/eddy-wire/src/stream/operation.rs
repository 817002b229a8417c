//! The `Operation` byte (request offset 176, reply offset 208; spec §2.6) and its
//! classification helpers.
//!
//! The classes decide two things: how a client stamps the request header (spec §1.5) and whether
//! a successful reply body starts with a result section (spec §5.0.2, "result-framed").

use super::error::WireError;

/// Operation discriminants. No other byte value is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Operation {
    /// 0: invalid in requests.
    Reserved = 0,
    /// 1: login (codes 40 and 45).
    Register = 1,
    /// 2: every read-only command; the code travels in request bytes 196..200.
    NonReplicated = 2,
    /// 3: logout (code 39).
    Logout = 3,
    /// 64: server-internal form of `CreateTopic`.
    CreateTopicWithAssignments = 64,
    /// 65: server-internal form of `CreatePartitions`.
    CreatePartitionsWithAssignments = 65,
    /// 66: server-originated member removal.
    RemoveConsumerGroupMember = 66,
    /// 67: server-originated rebalance completion.
    CompleteConsumerGroupRevocation = 67,
    /// 68: server-internal form of `DeleteSegments`.
    TruncatePartition = 68,
    /// 128: code 202.
    CreateStream = 128,
    /// 129: code 204.
    UpdateStream = 129,
    /// 130: code 203.
    DeleteStream = 130,
    /// 131: code 205.
    PurgeStream = 131,
    /// 132: code 302.
    CreateTopic = 132,
    /// 133: code 304.
    UpdateTopic = 133,
    /// 134: code 303.
    DeleteTopic = 134,
    /// 135: code 305.
    PurgeTopic = 135,
    /// 136: code 402.
    CreatePartitions = 136,
    /// 137: code 403.
    DeletePartitions = 137,
    /// 138: code 503. Metadata-numbered but **not** result-framed.
    DeleteSegments = 138,
    /// 139: code 602.
    CreateConsumerGroup = 139,
    /// 140: code 603.
    DeleteConsumerGroup = 140,
    /// 141: code 33.
    CreateUser = 141,
    /// 142: code 35.
    UpdateUser = 142,
    /// 143: code 34.
    DeleteUser = 143,
    /// 144: code 37.
    ChangePassword = 144,
    /// 145: code 36.
    UpdatePermissions = 145,
    /// 146: code 42.
    CreatePersonalAccessToken = 146,
    /// 147: code 43.
    DeletePersonalAccessToken = 147,
    /// 148: code 604.
    JoinConsumerGroup = 148,
    /// 149: code 605.
    LeaveConsumerGroup = 149,
    /// 150: code 16, the generic option patch of the 0.12.2 wire (it replaces 129, 133 and
    /// 142 there).
    UpdateResource = 150,
    /// 160: code 101. Partition plane, **not** result-framed.
    SendMessages = 160,
    /// 161: code 121. Partition plane, result-framed.
    StoreConsumerOffset = 161,
    /// 162: code 122. Partition plane, result-framed.
    DeleteConsumerOffset = 162,
}

impl Operation {
    /// Every valid discriminant in ascending order.
    pub const ALL: [Operation; 35] = [
        Self::Reserved,
        Self::Register,
        Self::NonReplicated,
        Self::Logout,
        Self::CreateTopicWithAssignments,
        Self::CreatePartitionsWithAssignments,
        Self::RemoveConsumerGroupMember,
        Self::CompleteConsumerGroupRevocation,
        Self::TruncatePartition,
        Self::CreateStream,
        Self::UpdateStream,
        Self::DeleteStream,
        Self::PurgeStream,
        Self::CreateTopic,
        Self::UpdateTopic,
        Self::DeleteTopic,
        Self::PurgeTopic,
        Self::CreatePartitions,
        Self::DeletePartitions,
        Self::DeleteSegments,
        Self::CreateConsumerGroup,
        Self::DeleteConsumerGroup,
        Self::CreateUser,
        Self::UpdateUser,
        Self::DeleteUser,
        Self::ChangePassword,
        Self::UpdatePermissions,
        Self::CreatePersonalAccessToken,
        Self::DeletePersonalAccessToken,
        Self::JoinConsumerGroup,
        Self::LeaveConsumerGroup,
        Self::UpdateResource,
        Self::SendMessages,
        Self::StoreConsumerOffset,
        Self::DeleteConsumerOffset,
    ];

    /// The wire byte.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// Decodes an operation byte.
    pub const fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            0 => Self::Reserved,
            1 => Self::Register,
            2 => Self::NonReplicated,
            3 => Self::Logout,
            64 => Self::CreateTopicWithAssignments,
            65 => Self::CreatePartitionsWithAssignments,
            66 => Self::RemoveConsumerGroupMember,
            67 => Self::CompleteConsumerGroupRevocation,
            68 => Self::TruncatePartition,
            128 => Self::CreateStream,
            129 => Self::UpdateStream,
            130 => Self::DeleteStream,
            131 => Self::PurgeStream,
            132 => Self::CreateTopic,
            133 => Self::UpdateTopic,
            134 => Self::DeleteTopic,
            135 => Self::PurgeTopic,
            136 => Self::CreatePartitions,
            137 => Self::DeletePartitions,
            138 => Self::DeleteSegments,
            139 => Self::CreateConsumerGroup,
            140 => Self::DeleteConsumerGroup,
            141 => Self::CreateUser,
            142 => Self::UpdateUser,
            143 => Self::DeleteUser,
            144 => Self::ChangePassword,
            145 => Self::UpdatePermissions,
            146 => Self::CreatePersonalAccessToken,
            147 => Self::DeletePersonalAccessToken,
            148 => Self::JoinConsumerGroup,
            149 => Self::LeaveConsumerGroup,
            150 => Self::UpdateResource,
            160 => Self::SendMessages,
            161 => Self::StoreConsumerOffset,
            162 => Self::DeleteConsumerOffset,
            _ => return Err(WireError::InvalidOperation { value }),
        })
    }

    /// Server-internal operations (64..128): never sent by clients.
    pub const fn is_internal(self) -> bool {
        let v = self as u8;
        v >= 64 && v < 128
    }

    /// Metadata class: internal, or 128..=137, 139..=150 (note: **not** 138 `DeleteSegments`).
    pub const fn is_metadata(self) -> bool {
        let v = self as u8;
        self.is_internal() || (v >= 128 && v <= 150 && v != 138)
    }

    /// Partition plane: 160 and above.
    pub const fn is_partition(self) -> bool {
        self as u8 >= 160
    }

    /// Whether a successful reply body for this operation starts with a result section.
    ///
    /// `Register` is result-framed only when its reply body is non-empty (SDK rule), so the
    /// caller passes whether the body is empty.
    pub const fn is_result_framed(self, body_is_empty: bool) -> bool {
        match self {
            Self::Register => !body_is_empty,
            Self::StoreConsumerOffset | Self::DeleteConsumerOffset => true,
            _ => self.is_metadata(),
        }
    }

    /// Whether a client may send this operation: not `Reserved`, not internal.
    pub const fn is_client_allowed(self) -> bool {
        !matches!(self, Self::Reserved) && !self.is_internal()
    }

    /// Whether the SDK stamps `request_checksum = XXH3-64(body)` for this operation
    /// (Register, Logout and the metadata-numbered plane, spec §1.5).
    pub const fn carries_request_checksum(self) -> bool {
        matches!(self, Self::Register | Self::Logout | Self::DeleteSegments) || self.is_metadata()
    }
}

impl TryFrom<u8> for Operation {
    type Error = WireError;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        Self::from_u8(value)
    }
}

const _: () = {
    let mut i = 0;
    while i < Operation::ALL.len() {
        let op = Operation::ALL[i];
        assert!(matches!(Operation::from_u8(op as u8), Ok(o) if o as u8 == op as u8));
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_decodes_to_itself_or_errors() {
        let mut valid = 0;
        for value in 0..=u8::MAX {
            if let Ok(op) = Operation::from_u8(value) {
                assert_eq!(op.as_u8(), value);
                valid += 1;
            } else {
                assert!(matches!(
                    value,
                    4..=63 | 69..=127 | 151..=159 | 163..=255
                ));
            }
        }
        assert_eq!(valid, Operation::ALL.len());
    }

    #[test]
    fn result_framing_follows_spec_table() {
        use Operation as O;
        for op in Operation::ALL {
            let expected = !matches!(
                op,
                O::Reserved | O::NonReplicated | O::Logout | O::DeleteSegments | O::SendMessages
            );
            assert_eq!(op.is_result_framed(false), expected, "{op:?}");
        }
        assert!(!O::Register.is_result_framed(true));
        assert!(O::StoreConsumerOffset.is_result_framed(true));
    }

    #[test]
    fn classes() {
        assert!(!Operation::DeleteSegments.is_metadata());
        assert!(Operation::CreateTopicWithAssignments.is_metadata());
        assert!(Operation::TruncatePartition.is_internal());
        assert!(!Operation::TruncatePartition.is_client_allowed());
        assert!(!Operation::Reserved.is_client_allowed());
        assert!(Operation::SendMessages.is_partition());
        assert!(!Operation::SendMessages.carries_request_checksum());
        assert!(Operation::DeleteSegments.carries_request_checksum());
        assert!(Operation::Logout.carries_request_checksum());
        assert!(!Operation::NonReplicated.carries_request_checksum());
    }
}
