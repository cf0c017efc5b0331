//! Traffic between nodes, read from each node's /metrics: every `weir_peer_*` and `weir_gossip_*` counter there is.

use std::collections::BTreeMap;

/// Totals of the inter-node counters, summed over nodes.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeerTraffic {
    /// Messages (calls, packets, syncs) sent between nodes.
    pub messages: f64,
    pub bytes: f64,
    /// Every series read, name{labels} -> value, so a reader can check the sums.
    pub series: BTreeMap<String, f64>,
    /// The numeric `stats` of each node's GET /v1/cluster, summed (peer
    /// calls, fallback decisions, deny-cache hits...).
    pub stats: BTreeMap<String, f64>,
}

impl PeerTraffic {
    /// `after - before`, series by series (a series missing on one side is 0).
    pub fn delta(after: &PeerTraffic, before: &PeerTraffic) -> PeerTraffic {
        let mut series = BTreeMap::new();
        for (k, v) in &after.series {
            let d = v - before.series.get(k).copied().unwrap_or(0.0);
            series.insert(k.clone(), d.max(0.0));
        }
        let mut stats = BTreeMap::new();
        for (k, v) in &after.stats {
            let d = v - before.stats.get(k).copied().unwrap_or(0.0);
            stats.insert(k.clone(), d.max(0.0));
        }
        PeerTraffic {
            messages: (after.messages - before.messages).max(0.0),
            bytes: (after.bytes - before.bytes).max(0.0),
            series,
            stats,
        }
    }

    pub fn stat(&self, name: &str) -> f64 {
        self.stats.get(name).copied().unwrap_or(0.0)
    }
}

/// Messages counted from /v1/cluster stats, for nodes whose /metrics has no
/// peer series: every peer call and every sync sent is one message.
fn messages_from_stats(stats: &BTreeMap<String, f64>) -> f64 {
    stats
        .iter()
        .filter(|(k, _)| {
            k.as_str() == "peer_calls"
                || (k.contains("sync") && (k.ends_with("_sent") || k.ends_with("calls")))
        })
        .map(|(_, v)| v)
        .sum()
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

fn is_peer_series(name: &str) -> bool {
    name.starts_with("weir_peer_") || name.starts_with("weir_gossip_")
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

/// Reads one /metrics page. Only monotonic `_total` counters count:
/// histogram `_count`/`_sum` would double what a counter beside them says.
pub fn parse(text: &str) -> PeerTraffic {
    let mut t = PeerTraffic::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some((s, v)) => (s.trim(), v.trim()),
            None => continue,
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l),
            None => (series, ""),
        };
        if !is_peer_series(name) {
            continue;
        }
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        *t.series.entry(series.to_string()).or_default() += v;
        if !name.ends_with("_total") || is_inbound(name, labels) {
            continue;
        }
        if name.contains("bytes") {
            t.bytes += v;
        } else if ![
            "error", "fail", "timeout", "drop", "ops", "items", "deltas", "keys",
        ]
        .iter()
        .any(|w| name.contains(w))
        {
            // Calls, packets, messages, syncs, batches: one unit per message.
            // Items carried inside a message (ops, deltas) are not messages.
            t.messages += v;
        }
    }
    t
}

async fn get_text(client: &reqwest::Client, url: String) -> Option<String> {
    client.get(url).send().await.ok()?.text().await.ok()
}

/// Sums /metrics and /v1/cluster stats over `bases` (`http://host:port`);
/// a node that does not answer adds nothing.
pub async fn scrape(client: &reqwest::Client, bases: &[String]) -> PeerTraffic {
    let mut total = PeerTraffic::default();
    for b in bases {
        if let Some(text) = get_text(client, format!("{b}/metrics")).await {
            let one = parse(&text);
            total.messages += one.messages;
            total.bytes += one.bytes;
            for (k, v) in one.series {
                *total.series.entry(k).or_default() += v;
            }
        }
        if let Some(text) = get_text(client, format!("{b}/v1/cluster")).await {
            if let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) {
                add_stats(&mut total.stats, &doc);
            }
        }
    }
    if total.series.is_empty() {
        total.messages = messages_from_stats(&total.stats);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outbound_messages_and_bytes_once() {
        let text = "\
# TYPE weir_peer_calls_total counter
weir_peer_calls_total{peer=\"n2\"} 10
weir_peer_bytes_total{direction=\"out\"} 1000
weir_peer_bytes_total{direction=\"in\"} 990
weir_peer_ops_total 40
weir_peer_errors_total 3
weir_gossip_packets_sent_total 5
weir_gossip_packets_received_total 5
weir_peer_call_seconds_count 10
weir_checks_total{rule=\"x\",verdict=\"allowed\"} 7
";
        let t = parse(text);
        assert_eq!(t.messages, 15.0);
        assert_eq!(t.bytes, 1000.0);
        assert_eq!(t.series.len(), 8);
    }

    #[test]
    fn missing_series_count_as_zero() {
        let t = parse("weir_checks_total 3\n");
        assert_eq!((t.messages, t.bytes), (0.0, 0.0));
        let mut stats = BTreeMap::new();
        add_stats(
            &mut stats,
            &serde_json::json!({"stats": {"peer_calls": 12, "peer_failures": 1, "sync_sent": 3}}),
        );
        assert_eq!(messages_from_stats(&stats), 15.0);
        let d = PeerTraffic::delta(&parse("weir_peer_calls_total 4\n"), &t);
        assert_eq!(d.messages, 4.0);
    }
}
