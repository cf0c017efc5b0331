//! A model of an owner-strategy cluster's throughput past one machine, from measured per-check costs (docs/performance.md, "Past one machine").
//!
//! Clients spread their checks evenly over N nodes. A node pays the edge
//! (HTTP and a local decision) for every check it receives; for each of
//! the (N-1)/N it does not own it pays the gateway's side of a forward,
//! and the owner pays the owner's side; an admitted check's counter is
//! copied to its holder. A forward costs a part per Decide call and a part
//! per op, and concurrent ops to one owner share a call: with `in_flight`
//! calls allowed per owner and calls taking `rtt`, a gateway sending `q`
//! ops/s to one owner fills batches of about q x rtt / in_flight (at least
//! 1, at most the batch limit). Throughput is the rate at which the busiest
//! node's CPU reaches its cores.

use std::path::Path;

use plotters::prelude::*;

use crate::error::SimError;

/// Measured costs, in seconds of one core, and the cluster's settings.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    pub cores: f64,
    /// The edge and a local decision, per check received.
    pub edge: f64,
    pub gateway_call: f64,
    pub gateway_op: f64,
    pub owner_call: f64,
    pub owner_op: f64,
    /// The second copy, per admitted check on keys spread wide (copies of
    /// one hot key coalesce, so a whale's are left out).
    pub copy: f64,
    /// Decide call time under load.
    pub rtt: f64,
    pub in_flight: f64,
    pub max_batch: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Keys {
    Uniform,
    /// One key takes this share of all checks; the rest spread wide.
    Whale(f64),
}

/// Cores used by the ops of one gateway-owner pair at `q` ops/s, on the
/// gateway and on the owner.
fn pair(i: &Inputs, q: f64, batching: bool) -> (f64, f64) {
    if q <= 0.0 {
        return (0.0, 0.0);
    }
    let batch = if batching {
        (q * i.rtt / i.in_flight).clamp(1.0, i.max_batch)
    } else {
        1.0
    };
    let calls = q / batch;
    (
        q * i.gateway_op + calls * i.gateway_call,
        q * i.owner_op + calls * i.owner_call,
    )
}

/// Cores the busiest node uses at `rate` checks/s over `n` nodes (node 0
/// owns the whale, when there is one), and the mean over all nodes.
pub fn load(i: &Inputs, n: usize, keys: Keys, batching: bool, rate: f64) -> (f64, f64) {
    let nf = n as f64;
    let w = match keys {
        Keys::Uniform => 0.0,
        Keys::Whale(w) => w,
    };
    // Spread keys: each node receives rate/n and owns 1/n of them.
    let spread = (1.0 - w) * rate;
    let q = spread / (nf * nf); // ops/s from one gateway to one owner
    let (gw, own) = pair(i, q, batching);
    let base = rate / nf * i.edge + spread / nf * i.copy;
    let others = (nf - 1.0) * (gw + own);
    // The whale: every node receives w x rate / n of it; the others forward theirs to node 0.
    let qw = w * rate / nf;
    let (gw_w, own_w) = pair(i, q + qw, batching);
    let whale_owner = base + (nf - 1.0) * (gw + own_w);
    let others_node = base + (nf - 2.0) * (gw + own) + gw_w + own;
    let busiest = if n == 1 {
        rate * i.edge
    } else if w > 0.0 {
        whale_owner.max(others_node)
    } else {
        base + others
    };
    let total = if n == 1 {
        busiest
    } else if w > 0.0 {
        whale_owner + (nf - 1.0) * others_node
    } else {
        nf * (base + others)
    };
    (busiest, total / nf)
}

