//! `GET_METADATA_CHANGES` (code 17) of the 0.12.2 wire: one page of the node's metadata change
//! log, or of the current state to rebuild from. Only the 0.12.2 wire has it.
//!
//! ```text
//! request  [start: u8]                                 0 earliest, 1 latest, 2 after, 3 current
//!          [cursor: 44]                                all zero unless start = 2
//!          [has_since: u8][since: u64 if 1]
//!          [has_until: u8][until: u64 if 1]
//!          [limit: u32]
//!          [groups_count: u8][group: u8]*              none = every group
//!          [token_len: u16][token]                     0 unless start = 3 with a token
//! cursor   [log_id: u128][op: u64][checksum: u128][ordinal: u32]   op 0: checksum, ordinal 0
//! token    [anchor: cursor][required_head: u64][groups_mask: u8][group: u8]
//!          [key_len: u16][last_key]                    the key's width is the group's
//! reply    [status: u8][phase: u8][has_log_id: u8][log_id: u128 if 1]
//!          [oldest_op: u64][retained_since: u64][head_op: u64]
//!          [has_next: u8][cursor if 1][has_more: u8]
//!          [records_count: u32][record]*  [items_count: u32][item]*  [token_len: u16][token]
//! record   [op: u64][ordinal: u32][checksum: u128][timestamp: u64]
//!          [has_actor: u8][actor_user_id: u32 if 1][group: u8][kind: u8][body_len: u32][body]
//! item     [group: u8][body_len: u32][body]
//! ```
//!
//! The decoder enforces the structure (flags are 0 or 1, a cursor only with `after`, a token
//! only with `current`, a canonical cursor, a valid token, no trailing bytes);
//! [`GetMetadataChanges::groups_mask`] checks what the server checks (the limit, the groups,
//! the time bounds). Record and item bodies are built by [`ChangeBody`] and [`ItemBody`].

use crate::stream::codec::{Reader, WireDecode, WireEncode};
use crate::stream::error::CodecError;

/// Largest page a request may ask for.
pub const MAX_LIMIT: u32 = 1000;
/// Encoded size of a cursor.
pub const CURSOR_LEN: usize = 44;
/// Longest page-token key: a user id and a token name.
pub const MAX_TOKEN_KEY: usize = 4 + 1 + 255;

/// Group codes, in catalog order (1 to 8).
pub mod group {
    /// Streams.
    pub const STREAMS: u8 = 1;
    /// Topics.
    pub const TOPICS: u8 = 2;
    /// Partition counts.
    pub const PARTITIONS: u8 = 3;
    /// Consumer groups.
    pub const CONSUMER_GROUPS: u8 = 4;
    /// Consumer group members.
    pub const CONSUMER_GROUP_MEMBERS: u8 = 5;
    /// Users.
    pub const USERS: u8 = 6;
    /// Personal access tokens.
    pub const PERSONAL_ACCESS_TOKENS: u8 = 7;
    /// Sessions.
    pub const SESSIONS: u8 = 8;
    /// Every group's bit.
    pub const ALL: u8 = u8::MAX;

    /// The bit of `group` in a group mask (`group` is 1 to 8).
    #[must_use]
    pub const fn bit(group: u8) -> u8 {
        1 << (group - 1)
    }
}

/// Answer status codes.
pub mod status {
    /// Records or items after the position.
    pub const OK: u8 = 0;
    /// The node has not applied the position yet.
    pub const BEHIND: u8 = 1;
    /// The node no longer holds every record after the position.
    pub const EXPIRED: u8 = 2;
    /// The position belongs to another history.
    pub const RESET: u8 = 3;
}

/// Answer phase codes.
pub mod phase {
    /// Change records.
    pub const CHANGES: u8 = 0;
    /// Current state items.
    pub const CURRENT: u8 = 1;
}

/// A position in a change log: the record `(op, ordinal)` of the history `log_id`, whose
/// operation has `checksum`. Op 0 is the start of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cursor {
    /// The history.
    pub log_id: u128,
    /// The operation (0: before the first).
    pub op: u64,
    /// The operation's checksum (0 at op 0).
    pub checksum: u128,
    /// The record within the operation (0 at op 0).
    pub ordinal: u32,
}

impl Cursor {
    /// Whether op 0 carries no checksum and no ordinal.
    #[must_use]
    pub const fn is_canonical(&self) -> bool {
        self.op != 0 || (self.checksum == 0 && self.ordinal == 0)
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.log_id.to_le_bytes());
        out.extend_from_slice(&self.op.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        out.extend_from_slice(&self.ordinal.to_le_bytes());
    }

    fn take(reader: &mut Reader<'_>) -> Result<Self, CodecError> {
        let offset = reader.position();
        let cursor = Self {
            log_id: reader.u128("cursor log_id")?,
            op: reader.u64("cursor op")?,
            checksum: reader.u128("cursor checksum")?,
            ordinal: reader.u32("cursor ordinal")?,
        };
        if !cursor.is_canonical() {
            return Err(CodecError::InvalidValue {
                field: "cursor",
                offset,
                reason: "a cursor at op 0 carries no checksum and no ordinal",
            });
        }
        Ok(cursor)
    }
}

/// Where a current-state scan continues: after `last_key` of `group`, for the groups of
/// `groups_mask`, as of the log position `anchor` (the scan is valid while the node's head is
/// `required_head`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageToken {
    /// The log position the scan started at.
    pub anchor: Cursor,
    /// The head the scan needs unchanged.
    pub required_head: u64,
    /// The groups scanned.
    pub groups_mask: u8,
    /// The group the last page ended in.
    pub group: u8,
    /// The key of the last item of that page (its width is the group's).
    pub last_key: Vec<u8>,
}

