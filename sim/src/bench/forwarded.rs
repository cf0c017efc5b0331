//! The forwarded path under load: a 3-node cluster of `weir serve` processes, HTTP checks sent to one node for keys the other two own, open loop at half the saturating rate (or the share `--forwarded-load` names), beside checks of keys that node owns at the same rate.
//!
//! The saturating rates are found closed-loop, one copy and two; a fresh
//! two-copy cluster then takes the open-loop runs, and the gateway's
//! forwarding histograms (`weir_forward_queue_seconds`,
//! `weir_forward_call_seconds`) are read over the forwarded run alone.
//! Each step's cost:
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
use super::machine::cpu_seconds;
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
/// How long a node may take to drain and leave once told to stop.
const SHUTDOWN: Duration = Duration::from_secs(10);

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

async fn start(
    bin: &Path,
    dir: &Path,
    replicas: usize,
    node_args: &[String],
) -> Result<Cluster, SimError> {
    let mut opts = ClusterOptions::new(
        bin.to_path_buf(),
        NODES,
        "owner",
        rules::write_file(dir, RULES)?,
        dir.to_path_buf(),
    );
    opts.rust_log = Some("warn".into());
    opts.replicas = Some(replicas);
    opts.extra_args = node_args.to_vec();
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

/// A histogram's cumulative bucket counts in an exposition: (`le`, count),
/// `+Inf` last.
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| {
            let (le, count) = l.strip_prefix(&prefix)?.split_once("\"} ")?;
            Some((le.parse().ok()?, count.trim().parse().ok()?))
        })
        .collect()
}

/// The bucket bound (seconds) under which a share `q` of the durations
/// the histogram `name` counted between two expositions fell; the largest
/// finite bound when they fell past it, 0 when it counted none.
fn bucket_quantile(before: &str, after: &str, name: &str, q: f64) -> f64 {
    let start = buckets(before, name);
    let end = buckets(after, name);
    let counted = |i: usize| end[i].1 - start.get(i).map_or(0.0, |b| b.1);
    let Some(total) = end.len().checked_sub(1).map(counted) else {
        return 0.0;
    };
    if total <= 0.0 {
        return 0.0;
    }
    let last_finite = end
        .iter()
        .rev()
        .find(|b| b.0.is_finite())
        .map_or(0.0, |b| b.0);
    (0..end.len())
        .find(|&i| counted(i) >= q * total)
        .map_or(last_finite, |i| end[i].0.min(last_finite))
}

/// What a phase's cost is read from: every node's CPU seconds and node 1's
/// exposition.
struct Reading {
    cpu: Vec<f64>,
    metrics: String,
}

impl Reading {
    async fn take(cluster: &Cluster) -> Result<Reading, SimError> {
        let url = format!("{}/metrics", cluster.http_base(0));
        let text = async { reqwest::get(&url).await?.text().await };
        let metrics = text
            .await
            .map_err(|e| SimError::Usage(format!("scraping {url}: {e}")))?;
        let cpu = (0..cluster.len())
            .map(|i| cpu_seconds(cluster.pid(i)).unwrap_or(0.0))
            .collect();
        Ok(Reading { cpu, metrics })
    }

    fn value(&self, name: &str) -> f64 {
        scraped(&self.metrics, name)
    }
}

/// Per-check costs of one phase of `checks` checks sent to node 1.
#[derive(Debug, Clone, Copy)]
struct Costs {
    /// CPU seconds per check: node 1, and nodes 2 and 3 together.
    gateway: f64,
    owners: f64,
    /// Forwarded ops per Decide call.
    batch: f64,
}

impl Costs {
    fn between(a: &Reading, b: &Reading, checks: f64) -> Costs {
        let used: Vec<f64> = b.cpu.iter().zip(&a.cpu).map(|(x, y)| x - y).collect();
        let delta = |name| b.value(name) - a.value(name);
        Costs {
            gateway: used[0] / checks,
            owners: used[1..].iter().sum::<f64>() / checks,
            batch: delta("weir_peer_ops_total") / delta("weir_peer_calls_total").max(1.0),
        }
    }
}

