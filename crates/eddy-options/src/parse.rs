//! Text forms accepted for option values sent as String (spec §3.12): human durations
//! (`7 days`, `1h 30m`) and byte sizes (`1 GiB`, `128MiB`, `1.5 GB`).

/// Longest text accepted by the parsers (an option value is at most 255 bytes anyway).
pub const MAX_TEXT_LEN: usize = 255;

const MICROS_PER_SECOND: u64 = 1_000_000;

/// Parses a human duration into microseconds: one or more `<integer><unit>` terms, optionally
/// separated by whitespace. Units: `ns`/`nsec`, `us`/`usec`/`µs`, `ms`/`msec`,
/// `s`/`sec`/`second(s)`, `m`/`min`/`minute(s)`, `h`/`hr`/`hour(s)`, `d`/`day(s)`,
/// `w`/`week(s)`, `M`/`month(s)` (30.44 days), `y`/`year(s)` (365.25 days). Nanoseconds are
/// truncated to whole microseconds. `None` on anything else or on overflow.
pub fn parse_duration_micros(text: &str) -> Option<u64> {
    if text.len() > MAX_TEXT_LEN {
        return None;
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let value: u128 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || c.is_whitespace())
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = rest[unit_len..].trim_start();
        let nanos_per_unit: u128 = match unit {
            "nsec" | "ns" => 1,
            "usec" | "us" | "µs" => 1_000,
            "msec" | "ms" => 1_000_000,
            "seconds" | "second" | "sec" | "s" => 1_000_000_000,
            "minutes" | "minute" | "min" | "m" => 60 * 1_000_000_000,
            "hours" | "hour" | "hr" | "h" => 3_600 * 1_000_000_000,
            "days" | "day" | "d" => 86_400 * 1_000_000_000,
            "weeks" | "week" | "w" => 604_800 * 1_000_000_000,
            "months" | "month" | "M" => 2_630_016 * 1_000_000_000,
            "years" | "year" | "y" => 31_557_600 * 1_000_000_000,
            _ => return None,
        };
        total_nanos = total_nanos.checked_add(value.checked_mul(nanos_per_unit)?)?;
    }
    u64::try_from(total_nanos / 1_000).ok()
}

/// Parses a byte size: a decimal number (fraction allowed) and an optional unit, case
/// insensitive: none or `b` (bytes); `k`, `kb`, `m`, `mb`, `g`, `gb`, `t`, `tb`, `p`, `pb`, `e`,
/// `eb` (powers of 1000); `ki`, `kib`, ... `ei`, `eib` (powers of 1024). Fractions of a byte are
/// truncated. `None` on anything else or on overflow.
pub fn parse_byte_size(text: &str) -> Option<u64> {
    if text.len() > MAX_TEXT_LEN {
        return None;
    }
    let text = text.trim();
    let number_len = text
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, unit) = text.split_at(number_len);
    let unit = unit.trim_start().to_ascii_lowercase();
    let (integer, fraction) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if integer.is_empty() || fraction.contains('.') || fraction.len() > 18 {
        return None;
    }
    let integer: u128 = integer.parse().ok()?;
    let fraction_value: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    let scale = 10u128.pow(fraction.len() as u32);
    let multiplier: u128 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "p" | "pb" => 1_000_000_000_000_000,
        "e" | "eb" => 1_000_000_000_000_000_000,
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        "ti" | "tib" => 1 << 40,
        "pi" | "pib" => 1 << 50,
        "ei" | "eib" => 1 << 60,
        _ => return None,
    };
    let whole = integer
        .checked_mul(scale)?
        .checked_add(fraction_value)?
        .checked_mul(multiplier)?
        / scale;
    u64::try_from(whole).ok()
}

/// Seconds in a duration of `micros` microseconds.
pub const fn micros_to_secs(micros: u64) -> u64 {
    micros / MICROS_PER_SECOND
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration_micros("7 days"),
            Some(7 * 86_400 * 1_000_000)
        );
        assert_eq!(parse_duration_micros("1h 30m"), Some(5_400 * 1_000_000));
        assert_eq!(parse_duration_micros("1h30m"), Some(5_400 * 1_000_000));
        assert_eq!(parse_duration_micros("15min"), Some(900 * 1_000_000));
        assert_eq!(parse_duration_micros("250ms"), Some(250_000));
        assert_eq!(parse_duration_micros("3 us"), Some(3));
        assert_eq!(parse_duration_micros("1500ns"), Some(1));
        assert_eq!(
            parse_duration_micros("2 weeks"),
            Some(14 * 86_400 * 1_000_000)
        );
        assert_eq!(parse_duration_micros(""), None);
        assert_eq!(parse_duration_micros("7"), None);
        assert_eq!(parse_duration_micros("days"), None);
        assert_eq!(parse_duration_micros("1.5h"), None);
        assert_eq!(parse_duration_micros("1 fortnight"), None);
        assert_eq!(parse_duration_micros("99999999999999999999999y"), None);
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("1 GiB"), Some(1 << 30));
        assert_eq!(parse_byte_size("128MiB"), Some(128 << 20));
        assert_eq!(parse_byte_size("1GB"), Some(1_000_000_000));
        assert_eq!(parse_byte_size("1.5 KB"), Some(1_500));
        assert_eq!(parse_byte_size("0.5kib"), Some(512));
        assert_eq!(parse_byte_size("1024"), Some(1024));
        assert_eq!(parse_byte_size("10 B"), Some(10));
        assert_eq!(parse_byte_size("16 EiB"), None, "overflows u64");
        assert_eq!(parse_byte_size("GiB"), None);
        assert_eq!(parse_byte_size("1 GiBs"), None);
        assert_eq!(parse_byte_size("1..2"), None);
        assert_eq!(parse_byte_size(""), None);
    }
}
