//! `eddy events ...`: the event-protocol subcommands.
//!
//! An aggregate is named `ORG/TYPE/ID`, three unsigned integers (up to 128 bits each). Event
//! payloads are JSON; each write is one batch, so one new version, whatever its number of
//! events.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;

use bytes::Bytes;
use clap::{Args, Subcommand};
use eddy_client::{ClientError, EventClient, WriteOptions};
use eddy_codec::event::{
    AggregateKey, Event, ReadFilters, SchemaKey, SingleAggregateDelete, WatchOperation,
    WatchRequest,
};
use serde_json::{json, Value};

use crate::conn::ConnArgs;
use crate::error::{Context as _, CtlError};
use crate::output::{self, print_record, print_table, Format, Record, Table};

/// The client id the CLI writes with unless `--client-id` is given. Idempotency marks are
/// kept per (aggregate, client id).
pub const DEFAULT_CLIENT_ID: u128 = 1;

/// `eddy events ...`
#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: EventsCommand,
}

/// Event subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum EventsCommand {
    /// Append events (JSON payloads) to an aggregate as one batch (one new version).
    #[command(after_help = "Examples:
  eddy events write 1/2/3 '{\"amount\":10}' --event-type 7
  eddy events write 1/2/3 '{\"a\":1}' --event-type 7 --expected-version 4
  printf '{\"n\":1}\\n{\"n\":2}\\n' | eddy events write 1/2/3 --event-type 7 --idempotency-key 100")]
    Write(WriteArgs),
    /// Read an aggregate's events, following pages.
    #[command(after_help = "Examples:
  eddy events read 1/2/3
  eddy events read 1/2/3 --from 10 --to 20 --event-types 7,8 -o jsonl")]
    Read(ReadArgs),
    /// Show an aggregate's versions and state.
    Details {
        /// Aggregate ORG/TYPE/ID.
        key: String,
    },
    /// Hide versions below KEEP_FROM (they are removed from disk by compaction).
    Trim {
        /// Aggregate ORG/TYPE/ID.
        key: String,
        /// First version to keep.
        keep_from: u64,
        /// Writer id stored with the trim.
        #[arg(long, default_value_t = DEFAULT_CLIENT_ID)]
        client_id: u128,
    },
    /// Soft-delete an aggregate.
    Delete {
        /// Aggregate ORG/TYPE/ID.
        key: String,
        /// A later write may recreate it.
        #[arg(long)]
        allow_recreate: bool,
        /// A recreated aggregate continues its versions.
        #[arg(long, requires = "allow_recreate")]
        continue_sequence: bool,
        /// Only if its current version is this.
        #[arg(long)]
        expected_version: Option<u64>,
        /// Writer id stored with the delete.
        #[arg(long, default_value_t = DEFAULT_CLIENT_ID)]
        client_id: u128,
    },
    /// List the orgs that have events (every shard).
    Orgs,
    /// List (org, aggregate type) pairs (every shard).
    Types {
        /// Only this org.
        #[arg(long)]
        org: Option<u128>,
    },
    /// List aggregates with their versions and sizes (every shard).
    Aggregates {
        /// Only this org.
        #[arg(long)]
        org: Option<u128>,
        /// Only this aggregate type.
        #[arg(long = "type")]
        aggregate_type: Option<u128>,
        /// Include soft-deleted aggregates.
        #[arg(long)]
        include_deleted: bool,
    },
    /// Follow committed changes as they happen (every shard; Ctrl-C stops).
    #[command(after_help = "Examples:
  eddy events watch
  eddy events watch --org 1 --ops write,delete --limit 10 -o jsonl")]
    Watch(WatchArgs),
    /// Event schemas.
    #[command(subcommand)]
    Schema(SchemaCommand),
}

