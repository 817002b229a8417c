//! Schemas: compilation at registration, lookup and payload validation on write (§4.10).
//!
//! Schemas are immutable once registered and live in the event store; this module keeps the
//! compiled form of every key it has looked up (and the keys that have none) so a write
//! validates without touching the store after the first lookup. The cache of absent keys is
//! bounded by [`MAX_CACHED_KEYS`]; registration replaces an absent entry.
//!
//! Formats: `schema_type` 0 is JSON Schema (draft from `$schema`, compiled by the `jsonschema`
//! crate without any remote or file `$ref` resolution). Avro (1) and Protobuf (2) are accepted
//! by the protocol but not compiled by this server: their registration is refused with 2021 and
//! a parse error saying so, never silently stored unvalidated.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use eddy_codec::event::{SchemaType, ServerError};
use eddy_storage::{EventStore, SchemaKey, StorageError};

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
pub fn compile(schema_type: u8, text: &str) -> Result<Compiled, String> {
    match SchemaType::from_u8(schema_type) {
        Some(SchemaType::Json) => {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| clip(format!("invalid JSON: {e}")))?;
            jsonschema::validator_for(&value)
                .map(Compiled::Json)
                .map_err(|e| clip(e.to_string()))
        }
        Some(SchemaType::Avro) => Err("avro schemas are not supported by this server".into()),
        Some(SchemaType::Protobuf) => {
            Err("protobuf schemas are not supported by this server".into())
        }
        None => Err(format!("unknown schema type {schema_type}")),
    }
}

impl Compiled {
    /// Validates one event payload; the error is the `validation_error` of 2022.
    pub fn validate(&self, payload: &[u8]) -> Result<(), String> {
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

/// The schema cache in front of the store.
#[derive(Debug)]
pub struct Schemas {
    cache: RwLock<HashMap<SchemaKey, Entry>>,
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
        }
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
