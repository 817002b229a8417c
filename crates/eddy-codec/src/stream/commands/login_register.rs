//! `LOGIN_REGISTER` (code 40, operation 1) and the shared login machinery (spec §1.6, §5.3.1).
//!
//! ```text
//! ClientVersionInfo  [protocol_version: u32][sdk_name: WireName][sdk_version: WireName]
//! code 40 tail       [username: WireName][password: u8-prefixed][context: u32-prefixed]
//! code 45 tail       [token: u8-prefixed][context: u32-prefixed]
//! reply              [user_id: u32][session: u64][server_protocol_version: u32][server_version: WireName]
//! ```
//!
//! The header of a Register request does not say which tail follows. [`RegisterAttempts`]
//! decodes both, so the server can try username/password first and the token second, as the
//! spec requires; decoders ignore trailing bytes.
//!
//! A client of protocol 0.12.2 (the `iggy` 0.11.1-edge.9 SDK) puts a 32-byte session-binding
//! secret between the prefix and either tail; the prefix's version says whether it is there.

use crate::stream::codec::{wire_struct, Field, LongString, Reader, ShortString};
use crate::stream::commands::login_register_with_pat::LoginRegisterWithPat;
use crate::stream::error::CodecError;
use crate::stream::name::WireName;

wire_struct! {
    /// The version prefix of both login bodies.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClientVersionInfo {
        /// Packed protocol version (see `eddy_wire::stream::version`).
        pub protocol_version: u32,
        /// SDK name (the Rust SDK sends `rust-sdk`).
        pub sdk_name: WireName,
        /// SDK version (`0.11.0-edge.4`).
        pub sdk_version: WireName,
    }
}

wire_struct! {
    /// Request body of `LOGIN_REGISTER` (code 40): username and password.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LoginRegister {
        /// Version prefix.
        pub client: ClientVersionInfo,
        /// Username (the server enforces 3..=50 bytes).
        pub username: WireName,
        /// Plaintext password (the server enforces 3..=100 bytes).
        pub password: ShortString,
        /// Context; the SDK sends an empty one.
        pub context: LongString,
    }
}

wire_struct! {
    /// Reply payload of both login commands (after the result section).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LoginRegisterReply {
        /// The authenticated user.
        pub user_id: u32,
        /// Session number (>= 1), echoed by the client in every later header.
        pub session: u64,
        /// Packed protocol version of the server.
        pub server_protocol_version: u32,
        /// Informational server version.
        pub server_version: WireName,
    }
}

crate::stream::commands::command!(LoginRegister, LoginRegister, LoginRegisterReply);

/// Both readings of a Register body: the version prefix, then whichever tails parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterAttempts {
    /// The version prefix.
    pub client: ClientVersionInfo,
    /// The body read as username/password (code 40), if it parses.
    pub password: Option<LoginRegister>,
    /// The body read as a token (code 45), if it parses.
    pub token: Option<LoginRegisterWithPat>,
    /// The session-binding secret of a 0.12.2 body (`None` for 0.11.x).
    pub bind_secret: Option<[u8; BIND_SECRET_LEN]>,
}

/// Length of the session-binding secret of a 0.12.2 login body.
pub const BIND_SECRET_LEN: usize = 32;

