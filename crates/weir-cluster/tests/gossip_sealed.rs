//! Gossip on the wire: sealed, so a capture shows no member, address or secret, and a datagram replayed is refused and counted.

mod common;

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use common::{wait_until, wait_until_showing};
use futures::future::BoxFuture;
use weir_cluster::membership::{
    Datagrams, Membership, MembershipConfig, NodeIdentity, UdpDatagrams,
};

const SECRET: &[u8] = b"a secret no capture should show";

/// A UDP socket that keeps a copy of every datagram it sends.
struct Recording {
    inner: UdpDatagrams,
    sent: Mutex<Vec<(SocketAddr, Vec<u8>)>>,
}

impl Datagrams for Recording {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn send_to<'a>(
        &'a self,
        payload: &'a [u8],
        to: SocketAddr,
    ) -> BoxFuture<'a, io::Result<usize>> {
        self.sent.lock().unwrap().push((to, payload.to_vec()));
        self.inner.send_to(payload, to)
    }

    fn recv_from<'a>(
        &'a self,
        buf: &'a mut [u8],
    ) -> BoxFuture<'a, io::Result<(usize, SocketAddr)>> {
        self.inner.recv_from(buf)
    }
}

struct Member {
    membership: Membership,
    socket: Arc<Recording>,
    id: String,
}

async fn start(id: &str, seeds: &[SocketAddr], sealed: bool) -> Member {
    let inner = UdpDatagrams::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let socket = Arc::new(Recording {
        inner,
        sent: Mutex::new(Vec::new()),
    });
    let identity = NodeIdentity::new(id, socket.local_addr(), "127.0.0.1:1".parse().unwrap());
    let config = MembershipConfig::fast(identity, seeds.to_vec());
    let config = if sealed {
        config.with_secret(SECRET.to_vec())
    } else {
        config.insecure_open()
    };
    let membership = Membership::start_on(config, socket.clone()).unwrap();
    Member {
        membership,
        socket,
        id: id.to_string(),
    }
}

/// Three members that have all found each other.
async fn three(sealed: bool) -> Vec<Member> {
    let a = start("member-alpha", &[], sealed).await;
    let seed = a.membership.local_addr();
    let b = start("member-bravo", &[seed], sealed).await;
    let c = start("member-charlie", &[seed], sealed).await;
    let members = vec![a, b, c];
    let all: BTreeSet<String> = members.iter().map(|m| m.id.clone()).collect();
    wait_until("every member sees every other", || {
        members.iter().all(|m| live_ids(&m.membership) == all)
    })
    .await;
    members
}

fn live_ids(m: &Membership) -> BTreeSet<String> {
    m.view().members.into_iter().map(|i| i.id).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a capture must not show: each member's id, its address (as text
/// and as the bytes of its IP and port), and the secret.
fn secrets_of(members: &[Member]) -> Vec<(String, Vec<u8>)> {
    let mut shown = vec![("the secret".to_string(), SECRET.to_vec())];
    for m in members {
        let addr = m.membership.local_addr();
        let IpAddr::V4(ip) = addr.ip() else {
            unreachable!("bound on 127.0.0.1")
        };
        shown.push((format!("id {}", m.id), m.id.as_bytes().to_vec()));
        shown.push((format!("address {addr}"), addr.to_string().into_bytes()));
        // Postcard writes an IPv4 address as its four bytes and the port
        // after it as a varint.
        let mut raw = ip.octets().to_vec();
        let mut port = addr.port();
        while port >= 0x80 {
            raw.push((port as u8 & 0x7f) | 0x80);
            port >>= 7;
        }
        raw.push(port as u8);
        shown.push((format!("address {addr} encoded"), raw));
    }
    shown
}

/// Which of `secrets` show in any datagram `members` sent.
fn shown_in_captures(members: &[Member]) -> BTreeSet<String> {
    let secrets = secrets_of(members);
    let mut shown = BTreeSet::new();
    for m in members {
        for (_, datagram) in m.socket.sent.lock().unwrap().iter() {
            for (what, bytes) in &secrets {
                if contains(datagram, bytes) {
                    shown.insert(what.clone());
                }
            }
        }
    }
    shown
}

#[tokio::test]
async fn captured_gossip_shows_no_member_address_or_secret() {
    let members = three(true).await;
    let sent: usize = members
        .iter()
        .map(|m| m.socket.sent.lock().unwrap().len())
        .sum();
    assert!(sent >= 6, "only {sent} datagrams captured");
    assert_eq!(shown_in_captures(&members), BTreeSet::new());
}

/// The capture can fail: the same cluster unsealed shows every member's id
/// and address.
#[tokio::test]
async fn captured_gossip_unsealed_shows_members_and_addresses() {
    let members = three(false).await;
    let shown = shown_in_captures(&members);
    for m in &members {
        assert!(shown.contains(&format!("id {}", m.id)), "{shown:?}");
        let addr = m.membership.local_addr();
        assert!(
            shown.contains(&format!("address {addr} encoded")),
            "{shown:?}"
        );
    }
}

#[tokio::test]
async fn a_replayed_or_altered_datagram_is_refused_and_counted() {
    let members = three(true).await;
    let (a, b) = (&members[0], &members[1]);
    let to_b = b.membership.local_addr();
    // A datagram a sent b, once b has taken at least one from a since.
    let captured = a
        .socket
        .sent
        .lock()
        .unwrap()
        .iter()
        .find(|(to, _)| *to == to_b)
        .map(|(_, d)| d.clone())
        .expect("a sent b something");
    let before = b.membership.stats();
    let attacker = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    // Twice: even if the first copy arrived before the original, the second is a replay.
    attacker.send_to(&captured, to_b).await.unwrap();
    attacker.send_to(&captured, to_b).await.unwrap();
    // Its counter moved far ahead, so it is new to b and must be opened
    // to be judged: the counter is authenticated, so it does not open.
    let mut altered = captured.clone();
    altered[17] ^= 1;
    attacker.send_to(&altered, to_b).await.unwrap();
    let refused = |now: &weir_cluster::membership::MembershipStats| {
        now.replayed_dropped > before.replayed_dropped
            && now.bad_mac_dropped > before.bad_mac_dropped
    };
    wait_until_showing(
        "b counts the replay and the altered copy",
        || refused(&b.membership.stats()),
        || format!(": before {before:?}, now {:?}", b.membership.stats()),
    )
    .await;
    let all: BTreeSet<String> = members.iter().map(|m| m.id.clone()).collect();
    for m in &members {
        assert_eq!(live_ids(&m.membership), all);
    }
}
