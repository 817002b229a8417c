//! From a request frame to an [`Outcome`]: routing, the request checksum, the login gate,
//! decoding, resolving the resource, authorising, and the handler call. No socket I/O.
//!
//! Order (stream protocol §1.7, §2.3, §7.8):
//!
//! 1. header sanity (`client != 0`) and routing (unknown code or internal operation:
//!    `InvalidCommand`);
//! 2. the legacy login codes 38/44: eviction `MalformedLogin`, before any session check;
//! 3. a non-zero `request_checksum` must match the body (`InvalidFormat`);
//! 4. Register (operation 1, or codes 40/45): the login handler;
//! 5. the login gate: a command that is not served before login, on a connection without a
//!    session: status `Unauthenticated` for reads, eviction `NoSession` for writes;
//! 6. decode the body (`InvalidCommand`);
//! 7. the session is still good (its user exists and is active, and a token session's token is
//!    still stored and unexpired; otherwise `Unauthenticated`), then resolve the stream, topic
//!    and user the request names; a missing one is reported now, before the permission check,
//!    in the form each command uses (empty body or error);
//! 8. [`authorize`] with the command's table row: every command passes through it;
//! 9. the command's handler.

use bytes::Bytes;
use eddy_auth::credentials::{normalize_status, token_session_valid, STATUS_ACTIVE};
use eddy_auth::permissions::{authorize, Caller, Resource, ROOT_USER_ID};
use eddy_auth::sessions::{ClientId, Credential};
use eddy_codec::stream::{route, v0_12, CommandCode, Permissions, Request, Route};
use eddy_stream_store::MetadataState;
use eddy_wire::stream::version::Revision;
use eddy_wire::stream::{
    request_checksum, EvictionHeader, EvictionReason, Operation, RequestHeader,
};

use super::handler::{Ctx, Outcome};
use super::{
    catalog, changes, consumer_groups, login, messages, metric_index, system, update_resource,
    users, views, StreamState, INVALID_METRIC,
};
use eddy_replicated::stream::error::{Missing, StreamError};

/// Handles one request. Returns the metrics index of the command and the outcome.
/// The metrics index of a request, from its header alone (a refused frame's).
pub(crate) fn metric_of(header: &RequestHeader) -> usize {
    match route(header) {
        Ok(Route::Register) => metric_index(CommandCode::LoginRegister),
        Ok(Route::Command(code)) => metric_index(code),
        Err(_) => INVALID_METRIC,
    }
}

pub(crate) async fn handle(
    state: &StreamState,
    client_id: ClientId,
    header: &RequestHeader,
    body: Bytes,
) -> (usize, Result<Outcome, StreamError>) {
    if header.client == 0 {
        return (
            INVALID_METRIC,
            Err(StreamError::Decode(
                eddy_codec::stream::CodecError::InvalidValue {
                    field: "client",
                    offset: 128,
                    reason: "must be non-zero",
                },
            )),
        );
    }
    let code = match route(header) {
        Ok(Route::Register) => {
            // A 0.12.2 client stamps a random request identifier there, not the body's XXH3.
            if !register_is_v0_12(&body) && !checksum_matches(header, &body) {
                return (
                    metric_index(CommandCode::LoginRegister),
                    Err(StreamError::RequestChecksum),
                );
            }
            let (code, outcome) = login::register(state, client_id, header, &body).await;
            return (metric_index(code), outcome);
        }
        Ok(Route::Command(code)) => code,
        Err(e) => return (INVALID_METRIC, Err(e.into())),
    };
    (
        metric_index(code),
        handle_command(state, client_id, header, code, body).await,
    )
}

