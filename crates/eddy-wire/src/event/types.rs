//! Message type ids of the client port and their size classes.
//!
//! Request and response ids are separate spaces. They line up only up to 5; from Watch on
//! the success response id is the request id + 2, and Identify (14) answers with 16. Any
//! request may instead be answered with [`ResponseType::Error`] (7).

/// Whether a message is bounded by the 1007-byte fixed body or only by the size limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SizeClass {
    /// Body at most [`super::MAX_FIXED_BODY_LEN`] bytes, never compressed.
    Fixed,
    /// Bounded only by the configured maximum; may be compressed.
    Variable,
}

/// Request type ids accepted on the client port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestType {
    /// 1, fixed.
    AggregateDetails,
    /// 2, fixed.
    Read,
    /// 3, variable.
    Write,
    /// 4, fixed.
    TrimStart,
    /// 5, fixed.
    Delete,
    /// 6, fixed; turns the connection into a push stream.
    Watch,
    /// 7, fixed.
    ListOrgs,
    /// 8, fixed.
    ListAggregateTypes,
    /// 9, fixed.
    ListAggregates,
    /// 10, variable.
    RegisterSchema,
    /// 14, fixed; valid only as the first frame of a connection.
    Identify,
}

impl RequestType {
    /// Every request type, in id order.
    pub const ALL: [Self; 11] = [
        Self::AggregateDetails,
        Self::Read,
        Self::Write,
        Self::TrimStart,
        Self::Delete,
        Self::Watch,
        Self::ListOrgs,
        Self::ListAggregateTypes,
        Self::ListAggregates,
        Self::RegisterSchema,
        Self::Identify,
    ];

    /// The type id on the wire.
    pub const fn id(self) -> u32 {
        match self {
            Self::AggregateDetails => 1,
            Self::Read => 2,
            Self::Write => 3,
            Self::TrimStart => 4,
            Self::Delete => 5,
            Self::Watch => 6,
            Self::ListOrgs => 7,
            Self::ListAggregateTypes => 8,
            Self::ListAggregates => 9,
            Self::RegisterSchema => 10,
            Self::Identify => 14,
        }
    }

    /// Looks a request id up; ids 0, 11–13 and 15+ are not requests on the client port.
    pub const fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            1 => Self::AggregateDetails,
            2 => Self::Read,
            3 => Self::Write,
            4 => Self::TrimStart,
            5 => Self::Delete,
            6 => Self::Watch,
            7 => Self::ListOrgs,
            8 => Self::ListAggregateTypes,
            9 => Self::ListAggregates,
            10 => Self::RegisterSchema,
            14 => Self::Identify,
            _ => return None,
        })
    }

    /// Write and `RegisterSchema` are variable; every other request is fixed.
    pub const fn size_class(self) -> SizeClass {
        match self {
            Self::Write | Self::RegisterSchema => SizeClass::Variable,
            _ => SizeClass::Fixed,
        }
    }

    /// The response type sent on success.
    pub const fn success_response(self) -> ResponseType {
        match self {
            Self::AggregateDetails => ResponseType::AggregateDetails,
            Self::Read => ResponseType::Read,
            Self::Write => ResponseType::Write,
            Self::TrimStart => ResponseType::TrimStart,
            Self::Delete => ResponseType::Delete,
            Self::Watch => ResponseType::Watch,
            Self::ListOrgs => ResponseType::ListOrgs,
            Self::ListAggregateTypes => ResponseType::ListAggregateTypes,
            Self::ListAggregates => ResponseType::ListAggregates,
            Self::RegisterSchema => ResponseType::RegisterSchema,
            Self::Identify => ResponseType::Identify,
        }
    }
}

/// Response type ids on the client port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseType {
    /// 1, fixed.
    AggregateDetails,
    /// 2, variable.
    Read,
    /// 3, fixed.
    Write,
    /// 4, fixed.
    TrimStart,
    /// 5, fixed.
    Delete,
    /// 6, fixed; defined but never sent by a server (it closes the connection instead).
    ProtocolError,
    /// 7, fixed; the answer to any failed request.
    Error,
    /// 8, variable; watch acknowledgement, heartbeats and pushes.
    Watch,
    /// 9, variable.
    ListOrgs,
    /// 10, variable.
    ListAggregateTypes,
    /// 11, variable.
    ListAggregates,
    /// 12, fixed.
    RegisterSchema,
    /// 13, variable; an OCC conflict of a Write, listing every conflicting pinned entry.
    /// Sent only on version 4/5 connections (the 0.3.0 clients).
    WriteConflict,
    /// 14, variable; the same for a Delete. Version 4/5 only.
    DeleteConflict,
    /// 16, variable, never compressed.
    Identify,
}

