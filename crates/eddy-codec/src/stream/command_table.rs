//! The one command table (spec §2.7): code, name, operation, replicated or not, whether it is
//! served before login, and the permission it requires. Dispatch, metrics and docs read this
//! table; nothing else lists commands.
//!
//! The permission column is data for `eddy-auth` ([`RequiredPermission`]); the rules behind
//! each variant are spec §7.8 and are written on the variants. Root (user 0) passes every check.

use eddy_wire::stream::Operation;

/// Every command code of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum CommandCode {
    /// 1.
    Ping = 1,
    /// 10.
    GetStats = 10,
    /// 11 (`GET_SNAPSHOT_FILE`).
    GetSnapshot = 11,
    /// 12.
    GetClusterMetadata = 12,
    /// 13.
    DescribeOptions = 13,
    /// 16: the option patch of the 0.12.2 wire (edge.9 SDK).
    UpdateResource = 16,
    /// 17: a page of the metadata change log, 0.12.2 wire (edge.9 SDK).
    GetMetadataChanges = 17,
    /// 20.
    GetMe = 20,
    /// 21.
    GetClient = 21,
    /// 22.
    GetClients = 22,
    /// 31.
    GetUser = 31,
    /// 32.
    GetUsers = 32,
    /// 33.
    CreateUser = 33,
    /// 34.
    DeleteUser = 34,
    /// 35.
    UpdateUser = 35,
    /// 36.
    UpdatePermissions = 36,
    /// 37.
    ChangePassword = 37,
    /// 38, legacy: rejected with a `MalformedLogin` eviction.
    LoginUser = 38,
    /// 39.
    LogoutUser = 39,
    /// 40.
    LoginRegister = 40,
    /// 41.
    GetPersonalAccessTokens = 41,
    /// 42.
    CreatePersonalAccessToken = 42,
    /// 43.
    DeletePersonalAccessToken = 43,
    /// 44, legacy: rejected with a `MalformedLogin` eviction.
    LoginWithPersonalAccessToken = 44,
    /// 45.
    LoginRegisterWithPat = 45,
    /// 100.
    PollMessages = 100,
    /// 101.
    SendMessages = 101,
    /// 102: parses, always answered `FeatureUnavailable`.
    FlushUnsavedBuffer = 102,
    /// 105: a partition's route, 0.12.2 wire (edge.9 SDK).
    GetPartitionRoute = 105,
    /// 106: a poll that may wait, 0.12.2 wire (edge.9 SDK).
    PollMessagesDeferred = 106,
    /// 108: cancels the connection's deferred request with the same request id; never
    /// answered (0.12.2 wire).
    CancelDeferredRequest = 108,
    /// 109: a read of many partitions, 0.12.2 wire (the edge.9 SDK's reader).
    FetchMessages = 109,
    /// 120.
    GetConsumerOffset = 120,
    /// 121.
    StoreConsumerOffset = 121,
    /// 122.
    DeleteConsumerOffset = 122,
    /// 200.
    GetStream = 200,
    /// 201.
    GetStreams = 201,
    /// 202.
    CreateStream = 202,
    /// 203.
    DeleteStream = 203,
    /// 204.
    UpdateStream = 204,
    /// 205.
    PurgeStream = 205,
    /// 300.
    GetTopic = 300,
    /// 301.
    GetTopics = 301,
    /// 302.
    CreateTopic = 302,
    /// 303.
    DeleteTopic = 303,
    /// 304.
    UpdateTopic = 304,
    /// 305.
    PurgeTopic = 305,
    /// 402.
    CreatePartitions = 402,
    /// 403.
    DeletePartitions = 403,
    /// 503.
    DeleteSegments = 503,
    /// 600.
    GetConsumerGroup = 600,
    /// 601.
    GetConsumerGroups = 601,
    /// 602.
    CreateConsumerGroup = 602,
    /// 603.
    DeleteConsumerGroup = 603,
    /// 604.
    JoinConsumerGroup = 604,
    /// 605.
    LeaveConsumerGroup = 605,
    /// 606.
    SyncConsumerGroup = 606,
    /// 9000: eddy's own (Iggy uses no code at or above 9000): what a member knows of the
    /// cluster, for `eddy cluster status`.
    GetClusterStatus = 9000,
    /// 9001: eddy's own: adds a member to the cluster (`eddy cluster add`).
    AddClusterMember = 9001,
    /// 9002: eddy's own: removes a member from the cluster (`eddy cluster remove`).
    RemoveClusterMember = 9002,
}

