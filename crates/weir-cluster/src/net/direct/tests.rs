use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_core::{Limiter, LimiterConfig, RuleSet};
use weir_proto::weir::v1::{
    op_result, CounterOp, DecideRequest, DecideResponse, OpKind, ReplicateRequest,
    ReplicateResponse,
};

use super::client::DirectConfig;
use super::*;
use crate::cluster::Cluster;
use crate::config::ClusterConfig;
use crate::link::PeerFailure;
use crate::memory::MemoryNet;
use crate::net::auth::PeerToken;

const RULES: &str = r#"
[[rule]]
name = "five"
algorithm = "fixed_window"
limit = 5
window = "60s"
"#;

/// Long enough for anything on loopback; nothing here waits it out.
const DEADLINE: Duration = Duration::from_secs(5);

const CONFIG: DirectConfig = DirectConfig {
    connect_timeout: Duration::from_secs(5),
    keepalive: Duration::from_secs(2),
};

fn frame_of(id: u64, kind: Kind, req: &DecideRequest) -> BytesMut {
    let mut out = BytesMut::new();
    put_frame(&mut out, id, kind, req);
    out
}

fn request(cost: u64) -> DecideRequest {
    DecideRequest {
        ops: vec![CounterOp {
            rule: "five".into(),
            key: "k".into(),
            cost,
            kind: OpKind::Consume as i32,
            ..CounterOp::default()
        }],
        rules_version: 0,
        from_node: "gateway".into(),
    }
}

#[test]
fn a_frame_is_taken_whole_once_all_of_it_has_arrived() {
    let whole = frame_of(7, Kind::Decide, &request(3));
    let mut buf = BytesMut::new();
    for (i, b) in whole.iter().enumerate() {
        assert_eq!(take_frame(&mut buf), Ok(None), "taken after {i} bytes");
        buf.extend_from_slice(&[*b]);
    }
    let frame = take_frame(&mut buf)
        .unwrap()
        .expect("the whole frame is in");
    assert_eq!((frame.id, frame.kind), (7, Kind::Decide));
    assert_eq!(
        <DecideRequest as prost::Message>::decode(frame.body).unwrap(),
        request(3)
    );
    assert!(buf.is_empty(), "nothing of the frame is left behind");
}

#[test]
fn frames_back_to_back_are_taken_in_order() {
    let mut buf = frame_of(1, Kind::Decide, &request(1));
    buf.extend_from_slice(&frame_of(2, Kind::Ping, &request(2)));
    let ids: Vec<_> = std::iter::from_fn(|| take_frame(&mut buf).unwrap())
        .map(|f| (f.id, f.kind))
        .collect();
    assert_eq!(ids, [(1, Kind::Decide), (2, Kind::Ping)]);
}

#[test]
fn a_frame_too_large_too_short_or_of_no_kind_is_refused() {
    let mut buf = BytesMut::from(&((MAX_FRAME + 1) as u32).to_be_bytes()[..]);
    assert_eq!(
        take_frame(&mut buf),
        Err(FrameError::TooLarge(MAX_FRAME + 1))
    );
    let mut buf = BytesMut::from(&[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0][..]);
    assert_eq!(take_frame(&mut buf), Err(FrameError::TooShort(8)));
    let mut buf = BytesMut::from(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 9][..]);
    assert_eq!(take_frame(&mut buf), Err(FrameError::Kind(9)));
}

#[test]
fn only_a_direct_hello_starts_with_its_first_byte() {
    assert!(is_direct(hello("")[0]));
    // An HTTP/2 preface, an HTTP/1 request, a TLS handshake record.
    for first in [b'P', b'G', 0x16] {
        assert!(!is_direct(first), "{first:#x}");
    }
}

/// A member on the in-memory network, its direct server on a loopback port.
struct Owner {
    addr: SocketAddr,
    cluster: Arc<Cluster>,
    _net: MemoryNet,
}

