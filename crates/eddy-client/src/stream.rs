//! [`StreamClient`]: the Iggy stream protocol (port 8090) over eddy's own framing and codecs.
//!
//! One connection, lockstep: each request is written whole and its reply read before the next
//! (the protocol answers exactly once per request, in order). Headers are filled the way the
//! 0.11 SDK fills them (stream protocol §1.5): a random non-zero client id; `Register` for both
//! logins with request 0 and the body's checksum; non-replicated reads with the command code in
//! bytes 196..200; replicated commands with their operation byte, the bound session and a
//! request counter that metadata-plane commands consume.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use eddy_codec::stream::codec::{LongString, ShortString, ToEnd, WireDecode, WireEncode};
use eddy_codec::stream::commands::change_password::ChangePassword;
use eddy_codec::stream::commands::cluster_change::{
    AddClusterMember, ClusterMemberChanged, RemoveClusterMember,
};
use eddy_codec::stream::commands::cluster_status::{ClusterStatus, GetClusterStatus};
use eddy_codec::stream::commands::create_partitions::CreatePartitions;
use eddy_codec::stream::commands::create_personal_access_token::CreatePersonalAccessToken;
use eddy_codec::stream::commands::create_stream::CreateStream;
use eddy_codec::stream::commands::create_topic::CreateTopic;
use eddy_codec::stream::commands::create_user::{CreateUser, USER_STATUS_ACTIVE};
use eddy_codec::stream::commands::delete_partitions::DeletePartitions;
use eddy_codec::stream::commands::delete_personal_access_token::DeletePersonalAccessToken;
use eddy_codec::stream::commands::delete_stream::DeleteStream;
use eddy_codec::stream::commands::delete_topic::DeleteTopic;
use eddy_codec::stream::commands::delete_user::DeleteUser;
use eddy_codec::stream::commands::get_cluster_metadata::{ClusterMetadata, GetClusterMetadata};
use eddy_codec::stream::commands::get_consumer_offset::{ConsumerOffsetInfo, GetConsumerOffset};
use eddy_codec::stream::commands::get_personal_access_tokens::{
    GetPersonalAccessTokens, PersonalAccessTokenInfo,
};
use eddy_codec::stream::commands::get_stats::{GetStats, Stats};
use eddy_codec::stream::commands::get_stream::GetStream;
use eddy_codec::stream::commands::get_streams::GetStreams;
use eddy_codec::stream::commands::get_topic::GetTopic;
use eddy_codec::stream::commands::get_topics::GetTopics;
use eddy_codec::stream::commands::get_user::GetUser;
use eddy_codec::stream::commands::get_users::GetUsers;
use eddy_codec::stream::commands::join_consumer_group::JoinConsumerGroup;
use eddy_codec::stream::commands::login_register::{
    ClientVersionInfo, LoginRegister, LoginRegisterReply,
};
use eddy_codec::stream::commands::login_register_with_pat::LoginRegisterWithPat;
use eddy_codec::stream::commands::logout_user::LogoutUser;
use eddy_codec::stream::commands::ping::Ping;
use eddy_codec::stream::commands::poll_messages::{PollMessages, PollMessagesReply};
use eddy_codec::stream::commands::send_messages::{SendMessages, SendMessagesReply};
use eddy_codec::stream::commands::store_consumer_offset::StoreConsumerOffset;
use eddy_codec::stream::commands::update_permissions::UpdatePermissions;
use eddy_codec::stream::commands::{Command, TrailingOptions};
use eddy_codec::stream::entities::{
    StreamDetails, StreamResponse, TopicDetails, TopicHeader, UserDetails, UserResponse,
};
use eddy_codec::stream::permissions::FlaggedPermissions;
use eddy_codec::stream::{
    reply_payload, AckLevel, CodecError, Consumer, Identifier, Message, OptionalPartition,
    Partitioning, Permissions, PollingStrategy, WireName,
};
use eddy_wire::stream::{
    request_checksum, FrameDecoder, Header, Operation, OwnedFrame, RequestHeader,
    DEFAULT_MAX_FRAME_SIZE,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::error::ClientError;
use crate::transport::{connect, ConnectOptions, Transport};

/// The SDK name this client announces at login.
pub const SDK_NAME: &str = "eddy-client";

/// What a successful login returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// The authenticated user's id.
    pub user_id: u32,
    /// The session bound to this connection.
    pub session: u64,
    /// The server's version text.
    pub server_version: String,
}

/// A stream-protocol connection.
pub struct StreamClient {
    io: Transport,
    addr: String,
    buf: BytesMut,
    decoder: FrameDecoder,
    client_id: u128,
    request: u64,
    session: u64,
    timeout: Duration,
}

