//! Avro binary datums checked against a parsed schema (§4.10, `schema_type` 1).
//!
//! The schema is parsed by `apache-avro` (the spec's parser); a payload is then walked here
//! without building values: `apache-avro`'s decoder reserves memory for a block count read from
//! the payload before it reads a single item (a ten-byte payload could make it reserve
//! gigabytes), builds a value tree several times larger than the payload, and recurses without
//! a limit on recursive schemas. The walk accepts exactly the datums that decoder accepts and
//! whose decoded value validates: booleans are 0 or 1, ints fit 32 bits, strings are UTF-8,
//! enum and union indexes are in range, UUIDs are 16 bytes or a UUID string, named references
//! resolve as the decoder resolves them (namespaces included). Bytes after the datum are
//! ignored, as the reference server ignores them.
//!
//! Bounds: nesting at most [`MAX_DEPTH`]; a length or block count never above the bytes left;
//! at most eight values visited per payload byte (plus a small allowance), so zero-byte items
//! (nulls, empty records) cannot make a short payload loop for long.

use std::collections::HashMap;

use apache_avro::schema::{Name, Namespace, ResolvedSchema, Schema};

/// Deepest nesting of values a datum may have.
pub const MAX_DEPTH: usize = 64;

/// A parsed Avro schema with its named types resolved.
#[derive(Debug)]
pub struct AvroSchema {
    root: Schema,
    names: HashMap<Name, Schema>,
}

impl AvroSchema {
    /// Parses Avro schema JSON; the error is the `parse_error` of 2021.
    pub fn parse(text: &str) -> Result<Self, String> {
        let root = Schema::parse_str(text).map_err(|e| format!("invalid Avro schema: {e}"))?;
        let names = ResolvedSchema::try_from(&root)
            .map_err(|e| format!("invalid Avro schema: {e}"))?
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        Ok(Self { root, names })
    }

    /// Checks that `datum` starts with one binary datum of this schema.
    pub fn check(&self, datum: &[u8]) -> Result<(), String> {
        let mut walk = Walk {
            bytes: datum,
            at: 0,
            steps: 0,
            budget: datum.len().saturating_mul(8).saturating_add(4096),
            names: &self.names,
        };
        walk.value(&self.root, &None, 0)
            .map_err(|e| format!("not an Avro datum of the schema at byte {}: {e}", walk.at))
    }
}

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    steps: usize,
    budget: usize,
    names: &'a HashMap<Name, Schema>,
}

