//! Why a stream-protocol request failed, and the one place that turns it into a wire code.
//!
//! Handlers return [`StreamError`] with structured fields; [`StreamError::code`] picks the
//! `IggyError` code the reply carries (stream protocol §6.2). Nothing else in the server
//! chooses error codes for this protocol.

use eddy_auth::permissions::Denied;
use eddy_codec::stream::{BatchError, CodecError, CommandCode, ErrorCode};
use eddy_consensus::ProposeError;
use eddy_log::LogError;
use eddy_options::OptionsError;
use eddy_stream_store::replicated::ReplicatedError;
use eddy_stream_store::Entity;
use eddy_stream_store::{MetadataError, PartitionAddr, StreamStoreError};

/// A resource a request named that does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A stream.
    Stream,
    /// A topic.
    Topic,
    /// A partition.
    Partition,
    /// A consumer group.
    Group,
    /// A user.
    User,
    /// A personal access token.
    Token,
    /// A stored consumer offset.
    Offset,
    /// A connected client.
    Client,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Missing::Stream => "stream",
            Missing::Topic => "topic",
            Missing::Partition => "partition",
            Missing::Group => "consumer group",
            Missing::User => "user",
            Missing::Token => "personal access token",
            Missing::Offset => "consumer offset",
            Missing::Client => "client",
        })
    }
}

