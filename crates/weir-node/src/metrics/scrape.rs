//! Metrics read at scrape time from the limiter and the cluster, which keep their own counters.

use std::fmt::Write;

use weir_cluster::membership::MemberState;
use weir_cluster::Cluster;

use super::OVERRIDE_LABEL;
use crate::state::NodeState;

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn one(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// One metric with a single label taking each of `samples`' values.
fn labeled(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    label: &str,
    samples: &[(&str, u64)],
) {
    header(out, name, kind, help);
    for (v, n) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{v}\"}} {n}");
    }
}

/// Everything `/metrics` shows beyond the node's own check counters.
pub fn render(state: &NodeState) -> String {
    let mut out = String::new();
    let limiter = state.engine.limiter();
    header(
        &mut out,
        "weir_keys",
        "gauge",
        "Counter keys held in memory, by rule.",
    );
    for (rule, n) in limiter.keys_per_rule() {
        let _ = writeln!(out, "weir_keys{{rule=\"{rule}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "weir_keys{{rule=\"{OVERRIDE_LABEL}\"}} {}",
        limiter.adhoc_keys()
    );
    one(
        &mut out,
        "weir_max_keys",
        "gauge",
        "Most keys one rule may hold (--max-keys).",
        state.config.max_keys_per_rule as u64,
    );
    let at_ceiling = limiter.store_counts();
    one(
        &mut out,
        "weir_keys_dropped_at_rest_total",
        "counter",
        "Keys dropped because their state equalled a fresh key's (no answer changes).",
        at_ceiling.dropped_at_rest,
    );
    one(
        &mut out,
        "weir_keys_refused_total",
        "counter",
        "New keys refused (503) because a table was at --max-keys with every key live.",
        at_ceiling.refused_full,
    );
    one(
        &mut out,
        "weir_rules_version",
        "gauge",
        "Version of the rule set in force.",
        state.engine.rules().version(),
    );
    if let Some(cluster) = state.engine.cluster() {
        render_cluster(&mut out, cluster);
    }
    out
}

fn render_cluster(out: &mut String, cluster: &Cluster) {
    let s = cluster.stats();
    let counters: [(&str, &str, u64); 16] = [
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
            "weir_strays_total",
            "Ops decided here for keys another node owns.",
            s.strays,
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
    ];
    let sync: [(&str, &str, u64); 5] = [
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
    ];
    for (name, help, v) in counters.into_iter().chain(sync) {
        one(out, name, "counter", help, v);
    }
    one(
        out,
        "weir_fallback_active",
        "gauge",
        "Owners this node is deciding for on its local fallback now.",
        s.fallback_active,
    );
    labeled(
        out,
        "weir_keys_moved_total",
        "counter",
        "Counters handed to other nodes (out) and taken over from them (in).",
        "direction",
        &[("in", s.keys_moved_in), ("out", s.keys_moved_out)],
    );

    let members = cluster.members_status();
    let count = |st: MemberState| members.iter().filter(|m| m.state == st).count() as u64;
    labeled(
        out,
        "weir_members",
        "gauge",
        "Cluster members as this node sees them, by state.",
        "state",
        &[
            ("alive", count(MemberState::Alive)),
            ("suspect", count(MemberState::Suspect)),
            ("down", count(MemberState::Down)),
        ],
    );

    render_owner_path(out, cluster, &s);

    let g = cluster.gossip_stats();
    labeled(
        out,
        "weir_gossip_packets_total",
        "counter",
        "Gossip datagrams received and sent.",
        "direction",
        &[("in", g.packets_in), ("out", g.packets_out)],
    );
    labeled(
        out,
        "weir_gossip_bytes_total",
        "counter",
        "Gossip bytes received and sent.",
        "direction",
        &[("in", g.bytes_in), ("out", g.bytes_out)],
    );
    one(
        out,
        "weir_gossip_bad_mac_dropped_total",
        "counter",
        "Gossip datagrams dropped for a missing or wrong HMAC tag (all of them on a node \
         with no cluster secret).",
        g.bad_mac_dropped,
    );
    labeled(
        out,
        "weir_gossip_replay_dropped_total",
        "counter",
        "Authentic gossip datagrams dropped as replays: stamped outside the freshness window, \
         or seen before.",
        "reason",
        &[("stale", g.stale_dropped), ("seen", g.replayed_dropped)],
    );
    one(
        out,
        "weir_gossip_invalid_dropped_total",
        "counter",
        "Authentic gossip datagrams that did not parse.",
        g.invalid_dropped,
    );
    one(
        out,
        "weir_gossip_send_errors_total",
        "counter",
        "Gossip datagrams that could not be sent.",
        g.send_errors,
    );
}

/// How checks were decided when an owner did not answer, and what was
/// reconciled and copied afterwards (the owner strategy's accuracy).
fn render_owner_path(out: &mut String, cluster: &Cluster, s: &weir_cluster::ClusterStats) {
    labeled(
        out,
        "weir_decisions_without_owner_total",
        "counter",
        "Limits decided without an answer from their owner, by how: slow (refused for now, owner alive), replica (a copy stood in), fallback (decided here).",
        "how",
        &[
            ("slow", s.slow_decisions),
            ("replica", s.replica_decisions),
            ("fallback", s.fallback_decisions),
        ],
    );
    labeled(
        out,
        "weir_reconciled_total",
        "counter",
        "Late owner admissions refunded, and admissions decided without the owner: owed, charged to it, or dropped.",
        "kind",
        &[
            ("late_refund", s.late_refunds),
            ("charge_owed", s.charges_owed),
            ("charge_paid", s.charges_paid),
            ("charge_dropped", s.charges_dropped),
        ],
    );
    one(
        out,
        "weir_replicated_total",
        "counter",
        "Counter states copied to their replica holders.",
        s.replicated,
    );
    one(
        out,
        "weir_replication_pending",
        "gauge",
        "Changes to counters owned here not yet copied to their holder.",
        s.replication_pending,
    );
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
        header(out, name, "summary", help);
        for (q, d) in [("0.5", t.p50), ("0.99", t.p99), ("1", t.max)] {
            let _ = writeln!(out, "{name}{{quantile=\"{q}\"}} {}", d.as_secs_f64());
        }
        let _ = writeln!(out, "{name}_count {}", t.count);
    }
    let breakers: Vec<(String, &'static str)> = cluster
        .members_status()
        .into_iter()
        .map(|m| (m.id, m.breaker))
        .collect();
    header(out, "weir_breaker_open", "gauge", "1 while this node's breaker for the member is open (or probing): its keys are decided by their copy or the fallback.");
    for (id, state) in breakers {
        let open = u64::from(state != "closed");
        let _ = writeln!(out, "weir_breaker_open{{member=\"{id}\"}} {open}");
    }
}