async fn owner(tweak: impl FnOnce(&mut ClusterConfig)) -> Owner {
    let net = MemoryNet::new();
    let limiter = Arc::new(Limiter::new(
        RuleSet::from_toml(RULES).unwrap(),
        net.clock(),
        LimiterConfig::default(),
    ));
    let mut config = ClusterConfig {
        insecure_open: true,
        ..ClusterConfig::default()
    };
    tweak(&mut config);
    let cluster = Arc::new(net.start("owner", config, limiter).await.unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = cluster.direct_server();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let server = server.clone();
            tokio::spawn(async move { server.serve(tcp, DEADLINE, std::future::pending()).await });
        }
    });
    Owner {
        addr,
        cluster,
        _net: net,
    }
}

async fn decide(
    conn: &DirectConn,
    cost: u64,
    deadline: Duration,
) -> Option<Result<DecideResponse, PeerFailure>> {
    conn.call(Kind::Decide, &request(cost), deadline).await
}

fn allowed(answer: Option<Result<DecideResponse, PeerFailure>>) -> bool {
    let answer = answer.expect("the owner takes direct calls").unwrap();
    match &answer.results[0].outcome {
        Some(op_result::Outcome::Decision(d)) => d.allowed,
        other => panic!("not a decision: {other:?}"),
    }
}

#[tokio::test]
async fn calls_on_a_direct_connection_are_decided_by_the_owner() {
    let owner = owner(|_| {}).await;
    let conn = DirectConn::dial(owner.addr, None, CONFIG);
    let mut admitted = 0;
    for _ in 0..7 {
        admitted += usize::from(allowed(decide(&conn, 1, DEADLINE).await));
    }
    assert_eq!(
        admitted, 5,
        "the owner's limit of 5 held over the connection"
    );
    assert!(!conn.is_closed());
}

#[tokio::test]
async fn many_calls_in_flight_at_once_each_get_their_own_answer() {
    let owner = owner(|_| {}).await;
    let conn = DirectConn::dial(owner.addr, None, CONFIG);
    // Costs 1..=5 at once: each answer must be the one to its own call,
    // so the admitted costs sum to at most the limit of 5 and every call
    // admitted alone would have fit.
    let calls = (1..=5u64).map(|cost| {
        let conn = conn.clone();
        async move { (cost, allowed(decide(&conn, cost, DEADLINE).await)) }
    });
    let answers = futures::future::join_all(calls).await;
    let admitted: u64 = answers.iter().filter(|(_, a)| *a).map(|(c, _)| c).sum();
    assert!((1..=5).contains(&admitted), "{answers:?}");
    let remaining = {
        let answer = decide(&conn, 1, DEADLINE).await.unwrap().unwrap();
        match &answer.results[0].outcome {
            Some(op_result::Outcome::Decision(d)) => d.remaining + u64::from(d.allowed),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        remaining,
        5 - admitted,
        "the owner counted what it admitted"
    );
}

#[tokio::test]
async fn a_hello_without_a_fresh_token_is_refused_and_counted() {
    let owner = owner(|c| {
        c.insecure_open = false;
        c.secret = Some("the secret".into());
    })
    .await;
    let wrong = PeerToken::new(b"another secret").unwrap();
    let token = wrong.current().to_str().unwrap().to_string();
    for token in [None, Some(token)] {
        let conn = DirectConn::dial(owner.addr, token, CONFIG);
        match decide(&conn, 1, DEADLINE).await {
            Some(Err(PeerFailure::Unreachable(why))) => assert!(why.contains("refused"), "{why}"),
            other => panic!("not refused: {other:?}"),
        }
        assert!(conn.is_closed());
    }
    assert_eq!(owner.cluster.stats().unauthenticated, 2);
    let right = PeerToken::new(b"the secret").unwrap();
    let token = right.current().to_str().unwrap().to_string();
    let conn = DirectConn::dial(owner.addr, Some(token), CONFIG);
    assert!(allowed(decide(&conn, 1, DEADLINE).await));
}

#[tokio::test]
async fn a_peer_that_answers_the_hello_otherwise_is_asked_over_grpc() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // What an HTTP/2 server sends first: its SETTINGS frame.
        while let Ok((mut tcp, _)) = listener.accept().await {
            let _ = tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await;
        }
    });
    let conn = DirectConn::dial(addr, None, CONFIG);
    assert!(decide(&conn, 1, DEADLINE).await.is_none());
    assert!(conn.is_unsupported());
    assert!(!conn.is_closed(), "the peer is there, over gRPC");
}