async fn handle_command(
    state: &StreamState,
    client_id: ClientId,
    header: &RequestHeader,
    code: CommandCode,
    body: Bytes,
) -> Result<Outcome, StreamError> {
    let spec = code.spec();
    if spec.permission == eddy_codec::stream::RequiredPermission::Rejected {
        return Ok(Outcome::Evict(Box::new(EvictionHeader::new(
            header.client,
            EvictionReason::MalformedLogin,
        ))));
    }
    if matches!(
        code,
        CommandCode::LoginRegister | CommandCode::LoginRegisterWithPat
    ) {
        return login::register(state, client_id, header, &body).await.1;
    }
    let operation = header.operation().unwrap_or(Operation::NonReplicated);
    let session = state.clients.session(client_id);
    let revision = session
        .and_then(|s| Revision::of(s.protocol_version))
        .unwrap_or_default();
    // A 0.12.2 client's `request_checksum` is a random identifier of the logical request.
    if !revision.is_v0_12() && !checksum_matches(header, &body) {
        return Err(StreamError::RequestChecksum);
    }
    let user_id = match session {
        Some(session) => session.user_id,
        None if spec.pre_auth => u32::MAX,
        None if operation == Operation::NonReplicated => return Err(StreamError::Unauthenticated),
        None => {
            return Ok(Outcome::Evict(Box::new(EvictionHeader::new(
                header.client,
                EvictionReason::NoSession,
            ))))
        }
    };
    let mut request = Request::decode(code, &body)?;
    // The request holds what it needs; releasing the frame lets a send stamp its batch in place.
    drop(body);
    // The 0.12.2 option patch runs as the command it patches: its resolution, its permission.
    let code = match request {
        Request::UpdateResource(patch) => {
            request = state.read(|meta| update_resource::legacy(meta, patch))?;
            request.code()
        }
        _ => code,
    };
    let ctx = Ctx {
        state,
        client_id,
        user_id,
    };
    if spec.pre_auth {
        // Ping and logout: no resource, nothing to resolve; authorised like every command.
        let caller = Caller {
            user_id,
            permissions: None,
        };
        authorize(&caller, code, &Resource::default())?;
        return run(ctx, request, Resource::default()).await;
    }
    confirm_current(state, operation, code).await?;
    let credential = session.map_or(Credential::Password, |s| s.credential);
    let now = crate::clock::now_micros();
    let checked = state.read(|meta| {
        let permissions =
            caller_permissions(meta, user_id, credential, now).map_err(Refused::Session)?;
        let resource = resolve(&request, meta).map_err(Refused::Missing)?;
        Ok((resource, permissions))
    });
    let (resource, permissions) = match checked {
        Ok(found) => found,
        Err(refused) => return answer_refused(state, client_id, user_id, code, refused),
    };
    let caller = Caller {
        user_id,
        permissions: permissions.as_ref(),
    };
    authorize(&caller, code, &resource)?;
    let outcome = if revision.is_v0_12() && code == CommandCode::GetClusterMetadata {
        system::this_member_alone(ctx)
    } else {
        run(ctx, request, resource).await?
    };
    if revision.is_v0_12() {
        return Ok(match outcome {
            Outcome::Reply(payload) => Outcome::Reply(v0_12::reply(
                code,
                payload,
                v0_12::Serving { replica_id: 0 },
            )?),
            other @ (Outcome::Evict(_) | Outcome::NoReply) => other,
        });
    }
    Ok(outcome)
}

/// On a cluster member, waits until this member's metadata is confirmed current where the
/// request needs it (see within).
async fn confirm_current(
    state: &StreamState,
    operation: Operation,
    code: CommandCode,
) -> Result<(), StreamError> {
    if let Some(cluster) = &state.cluster {
        // A read on a cluster member is linearizable: served only once this member applied
        // every metadata change acknowledged before it arrived (permissions included), as
        // its leader and a quorum confirm; a member that cannot confirm answers
        // TransientNotAccepted instead of stale data. A write is ordered by its own
        // proposal; one that arrives on a member which does not lead the metadata group is
        // resolved and authorised against confirmed-current metadata too (a stream created
        // through another member is found, a revoked permission is not used), then forwarded
        // to the leader. The cluster's member list answers from what this member knows (its
        // leader only once confirmed): the SDK probes it to find the leader.
        let read = operation == Operation::NonReplicated
            && !matches!(
                code,
                CommandCode::GetClusterMetadata | CommandCode::GetClusterStatus
            );
        let forwarded_write =
            operation != Operation::NonReplicated && !cluster.is_metadata_leader();
        if read || forwarded_write {
            cluster.linearize_metadata().await?;
        }
    }
    Ok(())
}

/// The answer to a request `refused` before its permission check: a missing resource as
/// [`when_missing`] says; an ended session (its user gone or inactive, or its token gone or
/// expired) is ended here and the request refused as unauthenticated.
fn answer_refused(
    state: &StreamState,
    client_id: ClientId,
    user_id: u32,
    code: CommandCode,
    refused: Refused,
) -> Result<Outcome, StreamError> {
    match refused {
        Refused::Missing(missing) => when_missing(code, missing),
        Refused::Session(SessionEnded::User) => {
            // The user was deleted or deactivated since it logged in.
            state.end_sessions_of(user_id);
            Err(StreamError::Unauthenticated)
        }
        Refused::Session(SessionEnded::Token) => {
            // The token this session logged in with was deleted or has expired.
            if state.clients.logout(client_id).is_some() {
                state.leave_all_groups(client_id);
            }
            Err(StreamError::Unauthenticated)
        }
    }
}

