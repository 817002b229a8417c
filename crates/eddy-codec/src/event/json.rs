//! Compact JSON objects for `error_message`, built to fit.
//!
//! Clients parse these messages two ways: by literal substring (`"leader_address":"` and
//! `"num_shards":`, so no whitespace is ever emitted) and with a real JSON parser (so the
//! object is always valid). Strings are escaped like upstream: `"` `\` `\n` `\r` `\t`
//! by name, other control characters as `\u00XX`, non-ASCII left as UTF-8.
//!
//! [`JsonObject::render`] keeps the result within a byte budget by shortening string values
//! (longest first) on character boundaries, never inside an escape sequence, so the object
//! stays valid JSON. Numbers and booleans are never cut.

use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    UInt(u64),
    Bool(bool),
    Str(String),
}

/// An ordered JSON object of unsigned integers, booleans and strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonObject {
    fields: Vec<(&'static str, Value)>,
}

fn escaped_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if u32::from(c) < 0x20 => {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        }
        c => out.push(c),
    }
}

fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Escapes `s`, keeping at most `budget` bytes of escaped output (whole characters only).
fn escape_within(s: &str, budget: usize) -> String {
    let mut out = String::with_capacity(s.len().min(budget));
    let mut used = 0;
    for c in s.chars() {
        let len = escaped_len(c);
        if used + len > budget {
            break;
        }
        used += len;
        escaped_char(c, &mut out);
    }
    out
}

impl JsonObject {
    /// An empty object (`{}`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `"key":value` with an unsigned integer.
    #[must_use]
    pub fn uint(mut self, key: &'static str, value: u64) -> Self {
        self.fields.push((key, Value::UInt(value)));
        self
    }

    /// Appends `"key":true|false`.
    #[must_use]
    pub fn bool(mut self, key: &'static str, value: bool) -> Self {
        self.fields.push((key, Value::Bool(value)));
        self
    }

    /// Appends `"key":"value"` (escaped).
    #[must_use]
    pub fn str(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.fields.push((key, Value::Str(value.into())));
        self
    }

    /// Renders the object in at most `max_len` bytes, shortening string values (longest
    /// first) when needed. Falls back to `{}` only if the non-string parts alone are too
    /// long (never the case for the error messages of this crate).
    pub fn render(&self, max_len: usize) -> String {
        let mut escaped: Vec<Option<String>> = self
            .fields
            .iter()
            .map(|(_, v)| match v {
                Value::Str(s) => Some(escape_within(s, usize::MAX)),
                _ => None,
            })
            .collect();
        loop {
            let text = self.assemble(&escaped);
            if text.len() <= max_len {
                return text;
            }
            let excess = text.len() - max_len;
            let longest = escaped
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.as_ref().map(|e| (i, e.len())))
                .filter(|&(_, len)| len > 0)
                .max_by_key(|&(_, len)| len);
            let Some((index, len)) = longest else {
                return "{}".to_owned();
            };
            let Value::Str(raw) = &self.fields[index].1 else {
                unreachable!("escaped entries exist only for string fields");
            };
            escaped[index] = Some(escape_within(raw, len.saturating_sub(excess)));
        }
    }

    fn assemble(&self, escaped: &[Option<String>]) -> String {
        let mut out = String::from("{");
        for (i, ((key, value), esc)) in self.fields.iter().zip(escaped).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
            match (value, esc) {
                (Value::UInt(n), _) => {
                    let _ = write!(out, "{n}");
                }
                (Value::Bool(b), _) => out.push_str(if *b { "true" } else { "false" }),
                (Value::Str(_), Some(e)) => {
                    out.push('"');
                    out.push_str(e);
                    out.push('"');
                }
                (Value::Str(_), None) => unreachable!("every string field has an escaped form"),
            }
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_and_ordered() {
        let json = JsonObject::new()
            .uint("expected_version", 0)
            .uint("current_aggregate_version", 1)
            .render(978);
        assert_eq!(
            json,
            r#"{"expected_version":0,"current_aggregate_version":1}"#
        );
        assert_eq!(JsonObject::new().render(978), "{}");
        assert_eq!(
            JsonObject::new()
                .str("detail", "x")
                .uint("num_shards", 4)
                .bool("ok", true)
                .render(978),
            r#"{"detail":"x","num_shards":4,"ok":true}"#
        );
    }

    #[test]
    fn escapes_like_upstream() {
        let json = JsonObject::new()
            .str("detail", "a\"b\\c\nd\re\tf\u{1}gé")
            .render(978);
        assert_eq!(json, r#"{"detail":"a\"b\\c\nd\re\tf\u0001gé"}"#);
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["detail"], "a\"b\\c\nd\re\tf\u{1}gé");
    }

    #[test]
    fn truncates_strings_to_fit_and_stays_valid() {
        let long = "é\"x".repeat(1000);
        let json = JsonObject::new()
            .uint("event_type_major", 7)
            .str("validation_error", long.clone())
            .uint("client_seq", 9)
            .render(978);
        assert!(json.len() <= 978, "{}", json.len());
        assert!(json.len() >= 970, "uses the budget: {}", json.len());
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["client_seq"], 9);
        assert!(long.starts_with(parsed["validation_error"].as_str().unwrap()));
    }

    #[test]
    fn shortens_the_longest_string_first() {
        let json = JsonObject::new()
            .str("a", "short")
            .str("b", "y".repeat(2000))
            .render(100);
        assert_eq!(json.len(), 100);
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["a"], "short");
    }

    #[test]
    fn every_budget_gives_valid_json() {
        let obj = JsonObject::new()
            .str("detail", "ab\"\u{2}cé✓")
            .uint("n", 12345);
        for max in 0..60 {
            let json = obj.render(max);
            assert!(json.len() <= max || json == "{}", "max {max}: {json}");
            serde_json::from_str::<serde_json::Value>(&json).unwrap();
        }
    }
}
