//! What a node reports about the cluster: members, counters since start, fallback state.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;

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
    /// This node's breaker for the member: `closed`, `open` or `half_open`.
    pub breaker: &'static str,
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
    /// Limits decided on the local fallback: owner lost, no replica answered.
    pub fallback_decisions: u64,
    pub fallback_entered: u64,
    pub fallback_left: u64,
    /// Owners in fallback now.
    pub fallback_active: u64,
    /// `Peer/Handoff` calls sent and received, and the encoded bytes sent.
    pub handoffs_sent: u64,
    /// `Peer/Handoff` calls that failed: their counters stay here, offered
    /// again on the next sweep.
    pub handoffs_failed: u64,
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
    /// Direct peer connections (`net::direct`) this node accepted.
    pub direct_connections: u64,
    /// Ops decided here for keys this node does not own (a peer's ring was
    /// behind); such counters are swept to their owner.
    pub strays: u64,
    /// Ops this node asked of a key's previous owner: it owns the key since
    /// it joined, and that owner's handoff had not come.
    pub asked_back: u64,
    /// Gossip strategy: `Peer/SyncCounts` messages sent, their encoded
    /// bytes, and the per-key counts they carried.
    pub sync_messages: u64,
    pub sync_bytes: u64,
    pub sync_deltas: u64,
    /// Forwarded ops: time queued in this gateway, and time from send to answer.
    pub queue_wait: TimingSummary,
    pub call_time: TimingSummary,
    pub slow_decisions: u64,
    pub replica_decisions: u64,
    pub late_refunds: u64,
    pub expired_ops: u64,
    pub charges_owed: u64,
    pub charges_paid: u64,
    pub charges_dropped: u64,
    pub replicated: u64,
    pub replication_lag: TimingSummary,
    /// Changes to counters owned here not yet copied to their holder.
    pub replication_pending: u64,
    /// Gossip strategy: counts received and refused (unknown rule, a window
    /// other than the current or previous one, or the key cap reached).
    pub sync_refused: u64,
    /// Handed-over counters refused: a state that breaks its algorithm's
    /// invariants, or a new key past `--max-keys`.
    pub handoff_refused: u64,
    /// As an owner: leases granted for hot keys, and their units.
    pub leases_granted: u64,
    pub lease_units_granted: u64,
    /// As a gateway: limits decided from a lease, renewals asked for, and
    /// unused units given back.
    pub lease_decisions: u64,
    pub lease_renewals: u64,
    pub lease_units_returned: u64,
    /// Limits of `hot = "local"` rules decided here against L/N.
    pub tier_decisions: u64,
    /// Fallback admissions refused because the node-wide cap was spent.
    pub fallback_capped: u64,
    /// A dead owner's recent admissions: reported by this gateway to the
    /// keys' new owners, and added here to a copy that lacked them.
    pub admissions_reported: u64,
    pub admissions_recovered: u64,
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
    pub handoffs_failed: AtomicU64,
    pub handoffs_received: AtomicU64,
    pub handoff_bytes: AtomicU64,
    pub keys_moved_out: AtomicU64,
    pub keys_moved_in: AtomicU64,
    pub keys_lost: AtomicU64,
    pub rules_pushed: AtomicU64,
    pub rules_adopted: AtomicU64,
    pub unauthenticated: AtomicU64,
    pub direct_connections: AtomicU64,
    pub strays: AtomicU64,
    pub asked_back: AtomicU64,
    pub sync_messages: AtomicU64,
    pub sync_bytes: AtomicU64,
    pub sync_deltas: AtomicU64,
    /// Forwarded ops: time queued in this gateway, and time from send to answer.
    pub queue_wait: Timing,
    pub call_time: Timing,
    /// Limits decided here because their owner (or stand-in) did not
    /// answer in time, though it was not lost.
    pub slow_decisions: AtomicU64,
    /// Limits decided by a replica holder standing in for a lost owner.
    pub replica_decisions: AtomicU64,
    /// Late owner admissions of checks refused here, refunded there.
    pub late_refunds: AtomicU64,
    /// Consumes that reached this node after their expiry (their gateway
    /// had given up on them), answered without being counted.
    pub expired_ops: AtomicU64,
    /// Admissions decided without their owner: owed, charged to the owner
    /// once it answers, or dropped because too many were owed.
    pub charges_owed: AtomicU64,
    pub charges_paid: AtomicU64,
    pub charges_dropped: AtomicU64,
    /// Counter states copied to replica holders, and how long a change
    /// waited to be copied (what a crash can lose).
    pub replicated: AtomicU64,
    pub replication_lag: Timing,
    pub sync_refused: AtomicU64,
    pub handoff_refused: AtomicU64,
    pub leases_granted: AtomicU64,
    pub lease_units_granted: AtomicU64,
    pub lease_decisions: AtomicU64,
    pub lease_renewals: AtomicU64,
    pub lease_units_returned: AtomicU64,
    pub tier_decisions: AtomicU64,
    pub fallback_capped: AtomicU64,
    /// Ops forwarded to other nodes, by rule (bounded by the rule names
    /// installed since start: a removed rule keeps its count).
    pub forwarded: DashMap<Arc<str>, AtomicU64, weir_core::determinism::HashState>,
    pub admissions_reported: AtomicU64,
    pub admissions_recovered: AtomicU64,
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
            handoffs_failed: get(&self.handoffs_failed),
            handoffs_received: get(&self.handoffs_received),
            handoff_bytes: get(&self.handoff_bytes),
            keys_moved_out: get(&self.keys_moved_out),
            keys_moved_in: get(&self.keys_moved_in),
            keys_lost: get(&self.keys_lost),
            rules_pushed: get(&self.rules_pushed),
            rules_adopted: get(&self.rules_adopted),
            unauthenticated: get(&self.unauthenticated),
            direct_connections: get(&self.direct_connections),
            strays: get(&self.strays),
            asked_back: get(&self.asked_back),
            sync_messages: get(&self.sync_messages),
            sync_bytes: get(&self.sync_bytes),
            sync_deltas: get(&self.sync_deltas),
            queue_wait: self.queue_wait.summary(),
            call_time: self.call_time.summary(),
            slow_decisions: get(&self.slow_decisions),
            replica_decisions: get(&self.replica_decisions),
            late_refunds: get(&self.late_refunds),
            expired_ops: get(&self.expired_ops),
            charges_owed: get(&self.charges_owed),
            charges_paid: get(&self.charges_paid),
            charges_dropped: get(&self.charges_dropped),
            replicated: get(&self.replicated),
            replication_lag: self.replication_lag.summary(),
            replication_pending: 0,
            sync_refused: get(&self.sync_refused),
            handoff_refused: get(&self.handoff_refused),
            leases_granted: get(&self.leases_granted),
            lease_units_granted: get(&self.lease_units_granted),
            lease_decisions: get(&self.lease_decisions),
            lease_renewals: get(&self.lease_renewals),
            lease_units_returned: get(&self.lease_units_returned),
            tier_decisions: get(&self.tier_decisions),
            fallback_capped: get(&self.fallback_capped),
            admissions_reported: get(&self.admissions_reported),
            admissions_recovered: get(&self.admissions_recovered),
        }
    }

    /// One op of the rule labelled `rule` ([`weir_core::Rule::label`]: a
    /// carried limit's is one label, so callers cannot grow this map) sent
    /// to another node.
    pub fn forwarded(&self, rule: &Arc<str>) {
        // The read guard ends with the `if let` before an insert locks.
        if let Some(n) = self.forwarded.get(rule) {
            bump(&n, 1);
            return;
        }
        bump(&self.forwarded.entry(rule.clone()).or_default(), 1);
    }

    /// Ops sent to other nodes, by rule, sorted by rule.
    pub fn forwarded_by_rule(&self) -> Vec<(Arc<str>, u64)> {
        let mut v: Vec<(Arc<str>, u64)> = self
            .forwarded
            .iter()
            .map(|e| (e.key().clone(), e.value().load(Ordering::Relaxed)))
            .collect();
        v.sort();
        v
    }
}