/// A non-zero `request_checksum` on an operation that carries one must be the XXH3 of the body
/// (zero means unstamped).
fn checksum_matches(header: &RequestHeader, body: &[u8]) -> bool {
    let carries = header
        .operation()
        .is_ok_and(Operation::carries_request_checksum);
    !carries || header.request_checksum == 0 || header.request_checksum == request_checksum(body)
}

/// Whether a Register body carries a 0.12.2 version prefix.
fn register_is_v0_12(body: &[u8]) -> bool {
    body.get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .and_then(Revision::of)
        .is_some_and(Revision::is_v0_12)
}

/// Why a session cannot go on.
#[derive(Debug, Clone, Copy)]
enum SessionEnded {
    /// Its user was deleted or deactivated: every session of the user ends.
    User,
    /// Its token was deleted or has expired: this session ends.
    Token,
}

/// Why a request stops before its permission check.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// The session cannot go on.
    Session(SessionEnded),
    /// The stream, topic or user it names does not exist.
    Missing(Missing),
}

/// The caller's permissions; `Err` if the user no longer exists or is inactive, or if the
/// session's token is no longer stored or has expired at `now_us`.
fn caller_permissions(
    meta: &MetadataState,
    user_id: u32,
    credential: Credential,
    now_us: u64,
) -> Result<Option<Permissions>, SessionEnded> {
    let user = meta.users.get(&user_id).ok_or(SessionEnded::User)?;
    if normalize_status(user.status) != STATUS_ACTIVE {
        return Err(SessionEnded::User);
    }
    if let Credential::Token(digest) = credential {
        let tokens = user
            .tokens
            .values()
            .map(|t| (t.token_hash.as_str(), t.expiry_at));
        if !token_session_valid(&digest, tokens, now_us) {
            return Err(SessionEnded::Token);
        }
    }
    if user_id == ROOT_USER_ID {
        return Ok(None);
    }
    Ok(user
        .permissions
        .as_deref()
        .and_then(views::decode_permissions))
}

/// The numeric ids of the stream, topic and user a request names.
fn resolve(request: &Request, meta: &MetadataState) -> Result<Resource, Missing> {
    let mut resource = Resource::default();
    let (stream, topic) = request.target();
    if let Some(stream) = stream {
        let id = views::stream_id(meta, stream).ok_or(Missing::Stream)?;
        resource.stream_id = Some(id);
        if let Some(topic) = topic {
            resource.topic_id = Some(views::topic_id(meta, id, topic).ok_or(Missing::Topic)?);
        }
    }
    let user = match request {
        Request::GetUser(r) => Some(&r.user_id),
        Request::DeleteUser(r) => Some(&r.user_id),
        Request::UpdateUser(r) => Some(&r.user_id),
        Request::UpdatePermissions(r) => Some(&r.user_id),
        Request::ChangePassword(r) => Some(&r.user_id),
        _ => None,
    };
    if let Some(user) = user {
        resource.user_id = Some(views::user_id(meta, user).ok_or(Missing::User)?);
    }
    Ok(resource)
}

/// How each command reports a missing stream, topic or user (stream protocol §5.0.3).
fn when_missing(code: CommandCode, missing: Missing) -> Result<Outcome, StreamError> {
    match code {
        // Single-object reads: empty body (the SDK's `None`).
        CommandCode::GetStream
        | CommandCode::GetTopic
        | CommandCode::GetUser
        | CommandCode::GetConsumerOffset
        | CommandCode::SyncConsumerGroup => Ok(Outcome::empty()),
        // A missing stream lists no topics.
        CommandCode::GetTopics => Ok(Outcome::payload(
            &eddy_codec::stream::commands::get_topics::TopicList(Vec::new()),
        )),
        _ => Err(StreamError::NotFound(missing)),
    }
}