/// What a command requires of the caller (spec §7.8). `Stream*` variants are checked against
/// the request's stream, `Topic*` against its stream and topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequiredPermission {
    /// Nothing, not even a login (`PING`, `LOGOUT_USER`).
    None,
    /// The login itself checks credentials or a token.
    Credentials,
    /// Any authenticated user (cluster metadata, describe options, get me, own PATs, sync
    /// group, change own password via [`RequiredPermission::SelfOrManageUsers`]).
    Authenticated,
    /// Never served: the legacy login codes (eviction `MalformedLogin`).
    Rejected,
    /// Never served: parses, then `FeatureUnavailable` (`FLUSH_UNSAVED_BUFFER`).
    Unavailable,
    /// Global `manage_servers` or `read_servers`.
    ReadServers,
    /// Global `manage_servers` (eddy's cluster membership changes).
    ManageServers,
    /// The caller itself, or global `read_users`/`manage_users` (`GET_USER`).
    SelfOrReadUsers,
    /// Global `read_users` or `manage_users`.
    ReadUsers,
    /// Global `manage_users`.
    ManageUsers,
    /// The caller itself, or global `manage_users` (`CHANGE_PASSWORD`).
    SelfOrManageUsers,
    /// Global `manage_streams` or `read_streams` (`GET_STREAMS`).
    ReadStreams,
    /// Global `manage_streams`/`read_streams`, or stream `manage_stream`/`read_stream`.
    ReadStream,
    /// Global `manage_streams` (`CREATE_STREAM`).
    ManageStreams,
    /// Global `manage_streams`, or stream `manage_stream`.
    ManageStream,
    /// Global `read_streams`/`manage_streams`/`manage_topics`/`read_topics`, or stream
    /// `manage_stream`/`read_stream`/`manage_topics`/`read_topics` (`GET_TOPICS`).
    ReadTopics,
    /// As [`RequiredPermission::ReadTopics`], or topic `manage_topic`/`read_topic` (get topic and
    /// every consumer-group command).
    ReadTopic,
    /// Global `manage_streams`/`manage_topics`, or stream `manage_stream`/`manage_topics`
    /// (`CREATE_TOPIC`).
    ManageTopics,
    /// As [`RequiredPermission::ManageTopics`], or topic `manage_topic` (update/delete/purge
    /// topic, partitions, segments).
    ManageTopic,
    /// Global `poll_messages`/`read_topics`/`manage_topics`/`read_streams`/`manage_streams`, or
    /// stream `manage_stream`/`read_stream`/`manage_topics`/`read_topics`/`poll_messages`, or
    /// topic `manage_topic`/`read_topic`/`poll_messages` (poll, consumer offsets).
    PollMessages,
    /// Global `send_messages`/`manage_streams`/`manage_topics`, or stream
    /// `manage_stream`/`manage_topics`/`send_messages`, or topic `manage_topic`/`send_messages`.
    SendMessages,
}

/// One row of the command table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommandSpec {
    /// The code.
    pub code: CommandCode,
    /// The protocol name (spec §2.7).
    pub name: &'static str,
    /// The operation byte a client sends for it (`NonReplicated` for reads; `None` for the
    /// legacy login codes, which no client sends).
    pub operation: Option<Operation>,
    /// Whether it goes through the commit pipeline (a replicated operation >= 128).
    pub replicated: bool,
    /// Whether it is served before login.
    pub pre_auth: bool,
    /// The permission it requires.
    pub permission: RequiredPermission,
}

impl CommandSpec {
    /// Whether a successful reply body starts with a result section.
    pub fn result_framed(&self) -> bool {
        self.operation.is_some_and(|op| op.is_result_framed(false))
    }
}

const fn row(
    code: CommandCode,
    name: &'static str,
    operation: Option<Operation>,
    pre_auth: bool,
    permission: RequiredPermission,
) -> CommandSpec {
    let replicated = match operation {
        Some(op) => op as u8 >= 128,
        None => false,
    };
    CommandSpec {
        code,
        name,
        operation,
        replicated,
        pre_auth,
        permission,
    }
}

use CommandCode as C;
use RequiredPermission as P;

const READ: Option<Operation> = Some(Operation::NonReplicated);

