//! What a stranger on the network cannot make a node do, against real nodes on loopback: join, forward, push rules, hand off counters, sync counts, replay a captured datagram, hold connection slots; each against a node with a cluster secret and one without (a standalone node), and against an `--insecure-open-cluster` node where the probe must succeed, so a probe that fails for the wrong reason is seen.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tonic::Code;
use weir_cluster::membership::{Membership, MembershipConfig, MembershipStats, NodeIdentity};
use weir_cluster::GossipProfile;
use weir_node::ServeConfig;
use weir_proto::weir::v1::peer_client::PeerClient;
use weir_proto::weir::v1::{
    CarriedLimit, CountDelta, CounterOp, CounterState, DecideRequest, HandoffRequest, OpKind,
    RuleSet as WireRuleSet, SyncRequest, TierRules,
};
use weir_tests::{client, wait_until, TestNode};

const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "fixed_window"
limit = 5
window = "1h"
"#;

const SECRET: &str = "the-cluster-secret";

/// How a node under probe was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trust {
    Secret,
    /// No secret: a standalone node.
    None,
    /// No secret, `--insecure-open-cluster`: every probe gets in.
    Open,
}

const REFUSING: [Trust; 2] = [Trust::Secret, Trust::None];

async fn node(trust: Trust, adjust: impl FnOnce(&mut ServeConfig)) -> TestNode {
    TestNode::start(RULES, |c| {
        c.node_id = Some(format!("{trust:?}").to_lowercase());
        c.admin_token = Some("admin".into());
        c.cluster.gossip_profile = GossipProfile::Fast;
        match trust {
            Trust::Secret => c.cluster.secret = Some(SECRET.into()),
            Trust::None => {}
            Trust::Open => c.cluster.insecure_open = true,
        }
        adjust(c);
    })
    .await
}

fn gossip_stats(n: &TestNode) -> MembershipStats {
    n.state().engine.cluster().expect("a member").gossip_stats()
}

fn ring_len(n: &TestNode) -> usize {
    n.state().engine.cluster().expect("a member").ring().len()
}

async fn peer(n: &TestNode) -> PeerClient<tonic::transport::Channel> {
    PeerClient::connect(format!("http://{}", n.node().peer_addr()))
        .await
        .expect("the peer port accepts connections")
}

fn consume(rule: &str, key: &str, carried: Option<u64>) -> CounterOp {
    CounterOp {
        rule: rule.into(),
        key: key.into(),
        cost: 1,
        kind: OpKind::Consume as i32,
        at: 0,
        carried: carried.map(|limit| CarriedLimit {
            limit,
            window_ns: 60_000_000_000,
        }),
        ..Default::default()
    }
}

/// A stranger's gossip member announcing to `seed` every 200 ms: with no
/// secret (and taking anyone's gossip itself), or with a guessed one.
/// A push that empties the rules for any tier, as a node named "stranger" wrote it.
fn emptied_by_stranger(version: u64) -> WireRuleSet {
    WireRuleSet {
        version,
        tiers: vec![TierRules {
            tier: None,
            version,
            origin: "stranger".into(),
            rules_json: r#"{"rules":[]}"#.into(),
            edit: None,
        }],
    }
}

