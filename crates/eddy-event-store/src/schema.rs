//! Schemas: compilation at registration, lookup and payload validation on write (event
//! protocol §4.10), owned by the store beside the schemas it stores.
//!
//! Schemas are immutable once registered and live on shard 0; this module keeps the compiled
//! form of every key it has looked up (and the keys that have none) so a write validates
//! without touching shard 0 after the first lookup. The cache of absent keys is bounded by
//! [`MAX_CACHED_KEYS`]; registration replaces an absent entry.
//!
//! Formats:
//! * 0, JSON Schema: draft from `$schema`, compiled by the `jsonschema` crate without any remote
//!   or file `$ref` resolution, with the linear-time `regex` engine for `pattern` and
//!   `patternProperties` (no backtracking, so no pattern makes a match exponential; patterns
//!   that need look-around or back-references are refused at registration).
//! * 1, Avro: schema JSON parsed by `apache-avro`; a payload must start with one binary datum of
//!   it (checked by the bounded walk of `schema/avro.rs`).
//! * 2, Protobuf: `<standard base64 of a FileDescriptorSet>:<fully.qualified.Message>`; a
//!   payload must decode as that message (`prost-reflect`, whose decoder limits nesting).
//!
//! Bounds against hostile schemas and payloads: schema text at most
//! [`EventStoreConfig::max_schema_bytes`](crate::EventStoreConfig::max_schema_bytes) and JSON
//! nesting at most [`MAX_SCHEMA_DEPTH`]; each regex pattern at most [`MAX_PATTERN_BYTES`] and
//! its compiled program at most [`MAX_REGEX_BYTES`]; a payload validated against a schema at
//! most [`MAX_VALIDATED_PAYLOAD_BYTES`]. Compilation and validation run on the store's schema
//! threads (`work.rs`), at most [`MAX_CONCURRENT_VALIDATIONS`] at a time, and a request waits
//! at most [`VALIDATION_DEADLINE`] for them; the calling thread waits that long at most, so an
//! async caller calls a write that has schema work to do
//! ([`EventStore::needs_schema_work`](crate::EventStore::needs_schema_work)) and every
//! registration from a thread that may block.

mod avro;
mod work;

use crate::FastMap as HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use eddy_log::{read_lock, write_lock};
use jsonschema::PatternOptions;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};

use crate::error::{EventStoreError, Refusal, Result};
use crate::shard::Shard;
use crate::types::{NewEvent, SchemaKey, SchemaRegistration, StoredSchema, WriteRequest};

pub use avro::AvroSchema;
pub use work::{SchemaWork, Unfinished};

/// `schema_type` of JSON Schema.
pub const SCHEMA_JSON: u8 = 0;
/// `schema_type` of Avro.
pub const SCHEMA_AVRO: u8 = 1;
/// `schema_type` of Protobuf.
pub const SCHEMA_PROTOBUF: u8 = 2;

/// Keys (with or without a schema) kept compiled or known-absent before the cache is pruned.
pub const MAX_CACHED_KEYS: usize = 65_536;
/// Longest validation or parse error text kept (the error frame truncates further).
pub const MAX_ERROR_TEXT: usize = 4096;
/// Deepest JSON nesting of a JSON Schema or Avro schema text.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Longest regex of a JSON Schema (`pattern` values, `patternProperties` keys), bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Largest compiled program (and lazy DFA cache) of one regex, bytes.
pub const MAX_REGEX_BYTES: usize = 1 << 20;
/// Largest event payload validated against a schema (2022 above it): bounds the memory of the
/// decoded form (a JSON value or a dynamic Protobuf message is several times the payload).
pub const MAX_VALIDATED_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;
/// Compilations and validations running at once on the schema threads; more wait their turn.
pub const MAX_CONCURRENT_VALIDATIONS: usize = 4;
/// Longest a write waits for its validation, or a registration for its compilation, including
/// the wait for a turn.
pub const VALIDATION_DEADLINE: Duration = Duration::from_secs(2);

/// A compiled schema.
#[derive(Debug)]
pub enum Compiled {
    /// A JSON Schema validator.
    Json(jsonschema::Validator),
    /// An Avro schema.
    Avro(AvroSchema),
    /// A Protobuf message type.
    Protobuf(MessageDescriptor),
}