impl PageToken {
    const FIXED: usize = CURSOR_LEN + 8 + 1 + 1 + 2;

    fn encoded_len(&self) -> usize {
        Self::FIXED + self.last_key.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        self.anchor.put(out);
        out.extend_from_slice(&self.required_head.to_le_bytes());
        out.push(self.groups_mask);
        out.push(self.group);
        // Validated keys are at most `MAX_TOKEN_KEY` bytes.
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(self.last_key.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.last_key);
    }

    /// Reads a token filling all of `reader`'s bytes and checks its rules.
    fn take(reader: &mut Reader<'_>) -> Result<Self, CodecError> {
        let offset = reader.position();
        let anchor = Cursor::take(reader)?;
        let required_head = reader.u64("token required_head")?;
        let groups_mask = reader.u8("token groups_mask")?;
        let group = reader.u8("token group")?;
        let key_len = usize::from(reader.u16("token key length")?);
        if key_len > MAX_TOKEN_KEY {
            return Err(CodecError::InvalidValue {
                field: "token key",
                offset,
                reason: "longer than a user id and a token name",
            });
        }
        let last_key = reader.bytes(key_len, "token key")?.to_vec();
        let token = Self {
            anchor,
            required_head,
            groups_mask,
            group,
            last_key,
        };
        token.check().map_err(|reason| CodecError::InvalidValue {
            field: "page token",
            offset,
            reason,
        })?;
        Ok(token)
    }

    /// The token's own rules: a known group in its mask, a head at or above the anchor, and a
    /// key of the group's width.
    fn check(&self) -> Result<(), &'static str> {
        if !(group::STREAMS..=group::SESSIONS).contains(&self.group) {
            return Err("an unknown group");
        }
        if self.groups_mask & group::bit(self.group) == 0 {
            return Err("its group is not in its mask");
        }
        if self.required_head < self.anchor.op {
            return Err("its head is below its anchor");
        }
        if !key_fits(self.group, &self.last_key) {
            return Err("its key does not have its group's width");
        }
        Ok(())
    }
}

fn key_fits(group_code: u8, key: &[u8]) -> bool {
    match group_code {
        group::STREAMS | group::USERS => key.len() == 4,
        group::TOPICS | group::PARTITIONS | group::SESSIONS => key.len() == 8,
        group::CONSUMER_GROUPS => key.len() == 12,
        group::CONSUMER_GROUP_MEMBERS => key.len() == 16,
        group::PERSONAL_ACCESS_TOKENS => {
            key.len() > 5
                && usize::from(key[4]) == key.len() - 5
                && std::str::from_utf8(&key[5..]).is_ok()
        }
        _ => false,
    }
}

/// Where a query starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Start {
    /// The oldest operation held.
    Earliest,
    /// No records: a cursor at the newest record held.
    Latest,
    /// Records after a cursor.
    After(Cursor),
    /// Current state pages (the first without a token).
    Current(Option<PageToken>),
}

/// Request body of `GET_METADATA_CHANGES`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GetMetadataChanges {
    /// Where to start.
    pub start: Start,
    /// Only records at or after this time (µs).
    pub since: Option<u64>,
    /// Only records at or before this time (µs).
    pub until: Option<u64>,
    /// Most records or items in the page (1 to [`MAX_LIMIT`]).
    pub limit: u32,
    /// Group codes asked for (none: every group).
    pub groups: Vec<u8>,
}

impl GetMetadataChanges {
    /// The groups asked for as a mask, once the request passes the rules the server checks:
    /// a limit of 1 to [`MAX_LIMIT`], known group codes, `since` at most `until`, no time
    /// bound with `latest` or `current`, a current scan that holds the parents of its groups
    /// and a token issued for the same groups.
    ///
    /// # Errors
    /// The first rule broken, as a sentence.
    pub fn groups_mask(&self) -> Result<u8, &'static str> {
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err("the limit is outside 1 to 1000");
        }
        let mut mask = 0u8;
        for &code in &self.groups {
            if !(group::STREAMS..=group::SESSIONS).contains(&code) {
                return Err("an unknown group");
            }
            mask |= group::bit(code);
        }
        if mask == 0 {
            mask = group::ALL;
        }
        if let (Some(since), Some(until)) = (self.since, self.until) {
            if since > until {
                return Err("since is after until");
            }
        }
        let bounded = self.since.is_some() || self.until.is_some();
        match &self.start {
            Start::Latest if bounded => return Err("latest takes no time bound"),
            Start::Earliest | Start::After(_) | Start::Latest => {}
            Start::Current(_) if bounded => return Err("a current scan takes no time bound"),
            Start::Current(token) => {
                if missing_parent(mask) {
                    return Err("a current scan must hold the parents of its groups");
                }
                if token.as_ref().is_some_and(|t| t.groups_mask != mask) {
                    return Err("the page token was issued for other groups");
                }
            }
        }
        Ok(mask)
    }
}

