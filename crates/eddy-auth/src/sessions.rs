//! Stream-protocol sessions: the clients table (one entry per connection), login state, session
//! numbers, and the stale-client rule of the heartbeat.
//!
//! Every accepted connection gets a [`ClientId`] (u32, never 0, never reused while the process
//! runs); that is the `client_id` of `GET_ME`, `GET_CLIENT` and `GET_CLIENTS`. A successful
//! login binds a [`Session`] to it: the user id and a session number, a global counter starting
//! at 1 (the SDK refuses 0). Authentication is a property of the connection: the server reads
//! the session from this table on every request, so ending a session here (logout, the user's
//! deletion or deactivation) takes effect on the connection's next request.
//!
//! Only `std` synchronisation: one mutex over the table, held for map operations only.
//!
//! Invariants: a client id and a session number are handed out once; a client has at most one
//! session; [`ClientsTable::disconnect`] removes every trace of a client.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::token::TokenDigest;

/// A connection's server-chosen id (u32, `>= 1`).
pub type ClientId = u32;

/// The user id shown for a connection that is not logged in.
pub const NO_USER: u32 = u32::MAX;

/// A connection is stale after this many heartbeat intervals without a request (1.2, as the
/// reference server: 36 s for its 30 s interval). Numerator and denominator.
pub const STALE_FACTOR: (u32, u32) = (6, 5);

/// How long a connection may stay silent before it counts as stale, for a heartbeat interval.
pub fn stale_after(interval: Duration) -> Duration {
    interval * STALE_FACTOR.0 / STALE_FACTOR.1
}

/// The transport a client connected over (the `transport` byte of client replies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// Plain or TLS TCP.
    Tcp,
}

impl Transport {
    /// The wire code (1 TCP, 2 QUIC, 3 HTTP, 4 WebSocket).
    pub const fn code(self) -> u8 {
        match self {
            Transport::Tcp => 1,
        }
    }
}

/// What a session was authenticated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// Username and password.
    Password,
    /// A personal access token: the session lasts only while that token is stored and not
    /// expired (the server checks [`crate::credentials::token_session_valid`] on every
    /// request).
    Token(TokenDigest),
}

/// A logged-in session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Session {
    /// The authenticated user.
    pub user_id: u32,
    /// The session number returned by the login reply (`>= 1`).
    pub number: u64,
    /// What the login presented.
    pub credential: Credential,
    /// The packed protocol version the client sent at login: the server answers the session in
    /// that revision's dialect.
    pub protocol_version: u32,
}

/// What the table knows about one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// The connection's id.
    pub client_id: ClientId,
    /// Peer address (`ip:port`).
    pub address: String,
    /// Transport.
    pub transport: Transport,
    /// The session, when logged in.
    pub session: Option<Session>,
    /// Failed logins on this connection since its last successful one.
    pub login_failures: u32,
}

impl ClientInfo {
    /// The user id as client replies show it ([`NO_USER`] when not logged in).
    pub fn user_id(&self) -> u32 {
        self.session.map_or(NO_USER, |s| s.user_id)
    }
}

/// Why a session operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The client is not (or no longer) in the table.
    #[error("client {client_id} is not connected")]
    UnknownClient {
        /// The client.
        client_id: ClientId,
    },
}

/// The clients table.
#[derive(Debug)]
pub struct ClientsTable {
    clients: Mutex<BTreeMap<ClientId, ClientInfo>>,
    next_client: AtomicU32,
    next_session: AtomicU64,
}