impl<'a> Walk<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!("{what} needs {n} bytes, {} left", self.remaining()));
        }
        let taken = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(taken)
    }

    /// A zigzag-encoded variable-length long.
    fn long(&mut self) -> Result<i64, String> {
        let mut raw = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.take(1, "a long")?[0];
            if shift == 63 && byte > 1 {
                return Err("a long overflows 64 bits".into());
            }
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                #[allow(clippy::cast_possible_wrap)] // zigzag decoding reinterprets the bits
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err("a long overflows 64 bits".into())
    }

    fn int(&mut self) -> Result<i32, String> {
        let long = self.long()?;
        i32::try_from(long).map_err(|_| format!("{long} does not fit an int"))
    }

    /// A byte length that must fit in what is left.
    fn len(&mut self, what: &str) -> Result<usize, String> {
        let long = self.long()?;
        let len = usize::try_from(long).map_err(|_| format!("negative {what} length {long}"))?;
        if len > self.remaining() {
            return Err(format!("{what} of {len} bytes, {} left", self.remaining()));
        }
        Ok(len)
    }

    fn string(&mut self) -> Result<&'a str, String> {
        let len = self.len("string")?;
        let bytes = self.take(len, "a string")?;
        std::str::from_utf8(bytes).map_err(|e| format!("string is not UTF-8: {e}"))
    }

    /// Array and map blocks: each count at most the bytes left, then its items.
    fn blocks(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        loop {
            let count = self.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                // A negative count is followed by the block's size in bytes.
                self.long()?;
            }
            let count = count.unsigned_abs();
            if count > self.remaining() as u64 {
                return Err(format!(
                    "a block of {count} items, {} bytes left",
                    self.remaining()
                ));
            }
            for _ in 0..count {
                item(self)?;
            }
        }
    }

    fn value(
        &mut self,
        schema: &Schema,
        namespace: &Namespace,
        depth: usize,
    ) -> Result<(), String> {
        self.steps += 1;
        if self.steps > self.budget {
            return Err("too many values for the payload's size".into());
        }
        if depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH}"));
        }
        let inner = depth + 1;
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => match self.take(1, "a boolean")?[0] {
                0 | 1 => Ok(()),
                other => Err(format!("boolean byte {other}")),
            },
            Schema::Int | Schema::Date | Schema::TimeMillis => self.int().map(drop),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.long().map(drop),
            Schema::Float => self.take(4, "a float").map(drop),
            Schema::Double => self.take(8, "a double").map(drop),
            Schema::Bytes | Schema::BigDecimal => {
                let len = self.len("bytes")?;
                self.take(len, "bytes").map(drop)
            }
            Schema::String => self.string().map(drop),
            Schema::Uuid => {
                let len = self.len("uuid")?;
                let bytes = self.take(len, "a uuid")?;
                if len == 16 {
                    return Ok(());
                }
                match std::str::from_utf8(bytes) {
                    Ok(text) if is_uuid(text) => Ok(()),
                    _ => Err("not a UUID".into()),
                }
            }
            Schema::Fixed(fixed) => self.take(fixed.size, "a fixed").map(drop),
            Schema::Duration => self.take(12, "a duration").map(drop),
            Schema::Decimal(decimal) => self.value(&decimal.inner, namespace, inner),
            Schema::Enum(e) => {
                let index = self.int()?;
                match usize::try_from(index) {
                    Ok(i) if i < e.symbols.len() => Ok(()),
                    _ => Err(format!("enum index {index} of {} symbols", e.symbols.len())),
                }
            }
            Schema::Union(union) => {
                let index = self.long()?;
                let variant = usize::try_from(index)
                    .ok()
                    .and_then(|i| union.variants().get(i))
                    .ok_or_else(|| {
                        format!("union index {index} of {} variants", union.variants().len())
                    })?;
                self.value(variant, namespace, inner)
            }
            Schema::Array(array) => self.blocks(|walk| walk.value(&array.items, namespace, inner)),
            Schema::Map(map) => self.blocks(|walk| {
                walk.string()?;
                walk.value(&map.types, namespace, inner)
            }),
            Schema::Record(record) => {
                let name = record.name.fully_qualified_name(namespace);
                for field in &record.fields {
                    self.value(&field.schema, &name.namespace, inner)?;
                }
                Ok(())
            }
            Schema::Ref { name } => {
                let name = name.fully_qualified_name(namespace);
                let names = self.names;
                let resolved = names
                    .get(&name)
                    .ok_or_else(|| format!("unknown type {}", name.fullname(None)))?;
                self.value(resolved, &name.namespace, inner)
            }
        }
    }
}