/// Whether a group of `mask` lacks one of its parents (topics need streams; partitions and
/// consumer groups need topics; members need consumer groups and partitions; tokens and
/// sessions need users).
fn missing_parent(mask: u8) -> bool {
    let has = |code: u8| mask & group::bit(code) != 0;
    let parents: [(u8, &[u8]); 6] = [
        (group::TOPICS, &[group::STREAMS]),
        (group::PARTITIONS, &[group::TOPICS, group::STREAMS]),
        (group::CONSUMER_GROUPS, &[group::TOPICS, group::STREAMS]),
        (
            group::CONSUMER_GROUP_MEMBERS,
            &[
                group::CONSUMER_GROUPS,
                group::PARTITIONS,
                group::TOPICS,
                group::STREAMS,
            ],
        ),
        (group::PERSONAL_ACCESS_TOKENS, &[group::USERS]),
        (group::SESSIONS, &[group::USERS]),
    ];
    parents
        .iter()
        .any(|(child, needs)| has(*child) && needs.iter().any(|p| !has(*p)))
}

fn put_optional_u64(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_le_bytes());
        }
        None => out.push(0),
    }
}

fn take_flag(reader: &mut Reader<'_>, field: &'static str) -> Result<bool, CodecError> {
    let offset = reader.position();
    match reader.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(CodecError::InvalidDiscriminant {
            field,
            value: u64::from(value),
            offset,
        }),
    }
}

fn take_optional_u64(
    reader: &mut Reader<'_>,
    field: &'static str,
) -> Result<Option<u64>, CodecError> {
    if take_flag(reader, field)? {
        Ok(Some(reader.u64(field)?))
    } else {
        Ok(None)
    }
}

impl WireEncode for GetMetadataChanges {
    fn encoded_len(&self) -> usize {
        1 + CURSOR_LEN
            + if self.since.is_some() { 9 } else { 1 }
            + if self.until.is_some() { 9 } else { 1 }
            + 4
            + 1
            + self.groups.len().min(usize::from(u8::MAX))
            + 2
            + match &self.start {
                Start::Current(Some(token)) => token.encoded_len(),
                _ => 0,
            }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let (mode, cursor) = match &self.start {
            Start::Earliest => (0u8, Cursor::default()),
            Start::Latest => (1, Cursor::default()),
            Start::After(cursor) => (2, *cursor),
            Start::Current(_) => (3, Cursor::default()),
        };
        out.push(mode);
        cursor.put(out);
        put_optional_u64(out, self.since);
        put_optional_u64(out, self.until);
        out.extend_from_slice(&self.limit.to_le_bytes());
        let groups = &self.groups[..self.groups.len().min(usize::from(u8::MAX))];
        // At most `u8::MAX` groups are written.
        #[allow(clippy::cast_possible_truncation)]
        out.push(groups.len() as u8);
        out.extend_from_slice(groups);
        match &self.start {
            Start::Current(Some(token)) => {
                // A valid token is at most a few hundred bytes.
                #[allow(clippy::cast_possible_truncation)]
                out.extend_from_slice(&(token.encoded_len() as u16).to_le_bytes());
                token.put(out);
            }
            _ => out.extend_from_slice(&0u16.to_le_bytes()),
        }
    }
}

impl WireDecode for GetMetadataChanges {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        let mut reader = Reader::new(body);
        let mode = reader.u8("start")?;
        if mode > 3 {
            return Err(CodecError::InvalidDiscriminant {
                field: "start",
                value: u64::from(mode),
                offset: 0,
            });
        }
        let cursor_raw = reader.bytes(CURSOR_LEN, "cursor")?;
        let since = take_optional_u64(&mut reader, "since")?;
        let until = take_optional_u64(&mut reader, "until")?;
        let limit = reader.u32("limit")?;
        let groups_count = usize::from(reader.u8("groups count")?);
        let groups = reader.bytes(groups_count, "groups")?.to_vec();
        let token_offset = reader.position();
        let token_len = usize::from(reader.u16("token length")?);
        let token_raw = reader.bytes(token_len, "token")?;
        reader.finish("metadata changes request")?;
        if mode != 2 && cursor_raw.iter().any(|&b| b != 0) {
            return Err(CodecError::InvalidValue {
                field: "cursor",
                offset: 1,
                reason: "a cursor is allowed only when starting after it",
            });
        }
        if mode != 3 && token_len != 0 {
            return Err(CodecError::InvalidValue {
                field: "token",
                offset: token_offset,
                reason: "a page token is allowed only in current mode",
            });
        }
        let start = match mode {
            0 => Start::Earliest,
            1 => Start::Latest,
            2 => Start::After(Cursor::take(&mut Reader::new(cursor_raw))?),
            _ if token_len == 0 => Start::Current(None),
            _ => {
                let mut token_reader = Reader::new(token_raw);
                let token = PageToken::take(&mut token_reader)?;
                token_reader.finish("page token")?;
                Start::Current(Some(token))
            }
        };
        Ok(Self {
            start,
            since,
            until,
            limit,
            groups,
        })
    }
}

/// One change record of a reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChangeRecord {
    /// The operation.
    pub op: u64,
    /// The record within the operation.
    pub ordinal: u32,
    /// The operation's checksum.
    pub checksum: u128,
    /// When the operation was committed, µs.
    pub timestamp: u64,
    /// Who asked for it, when known.
    pub actor_user_id: Option<u32>,
    /// Group code.
    pub group: u8,
    /// Kind code.
    pub kind: u8,
    /// The body ([`ChangeBody::encode`]).
    pub body: Vec<u8>,
}

impl ChangeRecord {
    const MIN: usize = 8 + 4 + 16 + 8 + 1 + 1 + 1 + 4;