/// The table, ordered by code.
pub const COMMANDS: [CommandSpec; 60] = [
    row(C::Ping, "PING", READ, true, P::None),
    row(C::GetStats, "GET_STATS", READ, false, P::ReadServers),
    row(
        C::GetSnapshot,
        "GET_SNAPSHOT_FILE",
        READ,
        false,
        P::ReadServers,
    ),
    row(
        C::GetClusterMetadata,
        "GET_CLUSTER_METADATA",
        READ,
        false,
        P::Authenticated,
    ),
    row(
        C::DescribeOptions,
        "DESCRIBE_OPTIONS",
        READ,
        false,
        P::Authenticated,
    ),
    // Authorised as the command it patches: UPDATE_TOPIC (this row's permission), or
    // UPDATE_STREAM or UPDATE_USER for a stream or user patch.
    row(
        C::UpdateResource,
        "UPDATE_RESOURCE",
        Some(Operation::UpdateResource),
        false,
        P::ManageTopic,
    ),
    row(
        C::GetMetadataChanges,
        "GET_METADATA_CHANGES",
        READ,
        false,
        P::ManageServers,
    ),
    row(C::GetMe, "GET_ME", READ, false, P::Authenticated),
    row(C::GetClient, "GET_CLIENT", READ, false, P::ReadServers),
    row(C::GetClients, "GET_CLIENTS", READ, false, P::ReadServers),
    row(C::GetUser, "GET_USER", READ, false, P::SelfOrReadUsers),
    row(C::GetUsers, "GET_USERS", READ, false, P::ReadUsers),
    row(
        C::CreateUser,
        "CREATE_USER",
        Some(Operation::CreateUser),
        false,
        P::ManageUsers,
    ),
    row(
        C::DeleteUser,
        "DELETE_USER",
        Some(Operation::DeleteUser),
        false,
        P::ManageUsers,
    ),
    row(
        C::UpdateUser,
        "UPDATE_USER",
        Some(Operation::UpdateUser),
        false,
        P::ManageUsers,
    ),
    row(
        C::UpdatePermissions,
        "UPDATE_PERMISSIONS",
        Some(Operation::UpdatePermissions),
        false,
        P::ManageUsers,
    ),
    row(
        C::ChangePassword,
        "CHANGE_PASSWORD",
        Some(Operation::ChangePassword),
        false,
        P::SelfOrManageUsers,
    ),
    row(C::LoginUser, "LOGIN_USER", None, false, P::Rejected),
    row(
        C::LogoutUser,
        "LOGOUT_USER",
        Some(Operation::Logout),
        true,
        P::None,
    ),
    row(
        C::LoginRegister,
        "LOGIN_REGISTER",
        Some(Operation::Register),
        true,
        P::Credentials,
    ),
    row(
        C::GetPersonalAccessTokens,
        "GET_PERSONAL_ACCESS_TOKENS",
        READ,
        false,
        P::Authenticated,
    ),
    row(
        C::CreatePersonalAccessToken,
        "CREATE_PERSONAL_ACCESS_TOKEN",
        Some(Operation::CreatePersonalAccessToken),
        false,
        P::Authenticated,
    ),
    row(
        C::DeletePersonalAccessToken,
        "DELETE_PERSONAL_ACCESS_TOKEN",
        Some(Operation::DeletePersonalAccessToken),
        false,
        P::Authenticated,
    ),
    row(
        C::LoginWithPersonalAccessToken,
        "LOGIN_WITH_PERSONAL_ACCESS_TOKEN",
        None,
        false,
        P::Rejected,
    ),
    row(
        C::LoginRegisterWithPat,
        "LOGIN_REGISTER_WITH_PAT",
        Some(Operation::Register),
        true,
        P::Credentials,
    ),
    row(
        C::PollMessages,
        "POLL_MESSAGES",
        READ,
        false,
        P::PollMessages,
    ),
    row(
        C::SendMessages,
        "SEND_MESSAGES",
        Some(Operation::SendMessages),
        false,
        P::SendMessages,
    ),
    row(
        C::FlushUnsavedBuffer,
        "FLUSH_UNSAVED_BUFFER",
        READ,
        false,
        P::Unavailable,
    ),
    // Sends and polls both need it, so it asks only for a session (and a topic that exists).
    row(
        C::GetPartitionRoute,
        "GET_PARTITION_ROUTE",
        READ,
        false,
        P::Authenticated,
    ),
    row(
        C::PollMessagesDeferred,
        "POLL_MESSAGES_DEFERRED",
        READ,
        false,
        P::PollMessages,
    ),
    row(
        C::CancelDeferredRequest,
        "CANCEL_DEFERRED_REQUEST",
        READ,
        false,
        P::Authenticated,
    ),
    row(
        C::FetchMessages,
        "FETCH_MESSAGES",
        READ,
        false,
        P::PollMessages,
    ),
    row(
        C::GetConsumerOffset,
        "GET_CONSUMER_OFFSET",
        READ,
        false,
        P::PollMessages,
    ),
    row(
        C::StoreConsumerOffset,
        "STORE_CONSUMER_OFFSET",
        Some(Operation::StoreConsumerOffset),
        false,
        P::PollMessages,
    ),
    row(
        C::DeleteConsumerOffset,
        "DELETE_CONSUMER_OFFSET",
        Some(Operation::DeleteConsumerOffset),
        false,
        P::PollMessages,
    ),
    row(C::GetStream, "GET_STREAM", READ, false, P::ReadStream),
    row(C::GetStreams, "GET_STREAMS", READ, false, P::ReadStreams),
    row(
        C::CreateStream,
        "CREATE_STREAM",
        Some(Operation::CreateStream),
        false,
        P::ManageStreams,
    ),
    row(
        C::DeleteStream,
        "DELETE_STREAM",
        Some(Operation::DeleteStream),
        false,
        P::ManageStream,
    ),
    row(
        C::UpdateStream,
        "UPDATE_STREAM",
        Some(Operation::UpdateStream),
        false,
        P::ManageStream,
    ),
    row(
        C::PurgeStream,
        "PURGE_STREAM",
        Some(Operation::PurgeStream),
        false,
        P::ManageStream,
    ),
    row(C::GetTopic, "GET_TOPIC", READ, false, P::ReadTopic),
    row(C::GetTopics, "GET_TOPICS", READ, false, P::ReadTopics),
    row(
        C::CreateTopic,
        "CREATE_TOPIC",
        Some(Operation::CreateTopic),
        false,
        P::ManageTopics,
    ),
    row(
        C::DeleteTopic,
        "DELETE_TOPIC",
        Some(Operation::DeleteTopic),
        false,
        P::ManageTopic,
    ),
    row(
        C::UpdateTopic,
        "UPDATE_TOPIC",
        Some(Operation::UpdateTopic),
        false,
        P::ManageTopic,
    ),
    row(
        C::PurgeTopic,
        "PURGE_TOPIC",
        Some(Operation::PurgeTopic),
        false,
        P::ManageTopic,
    ),
    row(
        C::CreatePartitions,
        "CREATE_PARTITIONS",
        Some(Operation::CreatePartitions),
        false,
        P::ManageTopic,
    ),
    row(
        C::DeletePartitions,
        "DELETE_PARTITIONS",
        Some(Operation::DeletePartitions),
        false,
        P::ManageTopic,
    ),
    row(
        C::DeleteSegments,
        "DELETE_SEGMENTS",
        Some(Operation::DeleteSegments),
        false,
        P::ManageTopic,
    ),
    row(
        C::GetConsumerGroup,
        "GET_CONSUMER_GROUP",
        READ,
        false,
        P::ReadTopic,
    ),
    row(
        C::GetConsumerGroups,
        "GET_CONSUMER_GROUPS",
        READ,
        false,
        P::ReadTopic,
    ),
    row(
        C::CreateConsumerGroup,
        "CREATE_CONSUMER_GROUP",
        Some(Operation::CreateConsumerGroup),
        false,
        P::ReadTopic,
    ),
    row(
        C::DeleteConsumerGroup,
        "DELETE_CONSUMER_GROUP",
        Some(Operation::DeleteConsumerGroup),
        false,
        P::ReadTopic,
    ),
    row(
        C::JoinConsumerGroup,
        "JOIN_CONSUMER_GROUP",
        Some(Operation::JoinConsumerGroup),
        false,
        P::ReadTopic,
    ),
    row(
        C::LeaveConsumerGroup,
        "LEAVE_CONSUMER_GROUP",
        Some(Operation::LeaveConsumerGroup),
        false,
        P::ReadTopic,
    ),
    row(
        C::SyncConsumerGroup,
        "SYNC_CONSUMER_GROUP",
        READ,
        false,
        P::Authenticated,
    ),
    // eddy's own, sent as non-replicated requests routed by their code (Iggy has no
    // operation byte for them). The status is served without the metadata barrier, like
    // GET_CLUSTER_METADATA: a member cut off from a quorum still says what it sees.
    row(
        C::GetClusterStatus,
        "EDDY_CLUSTER_STATUS",
        READ,
        false,
        P::ReadServers,
    ),
    row(
        C::AddClusterMember,
        "EDDY_CLUSTER_ADD_MEMBER",
        READ,
        false,
        P::ManageServers,
    ),
    row(
        C::RemoveClusterMember,
        "EDDY_CLUSTER_REMOVE_MEMBER",
        READ,
        false,
        P::ManageServers,
    ),
];

