//! Metrics read at scrape time from the limiter and the cluster, which keep their own counters.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use weir_cluster::membership::MemberState;
use weir_cluster::stats::LATENCY_BOUNDS_NS;
use weir_cluster::{Cluster, Engine};

use super::OVERRIDE_LABEL;

/// Everything `/metrics` shows beyond the node's own check counters.
pub struct NodeCollector {
    engine: Arc<Engine>,
    max_keys: usize,
}

impl NodeCollector {
    pub fn new(engine: Arc<Engine>, max_keys: usize) -> Self {
        NodeCollector { engine, max_keys }
    }
}

impl fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NodeCollector")
    }
}

/// One metric family as exported; names are written here whole, as
/// docs/operations.md and its alerts spell them.
struct Family<'a> {
    name: &'a str,
    help: &'a str,
    kind: MetricType,
}

const fn counter<'a>(name: &'a str, help: &'a str) -> Family<'a> {
    Family {
        name,
        help,
        kind: MetricType::Counter,
    }
}

const fn gauge<'a>(name: &'a str, help: &'a str) -> Family<'a> {
    Family {
        name,
        help,
        kind: MetricType::Gauge,
    }
}

impl Family<'_> {
    fn descriptor<'e>(
        &'e self,
        enc: &'e mut DescriptorEncoder,
    ) -> Result<MetricEncoder<'e>, fmt::Error> {
        // The library appends `_total` to a counter's name itself.
        let name = match self.kind {
            MetricType::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            _ => self.name,
        };
        enc.encode_descriptor(name, self.help, None, self.kind)
    }

    fn sample(&self, m: MetricEncoder, value: u64) -> fmt::Result {
        match self.kind {
            MetricType::Counter => ConstCounter::new(value).encode(m),
            _ => ConstGauge::new(value).encode(m),
        }
    }

    /// The family with one unlabelled sample.
    fn one(&self, enc: &mut DescriptorEncoder, value: u64) -> fmt::Result {
        let m = self.descriptor(enc)?;
        self.sample(m, value)
    }

    /// The family with one sample per value of `label`.
    fn labeled(
        &self,
        enc: &mut DescriptorEncoder,
        label: &str,
        samples: &[(&str, u64)],
    ) -> fmt::Result {
        let mut m = self.descriptor(enc)?;
        for (value, n) in samples {
            self.sample(m.encode_family(&[(label, *value)])?, *n)?;
        }
        Ok(())
    }
}

impl Collector for NodeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let limiter = self.engine.limiter();
        let per_rule = limiter.keys_per_rule();
        let adhoc = limiter.adhoc_keys() as u64;
        let mut keys: Vec<(&str, u64)> = per_rule.iter().map(|(r, n)| (&**r, *n as u64)).collect();
        keys.push((OVERRIDE_LABEL, adhoc));
        gauge("weir_keys", "Counter keys held in memory, by rule.")
            .labeled(&mut enc, "rule", &keys)?;
        gauge("weir_max_keys", "Most keys one rule may hold (--max-keys).")
            .one(&mut enc, self.max_keys as u64)?;
        let at_ceiling = limiter.store_counts();
        counter(
            "weir_keys_dropped_at_rest_total",
            "Keys dropped because their state equalled a fresh key's (no answer changes).",
        )
        .one(&mut enc, at_ceiling.dropped_at_rest)?;
        counter(
            "weir_keys_refused_total",
            "New keys refused (503) because a table was at --max-keys with no room made for them.",
        )
        .one(&mut enc, at_ceiling.refused_full)?;
        gauge(
            "weir_rules_version",
            "Version of the rule set in force: the highest version of any tier's last write.",
        )
        .one(&mut enc, self.engine.rules().version())?;
        match self.engine.cluster() {
            Some(cluster) => encode_cluster(&mut enc, cluster),
            None => Ok(()),
        }
    }
}