fn clip(mut s: String) -> String {
    if s.len() > MAX_ERROR_TEXT {
        let mut cut = MAX_ERROR_TEXT;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Compiles schema text of `schema_type`; the error is the `parse_error` of 2021. CPU-bound
/// (bounded by the limits above): the store runs it on its schema threads.
pub fn compile(schema_type: u8, text: &str) -> std::result::Result<Compiled, String> {
    match schema_type {
        SCHEMA_JSON => {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| clip(format!("invalid JSON: {e}")))?;
            check_json_schema(&value, 0)?;
            jsonschema::options()
                .with_pattern_options(
                    PatternOptions::regex()
                        .size_limit(MAX_REGEX_BYTES)
                        .dfa_size_limit(MAX_REGEX_BYTES),
                )
                .build(&value)
                .map(Compiled::Json)
                .map_err(|e| clip(e.to_string()))
        }
        SCHEMA_AVRO => {
            let value: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| clip(format!("invalid Avro schema: {e}")))?;
            check_depth(&value, 0)?;
            AvroSchema::parse(text).map(Compiled::Avro).map_err(clip)
        }
        SCHEMA_PROTOBUF => compile_protobuf(text).map(Compiled::Protobuf),
        _ => Err(format!("unknown schema type {schema_type}")),
    }
}

fn check_depth(value: &serde_json::Value, depth: usize) -> std::result::Result<(), String> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "schema nested deeper than {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    match value {
        serde_json::Value::Array(items) => items.iter().try_for_each(|v| check_depth(v, depth + 1)),
        serde_json::Value::Object(map) => map.values().try_for_each(|v| check_depth(v, depth + 1)),
        _ => Ok(()),
    }
}

/// Depth, and the length of every regex (`pattern` strings, `patternProperties` keys).
fn check_json_schema(value: &serde_json::Value, depth: usize) -> std::result::Result<(), String> {
    check_depth(value, depth)?;
    let long = |pattern: &str| {
        (pattern.len() > MAX_PATTERN_BYTES).then(|| {
            format!(
                "a pattern of {} bytes exceeds the limit of {MAX_PATTERN_BYTES}",
                pattern.len()
            )
        })
    };
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(p)) = map.get("pattern") {
                    long(p).map_or(Ok(()), Err)?;
                }
                if let Some(serde_json::Value::Object(props)) = map.get("patternProperties") {
                    props.keys().find_map(|p| long(p)).map_or(Ok(()), Err)?;
                }
                stack.extend(map.values());
            }
            _ => {}
        }
    }
    Ok(())
}

fn compile_protobuf(text: &str) -> std::result::Result<MessageDescriptor, String> {
    let (set, message) = text.split_once(':').ok_or_else(|| {
        "expected <base64 of a FileDescriptorSet>:<fully.qualified.MessageName>".to_owned()
    })?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(set)
        .map_err(|e| format!("the FileDescriptorSet is not standard base64: {e}"))?;
    let pool = DescriptorPool::decode(bytes.as_slice())
        .map_err(|e| clip(format!("invalid FileDescriptorSet: {e}")))?;
    pool.get_message_by_name(message)
        .ok_or_else(|| clip(format!("message {message} is not in the FileDescriptorSet")))
}

impl Compiled {
    /// Validates one event payload; the error is the `validation_error` of 2022. CPU-bound:
    /// the store runs it on its schema threads.
    pub fn validate(&self, payload: &[u8]) -> std::result::Result<(), String> {
        if payload.len() > MAX_VALIDATED_PAYLOAD_BYTES {
            return Err(format!(
                "payload of {} bytes exceeds the {MAX_VALIDATED_PAYLOAD_BYTES} bytes validated against a schema",
                payload.len()
            ));
        }
        match self {
            Compiled::Json(v) => {
                let value: serde_json::Value = serde_json::from_slice(payload)
                    .map_err(|e| clip(format!("payload is not valid JSON: {e}")))?;
                v.validate(&value).map_err(|e| {
                    let path = e.instance_path().to_string();
                    clip(if path.is_empty() {
                        e.to_string()
                    } else {
                        format!("{path}: {e}")
                    })
                })
            }
            Compiled::Avro(schema) => schema.check(payload).map_err(clip),
            Compiled::Protobuf(message) => DynamicMessage::decode(message.clone(), payload)
                .map(drop)
                .map_err(|e| clip(format!("not a {} message: {e}", message.full_name()))),
        }
    }
}