/// A UUID in one of the text forms the decoder accepts: 32 hex digits, hyphenated 8-4-4-4-12,
/// either one in braces or after `urn:uuid:`.
fn is_uuid(text: &str) -> bool {
    let bare = text
        .strip_prefix("urn:uuid:")
        .or_else(|| text.strip_prefix('{').and_then(|t| t.strip_suffix('}')))
        .unwrap_or(text);
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    match bare.len() {
        32 => hex(bare),
        36 => {
            bare.char_indices().all(|(i, c)| {
                if matches!(i, 8 | 13 | 18 | 23) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            }) && hex(&bare.replace('-', ""))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::types::Value;

    use super::*;

    const PERSON: &str = r#"{"type":"record","name":"Person","namespace":"eddy.test","fields":[
        {"name":"name","type":"string"},
        {"name":"age","type":"int"},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"scores","type":{"type":"map","values":"double"}},
        {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},
        {"name":"id","type":{"type":"string","logicalType":"uuid"}},
        {"name":"friend","type":["null","Person"]}
    ]}"#;

    fn person(friend: Option<Value>) -> Value {
        Value::Record(vec![
            ("name".into(), Value::String("ada".into())),
            ("age".into(), Value::Int(36)),
            (
                "tags".into(),
                Value::Array(vec![Value::String("x".into()), Value::String("y".into())]),
            ),
            (
                "scores".into(),
                Value::Map([("m".to_owned(), Value::Double(1.5))].into()),
            ),
            ("kind".into(), Value::Enum(1, "B".into())),
            (
                "id".into(),
                Value::Uuid("67e55044-10b1-426f-9247-bb680e5fe0c8".parse().unwrap()),
            ),
            (
                "friend".into(),
                match friend {
                    None => Value::Union(0, Box::new(Value::Null)),
                    Some(f) => Value::Union(1, Box::new(f)),
                },
            ),
        ])
    }

    fn encode(schema: &str, value: Value) -> Vec<u8> {
        let schema = Schema::parse_str(schema).unwrap();
        apache_avro::to_avro_datum(&schema, value).unwrap()
    }

    #[test]
    fn accepts_what_the_reference_encoder_writes() {
        let schema = AvroSchema::parse(PERSON).unwrap();
        let one = encode(PERSON, person(None));
        schema.check(&one).unwrap();
        // A recursive schema: a friend of a friend resolves the named reference.
        let two = encode(PERSON, person(Some(person(Some(person(None))))));
        schema.check(&two).unwrap();
        // Trailing bytes are ignored, as the reference ignores them.
        let mut trailing = one.clone();
        trailing.extend_from_slice(b"zz");
        schema.check(&trailing).unwrap();
        // Every strict prefix is refused.
        for cut in 0..one.len() {
            assert!(schema.check(&one[..cut]).is_err(), "prefix of {cut} bytes");
        }
    }

    #[test]
    fn refuses_bad_values() {
        let int = AvroSchema::parse(r#""int""#).unwrap();
        int.check(&[0x02]).unwrap();
        // 2^31 as a long does not fit an int.
        assert!(int.check(&[0x80, 0x80, 0x80, 0x80, 0x10]).is_err());
        let boolean = AvroSchema::parse(r#""boolean""#).unwrap();
        assert!(boolean.check(&[2]).unwrap_err().contains("boolean"));
        let string = AvroSchema::parse(r#""string""#).unwrap();
        assert!(string
            .check(&[0x04, 0xff, 0xfe])
            .unwrap_err()
            .contains("UTF-8"));
        let e = AvroSchema::parse(r#"{"type":"enum","name":"E","symbols":["A"]}"#).unwrap();
        assert!(e.check(&[0x02]).unwrap_err().contains("enum index 1"));
        let u = AvroSchema::parse(r#"["null","int"]"#).unwrap();
        u.check(&[0x02, 0x02]).unwrap();
        assert!(u.check(&[0x04]).unwrap_err().contains("union index 2"));
        let uuid = AvroSchema::parse(r#"{"type":"string","logicalType":"uuid"}"#).unwrap();
        assert!(uuid.check(&[0x06, b'a', b'b', b'c']).is_err());
        assert!(is_uuid("{67e55044-10b1-426f-9247-bb680e5fe0c8}"));
        assert!(is_uuid("urn:uuid:67e5504410b1426f9247bb680e5fe0c8"));
        assert!(!is_uuid("67e55044-10b1-426f-9247-bb680e5fe0cg"));
        assert!(AvroSchema::parse("not avro")
            .unwrap_err()
            .contains("invalid Avro schema"));
    }

    #[test]
    fn hostile_counts_and_depths_are_bounded() {
        // A block claiming 2^40 items in a few bytes: refused before any item.
        let array = AvroSchema::parse(r#"{"type":"array","items":"null"}"#).unwrap();
        let mut huge = Vec::new();
        let mut n = (1u64 << 40) << 1;
        while n >= 0x80 {
            huge.push((n as u8) | 0x80);
            n >>= 7;
        }
        huge.push(n as u8);
        assert!(array.check(&huge).unwrap_err().contains("block of"));
        // Many one-byte blocks of as many null items as bytes left: the value budget stops it.
        // 8000 one-byte blocks of 63 items each.
        let blocks = vec![0x7e; 8000];
        assert!(array
            .check(&blocks)
            .unwrap_err()
            .contains("too many values"));
        // A linked list deeper than the limit.
        let list = AvroSchema::parse(
            r#"{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}"#,
        )
        .unwrap();
        let mut deep = vec![0x02; 200];
        deep.push(0x00);
        assert!(list.check(&deep).unwrap_err().contains("deeper than"));
        let mut shallow = vec![0x02; 10];
        shallow.push(0x00);
        list.check(&shallow).unwrap();
    }
}
