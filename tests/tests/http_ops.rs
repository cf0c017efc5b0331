//! /metrics, /healthz, /readyz, /v1/cluster, and a graceful shutdown with a request in flight.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_node::readiness::{Readiness, Stage};
use weir_tests::{
    cluster_member, header, metric_value, wait_until, TestNode, DEADLINE, ONE_PER_HOUR,
};

#[tokio::test]
async fn metrics_count_verdicts_and_show_keys_and_rules_version() {
    let node = TestNode::start(ONE_PER_HOUR, |_| {}).await;
    let res = node.get("/metrics").await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        header(res.headers(), "content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = res.text().await.unwrap();
    let keys = r#"weir_keys{rule="per-client"}"#;
    assert_eq!(metric_value(&text, keys), Some(0.0));
    let version = node.get_json("/v1/limits/*").await["version"].as_f64();
    assert_eq!(metric_value(&text, "weir_rules_version"), version);

    assert_eq!(node.check(json!({"key": "a"})).await.status(), 200);
    assert_eq!(node.check(json!({"key": "a"})).await.status(), 429);
    assert_eq!(node.check(json!({"key": "b"})).await.status(), 200);
    let text = node.metrics().await;
    assert_eq!(metric_value(&text, keys), Some(2.0));
    assert_eq!(
        metric_value(
            &text,
            r#"weir_checks_total{rule="per-client",verdict="allowed"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        metric_value(
            &text,
            r#"weir_checks_total{rule="per-client",verdict="denied"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&text, "weir_decision_seconds_count"),
        Some(3.0)
    );
}

#[tokio::test]
async fn health_and_readiness_follow_the_node_lifecycle() {
    let node = TestNode::start(ONE_PER_HOUR, |_| {}).await;
    assert_eq!(node.get("/healthz").await.status(), 200);
    assert_eq!(node.get("/readyz").await.status(), 200);
    assert_eq!(node.state().readiness(), Readiness::Ready);
    node.state().lifecycle.set(Stage::Leaving);
    let res = node.get("/readyz").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.text().await.unwrap(), "leaving its cluster\n");
    assert_eq!(
        node.get("/healthz").await.status(),
        200,
        "alive while not ready"
    );
}

/// Guard: a node given seeds is not ready until it has joined, and
/// becomes ready once its grace alone has passed (its seeds never
/// answered: it is the cluster's first member).
#[tokio::test]
async fn a_seeded_node_is_ready_once_joined_or_once_its_seeds_never_answered() {
    // A UDP port on loopback that nothing answers on.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let seed = silent.local_addr().unwrap().to_string();
    let started = std::time::Instant::now();
    let node = TestNode::start(ONE_PER_HOUR, |c| {
        c.cluster.seeds = vec![seed];
        c.cluster.secret = Some("readyz-test-cluster-secret".into());
    })
    .await;
    let res = node.get("/readyz").await;
    // The grace is five announce intervals (5 s at the default profile);
    // a host so busy that the first probe came later has nothing to show.
    if started.elapsed() < std::time::Duration::from_secs(4) {
        assert_eq!(res.status(), 503);
        assert_eq!(res.text().await.unwrap(), "joining its cluster\n");
        assert_eq!(
            node.get("/healthz").await.status(),
            200,
            "alive while joining"
        );
    }
    wait_until("ready once the grace has passed", || async {
        node.get("/readyz").await.status() == 200
    })
    .await;
    assert_eq!(
        node.get("/readyz").await.text().await.unwrap(),
        "ready, running alone: no seed answered within the join timeout\n",
        "says it runs alone"
    );
}

/// Guard: a node given a seed is not ready while no seed has answered,
/// and is ready (not alone) once one has. The first node advertises its
/// gossip at a gate the test holds shut (as a member behind a forwarded
/// address would), so the join cannot begin before the test has seen the
/// 503, and the second node's join timeout is past any test's deadline.
#[tokio::test]
async fn a_second_real_node_turns_ready_once_it_has_joined_the_first() {
    let gate = DatagramGate::start().await;
    let first = TestNode::start(ONE_PER_HOUR, |c| {
        cluster_member(c, "node-1", None);
        c.advertise_gossip = Some(gate.addr);
    })
    .await;
    gate.point_at(first.state().config.gossip);
    let second = TestNode::start(ONE_PER_HOUR, |c| {
        cluster_member(c, "node-2", Some(gate.addr));
        c.cluster.join_timeout = Some(std::time::Duration::from_secs(3600));
    })
    .await;
    let res = second.get("/readyz").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.text().await.unwrap(), "joining its cluster\n");
    assert_eq!(second.get("/healthz").await.status(), 200);

    gate.open();
    wait_until("the second node is ready", || async {
        second.get("/readyz").await.status() == 200
    })
    .await;
    assert_eq!(second.get("/readyz").await.text().await.unwrap(), "ready\n");
    let members = second.get_json("/v1/cluster").await["members"].clone();
    assert_eq!(members.as_array().map(Vec::len), Some(2), "{members}");
}