/// What a lookup found.
type Entry = Option<Arc<Compiled>>;

/// A key's schema as a write found it before validation.
enum Found {
    /// Compiled already (or known to have none).
    Cached(Entry),
    /// Stored on shard 0 and not compiled yet: compiled on a schema thread.
    Stored(StoredSchema),
}

/// One event to validate, with what a 2022 or 2023 answer names.
struct Check {
    /// Index of the event's key in the write's list of keys.
    slot: usize,
    event_type_major: u64,
    event_type_minor: u64,
    client_seq: u64,
    value: Bytes,
}

/// The compiled-schema cache in front of shard 0, the registration limits, and the threads
/// compilation and validation run on.
#[derive(Debug)]
pub(crate) struct Schemas {
    cache: RwLock<HashMap<SchemaKey, Entry>>,
    /// Largest schema text a registration may carry.
    max_bytes: usize,
    /// Where compilation and validation run, bounded in concurrency and time.
    work: SchemaWork,
}

impl Schemas {
    /// An empty cache; registrations above `max_bytes` are refused.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            cache: RwLock::new(HashMap::default()),
            max_bytes,
            work: SchemaWork::new(MAX_CONCURRENT_VALIDATIONS, VALIDATION_DEADLINE),
        }
    }

    /// The registration checks before anything is written (§4.10): a schema type the
    /// protocol knows, at most `max_bytes` of text, text that compiles (on a schema thread,
    /// within [`VALIDATION_DEADLINE`]). Hands the registration back with its compiled form.
    pub(crate) fn compile_registration(
        &self,
        registration: SchemaRegistration,
    ) -> std::result::Result<(SchemaRegistration, Compiled), Refusal> {
        let schema_type = registration.schema_type;
        if schema_type > SCHEMA_PROTOBUF {
            return Err(Refusal::SchemaTypeUnsupported { schema_type });
        }
        let invalid = |parse_error| Refusal::SchemaInvalid {
            schema_type,
            parse_error,
        };
        if registration.schema.len() > self.max_bytes {
            return Err(invalid(format!(
                "Schema exceeds maximum size of {} bytes",
                self.max_bytes
            )));
        }
        let (registration, compiled) = self
            .work
            .run(move || {
                let compiled = compile(schema_type, &registration.schema);
                (registration, compiled)
            })
            .map_err(|unfinished| invalid(unfinished.text()))?;
        Ok((registration, compiled.map_err(invalid)?))
    }

    /// The keys of a write's unencrypted events, in order, each with the event it came from.
    fn keys(request: &WriteRequest) -> impl Iterator<Item = (SchemaKey, &NewEvent)> + '_ {
        request.writes.iter().flat_map(|w| {
            w.events.iter().filter(|e| e.iv.is_none()).map(|e| {
                (
                    SchemaKey {
                        org_id: w.key.org_id,
                        aggregate_type_id: w.key.aggregate_type_id,
                        event_type_major: e.event_type_major,
                        event_type_minor: e.event_type_minor,
                    },
                    e,
                )
            })
        })
    }

    /// True unless every unencrypted event's key is cached as having no schema: a write
    /// with schema work to do may wait up to [`VALIDATION_DEADLINE`] in [`Schemas::validate`].
    pub(crate) fn needs_work(&self, request: &WriteRequest) -> bool {
        let cache = read_lock(&self.cache);
        Self::keys(request).any(|(k, _)| !matches!(cache.get(&k), Some(None)))
    }

    /// Validates every unencrypted event of a write against its registered schema (2022; a
    /// stored schema that no longer compiles: 2023; a failed lookup: the write fails), parts
    /// and events in order. Keys are looked up on this thread (the cache, else shard 0);
    /// compilation and validation run on a schema thread within [`VALIDATION_DEADLINE`]
    /// (past it: 2022 naming the write's first unencrypted event). A write whose keys all have
    /// no schema validates on this thread, with no hop.
    pub(crate) fn validate(&self, schemas: &Shard, request: &WriteRequest) -> Result<()> {
        let mut found: Vec<(SchemaKey, Found)> = Vec::new();
        let mut checks = Vec::new();
        let mut first = None;
        let mut failed = None;
        for (key, e) in Self::keys(request) {
            first.get_or_insert((e.event_type_major, e.event_type_minor, e.client_seq));
            let slot = match found.iter().position(|(k, _)| *k == key) {
                Some(slot) => slot,
                None => match self.find(schemas, &key) {
                    Ok(f) => {
                        found.push((key, f));
                        found.len() - 1
                    }
                    Err(source) => {
                        // Events before this one are still validated first (their answer wins).
                        failed = Some(EventStoreError::SchemaLookup {
                            source: Box::new(source),
                        });
                        break;
                    }
                },
            };
            if !matches!(found[slot].1, Found::Cached(None)) {
                checks.push(Check {
                    slot,
                    event_type_major: e.event_type_major,
                    event_type_minor: e.event_type_minor,
                    client_seq: e.client_seq,
                    value: e.value.clone(),
                });
            }
        }
        let (Some((major, minor, client_seq)), false) = (first, checks.is_empty()) else {
            return failed.map_or(Ok(()), Err);
        };
        let (keys, found): (Vec<SchemaKey>, Vec<Found>) = found.into_iter().unzip();
        let (compiled, verdict) = self
            .work
            .run(move || validate_checks(&found, &checks))
            .map_err(|unfinished| Refusal::SchemaValidationFailed {
                event_type_major: major,
                event_type_minor: minor,
                client_seq,
                validation_error: unfinished.text(),
            })?;
        for (slot, c) in compiled {
            self.insert(keys[slot], Some(c));
        }
        verdict?;
        failed.map_or(Ok(()), Err)
    }

    /// The cached schema of `key`, else shard 0's (an absent one is cached as such).
    fn find(&self, schemas: &Shard, key: &SchemaKey) -> Result<Found> {
        if let Some(entry) = read_lock(&self.cache).get(key) {
            return Ok(Found::Cached(entry.clone()));
        }
        Ok(match schemas.schema(key)? {
            None => {
                self.insert(*key, None);
                Found::Cached(None)
            }
            Some(stored) => Found::Stored(stored),
        })
    }

    /// Drops what the cache knows of `key` (a registration applied from a replicated log: the
    /// stored schema is compiled at its next use).
    pub(crate) fn forget(&self, key: &SchemaKey) {
        write_lock(&self.cache).remove(key);
    }

    /// Records a compiled schema (after a registration committed, or a stored one compiled).
    pub(crate) fn insert(&self, key: SchemaKey, entry: Entry) {
        let mut cache = write_lock(&self.cache);
        if cache.len() >= MAX_CACHED_KEYS {
            cache.retain(|_, e| e.is_some());
            if cache.len() >= MAX_CACHED_KEYS {
                cache.clear();
            }
        }
        cache.insert(key, entry);
    }
}

