//! The event protocol's Identify handshake against the real server: RSA identity (and every
//! refusal), API keys with read-write and read-only access, `--require-client-identity`, the
//! dictionary handshake in V2 and V3, and the published client over TLS.

use std::collections::HashMap;
use tokio::io::AsyncReadExt as _;

use crate::event_support::{addr, client, code_of, error_of, start, Raw, ANSWER};
use base64::Engine as _;
use celeriant_client_tokio::{
    AuthError, CeleriantClient, ClientError, ClientIdentityConfig, ClientTlsConfig, ServerError,
};
use celeriant_crypto::Crypto;
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::request::requests::{
    IdentifyRequest, ListOrgsRequest, SingleAggregateWrite, WriteRequest,
};
use celeriant_wal::aggregate_key::AggregateKey;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn one_write(client_id: u128, aggregate_id: u128) -> WriteRequest {
    let event = celeriant_client_tokio::json_event(7, &serde_json::json!({"a": 1})).unwrap();
    WriteRequest {
        correlation_id: None,
        client_id,
        user_id: None,
        writes: HashMap::from([(
            AggregateKey::new(1, 2, aggregate_id),
            SingleAggregateWrite {
                events: vec![event],
                allow_create: true,
                expected_version: None,
                enforce_client_idempotency: false,
            },
        )]),
    }
}

fn assert_auth(e: &ClientError, expected: impl Fn(&AuthError) -> bool) {
    match e {
        ClientError::Server(ServerError::Auth { kind, .. }) if expected(kind) => {}
        other => panic!("unexpected error {other:?}"),
    }
}

