//! The forwarded path under load: a 3-node cluster of `weir serve` processes, HTTP checks sent to one node for keys the other two own, open loop at half the saturating rate, beside checks of keys that node owns at the same rate.
//!
//! The saturating rate is found closed-loop on a first cluster; a fresh
//! cluster then takes the open-loop runs, so the gateway's forwarding
//! timings (`weir_forward_queue_seconds`, `weir_forward_call_seconds`,
//! quantiles since start) cover the forwarded run alone. Each step's cost:
//! queueing at the gateway and the call (send to answer, the owner's
//! decision and two loopback hops inside) from those; the decision itself
//! from the node's own decision histogram during the local run.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use weir_cluster::membership::NodeIdentity;
use weir_cluster::ring::Ring;

use super::args::{Args, Workload};
use super::closed_loop::closed_loop;
use super::conn::connections;
use super::keys::Keys;
use super::measure::Measured;
use super::open_loop::open_loop;
use super::report::{thousands, us};
use super::target::{Target, RULES};
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::SimError;
use crate::rules;

const NODES: usize = 3;
/// Keys of each kind: enough that no one key is hot.
const KEYS: usize = 10_000;

/// Keys that node 0 owns, and keys the others own, on this member set.
fn split_keys(cluster: &Cluster) -> (Keys, Keys) {
    let members: Vec<NodeIdentity> = cluster
        .nodes
        .iter()
        .map(|n| NodeIdentity::new(n.id.clone(), n.gossip, n.grpc))
        .collect();
    // A key's owner is a function of the member ids alone, so this ring
    // places keys as every node's does.
    let ring = Ring::with_default_vnodes(&members);
    let me = &cluster.nodes[0].id;
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for i in 0.. {
        if local.len() >= KEYS && remote.len() >= KEYS {
            break;
        }
        let key = format!("fwd-{i:07}");
        let mine = ring.owner_id(&key) == Some(me.as_str());
        let side = if mine { &mut local } else { &mut remote };
        if side.len() < KEYS {
            side.push(key);
        }
    }
    (Keys::from_vec(local), Keys::from_vec(remote))
}

async fn start(bin: &Path, dir: &Path) -> Result<Cluster, SimError> {
    let mut opts = ClusterOptions::new(
        bin.to_path_buf(),
        NODES,
        "owner",
        rules::write_file(dir, RULES)?,
        dir.to_path_buf(),
    );
    opts.rust_log = Some("warn".into());
    Cluster::start(opts).await
}

fn gateway(cluster: &Cluster) -> Target {
    Target {
        name: format!("node 1 of {NODES}"),
        http: Some(cluster.nodes[0].http),
        grpc: None,
        pid: cluster.pid(0),
    }
}

/// The value of one exposition line `name` (labels included), 0 if absent.
fn scraped(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn metrics(cluster: &Cluster) -> Result<String, SimError> {
    let url = format!("{}/metrics", cluster.http_base(0));
    let text = async { reqwest::get(&url).await?.text().await };
    text.await
        .map_err(|e| SimError::Usage(format!("scraping {url}: {e}")))
}

fn quantiles(h: &Histogram<u64>) -> String {
    let q = |p| us(h.value_at_quantile(p));
    format!("p50 {} us, p99 {} us, p999 {} us", q(0.5), q(0.99), q(0.999))
}

fn line(what: &str, m: &Measured) {
    let sent = quantiles(&m.totals.latency);
    let due = m.from_due.as_ref().map(quantiles).unwrap_or_default();
    println!(
        "{what}: {} checks/s, {} errors; from sent: {sent}; from due: {due}",
        thousands(m.totals.tally.checks as f64 / m.elapsed.as_secs_f64()),
        m.totals.tally.errors
    );
}

/// Measures and prints the forwarded path against the local one.
pub fn run(args: &Args, bin: &Path, rt: &tokio::runtime::Runtime) -> Result<(), SimError> {
    let dir = std::env::temp_dir().join(format!("weir-bench-fwd-{}", std::process::id()));
    let warmup = Duration::from_secs_f64(args.warmup);
    let secs = Duration::from_secs_f64(args.secs);
    rt.block_on(async {
        let first = start(bin, &dir).await?;
        let (local, remote) = split_keys(&first);
        let (local, remote) = (Arc::new(local), Arc::new(remote));
        let target = gateway(&first);
        let conns = connections(args, &target, Workload::Http, 64).await;
        let (conns, _) = closed_loop(conns, remote.clone(), warmup, u64::MAX, 1, None).await;
        let (_, peak) = closed_loop(conns, remote.clone(), secs, args.max_checks, 1, None).await;
        let peak_rate = peak.totals.calls as f64 / peak.elapsed.as_secs_f64();
        line("closed loop, 64 callers, forwarded", &peak);
        drop(first);

        let cluster = start(bin, &dir).await?;
        let target = gateway(&cluster);
        let rate = peak_rate / 2.0;
        let workers = args.open_loop_workers;
        println!(
            "open loop at {} checks/s (half of {}) over {workers} connections to node 1",
            thousands(rate),
            thousands(peak_rate)
        );
        let conns = connections(args, &target, Workload::Http, workers).await;
        let fwd = open_loop(conns, remote, rate, warmup, secs, target.pid).await;
        let after_fwd = metrics(&cluster).await?;
        let conns = connections(args, &target, Workload::Http, workers).await;
        let here = open_loop(conns, local, rate, warmup, secs, target.pid).await;
        let after_local = metrics(&cluster).await?;
        line("forwarded (keys on nodes 2 and 3)", &fwd);
        line("local (keys on node 1)", &here);

        let q = |text: &str, name: &str, q: &str| {
            scraped(text, &format!("{name}{{quantile=\"{q}\"}}")) * 1e6
        };
        for (step, name) in [
            ("gateway queueing", "weir_forward_queue_seconds"),
            ("call (send to answer)", "weir_forward_call_seconds"),
        ] {
            println!(
                "{step}: p50 <= {:.0} us, p99 <= {:.0} us, max {:.0} us (bucket bounds)",
                q(&after_fwd, name, "0.5"),
                q(&after_fwd, name, "0.99"),
                q(&after_fwd, name, "1")
            );
        }
        let mean = |text: &str| {
            let count = scraped(text, "weir_decision_seconds_count");
            (scraped(text, "weir_decision_seconds_sum"), count)
        };
        let (s0, c0) = mean(&after_fwd);
        let (s1, c1) = mean(&after_local);
        println!(
            "node 1's time in the engine per check: forwarded {:.1} us, local {:.1} us (mean)",
            s0 / c0.max(1.0) * 1e6,
            (s1 - s0) / (c1 - c0).max(1.0) * 1e6
        );
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exposition_line_is_read_by_its_full_name() {
        let text = "weir_forward_call_seconds{quantile=\"0.5\"} 0.0001\n\
                    weir_forward_call_seconds{quantile=\"0.99\"} 0.0025\n\
                    weir_decision_seconds_count 7\n";
        let name = "weir_forward_call_seconds{quantile=\"0.99\"}";
        assert_eq!(scraped(text, name), 0.0025);
        assert_eq!(scraped(text, "weir_decision_seconds_count"), 7.0);
        assert_eq!(scraped(text, "weir_decision_seconds_sum"), 0.0);
    }
}
