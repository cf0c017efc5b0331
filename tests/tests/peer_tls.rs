//! Peers over mutual TLS: three nodes form a ring and forward checks, on direct connections and over gRPC, and the peer port refuses a client without a certificate, one with another CA's, and plaintext.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::json;
use tempfile::TempDir;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use weir_cluster::net::peer_tls::PeerTlsFiles;
use weir_node::ServeConfig;
use weir_proto::weir::v1::peer_client::PeerClient;
use weir_proto::weir::v1::PullRulesRequest;
use weir_tests::{start_cluster, TestNode, ONE_PER_HOUR};

/// The name in every peer certificate: peers dial each other by IP, which
/// no certificate here names, so a name must not be what is checked.
const PEER_NAME: &str = "weir-peer.invalid";

/// A CA of its own, and certificates it signs, in PEM.
struct Ca {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { params, key, pem }
    }

    /// A certificate for both ends of a peer connection, and its key.
    fn sign(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![PEER_NAME.to_string()]).unwrap();
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A node's three files in `dir`.
    fn files(&self, dir: &Path, node: &str) -> PeerTlsFiles {
        let (cert, key) = self.sign();
        let files = PeerTlsFiles {
            cert: dir.join(format!("{node}.crt")),
            key: dir.join(format!("{node}.key")),
            ca: dir.join("ca.crt"),
        };
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
        std::fs::write(&files.ca, &self.pem).unwrap();
        files
    }
}

/// A Peer client on `addr` under TLS that trusts `ca`, showing `identity`.
async fn peer_client(
    addr: SocketAddr,
    ca: &Ca,
    identity: Option<(String, String)>,
) -> Result<PeerClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name(PEER_NAME);
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(PeerClient::new(channel))
}

/// What a Peer call over `client` comes to: the gRPC code, or the
/// transport failing first.
async fn pull(client: Result<PeerClient<Channel>, tonic::transport::Error>) -> String {
    match client {
        Err(e) => format!("no connection: {e}"),
        Ok(mut c) => match c.pull_rules(PullRulesRequest::default()).await {
            Ok(_) => "answered".to_string(),
            Err(s) => format!("{:?}", s.code()),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_under_mutual_tls_forward_checks_and_refuse_strangers_on_the_peer_port() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("weir test peers");
    let files: Vec<PeerTlsFiles> = (1..=3)
        .map(|i| ca.files(dir.path(), &format!("node-{i}")))
        .collect();
    let nodes = start_cluster(3, ONE_PER_HOUR, |c: &mut ServeConfig| {
        let i: usize = c.node_id.as_deref().unwrap()["node-".len()..]
            .parse()
            .unwrap();
        c.peer_tls = Some(files[i - 1].clone());
        c.peer_grpc = Some("127.0.0.1:0".parse().unwrap());
        // node-3 forwards over gRPC only, so both carriers are under TLS.
        c.cluster.grpc_only = i == 3;
    })
    .await;

    // Every node forwards a check of a key each other node owns, which
    // that owner decides.
    for from in &nodes {
        let cluster = from.state().engine.cluster().unwrap().clone();
        for owner in &nodes {
            let owner_id = &owner.state().node_id;
            if owner_id == &from.state().node_id {
                continue;
            }
            let key = (0..)
                .map(|i| format!("{}-{owner_id}-{i}", from.state().node_id))
                .find(|k| cluster.owner_of(k).is_some_and(|o| &o.id == owner_id))
                .unwrap();
            let before = owner.state().engine.limiter().keys();
            let res = from.check(json!({"key": key})).await;
            assert_eq!(res.status(), 200, "{key} from {}", from.state().node_id);
            assert_eq!(owner.state().engine.limiter().keys(), before + 1, "{key}");
        }
        assert_eq!(cluster.stats().peer_failures, 0);
        assert_eq!(cluster.stats().fallback_decisions, 0);
    }
    let stats = |n: &TestNode| n.state().engine.cluster().unwrap().stats();
    assert!(
        nodes.iter().any(|n| stats(n).direct_connections > 0),
        "some checks went on direct connections"
    );

    // The peer port: a client that trusts the CA but shows no certificate,
    // or one another CA signed, gets no connection; nor does plaintext.
    let peer = nodes[1].node().peer_addr();
    let other = Ca::new("another CA");
    let no_cert = pull(peer_client(peer, &ca, None).await).await;
    assert!(
        !no_cert.starts_with("Unauthenticated") && no_cert != "answered",
        "{no_cert}"
    );
    let foreign = pull(peer_client(peer, &ca, Some(other.sign())).await).await;
    assert!(
        !foreign.starts_with("Unauthenticated") && foreign != "answered",
        "{foreign}"
    );
    let plain = pull(
        Channel::from_shared(format!("http://{peer}"))
            .unwrap()
            .connect()
            .await
            .map(PeerClient::new),
    )
    .await;
    assert!(
        !plain.starts_with("Unauthenticated") && plain != "answered",
        "{plain}"
    );
    // The refusals above are TLS's own: a certificate of the peer CA gets
    // through to the cluster-secret check, which wants its token.
    let member = pull(peer_client(peer, &ca, Some(ca.sign())).await).await;
    assert_eq!(member, "Unauthenticated");
    assert_eq!(stats(&nodes[1]).unauthenticated, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_peer_certificates_are_taken_when_their_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let old = Ca::new("old peer CA");
    let files = old.files(dir.path(), "node");
    let node = TestNode::start(ONE_PER_HOUR, |c| {
        weir_tests::cluster_member(c, "node-1", None);
        c.peer_tls = Some(files.clone());
        c.peer_grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let peer = node.node().peer_addr();
    // Through TLS to the token check: a certificate of the CA in force.
    assert_eq!(
        pull(peer_client(peer, &old, Some(old.sign())).await).await,
        "Unauthenticated"
    );
    let new = Ca::new("new peer CA");
    let (cert, key) = new.sign();
    weir_tests::replace_file(&files.key, &key);
    weir_tests::replace_file(&files.cert, &cert);
    weir_tests::replace_file(&files.ca, &new.pem);
    weir_tests::wait_until("the node serves and trusts the new CA", || async {
        pull(peer_client(peer, &new, Some(new.sign())).await).await == "Unauthenticated"
    })
    .await;
    let stale = pull(peer_client(peer, &old, Some(old.sign())).await).await;
    assert!(!stale.starts_with("Unauthenticated"), "{stale}");
}

#[tokio::test]
async fn a_node_refuses_to_start_with_a_key_not_its_certificates_or_a_missing_ca() {
    let dir: TempDir = tempfile::tempdir().unwrap();
    let ca = Ca::new("weir test peers");
    let files = ca.files(dir.path(), "node");
    // A key that is not its certificate's is refused at start, naming it.
    let other = ca.files(dir.path(), "other");
    let mut c = ServeConfig::ephemeral();
    c.peer_tls = Some(PeerTlsFiles {
        key: other.key.clone(),
        ..files.clone()
    });
    let e = weir_node::Node::start(c).await.err().unwrap().to_string();
    assert!(e.contains("peer TLS"), "{e}");
    let missing = PeerTlsFiles {
        ca: dir.path().join("nope.crt"),
        ..files
    };
    let mut c = ServeConfig::ephemeral();
    c.peer_tls = Some(missing);
    let e = weir_node::Node::start(c).await.err().unwrap().to_string();
    assert!(e.contains("nope.crt"), "{e}");
}
