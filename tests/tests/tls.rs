//! TLS on the client ports with a certificate made at test time: HTTPS, TLS gRPC, and peers on their plaintext port.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::{json, Value};
use tempfile::TempDir;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use weir_node::tls::TlsFiles;
use weir_node::{Node, ServeConfig};
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest};
use weir_tests::{cluster_member, wait_until, TestNode, DEADLINE, ONE_PER_HOUR};

/// A self-signed certificate for `localhost` and 127.0.0.1, in PEM files.
struct Cert {
    _dir: TempDir,
    pem: String,
    files: TlsFiles,
}

fn self_signed() -> Cert {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("certificate");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let pem = ck.cert.pem();
    std::fs::write(&cert, &pem).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    Cert {
        _dir: dir,
        pem,
        files: TlsFiles { cert, key },
    }
}

fn with_tls(c: &mut ServeConfig, cert: &Cert) {
    c.tls = Some(cert.files.clone());
    c.peer_grpc = Some("127.0.0.1:0".parse().unwrap());
}

/// An HTTPS client that trusts only `cert` and finds `localhost` at `addr`.
fn https_client(cert: &Cert, addr: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(DEADLINE)
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert.pem.as_bytes()).unwrap())
        .resolve("localhost", addr)
        .build()
        .unwrap()
}

async fn https_check(cert: &Cert, node: &TestNode, key: &str) -> (u16, Value) {
    let addr = node.node().http_addr();
    let url = format!("https://localhost:{}/v1/check", addr.port());
    let res = https_client(cert, addr)
        .post(url)
        .json(&json!({"key": key}))
        .send()
        .await
        .expect("HTTPS check");
    let status = res.status().as_u16();
    (status, res.json().await.expect("JSON body"))
}

async fn grpc_tls(cert: &Cert, addr: SocketAddr) -> RateLimiterClient<Channel> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&cert.pem))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("TLS gRPC connects");
    RateLimiterClient::new(channel)
}

fn one(key: &str) -> CheckRequest {
    CheckRequest {
        items: vec![CheckItem {
            key: key.into(),
            ..CheckItem::default()
        }],
    }
}

#[tokio::test]
async fn an_https_check_answers_a_client_that_trusts_the_certificate() {
    let cert = self_signed();
    let node = TestNode::start(ONE_PER_HOUR, |c| with_tls(c, &cert)).await;
    let (status, body) = https_check(&cert, &node, "a").await;
    assert_eq!((status, &body["rule"]), (200, &json!("per-client")));
    let (status, _) = https_check(&cert, &node, "a").await;
    assert_eq!(status, 429);
}

#[tokio::test]
async fn plain_http_to_the_tls_port_fails() {
    let cert = self_signed();
    let node = TestNode::start(ONE_PER_HOUR, |c| with_tls(c, &cert)).await;
    let res = weir_tests::client()
        .post(node.url("/v1/check"))
        .json(&json!({"key": "a"}))
        .send()
        .await;
    assert!(res.is_err(), "plaintext was answered: {res:?}");
    // And a client that does not trust the certificate is refused.
    let addr = node.node().http_addr();
    let untrusting = reqwest::Client::builder()
        .no_proxy()
        .resolve("localhost", addr)
        .build()
        .unwrap();
    let url = format!("https://localhost:{}/healthz", addr.port());
    assert!(untrusting.get(url).send().await.is_err());
}

#[tokio::test]
async fn grpc_check_over_tls_is_decided_and_plaintext_grpc_is_refused() {
    let cert = self_signed();
    let node = TestNode::start(ONE_PER_HOUR, |c| with_tls(c, &cert)).await;
    let addr = node.node().grpc_addr();
    let mut client = grpc_tls(&cert, addr).await;
    let r = client.check(one("g")).await.expect("a verdict");
    let r = &r.get_ref().results[0];
    assert!(r.allowed && r.error.is_none(), "{r:?}");
    assert_eq!(r.rule, "per-client");

    let plain = async {
        let mut c = RateLimiterClient::connect(format!("http://{addr}")).await?;
        c.check(one("g"))
            .await
            .map_err(Box::<dyn std::error::Error>::from)
    };
    let plain: Result<_, Box<dyn std::error::Error>> = plain.await;
    assert!(plain.is_err(), "plaintext gRPC was answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_nodes_forward_checks_to_each_other_on_the_peer_port() {
    let cert = self_signed();
    let member = |c: &mut ServeConfig, id: &str, seed: Option<SocketAddr>| {
        with_tls(c, &cert);
        cluster_member(c, id, seed);
    };
    let first = TestNode::start(ONE_PER_HOUR, |c| member(c, "node-1", None)).await;
    let seed = first.state().config.gossip;
    let second = TestNode::start(ONE_PER_HOUR, |c| member(c, "node-2", Some(seed))).await;
    let cluster = first.state().engine.cluster().unwrap().clone();
    wait_until("node-1 sees node-2", || async { cluster.ring().len() == 2 }).await;
    let peer = cluster
        .members_status()
        .into_iter()
        .find(|m| m.id == "node-2")
        .unwrap();
    assert_eq!(
        peer.grpc,
        second.node().peer_addr(),
        "peers are told the peer port"
    );
    assert_ne!(peer.grpc, second.node().grpc_addr());

    let key = (0..)
        .map(|i| format!("k-{i}"))
        .find(|k| cluster.owner_of(k).unwrap().id == "node-2")
        .unwrap();
    assert_eq!(https_check(&cert, &first, &key).await.0, 200);
    assert_eq!(https_check(&cert, &first, &key).await.0, 429);
    assert_eq!(
        second.state().engine.limiter().keys(),
        1,
        "the owner decided"
    );
    assert_eq!(first.state().engine.limiter().keys(), 0);
    assert_eq!(cluster.stats().peer_failures, 0);
}

#[tokio::test]
async fn a_missing_or_mismatched_key_refuses_to_start() {
    let cert = self_signed();
    let other = self_signed();
    let start = |cert: PathBuf, key: PathBuf| {
        let mut c = ServeConfig::ephemeral();
        c.tls = Some(TlsFiles { cert, key });
        c.peer_grpc = Some("127.0.0.1:0".parse().unwrap());
        Node::start(c)
    };
    let missing = cert.files.key.with_file_name("nope.pem");
    let e = start(cert.files.cert.clone(), missing).await.err().unwrap();
    assert!(e.to_string().contains("nope.pem"), "{e}");
    let e = start(cert.files.cert.clone(), other.files.key.clone())
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("TLS"), "{e}");
}