#[tokio::test]
async fn a_killed_owner_answers_no_call() {
    let owner = owner(|_| {}).await;
    let conn = DirectConn::dial(owner.addr, None, CONFIG);
    assert!(allowed(decide(&conn, 1, DEADLINE).await));
    owner.cluster.kill();
    match decide(&conn, 1, DEADLINE).await {
        Some(Err(PeerFailure::Unreachable(why))) => assert!(why.contains("killed"), "{why}"),
        other => panic!("answered: {other:?}"),
    }
    let copies = conn
        .call::<ReplicateResponse>(Kind::Replicate, &ReplicateRequest::default(), DEADLINE)
        .await;
    match copies {
        Some(Err(PeerFailure::Unreachable(why))) => assert!(why.contains("killed"), "{why}"),
        other => panic!("answered: {other:?}"),
    }
}

/// A peer that takes the hello and then reads calls without answering.
async fn silent_peer(close_after_first_call: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; MAGIC.len() + 2];
                tcp.read_exact(&mut head).await.unwrap();
                tcp.write_all(MAGIC).await.unwrap();
                let mut buf = [0u8; 1024];
                while tcp.read(&mut buf).await.is_ok_and(|n| n > 0) {
                    if close_after_first_call {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_call_in_flight_when_the_connection_closes_fails_at_once() {
    let addr = silent_peer(true).await;
    let conn = DirectConn::dial(addr, None, CONFIG);
    let started = std::time::Instant::now();
    match decide(&conn, 1, DEADLINE).await {
        Some(Err(PeerFailure::Unreachable(_))) => {}
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < DEADLINE,
        "failed at the close, not the deadline"
    );
    assert!(conn.is_closed());
}

#[tokio::test]
async fn an_unanswered_call_times_out_and_leaves_nothing_waiting() {
    let addr = silent_peer(false).await;
    let conn = DirectConn::dial(addr, None, CONFIG);
    let short = Duration::from_millis(50);
    assert_eq!(
        decide(&conn, 1, short).await,
        Some(Err(PeerFailure::Timeout(short)))
    );
    assert_eq!(conn.waiting(), 0);
    assert!(!conn.is_closed(), "a slow answer keeps the connection");
}

#[tokio::test]
async fn a_connection_whose_pings_go_unanswered_closes() {
    let addr = silent_peer(false).await;
    let config = DirectConfig {
        keepalive: Duration::from_millis(20),
        ..CONFIG
    };
    let conn = DirectConn::dial(addr, None, config);
    let short = Duration::from_millis(10);
    let _ = decide(&conn, 1, short).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !conn.is_closed() {
        assert!(tokio::time::Instant::now() < deadline, "still open");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn an_owner_keeps_a_connection_that_pings_open() {
    let owner = owner(|_| {}).await;
    // Long enough that a busy machine's stall of a few hundred
    // milliseconds does not pass for silence.
    let keepalive = Duration::from_millis(200);
    let config = DirectConfig {
        keepalive,
        ..CONFIG
    };
    let conn = DirectConn::dial(owner.addr, None, config);
    assert!(allowed(decide(&conn, 1, DEADLINE).await));
    // Ten keepalive intervals with no call: only the pongs keep it open
    // (without them it closes after two or three).
    let until = tokio::time::Instant::now() + 10 * keepalive;
    while tokio::time::Instant::now() < until {
        assert!(!conn.is_closed());
        tokio::time::sleep(keepalive / 10).await;
    }
    assert!(allowed(decide(&conn, 1, DEADLINE).await));
}

/// Connections an owner took, by kind.
#[derive(Default)]
struct Taken {
    direct: std::sync::atomic::AtomicUsize,
    grpc: std::sync::atomic::AtomicUsize,
}

/// The owner's gRPC peer service on a loopback port, and its direct
/// server on the same port when `direct`, as a node serves them.
async fn served(owner: &Owner, direct: bool) -> (SocketAddr, Arc<Taken>) {
    use std::sync::atomic::Ordering::Relaxed;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let taken = Arc::new(Taken::default());
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let (server, counts) = (owner.cluster.direct_server(), taken.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let mut first = [0u8; 1];
            if tcp.peek(&mut first).await.ok() != Some(1) {
                continue;
            }
            if direct && is_direct(first[0]) {
                counts.direct.fetch_add(1, Relaxed);
                let server = server.clone();
                tokio::spawn(
                    async move { server.serve(tcp, DEADLINE, std::future::pending()).await },
                );
            } else {
                counts.grpc.fetch_add(1, Relaxed);
                let _ = tx.send(Ok::<_, std::io::Error>(tcp)).await;
            }
        }
    });
    let service = owner.cluster.peer_service();
    tokio::spawn(async move {
        let incoming = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
    });
    (addr, taken)
}

#[tokio::test]
async fn a_link_decides_on_a_direct_connection_where_the_owner_takes_one_and_over_grpc_elsewhere() {
    use crate::link::Link;
    use crate::net::grpc::TonicLink;
    use crate::topology::membership::NodeIdentity;
    use std::sync::atomic::Ordering::Relaxed;

    let owner = owner(|_| {}).await;
    let cases = [
        // (the owner serves direct, the link may use it, direct calls, gRPC connections)
        (true, true, 1, 0),
        (true, false, 0, 1),
        // The hello's connection reaches the gRPC server too, which
        // answers it with HTTP/2: the link then calls over gRPC.
        (false, true, 0, 2),
    ];
    for (serves, uses, direct, grpc) in cases {
        let (addr, taken) = served(&owner, serves).await;
        let link = TonicLink::new(None, uses);
        let to = NodeIdentity::new("owner", "127.0.0.1:7946".parse().unwrap(), addr);
        for _ in 0..3 {
            let answer = link.decide(&to, request(1), DEADLINE).await;
            assert!(answer.is_ok(), "{answer:?}");
            let copies = ReplicateRequest {
                from_node: "a stranger".into(),
                ..ReplicateRequest::default()
            };
            let answer = link.replicate(&to, copies, DEADLINE).await;
            assert_eq!(
                answer,
                Ok(ReplicateResponse { accepted: 0 }),
                "not a member's copies"
            );
        }
        let got = (taken.direct.load(Relaxed), taken.grpc.load(Relaxed));
        assert_eq!(
            got,
            (direct, grpc),
            "serves direct {serves}, link may use it {uses}: the connections, each reused"
        );
    }
}

#[tokio::test]
async fn a_closing_server_answers_the_calls_that_arrived_then_ends() {
    let owner = owner(|_| {}).await;
    let (mut gateway, io) = tokio::io::duplex(64 * 1024);
    let (close, closing) = tokio::sync::oneshot::channel::<()>();
    let server = owner.cluster.direct_server();
    let serving = tokio::spawn(async move {
        let closing = async move {
            let _ = closing.await;
        };
        server.serve(io, DEADLINE, closing).await
    });
    gateway.write_all(&hello("")).await.unwrap();
    let mut magic = [0u8; MAGIC.len()];
    gateway.read_exact(&mut magic).await.unwrap();
    assert_eq!(&magic, MAGIC);
    // Two calls in, and the server told to close before it reads them.
    let mut calls = frame_of(1, Kind::Decide, &request(1));
    calls.extend_from_slice(&frame_of(2, Kind::Decide, &request(1)));
    gateway.write_all(&calls).await.unwrap();
    close.send(()).unwrap();
    let mut answers = Vec::new();
    gateway.read_to_end(&mut answers).await.unwrap();
    let mut answers = BytesMut::from(&answers[..]);
    let ids: Vec<_> = std::iter::from_fn(|| take_frame(&mut answers).unwrap())
        .map(|f| (f.id, f.kind))
        .collect();
    assert_eq!(ids, [(1, Kind::Decide), (2, Kind::Decide)]);
    tokio::time::timeout(DEADLINE, serving)
        .await
        .expect("the connection ended")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_owner_closes_a_connection_that_goes_silent_and_keeps_one_that_pings() {
    let silent = Duration::from_secs(10);
    let owner = owner(|_| {}).await;
    let (mut gateway, io) = tokio::io::duplex(64 * 1024);
    let server = owner.cluster.direct_server();
    tokio::spawn(async move { server.serve(io, DEADLINE, std::future::pending()).await });
    gateway.write_all(&hello("")).await.unwrap();
    let mut magic = [0u8; MAGIC.len()];
    gateway.read_exact(&mut magic).await.unwrap();
    // Pings every 2 s for three silent periods: each is answered.
    let ping = {
        let mut out = BytesMut::new();
        put_frame(&mut out, 0, Kind::Ping, &());
        out
    };
    for _ in 0..15 {
        gateway.write_all(&ping).await.unwrap();
        let mut answer = [0u8; 4 + 9];
        gateway.read_exact(&mut answer).await.expect("the pong");
        assert_eq!(answer[12], Kind::Pong as u8);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Then nothing: closed within two periods.
    let mut rest = Vec::new();
    tokio::time::timeout(
        2 * silent + Duration::from_secs(1),
        gateway.read_to_end(&mut rest),
    )
    .await
    .expect("the owner closed the silent connection")
    .unwrap();
}

/// A peer that takes the hello and answers every ping, and says when the
/// gateway closes the connection.
async fn ponging_peer() -> (SocketAddr, tokio::sync::oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut head = [0u8; MAGIC.len() + 2];
        tcp.read_exact(&mut head).await.unwrap();
        tcp.write_all(MAGIC).await.unwrap();
        let mut buf = BytesMut::new();
        while tcp.read_buf(&mut buf).await.is_ok_and(|n| n > 0) {
            while let Some(frame) = take_frame(&mut buf).unwrap() {
                if frame.kind == Kind::Ping {
                    let mut pong = BytesMut::new();
                    put_frame(&mut pong, frame.id, Kind::Pong, &());
                    tcp.write_all(&pong).await.unwrap();
                }
            }
        }
        let _ = closed.send(());
    });
    (addr, closed_rx)
}

#[tokio::test]
async fn a_connection_no_one_holds_any_more_is_closed() {
    let (addr, closed) = ponging_peer().await;
    let config = DirectConfig {
        keepalive: Duration::from_millis(20),
        ..CONFIG
    };
    let conn = DirectConn::dial(addr, None, config);
    // The peer answers pings but no calls: this one waits out its deadline
    // on the live connection.
    let short = Duration::from_millis(50);
    assert_eq!(
        decide(&conn, 1, short).await,
        Some(Err(PeerFailure::Timeout(short)))
    );
    drop(conn);
    tokio::time::timeout(DEADLINE, closed)
        .await
        .expect("the connection closed once no one held it")
        .unwrap();
}

/// The owner's own counters of `keys` (each spent `cost` more), as copies
/// it sends itself: the one member of its ring owns every key, so its
/// server takes them as a holder takes its owner's.
fn copies_of(owner: &Owner, keys: &[String], cost: u64) -> ReplicateRequest {
    let limiter = owner.cluster.limiter();
    let states = keys
        .iter()
        .map(|k| {
            limiter.consume("five", k, cost, limiter.now()).unwrap();
            let snap = limiter.snapshot("five", k).unwrap();
            crate::wire::snapshot_to_wire(&snap).unwrap()
        })
        .collect();
    let me = owner.cluster.identity();
    ReplicateRequest {
        from_node: me.id,
        boot: me.boot,
        at: limiter.now(),
        states,
    }
}

/// A new direct connection to `owner`, its hello answered.
async fn greeted(owner: &Owner) -> tokio::net::TcpStream {
    let mut io = tokio::net::TcpStream::connect(owner.addr).await.unwrap();
    io.write_all(&hello("")).await.unwrap();
    let mut magic = [0u8; MAGIC.len()];
    io.read_exact(&mut magic).await.unwrap();
    assert_eq!(&magic, MAGIC);
    io
}

/// Sends `calls` on a new direct connection to `owner` in one write and
/// reads `n` answers: their ids and kinds, in the order they came.
async fn answers_to(owner: &Owner, calls: BytesMut, n: usize) -> Vec<(u64, Kind)> {
    let mut io = greeted(owner).await;
    io.write_all(&calls).await.unwrap();
    let mut read = BytesMut::new();
    let mut got = Vec::new();
    while got.len() < n {
        while let Some(frame) = take_frame(&mut read).unwrap() {
            if frame.kind == Kind::Replicate {
                let copied = <ReplicateResponse as prost::Message>::decode(frame.body).unwrap();
                assert!(copied.accepted > 0, "the copies were taken: {copied:?}");
            }
            got.push((frame.id, frame.kind));
        }
        if got.len() == n {
            break;
        }
        let more = tokio::time::timeout(DEADLINE, io.read_buf(&mut read))
            .await
            .expect("the answers come")
            .unwrap();
        assert!(more > 0, "the connection closed with answers owed");
    }
    got
}

/// Guard: a frame of copies is taken off the task that answers the
/// connection's Decide calls. Taken on it, a join's copies (4,096
/// counters a frame, 5-70 ms each on two busy cores) held every Decide
/// behind them past the gateway's 5 ms owner deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decide_call_behind_a_large_frame_of_copies_is_answered_first() {
    let owner = owner(|_| {}).await;
    let keys: Vec<String> = (0..20_000).map(|i| format!("k{i}")).collect();
    let mut calls = BytesMut::new();
    put_frame(&mut calls, 1, Kind::Replicate, &copies_of(&owner, &keys, 1));
    put_frame(&mut calls, 2, Kind::Decide, &request(1));
    let got = answers_to(&owner, calls, 2).await;
    assert_eq!(got, [(2, Kind::Decide), (1, Kind::Replicate)]);
}

/// Guard: frames of copies are taken in the order they came, so a later
/// copy of a key is the one held, however long the frame before it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_copies_are_taken_in_the_order_they_came() {
    let owner = owner(|_| {}).await;
    let mut keys: Vec<String> = (0..20_000).map(|i| format!("k{i}")).collect();
    keys.push("last".into());
    let mut calls = BytesMut::new();
    put_frame(&mut calls, 1, Kind::Replicate, &copies_of(&owner, &keys, 1));
    let later = copies_of(&owner, &["last".to_string()], 2);
    put_frame(&mut calls, 2, Kind::Replicate, &later);
    let mut got = answers_to(&owner, calls, 2).await;
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(got, [(1, Kind::Replicate), (2, Kind::Replicate)]);
    let held = owner.cluster.handler().replicas().copy("five", "last");
    let held = held.and_then(|s| crate::wire::snapshot_to_wire(&s));
    assert_eq!(
        held.as_ref(),
        later.states.first(),
        "the later copy is held"
    );
}