fn encode_cluster(enc: &mut DescriptorEncoder, cluster: &Cluster) -> fmt::Result {
    let s = cluster.stats();
    let g = cluster.gossip_stats();
    let counters = [
        (
            "weir_peer_calls_total",
            "Peer/Decide calls sent.",
            s.peer_calls,
        ),
        (
            "weir_peer_ops_total",
            "Counter operations carried by Decide calls.",
            s.peer_ops,
        ),
        (
            "weir_peer_bytes_total",
            "Encoded bytes of Peer/Decide calls and their answers, counted by the sender.",
            s.peer_bytes,
        ),
        (
            "weir_peer_failures_total",
            "Decide calls that timed out or failed.",
            s.peer_failures,
        ),
        (
            "weir_deny_cache_hits_total",
            "Checks answered from the deny cache with no peer call.",
            s.deny_cache_hits,
        ),
        (
            "weir_fallback_decisions_total",
            "Limits decided on the local fallback (owner unreachable).",
            s.fallback_decisions,
        ),
        (
            "weir_fallback_entered_total",
            "Times an owner entered fallback.",
            s.fallback_entered,
        ),
        (
            "weir_fallback_left_total",
            "Times an owner left fallback.",
            s.fallback_left,
        ),
        (
            "weir_handoffs_sent_total",
            "Peer/Handoff calls sent.",
            s.handoffs_sent,
        ),
        (
            "weir_handoffs_failed_total",
            "Peer/Handoff calls that failed; their counters are offered again.",
            s.handoffs_failed,
        ),
        (
            "weir_handoffs_bytes_total",
            "Encoded bytes of the Peer/Handoff calls sent.",
            s.handoff_bytes,
        ),
        (
            "weir_handoffs_received_total",
            "Peer/Handoff calls received.",
            s.handoffs_received,
        ),
        (
            "weir_keys_lost_total",
            "Counters a leaving node could not hand over.",
            s.keys_lost,
        ),
        (
            "weir_peer_unauthenticated_total",
            "Peer calls refused for a missing or wrong cluster secret.",
            s.unauthenticated,
        ),
        (
            "weir_peer_direct_connections_total",
            "Direct peer connections (forwarded checks and copies) this node accepted.",
            s.direct_connections,
        ),
        (
            "weir_strays_total",
            "Ops decided here for keys another node owns.",
            s.strays,
        ),
        (
            "weir_asked_back_total",
            "Ops for keys this node took over on joining, asked of their previous owner before its handoff came.",
            s.asked_back,
        ),
        (
            "weir_rules_pushed_total",
            "Rule sets pushed to peers.",
            s.rules_pushed,
        ),
        (
            "weir_rules_adopted_total",
            "Rule sets taken from peers.",
            s.rules_adopted,
        ),
        (
            "weir_sync_messages_total",
            "Gossip strategy: Peer/SyncCounts messages sent.",
            s.sync_messages,
        ),
        (
            "weir_sync_bytes_total",
            "Gossip strategy: encoded bytes of those messages.",
            s.sync_bytes,
        ),
        (
            "weir_sync_deltas_total",
            "Gossip strategy: per-key counts those messages carried.",
            s.sync_deltas,
        ),
        (
            "weir_sync_refused_total",
            "Gossip strategy: per-key counts received and refused (a sender not on the ring, \
             an unknown rule, a window other than the current or previous one, the key cap).",
            s.sync_refused,
        ),
        (
            "weir_handoff_refused_total",
            "Handed-over counters refused: a state that breaks its algorithm's invariants, \
             or a new key past --max-keys.",
            s.handoff_refused,
        ),
        (
            "weir_gossip_bad_mac_dropped_total",
            "Gossip datagrams dropped for a missing or wrong HMAC tag.",
            g.bad_mac_dropped,
        ),
        (
            "weir_gossip_invalid_dropped_total",
            "Authentic gossip datagrams that did not parse.",
            g.invalid_dropped,
        ),
        (
            "weir_gossip_send_errors_total",
            "Gossip datagrams that could not be sent.",
            g.send_errors,
        ),
    ];
    for (name, help, v) in counters {
        counter(name, help).one(enc, v)?;
    }
    let direction = |i, o| [("in", i), ("out", o)];
    gauge(
        "weir_fallback_active",
        "Owners this node is deciding for on its local fallback now.",
    )
    .one(enc, s.fallback_active)?;
    counter(
        "weir_keys_moved_total",
        "Counters handed to other nodes (out) and taken over from them (in).",
    )
    .labeled(
        enc,
        "direction",
        &direction(s.keys_moved_in, s.keys_moved_out),
    )?;

    let members = cluster.members_status();
    let count = |st: MemberState| members.iter().filter(|m| m.state == st).count() as u64;
    gauge(
        "weir_members",
        "Cluster members as this node sees them, by state.",
    )
    .labeled(
        enc,
        "state",
        &[
            ("alive", count(MemberState::Alive)),
            ("suspect", count(MemberState::Suspect)),
            ("down", count(MemberState::Down)),
        ],
    )?;

    counter(
        "weir_gossip_packets_total",
        "Gossip datagrams received and sent.",
    )
    .labeled(enc, "direction", &direction(g.packets_in, g.packets_out))?;
    counter("weir_gossip_bytes_total", "Gossip bytes received and sent.").labeled(
        enc,
        "direction",
        &direction(g.bytes_in, g.bytes_out),
    )?;
    counter(
        "weir_gossip_replay_dropped_total",
        "Authentic gossip datagrams dropped as replays: stamped outside the freshness window, \
         or seen before.",
    )
    .labeled(
        enc,
        "reason",
        &[("stale", g.stale_dropped), ("seen", g.replayed_dropped)],
    )?;
    encode_owner_path(enc, cluster, &s)?;
    encode_hot(enc, cluster, &s)?;
    encode_region(enc, cluster)
}

