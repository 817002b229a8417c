//! The published SDK over TLS on the stream port (its TLS options: enabled, domain, CA file).
//! The SDK presents no client certificate, so the server runs with `--tls-client-auth none`
//! (and `optional`).

use crate::stream_support::*;
use eddy_tests::pki;
use iggy::prelude::*;

fn tls_server(pki: &pki::Pki, client_auth: &str) -> eddy_tests::Eddy {
    let cert = pki.server_cert.display().to_string();
    let key = pki.server_key.display().to_string();
    let ca = pki.ca_cert.display().to_string();
    server_with(&[
        "--tls-mode",
        "strict",
        "--tls-client-auth",
        client_auth,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-ca-cert",
        &ca,
    ])
}

fn tls_client(addr: std::net::SocketAddr, pki: &pki::Pki) -> IggyClient {
    IggyClient::builder()
        .with_tcp()
        .with_server_address(addr.to_string())
        .with_reconnection_max_retries(Some(0))
        .with_tls_enabled(true)
        .with_tls_domain("localhost".to_owned())
        .with_tls_ca_file(pki.ca_cert.display().to_string())
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_sdk_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::generate(dir.path());
    for client_auth in ["none", "optional"] {
        let eddy = tls_server(&pki, client_auth);
        let addr = eddy.addrs().stream;
        let client = tls_client(addr, &pki);
        client.connect().await.unwrap();
        let identity = client.login_user("iggy", "iggy").await.unwrap();
        assert_eq!(identity.user_id, 0);
        stream_and_topic(&client, "secure", "t", 1).await;
        let mut batch = sized_messages("tls", 100, 2000);
        client
            .send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch)
            .await
            .unwrap();
        let polled = client
            .poll_messages(
                &id(0),
                &id(0),
                Some(0),
                &Consumer::new(id(1)),
                &PollingStrategy::first(),
                1000,
                false,
            )
            .await
            .unwrap();
        assert_eq!(polled.messages.len(), 100);
        assert_eq!(polled.messages[99].payload.len(), 2000);
        client.logout_user().await.unwrap();

        if client_auth == "optional" {
            continue;
        }
        // A plaintext client gets no answer it can use (the SDK reports it after its own
        // reconnect delay, so this runs once).
        let plain = IggyClient::builder()
            .with_tcp()
            .with_server_address(addr.to_string())
            .with_reconnection_max_retries(Some(0))
            .build()
            .unwrap();
        let refused = async {
            plain.connect().await?;
            plain.login_user("iggy", "iggy").await
        };
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(40), refused).await;
        assert!(
            !matches!(outcome, Ok(Ok(_))),
            "plaintext must not log in to a TLS port"
        );
    }
}
