//! The stream-protocol subcommands: `stream`, `topic`, `partition`, `send`, `poll`, `tail`,
//! `user`, `token`.
//!
//! Streams, topics and users are named by id or by name: an argument that parses as a number
//! is an id, anything else a name (as Iggy's CLI does).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};
use eddy_client::StreamClient;
use eddy_codec::stream::batch::PolledMessage;
use eddy_codec::stream::user_headers::{HeaderField, UserHeaders, ValueKind};
use eddy_codec::stream::{
    Consumer, GlobalPermissions, Identifier, Message, Partitioning, Permissions, PollingStrategy,
    StreamPermissions, TopicPermissions,
};
use serde_json::{json, Value};

use crate::conn::ConnArgs;
use crate::error::{Context as _, CtlError};
use crate::output::{self, print_record, print_table, Format, Record, Table};

/// Parses a stream, topic, group or user argument: a number is an id, anything else a name.
pub fn ident(text: &str) -> Result<Identifier, CtlError> {
    if let Ok(id) = text.parse::<u32>() {
        return Ok(Identifier::numeric(id));
    }
    Identifier::named(text)
        .map_err(|e| CtlError::Usage(format!("{text:?} is not a valid name: {e}")))
}

// ---- stream ----------------------------------------------------------------------------------

/// `eddy stream ...`
#[derive(Debug, Clone, Args)]
pub struct StreamArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: StreamCommand,
}

/// Stream subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum StreamCommand {
    /// List every stream.
    List,
    /// Show one stream and its topics.
    Get {
        /// Stream id or name.
        stream: String,
    },
    /// Create a stream.
    Create {
        /// Name of the new stream.
        name: String,
    },
    /// Delete a stream with all its topics and messages.
    Delete {
        /// Stream id or name.
        stream: String,
    },
}

fn topic_rows(
    table: &mut Table,
    topics: &[eddy_codec::stream::entities::TopicHeader],
    human: bool,
) {
    for t in topics {
        table.push(vec![
            json!(t.id),
            json!(t.name.as_str()),
            json!(t.partitions_count),
            json!(t.messages_count),
            size(t.size_bytes, human),
            created(t.created_at, human),
        ]);
    }
}

fn size(n: u64, human: bool) -> Value {
    if human {
        json!(output::bytes(n))
    } else {
        json!(n)
    }
}

fn created(micros: u64, human: bool) -> Value {
    if human {
        json!(output::timestamp_micros(micros))
    } else {
        json!(micros)
    }
}

/// Runs `eddy stream`.
pub async fn stream(args: &StreamArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let human = settings.format == Format::Table;
    let mut client = settings.stream_client().await?;
    match &args.command {
        StreamCommand::List => {
            let mut table = Table::new(vec!["id", "name", "topics", "messages", "size", "created"]);
            for s in client.streams().await.context(|| "list streams".into())? {
                table.push(vec![
                    json!(s.id),
                    json!(s.name.as_str()),
                    json!(s.topics_count),
                    json!(s.messages_count),
                    size(s.size_bytes, human),
                    created(s.created_at, human),
                ]);
            }
            print_table(out, settings.format, &table).map_err(CtlError::Output)
        }
        StreamCommand::Get { stream } => {
            let id = ident(stream)?;
            let details = client
                .stream(&id)
                .await
                .context(|| format!("get stream {stream:?}"))?
                .ok_or_else(|| CtlError::NotFound(format!("stream {stream:?}")))?;
            if human {
                let s = &details.stream;
                let record = Record::new()
                    .field("id", s.id)
                    .field("name", s.name.as_str())
                    .field("topics", s.topics_count)
                    .field("messages", s.messages_count)
                    .field("size", output::bytes(s.size_bytes))
                    .field("created", output::timestamp_micros(s.created_at));
                print_record(out, Format::Table, &record).map_err(CtlError::Output)?;
                writeln!(out).map_err(CtlError::Output)?;
                let mut table = Table::new(vec![
                    "topic",
                    "name",
                    "partitions",
                    "messages",
                    "size",
                    "created",
                ]);
                topic_rows(&mut table, &details.topics, true);
                print_table(out, Format::Table, &table).map_err(CtlError::Output)
            } else {
                let mut topics = Table::new(vec![
                    "id",
                    "name",
                    "partitions",
                    "messages",
                    "size",
                    "created",
                ]);
                topic_rows(&mut topics, &details.topics, false);
                let s = &details.stream;
                let record = Record::new()
                    .field("id", s.id)
                    .field("name", s.name.as_str())
                    .field("topics_count", s.topics_count)
                    .field("messages", s.messages_count)
                    .field("size", s.size_bytes)
                    .field("created", s.created_at)
                    .field("topics", Value::Array(topics.objects()));
                print_record(out, settings.format, &record).map_err(CtlError::Output)
            }
        }
        StreamCommand::Create { name } => {
            let created = client
                .create_stream(name)
                .await
                .context(|| format!("create stream {name:?}"))?;
            let record = Record::new()
                .field("id", created.stream.id)
                .field("name", created.stream.name.as_str());
            print_record(out, settings.format, &record).map_err(CtlError::Output)
        }
        StreamCommand::Delete { stream } => {
            output::act(
                out,
                settings.format,
                client.delete_stream(&ident(stream)?),
                format!("delete stream {stream:?}"),
                format!("deleted stream {stream}"),
            )
            .await
        }
    }
}