impl std::fmt::Debug for StreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamClient")
            .field("addr", &self.addr)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

fn name(text: &str) -> Result<WireName, ClientError> {
    WireName::new(text).map_err(ClientError::InvalidRequest)
}

fn secret(text: &str) -> Result<ShortString, ClientError> {
    ShortString::new(text).map_err(ClientError::InvalidRequest)
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A request header filled the way the 0.11 SDK fills it (stream protocol §1.5): `Register`
/// with request 0, session 0 and the body's checksum; non-replicated reads with the command
/// code and the current request counter (not consumed); replicated commands with the bound
/// session and the counter, which metadata-plane commands (those carrying a body checksum)
/// consume.
pub fn request_header(
    operation: Operation,
    code: u32,
    body: &[u8],
    client: u128,
    session: u64,
    counter: &mut u64,
) -> Result<RequestHeader, eddy_wire::stream::WireError> {
    let mut header = RequestHeader::new(operation, body.len())?;
    header.client = client;
    match operation {
        Operation::Register => header.request_checksum = request_checksum(body),
        Operation::NonReplicated => {
            header.command_code = code;
            header.request = *counter;
            header.session = session;
        }
        op => {
            header.request = *counter;
            header.session = session;
            if op.carries_request_checksum() {
                header.request_checksum = request_checksum(body);
                *counter += 1;
            }
        }
    }
    Ok(header)
}

impl StreamClient {
    /// Connects (not logged in; only [`StreamClient::ping`] and the logins work before one).
    pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Self, ClientError> {
        let io = connect(addr, options).await?;
        let mut client_id = 0;
        while client_id == 0 {
            client_id = rand::random::<u128>();
        }
        Ok(Self {
            io,
            addr: addr.to_owned(),
            buf: BytesMut::with_capacity(64 * 1024),
            decoder: FrameDecoder::new(DEFAULT_MAX_FRAME_SIZE),
            client_id,
            request: 1,
            session: 0,
            timeout: options.request_timeout,
        })
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The bound session, 0 before login.
    pub fn session(&self) -> u64 {
        self.session
    }

    fn version_info() -> Result<ClientVersionInfo, ClientError> {
        Ok(ClientVersionInfo {
            protocol_version: eddy_wire::stream::version::PROTOCOL_VERSION,
            sdk_name: name(SDK_NAME)?,
            sdk_version: name(env!("CARGO_PKG_VERSION"))?,
        })
    }

    /// Logs in with a username and password (`LOGIN_REGISTER`). A refusal is
    /// [`ClientError::Evicted`] with `InvalidCredentials`; the connection stays usable.
    pub async fn login_user(
        &mut self,
        username: &str,
        password: &str,
    ) -> Result<Login, ClientError> {
        let body = LoginRegister {
            client: Self::version_info()?,
            username: name(username)?,
            password: secret(password)?,
            context: LongString::default(),
        }
        .to_vec();
        self.register(body).await
    }

    /// Logs in with a personal access token (`LOGIN_REGISTER_WITH_PAT`).
    pub async fn login_with_token(&mut self, token: &str) -> Result<Login, ClientError> {
        let body = LoginRegisterWithPat {
            client: Self::version_info()?,
            token: secret(token)?,
            context: LongString::default(),
        }
        .to_vec();
        self.register(body).await
    }

    async fn register(&mut self, body: Vec<u8>) -> Result<Login, ClientError> {
        let header = self.header(Operation::Register, 0, &body)?;
        let payload = self.exchange(&header, &body).await?;
        let reply = LoginRegisterReply::decode(&payload).map_err(ClientError::StreamCodec)?;
        self.session = reply.session;
        self.request = 1;
        Ok(Login {
            user_id: reply.user_id,
            session: reply.session,
            server_version: reply.server_version.into_string(),
        })
    }

    /// Ends the session (`LOGOUT_USER`); the connection stays open.
    pub async fn logout(&mut self) -> Result<(), ClientError> {
        self.call(&LogoutUser).await?;
        self.session = 0;
        Ok(())
    }

    fn header(
        &mut self,
        operation: Operation,
        code: u32,
        body: &[u8],
    ) -> Result<RequestHeader, ClientError> {
        request_header(
            operation,
            code,
            body,
            self.client_id,
            self.session,
            &mut self.request,
        )
        .map_err(ClientError::StreamFrame)
    }

    /// Sends any request of the catalog and decodes its reply payload.
    pub async fn call<C: Command>(&mut self, request: &C) -> Result<C::Reply, ClientError> {
        let body = request.to_vec();
        let operation = C::CODE.spec().operation.unwrap_or(Operation::NonReplicated);
        let header = self.header(operation, C::CODE.code(), &body)?;
        let payload = self.exchange(&header, &body).await?;
        C::Reply::decode_bytes(&payload).map_err(ClientError::StreamCodec)
    }

    /// Writes one frame and reads its answer; returns the reply payload (result section
    /// stripped) or the refusal.
    async fn exchange(
        &mut self,
        header: &RequestHeader,
        body: &[u8],
    ) -> Result<Bytes, ClientError> {
        let mut frame = Vec::with_capacity(256 + body.len());
        frame.extend_from_slice(&header.encode());
        frame.extend_from_slice(body);
        let io_error = |addr: &str| {
            let addr = addr.to_owned();
            move |source| ClientError::Io { addr, source }
        };
        self.io
            .write_all(&frame)
            .await
            .map_err(io_error(&self.addr))?;
        let answer = tokio::time::timeout(self.timeout, self.read_frame())
            .await
            .map_err(|_| ClientError::Timeout {
                addr: self.addr.clone(),
                timeout: self.timeout,
            })??;
        match answer.header {
            Header::Reply(reply) => match reply_payload(&reply, &answer.body) {
                Ok(payload) => Ok(answer.body.slice_ref(payload)),
                Err(CodecError::ErrorReply { code }) => Err(ClientError::refused(code)),
                Err(e) => Err(ClientError::StreamCodec(e)),
            },
            Header::Eviction(eviction) => {
                let reason = eviction.reason().map_err(ClientError::StreamFrame)?;
                self.session = 0;
                Err(ClientError::Evicted {
                    reason,
                    code: reason.sdk_error_code(),
                })
            }
            _ => Err(ClientError::Unexpected(
                "a frame that is neither reply nor eviction",
            )),
        }
    }

    async fn read_frame(&mut self) -> Result<OwnedFrame, ClientError> {
        loop {
            if let Some(frame) = self
                .decoder
                .decode_buf(&mut self.buf)
                .map_err(ClientError::StreamFrame)?
            {
                return Ok(frame);
            }
            if self.buf.capacity() - self.buf.len() < 64 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            let read = self
                .io
                .read_buf(&mut self.buf)
                .await
                .map_err(|source| ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                })?;
            if read == 0 {
                return Err(ClientError::Closed {
                    addr: self.addr.clone(),
                });
            }
        }
    }

    /// `PING` (served before login).
    pub async fn ping(&mut self) -> Result<(), ClientError> {
        self.call(&Ping).await.map(|_| ())
    }

    /// `GET_STATS`.
    pub async fn stats(&mut self) -> Result<Stats, ClientError> {
        self.call(&GetStats).await
    }

    /// `GET_CLUSTER_METADATA`.
    pub async fn cluster_metadata(&mut self) -> Result<ClusterMetadata, ClientError> {
        self.call(&GetClusterMetadata).await
    }

    /// `EDDY_CLUSTER_STATUS`: what the connected member knows of the cluster (eddy's own
    /// command; needs the `read_servers` permission).
    pub async fn cluster_status(&mut self) -> Result<ClusterStatus, ClientError> {
        self.call(&GetClusterStatus).await
    }

    /// `EDDY_CLUSTER_ADD_MEMBER` (eddy's own; `manage_servers`): adds member `id`, whose
    /// replication port is at `replication_address`, to every replicated group. Sent to the
    /// metadata leader (another member answers `TransientNotAccepted`); the answer comes once
    /// the new member has caught up, so it waits up to `wait`.
    pub async fn add_cluster_member(
        &mut self,
        id: u64,
        replication_address: &str,
        wait: Duration,
    ) -> Result<ClusterMemberChanged, ClientError> {
        let request = AddClusterMember {
            id,
            replication_address: LongString::new(replication_address),
        };
        self.call_waiting(&request, wait).await
    }

    /// `EDDY_CLUSTER_REMOVE_MEMBER` (eddy's own; `manage_servers`): removes member `id` from
    /// every replicated group, waiting up to `wait`.
    pub async fn remove_cluster_member(
        &mut self,
        id: u64,
        wait: Duration,
    ) -> Result<ClusterMemberChanged, ClientError> {
        self.call_waiting(&RemoveClusterMember { id }, wait).await
    }

    /// [`Self::call`] with its own deadline for the answer.
    async fn call_waiting<C: Command>(
        &mut self,
        request: &C,
        wait: Duration,
    ) -> Result<C::Reply, ClientError> {
        let usual = std::mem::replace(&mut self.timeout, wait);
        let answer = self.call(request).await;
        self.timeout = usual;
        answer
    }

    /// `GET_STREAMS`.
    pub async fn streams(&mut self) -> Result<Vec<StreamResponse>, ClientError> {
        Ok(self.call(&GetStreams).await?.0)
    }

    /// `GET_STREAM`; `None` when there is no such stream.
    pub async fn stream(
        &mut self,
        stream: &Identifier,
    ) -> Result<Option<StreamDetails>, ClientError> {
        Ok(self
            .call(&GetStream {
                stream_id: stream.clone(),
            })
            .await?
            .0)
    }

    /// `CREATE_STREAM`.
    pub async fn create_stream(&mut self, stream: &str) -> Result<StreamDetails, ClientError> {
        self.call(&CreateStream {
            name: name(stream)?,
            options: TrailingOptions::default(),
        })
        .await
    }

    /// `DELETE_STREAM`.
    pub async fn delete_stream(&mut self, stream: &Identifier) -> Result<(), ClientError> {
        self.call(&DeleteStream {
            stream_id: stream.clone(),
        })
        .await
        .map(|_| ())
    }

    /// `GET_TOPICS`.
    pub async fn topics(&mut self, stream: &Identifier) -> Result<Vec<TopicHeader>, ClientError> {
        Ok(self
            .call(&GetTopics {
                stream_id: stream.clone(),
            })
            .await?
            .0)
    }

    /// `GET_TOPIC`; `None` when there is no such topic.
    pub async fn topic(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
    ) -> Result<Option<TopicDetails>, ClientError> {
        Ok(self
            .call(&GetTopic {
                stream_id: stream.clone(),
                topic_id: topic.clone(),
            })
            .await?
            .0)
    }

    /// `CREATE_TOPIC` with an options block (see `eddy_options::TopicOptions`).
    pub async fn create_topic(
        &mut self,
        stream: &Identifier,
        topic: &str,
        partitions: u32,
        options: eddy_options::OptionsBlock,
    ) -> Result<TopicDetails, ClientError> {
        self.call(&CreateTopic {
            stream_id: stream.clone(),
            partitions_count: partitions,
            name: name(topic)?,
            options: TrailingOptions(options),
        })
        .await
    }

    /// `DELETE_TOPIC`.
    pub async fn delete_topic(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
    ) -> Result<(), ClientError> {
        self.call(&DeleteTopic {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        })
        .await
        .map(|_| ())
    }

    /// `CREATE_PARTITIONS`.
    pub async fn create_partitions(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<(), ClientError> {
        self.call(&CreatePartitions {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        })
        .await
        .map(|_| ())
    }

    /// `DELETE_PARTITIONS`.
    pub async fn delete_partitions(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<(), ClientError> {
        self.call(&DeletePartitions {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        })
        .await
        .map(|_| ())
    }

    /// `SEND_MESSAGES`: one batch of `messages`.
    pub async fn send(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partitioning: &Partitioning,
        messages: &[Message],
    ) -> Result<SendMessagesReply, ClientError> {
        let request = SendMessages::new(
            stream.clone(),
            topic.clone(),
            partitioning.clone(),
            messages,
        )
        .map_err(ClientError::InvalidRequest)?;
        self.call(&request).await
    }

    /// `POLL_MESSAGES`.
    pub async fn poll(&mut self, request: &PollMessages) -> Result<PollMessagesReply, ClientError> {
        self.call(request).await
    }

    /// `POLL_MESSAGES` with its fields spelled out.
    #[allow(clippy::too_many_arguments)]
    pub async fn poll_messages(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: Option<u32>,
        consumer: &Consumer,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> Result<PollMessagesReply, ClientError> {
        self.call(&PollMessages {
            consumer: consumer.clone(),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition: OptionalPartition(partition),
            strategy,
            count,
            auto_commit,
        })
        .await
    }

    /// `STORE_CONSUMER_OFFSET`.
    pub async fn store_offset(
        &mut self,
        consumer: &Consumer,
        stream: &Identifier,
        topic: &Identifier,
        partition: Option<u32>,
        offset: u64,
    ) -> Result<(), ClientError> {
        self.call(&StoreConsumerOffset {
            consumer: consumer.clone(),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition: OptionalPartition(partition),
            offset,
            ack: AckLevel::Quorum,
        })
        .await
        .map(|_| ())
    }

    /// `GET_CONSUMER_OFFSET`; `None` when nothing is stored.
    pub async fn offset(
        &mut self,
        consumer: &Consumer,
        stream: &Identifier,
        topic: &Identifier,
        partition: Option<u32>,
    ) -> Result<Option<ConsumerOffsetInfo>, ClientError> {
        Ok(self
            .call(&GetConsumerOffset {
                consumer: consumer.clone(),
                stream_id: stream.clone(),
                topic_id: topic.clone(),
                partition: OptionalPartition(partition),
            })
            .await?
            .0)
    }

    /// `JOIN_CONSUMER_GROUP`: this connection becomes a member until it leaves or closes.
    pub async fn join_group(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<(), ClientError> {
        self.call(&JoinConsumerGroup {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        })
        .await
        .map(|_| ())
    }

    /// `GET_USERS`.
    pub async fn users(&mut self) -> Result<Vec<UserResponse>, ClientError> {
        Ok(self.call(&GetUsers).await?.0)
    }

    /// `GET_USER`; `None` when there is no such user.
    pub async fn user(&mut self, user: &Identifier) -> Result<Option<UserDetails>, ClientError> {
        Ok(self
            .call(&GetUser {
                user_id: user.clone(),
            })
            .await?
            .0)
    }

    /// `CREATE_USER` (active).
    pub async fn create_user(
        &mut self,
        username: &str,
        password: &str,
        permissions: Option<Permissions>,
    ) -> Result<UserDetails, ClientError> {
        self.call(&CreateUser {
            username: name(username)?,
            password: secret(password)?,
            status: USER_STATUS_ACTIVE,
            permissions: FlaggedPermissions(permissions),
            options: TrailingOptions::default(),
        })
        .await
    }

    /// `DELETE_USER`.
    pub async fn delete_user(&mut self, user: &Identifier) -> Result<(), ClientError> {
        self.call(&DeleteUser {
            user_id: user.clone(),
        })
        .await
        .map(|_| ())
    }

    /// `CHANGE_PASSWORD`.
    pub async fn change_password(
        &mut self,
        user: &Identifier,
        current: &str,
        new: &str,
    ) -> Result<(), ClientError> {
        self.call(&ChangePassword {
            user_id: user.clone(),
            current_password: secret(current)?,
            new_password: secret(new)?,
        })
        .await
        .map(|_| ())
    }

    /// `UPDATE_PERMISSIONS`; `None` clears them.
    pub async fn update_permissions(
        &mut self,
        user: &Identifier,
        permissions: Option<Permissions>,
    ) -> Result<(), ClientError> {
        self.call(&UpdatePermissions {
            user_id: user.clone(),
            permissions: FlaggedPermissions(permissions),
        })
        .await
        .map(|_| ())
    }

    /// `GET_PERSONAL_ACCESS_TOKENS` of the logged-in user.
    pub async fn tokens(&mut self) -> Result<Vec<PersonalAccessTokenInfo>, ClientError> {
        let ToEnd(tokens) = self.call(&GetPersonalAccessTokens).await?;
        Ok(tokens)
    }

    /// `CREATE_PERSONAL_ACCESS_TOKEN`; returns the raw token (shown once). `expiry_micros`
    /// 0 is the server default, `u64::MAX` never expires.
    pub async fn create_token(
        &mut self,
        token: &str,
        expiry_micros: u64,
    ) -> Result<String, ClientError> {
        Ok(self
            .call(&CreatePersonalAccessToken {
                name: name(token)?,
                expiry: expiry_micros,
            })
            .await?
            .token
            .into_string())
    }

    /// `DELETE_PERSONAL_ACCESS_TOKEN`.
    pub async fn delete_token(&mut self, token: &str) -> Result<(), ClientError> {
        self.call(&DeletePersonalAccessToken { name: name(token)? })
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_the_sdk() {
        let mut counter = 1;
        let login = request_header(Operation::Register, 0, b"body", 7, 0, &mut counter).unwrap();
        assert_eq!((login.request, login.session), (0, 0));
        assert_eq!(login.request_checksum, request_checksum(b"body"));
        let read = request_header(Operation::NonReplicated, 1, b"", 7, 9, &mut counter).unwrap();
        assert_eq!((read.command_code, read.request, read.session), (1, 1, 9));
        assert_eq!(read.request_checksum, 0);
        let send = request_header(Operation::SendMessages, 0, b"x", 7, 9, &mut counter).unwrap();
        assert_eq!(
            (send.request, counter),
            (1, 1),
            "partition plane: not consumed"
        );
        let create = request_header(Operation::CreateStream, 0, b"x", 7, 9, &mut counter).unwrap();
        assert_eq!(
            (create.request, counter),
            (1, 2),
            "metadata plane: consumed"
        );
        assert_eq!(create.request_checksum, request_checksum(b"x"));
        assert_eq!(create.client, 7);
        assert_eq!(create.frame.size, 257);
    }
}