const _: () = {
    let mut i = 0;
    while i < COMMANDS.len() {
        if i > 0 {
            assert!((COMMANDS[i - 1].code as u32) < (COMMANDS[i].code as u32));
        }
        i += 1;
    }
};

impl CommandCode {
    /// The numeric code.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The code for a number, if it is in the catalog.
    pub const fn from_code(code: u32) -> Option<Self> {
        let mut lo = 0;
        let mut hi = COMMANDS.len();
        while lo < hi {
            let mid = usize::midpoint(lo, hi);
            let at = COMMANDS[mid].code as u32;
            if at == code {
                return Some(COMMANDS[mid].code);
            }
            if at < code {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        None
    }

    /// This command's row.
    pub const fn spec(self) -> &'static CommandSpec {
        let mut i = 0;
        while i < COMMANDS.len() {
            if COMMANDS[i].code as u32 == self as u32 {
                return &COMMANDS[i];
            }
            i += 1;
        }
        panic!("every command code has a row in COMMANDS");
    }

    /// The protocol name.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// The command a replicated operation carries (operations 128..=149 and 160..=162, which
    /// identify their command without a code). `None` for Register (40 or 45), Logout (39 via
    /// [`CommandCode::LogoutUser`] is returned), `NonReplicated`, internal and reserved ones.
    pub const fn for_operation(operation: Operation) -> Option<Self> {
        if matches!(operation, Operation::Logout) {
            return Some(Self::LogoutUser);
        }
        if (operation as u8) < 128 {
            return None;
        }
        let mut i = 0;
        while i < COMMANDS.len() {
            if let Some(op) = COMMANDS[i].operation {
                if op as u8 == operation as u8 {
                    return Some(COMMANDS[i].code);
                }
            }
            i += 1;
        }
        None
    }
}

impl std::fmt::Display for CommandCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_has_one_row() {
        for spec in &COMMANDS {
            assert_eq!(CommandCode::from_code(spec.code.code()), Some(spec.code));
            assert_eq!(spec.code.spec(), spec);
        }
        assert_eq!(CommandCode::from_code(0), None);
        assert_eq!(CommandCode::from_code(9999), None);
    }

