//! `UPDATE_RESOURCE` (code 16, the 0.12.2 wire): the option patch is turned into the
//! `UPDATE_TOPIC`, `UPDATE_STREAM` or `UPDATE_USER` request it stands for, which dispatch then
//! resolves, authorises and runs as that command. Renames travel as options there (`name`,
//! `username`, `status`); a reset key takes eddy's default.

use eddy_codec::stream::commands::update_resource::{ResourceTarget, UpdateResource};
use eddy_codec::stream::commands::update_stream::UpdateStream;
use eddy_codec::stream::commands::update_topic::UpdateTopic;
use eddy_codec::stream::commands::update_user::UpdateUser;
use eddy_codec::stream::commands::TrailingOptions;
use eddy_codec::stream::{Identifier, Request, WireName};
use eddy_options::catalog::{self, Scope};
use eddy_options::{OptionsBlock, OptionsError, TopicSettings, ValueKind};
use eddy_stream_store::MetadataState;

use super::views;
use eddy_replicated::stream::error::{Missing, StreamError};

fn unsupported(scope: Scope, key: &str) -> StreamError {
    StreamError::Options(OptionsError::UnsupportedKey {
        scope: scope.name(),
        key: key.to_owned(),
    })
}

fn text(key: &'static str, value: &[u8]) -> Result<String, StreamError> {
    String::from_utf8(value.to_vec()).map_err(|_| {
        StreamError::Options(OptionsError::InvalidValue {
            key,
            reason: "string value is not utf-8",
        })
    })
}

fn name(key: &'static str, value: &[u8]) -> Result<WireName, StreamError> {
    WireName::new(text(key, value)?).map_err(|_| {
        StreamError::Options(OptionsError::InvalidValue {
            key,
            reason: "not a valid name (1..=255 bytes)",
        })
    })
}

/// The request `patch` stands for, read against the current metadata.
pub(crate) fn legacy(meta: &MetadataState, patch: UpdateResource) -> Result<Request, StreamError> {
    let UpdateResource {
        target,
        reset,
        options,
    } = patch;
    let block = options.0;
    match target {
        ResourceTarget::Topic {
            stream_id,
            topic_id,
        } => topic_patch(meta, &stream_id, &topic_id, &reset.0, &block),
        ResourceTarget::Stream { stream_id } => stream_patch(meta, &stream_id, &reset.0, &block),
        ResourceTarget::User { user_id } => user_patch(meta, &user_id, &reset.0, &block),
    }
}

/// A topic's patch as `UPDATE_TOPIC`: its name, and its options set or `reset` to eddy's
/// defaults.
fn topic_patch(
    meta: &MetadataState,
    stream_id: &Identifier,
    topic_id: &Identifier,
    reset: &[WireName],
    block: &OptionsBlock,
) -> Result<Request, StreamError> {
    let stream = views::stream_id(meta, stream_id).ok_or(StreamError::NotFound(Missing::Stream))?;
    let topic =
        views::topic_id(meta, stream, topic_id).ok_or(StreamError::NotFound(Missing::Topic))?;
    let current = meta
        .topic(stream, topic)
        .ok_or(StreamError::NotFound(Missing::Topic))?;
    let mut new_name = views::wire_name(&current.name);
    let mut entries: Vec<(String, ValueKind, Vec<u8>)> = Vec::new();
    for entry in block.entries() {
        if entry.key == "name" {
            new_name = name("name", entry.value)?;
            continue;
        }
        let kind =
            ValueKind::from_code(entry.kind).ok_or_else(|| unsupported(Scope::Topic, entry.key))?;
        entries.push((entry.key.to_owned(), kind, entry.value.to_vec()));
    }
    for key in reset {
        let key = key.as_str();
        let spec = catalog::spec(Scope::Topic, key)
            .filter(|spec| spec.updatable)
            .ok_or_else(|| unsupported(Scope::Topic, key))?;
        let default = TopicSettings::EDDY_DEFAULTS
            .canonical_value(key)
            .ok_or_else(|| unsupported(Scope::Topic, key))?;
        entries.push((key.to_owned(), spec.kind, default));
    }
    let options = OptionsBlock::from_entries(
        entries
            .iter()
            .map(|(key, kind, value)| (key.as_str(), *kind, value.as_slice())),
    )?;
    Ok(Request::UpdateTopic(UpdateTopic {
        stream_id: Identifier::numeric(stream),
        topic_id: Identifier::numeric(topic),
        name: new_name,
        options: TrailingOptions(options),
    }))
}

/// A stream's patch as `UPDATE_STREAM`: only its name can change.
fn stream_patch(
    meta: &MetadataState,
    stream_id: &Identifier,
    reset: &[WireName],
    block: &OptionsBlock,
) -> Result<Request, StreamError> {
    let stream = views::stream_id(meta, stream_id).ok_or(StreamError::NotFound(Missing::Stream))?;
    let current = meta
        .stream(stream)
        .ok_or(StreamError::NotFound(Missing::Stream))?;
    if let Some(key) = reset.first() {
        return Err(unsupported(Scope::Stream, key.as_str()));
    }
    let mut new_name = views::wire_name(&current.name);
    for entry in block.entries() {
        if entry.key != "name" {
            return Err(unsupported(Scope::Stream, entry.key));
        }
        new_name = name("name", entry.value)?;
    }
    Ok(Request::UpdateStream(UpdateStream {
        stream_id: Identifier::numeric(stream),
        name: new_name,
        options: TrailingOptions::default(),
    }))
}

/// A user's patch as `UPDATE_USER`: its username and status.
fn user_patch(
    meta: &MetadataState,
    user_id: &Identifier,
    reset: &[WireName],
    block: &OptionsBlock,
) -> Result<Request, StreamError> {
    let user = views::user_id(meta, user_id).ok_or(StreamError::NotFound(Missing::User))?;
    let mut username = None;
    let mut status = None;
    for key in reset {
        match key.as_str() {
            // The default status.
            "status" => status = Some(1),
            other => return Err(unsupported(Scope::User, other)),
        }
    }
    for entry in block.entries() {
        match entry.key {
            "username" => username = Some(name("username", entry.value)?),
            "status" => {
                status = Some(match (ValueKind::from_code(entry.kind), entry.value) {
                    (Some(ValueKind::Uint8), [code]) => *code,
                    (Some(ValueKind::String), _) => match text("status", entry.value)?.as_str() {
                        "active" => 1,
                        "inactive" => 2,
                        _ => {
                            return Err(StreamError::Options(OptionsError::InvalidValue {
                                key: "status",
                                reason: "expected \"active\" or \"inactive\"",
                            }))
                        }
                    },
                    _ => {
                        return Err(StreamError::Options(OptionsError::InvalidValue {
                            key: "status",
                            reason: "value kind not accepted for this key",
                        }))
                    }
                });
            }
            other => return Err(unsupported(Scope::User, other)),
        }
    }
    Ok(Request::UpdateUser(UpdateUser {
        user_id: Identifier::numeric(user),
        username,
        status,
        options: TrailingOptions::default(),
    }))
}