/// `eddy events write`
#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    /// Aggregate ORG/TYPE/ID.
    pub key: String,
    /// Event payloads (JSON), one per argument; without any (and without --file) each line of
    /// stdin is one.
    pub events: Vec<String>,
    /// Read payloads from FILE, one JSON document per line (`-` is stdin).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Event type (major, not 0) of every event.
    #[arg(long, short = 't', default_value_t = 1)]
    pub event_type: u64,
    /// Event type revision.
    #[arg(long, default_value_t = 0)]
    pub event_minor: u64,
    /// Optimistic concurrency: write only if the aggregate's current version is this (0: it
    /// must not exist yet).
    #[arg(long)]
    pub expected_version: Option<u64>,
    /// Idempotency: the first event's client sequence number; the server refuses a write whose
    /// sequence is not above the last one it recorded for this client id (retries are safe).
    #[arg(long, value_name = "SEQ")]
    pub idempotency_key: Option<u64>,
    /// Writer id (idempotency is per writer).
    #[arg(long, default_value_t = DEFAULT_CLIENT_ID)]
    pub client_id: u128,
    /// Refuse to create the aggregate (it must exist).
    #[arg(long)]
    pub no_create: bool,
}

/// `eddy events read`
#[derive(Debug, Clone, Args)]
pub struct ReadArgs {
    /// Aggregate ORG/TYPE/ID.
    pub key: String,
    /// First version.
    #[arg(long, default_value_t = 1)]
    pub from: u64,
    /// Last version.
    #[arg(long)]
    pub to: Option<u64>,
    /// Only these event types (comma-separated majors).
    #[arg(long, value_delimiter = ',')]
    pub event_types: Vec<u64>,
    /// Only batches of this writer.
    #[arg(long)]
    pub client_id: Option<u128>,
    /// Stop after this many events.
    #[arg(long)]
    pub limit: Option<u64>,
    /// One page only; the version to continue from goes to stderr.
    #[arg(long)]
    pub page: bool,
}

/// `eddy events watch`
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Only these orgs (repeatable).
    #[arg(long)]
    pub org: Vec<u128>,
    /// Only these aggregate types (repeatable).
    #[arg(long = "type")]
    pub aggregate_type: Vec<u128>,
    /// Only these aggregate ids (repeatable).
    #[arg(long)]
    pub id: Vec<u128>,
    /// Only these operations: create, write, trim, delete (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Coalesce changes for up to this many milliseconds.
    #[arg(long)]
    pub latency_ms: Option<u64>,
    /// Stop after this many notifications.
    #[arg(long)]
    pub limit: Option<u64>,
}

/// Schema subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum SchemaCommand {
    /// Register a JSON Schema for an event type (immutable once registered).
    #[command(after_help = "Example:
  eddy events schema register 1 2 7 '{\"type\":\"object\",\"required\":[\"amount\"]}'")]
    Register {
        /// Org.
        org: u128,
        /// Aggregate type.
        aggregate_type: u128,
        /// Event type (major).
        event_type: u64,
        /// The schema text; without it, --file.
        schema: Option<String>,
        /// Event type revision.
        #[arg(long, default_value_t = 0)]
        minor: u64,
        /// Read the schema from FILE.
        #[arg(long, short = 'f', conflicts_with = "schema")]
        file: Option<PathBuf>,
        /// Writer id stored with the schema.
        #[arg(long, default_value_t = DEFAULT_CLIENT_ID)]
        client_id: u128,
    },
}

/// Parses `ORG/TYPE/ID`.
pub fn parse_key(text: &str) -> Result<AggregateKey, CtlError> {
    let parts: Vec<&str> = text.split('/').collect();
    let bad = || {
        CtlError::Usage(format!(
            "{text:?} is not an aggregate ORG/TYPE/ID (three numbers)"
        ))
    };
    let [org, kind, id] = parts.as_slice() else {
        return Err(bad());
    };
    let n = |s: &str| s.trim().parse::<u128>().map_err(|_| bad());
    Ok(AggregateKey::new(n(org)?, n(kind)?, n(id)?))
}

fn key_text(key: &AggregateKey) -> String {
    format!(
        "{}/{}/{}",
        key.org_id, key.aggregate_type_id, key.aggregate_id
    )
}

/// Operation names of `--ops`.
pub fn operation_codes(names: &[String]) -> Result<Option<BTreeSet<u8>>, CtlError> {
    if names.is_empty() {
        return Ok(None);
    }
    names
        .iter()
        .map(|n| {
            Ok(match n.trim() {
                "create" => WatchOperation::Create,
                "write" => WatchOperation::Write,
                "trim" => WatchOperation::TrimStart,
                "delete" => WatchOperation::Delete,
                other => {
                    return Err(CtlError::Usage(format!(
                        "--ops {other:?}: one of create, write, trim, delete"
                    )))
                }
            }
            .as_u8())
        })
        .collect::<Result<BTreeSet<_>, _>>()
        .map(Some)
}