    fn encoded_len(&self) -> usize {
        Self::MIN + if self.actor_user_id.is_some() { 4 } else { 0 } + self.body.len()
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.op.to_le_bytes());
        out.extend_from_slice(&self.ordinal.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        match self.actor_user_id {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_le_bytes());
            }
            None => out.push(0),
        }
        out.push(self.group);
        out.push(self.kind);
        // Bodies are a few hundred bytes.
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.body);
    }

    fn take(reader: &mut Reader<'_>) -> Result<Self, CodecError> {
        let op = reader.u64("record op")?;
        let ordinal = reader.u32("record ordinal")?;
        let checksum = reader.u128("record checksum")?;
        let timestamp = reader.u64("record timestamp")?;
        let actor_user_id = if take_flag(reader, "record actor")? {
            Some(reader.u32("record actor")?)
        } else {
            None
        };
        let group = reader.u8("record group")?;
        let kind = reader.u8("record kind")?;
        let len = reader.u32("record body length")? as usize;
        let body = reader.bytes(len, "record body")?.to_vec();
        Ok(Self {
            op,
            ordinal,
            checksum,
            timestamp,
            actor_user_id,
            group,
            kind,
            body,
        })
    }
}

/// One current-state item of a reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Item {
    /// Group code.
    pub group: u8,
    /// The body ([`ItemBody::encode`]).
    pub body: Vec<u8>,
}

/// Reply payload of `GET_METADATA_CHANGES`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetadataChangesPage {
    /// A [`status`] code.
    pub status: u8,
    /// A [`phase`] code.
    pub phase: u8,
    /// The node's history (absent before its first operation).
    pub log_id: Option<u128>,
    /// The lowest operation from which the node holds every record.
    pub oldest_op: u64,
    /// Records are complete for every timestamp above this (0: nothing dropped).
    pub retained_since: u64,
    /// The newest operation applied.
    pub head_op: u64,
    /// The cursor to send back.
    pub next: Option<Cursor>,
    /// More records or items remain.
    pub has_more: bool,
    /// Change records (phase `changes`).
    pub records: Vec<ChangeRecord>,
    /// State items (phase `current`).
    pub items: Vec<Item>,
    /// The continuation of a current scan.
    pub token: Option<PageToken>,
}

impl WireEncode for MetadataChangesPage {
    fn encoded_len(&self) -> usize {
        2 + if self.log_id.is_some() { 17 } else { 1 }
            + 24
            + if self.next.is_some() {
                1 + CURSOR_LEN
            } else {
                1
            }
            + 1
            + 4
            + self
                .records
                .iter()
                .map(ChangeRecord::encoded_len)
                .sum::<usize>()
            + 4
            + self.items.iter().map(|i| 5 + i.body.len()).sum::<usize>()
            + 2
            + self.token.as_ref().map_or(0, PageToken::encoded_len)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.status);
        out.push(self.phase);
        match self.log_id {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_le_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&self.oldest_op.to_le_bytes());
        out.extend_from_slice(&self.retained_since.to_le_bytes());
        out.extend_from_slice(&self.head_op.to_le_bytes());
        match &self.next {
            Some(cursor) => {
                out.push(1);
                cursor.put(out);
            }
            None => out.push(0),
        }
        out.push(u8::from(self.has_more));
        // A page holds at most `MAX_LIMIT` records or items.
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(self.records.len() as u32).to_le_bytes());
        for record in &self.records {
            record.put(out);
        }
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(self.items.len() as u32).to_le_bytes());
        for item in &self.items {
            out.push(item.group);
            #[allow(clippy::cast_possible_truncation)]
            out.extend_from_slice(&(item.body.len() as u32).to_le_bytes());
            out.extend_from_slice(&item.body);
        }
        match &self.token {
            Some(token) => {
                #[allow(clippy::cast_possible_truncation)]
                out.extend_from_slice(&(token.encoded_len() as u16).to_le_bytes());
                token.put(out);
            }
            None => out.extend_from_slice(&0u16.to_le_bytes()),
        }
    }
}

impl WireDecode for MetadataChangesPage {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        let mut reader = Reader::new(body);
        let status = reader.u8("status")?;
        if status > status::RESET {
            return Err(CodecError::InvalidDiscriminant {
                field: "status",
                value: u64::from(status),
                offset: 0,
            });
        }
        let phase = reader.u8("phase")?;
        if phase > phase::CURRENT {
            return Err(CodecError::InvalidDiscriminant {
                field: "phase",
                value: u64::from(phase),
                offset: 1,
            });
        }
        let log_id = if take_flag(&mut reader, "log_id")? {
            Some(reader.u128("log_id")?)
        } else {
            None
        };
        let oldest_op = reader.u64("oldest_op")?;
        let retained_since = reader.u64("retained_since")?;
        let head_op = reader.u64("head_op")?;
        let next = if take_flag(&mut reader, "next")? {
            Some(Cursor::take(&mut reader)?)
        } else {
            None
        };
        let has_more = take_flag(&mut reader, "has_more")?;
        let count = reader.count("records count", ChangeRecord::MIN)?;
        let mut records = Vec::with_capacity(count);
        for _ in 0..count {
            records.push(ChangeRecord::take(&mut reader)?);
        }
        let count = reader.count("items count", 5)?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            let group = reader.u8("item group")?;
            let len = reader.u32("item body length")? as usize;
            let body = reader.bytes(len, "item body")?.to_vec();
            items.push(Item { group, body });
        }
        let token_len = usize::from(reader.u16("token length")?);
        let token = if token_len == 0 {
            None
        } else {
            let mut token_reader = Reader::new(reader.bytes(token_len, "token")?);
            let token = PageToken::take(&mut token_reader)?;
            token_reader.finish("page token")?;
            Some(token)
        };
        reader.finish("metadata changes reply")?;
        let mixed = if phase == phase::CHANGES {
            !items.is_empty() || token.is_some()
        } else {
            !records.is_empty()
        };
        if mixed {
            return Err(CodecError::InvalidValue {
                field: "phase",
                offset: 1,
                reason: "a changes page carries only records and a current page only items",
            });
        }
        Ok(Self {
            status,
            phase,
            log_id,
            oldest_op,
            retained_since,
            head_op,
            next,
            has_more,
            records,
            items,
            token,
        })
    }
}

