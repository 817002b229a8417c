//! `GET_METADATA_CHANGES` (17, 0.12.2 wire): a page of the node's metadata change journal
//! ([`eddy_stream_store::changes`]) or of its current state, for the global `manage_servers`
//! permission (root has it).
//!
//! * `after` a cursor: the records after it. A cursor of another history is `reset`, one past
//!   the head `behind` (echoed back), one before what the journal holds `expired` (the client
//!   rebuilds from `current`).
//! * `earliest`: the records after the oldest position held; `latest`: none, and the cursor
//!   of the newest record.
//! * `current`: the state's items, group by group in key order; the page token anchors the
//!   scan at the newest record, and a scan whose anchor moved (a change since it started) is
//!   `expired` (it starts again). Its last page's `next` continues with the changes after the
//!   anchor.
//!
//! A page holds at most `limit` records or items and about [`PAGE_BYTES`] of bodies.
//! Consumer group members and sessions (groups 5 and 8) live outside eddy's metadata log, so
//! they have no records and no items; see decision 0025.

use eddy_codec::stream::commands::get_metadata_changes::{
    group, phase, status, ChangeBody, ChangeRecord, Cursor, GetMetadataChanges, Item, ItemBody,
    MetadataChangesPage, PageToken, Start, StreamKey, TopicKey, UserKey,
};
use eddy_codec::stream::CodecError;
use eddy_options::OptionsBlock;
use eddy_stream_store::changes::{Change, ChangeJournal, TopicRef};
use eddy_stream_store::{MetadataState, TopicConfig};

use super::handler::{Ctx, Outcome};
use super::views;
use eddy_replicated::stream::error::StreamError;

/// Body bytes a page stops after (at least one record or item is always served).
pub const PAGE_BYTES: usize = 1 << 20;

/// Serves one request.
pub(crate) fn get_metadata_changes(
    ctx: Ctx<'_>,
    request: &GetMetadataChanges,
) -> Result<Outcome, StreamError> {
    let mask = request.groups_mask().map_err(|reason| {
        StreamError::Decode(CodecError::InvalidValue {
            field: "metadata changes request",
            offset: 0,
            reason,
        })
    })?;
    // On a cluster member: this member's journal of the metadata group (positions are Raft
    // indexes; the read was linearized by dispatch, so it holds every change acknowledged
    // before the request).
    let page = match &ctx.state.cluster {
        Some(cluster) => cluster.read_changes(|journal, state| page(journal, state, request, mask)),
        None => ctx
            .state
            .store
            .read_changes(|journal, state| page(journal, state, request, mask)),
    };
    Ok(Outcome::payload(&page))
}

/// The answer to `request` (groups `mask`) from `journal` and the `state` it describes.
pub fn page(
    journal: &ChangeJournal,
    state: &MetadataState,
    request: &GetMetadataChanges,
    mask: u8,
) -> MetadataChangesPage {
    let head = journal.head();
    let log_id = journal.log_id();
    let base = journal.base();
    let newest = newest_cursor(journal);
    let mut answer = MetadataChangesPage {
        status: status::OK,
        phase: phase::CHANGES,
        log_id: (head > 0).then_some(log_id),
        oldest_op: if head > base { base + 1 } else { head },
        retained_since: journal.retained_since(),
        head_op: head,
        next: None,
        has_more: false,
        records: Vec::new(),
        items: Vec::new(),
        token: None,
    };
    match &request.start {
        Start::Latest => answer.next = Some(newest),
        Start::Earliest => {
            let (_, last) = journal.base_mark();
            changes_after(journal, request, mask, (base, last), &mut answer);
        }
        Start::After(cursor) => match check(journal, cursor) {
            Ok(()) => changes_after(
                journal,
                request,
                mask,
                (cursor.op, cursor.ordinal),
                &mut answer,
            ),
            Err(code) => {
                answer.status = code;
                if code == status::BEHIND {
                    answer.next = Some(*cursor);
                }
            }
        },
        Start::Current(token) => {
            answer.phase = phase::CURRENT;
            let after = match token {
                None => None,
                Some(token) if token.anchor == newest && token.required_head == newest.op => {
                    Some((token.group, token.last_key.clone()))
                }
                Some(_) => {
                    answer.status = status::EXPIRED;
                    return answer;
                }
            };
            current(
                state,
                request.limit,
                mask,
                after.as_ref(),
                newest,
                &mut answer,
            );
        }
    }
    answer
}

