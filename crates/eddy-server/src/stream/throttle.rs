//! Login throttling on the stream port: a bound on concurrent Argon2id computations, a growing
//! delay after failed logins (per connection and per peer address), and closing a connection
//! after too many failures. `CHANGE_PASSWORD` checks the current password, so it is a password
//! guess too: its failures count and delay exactly like failed logins (the same per-connection
//! and per-address counts, so switching between the two gains nothing), under their own metric
//! names ([`Check`]).
//!
//! * Every password verification or hash (login, `CREATE_USER`, `CHANGE_PASSWORD`) holds a
//!   permit of one semaphore (`max_concurrent_password_hashes`), so a login flood queues
//!   instead of running hundreds of 19 MiB Argon2id computations at once on the blocking pool.
//! * A login attempt on a connection or from an address with `k` recent failures waits
//!   [`backoff`]`(k)` before it is checked: nothing for the first [`FREE_FAILURES`], then
//!   [`BACKOFF_BASE`] doubling up to `login_backoff_max_ms`. The delay comes before the check,
//!   so concurrent attempts from one address wait too, and a correct password from an address
//!   with recent failures waits like a wrong one (the delay tells nothing).
//! * An address's failures are forgotten [`PEER_FAILURE_WINDOW`] after its last one; at most
//!   [`MAX_TRACKED_PEERS`] addresses are tracked (the stalest are forgotten first).
//! * The `login_max_failures_per_connection`-th failure on a connection is answered (with its
//!   eviction) and the connection is closed.
//!
//! A successful login resets its connection's count, never its address's.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ServerConfig;

/// Failures (of a connection or an address) answered without delay.
pub const FREE_FAILURES: u32 = 2;
/// The first delay after the free failures; each further failure doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// An address's failures are forgotten this long after its last one.
pub const PEER_FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Most peer addresses whose failures are remembered at once.
pub const MAX_TRACKED_PEERS: usize = 65_536;

/// The delay before a login attempt that follows `failures` recent failures.
pub fn backoff(failures: u32, max: Duration) -> Duration {
    if failures <= FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (failures - FREE_FAILURES - 1).min(20);
    BACKOFF_BASE.saturating_mul(1 << doublings).min(max)
}

#[derive(Debug, Clone, Copy)]
struct PeerFailures {
    count: u32,
    last: Instant,
}

/// Which password check an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// `LOGIN_USER` / login-register with a password or a token.
    Login,
    /// `CHANGE_PASSWORD`'s check of the current password.
    PasswordChange,
}

/// The login limits and their counters, shared by every stream connection.
#[derive(Debug)]
pub struct LoginThrottle {
    hashes: Arc<Semaphore>,
    max_hashes: usize,
    backoff_max: Duration,
    /// Failures after which a connection is closed.
    pub max_failures_per_connection: u32,
    peers: Mutex<HashMap<IpAddr, PeerFailures>>,
    hash_waits: AtomicU64,
    failures: AtomicU64,
    delayed: AtomicU64,
    change_failures: AtomicU64,
    change_delayed: AtomicU64,
    closed: AtomicU64,
}

