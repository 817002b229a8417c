//! A minimal HTTP/1.1 GET for the server's `/health` and `/metrics` (plain text, small,
//! `connection: close`), and the Prometheus sample parser the status and bench commands use.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::error::CtlError;

/// Largest response read.
const MAX_RESPONSE: u64 = 16 * 1024 * 1024;

/// `GET path` on `addr`: (status code, body).
pub async fn get(addr: &str, path: &str, timeout: Duration) -> Result<(u16, String), CtlError> {
    let http = |source| CtlError::Http {
        addr: addr.to_owned(),
        source,
    };
    let exchange = async {
        let mut socket = tokio::net::TcpStream::connect(addr).await?;
        socket
            .write_all(
                format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut raw = Vec::new();
        (&mut socket)
            .take(MAX_RESPONSE)
            .read_to_end(&mut raw)
            .await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| http(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
        .map_err(http)?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| http(std::io::Error::other("not an HTTP response")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of sample `name` (with exactly `labels`, e.g. `{protocol="event"}`, or none) in
/// a Prometheus text body.
pub fn metric(body: &str, name: &str, labels: &str) -> Option<f64> {
    let key = format!("{name}{labels} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
}

/// The value of label `label` on the first sample of `name` (`eddy_build_info{version="0.1.0"}`).
pub fn metric_label(body: &str, name: &str, label: &str) -> Option<String> {
    let line = body.lines().find(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{'))
    })?;
    let pattern = format!("{label}=\"");
    let start = line.find(&pattern)? + pattern.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

/// The sum of every sample of `name` whatever its labels.
pub fn metric_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "# HELP x\neddy_build_info{version=\"0.1.0\",profile=\"release\"} 1\n\
        eddy_uptime_seconds 12.5\neddy_open_connections{protocol=\"stream\"} 2\n\
        eddy_open_connections{protocol=\"event\"} 3\neddy_uptime_seconds_other 1\n";

    #[test]
    fn samples_and_labels() {
        assert_eq!(metric(BODY, "eddy_uptime_seconds", ""), Some(12.5));
        assert_eq!(
            metric(BODY, "eddy_open_connections", "{protocol=\"event\"}"),
            Some(3.0)
        );
        assert_eq!(metric(BODY, "eddy_missing", ""), None);
        assert_eq!(
            metric_label(BODY, "eddy_build_info", "version").as_deref(),
            Some("0.1.0")
        );
        assert_eq!(metric_label(BODY, "eddy_role", "role"), None);
        assert!((metric_sum(BODY, "eddy_open_connections") - 5.0).abs() < 1e-9);
    }
}
