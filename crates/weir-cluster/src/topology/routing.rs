//! The ring this node routes by: the live members' ring, or once a graceful leave begins, the ring without this node.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::arrivals::Arrivals;
use super::membership::NodeIdentity;
use super::ring::Ring;

pub struct Routing {
    me: String,
    ring: ArcSwap<Ring>,
    /// The ring checks are routed by: `ring`, or once a graceful leave
    /// begins, the ring without this node. Kept apart so a check reads one
    /// pointer, not whether a leave began and then which ring.
    routes: ArcSwap<Ring>,
    /// Whether a graceful leave began. Its lock orders the writers of
    /// `ring` and `routes`, so a new member view cannot overwrite the ring
    /// a leave routes by.
    leaving: Mutex<bool>,
    /// The older members whose handoffs this node awaits since it joined.
    arrivals: Arrivals,
    /// This process's boot, as the first ring lists it (0 if it does not).
    boot: u64,
    /// Whether this node is past joining ([`Routing::joining`]).
    joined: AtomicBool,
    /// Whether a member sent this node its member list
    /// ([`crate::topology::membership::MemberView::fed`]).
    fed: AtomicBool,
    /// Wakes the checks waiting for the join.
    join: Notify,
    /// When a node still alone stops waiting for its cluster.
    join_ends: Option<Instant>,
}

impl Routing {
    pub fn new(me: String, ring: Ring) -> Self {
        // The first view may hold the cluster already (the seed's answer
        // came before it was read): its older members entered it too.
        let arrivals = Arrivals::default();
        arrivals.ring_changed(&me, &Ring::with_default_vnodes(&[]), &ring);
        let boot = ring
            .members()
            .iter()
            .find(|m| m.id == me)
            .map_or(0, |m| m.boot);
        let ring = Arc::new(ring);
        Routing {
            boot,
            me,
            ring: ArcSwap::new(ring.clone()),
            routes: ArcSwap::new(ring),
            leaving: Mutex::new(false),
            arrivals,
            joined: AtomicBool::new(true),
            fed: AtomicBool::new(true),
            join: Notify::new(),
            join_ends: None,
        }
    }

    /// A node given seeds to join a cluster through: joining until a
    /// member has sent it the list of its members (`fed`) and its ring
    /// holds another member, for `grace` at most.
    pub fn joining_for(me: String, ring: Ring, grace: Duration, fed: bool) -> Self {
        let alone = ring.len() <= 1;
        Routing {
            joined: AtomicBool::new(fed && !alone),
            fed: AtomicBool::new(fed),
            join_ends: Some(Instant::now() + grace),
            ..Routing::new(me, ring)
        }
    }

    /// Whether this node was given seeds and has not heard of its cluster
    /// yet: alone on its ring, it would own every key while their owners
    /// in the cluster still count them, and decide each on nothing. Once
    /// the grace passes alone, its seeds never answered and it is the
    /// cluster's first member.
    pub fn joining(&self) -> bool {
        !self.joined.load(Ordering::Acquire) && self.join_ends.is_some_and(|t| Instant::now() < t)
    }

    /// Whether this node was given seeds, none answered within its grace,
    /// and it holds every key as its cluster's only member.
    pub fn runs_alone(&self) -> bool {
        self.join_ends.is_some() && !self.joining() && self.ring.load().len() <= 1
    }