impl RegisterAttempts {
    /// Decodes a Register body. Fails with [`CodecError::MalformedLogin`] when the version
    /// prefix is undecodable or neither tail parses (eviction `MalformedLogin`).
    pub fn decode(body: &[u8]) -> Result<Self, CodecError> {
        let mut reader = Reader::new(body);
        let client = ClientVersionInfo::take(&mut reader, "client_version")
            .map_err(|_| CodecError::MalformedLogin)?;
        let prefix_len = body.len() - reader.remaining();
        let with_secret = eddy_wire::stream::version::Revision::of(client.protocol_version)
            .is_some_and(eddy_wire::stream::version::Revision::is_v0_12);
        let (bind_secret, unbound);
        let body = if with_secret {
            let secret = body
                .get(prefix_len..prefix_len + BIND_SECRET_LEN)
                .ok_or(CodecError::MalformedLogin)?;
            let mut copy = [0; BIND_SECRET_LEN];
            copy.copy_from_slice(secret);
            bind_secret = Some(copy);
            // The tails parse as in 0.11 once the secret is taken out.
            unbound = [&body[..prefix_len], &body[prefix_len + BIND_SECRET_LEN..]].concat();
            &unbound[..]
        } else {
            bind_secret = None;
            body
        };
        let password = LoginRegister::take(&mut Reader::new(body), "login").ok();
        let token = LoginRegisterWithPat::take(&mut Reader::new(body), "login").ok();
        if password.is_none() && token.is_none() {
            return Err(CodecError::MalformedLogin);
        }
        Ok(Self {
            client,
            password,
            token,
            bind_secret,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::codec::WireEncode;
    use crate::stream::commands::testing::*;
    use crate::stream::reply::RESULT_OK;

    fn sdk_client() -> ClientVersionInfo {
        ClientVersionInfo {
            protocol_version: 0x2C00,
            sdk_name: WireName::new("rust-sdk").unwrap(),
            sdk_version: WireName::new("0.11.0-edge.4").unwrap(),
        }
    }

    /// Spec §1.13.1: the 41-byte login body and the 33-byte login reply body.
    #[test]
    fn golden() {
        let request = LoginRegister {
            client: sdk_client(),
            username: WireName::new("iggy").unwrap(),
            password: ShortString::new("iggy").unwrap(),
            context: LongString::new(""),
        };
        let body = round_trip_strict(&request);
        assert_eq!(
            body,
            hex("00 2c 00 00 08 72 75 73 74 2d 73 64 6b 0d 30 2e \
                 31 31 2e 30 2d 65 64 67 65 2e 34 04 69 67 67 79 \
                 04 69 67 67 79 00 00 00 00")
        );
        assert_eq!(
            eddy_wire::stream::request_checksum(&body),
            0x87a9_d6b2_c158_7e1d
        );

        let reply = LoginRegisterReply {
            user_id: 0,
            session: 7,
            server_protocol_version: 0x2C00,
            server_version: WireName::new("0.9.0-edge.5").unwrap(),
        };
        let mut reply_body = RESULT_OK.to_vec();
        reply.encode(&mut reply_body);
        assert_eq!(
            reply_body,
            hex("00 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00 \
                 00 2c 00 00 0c 30 2e 39 2e 30 2d 65 64 67 65 2e 35")
        );
        round_trip_strict(&reply);

        let attempts = RegisterAttempts::decode(&body).unwrap();
        assert_eq!(attempts.client, sdk_client());
        assert_eq!(attempts.password, Some(request));
        assert_eq!(
            attempts.token, None,
            "a password body does not parse as a token"
        );
    }

    /// A 0.12.2 body (the edge.9 SDK): the prefix, the 32-byte bind secret, then the tail.
    #[test]
    fn bind_secret_of_protocol_0_12_2() {
        let client = ClientVersionInfo {
            protocol_version: 0x3002,
            sdk_name: WireName::new("rust-sdk").unwrap(),
            sdk_version: WireName::new("0.11.1-edge.9").unwrap(),
        };
        let mut body = client.to_vec();
        body.extend_from_slice(&[0x5a; BIND_SECRET_LEN]);
        body.extend_from_slice(&hex("04 69 67 67 79 04 69 67 67 79 00 00 00 00"));
        let attempts = RegisterAttempts::decode(&body).unwrap();
        assert_eq!(attempts.bind_secret, Some([0x5a; BIND_SECRET_LEN]));
        let login = attempts.password.unwrap();
        assert_eq!(login.username.as_str(), "iggy");
        assert_eq!(login.password.0, "iggy");
        assert_eq!(attempts.token, None);

        let mut token = client.to_vec();
        token.extend_from_slice(&[7; BIND_SECRET_LEN]);
        token.extend_from_slice(&hex("03 61 62 63 00 00 00 00"));
        let attempts = RegisterAttempts::decode(&token).unwrap();
        assert_eq!(attempts.token.unwrap().token.0, "abc");
        assert_eq!(attempts.password, None);
        // A prefix without a whole secret is malformed.
        let short = &body[..client.to_vec().len() + BIND_SECRET_LEN - 1];
        assert_eq!(
            RegisterAttempts::decode(short),
            Err(CodecError::MalformedLogin)
        );
    }

    #[test]
    fn token_bodies_and_malformed_logins() {
        let pat = LoginRegisterWithPat {
            client: sdk_client(),
            token: ShortString::new("t".repeat(68)).unwrap(),
            context: LongString::new(""),
        };
        let body = pat.to_vec();
        let attempts = RegisterAttempts::decode(&body).unwrap();
        assert_eq!(
            attempts.password, None,
            "a token body does not parse as a password"
        );
        assert_eq!(attempts.token, Some(pat));
        assert_eq!(
            RegisterAttempts::decode(&body[..10]),
            Err(CodecError::MalformedLogin)
        );
        assert_eq!(
            RegisterAttempts::decode(&[0, 0x2c, 0, 0, 0]),
            Err(CodecError::MalformedLogin),
            "zero-length sdk name"
        );
        let mut trailing = body.clone();
        trailing.extend_from_slice(b"junk");
        assert!(RegisterAttempts::decode(&trailing).unwrap().token.is_some());
    }
}