/// The fallback's own counts, read under its lock.
#[derive(Debug, Clone, Copy, Default)]
pub struct FallbackCounts {
    pub entered: u64,
    pub left: u64,
    pub active: u64,
}

/// Upper bounds of every latency histogram a node exports, in nanoseconds:
/// steps of 1, 2.5 and 5 from 5 us (a check decided in place takes a few)
/// to 10 s (a leave's handover, a stalled peer), so one set of buckets
/// serves every timing and sums across nodes.
pub const LATENCY_BOUNDS_NS: [u64; 20] = [
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A count per bound of [`LATENCY_BOUNDS_NS`], and one past the last.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// Durations in fixed buckets, lock-free: recorded on the forwarding path,
/// so one relaxed add per bucket and counter and no allocation.
#[derive(Debug, Default)]
pub struct Timing {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

/// One reading of a [`Timing`]. Percentiles are the bucket bound they fall
/// under (so a p99 of 5 ms means "99% took 5 ms or less").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimingSummary {
    pub count: u64,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Durations at or under each bound of [`LATENCY_BOUNDS_NS`] and above
    /// the one before (the last: above them all), since start.
    pub buckets: [u64; LATENCY_BUCKETS],
    /// Every duration recorded, added up.
    pub sum: Duration,
}

impl Timing {
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // A bucket holds the values at or below its bound (Prometheus `le`).
        let i = LATENCY_BOUNDS_NS.partition_point(|&b| b < ns);
        bump(&self.buckets[i], 1);
        bump(&self.sum_ns, ns);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub fn summary(&self) -> TimingSummary {
        let buckets: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed));
        let count: u64 = buckets.iter().sum();
        if count == 0 {
            return TimingSummary::default();
        }
        let max = Duration::from_nanos(self.max_ns.load(Ordering::Relaxed));
        let at = |q: f64| {
            let rank = (q * count as f64).ceil() as u64;
            let mut seen = 0;
            for (i, c) in buckets.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return LATENCY_BOUNDS_NS
                        .get(i)
                        .map_or(max, |&ns| Duration::from_nanos(ns).min(max));
                }
            }
            max
        };
        let sum_ns = self.sum_ns.load(Ordering::Relaxed);
        let sum = Duration::from_nanos(sum_ns);
        TimingSummary {
            count,
            mean: Duration::from_nanos(sum_ns / count),
            p50: at(0.5),
            p99: at(0.99),
            max,
            buckets,
            sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timing_reads_back_its_percentiles_as_bucket_bounds() {
        let t = Timing::default();
        assert_eq!(t.summary(), TimingSummary::default());
        for _ in 0..98 {
            t.record(Duration::from_micros(80));
        }
        t.record(Duration::from_millis(3));
        t.record(Duration::from_secs(2));
        let s = t.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, Duration::from_micros(100));
        assert_eq!(s.p99, Duration::from_millis(5));
        assert_eq!(s.max, Duration::from_secs(2));
        // 80 us is above the 50 us bound and at most the 100 us one.
        let at = |ns: u64| LATENCY_BOUNDS_NS.iter().position(|&b| b == ns).unwrap();
        assert_eq!(s.buckets[at(100_000)], 98);
        assert_eq!(s.buckets[at(5_000_000)], 1);
        assert_eq!(s.buckets[at(2_500_000_000)], 1);
        assert_eq!(s.buckets.iter().sum::<u64>(), 100);
        let sum =
            Duration::from_micros(98 * 80) + Duration::from_millis(3) + Duration::from_secs(2);
        assert_eq!(s.sum, sum);
    }

    #[test]
    fn a_duration_on_a_bound_is_counted_under_it_and_past_the_last_above_all() {
        let t = Timing::default();
        t.record(Duration::from_micros(5));
        t.record(Duration::from_secs(11));
        let s = t.summary();
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[LATENCY_BUCKETS - 1], 1);
    }
}