// ---- topic -----------------------------------------------------------------------------------

/// `eddy topic ...`
#[derive(Debug, Clone, Args)]
pub struct TopicArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: TopicCommand,
}

/// Topic subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum TopicCommand {
    /// List the topics of a stream.
    List {
        /// Stream id or name.
        stream: String,
    },
    /// Show one topic and its partitions.
    Get {
        /// Stream id or name.
        stream: String,
        /// Topic id or name.
        topic: String,
    },
    /// Create a topic.
    Create {
        /// Stream id or name.
        stream: String,
        /// Name of the new topic.
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Acknowledge sends before they are on disk (topic option enforce_fsync = false).
        #[arg(long)]
        no_fsync: bool,
        /// Retention, e.g. `7d`, `1h 30m`, or `unlimited` (topic option message_expiry).
        #[arg(long, value_name = "DURATION")]
        message_expiry: Option<String>,
        /// Size cap, e.g. `10GiB` or `unlimited` (topic option max_topic_size).
        #[arg(long, value_name = "SIZE")]
        max_size: Option<String>,
        /// Any other topic option as KEY=VALUE (see DESCRIBE_OPTIONS; repeatable).
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
    },
    /// Delete a topic and its messages.
    Delete {
        /// Stream id or name.
        stream: String,
        /// Topic id or name.
        topic: String,
    },
}

/// The options block of `topic create`: every option as text, which the server parses
/// strictly and refuses with a code naming the bad one.
pub fn topic_options(
    no_fsync: bool,
    message_expiry: Option<&str>,
    max_size: Option<&str>,
    extra: &[String],
) -> Result<eddy_options::OptionsBlock, CtlError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if no_fsync {
        pairs.push(("enforce_fsync".into(), "false".into()));
    }
    if let Some(v) = message_expiry {
        pairs.push(("message_expiry".into(), v.into()));
    }
    if let Some(v) = max_size {
        pairs.push(("max_topic_size".into(), v.into()));
    }
    for option in extra {
        let (k, v) = option
            .split_once('=')
            .ok_or_else(|| CtlError::Usage(format!("--option {option:?}: expected KEY=VALUE")))?;
        pairs.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    eddy_options::OptionsBlock::from_entries(
        pairs
            .iter()
            .map(|(k, v)| (k.as_str(), ValueKind::String, v.as_bytes())),
    )
    .map_err(|e| CtlError::Usage(format!("topic options: {e}")))
}

/// Prints a topic's details: its figures and options, then its partitions.
fn print_topic(
    out: &mut dyn Write,
    format: Format,
    details: &eddy_codec::stream::entities::TopicDetails,
) -> Result<(), CtlError> {
    let human = format == Format::Table;
    let t = &details.topic;
    let mut partitions = Table::new(vec![
        "partition",
        "messages",
        "current_offset",
        "segments",
        "size",
    ]);
    for p in &details.partitions {
        partitions.push(vec![
            json!(p.id),
            json!(p.messages_count),
            json!(p.current_offset),
            json!(p.segments_count),
            size(p.size_bytes, human),
        ]);
    }
    let options: BTreeMap<String, Value> = t
        .derived_options
        .entries()
        .chain(t.options.entries())
        .map(|e| {
            let kind = ValueKind::from_code(e.kind);
            (e.key.to_owned(), output::typed_value(kind, e.value))
        })
        .collect();
    let mut record = Record::new()
        .field("id", t.id)
        .field("name", t.name.as_str())
        .field("partitions_count", t.partitions_count)
        .field("messages", t.messages_count)
        .field("size", size(t.size_bytes, human))
        .field("created", created(t.created_at, human));
    if human {
        for (k, v) in &options {
            record
                .fields
                .push(("option", json!(format!("{k} = {}", output::cell(v)))));
        }
        print_record(out, Format::Table, &record).map_err(CtlError::Output)?;
        writeln!(out).map_err(CtlError::Output)?;
        print_table(out, Format::Table, &partitions).map_err(CtlError::Output)
    } else {
        let record = record
            .field("options", Value::Object(options.into_iter().collect()))
            .field("partitions", Value::Array(partitions.objects()));
        print_record(out, format, &record).map_err(CtlError::Output)
    }
}

/// Runs `eddy topic`.
pub async fn topic(args: &TopicArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let human = settings.format == Format::Table;
    let mut client = settings.stream_client().await?;
    match &args.command {
        TopicCommand::List { stream } => {
            let topics = client
                .topics(&ident(stream)?)
                .await
                .context(|| format!("list topics of stream {stream:?}"))?;
            let mut table = Table::new(vec![
                "id",
                "name",
                "partitions",
                "messages",
                "size",
                "created",
            ]);
            topic_rows(&mut table, &topics, human);
            print_table(out, settings.format, &table).map_err(CtlError::Output)
        }
        TopicCommand::Get { stream, topic } => {
            let details = client
                .topic(&ident(stream)?, &ident(topic)?)
                .await
                .context(|| format!("get topic {topic:?} of stream {stream:?}"))?
                .ok_or_else(|| {
                    CtlError::NotFound(format!("topic {topic:?} in stream {stream:?}"))
                })?;
            print_topic(out, settings.format, &details)
        }
        TopicCommand::Create {
            stream,
            name,
            partitions,
            no_fsync,
            message_expiry,
            max_size,
            options,
        } => {
            let block = topic_options(
                *no_fsync,
                message_expiry.as_deref(),
                max_size.as_deref(),
                options,
            )?;
            let created = client
                .create_topic(&ident(stream)?, name, *partitions, block)
                .await
                .context(|| format!("create topic {name:?} in stream {stream:?}"))?;
            let record = Record::new()
                .field("id", created.topic.id)
                .field("name", created.topic.name.as_str())
                .field("partitions", created.topic.partitions_count);
            print_record(out, settings.format, &record).map_err(CtlError::Output)
        }
        TopicCommand::Delete { stream, topic } => {
            output::act(
                out,
                settings.format,
                client.delete_topic(&ident(stream)?, &ident(topic)?),
                format!("delete topic {topic:?} of stream {stream:?}"),
                format!("deleted topic {topic} of stream {stream}"),
            )
            .await
        }
    }
}

