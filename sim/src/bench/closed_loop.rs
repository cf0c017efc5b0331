//! Closed loop: every worker sends its next call as soon as the last one is answered, until the deadline or the shared check budget runs out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::keys::{worker_rng, Keys};
use super::machine::CpuSample;
use super::measure::{Measured, Totals};

/// Runs `conns` for at most `dur` and at most `max_checks` checks (`items`
/// per call) in all, and hands the connections back for the next run.
pub async fn closed_loop(
    conns: Vec<Conn>,
    keys: Arc<Keys>,
    dur: Duration,
    max_checks: u64,
    items: u64,
    node_pid: Option<u32>,
) -> (Vec<Conn>, Measured) {
    let budget = Arc::new(AtomicU64::new(0));
    let cpu0 = CpuSample::take(node_pid);
    let start = Instant::now();
    let deadline = start + dur;
    let mut handles = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let keys = keys.clone();
        let budget = budget.clone();
        handles.push(tokio::spawn(async move {
            // Seeded from the clock so a warm-up and the run after it draw
            // different keys.
            let mut rng = worker_rng(start.elapsed().as_nanos() as u64, i);
            let mut totals = Totals::default();
            while Instant::now() < deadline
                && budget.fetch_add(items, Ordering::Relaxed) < max_checks
            {
                let t0 = Instant::now();
                let t = conn.call(&keys, &mut rng).await;
                totals.record(t0.elapsed(), t);
            }
            (conn, totals)
        }));
    }
    let mut conns = Vec::new();
    let mut totals = Totals::default();
    for h in handles {
        let (c, t) = h.await.expect("worker");
        conns.push(c);
        totals.merge(t);
    }
    let elapsed = start.elapsed();
    let cpu = cpu0.until(CpuSample::take(node_pid));
    (
        conns,
        Measured {
            totals,
            elapsed,
            from_due: None,
            cpu,
        },
    )
}