/// What a schema thread returns: the schemas it compiled (by slot, for the cache) and the verdict.
type Verdict = (
    Vec<(usize, Arc<Compiled>)>,
    std::result::Result<(), Refusal>,
);

/// Compiles the stored schemas the checks need (in the order they are first needed) and
/// validates every check in order: on a schema thread. Returns what it compiled (by slot, for
/// the cache) and the verdict.
fn validate_checks(found: &[Found], checks: &[Check]) -> Verdict {
    let mut ready: Vec<Option<Entry>> = found
        .iter()
        .map(|f| match f {
            Found::Cached(entry) => Some(entry.clone()),
            Found::Stored(_) => None,
        })
        .collect();
    let mut compiled = Vec::new();
    for c in checks {
        let schema = match (&ready[c.slot], &found[c.slot]) {
            (Some(entry), _) | (None, Found::Cached(entry)) => entry.clone(),
            (None, Found::Stored(stored)) => match compile(stored.schema_type, &stored.schema) {
                Ok(schema) => {
                    let schema = Arc::new(schema);
                    compiled.push((c.slot, Arc::clone(&schema)));
                    ready[c.slot] = Some(Some(Arc::clone(&schema)));
                    Some(schema)
                }
                Err(compilation_error) => {
                    let refused = Refusal::SchemaCompilationFailed {
                        event_type_major: c.event_type_major,
                        event_type_minor: c.event_type_minor,
                        client_seq: c.client_seq,
                        compilation_error,
                    };
                    return (compiled, Err(refused));
                }
            },
        };
        if let Some(schema) = schema {
            if let Err(validation_error) = schema.validate(&c.value) {
                let refused = Refusal::SchemaValidationFailed {
                    event_type_major: c.event_type_major,
                    event_type_minor: c.event_type_minor,
                    client_seq: c.client_seq,
                    validation_error,
                };
                return (compiled, Err(refused));
            }
        }
    }
    (compiled, Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_compiles_and_validates() {
        let c = compile(
            0,
            r#"{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}"#,
        )
        .unwrap();
        c.validate(br#"{"a":1}"#).unwrap();
        let e = c.validate(br#"{"a":"x"}"#).unwrap_err();
        assert!(e.contains("/a"), "{e}");
        assert!(c
            .validate(b"{not json")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(c.validate(br#"{"b":1}"#).is_err());
    }

    #[test]
    fn bad_schemas_are_refused() {
        assert!(compile(0, "{").unwrap_err().contains("invalid JSON"));
        assert!(compile(0, r#"{"type": 12}"#).is_err());
        assert!(compile(1, "{}").unwrap_err().contains("Avro"));
        assert!(compile(2, "x:y").unwrap_err().contains("base64"));
        assert!(compile(2, "no separator").unwrap_err().contains("expected"));
        assert!(compile(7, "{}").is_err());
        // No remote or file references are ever fetched.
        assert!(compile(0, r#"{"$ref":"https://example.com/s.json"}"#).is_err());
        assert!(compile(0, r#"{"$ref":"file:///etc/passwd"}"#).is_err());
    }

    #[test]
    fn schema_complexity_is_bounded() {
        let nested = format!(
            "{}{}",
            "{\"not\":".repeat(40),
            "{}".to_owned() + &"}".repeat(40)
        );
        assert!(compile(0, &nested).unwrap_err().contains("deeper than"));
        let ok = format!(
            "{}{}",
            "{\"not\":".repeat(10),
            "{}".to_owned() + &"}".repeat(10)
        );
        compile(0, &ok).unwrap();
        let avro = format!("{}\"int\"{}", "[".repeat(40), "]".repeat(40));
        assert!(compile(1, &avro).unwrap_err().contains("deeper than"));
        let long = serde_json::json!({"pattern": "a".repeat(MAX_PATTERN_BYTES + 1)}).to_string();
        assert!(compile(0, &long).unwrap_err().contains("pattern"));
        let mut props = serde_json::Map::new();
        props.insert("b".repeat(2000), serde_json::json!({}));
        let long_key = serde_json::json!({ "patternProperties": props }).to_string();
        assert!(compile(0, &long_key).unwrap_err().contains("pattern"));
        // Look-around needs a backtracking engine: refused at registration.
        assert!(compile(0, r#"{"pattern": "^(?=a)a$"}"#).is_err());
        compile(0, r#"{"pattern": "^[a-z]+$"}"#).unwrap();
    }

    #[test]
    fn backtracking_patterns_match_in_linear_time() {
        // The classic catastrophic pattern: exponential under backtracking, linear here.
        let c = compile(0, r#"{"type":"string","pattern":"^(a+)+$"}"#).unwrap();
        let hostile = format!("\"{}b\"", "a".repeat(100_000));
        let started = std::time::Instant::now();
        assert!(c.validate(hostile.as_bytes()).is_err());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        c.validate(format!("\"{}\"", "a".repeat(1000)).as_bytes())
            .unwrap();
    }

    #[test]
    fn oversized_payloads_are_not_decoded() {
        let c = compile(0, r#"{"type":"string"}"#).unwrap();
        let big = format!("\"{}\"", "a".repeat(MAX_VALIDATED_PAYLOAD_BYTES));
        assert!(c.validate(big.as_bytes()).unwrap_err().contains("exceeds"));
    }

    #[test]
    fn long_errors_are_clipped_on_a_char_boundary() {
        let s = clip("é".repeat(MAX_ERROR_TEXT));
        assert!(s.len() <= MAX_ERROR_TEXT);
        assert!(s.chars().all(|c| c == 'é'));
    }
}