/// The cursor of the newest record held (of the journal's base when it holds none).
fn newest_cursor(journal: &ChangeJournal) -> Cursor {
    let log_id = journal.log_id();
    if let Some(entry) = journal.entries().back() {
        Cursor {
            log_id,
            op: entry.op,
            checksum: entry.checksum,
            ordinal: u32::try_from(entry.changes.len() - 1).unwrap_or(0),
        }
    } else {
        let (checksum, ordinal) = journal.base_mark();
        Cursor {
            log_id,
            op: journal.base(),
            checksum,
            ordinal,
        }
    }
}

/// Whether `cursor` names a position of this journal from which every record is held: the
/// status code of the answer otherwise.
fn check(journal: &ChangeJournal, cursor: &Cursor) -> Result<(), u8> {
    if cursor.log_id != journal.log_id() {
        return Err(status::RESET);
    }
    if cursor.op > journal.head() {
        return Err(status::BEHIND);
    }
    let base = journal.base();
    if cursor.op < base {
        return Err(status::EXPIRED);
    }
    if cursor.op == base {
        let (checksum, last) = journal.base_mark();
        return if cursor.checksum != checksum {
            Err(status::RESET)
        } else if cursor.ordinal < last {
            Err(status::EXPIRED)
        } else if cursor.ordinal > last {
            Err(status::RESET)
        } else {
            Ok(())
        };
    }
    let entries = journal.entries();
    let at = entries.partition_point(|e| e.op < cursor.op);
    match entries.get(at) {
        Some(entry)
            if entry.op == cursor.op
                && entry.checksum == cursor.checksum
                && (cursor.ordinal as usize) < entry.changes.len() =>
        {
            Ok(())
        }
        _ => Err(status::RESET),
    }
}

/// Fills `answer` with the records after `(op, ordinal)`.
fn changes_after(
    journal: &ChangeJournal,
    request: &GetMetadataChanges,
    mask: u8,
    from: (u64, u32),
    answer: &mut MetadataChangesPage,
) {
    let log_id = journal.log_id();
    let limit = request.limit as usize;
    let mut bytes = 0usize;
    let mut last: Option<Cursor> = None;
    let entries = journal.entries();
    let start = entries.partition_point(|e| e.op < from.0);
    'entries: for entry in entries.range(start..) {
        for (index, change) in entry.changes.iter().enumerate() {
            let ordinal = u32::try_from(index).unwrap_or(u32::MAX);
            if (entry.op, ordinal) <= from {
                continue;
            }
            if request.until.is_some_and(|until| entry.timestamp > until) {
                break 'entries;
            }
            let (group_code, kind, body) = change_body(change).encode();
            let wanted = mask & group::bit(group_code) != 0
                && request.since.is_none_or(|since| entry.timestamp >= since);
            if wanted {
                if answer.records.len() >= limit
                    || (bytes >= PAGE_BYTES && !answer.records.is_empty())
                {
                    answer.has_more = true;
                    break 'entries;
                }
                bytes += body.len();
                answer.records.push(ChangeRecord {
                    op: entry.op,
                    ordinal,
                    checksum: entry.checksum,
                    timestamp: entry.timestamp,
                    actor_user_id: None,
                    group: group_code,
                    kind,
                    body,
                });
            }
            last = Some(Cursor {
                log_id,
                op: entry.op,
                checksum: entry.checksum,
                ordinal,
            });
        }
    }
    answer.next = Some(last.unwrap_or_else(|| {
        if from.0 == journal.base() {
            let (checksum, _) = journal.base_mark();
            Cursor {
                log_id,
                op: from.0,
                checksum,
                ordinal: from.1,
            }
        } else {
            let entry = &entries[start];
            Cursor {
                log_id,
                op: entry.op,
                checksum: entry.checksum,
                ordinal: from.1,
            }
        }
    }));
}

fn stream_key(id: u32, created_at: u64) -> StreamKey {
    StreamKey {
        id,
        created: created_at,
    }
}