// ---- partition -------------------------------------------------------------------------------

/// `eddy partition ...`
#[derive(Debug, Clone, Args)]
pub struct PartitionArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: PartitionCommand,
}

/// Partition subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum PartitionCommand {
    /// Add partitions after the highest one.
    Create {
        /// Stream id or name.
        stream: String,
        /// Topic id or name.
        topic: String,
        /// How many to add.
        #[arg(default_value_t = 1)]
        count: u32,
    },
    /// Remove the highest partitions with their messages.
    Delete {
        /// Stream id or name.
        stream: String,
        /// Topic id or name.
        topic: String,
        /// How many to remove.
        #[arg(default_value_t = 1)]
        count: u32,
    },
}

/// Runs `eddy partition`.
pub async fn partition(args: &PartitionArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let mut client = settings.stream_client().await?;
    match &args.command {
        PartitionCommand::Create {
            stream,
            topic,
            count,
        } => {
            output::act(
                out,
                settings.format,
                client.create_partitions(&ident(stream)?, &ident(topic)?, *count),
                format!("add {count} partitions to topic {topic:?} of stream {stream:?}"),
                format!("added {count} partitions to {stream}/{topic}"),
            )
            .await
        }
        PartitionCommand::Delete {
            stream,
            topic,
            count,
        } => {
            output::act(
                out,
                settings.format,
                client.delete_partitions(&ident(stream)?, &ident(topic)?, *count),
                format!("remove {count} partitions of topic {topic:?} of stream {stream:?}"),
                format!("removed {count} partitions of {stream}/{topic}"),
            )
            .await
        }
    }
}

// ---- send ------------------------------------------------------------------------------------

/// `eddy send`
#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Stream id or name.
    pub stream: String,
    /// Topic id or name.
    pub topic: String,
    /// Messages, one per argument; without any (and without --file) each line of stdin is a
    /// message.
    pub messages: Vec<String>,
    /// Read messages from FILE, one per line (`-` is stdin).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Send to this partition.
    #[arg(long, conflicts_with = "key")]
    pub partition: Option<u32>,
    /// Message key: the same key always lands on the same partition.
    #[arg(long)]
    pub key: Option<String>,
    /// User header KEY=VALUE on every message (string values; repeatable).
    #[arg(long = "header", short = 'H', value_name = "KEY=VALUE")]
    pub headers: Vec<String>,
    /// Messages per batch (one request each).
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
}

/// The user-header block of `--header` arguments.
pub fn header_block(headers: &[String]) -> Result<Bytes, CtlError> {
    if headers.is_empty() {
        return Ok(Bytes::new());
    }
    let mut block = UserHeaders::new();
    for h in headers {
        let (k, v) = h
            .split_once('=')
            .ok_or_else(|| CtlError::Usage(format!("--header {h:?}: expected KEY=VALUE")))?;
        let value =
            HeaderField::string(v).map_err(|e| CtlError::Usage(format!("--header {h:?}: {e}")))?;
        block
            .insert(k, value)
            .map_err(|e| CtlError::Usage(format!("--header {h:?}: {e}")))?;
    }
    block
        .encode()
        .map(Bytes::from)
        .map_err(|e| CtlError::Usage(format!("--header: {e}")))
}

/// Runs `eddy send`.
pub async fn send(args: &SendArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    if args.batch_size == 0 {
        return Err(CtlError::Usage("--batch-size must be at least 1".into()));
    }
    let partitioning = match (&args.partition, &args.key) {
        (Some(p), _) => Partitioning::PartitionId(*p),
        (None, Some(key)) => Partitioning::messages_key(key.as_bytes())
            .map_err(|e| CtlError::Usage(format!("--key: {e}")))?,
        (None, None) => Partitioning::Balanced,
    };
    let headers = header_block(&args.headers)?;
    let payloads = crate::input::lines(&args.messages, args.file.as_deref())?;
    if payloads.is_empty() {
        return Err(CtlError::Usage("no messages to send".into()));
    }
    let (stream, topic) = (ident(&args.stream)?, ident(&args.topic)?);
    let mut client = settings.stream_client().await?;
    let mut table = Table::new(vec!["partition", "first_offset", "messages"]);
    for chunk in payloads.chunks(args.batch_size) {
        let now = eddy_client::stream::now_micros();
        let messages: Vec<Message> = chunk
            .iter()
            .map(|p| Message {
                id: rand::random::<u128>(),
                origin_timestamp: now,
                payload: Bytes::copy_from_slice(p.as_bytes()),
                user_headers: headers.clone(),
            })
            .collect();
        let reply = client
            .send(&stream, &topic, &partitioning, &messages)
            .await
            .context(|| format!("send to topic {} of stream {}", args.topic, args.stream))?;
        for c in reply.confirmations {
            table.push(vec![
                json!(c.partition_id),
                json!(c.base_offset),
                json!(chunk.len()),
            ]);
        }
    }
    if settings.format == Format::Table {
        writeln!(
            out,
            "sent {} messages to {}/{}",
            payloads.len(),
            args.stream,
            args.topic
        )
        .map_err(CtlError::Output)?;
    }
    print_table(out, settings.format, &table).map_err(CtlError::Output)
}