fn quantiles(h: &Histogram<u64>) -> String {
    let q = |p| us(h.value_at_quantile(p));
    format!(
        "p50 {} us, p99 {} us, p999 {} us",
        q(0.5),
        q(0.99),
        q(0.999)
    )
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

/// One run over `keys` to node 1, with what it cost every node.
async fn phase(
    cluster: &Cluster,
    args: &Args,
    keys: &Arc<Keys>,
    rate: Option<f64>,
) -> Result<(Measured, Costs), SimError> {
    let target = gateway(cluster);
    let warmup = Duration::from_secs_f64(args.warmup);
    let secs = Duration::from_secs_f64(args.secs);
    let (m, before) = match rate {
        None => {
            let conns = connections(args, &target, Workload::Http, 64).await;
            let (conns, _) = closed_loop(conns, keys.clone(), warmup, u64::MAX, 1, None).await;
            let before = Reading::take(cluster).await?;
            let (_, m) = closed_loop(conns, keys.clone(), secs, args.max_checks, 1, None).await;
            (m, before)
        }
        Some(rate) => {
            let workers = args.open_loop_workers;
            let conns = connections(args, &target, Workload::Http, workers).await;
            let before = Reading::take(cluster).await?;
            // The warm-up's checks are counted in the costs too.
            let m = open_loop(conns, keys.clone(), rate, warmup, secs, None).await;
            (m, before)
        }
    };
    let after = Reading::take(cluster).await?;
    let checks = match rate {
        None => m.totals.tally.checks as f64,
        Some(r) => r * (args.warmup + args.secs),
    };
    Ok((m, Costs::between(&before, &after, checks)))
}

/// A cost that is `per_call / batch + per_op`, from two batch sizes.
fn split(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let (ba, ca) = a;
    let (bb, cb) = b;
    let per_call = if (1.0 / ba - 1.0 / bb).abs() > 1e-9 {
        ((ca - cb) / (1.0 / ba - 1.0 / bb)).max(0.0)
    } else {
        0.0
    };
    (per_call, (ca - per_call / ba).max(0.0))
}

/// Measures and prints the forwarded path against the local one, and the
/// per-check costs the cluster model (docs/performance.md) is fed.
pub fn run(args: &Args, bin: &Path, rt: &tokio::runtime::Runtime) -> Result<(), SimError> {
    let dir = std::env::temp_dir().join(format!("weir-bench-fwd-{}", std::process::id()));
    let measured = rt.block_on(async {
        // One copy per counter first: the costs of forwarding alone.
        let mut one = start(bin, &dir, 1, &args.node_args).await?;
        let (local, remote) = split_keys(&one);
        let (local, remote) = (Arc::new(local), Arc::new(remote));
        let (peak, sat) = phase(&one, args, &remote, None).await?;
        let peak_rate = peak.totals.calls as f64 / peak.elapsed.as_secs_f64();
        line("closed loop, 64 callers, forwarded, one copy", &peak);
        let rate = peak_rate / 2.0;
        let (one_half, half) = phase(&one, args, &remote, Some(rate)).await?;
        // What the second copy adds to the latency, set beside the
        // two-copy rows below (this rate is higher than theirs).
        line("open loop at half that, forwarded, one copy", &one_half);
        let (_, here) = phase(&one, args, &local, Some(rate)).await?;
        // Saturated, a node's CPU per check is lower (wake-ups and writes
        // are shared by more requests): the throughput model takes these.
        let (_, here_sat) = phase(&one, args, &local, None).await?;
        one.shut_down(SHUTDOWN).await?;

        // The default, two copies: its own saturating rate and what the
        // copy costs; then the latency figures at a share of that rate
        // (half unless told) on a fresh cluster, read from the gateway's
        // histograms over the forwarded phase alone.
        let mut two = start(bin, &dir, 2, &args.node_args).await?;
        let (peak2, copied) = phase(&two, args, &remote, None).await?;
        two.shut_down(SHUTDOWN).await?;
        line("closed loop, 64 callers, forwarded, two copies", &peak2);
        let rate = peak2.totals.calls as f64 / peak2.elapsed.as_secs_f64() * args.forwarded_load;
        let mut two = start(bin, &dir, 2, &args.node_args).await?;
        let before = Reading::take(&two).await?;
        println!(
            "open loop at {} checks/s ({:.0}% of the two-copy saturating rate) over {} connections to node 1",
            thousands(rate),
            args.forwarded_load * 100.0,
            args.open_loop_workers
        );
        let (fwd, _) = phase(&two, args, &remote, Some(rate)).await?;
        let after_fwd = Reading::take(&two).await?;
        let (near, _) = phase(&two, args, &local, Some(rate)).await?;
        let after_local = Reading::take(&two).await?;
        line("forwarded (keys on nodes 2 and 3)", &fwd);
        line("local (keys on node 1)", &near);
        let q = |name: &str, q: f64| {
            bucket_quantile(&before.metrics, &after_fwd.metrics, name, q) * 1e6
        };
        for (step, name) in [
            ("gateway queueing", "weir_forward_queue_seconds"),
            ("call (send to answer)", "weir_forward_call_seconds"),
        ] {
            println!(
                "{step}: p50 <= {:.0} us, p99 <= {:.0} us (bucket bounds)",
                q(name, 0.5),
                q(name, 0.99),
            );
        }
        let engine = |a: &Reading, b: &Reading| {
            let d = |n| b.value(n) - a.value(n);
            d("weir_decision_seconds_sum") / d("weir_decision_seconds_count").max(1.0) * 1e6
        };
        println!(
            "node 1's time in the engine per check (mean): forwarded {:.1} us, local {:.1} us",
            engine(&before, &after_fwd),
            engine(&after_fwd, &after_local)
        );

        let us = |s: f64| s * 1e6;
        let (gw_call, gw_op) = split(
            (half.batch, half.gateway - here.gateway),
            (sat.batch, sat.gateway - here_sat.gateway),
        );
        let (own_call, own_op) = split((half.batch, half.owners), (sat.batch, sat.owners));
        println!("CPU per check (us), one copy, node 1 / nodes 2+3 / ops per call:");
        for (what, c) in [("local, half load", here), ("local, saturated", here_sat)] {
            println!("  {what:<35} {:.1} / {:.1}", us(c.gateway), us(c.owners));
        }
        for (what, c) in [("forwarded, half load", half), ("forwarded, saturated", sat)] {
            println!(
                "  {what:<35} {:.1} / {:.1} / {:.1}",
                us(c.gateway),
                us(c.owners),
                c.batch
            );
        }
        println!(
            "  forwarded, saturated, two copies    {:.1} / {:.1} / {:.1}",
            us(copied.gateway),
            us(copied.owners),
            copied.batch
        );
        println!(
            "model inputs (us): edge and local decision, saturated, {:.1}; gateway {:.1} per call + {:.1} per op; \
             owner {:.1} per call + {:.1} per op; second copy {:.1} per admitted check",
            us(here_sat.gateway),
            us(gw_call),
            us(gw_op),
            us(own_call),
            us(own_op),
            us(copied.gateway + copied.owners - sat.gateway - sat.owners),
        );
        two.shut_down(SHUTDOWN).await?;
        Ok(())
    });
    // The nodes' logs are kept when a run fails, for what they say.
    if measured.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    measured
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_splits_into_per_call_and_per_op_parts() {
        // 30 per call + 2 per op, seen at batches of 1.5 and 6.
        let cost = |b: f64| 30.0 / b + 2.0;
        let (call, op) = split((1.5, cost(1.5)), (6.0, cost(6.0)));
        assert!((call - 30.0).abs() < 1e-9 && (op - 2.0).abs() < 1e-9);
    }

    #[test]
    fn an_exposition_line_is_read_by_its_full_name() {
        let text = "weir_forward_call_seconds_bucket{le=\"0.0001\"} 3\n\
                    weir_decision_seconds_count 7\n";
        let name = "weir_forward_call_seconds_bucket{le=\"0.0001\"}";
        assert_eq!(scraped(text, name), 3.0);
        assert_eq!(scraped(text, "weir_decision_seconds_count"), 7.0);
        assert_eq!(scraped(text, "weir_decision_seconds_sum"), 0.0);
    }

    fn exposition(counts: [u64; 4]) -> String {
        let les = ["5e-05", "0.0001", "0.001", "+Inf"];
        les.iter()
            .zip(counts)
            .map(|(le, c)| format!("weir_forward_call_seconds_bucket{{le=\"{le}\"}} {c}\n"))
            .collect()
    }

    #[test]
    fn a_quantile_is_read_from_the_buckets_counted_between_two_readings() {
        // Before: 100 fast calls. Between: 10 more under 50 us, 80 under
        // 100 us, 9 under 1 ms and one past it.
        let before = exposition([100, 100, 100, 100]);
        let after = exposition([110, 190, 199, 200]);
        let q = |q| bucket_quantile(&before, &after, "weir_forward_call_seconds", q);
        assert_eq!(q(0.5), 0.0001);
        assert_eq!(q(0.99), 0.001);
        assert_eq!(q(1.0), 0.001, "past the last bound: the last bound");
        assert_eq!(
            bucket_quantile(&before, &before, "weir_forward_call_seconds", 0.5),
            0.0
        );
    }
}