fn operation_name(code: u8) -> &'static str {
    match WatchOperation::from_u8(code) {
        Some(WatchOperation::Create) => "create",
        Some(WatchOperation::Write) => "write",
        Some(WatchOperation::TrimStart) => "trim",
        Some(WatchOperation::Delete) => "delete",
        Some(WatchOperation::Read | WatchOperation::Details) | None => "other",
    }
}

/// The JSON payloads of `write`, each checked to be JSON.
fn payloads(args: &WriteArgs) -> Result<Vec<Vec<u8>>, CtlError> {
    let texts = crate::input::lines(&args.events, args.file.as_deref())?;
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| CtlError::Usage(format!("event {}: not JSON: {e}", i + 1)))?;
            Ok(text.trim().as_bytes().to_vec())
        })
        .collect()
}

fn now_millis() -> u64 {
    eddy_client::stream::now_micros() / 1000
}

/// Runs `eddy events`.
pub async fn run(args: &EventsArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let format = settings.format;
    if let EventsCommand::Watch(watch_args) = &args.command {
        return watch(&settings, watch_args, out).await;
    }
    let mut client = settings.event_client().await?;
    match &args.command {
        EventsCommand::Write(w) => write(&mut client, w, format, out).await,
        EventsCommand::Read(r) => read(&mut client, r, format, out).await,
        EventsCommand::Details { key } => details(&mut client, key, format, out).await,
        EventsCommand::Trim {
            key,
            keep_from,
            client_id,
        } => {
            output::act(
                out,
                format,
                client.trim(parse_key(key)?, *keep_from, *client_id),
                format!("trim aggregate {key}"),
                format!("trimmed {key} below version {keep_from}"),
            )
            .await
        }
        EventsCommand::Delete {
            key,
            allow_recreate,
            continue_sequence,
            expected_version,
            client_id,
        } => {
            let options = SingleAggregateDelete {
                allow_recreate: *allow_recreate,
                allow_sequence_continuation: *continue_sequence,
                expected_version: *expected_version,
            };
            output::act(
                out,
                format,
                client.delete(parse_key(key)?, options, *client_id),
                format!("delete aggregate {key}"),
                format!("deleted {key}"),
            )
            .await
        }
        EventsCommand::Orgs => orgs(&mut client, format, out).await,
        EventsCommand::Types { org } => types(&mut client, *org, format, out).await,
        EventsCommand::Aggregates {
            org,
            aggregate_type,
            include_deleted,
        } => {
            aggregates(
                &mut client,
                (*org, *aggregate_type, *include_deleted),
                format,
                out,
            )
            .await
        }
        EventsCommand::Schema(SchemaCommand::Register {
            org,
            aggregate_type,
            event_type,
            schema,
            minor,
            file,
            client_id,
        }) => {
            let key = SchemaKey {
                org_id: *org,
                aggregate_type_id: *aggregate_type,
                event_type_major: *event_type,
                event_type_minor: *minor,
            };
            register_schema(
                &mut client,
                key,
                (schema.as_ref(), file.as_ref()),
                *client_id,
                format,
                out,
            )
            .await
        }
        EventsCommand::Watch(_) => unreachable!("handled above"),
    }
}

