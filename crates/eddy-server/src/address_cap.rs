//! The per-address connection cap of the client-facing ports (`--max-connections-per-ip`).
//!
//! `--max-connections` caps a port's connections as a whole, so one address holding silent
//! sockets could take every slot and lock every other client out. Each port therefore also
//! counts its open connections per client address: a connection that would take its address
//! past the cap is closed right after `accept` (nothing is read from it) and counted in
//! `eddy_connections_refused_total{protocol,reason="per_ip"}`.
//!
//! * The cap defaults to a quarter of the port's own connection cap, at most
//!   [`DEFAULT_MAX_PER_IP`]: one address then needs four addresses' worth of sockets to fill a
//!   port, and the default cap follows `--max-connections` (a fixed default above it would
//!   protect nothing). `0` turns it off (Kafka's default, `max.connections.per.ip`).
//! * Addresses in `--max-connections-per-ip-exempt` (default loopback: `127.0.0.0/8` and `::1`)
//!   are counted only against the port's cap. A local process can do anything a client can
//!   anyway, the benchmarks open thousands of connections from 127.0.0.1, and a proxy or
//!   sidecar on the same host (a TLS terminator, a service mesh) funnels every remote client
//!   through loopback.
//! * IPv6 clients are counted per /64 (one host's privacy addresses rotate inside its /64, and
//!   a /64 is what one site is given, so a per-/128 count would count nothing); IPv4-mapped
//!   IPv6 addresses count as the IPv4 address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::ServerConfig;

/// Upper bound of the default per-address cap (the default is a quarter of the port's cap).
pub const DEFAULT_MAX_PER_IP: u32 = 1024;

/// The default exempt networks: loopback.
pub const DEFAULT_EXEMPT: [&str; 2] = ["127.0.0.0/8", "::1"];

/// An IP network, `ADDRESS` or `ADDRESS/PREFIX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNetwork {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for IpNetwork {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or ADDRESS/PREFIX network"))?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= bits => p,
                _ => return Err(format!("{s:?}: the prefix must be 0..={bits}")),
            },
        };
        Ok(Self {
            addr: canonical(addr),
            prefix,
        })
    }
}

impl IpNetwork {
    /// True when `ip` is inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address (a dual-stack listener sees IPv4 clients
/// that way); every other address as it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// What a client address is counted as: the IPv4 address, or the /64 of an IPv6 one.
fn key_of(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// The per-address cap of one port and its figures.
#[derive(Debug)]
pub struct AddressCap {
    label: &'static str,
    limit: Option<u32>,
    exempt: Vec<IpNetwork>,
    open: Mutex<HashMap<IpAddr, u32>>,
    refused: AtomicU64,
}

impl AddressCap {
    /// The cap of the port labelled `label` (the `protocol` label of its series) whose own
    /// connection cap is `port_cap`. Call after [`ServerConfig::validate`].
    pub fn new(label: &'static str, config: &ServerConfig, port_cap: u32) -> Arc<Self> {
        let limit = match config.max_connections_per_ip {
            Some(0) => None,
            Some(n) => Some(n),
            None => Some((port_cap / 4).clamp(1, DEFAULT_MAX_PER_IP)),
        };
        let exempt = config
            .max_connections_per_ip_exempt
            .iter()
            .filter(|s| !s.trim().is_empty())
            .filter_map(|s| s.parse().ok())
            .collect();
        Arc::new(Self {
            label,
            limit,
            exempt,
            open: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
        })
    }

    /// The cap in force (`None`: no per-address cap).
    #[cfg(test)]
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// Counts a connection from `ip` until the returned guard drops, or refuses it (`None`,
    /// counted) when its address already holds the cap.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<AddressGuard> {
        let Some(limit) = self.limit else {
            return Some(AddressGuard(None));
        };
        if self.exempt.iter().any(|net| net.contains(ip)) {
            return Some(AddressGuard(None));
        }
        let key = key_of(ip);
        let mut open = eddy_log::lock(&self.open);
        let count = open.entry(key).or_insert(0);
        if *count >= limit {
            drop(open);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *count += 1;
        Some(AddressGuard(Some((Arc::clone(self), key))))
    }

    /// Addresses holding connections now (exempt ones are not tracked).
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        eddy_log::lock(&self.open).len()
    }
}

/// Counts one connection against its address until dropped.
#[derive(Debug)]
pub struct AddressGuard(Option<(Arc<AddressCap>, IpAddr)>);

impl Drop for AddressGuard {
    fn drop(&mut self) {
        let Some((cap, key)) = self.0.take() else {
            return;
        };
        let mut open = eddy_log::lock(&cap.open);
        if let Some(count) = open.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&key);
            }
        }
    }
}

