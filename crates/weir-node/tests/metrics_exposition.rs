//! `GET /metrics` read by an independent Prometheus text-format parser, and every metric docs/operations.md names (its table, prose and alerts) checked against what a node really exports.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_parse::{LineInfo, Scrape, Value};
use serde_json::json;
use weir_node::{Node, ServeConfig};

const RULES: &str = r#"
[[rule]]
name      = "charges"
route     = "POST /v1/charges"
algorithm = "fixed_window"
limit     = 1
window    = "1h"

[[rule]]
name      = "charges-dark"
route     = "POST /v1/charges"
by        = "ip"
algorithm = "fixed_window"
limit     = 1
window    = "1h"
shadow    = true
"#;

const OPERATIONS: &str = include_str!("../../../docs/operations.md");

/// A node that has allowed, denied, shadow-denied, refused and left
/// unlimited at least one check each, so every family has samples.
async fn exposition() -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let mut config = ServeConfig {
        rules_file: Some(rules),
        ..ServeConfig::ephemeral()
    };
    // In a region, so the region metrics are exported too (the named peer
    // is never called: no rule here is global).
    let mut region = weir_cluster::regions::RegionConfig::new("a");
    region.peers = vec!["b=127.0.0.1:1".into()];
    config.cluster.region = Some(region);
    let node = Node::start(config).await.expect("node starts");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://{}", node.http_addr());
    let charge = json!({"key": "cust_1", "route": "POST /v1/charges", "ip": "192.0.2.1"});
    // The second is denied by `charges`; the third, another client from
    // the same address, is one the shadow rule would have denied.
    for body in [
        charge.clone(),
        charge,
        json!({"key": "cust_2", "route": "POST /v1/charges", "ip": "192.0.2.1"}),
        json!({"key": "cust_1", "route": "GET /other"}),
        json!({"key": "", "route": "POST /v1/charges"}),
    ] {
        http.post(format!("{base}/v1/check"))
            .json(&body)
            .send()
            .await
            .unwrap();
    }
    let res = http.get(format!("{base}/metrics")).send().await.unwrap();
    let content_type = res.headers()["content-type"].to_str().unwrap().to_string();
    let text = res.text().await.unwrap();
    node.shutdown().await;
    (content_type, text)
}

/// A label block of the text format: `name="value"` pairs, values escaped.
fn well_formed_labels(block: &str) -> bool {
    let mut rest = block;
    loop {
        let Some((name, after)) = rest.split_once("=\"") else {
            return false;
        };
        let name_ok = name
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if name.is_empty() || !name_ok {
            return false;
        }
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\' | '"' | 'n')) => {}
                    _ => return false,
                },
                Some((_, '\n')) | None => return false,
                Some((i, '"')) => break i,
                Some(_) => {}
            }
        };
        match &after[end + 1..] {
            "" => return true,
            more => match more.strip_prefix(',') {
                Some(next) => rest = next,
                None => return false,
            },
        }
    }
}

/// The family a sample line belongs to, by the text format's suffixes.
fn family(sample: &str, types: &BTreeMap<String, String>) -> Option<String> {
    if types.contains_key(sample) {
        return Some(sample.to_string());
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|s| {
        let base = sample.strip_suffix(s)?;
        (types.get(base)? == "histogram").then(|| base.to_string())
    })
}