/// A failed stream-protocol request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The body does not decode.
    #[error("undecodable request body")]
    Decode(#[source] CodecError),
    /// An options block breaks the catalog.
    #[error("invalid options")]
    Options(#[source] OptionsError),
    /// A message batch failed admission.
    #[error("message batch refused")]
    Batch(#[source] BatchError),
    /// The storage layer refused or failed.
    #[error("storage refused the request")]
    Storage(#[source] StreamStoreError),
    /// Hashing a password failed.
    #[error("cannot hash the password")]
    Auth(#[source] eddy_auth::AuthError),
    /// The request's `request_checksum` does not match its body.
    #[error("request checksum does not match the body")]
    RequestChecksum,
    /// The request needs a login.
    #[error("not logged in")]
    Unauthenticated,
    /// The caller lacks a permission.
    #[error("permission denied")]
    Denied(#[source] Denied),
    /// A named resource does not exist.
    #[error("{0} not found")]
    NotFound(Missing),
    /// A name is already taken in its scope.
    #[error("{entity} name {name:?} already exists")]
    NameTaken {
        /// Which kind of resource.
        entity: Entity,
        /// The name.
        name: String,
    },
    /// A username outside 3..=50 bytes.
    #[error("username of {len} bytes is outside 3..=50")]
    InvalidUsername {
        /// Its length.
        len: usize,
    },
    /// A password outside 3..=100 bytes.
    #[error("password of {len} bytes is outside 3..=100")]
    InvalidPassword {
        /// Its length.
        len: usize,
    },
    /// A wrong current password in `CHANGE_PASSWORD`.
    #[error("the current password does not match")]
    WrongPassword,
    /// Deleting the root user.
    #[error("the root user cannot be deleted")]
    CannotDeleteRoot,
    /// Changing the root user's permissions.
    #[error("the root user's permissions cannot be changed")]
    CannotChangeRootPermissions,
    /// Deactivating the root user.
    #[error("the root user cannot be deactivated")]
    CannotDeactivateRoot,
    /// A token name outside 3..=30 bytes.
    #[error("token name of {len} bytes is outside 3..=30")]
    InvalidTokenName {
        /// Its length.
        len: usize,
    },
    /// A token expiry that overflows the clock.
    #[error("token expiry {expiry} overflows")]
    InvalidTokenExpiry {
        /// The requested duration, µs.
        expiry: u64,
    },
    /// The user already has the most tokens allowed.
    #[error("the user already has {limit} personal access tokens")]
    TooManyTokens {
        /// The limit.
        limit: usize,
    },
    /// No free stream id.
    #[error("no free stream id below {limit}")]
    TooManyStreams {
        /// The id space.
        limit: u32,
    },
    /// No free topic id in the stream.
    #[error("no free topic id below {limit}")]
    TooManyTopics {
        /// The id space.
        limit: u32,
    },
    /// A partitions count of 0 or over 1000 in one request.
    #[error("{count} partitions in one request is outside 1..=1000")]
    PartitionsPerRequest {
        /// The requested count.
        count: u32,
    },
    /// Deleting more partitions than exist.
    #[error("cannot delete {requested} of {existing} partitions")]
    NotEnoughPartitions {
        /// Requested.
        requested: u32,
        /// Existing.
        existing: u32,
    },
    /// Partition ids would reach the per-topic cap.
    #[error("partition ids would exceed {limit}")]
    PartitionIdsExhausted {
        /// The cap.
        limit: u32,
    },
    /// Partitions added to or deleted from a topic whose partition set is fixed.
    #[error("the topic's partition_resize_policy is fixed")]
    FixedPartitions,
    /// A stream's `encryption_key` that is not 32 raw bytes (the value is never shown).
    #[error("a stream encryption key must be 32 raw bytes")]
    InvalidEncryptionKey,
    /// A stream's own `encryption_key` on a server without `--encryption-key`.
    #[error("a stream encryption key needs a server encryption key to wrap it")]
    StreamEncryptionUnavailable,
    /// A consumer offset beyond the partition's newest offset (or on an empty partition).
    #[error("offset {offset} is beyond the partition's newest offset")]
    InvalidOffset {
        /// The offset asked for.
        offset: u64,
    },
    /// A consumer-offset write that names no partition.
    #[error("a consumer offset write must name its partition")]
    PartitionRequired,
    /// The caller is not a member of the consumer group.
    #[error("not a member of the consumer group")]
    NotAMember,
    /// The member does not own the partition it addressed.
    #[error("partition {partition_id} is not assigned to this member")]
    PartitionNotOwned {
        /// The partition.
        partition_id: u32,
    },
    /// A snapshot archive could not be built or would not fit in one reply frame.
    #[error("snapshot failed: {reason}")]
    SnapshotFailed {
        /// Why.
        reason: String,
    },
    /// A cluster member could not do it (not the leader, not committed: transient), or a
    /// replicated read failed.
    #[error(transparent)]
    Cluster(ClusterError),
    /// A poll as an external group, which only holds offsets.
    #[error("an external consumer group only holds offsets; poll as the group or a consumer")]
    ExternalGroupPoll,
    /// The command exists but this server does not provide it.
    #[error("{command} is not available on this server")]
    Unavailable {
        /// The command.
        command: CommandCode,
    },
}

impl From<CodecError> for StreamError {
    fn from(e: CodecError) -> Self {
        match e {
            CodecError::Options { source } => StreamError::Options(source),
            CodecError::Batch { source } => StreamError::Batch(source),
            other => StreamError::Decode(other),
        }
    }
}

impl From<OptionsError> for StreamError {
    fn from(e: OptionsError) -> Self {
        StreamError::Options(e)
    }
}

impl From<BatchError> for StreamError {
    fn from(e: BatchError) -> Self {
        StreamError::Batch(e)
    }
}

impl From<StreamStoreError> for StreamError {
    fn from(e: StreamStoreError) -> Self {
        StreamError::Storage(e)
    }
}

impl From<ClusterError> for StreamError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Metadata(e) => StreamError::Storage(StreamStoreError::Metadata(e)),
            ClusterError::NoPartition(_) => StreamError::NotFound(Missing::Partition),
            other => StreamError::Cluster(other),
        }
    }
}

impl From<Denied> for StreamError {
    fn from(e: Denied) -> Self {
        StreamError::Denied(e)
    }
}

impl StreamError {
    /// True when the server, not the request, is at fault (storage failures, hashing): logged
    /// as warnings rather than as routine refusals.
    pub fn is_server_fault(&self) -> bool {
        match self {
            StreamError::Storage(
                StreamStoreError::Metadata(_) | StreamStoreError::PartitionNotFound { .. },
            ) => false,
            StreamError::Storage(_) | StreamError::Auth(_) => true,
            StreamError::Cluster(e) => !e.is_transient(),
            _ => false,
        }
    }

    /// The wire code for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            StreamError::Decode(_) => ErrorCode::InvalidCommand,
            StreamError::Options(e) => options_code(e),
            StreamError::Batch(e) => batch_code(e),
            StreamError::Storage(e) => storage_code(e),
            // The SDK looks for the leader again and retries on this code.
            StreamError::Cluster(e) if e.is_transient() => ErrorCode::TransientNotAccepted,
            StreamError::Auth(_) | StreamError::Cluster(_) => ErrorCode::Error,
            StreamError::RequestChecksum => ErrorCode::InvalidFormat,
            StreamError::Unauthenticated => ErrorCode::Unauthenticated,
            StreamError::Denied(_) => ErrorCode::Unauthorized,
            StreamError::NotFound(missing) => match missing {
                Missing::Stream => ErrorCode::StreamIdNotFound,
                Missing::Topic => ErrorCode::TopicIdNotFound,
                Missing::Partition => ErrorCode::PartitionNotFound,
                Missing::Group => ErrorCode::ConsumerGroupIdNotFound,
                Missing::User | Missing::Token => ErrorCode::ResourceNotFound,
                Missing::Offset => ErrorCode::ConsumerOffsetNotFound,
                Missing::Client => ErrorCode::ClientNotFound,
            },
            StreamError::NameTaken { entity, .. } => name_taken_code(*entity),
            StreamError::InvalidUsername { .. } => ErrorCode::InvalidUsername,
            StreamError::InvalidPassword { .. } => ErrorCode::InvalidPassword,
            StreamError::WrongPassword => ErrorCode::InvalidCredentials,
            StreamError::CannotDeleteRoot => ErrorCode::CannotDeleteUser,
            StreamError::CannotChangeRootPermissions => ErrorCode::CannotChangePermissions,
            StreamError::CannotDeactivateRoot => ErrorCode::InvalidUserStatus,
            StreamError::InvalidTokenName { .. } => ErrorCode::InvalidPersonalAccessTokenName,
            StreamError::InvalidTokenExpiry { .. } => ErrorCode::InvalidPersonalAccessTokenExpiry,
            StreamError::TooManyTokens { .. } => ErrorCode::PersonalAccessTokensLimitReached,
            StreamError::TooManyStreams { .. } => ErrorCode::TooManyStreams,
            StreamError::TooManyTopics { .. } => ErrorCode::TooManyTopics,
            StreamError::PartitionsPerRequest { .. } => ErrorCode::TooManyPartitions,
            StreamError::NotEnoughPartitions { .. } => ErrorCode::InvalidPartitionsCount,
            StreamError::PartitionIdsExhausted { .. } => ErrorCode::PartitionIdSpaceExhausted,
            StreamError::FixedPartitions => ErrorCode::PartitionResizeDisabled,
            StreamError::InvalidEncryptionKey => ErrorCode::InvalidEncryptionKey,
            StreamError::StreamEncryptionUnavailable => ErrorCode::StreamEncryptionUnavailable,
            StreamError::InvalidOffset { .. } => ErrorCode::InvalidOffset,
            StreamError::PartitionRequired => ErrorCode::ResourceNotFound,
            StreamError::NotAMember => ErrorCode::ConsumerGroupMemberNotFound,
            StreamError::PartitionNotOwned { .. } => ErrorCode::ConsumerGroupPartitionNotOwned,
            StreamError::Unavailable { .. } | StreamError::ExternalGroupPoll => {
                ErrorCode::FeatureUnavailable
            }

            StreamError::SnapshotFailed { .. } => ErrorCode::SnapshotFileCompletionFailed,
        }
    }
}

