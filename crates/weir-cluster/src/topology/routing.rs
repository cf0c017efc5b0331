//! The ring this node routes by: the live members' ring, or once a graceful leave begins, the ring without this node.

use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};

use super::membership::NodeIdentity;
use super::ring::Ring;

pub struct Routing {
    me: String,
    ring: ArcSwap<Ring>,
    /// Set once a graceful leave begins.
    after_leave: ArcSwapOption<Ring>,
}

impl Routing {
    pub fn new(me: String, ring: Ring) -> Self {
        Routing {
            me,
            ring: ArcSwap::from_pointee(ring),
            after_leave: ArcSwapOption::empty(),
        }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// The ring of the live members, this node included while it is one.
    pub fn ring(&self) -> Arc<Ring> {
        self.ring.load_full()
    }

    /// The ring checks are routed by: without this node once it is leaving.
    pub fn routing_ring(&self) -> Arc<Ring> {
        match self.after_leave.load_full() {
            Some(r) => r,
            None => self.ring.load_full(),
        }
    }

    /// Runs `f` on the routing ring without taking a reference to it: a
    /// check decided in place would otherwise bump the ring's count, one
    /// cache line that every core's checks share.
    pub fn with_routing_ring<R>(&self, f: impl FnOnce(&Ring) -> R) -> R {
        let leaving = self.after_leave.load();
        match &*leaving {
            Some(r) => f(r),
            None => f(&self.ring.load()),
        }
    }

    /// Installs the ring of a new member view; returns the one it replaces.
    pub fn install(&self, ring: Arc<Ring>) -> Arc<Ring> {
        self.ring.swap(ring)
    }

    /// Routes by the ring without this node from now on, and returns it.
    pub fn leave(&self) -> Arc<Ring> {
        let after = Arc::new(Ring::with_default_vnodes(&self.peers()));
        self.after_leave.store(Some(after.clone()));
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

    #[test]
    fn a_leaving_node_routes_every_key_elsewhere() {
        let members = [node("a", 1), node("b", 2), node("c", 3)];
        let r = Routing::new("a".into(), Ring::with_default_vnodes(&members));
        let mine = (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| r.remote_owner(k).is_none())
            .expect("a owns some key");
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
}
