//! One enum of every request, decoded by command code, plus the header routing of spec §2.3.

use bytes::Bytes;
use eddy_wire::stream::{Operation, RequestHeader};

use super::codec::{WireDecode, WireEncode};
use super::command_table::CommandCode;
use super::commands::login_register::RegisterAttempts;
use super::commands::{
    cancel_deferred_request::CancelDeferredRequest,
    change_password::ChangePassword,
    cluster_change::{AddClusterMember, RemoveClusterMember},
    cluster_status::GetClusterStatus,
    create_consumer_group::CreateConsumerGroup,
    create_partitions::CreatePartitions,
    create_personal_access_token::CreatePersonalAccessToken,
    create_stream::CreateStream,
    create_topic::CreateTopic,
    create_user::CreateUser,
    delete_consumer_group::DeleteConsumerGroup,
    delete_consumer_offset::DeleteConsumerOffset,
    delete_partitions::DeletePartitions,
    delete_personal_access_token::DeletePersonalAccessToken,
    delete_segments::DeleteSegments,
    delete_stream::DeleteStream,
    delete_topic::DeleteTopic,
    delete_user::DeleteUser,
    describe_options::DescribeOptions,
    fetch_messages::FetchMessages,
    flush_unsaved_buffer::FlushUnsavedBuffer,
    get_client::GetClient,
    get_clients::GetClients,
    get_cluster_metadata::GetClusterMetadata,
    get_consumer_group::GetConsumerGroup,
    get_consumer_groups::GetConsumerGroups,
    get_consumer_offset::GetConsumerOffset,
    get_me::GetMe,
    get_metadata_changes::GetMetadataChanges,
    get_partition_route::GetPartitionRoute,
    get_personal_access_tokens::GetPersonalAccessTokens,
    get_snapshot::GetSnapshot,
    get_stats::GetStats,
    get_stream::GetStream,
    get_streams::GetStreams,
    get_topic::GetTopic,
    get_topics::GetTopics,
    get_user::GetUser,
    get_users::GetUsers,
    join_consumer_group::JoinConsumerGroup,
    leave_consumer_group::LeaveConsumerGroup,
    login_register::LoginRegister,
    login_register_with_pat::LoginRegisterWithPat,
    login_user::LoginUser,
    login_with_personal_access_token::LoginWithPersonalAccessToken,
    logout_user::LogoutUser,
    ping::Ping,
    poll_messages::PollMessages,
    poll_messages_deferred::PollMessagesDeferred,
    purge_stream::PurgeStream,
    purge_topic::PurgeTopic,
    send_messages::SendMessages,
    store_consumer_offset::StoreConsumerOffset,
    sync_consumer_group::SyncConsumerGroup,
    update_permissions::UpdatePermissions,
    update_resource::UpdateResource,
    update_stream::UpdateStream,
    update_topic::UpdateTopic,
    update_user::UpdateUser,
};
use super::error::CodecError;
use super::identifier::Identifier;

macro_rules! requests {
    ($( $variant:ident($ty:ty) ),* $(,)?) => {
        /// Every request of the catalog. `Register` is the operation-1 body whose code (40 or
        /// 45) the header does not carry; decoding by code yields `LoginRegister` or
        /// `LoginRegisterWithPat` instead.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Request {
            $(
                #[doc = concat!("`", stringify!($variant), "`.")]
                $variant($ty),
            )*
            /// A Register body (operation 1) read both ways.
            Register(RegisterAttempts),
        }

        impl Request {
            /// Decodes `body` as the request of `code`.
            pub fn decode(code: CommandCode, body: &Bytes) -> Result<Self, CodecError> {
                Ok(match code {
                    $( CommandCode::$variant => Self::$variant(<$ty>::decode_bytes(body)?), )*
                })
            }

            /// The command code (`LoginRegister` for a `Register` body).
            pub fn code(&self) -> CommandCode {
                match self {
                    $( Self::$variant(_) => CommandCode::$variant, )*
                    Self::Register(_) => CommandCode::LoginRegister,
                }
            }

            /// Encoded body length.
            pub fn encoded_len(&self) -> usize {
                match self {
                    $( Self::$variant(r) => r.encoded_len(), )*
                    Self::Register(r) => r.password.as_ref().map_or_else(
                        || r.token.as_ref().map_or(0, WireEncode::encoded_len),
                        WireEncode::encoded_len,
                    ),
                }
            }

            /// Appends the body (a `Register` re-encodes its password reading first).
            pub fn encode(&self, out: &mut Vec<u8>) {
                match self {
                    $( Self::$variant(r) => r.encode(out), )*
                    Self::Register(r) => {
                        if let Some(password) = &r.password {
                            password.encode(out);
                        } else if let Some(token) = &r.token {
                            token.encode(out);
                        }
                    }
                }
            }
        }
    };
}