/// `eddy events write`.
async fn write(
    client: &mut EventClient,
    w: &WriteArgs,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let key = parse_key(&w.key)?;
    if w.event_type == 0 {
        return Err(CtlError::Usage("--event-type 0 is reserved".into()));
    }
    let payloads = payloads(w)?;
    if payloads.is_empty() {
        return Err(CtlError::Usage("no events to write".into()));
    }
    let now = now_millis();
    let first_seq = w.idempotency_key.unwrap_or(0);
    let events: Vec<Event> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, payload)| Event {
            client_seq: first_seq + i as u64,
            event_seq: 0,
            event_id: None,
            event_timestamp: now,
            event_type_major: w.event_type,
            event_type_minor: w.event_minor,
            event_value: Bytes::from(payload),
            iv: None,
        })
        .collect();
    let count = events.len();
    let options = WriteOptions {
        expected_version: w.expected_version,
        idempotent: w.idempotency_key.is_some(),
        allow_create: !w.no_create,
        user_id: None,
    };
    let version = client
        .write_events(key, events, w.client_id, &options)
        .await
        .context(|| format!("write to aggregate {}", w.key))?;
    let record = Record::new()
        .field("aggregate", key_text(&key))
        .field("events", count)
        .field("version", version.map_or(Value::Null, |v| json!(v)));
    print_record(out, format, &record).map_err(CtlError::Output)
}

/// `eddy events details`.
async fn details(
    client: &mut EventClient,
    key: &str,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let human = format == Format::Table;
    let aggregate = parse_key(key)?;
    let d = client
        .details(aggregate)
        .await
        .context(|| format!("details of aggregate {key}"))?;
    let record = Record::new()
        .field("aggregate", key_text(&aggregate))
        .field("min_version", d.min_aggregate_version)
        .field("max_version", d.max_aggregate_version)
        .field("max_event_seq", d.max_event_seq)
        .field("deleted", d.is_deleted)
        .field("allow_recreate", d.allow_recreate)
        .field(
            "last_write",
            if human {
                // Server timestamps are epoch milliseconds (the default precision).
                json!(output::timestamp_micros(
                    d.last_server_timestamp.saturating_mul(1000)
                ))
            } else {
                json!(d.last_server_timestamp)
            },
        )
        .field("last_client_id", d.last_client_id.to_string());
    print_record(out, format, &record).map_err(CtlError::Output)
}

/// `eddy events orgs`: every org of every shard, each once.
async fn orgs(
    client: &mut EventClient,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let mut orgs = BTreeSet::new();
    for shard in 0..client.num_shards().await? {
        let mut cursor = None;
        loop {
            let page = client
                .list_orgs(shard, cursor)
                .await
                .context(|| format!("list orgs of shard {shard}"))?;
            orgs.extend(page.orgs.iter().map(|o| o.org_id));
            match page.next_cursor {
                Some(c) if Some(c) != cursor => cursor = Some(c),
                _ => break,
            }
        }
    }
    let mut table = Table::new(vec!["org"]);
    for org in orgs {
        table.push(vec![json!(org.to_string())]);
    }
    print_table(out, format, &table).map_err(CtlError::Output)
}

/// `eddy events types`: every aggregate type of every shard (of `org`, if given).
async fn types(
    client: &mut EventClient,
    org: Option<u128>,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let mut types = BTreeSet::new();
    for shard in 0..client.num_shards().await? {
        let mut cursor = None;
        loop {
            let page = client
                .list_aggregate_types(shard, org, cursor)
                .await
                .context(|| format!("list aggregate types of shard {shard}"))?;
            types.extend(
                page.aggregate_types
                    .iter()
                    .map(|t| (t.org_id, t.aggregate_type_id)),
            );
            match page.next_cursor {
                Some(c) if Some(c) != cursor => cursor = Some(c),
                _ => break,
            }
        }
    }
    let mut table = Table::new(vec!["org", "type"]);
    for (org, kind) in types {
        table.push(vec![json!(org.to_string()), json!(kind.to_string())]);
    }
    print_table(out, format, &table).map_err(CtlError::Output)
}

