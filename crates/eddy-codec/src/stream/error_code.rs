//! The `IggyError` code table of 0.11.0-edge.4 (spec §6.3): every code a reply `status` or a
//! result section may carry. Gaps are retired codes and must not be reused.
//!
//! The wire carries only the number; there is no message on the binary protocol. Which code a
//! failure maps to is decided at the server edge; the codes a server needs are listed in
//! spec §6.2 and documented on the variants below.

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal ),* $(,)?) => {
        /// A protocol error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $code, )*
        }

        impl ErrorCode {
            /// Every code, ascending.
            pub const ALL: &'static [ErrorCode] = &[ $( Self::$name, )* ];

            /// The numeric code.
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// The variant for a code; `None` for unknown or retired codes (the SDK maps those
            /// to `Error`, 1).
            pub const fn from_code(code: u32) -> Option<Self> {
                match code {
                    $( $code => Some(Self::$name), )*
                    _ => None,
                }
            }

            /// The upstream variant name.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Self::$name => stringify!($name), )*
                }
            }
        }
    };
}

error_codes! {
    /// generic failure with no better code.
    Error = 1,
    /// Upstream code 2.
    InvalidConfiguration = 2,
    /// undecodable body, unknown command code, invalid header, bad enum value in a body.
    InvalidCommand = 3,
    /// `request_checksum` does not match the body (reference); also what the SDK shows for `MalformedLogin`.
    InvalidFormat = 4,
    /// command not implemented (e.g. `FLUSH_UNSAVED_BUFFER`, snapshots).
    FeatureUnavailable = 5,
    /// identifier of the wrong kind/shape for the context.
    InvalidIdentifier = 6,
    /// Upstream code 7.
    InvalidVersion = 7,
    /// Upstream code 8.
    Disconnected = 8,
    /// Upstream code 9.
    CannotEstablishConnection = 9,
    /// Upstream code 10.
    CannotCreateBaseDirectory = 10,
    /// Upstream code 11.
    CannotCreateRuntimeDirectory = 11,
    /// Upstream code 12.
    CannotRemoveRuntimeDirectory = 12,
    /// Upstream code 13.
    CannotCreateStateDirectory = 13,
    /// Upstream code 14.
    StateFileNotFound = 14,
    /// Upstream code 15.
    StateFileCorrupted = 15,
    /// Upstream code 16.
    InvalidStateEntryChecksum = 16,
    /// Upstream code 19.
    CannotOpenDatabase = 19,
    /// user not found (delete/update/permissions/password), PAT not found, partition-plane target not found (reference).
    ResourceNotFound = 20,
    /// Upstream code 21.
    CannotCloseWebSocketConnection = 21,
    /// (via eviction reason 13).
    StaleClient = 30,
    /// Upstream code 31.
    TcpError = 31,
    /// Upstream code 32.
    QuicError = 32,
    /// Upstream code 33.
    InvalidServerAddress = 33,
    /// Upstream code 34.
    InvalidClientAddress = 34,
    /// Upstream code 35.
    InvalidIpAddress = 35,
    /// Upstream code 36.
    HttpError = 36,
    /// Upstream code 37.
    InvalidApiUrl = 37,
    /// request needs a login.
    Unauthenticated = 40,
    /// permission check failed.
    Unauthorized = 41,
    /// wrong username/password; wrong current password in `ChangePassword`.
    InvalidCredentials = 42,
    /// username outside 3..=50 bytes.
    InvalidUsername = 43,
    /// password outside 3..=100 bytes (SDK checks locally).
    InvalidPassword = 44,
    /// Upstream code 45.
    InvalidUserStatus = 45,
    /// duplicate username.
    UserAlreadyExists = 46,
    /// (legacy; the reference reports inactive users as invalid credentials).
    UserInactive = 47,
    /// deleting root.
    CannotDeleteUser = 48,
    /// changing root's permissions.
    CannotChangePermissions = 49,
    /// optional PAT name validation.
    InvalidPersonalAccessTokenName = 50,
    /// duplicate PAT name for the user.
    PersonalAccessTokenAlreadyExists = 51,
    /// too many PATs.
    PersonalAccessTokensLimitReached = 52,
    /// (via eviction reason 10).
    InvalidPersonalAccessToken = 53,
    /// Upstream code 54.
    PersonalAccessTokenExpired = 54,
    /// Upstream code 55.
    UsersLimitReached = 55,
    /// expiry not in the future.
    InvalidPersonalAccessTokenExpiry = 56,
    /// try again (SDK replays same request).
    TransientNotCommitted = 57,
    /// try again (SDK replays / re-checks leader).
    TransientNotAccepted = 58,
    /// duplicate request id whose reply is gone (dedup).
    RequestAlreadyApplied = 59,
    /// Upstream code 61.
    NotConnected = 61,
    /// Upstream code 63.
    ClientShutdown = 63,
    /// Upstream code 64.
    InvalidTlsDomain = 64,
    /// Upstream code 65.
    InvalidTlsCertificatePath = 65,
    /// Upstream code 66.
    InvalidTlsCertificate = 66,
    /// Upstream code 67.
    FailedToAddCertificate = 67,
    /// Upstream code 70.
    InvalidEncryptionKey = 70,
    /// Upstream code 71.
    CannotEncryptData = 71,
    /// Upstream code 72.
    CannotDecryptData = 72,
    /// Upstream code 73.
    InvalidJwtAlgorithm = 73,
    /// Upstream code 74.
    InvalidJwtSecret = 74,
    /// Upstream code 75.
    JwtMissing = 75,
    /// Upstream code 76.
    CannotGenerateJwt = 76,
    /// Upstream code 77.
    AccessTokenMissing = 77,
    /// Upstream code 78.
    InvalidAccessToken = 78,
    /// Upstream code 79.
    CannotFetchJwks = 79,
    /// Upstream code 80.
    InvalidSizeBytes = 80,
    /// Upstream code 81.
    InvalidUtf8 = 81,
    /// Upstream code 82.
    InvalidNumberEncoding = 82,
    /// Upstream code 83.
    InvalidBooleanValue = 83,
    /// Upstream code 84.
    InvalidNumberValue = 84,
    /// (optional; `GET_CLIENT` normally answers an empty body).
    ClientNotFound = 100,
    /// Upstream code 101.
    InvalidClientId = 101,
    /// Upstream code 206.
    ConnectionClosed = 206,
    /// Upstream code 209.
    CannotParseHeaderKind = 209,
    /// Upstream code 300.
    HttpResponseError = 300,
    /// Upstream code 301.
    InvalidHttpRequest = 301,
    /// Upstream code 302.
    InvalidJsonResponse = 302,
    /// Upstream code 303.
    InvalidBytesResponse = 303,
    /// Upstream code 304.
    EmptyResponse = 304,
    /// Upstream code 305.
    CannotCreateEndpoint = 305,
    /// Upstream code 306.
    CannotParseUrl = 306,
    /// Upstream code 400.
    WebSocketError = 400,
    /// Upstream code 401.
    WebSocketConnectionError = 401,
    /// Upstream code 402.
    WebSocketCloseError = 402,
    /// Upstream code 403.
    WebSocketReceiveError = 403,
    /// Upstream code 404.
    WebSocketSendError = 404,
    /// Upstream code 1000.
    CannotCreateStreamsDirectory = 1000,
    /// Upstream code 1001.
    CannotCreateStreamDirectory = 1001,
    /// Upstream code 1002.
    CannotCreateStreamInfo = 1002,
    /// Upstream code 1003.
    CannotUpdateStreamInfo = 1003,
    /// Upstream code 1004.
    CannotOpenStreamInfo = 1004,
    /// Upstream code 1005.
    CannotReadStreamInfo = 1005,
    /// Upstream code 1006.
    CannotCreateStream = 1006,
    /// Upstream code 1007.
    CannotDeleteStream = 1007,
    /// Upstream code 1008.
    CannotDeleteStreamDirectory = 1008,
    /// stream not found (by id **or name**).
    StreamIdNotFound = 1009,
    /// Upstream code 1010.
    StreamNameNotFound = 1010,
    /// Upstream code 1011.
    StreamDirectoryNotFound = 1011,
    /// duplicate stream name.
    StreamNameAlreadyExists = 1012,
    /// Upstream code 1013.
    InvalidStreamName = 1013,
    /// Upstream code 1014.
    InvalidStreamId = 1014,
    /// Upstream code 1015.
    CannotReadStreams = 1015,
    /// max topic size below segment size.
    InvalidTopicSize = 1019,
    /// stream id space exhausted.
    TooManyStreams = 1020,
    /// Upstream code 2000.
    CannotCreateTopicsDirectory = 2000,
    /// Upstream code 2001.
    CannotCreateTopicDirectory = 2001,
    /// Upstream code 2002.
    CannotCreateTopicInfo = 2002,
    /// Upstream code 2003.
    CannotUpdateTopicInfo = 2003,
    /// Upstream code 2004.
    CannotOpenTopicInfo = 2004,
    /// Upstream code 2005.
    CannotReadTopicInfo = 2005,
    /// Upstream code 2006.
    CannotCreateTopic = 2006,
    /// Upstream code 2007.
    CannotDeleteTopic = 2007,
    /// Upstream code 2008.
    CannotDeleteTopicDirectory = 2008,
    /// Upstream code 2009.
    CannotPollTopic = 2009,
    /// topic not found (by id or name).
    TopicIdNotFound = 2010,
    /// Upstream code 2011.
    TopicNameNotFound = 2011,
    /// duplicate topic name in the stream.
    TopicNameAlreadyExists = 2013,
    /// Upstream code 2014.
    InvalidTopicName = 2014,
    /// partitions count > 1000 in one request, or 0 in create/delete partitions.
    TooManyPartitions = 2015,
    /// Upstream code 2016.
    InvalidTopicId = 2016,
    /// Upstream code 2017.
    CannotReadTopics = 2017,
    /// Upstream code 2018.
    InvalidReplicationFactor = 2018,
    /// deleting more partitions than exist.
    InvalidPartitionsCount = 2019,
    /// Upstream code 2020.
    TopicDirectoryNotFound = 2020,
    /// topic id space of the stream exhausted.
    TooManyTopics = 2021,
    /// partitions added to or deleted from a topic whose `partition_resize_policy` is `fixed`
    /// (a code of the 0.12.2 wire; the 0.11.0 SDK reads it as a generic error).
    PartitionResizeDisabled = 2023,
    /// Upstream code 3000.
    CannotCreatePartition = 3000,
    /// Upstream code 3001.
    CannotCreatePartitionsDirectory = 3001,
    /// Upstream code 3002.
    CannotCreatePartitionDirectory = 3002,
    /// Upstream code 3003.
    CannotOpenPartitionLogFile = 3003,
    /// Upstream code 3004.
    CannotReadPartitions = 3004,
    /// Upstream code 3005.
    CannotDeletePartition = 3005,
    /// Upstream code 3006.
    CannotDeletePartitionDirectory = 3006,
    /// partition id not in topic.
    PartitionNotFound = 3007,
    /// Upstream code 3008.
    NoPartitions = 3008,
    /// Upstream code 3009.
    TopicFull = 3009,
    /// Upstream code 3010.
    CannotDeleteConsumerOffsetsDirectory = 3010,
    /// Upstream code 3011.
    CannotDeleteConsumerOffsetFile = 3011,
    /// Upstream code 3012.
    CannotCreateConsumerOffsetsDirectory = 3012,
    /// partition ids would reach 1,000,000.
    PartitionIdSpaceExhausted = 3013,
    /// Upstream code 3020.
    CannotReadConsumerOffsets = 3020,
    /// delete of a missing consumer offset.
    ConsumerOffsetNotFound = 3021,
    /// Upstream code 3022.
    NotResolvedConsumer = 3022,
    /// Upstream code 3023.
    CannotOpenConsumerOffsetsFile = 3023,
    /// Upstream code 4000.
    SegmentNotFound = 4000,
    /// Upstream code 4001.
    SegmentClosed = 4001,
    /// Upstream code 4002.
    InvalidSegmentSize = 4002,
    /// Upstream code 4003.
    CannotCreateSegmentLogFile = 4003,
    /// Upstream code 4004.
    CannotCreateSegmentIndexFile = 4004,
    /// Upstream code 4005.
    CannotCreateSegmentTimeIndexFile = 4005,
    /// Upstream code 4006.
    CannotSaveMessagesToSegment = 4006,
    /// Upstream code 4007.
    CannotSaveIndexToSegment = 4007,
    /// Upstream code 4008.
    CannotSaveTimeIndexToSegment = 4008,
    /// empty batch / count mismatch (optional; reference uses 3).
    InvalidMessagesCount = 4009,
    /// Upstream code 4010.
    CannotAppendMessage = 4010,
    /// Upstream code 4011.
    CannotReadMessage = 4011,
    /// Upstream code 4012.
    CannotReadMessageId = 4012,
    /// Upstream code 4013.
    CannotReadMessageState = 4013,
    /// Upstream code 4014.
    CannotReadMessageTimestamp = 4014,
    /// Upstream code 4015.
    CannotReadHeadersLength = 4015,
    /// Upstream code 4016.
    CannotReadHeadersPayload = 4016,
    /// Upstream code 4017.
    TooBigUserHeaders = 4017,
    /// Upstream code 4018.
    InvalidHeaderKey = 4018,
    /// Upstream code 4019.
    InvalidHeaderValue = 4019,
    /// Upstream code 4020.
    CannotReadMessageLength = 4020,
    /// Upstream code 4021.
    CannotReadMessagePayload = 4021,
    /// Upstream code 4022.
    TooBigMessagePayload = 4022,
    /// Upstream code 4023.
    TooManyMessages = 4023,
    /// Upstream code 4024.
    EmptyMessagePayload = 4024,
    /// (SDK-side decode error of poll replies).
    InvalidMessagePayloadLength = 4025,
    /// Upstream code 4026.
    CannotReadMessageChecksum = 4026,
    /// frame checksum mismatch at admission.
    InvalidMessageChecksum = 4027,
    /// Upstream code 4028.
    InvalidKeyValueLength = 4028,
    /// Upstream code 4029.
    CommandLengthError = 4029,
    /// Upstream code 4030.
    InvalidSegmentsCount = 4030,
    /// Upstream code 4031.
    NonZeroOffset = 4031,
    /// Upstream code 4032.
    NonZeroTimestamp = 4032,
    /// Upstream code 4033.
    MissingIndex = 4033,
    /// Upstream code 4034.
    InvalidIndexesByteSize = 4034,
    /// Upstream code 4035.
    InvalidIndexesCount = 4035,
    /// Upstream code 4036.
    InvalidMessagesSize = 4036,
    /// Upstream code 4037.
    TooSmallMessage = 4037,
    /// (SDK-side).
    InvalidMessageTimestampDelta = 4038,
    /// batch checksum mismatch at admission.
    InvalidBatchChecksum = 4039,
    /// Upstream code 4040.
    InvalidHeaderKind = 4040,
    /// option key not in the catalog / not updatable.
    UnsupportedOptionKey = 4041,
    /// option value of the wrong kind or out of bounds.
    InvalidOptionValue = 4042,
    /// more than 1024 entries or 100,000 bytes.
    OptionsBlockTooLarge = 4043,
    /// Upstream code 4050.
    CannotSendMessagesDueToClientDisconnection = 4050,
    /// Upstream code 4051.
    BackgroundSendError = 4051,
    /// Upstream code 4052.
    BackgroundSendTimeout = 4052,
    /// Upstream code 4053.
    BackgroundSendBufferFull = 4053,
    /// Upstream code 4054.
    BackgroundWorkerDisconnected = 4054,
    /// Upstream code 4055.
    BackgroundSendBufferOverflow = 4055,
    /// Upstream code 4056.
    ProducerSendFailed = 4056,
    /// Upstream code 4057.
    ProducerClosed = 4057,
    /// stored offset beyond the partition's current offset.
    InvalidOffset = 4100,
    /// (optional) non-zero reserved bytes.
    InvalidReservedField = 4101,
    /// a stream brought its own `encryption_key` but the server has no encryption key to
    /// wrap it with (a code of the 0.12.2 wire; the 0.11.0 SDK reads it as a generic error).
    StreamEncryptionUnavailable = 4106,
    /// group not found (by id or name).
    ConsumerGroupIdNotFound = 5000,
    /// Upstream code 5002.
    InvalidConsumerGroupId = 5002,
    /// Upstream code 5003.
    ConsumerGroupNameNotFound = 5003,
    /// duplicate group name in the topic.
    ConsumerGroupNameAlreadyExists = 5004,
    /// Upstream code 5005.
    InvalidConsumerGroupName = 5005,
    /// leave by a non-member.
    ConsumerGroupMemberNotFound = 5006,
    /// Upstream code 5007.
    CannotCreateConsumerGroupInfo = 5007,
    /// Upstream code 5008.
    CannotDeleteConsumerGroupInfo = 5008,
    /// group poll/commit of a partition the member does not own.
    ConsumerGroupPartitionNotOwned = 5009,
    /// Upstream code 6000.
    MissingBaseOffsetRetainedMessageBatch = 6000,
    /// Upstream code 6001.
    MissingLastOffsetDeltaRetainedMessageBatch = 6001,
    /// Upstream code 6002.
    MissingMaxTimestampRetainedMessageBatch = 6002,
    /// Upstream code 6003.
    MissingLengthRetainedMessageBatch = 6003,
    /// Upstream code 6004.
    MissingPayloadRetainedMessageBatch = 6004,
    /// Upstream code 7000.
    CannotReadBatchBaseOffset = 7000,
    /// Upstream code 7001.
    CannotReadBatchLength = 7001,
    /// Upstream code 7002.
    CannotReadLastOffsetDelta = 7002,
    /// Upstream code 7003.
    CannotReadMaxTimestamp = 7003,
    /// Upstream code 7004.
    CannotReadBatchPayload = 7004,
    /// Upstream code 8000.
    InvalidConnectionString = 8000,
    /// snapshot failed / too large.
    SnapshotFileCompletionFailed = 9000,
    /// Upstream code 10000.
    CannotSerializeResource = 10000,
    /// Upstream code 10001.
    CannotDeserializeResource = 10001,
    /// Upstream code 10002.
    CannotReadFile = 10002,
    /// Upstream code 10003.
    CannotReadFileMetadata = 10003,
    /// Upstream code 10004.
    CannotSeekFile = 10004,
    /// Upstream code 10005.
    CannotAppendToFile = 10005,
    /// Upstream code 10006.
    CannotWriteToFile = 10006,
    /// Upstream code 10007.
    CannotOverwriteFile = 10007,
    /// Upstream code 10008.
    CannotDeleteFile = 10008,
    /// Upstream code 10009.
    CannotSyncFile = 10009,
    /// Upstream code 10010.
    CannotReadIndexOffset = 10010,
    /// Upstream code 10011.
    CannotReadIndexPosition = 10011,
    /// Upstream code 10012.
    CannotReadIndexTimestamp = 10012,
    /// Upstream code 10013.
    TimestampOutOfRange = 10013,
    /// Upstream code 11000.
    ShardNotFound = 11000,
    /// Upstream code 11001.
    ShardCommunicationError = 11001,
    /// Upstream code 12000.
    CannotBindToSocket = 12000,
    /// Upstream code 12001.
    TaskTimeout = 12001,
    /// Upstream code 13000.
    IoError = 13000,
    /// Upstream code 14000.
    AlreadyAuthenticated = 14000,
    /// Upstream code 14001.
    InvalidSession = 14001,
    /// (via eviction reason 14).
    IncompatibleProtocolVersion = 14003,
}