async fn stranger(seed: SocketAddr, guess: Option<&str>) -> Membership {
    let me: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let identity = NodeIdentity::new("stranger", me, "127.0.0.1:1".parse().unwrap());
    let config = MembershipConfig::fast(identity, vec![seed]);
    let config = match guess {
        Some(g) => config.with_secret(g.as_bytes().to_vec()),
        None => config.insecure_open(),
    };
    Membership::start(config, me).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_join_the_ring() {
    for trust in REFUSING {
        let n = node(trust, |_| {}).await;
        let gossip = n.state().config.gossip;
        let _plain = stranger(gossip, None).await;
        let _guess = stranger(gossip, Some("guess")).await;
        wait_until("the node drops the strangers' announces", || async {
            gossip_stats(&n).bad_mac_dropped >= 4
        })
        .await;
        assert_eq!(ring_len(&n), 1, "{trust:?}");
    }
    let open = node(Trust::Open, |_| {}).await;
    let _plain = stranger(open.state().config.gossip, None).await;
    wait_until("an open node takes anyone in", || async {
        ring_len(&open) == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_forward_checks_or_push_rules_or_hand_off_or_sync() {
    for trust in REFUSING {
        let n = node(trust, |_| {}).await;
        let mut p = peer(&n).await;
        let decide = DecideRequest {
            ops: vec![consume("per-client", "victim", None)],
            rules_version: 0,
            from_node: "stranger".into(),
        };
        let e = p.decide(decide).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{trust:?}: {e}");

        let push = emptied_by_stranger(u64::MAX);
        let e = p.push_rules(push).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{trust:?}: {e}");

        let handoff = HandoffRequest {
            counters: vec![CounterState {
                carried: None,
                rule: "per-client".into(),
                key: "victim".into(),
                state: vec![2, 0, 5],
            }],
            from_node: "stranger".into(),
            boot: 1,
            ..Default::default()
        };
        let e = p.handoff(handoff).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{trust:?}: {e}");

        let sync = SyncRequest {
            from_node: "stranger".into(),
            deltas: vec![CountDelta {
                rule: "per-client".into(),
                key: "victim".into(),
                window: u64::MAX,
                count: 5,
            }],
        };
        let e = p.sync_counts(sync).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{trust:?}: {e}");

        // Nothing moved: the rules and the victim's budget are as they were.
        assert_eq!(n.state().engine.rules().rules().len(), 1, "{trust:?}");
        assert_eq!(n.state().engine.limiter().keys(), 0, "{trust:?}");
        let unauthenticated = n.state().engine.cluster().unwrap().stats().unauthenticated;
        assert_eq!(unauthenticated, 4, "{trust:?}");
    }

    // An open node takes the same rule push: the probe itself works.
    let open = node(Trust::Open, |_| {}).await;
    let push = emptied_by_stranger(7);
    let pushed = peer(&open).await.push_rules(push).await.unwrap();
    assert!(pushed.into_inner().applied);
    assert_eq!(open.state().engine.rules().rules().len(), 0);
}

/// Two carried limits of one name with different values once deadlocked
/// the deciding thread on its own lock: with two workers the whole node
/// stopped answering, /healthz included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_limits_of_one_name_and_two_values_never_hang_a_node() {
    let open = node(Trust::Open, |_| {}).await;
    let ops = vec![
        consume("override:x", "k", Some(5)),
        consume("override:x", "k", Some(6)),
    ];
    let decide = DecideRequest {
        ops,
        rules_version: 0,
        from_node: "stranger".into(),
    };
    let answered = tokio::time::timeout(Duration::from_secs(5), peer(&open).await.decide(decide))
        .await
        .expect("the Decide call is answered")
        .unwrap();
    assert_eq!(answered.into_inner().results.len(), 2);
    let health = tokio::time::timeout(Duration::from_secs(5), open.get("/healthz"))
        .await
        .expect("the node still answers");
    assert_eq!(health.status(), 200);
}

/// A relay in front of a member's gossip socket that keeps a copy of what
/// it forwards: what an observer of node-to-node traffic holds. The member
/// advertises the relay's address, so its peers send to it.
struct Relay {
    addr: SocketAddr,
    to: Arc<std::sync::Mutex<Option<SocketAddr>>>,
    captured: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl Relay {
    async fn start() -> Relay {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            addr: socket.local_addr().unwrap(),
            to: Arc::default(),
            captured: Arc::default(),
        };
        let (to, keep) = (relay.to.clone(), relay.captured.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, _)) = socket.recv_from(&mut buf).await {
                let target = *to.lock().unwrap();
                // Kept once delivered: a replay is of what the member saw.
                if let Some(target) = target {
                    if socket.send_to(&buf[..n], target).await.is_ok() {
                        keep.lock().unwrap().push(buf[..n].to_vec());
                    }
                }
            }
        });
        relay
    }

    fn forward_to(&self, member: SocketAddr) {
        *self.to.lock().unwrap() = Some(member);
    }

    fn first(&self) -> Option<Vec<u8>> {
        self.captured.lock().unwrap().first().cloned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_replay_a_captured_datagram() {
    let a = node(Trust::Secret, |_| {}).await;
    let relay = Relay::start().await;
    let b = node(Trust::Secret, |c| {
        c.node_id = Some("secret-b".into());
        c.cluster.seeds = vec![a.state().config.gossip.to_string()];
        c.advertise_gossip = Some(relay.addr);
    })
    .await;
    let b_gossip = b.state().config.gossip;
    relay.forward_to(b_gossip);
    wait_until("the two members joined, one behind the relay", || async {
        ring_len(&a) == 2 && ring_len(&b) == 2
    })
    .await;
    let datagram = relay.first().expect("the relay saw a datagram for b");
    let replayer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let before = gossip_stats(&b);
    replayer.send_to(&datagram, b_gossip).await.unwrap();
    wait_until("the replay is dropped", || async {
        let now = gossip_stats(&b);
        now.replayed_dropped + now.stale_dropped > before.replayed_dropped + before.stale_dropped
    })
    .await;
    assert_eq!(
        gossip_stats(&b).invalid_dropped,
        before.invalid_dropped,
        "never parsed"
    );

    // A standalone node takes no datagram at all, captured or not.
    let alone = node(Trust::None, |_| {}).await;
    let before = gossip_stats(&alone).bad_mac_dropped;
    replayer
        .send_to(&datagram, alone.state().config.gossip)
        .await
        .unwrap();
    wait_until("the standalone node drops it", || async {
        gossip_stats(&alone).bad_mac_dropped > before
    })
    .await;
    assert_eq!(ring_len(&alone), 1);
}

/// Opens a raw connection and sends `bytes`; returns how long until the
/// node closes it (None: still open after `patience`).
async fn held_for(addr: SocketAddr, bytes: &[u8], patience: Duration) -> Option<Duration> {
    let started = tokio::time::Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut sink = vec![0u8; 4096];
    let closed = tokio::time::timeout(patience, async {
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    closed.ok().map(|()| started.elapsed())
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The preface and an empty SETTINGS frame: an HTTP/2 client that started
/// properly and then never sends a request.
const PREFACE_AND_SETTINGS: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_hold_connection_slots() {
    let head = Duration::from_millis(500);
    let idle = Duration::from_secs(1);
    let patience = Duration::from_secs(8);
    for trust in [Trust::Secret, Trust::None] {
        let n = node(trust, |c| {
            c.limits.max_connections = 2;
            c.limits.header_read_timeout = head;
            c.limits.idle_timeout = idle;
            if trust == Trust::Secret {
                c.peer_grpc = Some("127.0.0.1:0".parse().unwrap());
            }
        })
        .await;
        let (http, grpc, peer) = (
            n.node().http_addr(),
            n.node().grpc_addr(),
            n.node().peer_addr(),
        );
        for (port, addr) in [("http", http), ("grpc", grpc), ("peer", peer)] {
            // The preface alone once counted as a started connection.
            let t = held_for(addr, PREFACE, patience).await;
            assert!(
                t.is_some_and(|t| t < head + Duration::from_secs(2)),
                "{trust:?} {port}: preface only, held {t:?}"
            );
            // A started HTTP/2 connection that sends no request is idle.
            let t = held_for(addr, PREFACE_AND_SETTINGS, patience).await;
            assert!(
                t.is_some_and(|t| t >= idle && t < idle + Duration::from_secs(3)),
                "{trust:?} {port}: idle HTTP/2 held {t:?}"
            );
        }
        // Both slots held by idle HTTP/2 connections: once they are closed,
        // a new client is served.
        let holders: Vec<_> = (0..2)
            .map(|_| tokio::spawn(held_for(http, PREFACE_AND_SETTINGS, patience)))
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let res = tokio::time::timeout(
            patience,
            client().get(format!("http://{http}/healthz")).send(),
        )
        .await
        .expect("a new client is served once the idle slots are freed")
        .unwrap();
        assert_eq!(res.status(), 200);
        for h in holders {
            assert!(h.await.unwrap().is_some());
        }
    }
}
