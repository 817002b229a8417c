//! Output for people (aligned tables, `key: value` records) and for scripts (`json`, one
//! document; `jsonl`, one object per line), plus the human forms of sizes, durations and
//! timestamps.

use std::fmt::Write as _;
use std::io::Write;

use serde_json::{Map, Value};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// One JSON document (an array for lists).
    Json,
    /// One JSON object per line.
    Jsonl,
}

/// Rows under named columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// Column names; also the JSON keys.
    pub columns: Vec<&'static str>,
    /// Rows, one value per column.
    pub rows: Vec<Vec<Value>>,
}

/// Named fields of one thing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    /// Fields in display order.
    pub fields: Vec<(&'static str, Value)>,
}

impl Record {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a field.
    #[must_use]
    pub fn field(mut self, name: &'static str, value: impl Into<Value>) -> Self {
        self.fields.push((name, value.into()));
        self
    }

    /// The record as a JSON object.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<Map<_, _>>(),
        )
    }
}

/// A cell as text: strings bare, null as `-`, the rest as JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

impl Table {
    /// A table with these columns and no rows.
    pub fn new(columns: Vec<&'static str>) -> Self {
        Self {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row (one value per column).
    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len(), "one value per column");
        self.rows.push(row);
    }

    /// Each row as a JSON object keyed by column.
    pub fn objects(&self) -> Vec<Value> {
        self.rows
            .iter()
            .map(|row| {
                Value::Object(
                    self.columns
                        .iter()
                        .zip(row)
                        .map(|(k, v)| ((*k).to_owned(), v.clone()))
                        .collect(),
                )
            })
            .collect()
    }

    /// Aligned text: a header line in capitals, then the rows; numbers right-aligned.
    pub fn render(&self) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(cell).collect())
            .collect();
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|i| {
                !self.rows.is_empty()
                    && self.rows.iter().all(|r| r[i].is_number() || r[i].is_null())
            })
            .collect();
        let mut out = String::new();
        let line = |out: &mut String, items: &[String]| {
            let mut text = String::new();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                let pad = widths[i] - item.chars().count();
                if numeric[i] {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(item);
                } else {
                    text.push_str(item);
                    if i + 1 < items.len() {
                        text.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        let header: Vec<String> = self.columns.iter().map(|c| c.to_uppercase()).collect();
        line(&mut out, &header);
        for row in &cells {
            line(&mut out, row);
        }
        out
    }
}

/// Writes a table in `format`.
pub fn print_table(out: &mut dyn Write, format: Format, table: &Table) -> std::io::Result<()> {
    match format {
        Format::Table => out.write_all(table.render().as_bytes()),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &Value::Array(table.objects()))?;
            writeln!(out)
        }
        Format::Jsonl => {
            for object in table.objects() {
                serde_json::to_writer(&mut *out, &object)?;
                writeln!(out)?;
            }
            Ok(())
        }
    }
}

/// Writes a record in `format` (`key: value` lines for people).
pub fn print_record(out: &mut dyn Write, format: Format, record: &Record) -> std::io::Result<()> {
    match format {
        Format::Table => {
            let width = record
                .fields
                .iter()
                .map(|(k, _)| k.len())
                .max()
                .unwrap_or(0);
            for (key, value) in &record.fields {
                writeln!(
                    out,
                    "{:<width$}  {}",
                    format!("{key}:"),
                    cell(value),
                    width = width + 1
                )?;
            }
            Ok(())
        }
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &record.to_json())?;
            writeln!(out)
        }
        Format::Jsonl => {
            serde_json::to_writer(&mut *out, &record.to_json())?;
            writeln!(out)
        }
    }
}

/// Prints a confirmation: the message for people, `{"ok":true,"message":...}` for scripts.
pub fn print_done(out: &mut dyn Write, format: Format, message: &str) -> std::io::Result<()> {
    match format {
        Format::Table => writeln!(out, "{message}"),
        format => print_record(
            out,
            format,
            &Record::new().field("ok", true).field("message", message),
        ),
    }
}

/// Awaits a request that answers nothing but success, then confirms it: `what` names the
/// request in an error, `message` is printed on success.
pub async fn act<T>(
    out: &mut dyn Write,
    format: Format,
    call: impl std::future::Future<Output = Result<T, eddy_client::ClientError>>,
    what: String,
    message: String,
) -> Result<(), crate::error::CtlError> {
    call.await
        .map_err(|e| crate::error::CtlError::from(e).context(what))?;
    print_done(out, format, &message).map_err(crate::error::CtlError::Output)
}

/// Bytes in binary units (`1.5 MiB`).
#[allow(clippy::cast_precision_loss)]
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A duration in seconds as `3d 4h 5m 6s` (largest units first, zero units skipped).
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut parts = Vec::new();
    for (value, unit) in [(d, "d"), (h, "h"), (m, "m")] {
        if value > 0 || !parts.is_empty() {
            parts.push(format!("{value}{unit}"));
        }
    }
    parts.push(format!("{s}s"));
    parts.join(" ")
}

/// Microseconds since the epoch as UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`; `-` for 0.
pub fn timestamp_micros(micros: u64) -> String {
    if micros == 0 {
        return "-".to_owned();
    }
    let secs = micros / 1_000_000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let (y, m, d) = civil_from_days(days);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        micros % 1_000_000
    )
}