// ---- poll and tail ---------------------------------------------------------------------------

/// `eddy poll`
// The five strategy flags are one clap group (at most one is given), not a state machine.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Args)]
pub struct PollArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Stream id or name.
    pub stream: String,
    /// Topic id or name.
    pub topic: String,
    /// Partition to read [default: 0, or the group's assignment].
    #[arg(long)]
    pub partition: Option<u32>,
    /// Start at this offset.
    #[arg(long, group = "strategy")]
    pub offset: Option<u64>,
    /// Start at messages appended at or after this time (microseconds since the epoch).
    #[arg(long, group = "strategy", value_name = "MICROS")]
    pub timestamp: Option<u64>,
    /// Start at the oldest retained message (the default without --group).
    #[arg(long, group = "strategy")]
    pub first: bool,
    /// The newest --count messages.
    #[arg(long, group = "strategy")]
    pub last: bool,
    /// After the consumer's stored offset (the default with --group).
    #[arg(long, group = "strategy")]
    pub next: bool,
    /// Most messages to return.
    #[arg(long, short = 'n', default_value_t = 10)]
    pub count: u32,
    /// Consumer id or name whose offset --next and --auto-commit use.
    #[arg(long, default_value = "0", conflicts_with = "group")]
    pub consumer: String,
    /// Poll as a member of this consumer group (joined for the call).
    #[arg(long)]
    pub group: Option<String>,
    /// Store the offset of the last message returned.
    #[arg(long)]
    pub auto_commit: bool,
}

/// One polled message as a row: partition, offset, timestamp, id, headers, payload.
fn message_row(partition: u32, m: &PolledMessage, human: bool) -> Vec<Value> {
    let headers = UserHeaders::decode(&m.user_headers).map_or(Value::Null, |h| {
        Value::Object(
            h.0.iter()
                .map(|(k, v)| (header_text(k), header_value(v)))
                .collect(),
        )
    });
    vec![
        json!(partition),
        json!(m.offset),
        created(m.timestamp, human),
        json!(format!("{:032x}", m.id)),
        if human && headers.as_object().is_some_and(serde_json::Map::is_empty) {
            Value::Null
        } else {
            headers
        },
        json!(output::payload_text(&m.payload)),
    ]
}

fn header_text(field: &HeaderField) -> String {
    match header_value(field) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// A user-header value as JSON.
fn header_value(field: &HeaderField) -> Value {
    output::typed_value(Some(field.kind()), field.as_bytes())
}

const MESSAGE_COLUMNS: [&str; 6] = [
    "partition",
    "offset",
    "timestamp",
    "id",
    "headers",
    "payload",
];

/// Runs `eddy poll`.
pub async fn poll(args: &PollArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let (stream, topic) = (ident(&args.stream)?, ident(&args.topic)?);
    let strategy = match (
        args.offset,
        args.timestamp,
        args.first,
        args.last,
        args.next,
    ) {
        (Some(o), ..) => PollingStrategy::Offset(o),
        (_, Some(t), ..) => PollingStrategy::Timestamp(t),
        (_, _, _, true, _) => PollingStrategy::Last,
        (_, _, _, _, true) => PollingStrategy::Next,
        (_, _, true, ..) => PollingStrategy::First,
        _ if args.group.is_some() => PollingStrategy::Next,
        _ => PollingStrategy::First,
    };
    let mut client = settings.stream_client().await?;
    let consumer = match &args.group {
        Some(group) => {
            let group_id = ident(group)?;
            client
                .join_group(&stream, &topic, &group_id)
                .await
                .context(|| format!("join consumer group {group:?}"))?;
            Consumer::group(group_id)
        }
        None => Consumer::new(ident(&args.consumer)?),
    };
    let partition = if args.group.is_some() {
        args.partition
    } else {
        Some(args.partition.unwrap_or(0))
    };
    let reply = client
        .poll_messages(
            &stream,
            &topic,
            partition,
            &consumer,
            strategy,
            args.count,
            args.auto_commit,
        )
        .await
        .context(|| format!("poll topic {} of stream {}", args.topic, args.stream))?;
    let human = settings.format == Format::Table;
    let mut table = Table::new(MESSAGE_COLUMNS.to_vec());
    for m in reply.messages() {
        table.push(message_row(reply.partition_id, &m, human));
    }
    print_table(out, settings.format, &table).map_err(CtlError::Output)
}

/// `eddy tail`
#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Stream id or name.
    pub stream: String,
    /// Topic id or name.
    pub topic: String,
    /// Messages to show first, from the end of each partition.
    #[arg(long, short = 'n', default_value_t = 10)]
    pub lines: u64,
    /// Keep printing new messages as they arrive.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only this partition [default: all].
    #[arg(long)]
    pub partition: Option<u32>,
    /// Milliseconds between polls while following.
    #[arg(long, default_value_t = 200)]
    pub interval_ms: u64,
    /// Stop after printing this many messages.
    #[arg(long)]
    pub limit: Option<u64>,
}