    /// Waits while this node is [joining](Routing::joining).
    pub async fn until_joined(&self) {
        while self.joining() {
            let joined = self.join.notified();
            tokio::pin!(joined);
            // Registered before the state is read again: a join in between
            // wakes it.
            joined.as_mut().enable();
            if !self.joining() {
                return;
            }
            let Some(ends) = self.join_ends else { return };
            tokio::select! {
                _ = joined => {}
                _ = tokio::time::sleep_until(ends) => {}
            }
        }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// Whether this node's ring gives it `hash_part` (on an empty ring,
    /// every key: nothing else can take it).
    pub fn owns(&self, hash_part: &str) -> bool {
        self.ring.load().owned_by(&self.me)(hash_part)
    }

    /// This process's boot: a member asked about a key names it, so the
    /// member can tell a restart of the key's owner from the owner itself.
    pub fn boot(&self) -> u64 {
        self.boot
    }

    /// The ring of the live members, this node included while it is one.
    pub fn ring(&self) -> Arc<Ring> {
        self.ring.load_full()
    }

    /// The ring checks are routed by: without this node once it is leaving.
    pub fn routing_ring(&self) -> Arc<Ring> {
        self.routes.load_full()
    }

    /// Runs `f` on the routing ring without taking a reference to it: a
    /// check decided in place would otherwise bump the ring's count, one
    /// cache line that every core's checks share.
    pub fn with_routing_ring<R>(&self, f: impl FnOnce(&Ring) -> R) -> R {
        f(&self.routes.load())
    }

    /// Installs the ring of a new member view; returns the one it replaces.
    pub fn install(&self, ring: Arc<Ring>) -> Arc<Ring> {
        let leaving = self.leaving.lock();
        // Before any check is routed by it: one decided in between would
        // not ask a member that just entered.
        self.arrivals
            .ring_changed(&self.me, &self.ring.load(), &ring);
        if !*leaving {
            self.routes.store(ring.clone());
        }
        let joined = ring.len() > 1 && self.fed.load(Ordering::Acquire);
        let before = self.ring.swap(ring);
        if joined {
            self.mark_joined();
        }
        before
    }

    /// A member sent this node the list of its members: once its ring holds
    /// another member, it has joined. Heard of one by one, the members
    /// made a partial ring on which this node owned keys their owners on
    /// the whole ring still decided (found by `weir-sim dst`, joins and
    /// restarts on a lossy network).
    pub fn fed(&self) {
        self.fed.store(true, Ordering::Release);
        if self.ring.load().len() > 1 {
            self.mark_joined();
        }
    }

    fn mark_joined(&self) {
        if !self.joined.swap(true, Ordering::AcqRel) {
            self.join.notify_waiters();
        }
    }

    /// The older members whose handoffs this node awaits.
    pub fn arrivals(&self) -> &Arrivals {
        &self.arrivals
    }

    /// Routes by the ring without this node from now on, and returns it.
    pub fn leave(&self) -> Arc<Ring> {
        let mut leaving = self.leaving.lock();
        let after = Arc::new(Ring::with_default_vnodes(&self.peers()));
        *leaving = true;
        self.routes.store(after.clone());
        after
    }

    pub fn is_member(&self, id: &str) -> bool {
        self.ring.load().members().iter().any(|m| m.id == id)
    }

    /// The other live members.
    pub fn peers(&self) -> Vec<NodeIdentity> {
        let ring = self.ring.load();
        ring.members()
            .iter()
            .filter(|m| m.id != self.me)
            .cloned()
            .collect()
    }

    /// The owner of `hash_part` when it is another node, on the routing ring.
    pub fn remote_owner(&self, hash_part: &str) -> Option<NodeIdentity> {
        self.routing_ring()
            .owner(hash_part)
            .filter(|o| o.id != self.me)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, port: u16) -> NodeIdentity {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        NodeIdentity {
            id: id.into(),
            gossip: addr,
            grpc: addr,
            incarnation: 1,
            boot: 1,
        }
    }

    /// Node a's routing in a ring of a, b and c, and a key a owns.
    fn a_of_three() -> (Routing, Vec<NodeIdentity>, String) {
        let members = vec![node("a", 1), node("b", 2), node("c", 3)];
        let r = Routing::new("a".into(), Ring::with_default_vnodes(&members));
        let mine = (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| r.remote_owner(k).is_none())
            .expect("a owns some key");
        (r, members, mine)
    }

    /// Guard: a node whose first view holds the cluster already waits for
    /// its older members' word as for members that enter later. Without
    /// it, a joiner seeded by a member that answered before the view was
    /// read asked no one, and the join race through that member read 32
    /// to 36 of 20 in about one run in forty beside two busy loops.
    #[test]
    fn the_first_views_older_members_are_waited_for() {
        let members = vec![
            node("a", 1),
            NodeIdentity {
                incarnation: 2,
                ..node("b", 2)
            },
        ];
        let r = Routing::new("b".into(), Ring::with_default_vnodes(&members));
        assert_eq!(r.arrivals().awaited(), ["a"]);
        let r = Routing::new("a".into(), Ring::with_default_vnodes(&members));
        assert!(r.arrivals().awaited().is_empty(), "b started after a");
    }

    /// Guard: a node given seeds, alone on its ring, owns nothing until a
    /// member enters and has sent it its member list (found by `weir-sim
    /// dst`: a joiner alone for 0.4 s decided its clients' checks on empty
    /// counters while their owners counted the same keys, 12 of 10 in a
    /// token bucket; and one that heard of the members one by one owned,
    /// on its partial ring, keys their owners still decided).
    #[tokio::test(start_paused = true)]
    async fn a_seeded_node_joins_once_fed_the_member_list_and_another_member_entered() {
        let a = node("a", 1);
        let r = Arc::new(Routing::joining_for(
            "a".into(),
            Ring::with_default_vnodes(std::slice::from_ref(&a)),
            Duration::from_secs(5),
            false,
        ));
        assert!(r.joining());
        let start = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let r = r.clone();
            async move { r.until_joined().await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "a check waits for the join");
        r.install(Arc::new(Ring::with_default_vnodes(&[a, node("b", 2)])));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            r.joining(),
            "b heard of by gossip: maybe a part of the cluster"
        );
        assert!(!waiting.is_finished());
        r.fed();
        waiting.await.unwrap();
        assert!(!r.joining());
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "woken by the join, not the grace"
        );
    }

    /// Guard: a node whose seeds never answer stops waiting after its grace
    /// and holds its keys as the cluster's first member; one not given
    /// seeds never waits.
    #[tokio::test(start_paused = true)]
    async fn a_seeded_node_alone_past_its_grace_is_the_first_member() {
        let ring = || Ring::with_default_vnodes(&[node("a", 1)]);
        let r = Routing::joining_for("a".into(), ring(), Duration::from_secs(5), false);
        let start = tokio::time::Instant::now();
        r.until_joined().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert!(!r.joining());
        assert!(r.runs_alone(), "says it runs alone");
        assert!(!Routing::new("a".into(), ring()).joining());
        assert!(
            !Routing::new("a".into(), ring()).runs_alone(),
            "given no seeds"
        );
        let seeded_into_a_cluster = |fed| {
            Routing::joining_for(
                "a".into(),
                Ring::with_default_vnodes(&[node("a", 1), node("b", 2)]),
                Duration::from_secs(5),
                fed,
            )
        };
        assert!(seeded_into_a_cluster(false).joining(), "not fed yet");
        let seeded_into_a_cluster = seeded_into_a_cluster(true);
        assert!(
            !seeded_into_a_cluster.joining(),
            "its first view holds the cluster"
        );
    }

    #[test]
    fn a_leaving_node_routes_every_key_elsewhere() {
        let (r, _, mine) = a_of_three();
        let after = r.leave();
        assert_eq!(after.len(), 2);
        let new_owner = r
            .remote_owner(&mine)
            .expect("a key of a leaving node has another owner");
        assert_ne!(new_owner.id, "a");
        assert_eq!(
            r.ring().len(),
            3,
            "the member ring still holds a until it is gone"
        );
    }

    /// Guard: member views keep arriving while a node leaves (it is still
    /// a member until it is gone); they update the member ring, never the
    /// ring its checks are routed by.
    #[test]
    fn a_member_view_during_a_leave_does_not_route_back_to_the_leaver() {
        let (r, members, mine) = a_of_three();
        r.leave();
        r.install(Arc::new(Ring::with_default_vnodes(&members)));
        assert_eq!(r.ring().len(), 3);
        assert!(r.remote_owner(&mine).is_some(), "routed back to a");
        assert_eq!(r.routing_ring().len(), 2);
    }
}