#[tokio::test]
async fn rsa_identity_gives_the_derived_id_and_mismatched_writes_are_refused() {
    let eddy = start(&[]);
    let keys = Crypto::generate_keypair(None).unwrap();
    let der = B64.decode(&keys.public_key_base64).unwrap();
    let expected = Crypto::generate_short_client_identity(&der);

    let mut c = client(&eddy).await;
    let id = c
        .identify(&ClientIdentityConfig::from_key_pair(
            keys.public_key_base64.clone(),
            keys.private_key_base64.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(
        id,
        Some(expected),
        "client id = first 16 bytes of SHA-256(DER), LE"
    );
    // The connection stays usable after a mismatch: the same socket answers twice.
    for other in [expected ^ 1, 42] {
        let e = c.write(one_write(other, 1)).await.unwrap_err();
        assert_auth(&e, |k| matches!(k, AuthError::Mismatch));
    }
    // The verified id itself may write.
    let ack = c.write(one_write(expected, 1)).await.unwrap();
    assert_eq!(ack.max_aggregate_version, Some(1));
    // Same key, same id on a new connection.
    let mut again = client(&eddy).await;
    let id2 = again
        .identify(&ClientIdentityConfig::from_key_pair(
            keys.public_key_base64,
            keys.private_key_base64,
        ))
        .await
        .unwrap();
    assert_eq!(id2, Some(expected));
}

/// Sends a raw V2 Identify and returns the error code; asserts the connection is then closed.
async fn refused(eddy: &eddy_tests::Eddy, req: &IdentifyRequest) -> (u32, String) {
    let mut raw = Raw::connect(eddy).await;
    raw.send_identify(req, 2).await;
    let (frame, resp) = raw.recv_response(None).await;
    assert_eq!(frame.message_type, 7);
    raw.expect_closed().await;
    error_of(&resp)
}

#[tokio::test]
async fn every_rsa_refusal_has_its_code_and_closes() {
    let eddy = start(&[]);
    let keys = Crypto::generate_keypair(None).unwrap();
    let signed = |nonce: u64| IdentifyRequest {
        correlation_id: None,
        public_key: Some(keys.public_key_base64.clone()),
        nonce: Some(nonce.to_string()),
        signature: Some(Crypto::sign_nonce(&keys.private_key_base64, &nonce.to_string()).unwrap()),
        api_key: None,
        known_dict_sha256: None,
    };
    // Stale (more than two minutes old) and future (more than 60 s ahead) nonces.
    for nonce in [now_ms() - 130_000, now_ms() + 90_000] {
        let (code, message) = refused(&eddy, &signed(nonce)).await;
        assert_eq!(code, 10001, "{message}");
        assert!(serde_json::from_str::<serde_json::Value>(&message).is_ok());
    }
    // A valid signature over another nonce.
    let mut other = signed(now_ms());
    other.nonce = Some((now_ms() - 5).to_string());
    assert_eq!(refused(&eddy, &other).await.0, 10002);
    // An undecodable key.
    let mut bad_key = signed(now_ms());
    bad_key.public_key = Some("not base64 !".into());
    assert_eq!(refused(&eddy, &bad_key).await.0, 10002);
    // Through the published client: the error maps to Auth/InvalidSignature.
    let mut c = client(&eddy).await;
    let wrong_pair = Crypto::generate_keypair(None).unwrap();
    let e = c
        .identify(&ClientIdentityConfig::from_key_pair(
            keys.public_key_base64.clone(),
            wrong_pair.private_key_base64,
        ))
        .await
        .unwrap_err();
    assert_auth(&e, |k| matches!(k, AuthError::InvalidSignature));
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[tokio::test]
async fn api_keys_levels_refusals_and_required_identity() {
    let mut eddy = start(&[
        "--require-client-identity",
        "--insecure-allow-plaintext-auth",
    ]);
    let rw = celeriant_crypto::generate_api_key();
    let ro = celeriant_crypto::generate_api_key();
    let filler = celeriant_crypto::generate_api_key();
    let h = |k: &[u8; 32]| hex(&celeriant_crypto::hash_api_key(k));
    std::fs::write(
        eddy.data_dir().join("api_keys.toml"),
        format!(
            "[keys]\nprimary_rw = \"{}\"\nsecondary_rw = \"{}\"\nprimary_ro = \"{}\"\nsecondary_ro = \"{}\"\n",
            h(&rw),
            h(&filler),
            h(&ro).to_uppercase(),
            h(&filler)
        ),
    )
    .unwrap();
    eddy.restart();
    let key = |k: &[u8; 32]| ClientIdentityConfig::from_api_key(B64.encode(k));

    // Read-write key: writes are served.
    let mut c = client(&eddy).await;
    assert_eq!(c.identify(&key(&rw)).await.unwrap(), None);
    assert_eq!(
        c.write(one_write(9, 1))
            .await
            .unwrap()
            .max_aggregate_version,
        Some(1)
    );

    // Read-only key: mutations get 10007 and the connection stays open.
    let mut c = client(&eddy).await;
    c.identify(&key(&ro)).await.unwrap();
    for _ in 0..2 {
        let e = c.write(one_write(9, 1)).await.unwrap_err();
        assert_auth(&e, |k| matches!(k, AuthError::InsufficientPermissions));
    }
    // Schema registration is a write: refused too, and nothing is registered.
    let schema = |client_id| celeriant_msg::request::requests::RegisterSchemaRequest {
        correlation_id: None,
        client_id,
        user_id: None,
        schema_key: celeriant_wal::schema_key::SchemaKey::new(1, 2, 7, 0),
        schema_type: 0,
        schema: "false".into(),
    };
    let e = c.register_schema(schema(1)).await.unwrap_err();
    assert_auth(&e, |k| matches!(k, AuthError::InsufficientPermissions));
    let mut rw_conn = client(&eddy).await;
    rw_conn.identify(&key(&rw)).await.unwrap();
    rw_conn
        .write(one_write(9, 2))
        .await
        .expect("no schema was registered by the read-only key");

    // RSA identity and a read-only key: the id mismatch is checked first.
    let keys = Crypto::generate_keypair(None).unwrap();
    let mut c = client(&eddy).await;
    let both = ClientIdentityConfig {
        public_key: Some(keys.public_key_base64),
        private_key: Some(keys.private_key_base64),
        api_key: Some(B64.encode(ro)),
    };
    let id = c.identify(&both).await.unwrap().unwrap();
    let e = c.write(one_write(id ^ 7, 1)).await.unwrap_err();
    assert_auth(&e, |k| matches!(k, AuthError::Mismatch));
    let e = c.write(one_write(id, 1)).await.unwrap_err();
    assert_auth(&e, |k| matches!(k, AuthError::InsufficientPermissions));

    // No key: 10005. Unknown, short or non-base64 keys: 10006.
    let mut c = client(&eddy).await;
    let e = c
        .identify(&ClientIdentityConfig {
            public_key: None,
            private_key: None,
            api_key: None,
        })
        .await
        .unwrap_err();
    assert_auth(&e, |k| matches!(k, AuthError::AuthRequired));
    for bad in [
        B64.encode(filler.map(|b| b ^ 0xff)),
        B64.encode([1u8; 16]),
        "%%%".into(),
    ] {
        let mut c = client(&eddy).await;
        let e = c
            .identify(&ClientIdentityConfig::from_api_key(bad))
            .await
            .unwrap_err();
        assert_auth(&e, |k| matches!(k, AuthError::InvalidKey));
    }

    // Skipping Identify: 10004 echoing the correlation id, then close.
    let mut c = client(&eddy).await;
    let e = c.write(one_write(1, 1)).await.unwrap_err();
    assert!(matches!(e, ClientError::IdentityRequired), "{e:?}");
    let mut raw = Raw::connect(&eddy).await;
    raw.send_request(
        &ClientRequest::ListOrgs(ListOrgsRequest {
            correlation_id: Some(77),
            shard_id: 0,
            cursor: None,
        }),
        3,
    )
    .await;
    let (frame, resp) = raw.recv_response(None).await;
    assert_eq!(frame.version, 3, "answered in the request's version");
    assert_eq!(error_of(&resp).0, 10004);
    assert_eq!(resp.correlation_id(), Some(77));
    raw.expect_closed().await;
}

#[tokio::test]
async fn dictionary_handshake_v2_and_v3() {
    let eddy = start(&[]);
    let dict_on_disk = std::fs::read(eddy.data_dir().join("dictionary.zstd_dict")).unwrap();
    let sha = celeriant_crypto::sha256_hex(&dict_on_disk);
    for version in [2, 3] {
        let mut raw = Raw::connect(&eddy).await;
        raw.send_identify(
            &IdentifyRequest {
                correlation_id: Some(5),
                public_key: None,
                nonce: None,
                signature: None,
                api_key: None,
                known_dict_sha256: None,
            },
            version,
        )
        .await;
        let (frame, resp) = raw.recv_identify().await;
        assert_eq!(frame.version, version);
        assert_eq!(resp.correlation_id, Some(5));
        assert_eq!(resp.client_id, None);
        assert_eq!(resp.access_level, None, "no API keys configured");
        assert_eq!(resp.compression_dict_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(
            resp.compression_dict_bytes.as_deref(),
            Some(&dict_on_disk[..])
        );
        if version == 3 {
            // §2.2: the dictionary bytes travel as MessagePack bin (bin16 for a 14 KiB dict).
            let tail = &frame.body[frame.body.len() - dict_on_disk.len() - 3..];
            assert_eq!(tail[0], 0xc5, "bin16 marker");
        }

        let mut raw = Raw::connect(&eddy).await;
        raw.send_identify(
            &IdentifyRequest {
                correlation_id: None,
                public_key: None,
                nonce: None,
                signature: None,
                api_key: None,
                known_dict_sha256: Some(sha.clone()),
            },
            version,
        )
        .await;
        let (_, resp) = raw.recv_identify().await;
        assert_eq!(resp.compression_dict_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(
            resp.compression_dict_bytes, None,
            "the client holds it already"
        );
    }
    // Identify is valid only as the first frame: later it is an unknown type and closes.
    let mut raw = Raw::connect(&eddy).await;
    raw.send_request(
        &ClientRequest::ListOrgs(ListOrgsRequest {
            correlation_id: Some(1),
            shard_id: 9_999,
            cursor: None,
        }),
        2,
    )
    .await;
    let (_, resp) = raw.recv_response(None).await;
    assert_eq!(error_of(&resp).0, 9002);
    raw.send_identify(
        &IdentifyRequest {
            correlation_id: None,
            public_key: None,
            nonce: None,
            signature: None,
            api_key: None,
            known_dict_sha256: None,
        },
        2,
    )
    .await;
    raw.expect_closed().await;
}

#[tokio::test]
async fn published_client_over_tls_identifies_and_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let pki = eddy_tests::pki::generate(dir.path());
    let eddy = start(&[
        "--tls-mode",
        "strict",
        "--tls-cert",
        pki.server_cert.to_str().unwrap(),
        "--tls-key",
        pki.server_key.to_str().unwrap(),
        "--tls-ca-cert",
        pki.ca_cert.to_str().unwrap(),
        "--require-client-identity",
    ]);
    let tls = ClientTlsConfig::from_paths(
        &pki.ca_cert,
        Some((&pki.client_cert, &pki.client_key)),
        "localhost",
    )
    .unwrap();
    let mut c = CeleriantClient::connect_tls(&addr(&eddy), tls)
        .await
        .unwrap()
        .with_timeout(ANSWER);
    let keys = Crypto::generate_keypair(None).unwrap();
    let der = B64.decode(&keys.public_key_base64).unwrap();
    let id = c
        .identify(&ClientIdentityConfig::from_key_pair(
            keys.public_key_base64,
            keys.private_key_base64,
        ))
        .await
        .unwrap();
    assert_eq!(id, Some(Crypto::generate_short_client_identity(&der)));
    let e = c.write(one_write(1, 1)).await.unwrap_err();
    assert_auth(&e, |k| matches!(k, AuthError::Mismatch));
    // Plaintext on the strict port gets nothing.
    let mut raw = Raw::connect(&eddy).await;
    raw.send_identify(
        &IdentifyRequest {
            correlation_id: None,
            public_key: None,
            nonce: None,
            signature: None,
            api_key: None,
            known_dict_sha256: None,
        },
        2,
    )
    .await;
    // Plaintext fails the TLS handshake: at most a TLS alert record (0x15), never a frame.
    let mut got = Vec::new();
    tokio::time::timeout(ANSWER, raw.s.read_to_end(&mut got))
        .await
        .expect("closed in time")
        .ok();
    assert!(got.is_empty() || got[0] == 0x15, "{got:?}");
    assert!(code_of(&e).is_none());
}