#[tokio::test]
async fn the_exposition_is_strict_prometheus_text_with_typed_families() {
    let (content_type, text) = exposition().await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let mut types = BTreeMap::new();
    let mut helped = BTreeSet::new();
    for line in text.lines() {
        match LineInfo::parse(line) {
            LineInfo::Doc { metric_name, .. } => {
                helped.insert(metric_name.to_string());
            }
            LineInfo::Type { .. } => {
                let mut words = line.split_whitespace().skip(2);
                let (name, kind) = (words.next().unwrap(), words.next().unwrap());
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "{name} typed twice"
                );
            }
            LineInfo::Sample {
                metric_name,
                labels,
                value,
                timestamp,
            } => {
                let family = family(metric_name, &types)
                    .unwrap_or_else(|| panic!("{line:?}: no TYPE line before it"));
                assert!(helped.contains(&family), "{family} has no HELP");
                assert!(value.parse::<f64>().is_ok(), "{line:?}: not a number");
                assert!(timestamp.is_none(), "{line:?}: a node stamps no time");
                if let Some(block) = labels {
                    assert!(well_formed_labels(block), "{line:?}: bad labels");
                }
            }
            LineInfo::Empty => {}
            LineInfo::Ignored => panic!("{line:?} is not the text format"),
        }
    }
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let find = |name: &'static str| scrape.samples.iter().filter(move |s| s.metric == name);
    let checks: Vec<_> = find("weir_checks_total").collect();
    for (rule, verdict) in [("charges", "denied"), ("", "unlimited"), ("", "invalid")] {
        let s = checks
            .iter()
            .find(|s| {
                s.labels.get("rule") == Some(rule) && s.labels.get("verdict") == Some(verdict)
            })
            .unwrap_or_else(|| panic!("no weir_checks_total for {rule}/{verdict}"));
        assert_eq!(s.value, Value::Counter(1.0), "{rule}/{verdict}");
    }
    let allowed = checks
        .iter()
        .find(|s| {
            s.labels.get("rule") == Some("charges") && s.labels.get("verdict") == Some("allowed")
        })
        .expect("allowed charges");
    assert_eq!(allowed.value, Value::Counter(2.0));
    let shadow = find("weir_shadow_would_deny_total").next().unwrap();
    assert_eq!(shadow.labels.get("rule"), Some("charges-dark"));
    assert_eq!(shadow.value, Value::Counter(1.0));
    let Value::Histogram(buckets) = &find("weir_decision_seconds").next().unwrap().value else {
        panic!("weir_decision_seconds is not a histogram");
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    assert_eq!(bounds.first(), Some(&5e-6), "buckets start at 5 us");
    assert_eq!(bounds[bounds.len() - 2], 10.0, "and end at 10 s");
    assert_eq!(bounds.last(), Some(&f64::INFINITY));
    assert!(
        buckets.last().unwrap().count >= 3.0,
        "every decided check is timed"
    );
    // Every latency is a histogram over the same buckets, so they sum
    // across nodes; none is a quantile gauge.
    for name in [
        "weir_forward_queue_seconds",
        "weir_forward_call_seconds",
        "weir_replication_lag_seconds",
    ] {
        let Value::Histogram(b) = &find(name).next().unwrap().value else {
            panic!("{name} is not a histogram");
        };
        let same: Vec<f64> = b.iter().map(|b| b.less_than).collect();
        assert_eq!(same, bounds, "{name}");
    }
    assert!(!text.contains("quantile="), "no quantile series");
    let build = find("weir_build_info").next().expect("weir_build_info");
    assert_eq!(build.value, Value::Gauge(1.0));
    assert_eq!(build.labels.get("version"), Some(env!("CARGO_PKG_VERSION")));
    let commit = build.labels.get("commit").unwrap();
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    let region = find("weir_region_home_unreachable_seconds").next().unwrap();
    assert_eq!(region.labels.get("region"), Some("b"));
    assert_eq!(
        region.value,
        Value::Gauge(0.0),
        "b has not missed three rounds"
    );
    if cfg!(target_os = "linux") {
        for name in ["process_resident_memory_bytes", "process_open_fds"] {
            let v = find(name).next().unwrap_or_else(|| panic!("no {name}"));
            assert!(matches!(v.value, Value::Gauge(g) if g > 0.0), "{name}");
        }
        let cpu = find("process_cpu_seconds_total").next().unwrap();
        assert!(matches!(cpu.value, Value::Counter(c) if c >= 0.0));
    }
    assert!(matches!(
        find("weir_members").next().unwrap().value,
        Value::Gauge(_)
    ));
}

/// Each row of the "What a node exports" table: names and their labels.
fn documented_table() -> Vec<(String, BTreeSet<String>)> {
    let mut rows = Vec::new();
    let lines = OPERATIONS
        .lines()
        .filter(|l| l.starts_with("| `weir_") || l.starts_with("| `process_"));
    for line in lines {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let ticked = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let labels: BTreeSet<String> = ticked(cells[3]).into_iter().collect();
        for name in ticked(cells[1]) {
            rows.push((name, labels.clone()));
        }
    }
    rows
}

/// Every `weir_...` and `process_...` name anywhere in the page: tables,
/// prose and alerts.
fn documented_names() -> BTreeSet<String> {
    OPERATIONS
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("weir_") || w.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn every_metric_operations_md_names_is_exported_with_its_labels() {
    let (_, text) = exposition().await;
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let histograms: BTreeSet<&str> = scrape
        .samples
        .iter()
        .filter(|s| matches!(s.value, Value::Histogram(_)))
        .map(|s| s.metric.as_str())
        .collect();
    let mut exported: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in &scrape.samples {
        // A histogram's `_sum` and `_count` belong to the histogram.
        let part_of_histogram = ["_sum", "_count"].iter().any(|x| {
            s.metric
                .strip_suffix(x)
                .is_some_and(|b| histograms.contains(b))
        });
        if part_of_histogram {
            continue;
        }
        let labels = exported.entry(s.metric.clone()).or_default();
        labels.extend(s.labels.keys().cloned());
    }
    let table = documented_table();
    assert!(table.len() > 30, "the table was read: {table:?}");
    for (name, labels) in &table {
        let got = exported
            .get(name)
            .unwrap_or_else(|| panic!("{name} is documented but not exported"));
        assert_eq!(got, labels, "{name}: labels differ from the table");
    }
    for name in documented_names() {
        let series = name
            .strip_suffix("_bucket")
            .filter(|base| exported.contains_key(*base))
            .unwrap_or(&name);
        assert!(
            exported.contains_key(series),
            "{name} appears in docs/operations.md but is not exported"
        );
    }
    for name in exported.keys() {
        assert!(
            table.iter().any(|(n, _)| n == name),
            "{name} is exported but missing from the table in docs/operations.md"
        );
    }
}