impl ErrorCode {
    /// Whether the SDK treats this code as "reconnect, log in again and resend" (spec §6.1).
    pub const fn triggers_reconnect(self) -> bool {
        matches!(
            self,
            Self::Unauthenticated
                | Self::StaleClient
                | Self::Disconnected
                | Self::EmptyResponse
                | Self::NotConnected
                | Self::CannotEstablishConnection
                | Self::TcpError
        )
    }

    /// Whether the SDK resends the identical request on the same connection (57, 58).
    pub const fn is_transient(self) -> bool {
        matches!(
            self,
            Self::TransientNotCommitted | Self::TransientNotAccepted
        )
    }

    /// Codes that only the client produces and a server must never send (spec §6.1).
    pub const fn is_client_side_only(self) -> bool {
        matches!(
            self,
            Self::Disconnected
                | Self::CannotEstablishConnection
                | Self::TcpError
                | Self::NotConnected
                | Self::ClientShutdown
                | Self::EmptyResponse
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

impl From<ErrorCode> for u32 {
    fn from(code: ErrorCode) -> Self {
        code.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_ascending_unique_and_round_trips() {
        for pair in ErrorCode::ALL.windows(2) {
            assert!(pair[0].code() < pair[1].code());
        }
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(code.code()), Some(*code));
        }
        assert_eq!(ErrorCode::ALL.len(), 240);
        assert_eq!(ErrorCode::from_code(17), None, "retired");
        assert_eq!(ErrorCode::from_code(0), None);
    }

    #[test]
    fn spec_codes() {
        assert_eq!(ErrorCode::InvalidCommand.code(), 3);
        assert_eq!(ErrorCode::Unauthenticated.code(), 40);
        assert_eq!(ErrorCode::InvalidMessageChecksum.code(), 4027);
        assert_eq!(ErrorCode::InvalidBatchChecksum.code(), 4039);
        assert_eq!(ErrorCode::UnsupportedOptionKey.code(), 4041);
        assert_eq!(ErrorCode::InvalidEncryptionKey.code(), 70);
        assert_eq!(ErrorCode::StreamEncryptionUnavailable.code(), 4106);
        assert_eq!(ErrorCode::IncompatibleProtocolVersion.code(), 14003);
        assert_eq!(
            ErrorCode::ConsumerGroupPartitionNotOwned.name(),
            "ConsumerGroupPartitionNotOwned"
        );
        assert!(ErrorCode::StaleClient.triggers_reconnect());
        assert!(ErrorCode::TransientNotAccepted.is_transient());
        assert!(ErrorCode::EmptyResponse.is_client_side_only());
    }
}
