//! Traffic between nodes, read from each node's /metrics: every `weir_peer_*` and `weir_gossip_*` counter there is.

use std::collections::BTreeMap;

/// Totals of the inter-node counters, summed over nodes.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PeerTraffic {
    /// Messages (calls, packets, syncs) sent between nodes.
    pub messages: f64,
    pub bytes: f64,
    /// Every series read, name{labels} -> value, so a reader can check the sums.
    pub series: BTreeMap<String, f64>,
}

impl PeerTraffic {
    /// `after - before`, series by series (a series missing on one side is 0).
    pub fn delta(after: &PeerTraffic, before: &PeerTraffic) -> PeerTraffic {
        let mut series = BTreeMap::new();
        for (k, v) in &after.series {
            let d = v - before.series.get(k).copied().unwrap_or(0.0);
            series.insert(k.clone(), d.max(0.0));
        }
        PeerTraffic {
            messages: (after.messages - before.messages).max(0.0),
            bytes: (after.bytes - before.bytes).max(0.0),
            series,
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

/// Sums /metrics over `bases` (`http://host:port`); a node that does not
/// answer adds nothing.
pub async fn scrape(client: &reqwest::Client, bases: &[String]) -> PeerTraffic {
    let mut total = PeerTraffic::default();
    for b in bases {
        let Ok(res) = client.get(format!("{b}/metrics")).send().await else {
            continue;
        };
        let Ok(text) = res.text().await else {
            continue;
        };
        let one = parse(&text);
        total.messages += one.messages;
        total.bytes += one.bytes;
        for (k, v) in one.series {
            *total.series.entry(k).or_default() += v;
        }
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
        let d = PeerTraffic::delta(&parse("weir_peer_calls_total 4\n"), &t);
        assert_eq!(d.messages, 4.0);
    }
}
