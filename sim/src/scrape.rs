//! Traffic between nodes, read from each node's /metrics: every `weir_peer_*` and `weir_gossip_*` counter there is.

use std::collections::BTreeMap;

/// Traffic between nodes over one run, summed over nodes. The data path
/// (forwarded checks, gossip-strategy syncs, handoffs) is what a strategy
/// costs per check; membership (SWIM) chatter is the same for every
/// strategy and kept apart.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeerTraffic {
    /// Data-path messages sent between nodes.
    pub messages: f64,
    /// Data-path bytes, where the nodes count them (0 where they do not).
    pub bytes: f64,
    /// False when no node counts data-path bytes at all (so `bytes` is
    /// unknown, not zero).
    pub bytes_counted: bool,
    pub membership_packets: f64,
    pub membership_bytes: f64,
    /// Every inter-node series read (see `is_peer_series`), name{labels} -> value.
    pub series: BTreeMap<String, f64>,
    /// The numeric `stats` of each node's GET /v1/cluster.
    pub stats: BTreeMap<String, f64>,
}

impl PeerTraffic {
    /// What flowed between two scrapes, node by node: a node absent from
    /// either (killed, or started since) adds nothing, and a counter that
    /// went backwards (a restart) counts from zero.
    pub fn between(before: &NodeTraffic, after: &NodeTraffic) -> PeerTraffic {
        let mut d = PeerTraffic::default();
        for (node, a) in &after.0 {
            let Some(b) = before.0.get(node) else {
                continue;
            };
            let add = |into: &mut BTreeMap<String, f64>,
                       a: &BTreeMap<String, f64>,
                       b: &BTreeMap<String, f64>| {
                for (k, v) in a {
                    let prev = b.get(k).copied().unwrap_or(0.0);
                    let delta = if *v >= prev { v - prev } else { *v };
                    *into.entry(k.clone()).or_default() += delta;
                }
            };
            add(&mut d.series, &a.series, &b.series);
            add(&mut d.stats, &a.stats, &b.stats);
        }
        d.total();
        d
    }

    pub fn stat(&self, name: &str) -> f64 {
        self.stats.get(name).copied().unwrap_or(0.0)
    }

    /// Derives the totals from the series and stats. Where both sources
    /// count the same traffic the larger wins, so nothing is counted twice.
    fn total(&mut self) {
        let m = from_metrics(&self.series);
        let s = from_stats(&self.stats);
        self.messages = m.messages.max(s.messages);
        self.bytes = m.bytes.max(s.bytes);
        // Known only if every kind of message that flowed has a byte
        // counter beside it, in /metrics or in the stats.
        let classes = [
            ("weir_peer_calls_total", "weir_peer_", "peer_calls", "peer_"),
            (
                "weir_sync_messages_total",
                "weir_sync_",
                "sync_messages",
                "sync_",
            ),
            (
                "weir_handoffs_sent_total",
                "weir_handoffs_",
                "handoffs_sent",
                "handoff",
            ),
        ];
        let flowed = |series: &str, stat: &str| {
            self.series.get(series).copied().unwrap_or(0.0) > 0.0 || self.stat(stat) > 0.0
        };
        let has_bytes = |series: &str, stat: &str| {
            self.series
                .keys()
                .any(|k| k.starts_with(series) && k.contains("bytes"))
                || self
                    .stats
                    .keys()
                    .any(|k| k.starts_with(stat) && k.contains("bytes"))
        };
        self.bytes_counted = classes
            .iter()
            .all(|(m, p, sm, sp)| !flowed(m, sm) || has_bytes(p, sp));
        self.membership_packets = m.membership_packets;
        self.membership_bytes = m.membership_bytes;
    }
}