/// The checks/s at which the busiest node's CPU reaches its cores.
pub fn throughput(i: &Inputs, n: usize, keys: Keys, batching: bool) -> f64 {
    let (mut lo, mut hi) = (0.0, 1e12);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if load(i, n, keys, batching, mid).0 < i.cores {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

pub const SIZES: [usize; 3] = [3, 10, 50];

/// One row per (keys, batching): predicted checks/s and the busiest node's
/// load over the mean, at N = 3, 10 and 50.
pub fn table(i: &Inputs, whale: f64) -> String {
    let mut out = String::from(
        "| keys | batching | N = 3 | N = 10 | N = 50 | busiest / mean at N = 50 |\n|---|---|---:|---:|---:|---:|\n",
    );
    for keys in [Keys::Uniform, Keys::Whale(whale)] {
        for batching in [true, false] {
            let cells: Vec<String> = SIZES
                .iter()
                .map(|&n| format!("{:.0}", throughput(i, n, keys, batching)))
                .collect();
            let t = throughput(i, 50, keys, batching);
            let (busiest, mean) = load(i, 50, keys, batching, t);
            let name = match keys {
                Keys::Uniform => "uniform".to_string(),
                Keys::Whale(w) => format!("whale ({:.0}% on one key)", w * 100.0),
            };
            out.push_str(&format!(
                "| {name} | {} | {} | {:.2} |\n",
                if batching { "on" } else { "off" },
                cells.join(" | "),
                busiest / mean
            ));
        }
    }
    out
}

/// Predicted checks/s against N (1 to 50), one line per case, as SVG.
pub fn plot(i: &Inputs, whale: f64, path: &Path) -> Result<(), SimError> {
    let draw = |e: String| SimError::Usage(format!("drawing {}: {e}", path.display()));
    let cases = [
        (Keys::Uniform, true, "uniform keys, batching on", BLUE),
        (Keys::Uniform, false, "uniform keys, batching off", CYAN),
        (Keys::Whale(whale), true, "whale key, batching on", RED),
        (
            Keys::Whale(whale),
            false,
            "whale key, batching off",
            MAGENTA,
        ),
    ];
    let series: Vec<Vec<(f64, f64)>> = cases
        .iter()
        .map(|(k, b, _, _)| {
            (1..=50)
                .map(|n| (n as f64, throughput(i, n, *k, *b) / 1e3))
                .collect()
        })
        .collect();
    let top = series.iter().flatten().map(|p| p.1).fold(0.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "weir, owner strategy: predicted checks/s against cluster size",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(1f64..50f64, 0f64..top)
        .map_err(|e| draw(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("nodes (N)")
        .y_desc("thousand checks/s")
        .draw()
        .map_err(|e| draw(e.to_string()))?;
    for ((_, _, label, colour), points) in cases.iter().zip(series) {
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(|e| draw(e.to_string()))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()
        .map_err(|e| draw(e.to_string()))?;
    root.present().map_err(|e| draw(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            cores: 2.0,
            edge: 20e-6,
            gateway_call: 60e-6,
            gateway_op: 2e-6,
            owner_call: 50e-6,
            owner_op: 2e-6,
            copy: 5e-6,
            rtt: 500e-6,
            in_flight: 4.0,
            max_batch: 256.0,
        }
    }

    #[test]
    fn one_node_is_its_edge_alone() {
        let i = inputs();
        let t = throughput(&i, 1, Keys::Uniform, true);
        assert!((t - i.cores / i.edge).abs() / t < 1e-6, "{t}");
    }

    #[test]
    fn spread_keys_scale_with_the_nodes_and_a_whale_does_not() {
        let i = inputs();
        let u = |n| throughput(&i, n, Keys::Uniform, true);
        assert!(u(10) > 2.5 * u(3) && u(50) > 4.0 * u(10));
        let w = |n| throughput(&i, n, Keys::Whale(0.3), true);
        assert!(w(50) < 1.5 * w(10), "the whale's owner caps the cluster");
        // Without batching every forward pays a whole call, so never faster.
        for n in SIZES {
            assert!(throughput(&i, n, Keys::Uniform, false) <= u(n) * 1.000001);
        }
    }

    #[test]
    fn at_the_predicted_rate_the_busiest_node_is_full() {
        let i = inputs();
        let t = throughput(&i, 10, Keys::Whale(0.3), true);
        let (busiest, mean) = load(&i, 10, Keys::Whale(0.3), true, t);
        assert!((busiest - i.cores).abs() < 1e-6);
        assert!(busiest > mean);
    }
}