/// A UDP address that passes each datagram on to the address it points
/// at once opened, and drops it until then.
struct DatagramGate {
    addr: std::net::SocketAddr,
    to: Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
    open: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl DatagramGate {
    async fn start() -> DatagramGate {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let to: Arc<std::sync::Mutex<Option<std::net::SocketAddr>>> = Arc::default();
        let open = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (to, open) = (to.clone(), open.clone());
            async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok((len, _)) = socket.recv_from(&mut buf).await {
                    let target = *to.lock().unwrap();
                    match target {
                        Some(target) if open.load(Ordering::SeqCst) => {
                            let _ = socket.send_to(&buf[..len], target).await;
                        }
                        _ => {}
                    }
                }
            }
        });
        DatagramGate {
            addr,
            to,
            open,
            task,
        }
    }

    fn point_at(&self, to: std::net::SocketAddr) {
        *self.to.lock().unwrap() = Some(to);
    }

    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for DatagramGate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn cluster_view_lists_this_node_with_its_bound_addresses() {
    let node = TestNode::start(ONE_PER_HOUR, |c| c.node_id = Some("n-1".into())).await;
    let view = node.get_json("/v1/cluster").await;
    assert_eq!(view["node_id"], "n-1");
    assert_eq!(view["strategy"], "owner");
    assert_eq!(view["fallback"]["active"], false);
    assert_eq!(
        view["rules_version"],
        node.get_json("/v1/limits/*").await["version"]
    );
    let members = view["members"].as_array().unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0]["id"], "n-1");
    assert_eq!(members[0]["state"], "alive");
    assert_eq!(members[0]["ring_share"], 1.0);
    // Port 0 was resolved: the view shows the port actually bound.
    assert_eq!(members[0]["grpc"], node.node().grpc_addr().to_string());
}

#[tokio::test]
async fn the_cluster_view_shows_the_advertised_addresses_with_bound_ports() {
    let node = TestNode::start(ONE_PER_HOUR, |c| {
        c.advertise_grpc = Some("127.0.0.2:0".parse().unwrap());
        c.advertise_gossip = Some("127.0.0.3:0".parse().unwrap());
    })
    .await;
    let view = node.get_json("/v1/cluster").await;
    let me = &view["members"][0];
    let grpc = format!("127.0.0.2:{}", node.node().grpc_addr().port());
    assert_eq!(me["grpc"], grpc.as_str());
    let gossip = format!("127.0.0.3:{}", node.state().config.gossip.port());
    assert_eq!(me["gossip"], gossip.as_str());
}

#[tokio::test]
async fn a_cluster_node_bound_to_every_interface_without_an_advertised_address_does_not_start() {
    let mut config = weir_node::ServeConfig {
        grpc: "0.0.0.0:0".parse().unwrap(),
        ..weir_node::ServeConfig::ephemeral()
    };
    config.cluster.seeds = vec!["127.0.0.1:9".into()];
    let e = weir_node::Node::start(config).await.err().expect("refused");
    assert!(e.to_string().contains("--advertise-grpc"), "{e}");
}

/// Reads one HTTP/1.1 response head and its Content-Length body.
async fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if text.len() >= end + 4 + len {
                return (head, text[end + 4..end + 4 + len].to_string());
            }
        }
        let n = stream.read(&mut chunk).await.expect("read response");
        assert!(n > 0, "connection closed mid-response: {text:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn graceful_shutdown_completes_a_request_in_flight() {
    let mut node = TestNode::start(ONE_PER_HOUR, |_| {}).await;
    let addr = node.node().http_addr();
    let body = json!({"key": "in-flight"}).to_string();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // `Expect: 100-continue` makes the server say when the handler starts
    // reading the body: from then on the request is in flight.
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nHost: weir\r\nContent-Type: application/json\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(DEADLINE, stream.read_exact(&mut interim))
        .await
        .expect("100 Continue in time")
        .unwrap();
    assert!(interim.starts_with(b"HTTP/1.1 100 Continue\r\n\r\n"));

    let state = node.state().clone();
    let shutdown = tokio::spawn(node.take().shutdown());
    wait_until("the node stops accepting connections", || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert_eq!(state.readiness(), Readiness::Leaving);
    assert!(
        !shutdown.is_finished(),
        "shutdown waits for the request in flight"
    );

    stream.write_all(body.as_bytes()).await.unwrap();
    let (head, body) = tokio::time::timeout(DEADLINE, read_response(&mut stream))
        .await
        .expect("the in-flight request is answered");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let verdict: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(verdict["allowed"], true);
    assert_eq!(verdict["rule"], "per-client");

    tokio::time::timeout(DEADLINE, shutdown)
        .await
        .expect("shutdown completes once the request is done")
        .unwrap();
}
