//! Fault injection: addresses whose traffic is silently dropped, to stage a partition in one process.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// A shared set of addresses this node neither sends to nor hears from.
///
/// Membership drops gossip datagrams to and from them; the cluster's peer
/// client treats a call to one as a connection that never answers. Tests
/// and the simulator use it to partition nodes that share a loopback
/// interface; production configs leave it unset, and then nothing is checked.
#[derive(Debug, Clone, Default)]
pub struct Blackhole(Arc<RwLock<HashSet<SocketAddr>>>);

impl Blackhole {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn block(&self, addr: SocketAddr) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(addr);
    }

    pub fn unblock(&self, addr: SocketAddr) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr);
    }

    /// Heals the partition: every address is reachable again.
    pub fn clear(&self) {
        self.0.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub fn contains(&self, addr: SocketAddr) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&addr)
    }
}