/// Days since 1970-01-01 to a (year, month, day) of the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A payload for display: UTF-8 text as is, anything else as `0x` hex.
pub fn payload_text(bytes: &[u8]) -> String {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(2 + 2 * bytes.len());
    out.push_str("0x");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A typed option or user-header value (TLV kinds) as JSON: text as a string, booleans and
/// integers as numbers (`u64::MAX`, the "unlimited" sentinel, as `"unlimited"`), floats as
/// numbers, raw bytes and unknown kinds as text or hex.
pub fn typed_value(kind: Option<eddy_options::ValueKind>, b: &[u8]) -> Value {
    use eddy_options::ValueKind as K;
    let le = |n: usize| {
        let mut raw = [0u8; 16];
        raw[..n.min(16)].copy_from_slice(&b[..n.min(16)]);
        u128::from_le_bytes(raw)
    };
    let signed = |n: usize| {
        let shift = 128 - 8 * n.min(16) as u32;
        i128::from_le_bytes(le(n).to_le_bytes()) << shift >> shift
    };
    let fits = |n: usize| b.len() == n;
    match kind {
        Some(K::Bool) if fits(1) => Value::Bool(b[0] != 0),
        Some(K::Uint8 | K::Uint16 | K::Uint32 | K::Uint64) if matches!(b.len(), 1 | 2 | 4 | 8) => {
            let n = le(b.len());
            if b.len() == 8 && n == u128::from(u64::MAX) {
                Value::String("unlimited".into())
            } else {
                serde_json::json!(u64::try_from(n).unwrap_or(u64::MAX))
            }
        }
        Some(K::Int8 | K::Int16 | K::Int32 | K::Int64) if matches!(b.len(), 1 | 2 | 4 | 8) => {
            serde_json::json!(i64::try_from(signed(b.len())).unwrap_or(i64::MAX))
        }
        Some(K::Float32) if fits(4) => {
            serde_json::json!(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        Some(K::Float64) if fits(8) => {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(b);
            serde_json::json!(f64::from_le_bytes(raw))
        }
        _ => Value::String(payload_text(b)),
    }
}

/// A payload for JSON: parsed JSON when it is JSON, else a string (text) or hex.
pub fn payload_json(bytes: &[u8]) -> Value {
    serde_json::from_slice::<Value>(bytes).unwrap_or_else(|_| Value::String(payload_text(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table() -> Table {
        let mut t = Table::new(vec!["id", "name", "messages"]);
        t.push(vec![json!(0), json!("orders"), json!(12_345)]);
        t.push(vec![json!(1), json!("a"), json!(7)]);
        t
    }

    #[test]
    fn tables_align_and_right_align_numbers() {
        let text = table().render();
        assert_eq!(
            text,
            "ID  NAME    MESSAGES\n 0  orders     12345\n 1  a              7\n"
        );
        let empty = Table::new(vec!["id", "name"]).render();
        assert_eq!(empty, "ID  NAME\n");
    }

    #[test]
    fn json_and_jsonl_parse_back() {
        let mut out = Vec::new();
        print_table(&mut out, Format::Json, &table()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["name"], "orders");
        assert_eq!(v[1]["messages"], 7);
        let mut out = Vec::new();
        print_table(&mut out, Format::Jsonl, &table()).unwrap();
        let lines: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["id"], 0);
        let record = Record::new()
            .field("version", "0.1.0")
            .field("uptime_seconds", 5);
        let mut out = Vec::new();
        print_record(&mut out, Format::Table, &record).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "version:         0.1.0\nuptime_seconds:  5\n"
        );
        let mut out = Vec::new();
        print_record(&mut out, Format::Jsonl, &record).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["uptime_seconds"], 5);
    }

    #[test]
    fn human_units() {
        use eddy_options::ValueKind as K;
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(61), "1m 1s");
        assert_eq!(duration(3600), "1h 0m 0s");
        assert_eq!(duration(90_061), "1d 1h 1m 1s");
        assert_eq!(timestamp_micros(0), "-");
        assert_eq!(timestamp_micros(1), "1970-01-01T00:00:00.000001Z");
        assert_eq!(
            timestamp_micros(1_709_251_199_500_000),
            "2024-02-29T23:59:59.500000Z"
        );
        assert_eq!(payload_text(b"hi"), "hi");
        assert_eq!(payload_text(&[0xff, 0x00]), "0xff00");
        assert_eq!(payload_json(b"{\"a\":1}")["a"], 1);
        assert_eq!(payload_json(b"plain"), json!("plain"));
        assert_eq!(typed_value(Some(K::Bool), &[1]), json!(true));
        assert_eq!(typed_value(Some(K::Uint32), &7u32.to_le_bytes()), json!(7));
        assert_eq!(
            typed_value(Some(K::Uint64), &u64::MAX.to_le_bytes()),
            json!("unlimited")
        );
        assert_eq!(
            typed_value(Some(K::Int16), &(-3i16).to_le_bytes()),
            json!(-3)
        );
        assert_eq!(typed_value(Some(K::String), b"none"), json!("none"));
        assert_eq!(
            typed_value(Some(K::Float64), &1.5f64.to_le_bytes()),
            json!(1.5)
        );
        assert_eq!(typed_value(None, &[0xff]), json!("0xff"));
    }
}
