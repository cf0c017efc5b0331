//! The client against a node serving TLS with a self-signed certificate:
//! HTTPS and TLS gRPC, trusted through the certificate it is given.

mod common;

use std::time::Duration;

use common::{per_client, rules_file};
use tempfile::TempDir;
use weir_client::{CheckRequest, Client, ClientBuilder, ClientError};
use weir_node::tls::TlsFiles;
use weir_node::{Node, ServeConfig};

/// Long enough for a TLS handshake on a busy machine; the test waits on
/// answers, never on the clock.
const DEADLINE: Duration = Duration::from_secs(10);

/// A node serving HTTPS and TLS gRPC on 127.0.0.1, its certificate's PEM,
/// and the directory holding both.
async fn tls_node() -> (Node, String, TempDir) {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let pem = ck.cert.pem();
    std::fs::write(&cert, &pem).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let rules = rules_file(&per_client(1));
    let node = Node::start(ServeConfig {
        tls: Some(TlsFiles { cert, key }),
        peer_grpc: Some("127.0.0.1:0".parse().unwrap()),
        rules_file: Some(rules.to_path_buf()),
        ..ServeConfig::ephemeral()
    })
    .await
    .expect("TLS node starts");
    // The rules are read at start; the file may go.
    drop(rules);
    (node, pem, dir)
}

/// An HTTPS and a TLS gRPC client of `node`, each from `builder`.
fn https_clients(node: &Node, builder: impl Fn() -> ClientBuilder) -> (Client, Client) {
    let http = builder()
        .http(&format!("https://{}", node.http_addr()))
        .unwrap();
    let grpc = builder()
        .grpc(&format!("https://{}", node.grpc_addr()))
        .unwrap();
    (http, grpc)
}

fn check(key: &str) -> CheckRequest {
    CheckRequest::new(key, "GET /")
}

#[tokio::test(flavor = "multi_thread")]
async fn https_and_tls_grpc_answer_with_the_given_certificate_trusted() {
    let (node, pem, _dir) = tls_node().await;
    let (http, grpc) = https_clients(&node, || {
        Client::builder()
            .deadline(DEADLINE)
            .ca_certificate_pem(pem.as_bytes())
    });

    let first = http.check(check("c1")).await.expect("HTTPS verdict");
    assert!(first.allowed && first.limited);
    // The same counter over the other port: its one admission is spent.
    let second = grpc.check(check("c1")).await.expect("TLS gRPC verdict");
    assert!(!second.allowed);
    node.shutdown().await;
}

/// At the client's defaults (a 50 ms deadline, which also bounds the
/// connection and its handshake) each transport reaches a verdict: a busy
/// machine may miss a deadline, which is only ever a timeout, never a
/// refusal of the certificate.
#[tokio::test(flavor = "multi_thread")]
async fn https_and_tls_grpc_answer_at_the_default_deadline() {
    let (node, pem, _dir) = tls_node().await;
    let (http, grpc) = https_clients(&node, || {
        Client::builder().ca_certificate_pem(pem.as_bytes())
    });
    for (name, client) in [("http", http), ("grpc", grpc)] {
        let started = std::time::Instant::now();
        let verdict = loop {
            match client.check(check("c3")).await {
                Ok(v) => break v,
                Err(ClientError::Timeout(_)) if started.elapsed() < DEADLINE => continue,
                Err(e) => panic!("{name}: {e:?}"),
            }
        };
        assert!(verdict.limited, "{name}: {verdict:?}");
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_self_signed_node_is_not_trusted_on_the_public_roots_alone() {
    let (node, _pem, _dir) = tls_node().await;
    let (http, grpc) = https_clients(&node, || Client::builder().deadline(DEADLINE));
    for (name, outcome) in [
        ("http", http.check(check("c2")).await),
        ("grpc", grpc.check(check("c2")).await),
    ] {
        match outcome {
            Err(ClientError::Unavailable(why)) => {
                assert!(why.to_lowercase().contains("certificate"), "{name}: {why}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    node.shutdown().await;
}

#[tokio::test]
async fn a_certificate_with_a_plain_url_is_refused_when_built() {
    for built in [
        Client::builder()
            .ca_certificate_pem("x")
            .http("http://127.0.0.1:1"),
        Client::builder()
            .ca_certificate_pem("x")
            .grpc("http://127.0.0.1:1"),
    ] {
        assert!(
            matches!(built, Err(ClientError::Endpoint { ref reason, .. }) if reason.contains("not https://")),
            "{:?}",
            built.err()
        );
    }
}