    #[test]
    fn operations_map_back_to_their_code() {
        for spec in &COMMANDS {
            if let Some(op) = spec.operation {
                if spec.replicated {
                    assert_eq!(
                        CommandCode::for_operation(op),
                        Some(spec.code),
                        "{}",
                        spec.name
                    );
                }
            }
        }
        assert_eq!(
            CommandCode::for_operation(Operation::DeleteSegments),
            Some(CommandCode::DeleteSegments)
        );
        assert_eq!(CommandCode::for_operation(Operation::Register), None);
        assert_eq!(
            CommandCode::for_operation(Operation::TruncatePartition),
            None
        );
        assert_eq!(
            CommandCode::for_operation(Operation::Logout),
            Some(CommandCode::LogoutUser)
        );
    }

    #[test]
    fn table_facts_from_the_spec() {
        let pre_auth: Vec<u32> = COMMANDS
            .iter()
            .filter(|s| s.pre_auth)
            .map(|s| s.code.code())
            .collect();
        assert_eq!(pre_auth, [1, 39, 40, 45]);
        let replicated = COMMANDS.iter().filter(|s| s.replicated).count();
        // 25 of the 0.11 catalog and UPDATE_RESOURCE of the 0.12.2 wire.
        assert_eq!(replicated, 26);
        assert!(!CommandCode::DeleteSegments.spec().result_framed());
        assert!(!CommandCode::SendMessages.spec().result_framed());
        assert!(CommandCode::StoreConsumerOffset.spec().result_framed());
        assert!(CommandCode::CreateStream.spec().result_framed());
        assert!(!CommandCode::GetStream.spec().result_framed());
        assert_eq!(CommandCode::GetSnapshot.name(), "GET_SNAPSHOT_FILE");
    }
}