/// Runs `eddy tail`: the last messages of each partition, then (with `-f`) everything new.
/// Prints one line (table) or one JSON object (json, jsonl) per message as it comes.
pub async fn tail(args: &TailArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let (stream, topic) = (ident(&args.stream)?, ident(&args.topic)?);
    let mut client = settings.stream_client().await?;
    let details = client
        .topic(&stream, &topic)
        .await
        .context(|| format!("get topic {} of stream {}", args.topic, args.stream))?
        .ok_or_else(|| {
            CtlError::NotFound(format!(
                "topic {:?} in stream {:?}",
                args.topic, args.stream
            ))
        })?;
    let mut next: BTreeMap<u32, u64> = details
        .partitions
        .iter()
        .filter(|p| args.partition.is_none_or(|only| only == p.id))
        .map(|p| {
            let end = if p.messages_count == 0 {
                0
            } else {
                p.current_offset + 1
            };
            (p.id, end.saturating_sub(args.lines))
        })
        .collect();
    if next.is_empty() {
        return Err(CtlError::NotFound(format!(
            "partition {:?}",
            args.partition
        )));
    }
    let human = settings.format == Format::Table;
    let consumer = Consumer::new(Identifier::numeric(0));
    let mut printed = 0u64;
    loop {
        let mut got_any = false;
        for (partition, offset) in &mut next {
            let reply = client
                .poll_messages(
                    &stream,
                    &topic,
                    Some(*partition),
                    &consumer,
                    PollingStrategy::Offset(*offset),
                    1000,
                    false,
                )
                .await
                .context(|| format!("poll partition {partition}"))?;
            for m in reply.messages() {
                if m.offset < *offset {
                    continue;
                }
                *offset = m.offset + 1;
                got_any = true;
                let row = message_row(*partition, &m, human);
                if human {
                    let headers = row[4]
                        .as_object()
                        .map_or(String::new(), |h| format!(" {}", Value::Object(h.clone())));
                    writeln!(
                        out,
                        "{}:{} {}{} {}",
                        row[0],
                        row[1],
                        output::cell(&row[2]),
                        headers,
                        output::cell(&row[5])
                    )
                } else {
                    let mut table = Table::new(MESSAGE_COLUMNS.to_vec());
                    table.push(row);
                    print_table(out, Format::Jsonl, &table)
                }
                .map_err(CtlError::Output)?;
                printed += 1;
                if args.limit.is_some_and(|l| printed >= l) {
                    return out.flush().map_err(CtlError::Output);
                }
            }
        }
        out.flush().map_err(CtlError::Output)?;
        if !args.follow {
            return Ok(());
        }
        if !got_any {
            tokio::time::sleep(Duration::from_millis(args.interval_ms.max(10))).await;
        }
    }
}

// ---- users and permissions -------------------------------------------------------------------

/// `eddy user ...`
#[derive(Debug, Clone, Args)]
pub struct UserArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: UserCommand,
}

/// Who may do what: `--global LIST`, `--stream STREAM=LIST`, `--topic STREAM/TOPIC=LIST`, where
/// LIST is comma-separated permission names or `all`.
#[derive(Debug, Clone, Default, Args)]
pub struct PermissionArgs {
    /// Server-wide: manage_servers, read_servers, manage_users, read_users, manage_streams,
    /// read_streams, manage_topics, read_topics, poll_messages, send_messages, or all.
    #[arg(long, value_name = "LIST")]
    pub global: Option<String>,
    /// On one stream: manage_stream, read_stream, manage_topics, read_topics, poll_messages,
    /// send_messages, or all (repeatable).
    #[arg(long = "stream", value_name = "STREAM=LIST")]
    pub streams: Vec<String>,
    /// On one topic: manage_topic, read_topic, poll_messages, send_messages, or all
    /// (repeatable).
    #[arg(long = "topic", value_name = "STREAM/TOPIC=LIST")]
    pub topics: Vec<String>,
}

/// User subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum UserCommand {
    /// List users.
    List,
    /// Show a user and its permissions.
    Get {
        /// User id or name.
        user: String,
    },
    /// Create an active user.
    Create {
        /// Username (3 to 50 bytes).
        #[arg(value_name = "USERNAME")]
        name: String,
        /// Password (3 to 100 bytes); prefer EDDY_NEW_PASSWORD to the argument.
        #[arg(env = "EDDY_NEW_PASSWORD", hide_env_values = true)]
        new_password: String,
        /// Permissions of the new user.
        #[command(flatten)]
        permissions: PermissionArgs,
    },
    /// Delete a user.
    Delete {
        /// User id or name.
        user: String,
    },
    /// Change a user's password.
    Password {
        /// User id or name.
        user: String,
        /// The current password.
        #[arg(long, env = "EDDY_CURRENT_PASSWORD", hide_env_values = true)]
        current: String,
        /// The new password.
        #[arg(long, env = "EDDY_NEW_PASSWORD", hide_env_values = true)]
        new: String,
    },
    /// Replace a user's permissions (none given: no permissions at all).
    Permissions {
        /// User id or name.
        user: String,
        /// The new permissions.
        #[command(flatten)]
        permissions: PermissionArgs,
    },
}