/// Calls the command's handler.
async fn run(ctx: Ctx<'_>, request: Request, on: Resource) -> Result<Outcome, StreamError> {
    let stream = on.stream_id.unwrap_or_default();
    let topic = on.topic_id.unwrap_or_default();
    let user = on.user_id.unwrap_or_default();
    match request {
        Request::Ping(_) => Ok(Outcome::empty()),
        Request::GetStats(_) => Ok(system::get_stats(ctx)),
        Request::GetSnapshot(r) => system::snapshot(ctx, r).await,
        Request::GetClusterMetadata(_) => Ok(system::cluster_metadata(ctx).await),
        Request::GetClusterStatus(_) => Ok(system::cluster_status(ctx).await),
        Request::AddClusterMember(r) => system::change_members(ctx, Some(r), None).await,
        Request::RemoveClusterMember(r) => system::change_members(ctx, None, Some(r)).await,
        Request::DescribeOptions(r) => Ok(system::describe_options(r)),
        Request::GetMe(_) => system::get_client(ctx, ctx.client_id),
        Request::GetMetadataChanges(r) => changes::get_metadata_changes(ctx, &r),
        // The connection cancels a waiting request itself; one that reaches here found none.
        Request::CancelDeferredRequest(_) => Ok(Outcome::NoReply),
        Request::GetClient(r) => {
            system::get_client(ctx, r.client_id).or_else(|_| Ok(Outcome::empty()))
        }
        Request::GetClients(_) => Ok(system::get_clients(ctx)),
        Request::GetUser(_) => Ok(users::get_user(ctx, user)),
        Request::GetUsers(_) => Ok(users::get_users(ctx)),
        Request::CreateUser(r) => users::create_user(ctx, r).await,
        Request::DeleteUser(_) => users::delete_user(ctx, user).await,
        Request::UpdateUser(r) => users::update_user(ctx, user, r).await,
        Request::UpdatePermissions(r) => users::update_permissions(ctx, user, r).await,
        Request::ChangePassword(r) => users::change_password(ctx, user, r).await,
        Request::LogoutUser(_) => Ok(login::logout(ctx)),
        Request::GetPersonalAccessTokens(_) => Ok(users::get_tokens(ctx)),
        Request::CreatePersonalAccessToken(r) => users::create_token(ctx, r).await,
        Request::DeletePersonalAccessToken(r) => users::delete_token(ctx, r).await,
        Request::PollMessages(r) => messages::poll(ctx, stream, topic, r).await,
        Request::PollMessagesDeferred(r) => messages::poll_deferred(ctx, stream, topic, r).await,
        Request::FetchMessages(r) => messages::fetch(ctx, stream, topic, r).await,
        Request::GetPartitionRoute(r) => {
            catalog::partition_route(ctx, stream, topic, r.partition_id)
        }
        Request::SendMessages(r) => messages::send(ctx, stream, topic, r).await,
        Request::FlushUnsavedBuffer(_) => Err(StreamError::Unavailable {
            command: CommandCode::FlushUnsavedBuffer,
        }),
        Request::GetConsumerOffset(r) => messages::get_offset(ctx, stream, topic, &r).await,
        Request::StoreConsumerOffset(r) => messages::store_offset(ctx, stream, topic, r).await,
        Request::DeleteConsumerOffset(r) => messages::delete_offset(ctx, stream, topic, r).await,
        Request::GetStream(_) => Ok(catalog::get_stream(ctx, stream).await),
        Request::GetStreams(_) => Ok(catalog::get_streams(ctx).await),
        Request::CreateStream(r) => catalog::create_stream(ctx, r).await,
        Request::DeleteStream(_) => catalog::delete_stream(ctx, stream).await,
        Request::UpdateStream(r) => catalog::update_stream(ctx, stream, r).await,
        Request::PurgeStream(_) => catalog::purge_stream(ctx, stream).await,
        Request::GetTopic(_) => Ok(catalog::get_topic(ctx, stream, topic).await),
        Request::GetTopics(_) => Ok(catalog::get_topics(ctx, stream).await),
        Request::CreateTopic(r) => catalog::create_topic(ctx, stream, r).await,
        Request::DeleteTopic(_) => catalog::delete_topic(ctx, stream, topic).await,
        Request::UpdateTopic(r) => catalog::update_topic(ctx, stream, topic, r).await,
        Request::PurgeTopic(_) => catalog::purge_topic(ctx, stream, topic).await,
        Request::CreatePartitions(r) => {
            catalog::create_partitions(ctx, stream, topic, r.partitions_count).await
        }
        Request::DeletePartitions(r) => {
            catalog::delete_partitions(ctx, stream, topic, r.partitions_count).await
        }
        Request::DeleteSegments(r) => catalog::delete_segments(ctx, stream, topic, &r).await,
        Request::GetConsumerGroup(r) => Ok(consumer_groups::get(ctx, stream, topic, &r.group_id)),
        Request::GetConsumerGroups(_) => Ok(consumer_groups::list(ctx, stream, topic)),
        Request::CreateConsumerGroup(r) => consumer_groups::create(ctx, stream, topic, r).await,
        Request::DeleteConsumerGroup(r) => {
            consumer_groups::delete(ctx, stream, topic, &r.group_id).await
        }
        Request::JoinConsumerGroup(r) => consumer_groups::join(ctx, stream, topic, &r.group_id),
        Request::LeaveConsumerGroup(r) => consumer_groups::leave(ctx, stream, topic, &r.group_id),
        Request::SyncConsumerGroup(r) => Ok(consumer_groups::sync(ctx, stream, topic, &r.group_id)),
        // Login codes and the legacy codes never reach here (handled before decoding).
        other => Err(StreamError::Unavailable {
            command: other.code(),
        }),
    }
}