/// `eddy events aggregates`: `(org, aggregate type, include deleted)`.
async fn aggregates(
    client: &mut EventClient,
    (org, aggregate_type, include_deleted): (Option<u128>, Option<u128>, bool),
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let human = format == Format::Table;
    let mut found = BTreeMap::new();
    for shard in 0..client.num_shards().await? {
        let mut cursor = None;
        loop {
            let page = client
                .list_aggregates(shard, org, aggregate_type, cursor)
                .await
                .context(|| format!("list aggregates of shard {shard}"))?;
            for a in page.aggregates {
                // Items may repeat across pages; the newest page's numbers win.
                found.insert((a.org_id, a.aggregate_type_id, a.aggregate_id), a);
            }
            match page.next_cursor {
                Some(c) if Some(c) != cursor => cursor = Some(c),
                _ => break,
            }
        }
    }
    let mut table = Table::new(vec![
        "aggregate",
        "min_version",
        "max_version",
        "batches",
        "size",
        "deleted",
    ]);
    for a in found.values().filter(|a| include_deleted || !a.is_deleted) {
        table.push(vec![
            json!(format!(
                "{}/{}/{}",
                a.org_id, a.aggregate_type_id, a.aggregate_id
            )),
            json!(a.min_aggregate_version),
            json!(a.max_aggregate_version),
            json!(a.event_batch_count),
            if human {
                json!(output::bytes(a.compressed_size))
            } else {
                json!(a.compressed_size)
            },
            json!(a.is_deleted),
        ]);
    }
    print_table(out, format, &table).map_err(CtlError::Output)
}

/// `eddy events schema register`: the schema text, given or read from `file`.
async fn register_schema(
    client: &mut EventClient,
    key: SchemaKey,
    (schema, file): (Option<&String>, Option<&PathBuf>),
    client_id: u128,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let text = match (schema, file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|source| CtlError::Io {
            what: "read",
            path: path.clone(),
            source,
        })?,
        (None, None) => return Err(CtlError::Usage("give the schema text or --file".into())),
    };
    serde_json::from_str::<Value>(&text)
        .map_err(|e| CtlError::Usage(format!("the schema is not JSON: {e}")))?;
    let (major, minor) = (key.event_type_major, key.event_type_minor);
    let done = format!(
        "registered the schema of {}/{} event type {major}.{minor}",
        key.org_id, key.aggregate_type_id
    );
    output::act(
        out,
        format,
        client.register_schema(key, text, client_id),
        format!("register the schema of event type {major}.{minor}"),
        done,
    )
    .await
}

async fn read(
    client: &mut EventClient,
    args: &ReadArgs,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let key = parse_key(&args.key)?;
    let human = format == Format::Table;
    let mut table = Table::new(vec![
        "version",
        "event_seq",
        "client_seq",
        "type",
        "timestamp",
        "payload",
    ]);
    let mut from = args.from;
    let mut printed = 0u64;
    let next = loop {
        let filters = ReadFilters {
            from_aggregate_version: from,
            to_aggregate_version: args.to,
            include_event_types: (!args.event_types.is_empty()).then(|| args.event_types.clone()),
            include_client_id: args.client_id,
            ..ReadFilters::default()
        };
        let page = client
            .read(key, filters)
            .await
            .context(|| format!("read aggregate {}", args.key))?;
        for batch in &page.event_batches {
            for e in &batch.events {
                if args.limit.is_some_and(|l| printed >= l) {
                    break;
                }
                table.push(vec![
                    json!(batch.aggregate_version),
                    json!(e.event_seq),
                    json!(e.client_seq),
                    json!(format!("{}.{}", e.event_type_major, e.event_type_minor)),
                    if human {
                        json!(output::timestamp_micros(
                            e.event_timestamp.saturating_mul(1000)
                        ))
                    } else {
                        json!(e.event_timestamp)
                    },
                    if human {
                        json!(output::payload_text(&e.event_value))
                    } else {
                        output::payload_json(&e.event_value)
                    },
                ]);
                printed += 1;
            }
        }
        match page.next_aggregate_version {
            Some(v) if !args.page && v > from && args.limit.is_none_or(|l| printed < l) => from = v,
            other => break other,
        }
    };
    print_table(out, format, &table).map_err(CtlError::Output)?;
    if let (true, Some(v)) = (args.page, next) {
        eprintln!("more: continue with --from {v}");
    }
    Ok(())
}

