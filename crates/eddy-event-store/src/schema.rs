//! Schemas: compilation at registration, lookup and payload validation on write (event
//! protocol §4.10), owned by the store beside the schemas it stores.
//!
//! Schemas are immutable once registered and live on shard 0; this module keeps the compiled
//! form of every key it has looked up (and the keys that have none) so a write validates
//! without touching shard 0 after the first lookup. The cache of absent keys is bounded by
//! [`MAX_CACHED_KEYS`]; registration replaces an absent entry.
//!
//! Formats: `schema_type` 0 is JSON Schema (draft from `$schema`, compiled by the `jsonschema`
//! crate without any remote or file `$ref` resolution). Avro (1) and Protobuf (2) are accepted
//! by the protocol but not compiled here: their registration is refused as invalid with a
//! parse error saying so, never silently stored unvalidated.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use eddy_log::{read_lock, write_lock};

use crate::error::{EventStoreError, Refusal, Result};
use crate::shard::Shard;
use crate::types::{SchemaKey, SchemaRegistration, WriteRequest};

/// `schema_type` of JSON Schema.
pub const SCHEMA_JSON: u8 = 0;
/// `schema_type` of Avro (accepted by the protocol, not compiled by this store).
pub const SCHEMA_AVRO: u8 = 1;
/// `schema_type` of Protobuf (accepted by the protocol, not compiled by this store).
pub const SCHEMA_PROTOBUF: u8 = 2;

/// Keys (with or without a schema) kept compiled or known-absent before the cache is pruned.
pub const MAX_CACHED_KEYS: usize = 65_536;
/// Longest validation or parse error text kept (the error frame truncates further).
pub const MAX_ERROR_TEXT: usize = 4096;

/// A compiled schema.
#[derive(Debug)]
pub enum Compiled {
    /// A JSON Schema validator.
    Json(jsonschema::Validator),
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

/// Compiles schema text of `schema_type`; the error is the `parse_error` of 2021.
pub fn compile(schema_type: u8, text: &str) -> std::result::Result<Compiled, String> {
    match schema_type {
        SCHEMA_JSON => {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| clip(format!("invalid JSON: {e}")))?;
            jsonschema::validator_for(&value)
                .map(Compiled::Json)
                .map_err(|e| clip(e.to_string()))
        }
        SCHEMA_AVRO => Err("avro schemas are not supported by this server".into()),
        SCHEMA_PROTOBUF => Err("protobuf schemas are not supported by this server".into()),
        _ => Err(format!("unknown schema type {schema_type}")),
    }
}

impl Compiled {
    /// Validates one event payload; the error is the `validation_error` of 2022.
    pub fn validate(&self, payload: &[u8]) -> std::result::Result<(), String> {
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
        }
    }
}

/// What a lookup found.
type Entry = Option<Arc<Compiled>>;

/// The compiled-schema cache in front of shard 0, and the registration limits.
#[derive(Debug)]
pub(crate) struct Schemas {
    cache: RwLock<HashMap<SchemaKey, Entry>>,
    /// Largest schema text a registration may carry.
    max_bytes: usize,
}

impl Schemas {
    /// An empty cache; registrations above `max_bytes` are refused.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            cache: RwLock::new(HashMap::new()),
            max_bytes,
        }
    }

    /// The registration checks before anything is written (§4.10): a schema type the
    /// protocol knows, at most `max_bytes` of text, text that compiles.
    pub(crate) fn compile_registration(
        &self,
        registration: &SchemaRegistration,
    ) -> std::result::Result<Compiled, Refusal> {
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
        compile(schema_type, &registration.schema).map_err(invalid)
    }

    /// Validates every unencrypted event of a write against its registered schema (2022; a
    /// stored schema that no longer compiles: 2023), parts and events in order.
    pub(crate) fn validate(&self, schemas: &Shard, request: &WriteRequest) -> Result<()> {
        for w in &request.writes {
            for e in w.events.iter().filter(|e| e.iv.is_none()) {
                let key = SchemaKey {
                    org_id: w.key.org_id,
                    aggregate_type_id: w.key.aggregate_type_id,
                    event_type_major: e.event_type_major,
                    event_type_minor: e.event_type_minor,
                };
                let found =
                    self.lookup(schemas, &key)
                        .map_err(|source| EventStoreError::SchemaLookup {
                            source: Box::new(source),
                        })?;
                match found {
                    Ok(None) => {}
                    Ok(Some(compiled)) => compiled.validate(&e.value).map_err(|msg| {
                        Refusal::SchemaValidationFailed {
                            event_type_major: e.event_type_major,
                            event_type_minor: e.event_type_minor,
                            client_seq: e.client_seq,
                            validation_error: msg,
                        }
                    })?,
                    Err(msg) => {
                        return Err(Refusal::SchemaCompilationFailed {
                            event_type_major: e.event_type_major,
                            event_type_minor: e.event_type_minor,
                            client_seq: e.client_seq,
                            compilation_error: msg,
                        }
                        .into())
                    }
                }
            }
        }
        Ok(())
    }

    /// The compiled schema of `key`, if one is registered. A stored schema that no longer
    /// compiles is the 2023 error text.
    fn lookup(
        &self,
        schemas: &Shard,
        key: &SchemaKey,
    ) -> Result<std::result::Result<Entry, String>> {
        if let Some(entry) = read_lock(&self.cache).get(key) {
            return Ok(Ok(entry.clone()));
        }
        let entry = match schemas.schema(key)? {
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
    fn bad_and_unsupported_schemas_are_refused() {
        assert!(compile(0, "{").unwrap_err().contains("invalid JSON"));
        assert!(compile(0, r#"{"type": 12}"#).is_err());
        assert!(compile(1, "{}").unwrap_err().contains("avro"));
        assert!(compile(2, "x:y").unwrap_err().contains("protobuf"));
        assert!(compile(7, "{}").is_err());
        // No remote or file references are ever fetched.
        assert!(compile(0, r#"{"$ref":"https://example.com/s.json"}"#).is_err());
        assert!(compile(0, r#"{"$ref":"file:///etc/passwd"}"#).is_err());
    }

    #[test]
    fn long_errors_are_clipped_on_a_char_boundary() {
        let s = clip("é".repeat(MAX_ERROR_TEXT));
        assert!(s.len() <= MAX_ERROR_TEXT);
        assert!(s.chars().all(|c| c == 'é'));
    }
}