/// Global limits: keys by how they are decided, homes out of reach, and
/// the rounds' calls. Series are per mode and per region, never per key.
fn encode_region(enc: &mut DescriptorEncoder, cluster: &Cluster) -> fmt::Result {
    let (Some(status), Some(regional)) = (cluster.region_status(0), cluster.regional()) else {
        return Ok(());
    };
    let all = status.keys_total as u64;
    let fallback = status.keys_fallback as u64;
    gauge(
        "weir_region_keys",
        "Global keys this node decides for its region, by how: against the allocation \
         their home region made (allocated), or against the static share L/regions because \
         the home has not answered (fallback).",
    )
    .labeled(
        enc,
        "mode",
        &[
            ("allocated", all.saturating_sub(fallback)),
            ("fallback", fallback),
        ],
    )?;
    // One series per other region: 0 while it answers.
    let family = gauge(
        "weir_region_home_unreachable_seconds",
        "Each other region as a home: how long it has gone unanswered once that passed \
         three rounds; 0 while it answers.",
    );
    let mut m = family.descriptor(enc)?;
    for r in status.regions.iter().filter(|r| **r != status.region) {
        let quiet = status.unreachable.iter().find(|(h, _)| h == r);
        let ms = quiet.map_or(0, |(_, ms)| *ms);
        ConstGauge::new(ms as f64 / 1000.0).encode(m.encode_family(&[("region", r.as_str())])?)?;
    }
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let c = &regional.counts;
    counter(
        "weir_region_reports_total",
        "Global-key reports: sent to home regions, answered here as home.",
    )
    .labeled(
        enc,
        "kind",
        &[
            ("sent", load(&c.reports_sent)),
            ("answered", load(&c.reports_answered)),
        ],
    )?;
    counter(
        "weir_region_calls_failed_total",
        "Calls to another region that failed or went unanswered.",
    )
    .one(enc, load(&c.calls_failed))
}