/// Appends `eddy_connections_refused_total` of every port's cap to a `/metrics` scrape.
pub fn sample(caps: &[Arc<AddressCap>], out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP eddy_connections_refused_total Connections closed at accept, per port and reason \
         (per_ip: the client's address already held --max-connections-per-ip).\n\
         # TYPE eddy_connections_refused_total counter"
    );
    for cap in caps {
        let _ = writeln!(
            out,
            "eddy_connections_refused_total{{protocol=\"{}\",reason=\"per_ip\"}} {}",
            cap.label,
            cap.refused.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn config(limit: Option<u32>, exempt: &[&str]) -> ServerConfig {
        ServerConfig {
            max_connections_per_ip: limit,
            max_connections_per_ip_exempt: exempt.iter().map(|s| (*s).to_owned()).collect(),
            ..ServerConfig::default()
        }
    }

    #[test]
    fn networks_parse_and_match() {
        let net: IpNetwork = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()), "mapped");
        let one: IpNetwork = "::1".parse().unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("127.0.0.1".parse().unwrap()));
        let all: IpNetwork = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let v6: IpNetwork = "[2001:db8::]/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::5".parse().unwrap()));
        for bad in ["", "10.0.0.0/33", "::/129", "host", "10.0.0.0/x"] {
            assert!(bad.parse::<IpNetwork>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn an_address_is_capped_and_released() {
        let cap = AddressCap::new("stream", &config(Some(2), &[]), 100);
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let a = cap.admit(ip).expect("first");
        let b = cap.admit(ip).expect("second");
        assert!(cap.admit(ip).is_none(), "third is over the cap");
        assert!(cap.admit("192.0.2.8".parse().unwrap()).is_some());
        drop(a);
        let c = cap.admit(ip).expect("room again");
        drop((b, c));
        assert_eq!(cap.tracked(), 0, "entries go with their last connection");
        let mut out = String::new();
        sample(&[cap], &mut out);
        assert!(
            out.contains("eddy_connections_refused_total{protocol=\"stream\",reason=\"per_ip\"} 1"),
            "{out}"
        );
    }

    #[test]
    fn exempt_networks_and_the_off_switch() {
        let cap = AddressCap::new("event", &config(Some(1), &DEFAULT_EXEMPT), 100);
        let held: Vec<_> = (0..10)
            .map(|_| cap.admit(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap())
            .collect();
        assert_eq!(held.len(), 10);
        let _v6 = cap.admit("::1".parse().unwrap()).unwrap();
        let _other = cap.admit("127.9.9.9".parse().unwrap()).unwrap();
        let _x = cap.admit("198.51.100.1".parse().unwrap()).unwrap();
        assert!(cap.admit("198.51.100.1".parse().unwrap()).is_none());
        let off = AddressCap::new("event", &config(Some(0), &[]), 100);
        assert_eq!(off.limit(), None);
        let held: Vec<_> = (0..1000)
            .map(|_| off.admit("198.51.100.1".parse().unwrap()).unwrap())
            .collect();
        assert_eq!(held.len(), 1000);
    }

    #[test]
    fn the_default_follows_the_port_cap_and_ipv6_counts_per_64() {
        assert_eq!(
            AddressCap::new("s", &config(None, &[]), 64).limit(),
            Some(16)
        );
        assert_eq!(
            AddressCap::new("s", &config(None, &[]), 16_384).limit(),
            Some(DEFAULT_MAX_PER_IP)
        );
        assert_eq!(AddressCap::new("s", &config(None, &[]), 2).limit(), Some(1));
        let cap = AddressCap::new("s", &config(Some(1), &[]), 64);
        let _a = cap.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert!(
            cap.admit("2001:db8::2:3".parse().unwrap()).is_none(),
            "same /64"
        );
        assert!(cap.admit("2001:db8:0:1::1".parse().unwrap()).is_some());
        let _b = cap.admit("203.0.113.5".parse().unwrap()).unwrap();
        assert!(cap.admit("::ffff:203.0.113.5".parse().unwrap()).is_none());
    }
}
