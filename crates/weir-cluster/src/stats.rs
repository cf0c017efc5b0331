//! What a node reports about the cluster: members, counters since start, fallback state.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::topology::membership::MemberState;

/// One member as this node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberStatus {
    pub id: String,
    pub gossip: SocketAddr,
    pub grpc: SocketAddr,
    pub state: MemberState,
    /// Fraction of the key space this member owns on this node's ring; 0
    /// for a member that is down.
    pub ring_share: f64,
}

/// Which owners this node is currently deciding for on its own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FallbackStatus {
    pub active: bool,
    /// Node ids of the owners in fallback, sorted.
    pub owners: Vec<String>,
    /// Times any owner entered fallback since start.
    pub entered_total: u64,
}

/// Counters since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClusterStats {
    /// `Peer/Decide` calls sent.
    pub peer_calls: u64,
    /// Counter operations carried by those calls (ops / calls = mean batch).
    pub peer_ops: u64,
    /// Encoded bytes of those calls, request and answer, counted by the
    /// sender (protobuf bodies, as `sync_bytes`; HTTP/2 framing not counted).
    pub peer_bytes: u64,
    /// Decide calls that timed out or failed.
    pub peer_failures: u64,
    /// Checks answered from the deny cache, with no peer call.
    pub deny_cache_hits: u64,
    /// Limits decided on the local fallback limiter (owner unreachable).
    pub fallback_decisions: u64,
    pub fallback_entered: u64,
    pub fallback_left: u64,
    /// Owners in fallback now.
    pub fallback_active: u64,
    /// `Peer/Handoff` calls sent and received, and the encoded bytes sent.
    pub handoffs_sent: u64,
    pub handoffs_received: u64,
    pub handoff_bytes: u64,
    /// Counters handed to other nodes, and taken over from them.
    pub keys_moved_out: u64,
    pub keys_moved_in: u64,
    /// Counters a leaving node could not hand over (the new owner did not answer).
    pub keys_lost: u64,
    /// Rule sets pushed to peers, and taken from peers (push or pull).
    pub rules_pushed: u64,
    pub rules_adopted: u64,
    /// Peer calls refused for a missing or wrong cluster secret.
    pub unauthenticated: u64,
    /// Ops decided here for keys this node does not own (a peer's ring was
    /// behind); such counters are swept to their owner.
    pub strays: u64,
    /// Gossip strategy: `Peer/SyncCounts` messages sent, their encoded
    /// bytes, and the per-key counts they carried.
    pub sync_messages: u64,
    pub sync_bytes: u64,
    pub sync_deltas: u64,
    /// Gossip strategy: counts received and refused (unknown rule, a window
    /// other than the current or previous one, or the key cap reached).
    pub sync_refused: u64,
    /// Handed-over counters refused: a state that breaks its algorithm's
    /// invariants, or a new key past `--max-keys`.
    pub handoff_refused: u64,
}

/// The live counters behind [`ClusterStats`].
#[derive(Debug, Default)]
pub struct Stats {
    pub peer_calls: AtomicU64,
    pub peer_ops: AtomicU64,
    pub peer_bytes: AtomicU64,
    pub peer_failures: AtomicU64,
    pub deny_cache_hits: AtomicU64,
    pub fallback_decisions: AtomicU64,
    pub handoffs_sent: AtomicU64,
    pub handoffs_received: AtomicU64,
    pub handoff_bytes: AtomicU64,
    pub keys_moved_out: AtomicU64,
    pub keys_moved_in: AtomicU64,
    pub keys_lost: AtomicU64,
    pub rules_pushed: AtomicU64,
    pub rules_adopted: AtomicU64,
    pub unauthenticated: AtomicU64,
    pub strays: AtomicU64,
    pub sync_messages: AtomicU64,
    pub sync_bytes: AtomicU64,
    pub sync_deltas: AtomicU64,
    pub sync_refused: AtomicU64,
    pub handoff_refused: AtomicU64,
}

pub fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    pub fn snapshot(&self, fallback: &FallbackCounts) -> ClusterStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClusterStats {
            peer_calls: get(&self.peer_calls),
            peer_ops: get(&self.peer_ops),
            peer_bytes: get(&self.peer_bytes),
            peer_failures: get(&self.peer_failures),
            deny_cache_hits: get(&self.deny_cache_hits),
            fallback_decisions: get(&self.fallback_decisions),
            fallback_entered: fallback.entered,
            fallback_left: fallback.left,
            fallback_active: fallback.active,
            handoffs_sent: get(&self.handoffs_sent),
            handoffs_received: get(&self.handoffs_received),
            handoff_bytes: get(&self.handoff_bytes),
            keys_moved_out: get(&self.keys_moved_out),
            keys_moved_in: get(&self.keys_moved_in),
            keys_lost: get(&self.keys_lost),
            rules_pushed: get(&self.rules_pushed),
            rules_adopted: get(&self.rules_adopted),
            unauthenticated: get(&self.unauthenticated),
            strays: get(&self.strays),
            sync_messages: get(&self.sync_messages),
            sync_bytes: get(&self.sync_bytes),
            sync_deltas: get(&self.sync_deltas),
            sync_refused: get(&self.sync_refused),
            handoff_refused: get(&self.handoff_refused),
        }
    }
}

/// The fallback's own counts, read under its lock.
#[derive(Debug, Clone, Copy, Default)]
pub struct FallbackCounts {
    pub entered: u64,
    pub left: u64,
    pub active: u64,
}