/// Series about traffic between nodes: forwarding (`weir_peer_*`),
/// membership (`weir_gossip_*`), the gossip strategy's syncs
/// (`weir_sync_*`) and counter handoffs (`weir_handoffs_*`).
fn is_peer_series(name: &str) -> bool {
    [
        "weir_peer_",
        "weir_gossip_",
        "weir_sync_",
        "weir_handoffs_",
        "weir_forwarded_ops_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// SWIM's own datagrams: membership, not a strategy's data path.
fn is_membership(name: &str) -> bool {
    name == "weir_gossip_packets_total" || name == "weir_gossip_bytes_total"
}

/// Inbound counters repeat what some other node already counted outbound;
/// counting only the sending side counts each message once.
fn is_inbound(name: &str, labels: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let l = labels.to_ascii_lowercase();
    ["received", "_in_", "_rx_", "_recv", "inbound"]
        .iter()
        .any(|w| n.contains(w))
        || n.ends_with("_in_total")
        || [
            "direction=\"in",
            "direction=\"rx",
            "direction=\"recv",
            "dir=\"in",
        ]
        .iter()
        .any(|w| l.contains(w))
}

/// Totals from /metrics series. Only monotonic `_total` counters count:
/// a histogram's `_count` would double the counter beside it. Items
/// carried inside a message (ops, deltas) and refusals are not messages.
fn from_metrics(series: &BTreeMap<String, f64>) -> PeerTraffic {
    let mut t = PeerTraffic::default();
    for (full, &v) in series {
        let (name, labels) = full.split_once('{').unwrap_or((full, ""));
        if !name.ends_with("_total") || is_inbound(name, labels) {
            continue;
        }
        let bytes = name.contains("bytes");
        match (is_membership(name), bytes) {
            (true, true) => t.membership_bytes += v,
            (true, false) => t.membership_packets += v,
            (false, true) => t.bytes += v,
            (false, false) => {
                let skip = [
                    "error",
                    "fail",
                    "timeout",
                    "drop",
                    "ops",
                    "items",
                    "deltas",
                    "keys",
                    "unauthenticated",
                ];
                if !skip.iter().any(|w| name.contains(w)) {
                    t.messages += v;
                }
            }
        }
    }
    t
}

/// Totals from /v1/cluster stats: Decide calls, syncs and handoffs sent.
fn from_stats(stats: &BTreeMap<String, f64>) -> PeerTraffic {
    let get = |k: &str| stats.get(k).copied().unwrap_or(0.0);
    PeerTraffic {
        messages: get("peer_calls") + get("sync_messages") + get("handoffs_sent"),
        bytes: stats
            .iter()
            .filter(|(k, _)| k.contains("bytes") && !k.contains("received"))
            .map(|(_, v)| v)
            .sum(),
        ..PeerTraffic::default()
    }
}

/// Adds one /metrics page's peer series into `into`.
pub fn parse_into(into: &mut BTreeMap<String, f64>, text: &str) {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let series = series.trim();
        let name = series.split_once('{').map_or(series, |(n, _)| n);
        if !is_peer_series(name) {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            *into.entry(series.to_string()).or_default() += v;
        }
    }
}

fn add_stats(into: &mut BTreeMap<String, f64>, doc: &serde_json::Value) {
    if let Some(m) = doc["stats"].as_object() {
        for (k, v) in m {
            if let Some(n) = v.as_f64() {
                *into.entry(k.clone()).or_default() += n;
            }
        }
    }
}

async fn get_text(client: &reqwest::Client, url: String) -> Option<String> {
    client.get(url).send().await.ok()?.text().await.ok()
}

/// Each node's raw counters at one moment, by base URL.
#[derive(Debug, Clone, Default)]
pub struct NodeTraffic(pub BTreeMap<String, PeerTraffic>);

/// Reads /metrics and /v1/cluster from every node in `bases`
/// (`http://host:port`); a node that does not answer is left out, and a
/// series no node exports counts as 0.
pub async fn scrape(client: &reqwest::Client, bases: &[String]) -> NodeTraffic {
    let mut all = NodeTraffic::default();
    for b in bases {
        let mut t = PeerTraffic::default();
        let mut answered = false;
        if let Some(text) = get_text(client, format!("{b}/metrics")).await {
            parse_into(&mut t.series, &text);
            answered = true;
        }
        if let Some(text) = get_text(client, format!("{b}/v1/cluster")).await {
            if let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) {
                add_stats(&mut t.stats, &doc);
                answered = true;
            }
        }
        if answered {
            all.0.insert(b.clone(), t);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traffic(text: &str, stats: serde_json::Value) -> PeerTraffic {
        let mut t = PeerTraffic::default();
        parse_into(&mut t.series, text);
        add_stats(&mut t.stats, &serde_json::json!({ "stats": stats }));
        t.total();
        t
    }

    #[test]
    fn counts_outbound_data_path_messages_once_and_membership_apart() {
        let text = "\
# TYPE weir_peer_calls_total counter
weir_peer_calls_total 10
weir_peer_ops_total 40
weir_peer_failures_total 3
weir_peer_unauthenticated_total 2
weir_peer_bytes_total{direction=\"out\"} 1000
weir_peer_bytes_total{direction=\"in\"} 990
weir_gossip_packets_total{direction=\"out\"} 5
weir_gossip_packets_total{direction=\"in\"} 5
weir_gossip_bytes_total{direction=\"out\"} 400
weir_gossip_bad_mac_dropped_total 1
weir_peer_call_seconds_count 10
weir_sync_messages_total 4
weir_sync_bytes_total 200
weir_sync_deltas_total 30
weir_handoffs_sent_total 1
weir_handoffs_received_total 1
weir_checks_total{rule=\"x\",verdict=\"allowed\"} 7
";
        let t = traffic(text, serde_json::json!({}));
        assert_eq!(t.messages, 10.0 + 4.0 + 1.0);
        assert_eq!(t.bytes, 1000.0 + 200.0);
        assert_eq!((t.membership_packets, t.membership_bytes), (5.0, 400.0));
        assert_eq!(t.series.len(), 16);
        assert!(!t.bytes_counted, "handoffs flowed and have no byte counter");
        let owner = traffic(
            "weir_peer_calls_total 12\nweir_sync_bytes_total 0\n",
            serde_json::json!({}),
        );
        assert!(
            !owner.bytes_counted,
            "calls without a byte counter: unknown, not zero"
        );
    }

    #[test]
    fn stats_fill_in_what_metrics_lack_without_double_counting() {
        let t = traffic(
            "weir_peer_calls_total 12\n",
            serde_json::json!({"peer_calls": 12, "sync_messages": 3, "sync_bytes": 300, "peer_failures": 1}),
        );
        assert_eq!(t.messages, 15.0);
        assert_eq!(t.bytes, 300.0);
        assert!(
            !t.bytes_counted,
            "peer calls flowed and have no byte counter"
        );
        let gossip = traffic(
            "weir_sync_messages_total 3\nweir_sync_bytes_total 300\n",
            serde_json::json!({}),
        );
        assert!(gossip.bytes_counted);
        let owner = traffic(
            "weir_peer_calls_total 12\n",
            serde_json::json!({"peer_calls": 12}),
        );
        assert!(!owner.bytes_counted, "no byte counter: unknown, not zero");
    }

    #[test]
    fn owner_bytes_are_known_once_decide_and_handoff_count_them() {
        let owner = traffic(
            "weir_peer_calls_total 12\nweir_peer_bytes_total 2400\nweir_handoffs_sent_total 1\nweir_handoffs_bytes_total 90\n",
            serde_json::json!({}),
        );
        assert!(owner.bytes_counted);
        assert_eq!((owner.messages, owner.bytes), (13.0, 2490.0));
    }

    #[test]
    fn missing_series_count_as_zero() {
        let none = traffic("weir_checks_total 3\n", serde_json::json!({}));
        assert_eq!((none.messages, none.bytes), (0.0, 0.0));
        let after = traffic("weir_peer_calls_total 4\n", serde_json::json!({}));
        let at = |t: &PeerTraffic| NodeTraffic([("n1".to_string(), t.clone())].into());
        assert_eq!(PeerTraffic::between(&at(&none), &at(&after)).messages, 4.0);
    }

    #[test]
    fn a_node_gone_between_scrapes_adds_nothing_and_others_still_count() {
        let one = traffic("weir_peer_calls_total 10\n", serde_json::json!({}));
        let two = traffic("weir_peer_calls_total 25\n", serde_json::json!({}));
        let before = NodeTraffic(
            [
                ("n1".to_string(), one.clone()),
                ("n2".to_string(), one.clone()),
            ]
            .into(),
        );
        // n2 was killed; n1 sent 15 more.
        let after = NodeTraffic([("n1".to_string(), two)].into());
        assert_eq!(PeerTraffic::between(&before, &after).messages, 15.0);
    }
}
