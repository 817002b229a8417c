//! Async clients of eddy's two protocols, built only on eddy's protocol crates (`eddy-wire`
//! for framing, `eddy-codec` for bodies): what a third-party program embeds to talk to eddy
//! without the Iggy SDK or the Celeriant client.
//!
//! - [`StreamClient`]: the Iggy stream protocol (port 8090): login with a password or a
//!   personal access token, streams, topics, partitions, send, poll, offsets, consumer groups,
//!   users, permissions, tokens, stats and cluster metadata, plus [`StreamClient::call`] for
//!   any other command of the catalog.
//! - [`EventClient`]: the Celeriant event protocol (port 10000): write (OCC, idempotency),
//!   read, details, trim, delete, the three list requests, schemas and [`Watch`].
//! - [`transport`]: TCP with deadlines, and TLS (tokio-rustls, ring provider) with a CA file,
//!   a server name, an optional client certificate for mTLS.
//!
//! Every failure is a [`ClientError`] whose [`ClientError::kind`] says whether the server was
//! unreachable, refused a login, or refused the request (with its code).
//!
//! ```no_run
//! # async fn example() -> Result<(), eddy_client::ClientError> {
//! use eddy_client::{ConnectOptions, StreamClient};
//! let mut client = StreamClient::connect("127.0.0.1:8090", &ConnectOptions::default()).await?;
//! client.login_user("iggy", "iggy").await?;
//! let stream = client.create_stream("orders").await?;
//! assert_eq!(stream.topics.len(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! Architecture invariant: this crate depends on no eddy crate above `eddy-codec` (no server,
//! no storage, no auth), so it stays embeddable.
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

pub mod error;
pub mod event;
pub mod stream;
pub mod transport;

pub use error::{ClientError, ErrorKind, TlsSetupError};
pub use event::{EventClient, Watch, WriteOptions};
pub use stream::{Login, StreamClient};
pub use transport::{ConnectOptions, TlsOptions};