fn name_taken_code(entity: Entity) -> ErrorCode {
    match entity {
        Entity::Stream => ErrorCode::StreamNameAlreadyExists,
        Entity::Topic => ErrorCode::TopicNameAlreadyExists,
        Entity::User => ErrorCode::UserAlreadyExists,
        Entity::Token => ErrorCode::PersonalAccessTokenAlreadyExists,
        Entity::ConsumerGroup => ErrorCode::ConsumerGroupNameAlreadyExists,
        _ => ErrorCode::Error,
    }
}

fn options_code(e: &OptionsError) -> ErrorCode {
    match e {
        OptionsError::TooLarge { .. } | OptionsError::TooManyEntries { .. } => {
            ErrorCode::OptionsBlockTooLarge
        }
        OptionsError::UnsupportedKey { .. } => ErrorCode::UnsupportedOptionKey,
        OptionsError::InvalidValue { .. } => ErrorCode::InvalidOptionValue,
        OptionsError::MaxTopicSizeBelowSegment { .. } => ErrorCode::InvalidTopicSize,
        _ => ErrorCode::InvalidCommand,
    }
}

fn batch_code(e: &BatchError) -> ErrorCode {
    match e {
        BatchError::MessageChecksum { .. } => ErrorCode::InvalidMessageChecksum,
        BatchError::BatchChecksum { .. } => ErrorCode::InvalidBatchChecksum,
        BatchError::Empty | BatchError::CountMismatch { .. } => ErrorCode::InvalidMessagesCount,
        _ => ErrorCode::InvalidCommand,
    }
}

