//! The identity a node gossips: node id, gossip and gRPC addresses, and an incarnation.

use rand::Rng;
use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Who a cluster member is and how to reach it.
///
/// foca keys members by [`NodeIdentity::gossip`] (the `Addr`); two identities
/// with the same gossip address are the same node at different incarnations,
/// and the higher incarnation wins. That is what lets a node that was declared
/// down, or that restarted with the same id and address, come back without an
/// operator: it simply presents a newer incarnation.
///
/// The derived ordering (id first) is the order of [`super::MemberView`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// Node id, unique in the cluster; it is what the ring places.
    pub id: String,
    /// UDP address for membership gossip.
    pub gossip: SocketAddr,
    /// Address peers use to forward checks to this node.
    pub grpc: SocketAddr,
    /// Bumped on every rejoin; a fresh process starts at the wall clock in
    /// milliseconds so that a restart outranks whatever the cluster remembers.
    pub incarnation: u64,
    /// Drawn at random when the process starts and kept across rejoins: a
    /// node that comes back with the same boot still holds its counters (a
    /// healed partition), one with another boot restarted empty.
    pub boot: u64,
}

impl NodeIdentity {
    /// An identity whose incarnation is the current unix time in milliseconds.
    pub fn new(id: impl Into<String>, gossip: SocketAddr, grpc: SocketAddr) -> Self {
        let incarnation = crate::determinism::unix_ms().max(1);
        NodeIdentity {
            id: id.into(),
            gossip,
            grpc,
            incarnation,
            boot: crate::determinism::with_rng(|r| r.random()),
        }
    }

    /// Total order used to settle two identities claiming one gossip
    /// address; it must be antisymmetric or both sides would keep renaming.
    fn rank(&self) -> (u64, &str, SocketAddr) {
        (self.incarnation, &self.id, self.grpc)
    }
}

impl fmt::Debug for NodeIdentity {
    // Compact on purpose: identities show up in every foca trace line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{}/{}#{}",
            self.id, self.gossip, self.grpc, self.incarnation
        )
    }
}

impl fmt::Display for NodeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl foca::Identity for NodeIdentity {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        // None at u64::MAX makes foca go defunct instead of wrapping to a
        // value that would lose every conflict.
        let incarnation = self.incarnation.checked_add(1)?;
        Some(NodeIdentity {
            incarnation,
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.gossip
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.rank() > adversary.rank()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::Identity;

    fn id(name: &str, inc: u64) -> NodeIdentity {
        NodeIdentity {
            id: name.into(),
            gossip: "127.0.0.1:7000".parse().unwrap(),
            grpc: "127.0.0.1:8000".parse().unwrap(),
            incarnation: inc,
            boot: 7,
        }
    }

    #[test]
    fn renew_bumps_and_wins() {
        let a = id("a", 5);
        let b = a.renew().unwrap();
        assert_eq!(b.incarnation, 6);
        assert_eq!(b.addr(), a.addr());
        assert!(b.win_addr_conflict(&a));
        assert!(!a.win_addr_conflict(&b));
        assert!(id("a", u64::MAX).renew().is_none());
    }

    #[test]
    fn conflict_is_antisymmetric_on_ties() {
        let a = id("a", 5);
        let b = id("b", 5);
        assert_ne!(a.win_addr_conflict(&b), b.win_addr_conflict(&a));
    }

    #[test]
    fn postcard_roundtrip() {
        let a = id("node-1", 42);
        let bytes = postcard::to_allocvec(&a).unwrap();
        let back: NodeIdentity = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(a, back);
    }
}