impl Default for ClientsTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientsTable {
    /// An empty table; the first client id and the first session number are 1.
    pub fn new() -> Self {
        Self {
            clients: Mutex::new(BTreeMap::new()),
            next_client: AtomicU32::new(1),
            next_session: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<ClientId, ClientInfo>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new connection and returns its id.
    pub fn connect(&self, address: String, transport: Transport) -> ClientId {
        let mut clients = self.lock();
        // Skip 0 and any id still in use after a (theoretical) wrap of the counter.
        let id = loop {
            let id = self.next_client.fetch_add(1, Ordering::Relaxed);
            if id != 0 && !clients.contains_key(&id) {
                break id;
            }
        };
        clients.insert(
            id,
            ClientInfo {
                client_id: id,
                address,
                transport,
                session: None,
                login_failures: 0,
            },
        );
        id
    }

    /// Removes a connection; returns the session it held.
    pub fn disconnect(&self, client_id: ClientId) -> Option<Session> {
        self.lock().remove(&client_id).and_then(|c| c.session)
    }

    /// Binds a new password session for `user_id` to the connection (see
    /// [`ClientsTable::login_with`]).
    pub fn login(
        &self,
        client_id: ClientId,
        user_id: u32,
    ) -> Result<(Session, Option<Session>), SessionError> {
        self.login_with(client_id, user_id, Credential::Password, 0)
    }

    /// Binds a new session for `user_id`, authenticated with `credential` by a client of
    /// `protocol_version`, to the connection, replacing any session it had (a re-login is a
    /// logout followed by a login). Returns the new session and the replaced one.
    pub fn login_with(
        &self,
        client_id: ClientId,
        user_id: u32,
        credential: Credential,
        protocol_version: u32,
    ) -> Result<(Session, Option<Session>), SessionError> {
        let mut clients = self.lock();
        let client = clients
            .get_mut(&client_id)
            .ok_or(SessionError::UnknownClient { client_id })?;
        let number = self.next_session.fetch_add(1, Ordering::Relaxed);
        assert!(number >= 1, "session numbers start at 1 and never wrap");
        let session = Session {
            user_id,
            number,
            credential,
            protocol_version,
        };
        let previous = client.session.replace(session);
        client.login_failures = 0;
        Ok((session, previous))
    }

    /// Counts a failed login on the connection; returns its failures since its last successful
    /// login (0 if the client is gone).
    pub fn login_failed(&self, client_id: ClientId) -> u32 {
        self.lock().get_mut(&client_id).map_or(0, |c| {
            c.login_failures = c.login_failures.saturating_add(1);
            c.login_failures
        })
    }

    /// The connection's failed logins since its last successful one.
    pub fn login_failures(&self, client_id: ClientId) -> u32 {
        self.lock().get(&client_id).map_or(0, |c| c.login_failures)
    }

    /// Ends the connection's session; returns it (`None` if it was not logged in).
    pub fn logout(&self, client_id: ClientId) -> Option<Session> {
        self.lock()
            .get_mut(&client_id)
            .and_then(|c| c.session.take())
    }

    /// The connection's current session.
    pub fn session(&self, client_id: ClientId) -> Option<Session> {
        self.lock().get(&client_id).and_then(|c| c.session)
    }

    /// Ends every session of `user_id` (the user was deleted or deactivated); returns the
    /// clients that were logged in as that user.
    pub fn end_sessions_of(&self, user_id: u32) -> Vec<ClientId> {
        let mut ended = Vec::new();
        for client in self.lock().values_mut() {
            if client.session.is_some_and(|s| s.user_id == user_id) {
                client.session = None;
                ended.push(client.client_id);
            }
        }
        ended
    }

    /// One client.
    pub fn get(&self, client_id: ClientId) -> Option<ClientInfo> {
        self.lock().get(&client_id).cloned()
    }

    /// Every client, by id.
    pub fn list(&self) -> Vec<ClientInfo> {
        self.lock().values().cloned().collect()
    }

    /// Connected clients.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no client is connected.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_sessions_start_at_one_and_are_unique() {
        let table = ClientsTable::new();
        let a = table.connect("127.0.0.1:1".into(), Transport::Tcp);
        let b = table.connect("127.0.0.1:2".into(), Transport::Tcp);
        assert_eq!((a, b), (1, 2));
        assert_eq!(table.session(a), None);
        let (s1, prev) = table.login(a, 0).unwrap();
        assert_eq!((s1.number, prev), (1, None));
        let (s2, _) = table.login(b, 5).unwrap();
        assert_eq!(s2.number, 2);
        // Re-login replaces the session with a new number.
        let (s3, prev) = table.login(a, 7).unwrap();
        assert_eq!(
            s3,
            Session {
                user_id: 7,
                number: 3,
                credential: Credential::Password,
                protocol_version: 0,
            }
        );
        assert_eq!(prev, Some(s1));
        assert_eq!(table.session(a), Some(s3));
        assert_eq!(table.get(a).unwrap().user_id(), 7);
        assert_eq!(table.login_failed(a), 1);
        assert_eq!(table.login_failed(a), 2);
        assert_eq!(table.login_failures(a), 2);
        table.login(a, 7).unwrap();
        assert_eq!(table.login_failures(a), 0, "a login resets the count");
        let digest = TokenDigest::of("a-token");
        let (s5, _) = table
            .login_with(b, 5, Credential::Token(digest), 0)
            .unwrap();
        assert_eq!(
            table.session(b).unwrap().credential,
            Credential::Token(digest)
        );
        assert_eq!(s5.number, 5);
    }

    #[test]
    fn logout_disconnect_and_revocation() {
        let table = ClientsTable::new();
        let a = table.connect("a".into(), Transport::Tcp);
        let b = table.connect("b".into(), Transport::Tcp);
        let c = table.connect("c".into(), Transport::Tcp);
        table.login(a, 3).unwrap();
        table.login(b, 3).unwrap();
        table.login(c, 4).unwrap();
        assert_eq!(table.end_sessions_of(3), vec![a, b]);
        assert_eq!(table.session(a), None);
        assert_eq!(table.get(b).unwrap().user_id(), NO_USER);
        assert!(table.session(c).is_some());
        assert!(table.logout(c).is_some());
        assert_eq!(table.logout(c), None);
        assert_eq!(table.len(), 3);
        table.disconnect(a);
        assert_eq!(table.get(a), None);
        assert_eq!(
            table.login(a, 1),
            Err(SessionError::UnknownClient { client_id: a })
        );
        assert_eq!(
            table.list().iter().map(|c| c.client_id).collect::<Vec<_>>(),
            vec![b, c]
        );
    }

    #[test]
    fn stale_threshold_is_one_point_two_intervals() {
        assert_eq!(
            stale_after(Duration::from_secs(30)),
            Duration::from_secs(36)
        );
        assert_eq!(
            stale_after(Duration::from_millis(500)),
            Duration::from_millis(600)
        );
    }
}