crate::stream::commands::command!(GetMetadataChanges, GetMetadataChanges, MetadataChangesPage);

/// A stream's identity in change bodies: its id and the incarnation of that id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// Stream id.
    pub id: u32,
    /// What tells apart two streams that had this id (eddy: the stream's creation time, µs).
    pub created: u64,
}

/// A topic's identity in change bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicKey {
    /// Its stream.
    pub stream: StreamKey,
    /// Topic id.
    pub id: u32,
    /// What tells apart two topics that had this id (eddy: the topic's creation time, µs).
    pub created: u64,
}

/// A user's identity in change bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserKey {
    /// User id.
    pub id: u32,
    /// The user's creation time, µs.
    pub created_at: u64,
}

/// Option blocks of a resource: `Some((explicit, derived))`, each the raw TLV of an options
/// block, or `None` for options the node cannot show.
pub type Options<'a> = Option<(&'a [u8], &'a [u8])>;

/// The body of one change record, with its group and kind codes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ChangeBody<'a> {
    /// Kind 1 (`created`) or 2 (`updated`).
    Stream {
        created: bool,
        key: StreamKey,
        created_at: u64,
        name: &'a str,
        options: Options<'a>,
    },
    /// Kind 3.
    StreamDeleted {
        key: StreamKey,
        created_at: u64,
        name: &'a str,
    },
    /// Kind 10 (`created`) or 11 (`updated`).
    Topic {
        created: bool,
        key: TopicKey,
        created_at: u64,
        name: &'a str,
        partitions_count: u32,
        options: Options<'a>,
    },
    /// Kind 12.
    TopicDeleted {
        key: TopicKey,
        created_at: u64,
        name: &'a str,
    },
    /// Kind 20.
    PartitionsChanged {
        topic: TopicKey,
        partitions_count: u32,
        removed: &'a [u32],
    },
    /// Kind 30.
    ConsumerGroupCreated {
        topic: TopicKey,
        group_id: u32,
        name: &'a str,
        groups_count: u32,
    },
    /// Kind 31.
    ConsumerGroupDeleted {
        topic: TopicKey,
        group_id: u32,
        name: &'a str,
        groups_count: u32,
    },
    /// Kind 50 (`created`) or 51 (`updated`).
    User {
        created: bool,
        key: UserKey,
        username: &'a str,
        status: u8,
        permissions: Option<&'a [u8]>,
        options: Options<'a>,
    },
    /// Kind 52.
    UserDeleted { key: UserKey, username: &'a str },
    /// Kind 53.
    UserPasswordChanged { key: UserKey, username: &'a str },
    /// Kind 54 (reason `updated`).
    UserPermissionsUpdated {
        key: UserKey,
        username: &'a str,
        permissions: Option<&'a [u8]>,
    },
    /// Kind 60.
    TokenCreated {
        user: UserKey,
        name: &'a str,
        expiry: u64,
    },
    /// Kind 61 (`expired`: removed by the expiry sweep).
    TokenDeleted {
        user: UserKey,
        name: &'a str,
        expired: bool,
    },
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    // Names are 1 to 255 bytes; a longer one is cut (eddy's names never are).
    let bytes = &name.as_bytes()[..name.len().min(255)];
    #[allow(clippy::cast_possible_truncation)]
    out.push(bytes.len() as u8);
    out.extend_from_slice(bytes);
}

fn put_options(out: &mut Vec<u8>, options: Options<'_>) {
    match options {
        Some((explicit, derived)) => {
            out.push(0);
            for block in [explicit, derived] {
                #[allow(clippy::cast_possible_truncation)]
                out.extend_from_slice(&(block.len() as u32).to_le_bytes());
                out.extend_from_slice(block);
            }
        }
        None => out.push(1),
    }
}

fn put_permissions(out: &mut Vec<u8>, permissions: Option<&[u8]>) {
    match permissions {
        Some(bytes) => {
            out.push(1);
            out.extend_from_slice(bytes);
        }
        None => out.push(0),
    }
}

impl StreamKey {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.created.to_le_bytes());
    }
}

impl TopicKey {
    fn put(self, out: &mut Vec<u8>) {
        self.stream.put(out);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.created.to_le_bytes());
    }
}

impl UserKey {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.created_at.to_le_bytes());
    }
}