fn names(list: &str) -> Vec<String> {
    list.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn unknown(kind: &str, name: &str, valid: &[&str]) -> CtlError {
    CtlError::Usage(format!(
        "unknown {kind} permission {name:?}; valid: {}, all",
        valid.join(", ")
    ))
}

/// Global permissions from names.
pub fn global_permissions(list: &str) -> Result<GlobalPermissions, CtlError> {
    const VALID: [&str; 10] = [
        "manage_servers",
        "read_servers",
        "manage_users",
        "read_users",
        "manage_streams",
        "read_streams",
        "manage_topics",
        "read_topics",
        "poll_messages",
        "send_messages",
    ];
    let mut g = GlobalPermissions::default();
    for name in names(list) {
        match name.as_str() {
            "all" => g = GlobalPermissions::ALL,
            "manage_servers" => g.manage_servers = true,
            "read_servers" => g.read_servers = true,
            "manage_users" => g.manage_users = true,
            "read_users" => g.read_users = true,
            "manage_streams" => g.manage_streams = true,
            "read_streams" => g.read_streams = true,
            "manage_topics" => g.manage_topics = true,
            "read_topics" => g.read_topics = true,
            "poll_messages" => g.poll_messages = true,
            "send_messages" => g.send_messages = true,
            other => return Err(unknown("global", other, &VALID)),
        }
    }
    Ok(g)
}

fn stream_permissions(list: &str, into: &mut StreamPermissions) -> Result<(), CtlError> {
    const VALID: [&str; 6] = [
        "manage_stream",
        "read_stream",
        "manage_topics",
        "read_topics",
        "poll_messages",
        "send_messages",
    ];
    for name in names(list) {
        match name.as_str() {
            "all" => {
                into.manage_stream = true;
                into.read_stream = true;
                into.manage_topics = true;
                into.read_topics = true;
                into.poll_messages = true;
                into.send_messages = true;
            }
            "manage_stream" => into.manage_stream = true,
            "read_stream" => into.read_stream = true,
            "manage_topics" => into.manage_topics = true,
            "read_topics" => into.read_topics = true,
            "poll_messages" => into.poll_messages = true,
            "send_messages" => into.send_messages = true,
            other => return Err(unknown("stream", other, &VALID)),
        }
    }
    Ok(())
}

fn topic_permissions(list: &str) -> Result<TopicPermissions, CtlError> {
    const VALID: [&str; 4] = [
        "manage_topic",
        "read_topic",
        "poll_messages",
        "send_messages",
    ];
    let mut t = TopicPermissions::default();
    for name in names(list) {
        match name.as_str() {
            "all" => {
                t = TopicPermissions {
                    manage_topic: true,
                    read_topic: true,
                    poll_messages: true,
                    send_messages: true,
                };
            }
            "manage_topic" => t.manage_topic = true,
            "read_topic" => t.read_topic = true,
            "poll_messages" => t.poll_messages = true,
            "send_messages" => t.send_messages = true,
            other => return Err(unknown("topic", other, &VALID)),
        }
    }
    Ok(t)
}

/// Resolves a stream (and topic) argument to numeric ids: permissions are keyed by id.
async fn stream_id(client: &mut StreamClient, stream: &str) -> Result<u32, CtlError> {
    let id = ident(stream)?;
    if let Some(n) = id.as_numeric() {
        return Ok(n);
    }
    Ok(client
        .stream(&id)
        .await?
        .ok_or_else(|| CtlError::NotFound(format!("stream {stream:?}")))?
        .stream
        .id)
}

async fn topic_id(client: &mut StreamClient, stream: u32, topic: &str) -> Result<u32, CtlError> {
    let id = ident(topic)?;
    if let Some(n) = id.as_numeric() {
        return Ok(n);
    }
    Ok(client
        .topic(&Identifier::numeric(stream), &id)
        .await?
        .ok_or_else(|| CtlError::NotFound(format!("topic {topic:?}")))?
        .topic
        .id)
}

impl PermissionArgs {
    /// Whether any permission was given.
    pub fn is_empty(&self) -> bool {
        self.global.is_none() && self.streams.is_empty() && self.topics.is_empty()
    }

    /// The permissions, resolving stream and topic names through `client`.
    pub async fn build(&self, client: &mut StreamClient) -> Result<Permissions, CtlError> {
        let mut p = Permissions {
            global: match &self.global {
                Some(list) => global_permissions(list)?,
                None => GlobalPermissions::default(),
            },
            streams: BTreeMap::new(),
        };
        for spec in &self.streams {
            let (stream, list) = spec.split_once('=').ok_or_else(|| {
                CtlError::Usage(format!("--stream {spec:?}: expected STREAM=LIST"))
            })?;
            let id = stream_id(client, stream).await?;
            stream_permissions(list, p.streams.entry(id).or_default())?;
        }
        for spec in &self.topics {
            let (path, list) = spec.split_once('=').ok_or_else(|| {
                CtlError::Usage(format!("--topic {spec:?}: expected STREAM/TOPIC=LIST"))
            })?;
            let (stream, topic) = path.split_once('/').ok_or_else(|| {
                CtlError::Usage(format!("--topic {spec:?}: expected STREAM/TOPIC=LIST"))
            })?;
            let sid = stream_id(client, stream).await?;
            let tid = topic_id(client, sid, topic).await?;
            let grants = topic_permissions(list)?;
            p.streams.entry(sid).or_default().topics.insert(tid, grants);
        }
        Ok(p)
    }
}

/// Permissions as JSON: the names that are granted.
pub fn permissions_json(p: Option<&Permissions>) -> Value {
    let Some(p) = p else {
        return Value::Null;
    };
    let g = &p.global;
    let granted = |pairs: &[(&str, bool)]| -> Vec<Value> {
        pairs
            .iter()
            .filter(|(_, on)| *on)
            .map(|(n, _)| json!(n))
            .collect()
    };
    let global = granted(&[
        ("manage_servers", g.manage_servers),
        ("read_servers", g.read_servers),
        ("manage_users", g.manage_users),
        ("read_users", g.read_users),
        ("manage_streams", g.manage_streams),
        ("read_streams", g.read_streams),
        ("manage_topics", g.manage_topics),
        ("read_topics", g.read_topics),
        ("poll_messages", g.poll_messages),
        ("send_messages", g.send_messages),
    ]);
    let streams: serde_json::Map<String, Value> = p
        .streams
        .iter()
        .map(|(id, s)| {
            let topics: serde_json::Map<String, Value> = s
                .topics
                .iter()
                .map(|(tid, t)| {
                    (
                        tid.to_string(),
                        Value::Array(granted(&[
                            ("manage_topic", t.manage_topic),
                            ("read_topic", t.read_topic),
                            ("poll_messages", t.poll_messages),
                            ("send_messages", t.send_messages),
                        ])),
                    )
                })
                .collect();
            (
                id.to_string(),
                json!({
                    "granted": granted(&[
                        ("manage_stream", s.manage_stream),
                        ("read_stream", s.read_stream),
                        ("manage_topics", s.manage_topics),
                        ("read_topics", s.read_topics),
                        ("poll_messages", s.poll_messages),
                        ("send_messages", s.send_messages),
                    ]),
                    "topics": topics,
                }),
            )
        })
        .collect();
    json!({ "global": global, "streams": streams })
}

fn status_name(status: u8) -> &'static str {
    if status == eddy_codec::stream::commands::create_user::USER_STATUS_INACTIVE {
        "inactive"
    } else {
        "active"
    }
}