/// Hot keys, leases and the two other valves. No series per key: the
/// hottest keys are ranked, and a rank's label never grows.
fn encode_hot(
    enc: &mut DescriptorEncoder,
    cluster: &Cluster,
    s: &weir_cluster::ClusterStats,
) -> fmt::Result {
    let (top, _) = cluster.hot_keys(HOT_RANKS);
    let family = gauge(
        "weir_hot_key_checks",
        "Checks in the last whole second of this owner's hottest keys, by rank (1 is the \
         hottest; GET /v1/hot names them; 0 for a rank no key holds).",
    );
    let mut m = family.descriptor(enc)?;
    // Every rank always, so a series neither appears nor vanishes as keys
    // cool: a rank no key holds reads 0.
    for rank in 1..=HOT_RANKS {
        let checks = top.get(rank - 1).map_or(0, |k| k.checks);
        let rank = rank.to_string();
        ConstGauge::new(checks).encode(m.encode_family(&[("rank", rank.as_str())])?)?;
    }
    counter(
        "weir_leases_total",
        "Leases of hot keys: granted here as owner, renewals asked here as gateway.",
    )
    .labeled(
        enc,
        "kind",
        &[("granted", s.leases_granted), ("renewal", s.lease_renewals)],
    )?;
    counter(
        "weir_lease_units_total",
        "Units of budget leased: granted here as owner, given back unused here as gateway.",
    )
    .labeled(
        enc,
        "kind",
        &[
            ("granted", s.lease_units_granted),
            ("returned", s.lease_units_returned),
        ],
    )?;
    counter(
        "weir_local_decisions_total",
        "Limits decided here with no call: from a lease (lease), or against L/N for a \
         hot = \"local\" rule (tier).",
    )
    .labeled(
        enc,
        "how",
        &[("lease", s.lease_decisions), ("tier", s.tier_decisions)],
    )?;
    counter(
        "weir_fallback_capped_total",
        "Admissions without an owner refused because the node-wide --fallback-cap was spent.",
    )
    .one(enc, s.fallback_capped)?;
    let forwarded = cluster.forwarded_by_rule();
    let forwarded: Vec<(&str, u64)> = forwarded.iter().map(|(r, n)| (&**r, *n)).collect();
    counter(
        "weir_forwarded_ops_total",
        "Counter ops this node sent to other nodes, by rule.",
    )
    .labeled(enc, "rule", &forwarded)
}

/// Hottest keys exported as metrics.
const HOT_RANKS: usize = 5;

/// How checks were decided when an owner did not answer, and what was
/// reconciled and copied afterwards (the owner strategy's accuracy).
fn encode_owner_path(
    enc: &mut DescriptorEncoder,
    cluster: &Cluster,
    s: &weir_cluster::ClusterStats,
) -> fmt::Result {
    counter(
        "weir_decisions_without_owner_total",
        "Limits decided without an answer from their owner, by how: slow (refused for now, \
         owner alive), replica (a copy stood in), fallback (decided here).",
    )
    .labeled(
        enc,
        "how",
        &[
            ("slow", s.slow_decisions),
            ("replica", s.replica_decisions),
            ("fallback", s.fallback_decisions),
        ],
    )?;
    counter(
        "weir_reconciled_total",
        "Late owner admissions refunded; checks that reached this owner after their \
         gateway gave up, answered without counting (expired); admissions decided \
         without the owner: owed, charged to it, or dropped; a dead owner's recent \
         admissions reported by this gateway, and added here to a copy that lacked them.",
    )
    .labeled(
        enc,
        "kind",
        &[
            ("late_refund", s.late_refunds),
            ("expired", s.expired_ops),
            ("charge_owed", s.charges_owed),
            ("charge_paid", s.charges_paid),
            ("charge_dropped", s.charges_dropped),
            ("dead_owner_reported", s.admissions_reported),
            ("dead_owner_recovered", s.admissions_recovered),
        ],
    )?;
    counter(
        "weir_replicated_total",
        "Counter states copied to their replica holders.",
    )
    .one(enc, s.replicated)?;
    gauge(
        "weir_replication_pending",
        "Changes to counters owned here not yet copied to their holder.",
    )
    .one(enc, s.replication_pending)?;
    let timings = [
        (
            "weir_replication_lag_seconds",
            "How long a change waited to be copied to its holder (what a crash can lose).",
            s.replication_lag,
        ),
        (
            "weir_forward_queue_seconds",
            "Time a forwarded op waited in this gateway's queue.",
            s.queue_wait,
        ),
        (
            "weir_forward_call_seconds",
            "Time from sending a forwarded op to its owner's answer.",
            s.call_time,
        ),
    ];
    for (name, help, t) in timings {
        let m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
        super::encode_latency(m, &LATENCY_BOUNDS_NS, &t.buckets, t.sum)?;
    }
    let breakers: Vec<(String, u64)> = cluster
        .members_status()
        .into_iter()
        .map(|m| (m.id, u64::from(m.breaker != "closed")))
        .collect();
    let breakers: Vec<(&str, u64)> = breakers.iter().map(|(id, o)| (id.as_str(), *o)).collect();
    gauge(
        "weir_breaker_open",
        "1 while this node's breaker for the member is open (or probing): its keys are \
         decided by their copy or the fallback.",
    )
    .labeled(enc, "member", &breakers)
}