impl ChangeBody<'_> {
    /// The group code, the kind code and the body bytes.
    #[must_use]
    pub fn encode(&self) -> (u8, u8, Vec<u8>) {
        let mut out = Vec::with_capacity(64);
        let (group, kind) = match self {
            Self::Stream { .. }
            | Self::StreamDeleted { .. }
            | Self::Topic { .. }
            | Self::TopicDeleted { .. }
            | Self::PartitionsChanged { .. }
            | Self::ConsumerGroupCreated { .. }
            | Self::ConsumerGroupDeleted { .. } => self.put_catalog(&mut out),
            Self::User { .. }
            | Self::UserDeleted { .. }
            | Self::UserPasswordChanged { .. }
            | Self::UserPermissionsUpdated { .. }
            | Self::TokenCreated { .. }
            | Self::TokenDeleted { .. } => self.put_account(&mut out),
        };
        (group, kind, out)
    }

    /// Puts the body of a change to a stream, a topic, its partitions or a consumer group (keyed
    /// by stream or topic); returns its group and kind codes.
    fn put_catalog(&self, out: &mut Vec<u8>) -> (u8, u8) {
        match self {
            Self::Stream {
                created,
                key,
                created_at,
                name,
                options,
            } => {
                key.put(out);
                out.extend_from_slice(&created_at.to_le_bytes());
                put_name(out, name);
                put_options(out, *options);
                (group::STREAMS, if *created { 1 } else { 2 })
            }
            Self::StreamDeleted {
                key,
                created_at,
                name,
            } => {
                key.put(out);
                out.extend_from_slice(&created_at.to_le_bytes());
                put_name(out, name);
                out.push(0); // no requested_op
                (group::STREAMS, 3)
            }
            Self::Topic {
                created,
                key,
                created_at,
                name,
                partitions_count,
                options,
            } => {
                key.put(out);
                out.extend_from_slice(&created_at.to_le_bytes());
                put_name(out, name);
                out.extend_from_slice(&partitions_count.to_le_bytes());
                put_options(out, *options);
                (group::TOPICS, if *created { 10 } else { 11 })
            }
            Self::TopicDeleted {
                key,
                created_at,
                name,
            } => {
                key.put(out);
                out.extend_from_slice(&created_at.to_le_bytes());
                put_name(out, name);
                out.push(0);
                (group::TOPICS, 12)
            }
            Self::PartitionsChanged {
                topic,
                partitions_count,
                removed,
            } => {
                topic.put(out);
                out.extend_from_slice(&partitions_count.to_le_bytes());
                #[allow(clippy::cast_possible_truncation)]
                out.extend_from_slice(&(removed.len() as u32).to_le_bytes());
                for id in *removed {
                    out.extend_from_slice(&id.to_le_bytes());
                }
                out.push(0);
                (group::PARTITIONS, 20)
            }
            Self::ConsumerGroupCreated {
                topic,
                group_id,
                name,
                groups_count,
            } => {
                topic.put(out);
                out.extend_from_slice(&group_id.to_le_bytes());
                put_name(out, name);
                out.extend_from_slice(&groups_count.to_le_bytes());
                (group::CONSUMER_GROUPS, 30)
            }
            Self::ConsumerGroupDeleted {
                topic,
                group_id,
                name,
                groups_count,
            } => {
                topic.put(out);
                out.extend_from_slice(&group_id.to_le_bytes());
                put_name(out, name);
                out.extend_from_slice(&groups_count.to_le_bytes());
                out.push(0);
                (group::CONSUMER_GROUPS, 31)
            }
            Self::User { .. }
            | Self::UserDeleted { .. }
            | Self::UserPasswordChanged { .. }
            | Self::UserPermissionsUpdated { .. }
            | Self::TokenCreated { .. }
            | Self::TokenDeleted { .. } => {
                unreachable!("a user or token change is put by put_account")
            }
        }
    }

    /// Puts the body of a change to a user or a personal access token (keyed by user); returns
    /// its group and kind codes.
    fn put_account(&self, out: &mut Vec<u8>) -> (u8, u8) {
        match self {
            Self::User {
                created,
                key,
                username,
                status,
                permissions,
                options,
            } => {
                key.put(out);
                put_name(out, username);
                out.push(*status);
                put_permissions(out, *permissions);
                put_options(out, *options);
                (group::USERS, if *created { 50 } else { 51 })
            }
            Self::UserDeleted { key, username } => {
                key.put(out);
                put_name(out, username);
                (group::USERS, 52)
            }
            Self::UserPasswordChanged { key, username } => {
                key.put(out);
                put_name(out, username);
                (group::USERS, 53)
            }
            Self::UserPermissionsUpdated {
                key,
                username,
                permissions,
            } => {
                key.put(out);
                put_name(out, username);
                put_permissions(out, *permissions);
                out.push(0); // reason: updated
                (group::USERS, 54)
            }
            Self::TokenCreated { user, name, expiry } => {
                user.put(out);
                put_name(out, name);
                out.extend_from_slice(&expiry.to_le_bytes());
                (group::PERSONAL_ACCESS_TOKENS, 60)
            }
            Self::TokenDeleted {
                user,
                name,
                expired,
            } => {
                user.put(out);
                put_name(out, name);
                out.push(u8::from(*expired));
                (group::PERSONAL_ACCESS_TOKENS, 61)
            }
            Self::Stream { .. }
            | Self::StreamDeleted { .. }
            | Self::Topic { .. }
            | Self::TopicDeleted { .. }
            | Self::PartitionsChanged { .. }
            | Self::ConsumerGroupCreated { .. }
            | Self::ConsumerGroupDeleted { .. } => {
                unreachable!("a catalog change is put by put_catalog")
            }
        }
    }
}