requests! {
    Ping(Ping),
    GetStats(GetStats),
    GetSnapshot(GetSnapshot),
    GetClusterMetadata(GetClusterMetadata),
    DescribeOptions(DescribeOptions),
    UpdateResource(UpdateResource),
    GetMe(GetMe),
    GetMetadataChanges(GetMetadataChanges),
    GetClient(GetClient),
    GetClients(GetClients),
    GetUser(GetUser),
    GetUsers(GetUsers),
    CreateUser(CreateUser),
    DeleteUser(DeleteUser),
    UpdateUser(UpdateUser),
    UpdatePermissions(UpdatePermissions),
    ChangePassword(ChangePassword),
    LoginUser(LoginUser),
    LogoutUser(LogoutUser),
    LoginRegister(LoginRegister),
    GetPersonalAccessTokens(GetPersonalAccessTokens),
    CreatePersonalAccessToken(CreatePersonalAccessToken),
    DeletePersonalAccessToken(DeletePersonalAccessToken),
    LoginWithPersonalAccessToken(LoginWithPersonalAccessToken),
    LoginRegisterWithPat(LoginRegisterWithPat),
    PollMessages(PollMessages),
    SendMessages(SendMessages),
    FlushUnsavedBuffer(FlushUnsavedBuffer),
    GetPartitionRoute(GetPartitionRoute),
    PollMessagesDeferred(PollMessagesDeferred),
    CancelDeferredRequest(CancelDeferredRequest),
    FetchMessages(FetchMessages),
    GetConsumerOffset(GetConsumerOffset),
    StoreConsumerOffset(StoreConsumerOffset),
    DeleteConsumerOffset(DeleteConsumerOffset),
    GetStream(GetStream),
    GetStreams(GetStreams),
    CreateStream(CreateStream),
    DeleteStream(DeleteStream),
    UpdateStream(UpdateStream),
    PurgeStream(PurgeStream),
    GetTopic(GetTopic),
    GetTopics(GetTopics),
    CreateTopic(CreateTopic),
    DeleteTopic(DeleteTopic),
    UpdateTopic(UpdateTopic),
    PurgeTopic(PurgeTopic),
    CreatePartitions(CreatePartitions),
    DeletePartitions(DeletePartitions),
    DeleteSegments(DeleteSegments),
    GetConsumerGroup(GetConsumerGroup),
    GetConsumerGroups(GetConsumerGroups),
    CreateConsumerGroup(CreateConsumerGroup),
    DeleteConsumerGroup(DeleteConsumerGroup),
    JoinConsumerGroup(JoinConsumerGroup),
    LeaveConsumerGroup(LeaveConsumerGroup),
    SyncConsumerGroup(SyncConsumerGroup),
    GetClusterStatus(GetClusterStatus),
    AddClusterMember(AddClusterMember),
    RemoveClusterMember(RemoveClusterMember),
}

/// Where a request header sends its body (spec §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// Operation 1: a login body of unknown shape (see [`RegisterAttempts`]).
    Register,
    /// Any other routable request.
    Command(CommandCode),
}

/// Routes a request header: `1` Register, `3` Logout, `2` the code in bytes 196..200, the
/// replicated operations by their operation byte. Internal, reserved and unknown operations,
/// and unknown non-replicated codes, are errors (the server answers `InvalidCommand`).
pub fn route(header: &RequestHeader) -> Result<Route, CodecError> {
    let unroutable = CodecError::UnroutableOperation {
        operation: header.operation,
    };
    let Ok(operation) = header.operation() else {
        return Err(unroutable);
    };
    match operation {
        Operation::Register => Ok(Route::Register),
        Operation::NonReplicated => CommandCode::from_code(header.command_code)
            .map(Route::Command)
            .ok_or(CodecError::UnknownCommand {
                code: header.command_code,
            }),
        other => CommandCode::for_operation(other)
            .map(Route::Command)
            .ok_or(unroutable),
    }
}