fn topic_key(topic: &TopicRef) -> TopicKey {
    TopicKey {
        stream: stream_key(topic.stream_id, topic.stream_created_at),
        id: topic.topic_id,
        created: topic.topic_created_at,
    }
}

fn user_key(id: u32, created_at: u64) -> UserKey {
    UserKey { id, created_at }
}

/// A topic's explicit block and the derived block the 0.12.2 topic replies carry.
fn topic_blocks(explicit: &[u8], config: &TopicConfig) -> (OptionsBlock, OptionsBlock) {
    let options = views::explicit_options_of(explicit);
    let settings = options.resolve(&views::settings_of(config));
    (
        OptionsBlock::from_slice(explicit).unwrap_or_default(),
        options.derived_block(&settings),
    )
}

/// Streams and users carry no option eddy serves: their blocks are empty, as in their replies.
const EMPTY: Option<(&[u8], &[u8])> = Some((&[], &[]));

fn change_body(change: &Change) -> Owned {
    Owned(change.clone())
}

/// A change with the blocks its body borrows.
struct Owned(Change);

impl Owned {
    fn encode(&self) -> (u8, u8, Vec<u8>) {
        match &self.0 {
            Change::Stream { .. }
            | Change::StreamDeleted { .. }
            | Change::Topic { .. }
            | Change::TopicDeleted { .. }
            | Change::Partitions { .. }
            | Change::GroupCreated { .. }
            | Change::GroupDeleted { .. } => self.encode_catalog(),
            Change::User { .. }
            | Change::UserDeleted { .. }
            | Change::PasswordChanged { .. }
            | Change::PermissionsChanged { .. }
            | Change::TokenCreated { .. }
            | Change::TokenDeleted { .. } => self.encode_account(),
        }
    }

    /// [`Self::encode`] for a change to a stream, a topic, its partitions or a consumer group.
    fn encode_catalog(&self) -> (u8, u8, Vec<u8>) {
        match &self.0 {
            Change::Stream {
                created,
                id,
                created_at,
                name,
                ..
            } => ChangeBody::Stream {
                created: *created,
                key: stream_key(*id, *created_at),
                created_at: *created_at,
                name,
                options: EMPTY,
            }
            .encode(),
            Change::StreamDeleted {
                id,
                created_at,
                name,
            } => ChangeBody::StreamDeleted {
                key: stream_key(*id, *created_at),
                created_at: *created_at,
                name,
            }
            .encode(),
            Change::Topic {
                created,
                topic,
                name,
                partitions,
                config,
                explicit_options,
            } => {
                let (explicit, derived) = topic_blocks(explicit_options, config);
                ChangeBody::Topic {
                    created: *created,
                    key: topic_key(topic),
                    created_at: topic.topic_created_at,
                    name,
                    partitions_count: *partitions,
                    options: Some((explicit.as_bytes(), derived.as_bytes())),
                }
                .encode()
            }
            Change::TopicDeleted { topic, name } => ChangeBody::TopicDeleted {
                key: topic_key(topic),
                created_at: topic.topic_created_at,
                name,
            }
            .encode(),
            Change::Partitions {
                topic,
                count,
                removed,
            } => ChangeBody::PartitionsChanged {
                topic: topic_key(topic),
                partitions_count: *count,
                removed,
            }
            .encode(),
            Change::GroupCreated {
                topic,
                id,
                name,
                count,
            } => ChangeBody::ConsumerGroupCreated {
                topic: topic_key(topic),
                group_id: *id,
                name,
                groups_count: *count,
            }
            .encode(),
            Change::GroupDeleted {
                topic,
                id,
                name,
                count,
            } => ChangeBody::ConsumerGroupDeleted {
                topic: topic_key(topic),
                group_id: *id,
                name,
                groups_count: *count,
            }
            .encode(),
            Change::User { .. }
            | Change::UserDeleted { .. }
            | Change::PasswordChanged { .. }
            | Change::PermissionsChanged { .. }
            | Change::TokenCreated { .. }
            | Change::TokenDeleted { .. } => {
                unreachable!("a user or token change is encoded by encode_account")
            }
        }
    }