/// A user's details as a record; for people, its permissions one line per stream and topic.
fn user_record(details: &eddy_codec::stream::entities::UserDetails, human: bool) -> Record {
    let permissions = permissions_json(details.permissions.as_ref());
    let record = Record::new()
        .field("id", details.user.id)
        .field("username", details.user.username.as_str())
        .field("status", status_name(details.user.status))
        .field("created", created(details.user.created_at, human));
    if human {
        let global = permissions["global"]
            .as_array()
            .map(|g| g.iter().map(output::cell).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        let mut r = record.field(
            "global",
            if global.is_empty() {
                "-".into()
            } else {
                global
            },
        );
        let list = |v: &Value| {
            v.as_array()
                .map(|a| a.iter().map(output::cell).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        };
        if let Some(streams) = permissions["streams"].as_object() {
            for (id, s) in streams {
                r.fields
                    .push(("stream", json!(format!("{id}: {}", list(&s["granted"])))));
                if let Some(topics) = s["topics"].as_object() {
                    for (tid, t) in topics {
                        r.fields
                            .push(("topic", json!(format!("{id}/{tid}: {}", list(t)))));
                    }
                }
            }
        }
        r
    } else {
        record.field("permissions", permissions)
    }
}

/// Runs `eddy user`.
pub async fn user(args: &UserArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let human = settings.format == Format::Table;
    let mut client = settings.stream_client().await?;
    match &args.command {
        UserCommand::List => {
            let mut table = Table::new(vec!["id", "username", "status", "created"]);
            for u in client.users().await.context(|| "list users".into())? {
                table.push(vec![
                    json!(u.id),
                    json!(u.username.as_str()),
                    json!(status_name(u.status)),
                    created(u.created_at, human),
                ]);
            }
            print_table(out, settings.format, &table).map_err(CtlError::Output)
        }
        UserCommand::Get { user } => {
            let details = client
                .user(&ident(user)?)
                .await
                .context(|| format!("get user {user:?}"))?
                .ok_or_else(|| CtlError::NotFound(format!("user {user:?}")))?;
            let record = user_record(&details, human);
            print_record(out, settings.format, &record).map_err(CtlError::Output)
        }
        UserCommand::Create {
            name: username,
            new_password,
            permissions,
        } => {
            let p = if permissions.is_empty() {
                None
            } else {
                Some(permissions.build(&mut client).await?)
            };
            let created = client
                .create_user(username, new_password, p)
                .await
                .context(|| format!("create user {username:?}"))?;
            let record = Record::new()
                .field("id", created.user.id)
                .field("username", created.user.username.as_str());
            print_record(out, settings.format, &record).map_err(CtlError::Output)
        }
        UserCommand::Delete { user } => {
            output::act(
                out,
                settings.format,
                client.delete_user(&ident(user)?),
                format!("delete user {user:?}"),
                format!("deleted user {user}"),
            )
            .await
        }
        UserCommand::Password { user, current, new } => {
            output::act(
                out,
                settings.format,
                client.change_password(&ident(user)?, current, new),
                format!("change the password of user {user:?}"),
                format!("changed the password of user {user}"),
            )
            .await
        }
        UserCommand::Permissions { user, permissions } => {
            let p = if permissions.is_empty() {
                None
            } else {
                Some(permissions.build(&mut client).await?)
            };
            output::act(
                out,
                settings.format,
                client.update_permissions(&ident(user)?, p),
                format!("update the permissions of user {user:?}"),
                format!("updated the permissions of user {user}"),
            )
            .await
        }
    }
}

// ---- tokens ----------------------------------------------------------------------------------

/// `eddy token ...`
#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// Personal access token subcommands (tokens of the logged-in user).
#[derive(Debug, Clone, Subcommand)]
pub enum TokenCommand {
    /// List your tokens (names and expiry; the secrets are never shown again).
    List,
    /// Create a token and print it (the only time it is shown).
    Create {
        /// Token name.
        name: String,
        /// Lifetime in seconds, or `never` [default: the server's].
        #[arg(long)]
        expiry: Option<String>,
    },
    /// Delete a token.
    Delete {
        /// Token name.
        name: String,
    },
}

/// `--expiry` in microseconds: seconds, `never` (`u64::MAX`), absent = server default (0).
pub fn expiry_micros(expiry: Option<&str>) -> Result<u64, CtlError> {
    match expiry {
        None => Ok(0),
        Some("never" | "unlimited") => Ok(u64::MAX),
        Some(secs) => secs
            .parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(|s| s.saturating_mul(1_000_000))
            .ok_or_else(|| CtlError::Usage(format!("--expiry {secs:?}: seconds (> 0) or `never`"))),
    }
}

/// Runs `eddy token`.
pub async fn token(args: &TokenArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let settings = args.conn.resolve()?;
    let human = settings.format == Format::Table;
    let mut client = settings.stream_client().await?;
    match &args.command {
        TokenCommand::List => {
            let mut table = Table::new(vec!["name", "expires"]);
            for t in client.tokens().await.context(|| "list tokens".into())? {
                let expires = match (t.expiry_at, human) {
                    (0, true) => json!("never"),
                    (0, false) => Value::Null,
                    (at, _) => created(at, human),
                };
                table.push(vec![json!(t.name.as_str()), expires]);
            }
            print_table(out, settings.format, &table).map_err(CtlError::Output)
        }
        TokenCommand::Create { name, expiry } => {
            let micros = expiry_micros(expiry.as_deref())?;
            let token = client
                .create_token(name, micros)
                .await
                .context(|| format!("create token {name:?}"))?;
            match settings.format {
                Format::Table => writeln!(out, "{token}").map_err(CtlError::Output),
                format => print_record(
                    out,
                    format,
                    &Record::new()
                        .field("name", name.as_str())
                        .field("token", token),
                )
                .map_err(CtlError::Output),
            }
        }
        TokenCommand::Delete { name } => {
            output::act(
                out,
                settings.format,
                client.delete_token(name),
                format!("delete token {name:?}"),
                format!("deleted token {name}"),
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_ids_and_the_rest_names() {
        assert_eq!(ident("7").unwrap(), Identifier::numeric(7));
        assert_eq!(ident("orders").unwrap().as_name(), Some("orders"));
        assert!(matches!(ident(""), Err(CtlError::Usage(_))));
    }

    #[test]
    fn permission_lists_parse() {
        let g = global_permissions("read_streams, poll_messages").unwrap();
        assert!(g.read_streams && g.poll_messages && !g.manage_users);
        assert_eq!(global_permissions("all").unwrap(), GlobalPermissions::ALL);
        assert!(
            matches!(global_permissions("read_stream"), Err(CtlError::Usage(m)) if m.contains("read_streams"))
        );
        let mut s = StreamPermissions::default();
        stream_permissions("send_messages", &mut s).unwrap();
        assert!(s.send_messages && !s.read_stream);
        assert!(topic_permissions("all").unwrap().manage_topic);
        assert!(topic_permissions("nope").is_err());
        let p = Permissions {
            global: g,
            streams: BTreeMap::from([(3, s)]),
        };
        let json = permissions_json(Some(&p));
        assert_eq!(json["global"], json!(["read_streams", "poll_messages"]));
        assert_eq!(json["streams"]["3"]["granted"], json!(["send_messages"]));
        assert_eq!(permissions_json(None), Value::Null);
    }

    #[test]
    fn headers_options_and_expiry() {
        let block = header_block(&["source=cli".into(), "kind=test".into()]).unwrap();
        let decoded = UserHeaders::decode(&block).unwrap();
        assert_eq!(decoded.0.len(), 2);
        assert!(header_block(&["novalue".into()]).is_err());
        assert!(header_block(&[]).unwrap().is_empty());
        let opts = topic_options(true, Some("1h"), None, &["segment_size=16MiB".into()]).unwrap();
        let keys: Vec<&str> = opts.entries().map(|e| e.key).collect();
        assert_eq!(keys, ["enforce_fsync", "message_expiry", "segment_size"]);
        assert!(topic_options(false, None, None, &["bad".into()]).is_err());
        assert_eq!(expiry_micros(None).unwrap(), 0);
        assert_eq!(expiry_micros(Some("never")).unwrap(), u64::MAX);
        assert_eq!(expiry_micros(Some("60")).unwrap(), 60_000_000);
        assert!(expiry_micros(Some("0")).is_err());
        assert!(expiry_micros(Some("soon")).is_err());
    }

    #[test]
    fn header_values_render_by_kind() {
        assert_eq!(header_value(&HeaderField::string("x").unwrap()), json!("x"));
        assert_eq!(header_value(&HeaderField::uint64(42)), json!(42));
        assert_eq!(header_value(&HeaderField::bool(true)), json!(true));
    }
}
