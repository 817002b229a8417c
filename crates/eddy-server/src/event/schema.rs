//! Schemas: compilation at registration, lookup and payload validation on write (§4.10).
//!
//! Schemas are immutable once registered and live in the event store; this module keeps the
//! compiled form of every key it has looked up (and the keys that have none) so a write
//! validates without touching the store after the first lookup. The cache of absent keys is
//! bounded by [`MAX_CACHED_KEYS`]; registration replaces an absent entry.
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
//! Bounds against hostile schemas and payloads: schema text at most `max_schema_size_bytes`
//! (checked by the caller) and JSON nesting at most [`MAX_SCHEMA_DEPTH`]; each regex pattern at
//! most [`MAX_PATTERN_BYTES`] and its compiled program at most [`MAX_REGEX_BYTES`]; a payload
//! validated against a schema at most [`MAX_VALIDATED_PAYLOAD_BYTES`]. Compilation and
//! validation run on the blocking pool, at most [`MAX_CONCURRENT_VALIDATIONS`] at a time, and a
//! request waits at most [`VALIDATION_DEADLINE`] for them ([`Schemas::bounded`]).

mod avro;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use base64::Engine as _;
use eddy_codec::event::{SchemaType, ServerError};
use eddy_storage::{EventStore, SchemaKey, StorageError};
use jsonschema::PatternOptions;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};

pub use avro::AvroSchema;

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
/// Compilations and validations running at once on the blocking pool; more wait their turn.
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
/// (bounded by the limits above): call it off the reactor.
pub fn compile(schema_type: u8, text: &str) -> Result<Compiled, String> {
    match SchemaType::from_u8(schema_type) {
        Some(SchemaType::Json) => {
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
        Some(SchemaType::Avro) => {
            let value: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| clip(format!("invalid Avro schema: {e}")))?;
            check_depth(&value, 0)?;
            AvroSchema::parse(text).map(Compiled::Avro).map_err(clip)
        }
        Some(SchemaType::Protobuf) => compile_protobuf(text).map(Compiled::Protobuf),
        None => Err(format!("unknown schema type {schema_type}")),
    }
}

fn check_depth(value: &serde_json::Value, depth: usize) -> Result<(), String> {
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
fn check_json_schema(value: &serde_json::Value, depth: usize) -> Result<(), String> {
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

fn compile_protobuf(text: &str) -> Result<MessageDescriptor, String> {
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
    /// call it off the reactor.
    pub fn validate(&self, payload: &[u8]) -> Result<(), String> {
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

/// The schema cache in front of the store.
#[derive(Debug)]
pub struct Schemas {
    cache: RwLock<HashMap<SchemaKey, Entry>>,
    turns: Arc<tokio::sync::Semaphore>,
}

/// Work given to [`Schemas::bounded`] did not finish within [`VALIDATION_DEADLINE`] (or
/// panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfinished;

impl Unfinished {
    /// The error text of a 2021 or 2022 answer.
    pub fn text(self) -> String {
        format!(
            "schema work did not finish within {} ms",
            VALIDATION_DEADLINE.as_millis()
        )
    }
}

impl Default for Schemas {
    fn default() -> Self {
        Self::new()
    }
}

impl Schemas {
    /// An empty cache.
    pub fn new() -> Self {
        Self {
            cache: RwLock::new(HashMap::new()),
            turns: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_VALIDATIONS)),
        }
    }

    /// Runs CPU-bound schema work on the blocking pool, at most
    /// [`MAX_CONCURRENT_VALIDATIONS`] at a time, waiting at most [`VALIDATION_DEADLINE`] for
    /// it (turn included). Work still running at the deadline finishes on its thread and keeps
    /// its turn until then, so abandoned work never piles up beyond the limit.
    pub async fn bounded<T, F>(&self, work: F) -> Result<T, Unfinished>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let turns = Arc::clone(&self.turns);
        let run = async move {
            let turn = turns.acquire_owned().await.map_err(|_| Unfinished)?;
            tokio::task::spawn_blocking(move || {
                let result = work();
                drop(turn);
                result
            })
            .await
            .map_err(|_| Unfinished)
        };
        tokio::time::timeout(VALIDATION_DEADLINE, run)
            .await
            .map_err(|_| Unfinished)?
    }

    /// True when every key is cached as having no schema (no validation needed).
    pub fn known_absent<'k>(&self, mut keys: impl Iterator<Item = &'k SchemaKey>) -> bool {
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        keys.all(|k| matches!(cache.get(k), Some(None)))
    }

    /// The compiled schema of `key`, if one is registered. A stored schema that no longer
    /// compiles is the 2023 error text.
    pub fn lookup(
        &self,
        store: &EventStore,
        key: &SchemaKey,
    ) -> Result<Result<Entry, String>, StorageError> {
        if let Some(entry) = self
            .cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return Ok(Ok(entry.clone()));
        }
        let entry = match store.schema(key)? {
            None => None,
            Some(stored) => match compile(stored.schema_type, &stored.schema) {
                Ok(c) => Some(Arc::new(c)),
                Err(e) => return Ok(Err(e)),
            },
        };
        self.insert(*key, entry.clone());
        Ok(Ok(entry))
    }

    /// Records a compiled schema (after a registration committed).
    pub fn insert(&self, key: SchemaKey, entry: Entry) {
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED_KEYS {
            cache.retain(|_, e| e.is_some());
            if cache.len() >= MAX_CACHED_KEYS {
                cache.clear();
            }
        }
        cache.insert(key, entry);
    }
}

/// The 2021 error for schema text of `schema_type`.
pub fn invalid(schema_type: u8, parse_error: String) -> ServerError {
    ServerError::RegisterSchemaInvalid {
        schema_type,
        parse_error,
    }
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

    #[tokio::test]
    async fn bounded_work_has_a_deadline_and_a_limit() {
        let schemas = Schemas::new();
        assert_eq!(schemas.bounded(|| 7).await, Ok(7));
        // Work longer than the deadline is abandoned, and keeps its turn while it runs.
        let slow = schemas
            .bounded(|| std::thread::sleep(VALIDATION_DEADLINE + Duration::from_millis(300)));
        assert_eq!(slow.await, Err(Unfinished));
        assert_eq!(
            schemas.turns.available_permits(),
            MAX_CONCURRENT_VALIDATIONS - 1
        );
        assert_eq!(schemas.bounded(|| panic!("boom")).await, Err(Unfinished));
        assert!(Unfinished.text().contains("did not finish"));
    }

    #[test]
    fn long_errors_are_clipped_on_a_char_boundary() {
        let s = clip("é".repeat(MAX_ERROR_TEXT));
        assert!(s.len() <= MAX_ERROR_TEXT);
        assert!(s.chars().all(|c| c == 'é'));
    }
}