    /// [`Self::encode`] for a change to a user or a personal access token.
    fn encode_account(&self) -> (u8, u8, Vec<u8>) {
        match &self.0 {
            Change::User {
                created,
                id,
                created_at,
                username,
                status,
                permissions,
                ..
            } => ChangeBody::User {
                created: *created,
                key: user_key(*id, *created_at),
                username,
                status: *status,
                permissions: permissions.as_deref(),
                options: EMPTY,
            }
            .encode(),
            Change::UserDeleted {
                id,
                created_at,
                username,
            } => ChangeBody::UserDeleted {
                key: user_key(*id, *created_at),
                username,
            }
            .encode(),
            Change::PasswordChanged {
                id,
                created_at,
                username,
            } => ChangeBody::UserPasswordChanged {
                key: user_key(*id, *created_at),
                username,
            }
            .encode(),
            Change::PermissionsChanged {
                id,
                created_at,
                username,
                permissions,
            } => ChangeBody::UserPermissionsUpdated {
                key: user_key(*id, *created_at),
                username,
                permissions: permissions.as_deref(),
            }
            .encode(),
            Change::TokenCreated {
                user_id,
                user_created_at,
                name,
                expiry_at,
            } => ChangeBody::TokenCreated {
                user: user_key(*user_id, *user_created_at),
                name,
                expiry: expiry_at.unwrap_or(0),
            }
            .encode(),
            Change::TokenDeleted {
                user_id,
                user_created_at,
                name,
            } => ChangeBody::TokenDeleted {
                user: user_key(*user_id, *user_created_at),
                name,
                expired: false,
            }
            .encode(),
            Change::Stream { .. }
            | Change::StreamDeleted { .. }
            | Change::Topic { .. }
            | Change::TopicDeleted { .. }
            | Change::Partitions { .. }
            | Change::GroupCreated { .. }
            | Change::GroupDeleted { .. } => {
                unreachable!("a catalog change is encoded by encode_catalog")
            }
        }
    }
}

/// An item's place in a scan: its group and key (the page token's form).
type Place = (u8, Vec<u8>);

fn le(parts: &[u32]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.to_le_bytes()).collect()
}

/// A comparable form of a key of `group_code` (the wire keys are little-endian ids).
fn order(group_code: u8, key: &[u8]) -> (Vec<u32>, Vec<u8>) {
    let ids = if group_code == group::PERSONAL_ACCESS_TOKENS {
        4
    } else {
        key.len()
    };
    let numbers = key[..ids.min(key.len())]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let rest = key.get(ids + 1..).unwrap_or_default().to_vec();
    (numbers, rest)
}

/// Fills `answer` with a page of `state`'s items after `after`.
fn current(
    state: &MetadataState,
    limit: u32,
    mask: u8,
    after: Option<&Place>,
    anchor: Cursor,
    answer: &mut MetadataChangesPage,
) {
    let mut page = ItemPage {
        items: Vec::new(),
        limit: limit as usize,
        bytes: 0,
        more: false,
        after: after.map(|(g, key)| (*g, order(*g, key))),
    };
    let wanted = |code: u8| mask & group::bit(code) != 0;
    if scan_catalog(state, &wanted, &mut page) {
        scan_accounts(state, &wanted, &mut page);
    }
    let ItemPage { items, more, .. } = page;
    answer.next = Some(anchor);
    answer.has_more = more;
    if more {
        if let Some(((group_code, last_key), _)) = items.last() {
            answer.token = Some(PageToken {
                anchor,
                required_head: anchor.op,
                groups_mask: mask,
                group: *group_code,
                last_key: last_key.clone(),
            });
        }
    }
    answer.items = items.into_iter().map(|(_, item)| item).collect();
}

/// A place in its comparable form: its group and [`order`] of its key.
type Ordered = (u8, (Vec<u32>, Vec<u8>));

/// A page of current-state items being filled, in scan order.
struct ItemPage {
    items: Vec<(Place, Item)>,
    /// At most this many items.
    limit: usize,
    /// The body bytes of `items`.
    bytes: usize,
    /// Whether an item did not fit.
    more: bool,
    /// The comparable form of the place the page starts after.
    after: Option<Ordered>,
}