/// The body of one current-state item, with its group code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ItemBody<'a> {
    /// Group 1.
    Stream {
        key: StreamKey,
        created_at: u64,
        name: &'a str,
        options: Options<'a>,
    },
    /// Group 2.
    Topic {
        key: TopicKey,
        created_at: u64,
        name: &'a str,
        options: Options<'a>,
    },
    /// Group 3.
    Partitions {
        topic: TopicKey,
        partitions_count: u32,
    },
    /// Group 4.
    ConsumerGroup {
        topic: TopicKey,
        group_id: u32,
        name: &'a str,
    },
    /// Group 6.
    User {
        key: UserKey,
        username: &'a str,
        status: u8,
        permissions: Option<&'a [u8]>,
        options: Options<'a>,
    },
    /// Group 7.
    Token {
        user: UserKey,
        name: &'a str,
        expiry: u64,
    },
}

impl ItemBody<'_> {
    /// The group code and the body bytes.
    #[must_use]
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut out = Vec::with_capacity(64);
        let group = match self {
            Self::Stream {
                key,
                created_at,
                name,
                options,
            } => {
                key.put(&mut out);
                out.extend_from_slice(&created_at.to_le_bytes());
                put_name(&mut out, name);
                put_options(&mut out, *options);
                group::STREAMS
            }
            Self::Topic {
                key,
                created_at,
                name,
                options,
            } => {
                key.put(&mut out);
                out.extend_from_slice(&created_at.to_le_bytes());
                put_name(&mut out, name);
                put_options(&mut out, *options);
                group::TOPICS
            }
            Self::Partitions {
                topic,
                partitions_count,
            } => {
                topic.put(&mut out);
                out.extend_from_slice(&partitions_count.to_le_bytes());
                group::PARTITIONS
            }
            Self::ConsumerGroup {
                topic,
                group_id,
                name,
            } => {
                topic.put(&mut out);
                out.extend_from_slice(&group_id.to_le_bytes());
                put_name(&mut out, name);
                group::CONSUMER_GROUPS
            }
            Self::User {
                key,
                username,
                status,
                permissions,
                options,
            } => {
                key.put(&mut out);
                put_name(&mut out, username);
                out.push(*status);
                put_permissions(&mut out, *permissions);
                put_options(&mut out, *options);
                group::USERS
            }
            Self::Token { user, name, expiry } => {
                user.put(&mut out);
                put_name(&mut out, name);
                out.extend_from_slice(&expiry.to_le_bytes());
                group::PERSONAL_ACCESS_TOKENS
            }
        };
        (group, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use proptest::prelude::*;

    fn cursor() -> Cursor {
        Cursor {
            log_id: 7,
            op: 9,
            checksum: 11,
            ordinal: 2,
        }
    }

    fn token() -> PageToken {
        PageToken {
            anchor: cursor(),
            required_head: 12,
            groups_mask: 0b11,
            group: group::TOPICS,
            last_key: vec![1, 0, 0, 0, 2, 0, 0, 0],
        }
    }

    fn request(start: Start) -> GetMetadataChanges {
        GetMetadataChanges {
            start,
            since: Some(1_760_353_200_000_000),
            until: None,
            limit: 500,
            groups: vec![1, 2],
        }
    }

    #[test]
    fn every_start_round_trips() {
        for start in [
            Start::Earliest,
            Start::Latest,
            Start::After(cursor()),
            Start::Current(None),
            Start::Current(Some(token())),
        ] {
            round_trip_strict(&request(start));
        }
    }

    /// The smallest request: start, a zero cursor, two absent bounds, the limit, no groups,
    /// no token (the size the reference crate's own test pins).
    #[test]
    fn smallest_request_is_54_bytes() {
        let bytes = GetMetadataChanges {
            start: Start::Latest,
            since: None,
            until: None,
            limit: 1,
            groups: vec![],
        }
        .to_vec();
        assert_eq!(bytes.len(), 1 + 44 + 1 + 1 + 4 + 1 + 2);
        assert_eq!(bytes[0], 1);
        assert_eq!(&bytes[47..51], &1u32.to_le_bytes());
    }

    #[test]
    fn structural_rules_are_enforced() {
        let good = request(Start::Earliest).to_vec();
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(GetMetadataChanges::decode(&trailing).is_err());
        let mut cursor_without_after = request(Start::Latest).to_vec();
        cursor_without_after[5] = 1;
        assert!(GetMetadataChanges::decode(&cursor_without_after).is_err());
        let non_canonical = request(Start::After(Cursor {
            log_id: 1,
            op: 0,
            checksum: 3,
            ordinal: 0,
        }));
        assert!(GetMetadataChanges::decode(&non_canonical.to_vec()).is_err());
        let mut token_outside_current = request(Start::Current(Some(token()))).to_vec();
        token_outside_current[0] = 0;
        assert!(GetMetadataChanges::decode(&token_outside_current).is_err());
        let mut unknown_start = good.clone();
        unknown_start[0] = 4;
        assert!(GetMetadataChanges::decode(&unknown_start).is_err());
        let mut bad_flag = good;
        bad_flag[45] = 2;
        assert!(GetMetadataChanges::decode(&bad_flag).is_err());
        for (group_code, width) in [(group::STREAMS, 8), (group::TOPICS, 4), (9, 4)] {
            let mut bad = token();
            bad.group = group_code;
            bad.groups_mask = u8::MAX;
            bad.last_key = vec![0; width];
            assert!(
                GetMetadataChanges::decode(&request(Start::Current(Some(bad))).to_vec()).is_err()
            );
        }
    }

    #[test]
    fn server_rules_are_checked() {
        let ok = |r: &GetMetadataChanges| r.groups_mask();
        assert_eq!(ok(&request(Start::Earliest)), Ok(0b11));
        let mut r = request(Start::Earliest);
        r.groups.clear();
        assert_eq!(ok(&r), Ok(u8::MAX));
        for limit in [0, MAX_LIMIT + 1, u32::MAX] {
            r.limit = limit;
            assert!(ok(&r).is_err());
        }
        r.limit = 1;
        r.groups = vec![9];
        assert!(ok(&r).is_err());
        r.groups = vec![1];
        r.since = Some(5);
        r.until = Some(4);
        assert!(ok(&r).is_err());
        assert!(ok(&request(Start::Latest)).is_err(), "a bound with latest");
        let mut current = request(Start::Current(None));
        current.since = None;
        current.groups = vec![group::TOPICS];
        assert!(ok(&current).is_err(), "topics without streams");
        current.groups = vec![group::TOPICS, group::STREAMS];
        assert_eq!(ok(&current), Ok(0b11));
        current.start = Start::Current(Some(PageToken {
            groups_mask: u8::MAX,
            ..token()
        }));
        assert!(ok(&current).is_err(), "a token of other groups");
    }

    fn page() -> MetadataChangesPage {
        let (group, kind, body) = ChangeBody::Stream {
            created: true,
            key: StreamKey { id: 1, created: 5 },
            created_at: 5,
            name: "orders",
            options: Some((&[], &[])),
        }
        .encode();
        MetadataChangesPage {
            status: status::OK,
            phase: phase::CHANGES,
            log_id: Some(0x0d4b),
            oldest_op: 1,
            retained_since: 0,
            head_op: 4,
            next: Some(cursor()),
            has_more: false,
            records: vec![ChangeRecord {
                op: 3,
                ordinal: 0,
                checksum: 0xa5,
                timestamp: 1_760_356_800_123_456,
                actor_user_id: None,
                group,
                kind,
                body,
            }],
            items: vec![],
            token: None,
        }
    }

    #[test]
    fn pages_round_trip_and_refuse_mixed_phases() {
        round_trip_strict(&page());
        let current = MetadataChangesPage {
            phase: phase::CURRENT,
            records: vec![],
            items: vec![Item {
                group: group::STREAMS,
                body: vec![9; 12],
            }],
            token: Some(token()),
            ..page()
        };
        round_trip_strict(&current);
        let mixed = MetadataChangesPage {
            phase: phase::CURRENT,
            ..page()
        };
        assert!(MetadataChangesPage::decode(&mixed.to_vec()).is_err());
    }

    /// A stream-created body, byte by byte: key (id, created), created_at, name, readable
    /// options (flag 0, two empty blocks).
    #[test]
    fn stream_created_body_bytes() {
        let (group, kind, body) = ChangeBody::Stream {
            created: true,
            key: StreamKey {
                id: 3,
                created: 0x10,
            },
            created_at: 0x10,
            name: "ab",
            options: Some((&[], &[])),
        }
        .encode();
        assert_eq!((group, kind), (1, 1));
        assert_eq!(
            body,
            hex(
                "03 00 00 00 10 00 00 00 00 00 00 00 10 00 00 00 00 00 00 00 \
                 02 61 62 00 00 00 00 00 00 00 00 00"
            )
        );
        let (group, kind, body) = ChangeBody::TokenDeleted {
            user: UserKey {
                id: 1,
                created_at: 2,
            },
            name: "ci",
            expired: true,
        }
        .encode();
        assert_eq!((group, kind), (7, 61));
        assert_eq!(body, hex("01 00 00 00 02 00 00 00 00 00 00 00 02 63 69 01"));
    }

    fn start_strategy() -> impl Strategy<Value = Start> {
        let cursor = (any::<u128>(), 1..u64::MAX, any::<u128>(), any::<u32>()).prop_map(
            |(log_id, op, checksum, ordinal)| Cursor {
                log_id,
                op,
                checksum,
                ordinal,
            },
        );
        let token = (
            cursor.clone(),
            any::<u32>(),
            prop_oneof![Just(group::STREAMS), Just(group::USERS)],
            any::<u32>(),
        )
            .prop_map(|(anchor, extra, group_code, key)| PageToken {
                anchor,
                required_head: anchor.op.saturating_add(u64::from(extra)),
                groups_mask: u8::MAX,
                group: group_code,
                last_key: key.to_le_bytes().to_vec(),
            });
        prop_oneof![
            Just(Start::Earliest),
            Just(Start::Latest),
            cursor.prop_map(Start::After),
            proptest::option::of(token).prop_map(Start::Current),
        ]
    }

    proptest! {
        #[test]
        fn any_request_round_trips(
            start in start_strategy(),
            since in proptest::option::of(any::<u64>()),
            until in proptest::option::of(any::<u64>()),
            limit in any::<u32>(),
            groups in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let request = GetMetadataChanges { start, since, until, limit, groups };
            let bytes = request.to_vec();
            prop_assert_eq!(bytes.len(), request.encoded_len());
            prop_assert_eq!(&GetMetadataChanges::decode(&bytes).unwrap(), &request);
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(request) = GetMetadataChanges::decode(&bytes) {
                prop_assert_eq!(&request.to_vec(), &bytes);
                let _ = request.groups_mask();
            }
            let _ = MetadataChangesPage::decode(&bytes);
        }
    }
}
