//! When each global key last came to this node as its home allocator: the member views seen over the last few rounds, and when this node started.
//!
//! A home's books are not copied (see [`super::allocator`]), so a node
//! that becomes a key's owner must not lend the key's windows until the
//! regions have told it what the owner before lent them. It needs to know
//! when the key arrived, not only that it did: the wait is counted from
//! then. Views older than that wait are of no use, so few are kept.

use std::collections::VecDeque;
use std::sync::Arc;

use weir_core::Nanos;

use crate::topology::ring::Ring;

pub struct Arrivals {
    /// When this node started allocating: every key may have been another
    /// node's until then, or this node's in an earlier run.
    started: Nanos,
    ring: Arc<Ring>,
    /// The ring each change replaced and when the change was seen, oldest
    /// first; none older than the wait.
    changes: VecDeque<(Arc<Ring>, Nanos)>,
}

impl Arrivals {
    pub fn new(ring: Arc<Ring>, started: Nanos) -> Self {
        Arrivals {
            started,
            ring,
            changes: VecDeque::new(),
        }
    }

    /// Takes the ring in force at `now`, and forgets changes older than
    /// `keep`.
    pub fn see(&mut self, ring: Arc<Ring>, now: Nanos, keep: Nanos) {
        if !Arc::ptr_eq(&ring, &self.ring) && ring.members() != self.ring.members() {
            let before = std::mem::replace(&mut self.ring, ring);
            self.changes.push_back((before, now));
        }
        while self
            .changes
            .front()
            .is_some_and(|(_, at)| now.saturating_sub(*at) > keep)
        {
            self.changes.pop_front();
        }
    }

    /// When `key` last became `me`'s: the latest change kept that made
    /// `me` its owner, or else when this node started.
    pub fn arrived(&self, key: &str, me: &str) -> Nanos {
        let mut after = &self.ring;
        for (before, at) in self.changes.iter().rev() {
            if before.owner_id(key) != Some(me) && after.owner_id(key) == Some(me) {
                return *at;
            }
            after = before;
        }
        self.started
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::topology::membership::NodeIdentity;

    fn ring(ids: &[&str]) -> Arc<Ring> {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let members: Vec<NodeIdentity> = ids
            .iter()
            .map(|id| NodeIdentity::new(*id, addr, addr))
            .collect();
        Arc::new(Ring::with_default_vnodes(&members))
    }

    #[test]
    fn a_key_arrives_when_a_change_makes_this_node_its_owner() {
        let both = ring(&["a", "b"]);
        let (was_b, was_a) = (both.first_key_of("b"), both.first_key_of("a"));
        let mut arrivals = Arrivals::new(both, 100);
        assert_eq!(arrivals.arrived(&was_b, "a"), 100, "since it started");
        arrivals.see(ring(&["a"]), 500, 1_000);
        assert_eq!(arrivals.arrived(&was_b, "a"), 500, "b's key came at 500");
        assert_eq!(arrivals.arrived(&was_a, "a"), 100, "a's own stayed");
        // The same members again: no change.
        arrivals.see(ring(&["a"]), 700, 1_000);
        assert_eq!(arrivals.arrived(&was_b, "a"), 500);
        // Away to b and back: the later arrival counts.
        arrivals.see(ring(&["a", "b"]), 800, 1_000);
        assert_eq!(arrivals.arrived(&was_b, "a"), 500, "b's again");
        arrivals.see(ring(&["a"]), 900, 1_000);
        assert_eq!(arrivals.arrived(&was_b, "a"), 900);
        // Changes older than `keep` are forgotten.
        arrivals.see(ring(&["a"]), 1_950, 1_000);
        assert_eq!(arrivals.arrived(&was_b, "a"), 100, "900 is past keeping");
    }
}