impl ItemPage {
    /// Adds the item at `place` (skipped if at or before the page's start); false once the
    /// page is full: the scan stops, and there is more.
    fn push(&mut self, place: Place, body: (u8, Vec<u8>)) -> bool {
        if let Some(after) = &self.after {
            if (place.0, order(place.0, &place.1)) <= *after {
                return true;
            }
        }
        if self.items.len() >= self.limit || (self.bytes >= PAGE_BYTES && !self.items.is_empty()) {
            self.more = true;
            return false;
        }
        self.bytes += body.1.len();
        self.items.push((
            place,
            Item {
                group: body.0,
                body: body.1,
            },
        ));
        true
    }
}

/// Adds the `wanted` groups of streams, topics, partitions and consumer groups to `page`;
/// false once it is full.
fn scan_catalog(state: &MetadataState, wanted: &impl Fn(u8) -> bool, page: &mut ItemPage) -> bool {
    if wanted(group::STREAMS) {
        for s in state.streams.values() {
            let body = ItemBody::Stream {
                key: stream_key(s.id, s.created_at),
                created_at: s.created_at,
                name: &s.name,
                options: EMPTY,
            }
            .encode();
            if !page.push((group::STREAMS, le(&[s.id])), body) {
                return false;
            }
        }
    }
    let topics = || {
        state.streams.values().flat_map(|s| {
            s.topics.values().map(move |t| {
                (
                    TopicRef {
                        stream_id: s.id,
                        stream_created_at: s.created_at,
                        topic_id: t.id,
                        topic_created_at: t.created_at,
                    },
                    t,
                )
            })
        })
    };
    if wanted(group::TOPICS) {
        for (topic, t) in topics() {
            let (explicit, derived) = topic_blocks(&t.explicit_options, &t.config);
            let body = ItemBody::Topic {
                key: topic_key(&topic),
                created_at: t.created_at,
                name: &t.name,
                options: Some((explicit.as_bytes(), derived.as_bytes())),
            }
            .encode();
            if !page.push(
                (group::TOPICS, le(&[topic.stream_id, topic.topic_id])),
                body,
            ) {
                return false;
            }
        }
    }
    if wanted(group::PARTITIONS) {
        for (topic, t) in topics() {
            let body = ItemBody::Partitions {
                topic: topic_key(&topic),
                partitions_count: u32::try_from(t.partitions.len()).unwrap_or(u32::MAX),
            }
            .encode();
            if !page.push(
                (group::PARTITIONS, le(&[topic.stream_id, topic.topic_id])),
                body,
            ) {
                return false;
            }
        }
    }
    if wanted(group::CONSUMER_GROUPS) {
        for (topic, t) in topics() {
            for g in t.groups.values() {
                let body = ItemBody::ConsumerGroup {
                    topic: topic_key(&topic),
                    group_id: g.id,
                    name: &g.name,
                }
                .encode();
                let key = le(&[topic.stream_id, topic.topic_id, g.id]);
                if !page.push((group::CONSUMER_GROUPS, key), body) {
                    return false;
                }
            }
        }
    }
    true
}

/// Adds the `wanted` groups of users and personal access tokens to `page`, until it is full.
fn scan_accounts(state: &MetadataState, wanted: &impl Fn(u8) -> bool, page: &mut ItemPage) {
    if wanted(group::USERS) {
        for u in state.users.values() {
            let body = ItemBody::User {
                key: user_key(u.id, u.created_at),
                username: &u.username,
                status: u.status,
                permissions: u.permissions.as_deref(),
                options: EMPTY,
            }
            .encode();
            if !page.push((group::USERS, le(&[u.id])), body) {
                return;
            }
        }
    }
    if wanted(group::PERSONAL_ACCESS_TOKENS) {
        for u in state.users.values() {
            for token in u.tokens.values() {
                let body = ItemBody::Token {
                    user: user_key(u.id, u.created_at),
                    name: &token.name,
                    expiry: token.expiry_at.unwrap_or(0),
                }
                .encode();
                let mut key = le(&[u.id]);
                let name = &token.name.as_bytes()[..token.name.len().min(255)];
                key.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
                key.extend_from_slice(name);
                if !page.push((group::PERSONAL_ACCESS_TOKENS, key), body) {
                    return;
                }
            }
        }
    }
}