impl ResponseType {
    /// Every response type: the 0.2.0 ones in id order, then the two added by 0.3.0 (last,
    /// so the fuzz corpus's selector bytes keep naming the same types).
    pub const ALL: [Self; 15] = [
        Self::AggregateDetails,
        Self::Read,
        Self::Write,
        Self::TrimStart,
        Self::Delete,
        Self::ProtocolError,
        Self::Error,
        Self::Watch,
        Self::ListOrgs,
        Self::ListAggregateTypes,
        Self::ListAggregates,
        Self::RegisterSchema,
        Self::Identify,
        Self::WriteConflict,
        Self::DeleteConflict,
    ];

    /// The type id on the wire.
    pub const fn id(self) -> u32 {
        match self {
            Self::AggregateDetails => 1,
            Self::Read => 2,
            Self::Write => 3,
            Self::TrimStart => 4,
            Self::Delete => 5,
            Self::ProtocolError => 6,
            Self::Error => 7,
            Self::Watch => 8,
            Self::ListOrgs => 9,
            Self::ListAggregateTypes => 10,
            Self::ListAggregates => 11,
            Self::RegisterSchema => 12,
            Self::WriteConflict => 13,
            Self::DeleteConflict => 14,
            Self::Identify => 16,
        }
    }

    /// Looks a response id up.
    pub const fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            1 => Self::AggregateDetails,
            2 => Self::Read,
            3 => Self::Write,
            4 => Self::TrimStart,
            5 => Self::Delete,
            6 => Self::ProtocolError,
            7 => Self::Error,
            8 => Self::Watch,
            9 => Self::ListOrgs,
            10 => Self::ListAggregateTypes,
            11 => Self::ListAggregates,
            12 => Self::RegisterSchema,
            13 => Self::WriteConflict,
            14 => Self::DeleteConflict,
            16 => Self::Identify,
            _ => return None,
        })
    }

    /// The 0.2.0 client treats 1, 3, 4, 5, 6, 7 and 12 as fixed and rejects such a frame if
    /// it is compressed or longer than 1007 bytes.
    pub const fn size_class(self) -> SizeClass {
        match self {
            Self::AggregateDetails
            | Self::Write
            | Self::TrimStart
            | Self::Delete
            | Self::ProtocolError
            | Self::Error
            | Self::RegisterSchema => SizeClass::Fixed,
            Self::Read
            | Self::Watch
            | Self::ListOrgs
            | Self::ListAggregateTypes
            | Self::ListAggregates
            | Self::WriteConflict
            | Self::DeleteConflict
            | Self::Identify => SizeClass::Variable,
        }
    }

    /// Whether the body may be zstd-compressed: variable types except Identify, which clients
    /// read with an uncompressed-only reader.
    pub const fn compressible(self) -> bool {
        matches!(self.size_class(), SizeClass::Variable) && !matches!(self, Self::Identify)
    }

    /// Whether the response carries a `correlation_id` (all but Watch and `ProtocolError`).
    pub const fn carries_correlation_id(self) -> bool {
        !matches!(self, Self::Watch | Self::ProtocolError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_round_trip_and_gaps_are_rejected() {
        for ty in RequestType::ALL {
            assert_eq!(RequestType::from_id(ty.id()), Some(ty));
        }
        for id in [0, 11, 12, 13, 15, 16, 100, 101, 102, u32::MAX] {
            assert_eq!(RequestType::from_id(id), None, "id {id}");
        }
    }

    #[test]
    fn response_ids_round_trip_and_gaps_are_rejected() {
        for ty in ResponseType::ALL {
            assert_eq!(ResponseType::from_id(ty.id()), Some(ty));
        }
        for id in [0, 15, 17, 106, 107] {
            assert_eq!(ResponseType::from_id(id), None, "id {id}");
        }
    }

    #[test]
    fn success_response_ids_follow_the_spec_table() {
        let expected = [
            (1, 1),
            (2, 2),
            (3, 3),
            (4, 4),
            (5, 5),
            (6, 8),
            (7, 9),
            (8, 10),
            (9, 11),
            (10, 12),
            (14, 16),
        ];
        for (req, resp) in expected {
            let ty = RequestType::from_id(req).unwrap();
            assert_eq!(ty.success_response().id(), resp);
        }
    }

    #[test]
    fn size_classes_follow_the_spec_table() {
        let variable_requests: Vec<u32> = RequestType::ALL
            .iter()
            .filter(|t| t.size_class() == SizeClass::Variable)
            .map(|t| t.id())
            .collect();
        assert_eq!(variable_requests, [3, 10]);
        let fixed_responses: Vec<u32> = ResponseType::ALL
            .iter()
            .filter(|t| t.size_class() == SizeClass::Fixed)
            .map(|t| t.id())
            .collect();
        assert_eq!(fixed_responses, [1, 3, 4, 5, 6, 7, 12]);
        assert!(!ResponseType::Identify.compressible());
        assert!(ResponseType::Read.compressible());
        assert!(!ResponseType::Error.compressible());
    }
}