impl LoginThrottle {
    /// The limits `config` sets.
    pub fn new(config: &ServerConfig) -> Self {
        let max_hashes = config.max_concurrent_password_hashes as usize;
        Self {
            hashes: Arc::new(Semaphore::new(max_hashes)),
            max_hashes,
            backoff_max: Duration::from_millis(config.login_backoff_max_ms),
            max_failures_per_connection: config.login_max_failures_per_connection,
            peers: Mutex::new(HashMap::new()),
            hash_waits: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            change_failures: AtomicU64::new(0),
            change_delayed: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    /// A permit to run one Argon2id computation; waits while `max_concurrent_password_hashes`
    /// are running.
    pub async fn hash_permit(&self) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(&self.hashes).try_acquire_owned() {
            return permit;
        }
        self.hash_waits.fetch_add(1, Ordering::Relaxed);
        Arc::clone(&self.hashes)
            .acquire_owned()
            .await
            .expect("the hash semaphore is never closed")
    }

    /// Waits the backoff a password check owes: for `connection_failures` on its connection
    /// or the recent failures of its address, whichever is more.
    pub async fn before_attempt(
        &self,
        check: Check,
        peer: Option<IpAddr>,
        connection_failures: u32,
    ) {
        let peer_failures = peer.map_or(0, |ip| {
            let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
            peers
                .get(&ip)
                .filter(|f| f.last.elapsed() < PEER_FAILURE_WINDOW)
                .map_or(0, |f| f.count)
        });
        let delay = backoff(connection_failures.max(peer_failures), self.backoff_max);
        if !delay.is_zero() {
            match check {
                Check::Login => &self.delayed,
                Check::PasswordChange => &self.change_delayed,
            }
            .fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(delay).await;
        }
    }

    /// Counts a failed password check from `peer`.
    pub fn failed(&self, check: Check, peer: Option<IpAddr>) {
        match check {
            Check::Login => &self.failures,
            Check::PasswordChange => &self.change_failures,
        }
        .fetch_add(1, Ordering::Relaxed);
        let Some(ip) = peer else { return };
        let now = Instant::now();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if peers.len() >= MAX_TRACKED_PEERS && !peers.contains_key(&ip) {
            peers.retain(|_, f| f.last.elapsed() < PEER_FAILURE_WINDOW);
            if peers.len() >= MAX_TRACKED_PEERS {
                // Still full of live entries: forget the stalest eighth.
                let mut by_age: Vec<(Instant, IpAddr)> =
                    peers.iter().map(|(ip, f)| (f.last, *ip)).collect();
                by_age.sort_unstable();
                for (_, old) in by_age.iter().take(MAX_TRACKED_PEERS / 8) {
                    peers.remove(old);
                }
            }
        }
        let entry = peers.entry(ip).or_insert(PeerFailures {
            count: 0,
            last: now,
        });
        if entry.last.elapsed() >= PEER_FAILURE_WINDOW {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
    }

    /// Counts a connection closed for too many failed logins or password changes.
    pub fn closed_connection(&self) {
        self.closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the throttle's series to a `/metrics` scrape.
    pub fn sample(&self, out: &mut String) {
        use std::fmt::Write as _;
        let in_flight = self.max_hashes - self.hashes.available_permits().min(self.max_hashes);
        let _ = writeln!(
            out,
            "# HELP eddy_password_hashes_in_flight Argon2id computations running now.\n\
             # TYPE eddy_password_hashes_in_flight gauge\n\
             eddy_password_hashes_in_flight {in_flight}"
        );
        let counters = [
            (
                "eddy_password_hash_waits_total",
                "Password checks that waited for a free Argon2id slot.",
                &self.hash_waits,
            ),
            (
                "eddy_login_failures_total",
                "Failed stream-protocol logins.",
                &self.failures,
            ),
            (
                "eddy_login_attempts_delayed_total",
                "Login attempts delayed by the failure backoff.",
                &self.delayed,
            ),
            (
                "eddy_password_change_failures_total",
                "CHANGE_PASSWORD requests refused for a wrong current password.",
                &self.change_failures,
            ),
            (
                "eddy_password_change_attempts_delayed_total",
                "CHANGE_PASSWORD requests delayed by the failure backoff.",
                &self.change_delayed,
            ),
            (
                "eddy_login_connections_closed_total",
                "Connections closed after too many failed logins or password changes.",
                &self.closed,
            ),
        ];
        for (name, help, value) in counters {
            crate::metrics::write_counter(out, name, help, value.load(Ordering::Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_free_then_doubles_up_to_the_cap() {
        let max = Duration::from_secs(2);
        assert_eq!(backoff(0, max), Duration::ZERO);
        assert_eq!(backoff(FREE_FAILURES, max), Duration::ZERO);
        assert_eq!(backoff(FREE_FAILURES + 1, max), BACKOFF_BASE);
        assert_eq!(backoff(FREE_FAILURES + 2, max), BACKOFF_BASE * 2);
        assert_eq!(backoff(FREE_FAILURES + 3, max), BACKOFF_BASE * 4);
        assert_eq!(backoff(u32::MAX, max), max);
    }

    #[tokio::test]
    async fn peers_are_counted_and_bounded() {
        let throttle = LoginThrottle::new(&ServerConfig::default());
        let ip: IpAddr = [10, 0, 0, 1].into();
        for _ in 0..3 {
            throttle.failed(Check::Login, Some(ip));
        }
        assert_eq!(throttle.peers.lock().unwrap()[&ip].count, 3);
        for i in 0..MAX_TRACKED_PEERS as u32 + 10 {
            throttle.failed(Check::Login, Some(IpAddr::from(i.to_be_bytes())));
        }
        assert!(throttle.peers.lock().unwrap().len() <= MAX_TRACKED_PEERS);
        let mut out = String::new();
        throttle.sample(&mut out);
        assert!(out.contains("eddy_login_failures_total 65549"), "{out}");
        assert!(out.contains("eddy_password_hashes_in_flight 0"), "{out}");
    }
}