/// Guard: copies are taken in the order they came over every connection,
/// not each connection's own. An owner whose connection closes with a
/// frame still being taken sends the keys again on a new one; taken by a
/// queue of that connection's own, the later copy landed first and the
/// earlier one was left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_copy_on_a_new_connection_is_taken_after_one_left_on_a_closed_one() {
    let owner = owner(|_| {}).await;
    let mut keys: Vec<String> = (0..20_000).map(|i| format!("k{i}")).collect();
    keys.push("last".into());
    let mut first = greeted(&owner).await;
    let mut calls = BytesMut::new();
    put_frame(&mut calls, 1, Kind::Replicate, &copies_of(&owner, &keys, 1));
    // Answered in the turn its frame is read, after the copies' frame.
    put_frame(&mut calls, 2, Kind::Ping, &());
    first.write_all(&calls).await.unwrap();
    let mut read = BytesMut::new();
    while take_frame(&mut read).unwrap().map(|f| f.kind) != Some(Kind::Pong) {
        assert!(first.read_buf(&mut read).await.unwrap() > 0, "closed");
    }
    drop(first);
    let mut calls = BytesMut::new();
    let later = copies_of(&owner, &["last".to_string()], 2);
    put_frame(&mut calls, 1, Kind::Replicate, &later);
    assert_eq!(answers_to(&owner, calls, 1).await, [(1, Kind::Replicate)]);
    let replicas = owner.cluster.handler().replicas();
    let held = |k: &str| {
        replicas
            .copy("five", k)
            .and_then(|s| crate::wire::snapshot_to_wire(&s))
    };
    assert!(
        held("k0").is_some(),
        "the first frame was taken before the later one was answered"
    );
    assert_eq!(
        held("last").as_ref(),
        later.states.first(),
        "the later copy is held"
    );
}