fn storage_code(e: &StreamStoreError) -> ErrorCode {
    match e {
        StreamStoreError::Metadata(m) => match m {
            MetadataError::StreamNotFound(_) => ErrorCode::StreamIdNotFound,
            MetadataError::TopicNotFound { .. } => ErrorCode::TopicIdNotFound,
            MetadataError::PartitionNotFound { .. } => ErrorCode::PartitionNotFound,
            MetadataError::UserNotFound(_) | MetadataError::TokenNotFound { .. } => {
                ErrorCode::ResourceNotFound
            }
            MetadataError::GroupNotFound { .. } => ErrorCode::ConsumerGroupIdNotFound,
            MetadataError::OffsetNotFound => ErrorCode::ConsumerOffsetNotFound,
            MetadataError::NameTaken { entity, .. } => name_taken_code(*entity),
            _ => ErrorCode::Error,
        },
        StreamStoreError::PartitionNotFound { .. } => ErrorCode::PartitionNotFound,
        StreamStoreError::Log(LogError::LimitExceeded { .. }) => ErrorCode::InvalidCommand,
        _ => ErrorCode::Error,
    }
}

/// Why a cluster operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// This member does not lead the group (or no leader is known): ask the leader.
    #[error("this node is not the leader of the {0}; retry on the leader")]
    NotLeader(&'static str),
    /// The proposal was not committed (leadership changed, the node is stopping, or too much
    /// is uncommitted); nothing is known to have changed.
    #[error("the cluster did not commit the request: {0}")]
    NotCommitted(ProposeError),
    /// A batch's predicted offset went stale (a proposal ahead of it was lost); nothing was
    /// appended.
    #[error("the batch was stamped for offset {0}, which another batch took; retry")]
    Stale(u64),
    /// The metadata state refused the operation (on every member alike).
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// The partition has no group on this member.
    #[error("partition {0:?} not found")]
    NoPartition(PartitionAddr),
    /// A partition read failed.
    #[error(transparent)]
    Read(#[from] ReplicatedError),
    /// An entry could not be encoded (a bug).
    #[error("cannot encode the entry: {0}")]
    Encode(String),
    /// A membership change was refused or did not complete.
    #[error("{0}")]
    Membership(String),
    /// The member a request was forwarded to did not do it, or its answer was lost;
    /// `transient` when the client should retry.
    #[error("{message}")]
    Forwarded {
        /// Whether retrying may succeed.
        transient: bool,
        /// What the leader (or the lane to it) said.
        message: String,
    },
}

impl ClusterError {
    /// Whether the client should retry (on the leader): the stream protocol answers these with
    /// `TransientNotAccepted`.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClusterError::NotLeader(_)
                | ClusterError::NotCommitted(_)
                | ClusterError::Stale(_)
                | ClusterError::Forwarded {
                    transient: true,
                    ..
                }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_of_the_spec() {
        let cases: [(StreamError, u32); 12] = [
            (StreamError::NotFound(Missing::Stream), 1009),
            (StreamError::NotFound(Missing::Topic), 2010),
            (StreamError::NotFound(Missing::Partition), 3007),
            (StreamError::NotFound(Missing::User), 20),
            (
                StreamError::NameTaken {
                    entity: Entity::Stream,
                    name: "s".into(),
                },
                1012,
            ),
            (
                StreamError::Storage(StreamStoreError::Metadata(MetadataError::NameTaken {
                    entity: Entity::Topic,
                    name: "t".into(),
                })),
                2013,
            ),
            (StreamError::CannotDeleteRoot, 48),
            (StreamError::PartitionsPerRequest { count: 0 }, 2015),
            (
                StreamError::Options(OptionsError::UnsupportedKey {
                    scope: "stream",
                    key: "k".into(),
                }),
                4041,
            ),
            (
                StreamError::Batch(BatchError::BatchChecksum {
                    stored: 1,
                    computed: 2,
                }),
                4039,
            ),
            (StreamError::InvalidOffset { offset: 9 }, 4100),
            (StreamError::PartitionNotOwned { partition_id: 1 }, 5009),
        ];
        for (error, code) in cases {
            assert_eq!(error.code().code(), code, "{error}");
        }
        let decoded: StreamError = CodecError::Options {
            source: OptionsError::TooManyEntries {
                entries: 2000,
                limit: 1024,
            },
        }
        .into();
        assert_eq!(decoded.code(), ErrorCode::OptionsBlockTooLarge);
    }
}