impl Request {
    /// Routes the header and decodes the body.
    pub fn decode_frame(header: &RequestHeader, body: &Bytes) -> Result<Self, CodecError> {
        match route(header)? {
            Route::Register => Ok(Self::Register(RegisterAttempts::decode(body)?)),
            Route::Command(code) => Self::decode(code, body),
        }
    }

    /// The stream and topic a request addresses, for permission checks and not-found
    /// resolution (`None` where the command has no such target).
    pub fn target(&self) -> (Option<&Identifier>, Option<&Identifier>) {
        match self {
            Self::PollMessages(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::PollMessagesDeferred(r) => (Some(&r.poll.stream_id), Some(&r.poll.topic_id)),
            Self::GetPartitionRoute(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::FetchMessages(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::UpdateResource(r) => r.target_ids(),
            Self::SendMessages(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::FlushUnsavedBuffer(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::GetConsumerOffset(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::StoreConsumerOffset(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::DeleteConsumerOffset(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::GetStream(r) => (Some(&r.stream_id), None),
            Self::DeleteStream(r) => (Some(&r.stream_id), None),
            Self::UpdateStream(r) => (Some(&r.stream_id), None),
            Self::PurgeStream(r) => (Some(&r.stream_id), None),
            Self::GetTopics(r) => (Some(&r.stream_id), None),
            Self::CreateTopic(r) => (Some(&r.stream_id), None),
            Self::GetTopic(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::DeleteTopic(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::UpdateTopic(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::PurgeTopic(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::CreatePartitions(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::DeletePartitions(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::DeleteSegments(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::GetConsumerGroup(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::GetConsumerGroups(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::CreateConsumerGroup(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::DeleteConsumerGroup(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::JoinConsumerGroup(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::LeaveConsumerGroup(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            Self::SyncConsumerGroup(r) => (Some(&r.stream_id), Some(&r.topic_id)),
            _ => (None, None),
        }
    }

    /// The encoded body.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::command_table::COMMANDS;

    fn header(operation: Operation, code: u32) -> RequestHeader {
        let mut header = RequestHeader::new(operation, 0).unwrap();
        header.client = 1;
        header.command_code = code;
        header
    }

    #[test]
    fn routing() {
        assert_eq!(
            route(&header(Operation::NonReplicated, 1)).unwrap(),
            Route::Command(CommandCode::Ping)
        );
        assert_eq!(
            route(&header(Operation::NonReplicated, 9999)),
            Err(CodecError::UnknownCommand { code: 9999 })
        );
        assert_eq!(
            route(&header(Operation::Register, 0)).unwrap(),
            Route::Register
        );
        assert_eq!(
            route(&header(Operation::Logout, 0)).unwrap(),
            Route::Command(CommandCode::LogoutUser)
        );
        assert_eq!(
            route(&header(Operation::DeleteSegments, 0)).unwrap(),
            Route::Command(CommandCode::DeleteSegments)
        );
        assert_eq!(
            route(&header(Operation::StoreConsumerOffset, 0)).unwrap(),
            Route::Command(CommandCode::StoreConsumerOffset)
        );
        for internal in [Operation::TruncatePartition, Operation::Reserved] {
            assert!(route(&header(internal, 0)).is_err());
        }
        let mut bad = header(Operation::NonReplicated, 1);
        bad.operation = 99;
        assert!(route(&bad).is_err());
    }

    #[test]
    fn every_code_decodes_something_or_errors_cleanly() {
        for spec in &COMMANDS {
            for body in [&b""[..], &[0u8; 3], &[1, 4, 0, 0, 0, 0, 1, 4, 0, 0, 0, 0]] {
                if let Ok(request) = Request::decode(spec.code, &Bytes::copy_from_slice(body)) {
                    assert_eq!(request.code(), spec.code);
                    let _ = request.to_vec();
                    let _ = request.target();
                }
            }
        }
        let ping = Request::decode(CommandCode::Ping, &Bytes::new()).unwrap();
        assert_eq!(ping, Request::Ping(Ping));
    }
}