async fn watch(
    settings: &crate::conn::Settings,
    args: &WatchArgs,
    out: &mut dyn Write,
) -> Result<(), CtlError> {
    let set =
        |ids: &[u128]| (!ids.is_empty()).then(|| ids.iter().copied().collect::<BTreeSet<_>>());
    let operations = operation_codes(&args.ops)?;
    let shards = settings.event_client().await?.num_shards().await?;
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Result<_, ClientError>>(1024);
    for shard in 0..shards {
        let client = settings.event_client().await?;
        let mut watch = client
            .watch(WatchRequest {
                correlation_id: None,
                requested_latency_ms: args.latency_ms,
                shard_id: Some(shard),
                orgs: set(&args.org),
                aggregate_types: set(&args.aggregate_type),
                aggregates: set(&args.id),
                operation_types: operations.clone(),
            })
            .await
            .context(|| format!("watch shard {shard}"))?;
        let sender = sender.clone();
        tokio::spawn(async move {
            loop {
                let next = watch.next().await;
                let failed = next.is_err();
                if sender.send(next).await.is_err() || failed {
                    return;
                }
            }
        });
    }
    drop(sender);
    // On stderr in every format: scripts reading stdout can wait for this line to know the
    // watch is acknowledged on every shard.
    eprintln!("watching {shards} shard(s); Ctrl-C stops");
    let mut printed = 0u64;
    while let Some(push) = receiver.recv().await {
        let push = push.context(|| "watch".into())?;
        for e in push.events {
            let key = AggregateKey::new(e.org_id, e.aggregate_type_id, e.aggregate_id);
            let record = Record::new()
                .field("aggregate", key_text(&key))
                .field("operation", operation_name(e.operation))
                .field(
                    "from_version",
                    e.from_aggregate_version.map_or(Value::Null, |v| json!(v)),
                )
                .field(
                    "to_version",
                    e.to_aggregate_version.map_or(Value::Null, |v| json!(v)),
                )
                .field(
                    "keep_from",
                    e.keep_from_aggregate_version
                        .map_or(Value::Null, |v| json!(v)),
                );
            if settings.format == Format::Table {
                let range = match (
                    e.from_aggregate_version,
                    e.to_aggregate_version,
                    e.keep_from_aggregate_version,
                ) {
                    (Some(a), Some(b), _) if a == b => format!(" version {a}"),
                    (Some(a), Some(b), _) => format!(" versions {a}..{b}"),
                    (_, _, Some(k)) => format!(" keep from {k}"),
                    _ => String::new(),
                };
                writeln!(
                    out,
                    "{} {}{range}",
                    key_text(&key),
                    operation_name(e.operation)
                )
            } else {
                serde_json::to_writer(&mut *out, &record.to_json())
                    .map_err(std::io::Error::other)
                    .and_then(|()| writeln!(out))
            }
            .map_err(CtlError::Output)?;
            out.flush().map_err(CtlError::Output)?;
            printed += 1;
            if args.limit.is_some_and(|l| printed >= l) {
                return Ok(());
            }
        }
    }
    Err(CtlError::Failed("every watch ended".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_three_numbers() {
        assert_eq!(parse_key("1/2/3").unwrap(), AggregateKey::new(1, 2, 3));
        let big = format!("{}/0/0", u128::MAX);
        assert_eq!(parse_key(&big).unwrap().org_id, u128::MAX);
        for bad in ["1/2", "1/2/3/4", "a/b/c", "1//3", ""] {
            assert!(matches!(parse_key(bad), Err(CtlError::Usage(_))), "{bad}");
        }
        assert_eq!(key_text(&AggregateKey::new(4, 5, 6)), "4/5/6");
    }

    #[test]
    fn operations_by_name() {
        assert_eq!(operation_codes(&[]).unwrap(), None);
        let set = operation_codes(&["write".into(), "delete".into()])
            .unwrap()
            .unwrap();
        assert_eq!(set, BTreeSet::from([0, 1]));
        assert!(operation_codes(&["read".into()]).is_err());
        assert_eq!(operation_name(5), "create");
        assert_eq!(operation_name(3), "trim");
    }

    #[test]
    fn write_payloads_must_be_json() {
        let args = WriteArgs {
            key: "1/1/1".into(),
            events: vec!["{\"a\":1}".into(), "[1,2]".into()],
            file: None,
            event_type: 1,
            event_minor: 0,
            expected_version: None,
            idempotency_key: None,
            client_id: 1,
            no_create: false,
        };
        assert_eq!(payloads(&args).unwrap().len(), 2);
        let bad = WriteArgs {
            events: vec!["{oops".into()],
            ..args
        };
        assert!(matches!(payloads(&bad), Err(CtlError::Usage(m)) if m.starts_with("event 1")));
    }
}
