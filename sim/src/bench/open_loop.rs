//! Open loop: calls sent at a fixed rate whatever the node does, each timed from when it was due, so a stalled node cannot hide its queue.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::conn::Conn;
use super::keys::{worker_rng, Keys};
use super::machine::CpuSample;
use super::measure::{histogram, nanos, Measured, Totals};

/// A pacer thread hands out send times at a fixed interval, round-robin
/// over the workers. Calls due during the warm-up are sent but not
/// recorded; none is due after warm-up plus `dur`.
pub async fn open_loop(
    conns: Vec<Conn>,
    keys: Arc<Keys>,
    rate: f64,
    warmup: Duration,
    dur: Duration,
    node_pid: Option<u32>,
) -> Measured {
    let workers = conns.len();
    let mut senders = Vec::with_capacity(workers);
    let mut handles = Vec::with_capacity(workers);
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + warmup;
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
        senders.push(tx);
        let keys = keys.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = worker_rng(7, i);
            let mut totals = Totals::default();
            let mut due_hist = histogram();
            while let Some(due) = rx.recv().await {
                let t0 = Instant::now();
                let t = conn.call(&keys, &mut rng).await;
                let end = Instant::now();
                if due >= measure_from {
                    totals.record(end - t0, t);
                    due_hist.record(nanos(end - due)).ok();
                }
            }
            (totals, due_hist)
        }));
    }
    let interval = Duration::from_secs_f64(1.0 / rate);
    let end = measure_from + dur;
    // When measuring began and the CPU times then, set by the pacer as it
    // passes the end of the warm-up.
    let mark: Arc<Mutex<Option<(Instant, CpuSample)>>> = Arc::default();
    let cell = mark.clone();
    let pacer = std::thread::spawn(move || {
        let mut k: u64 = 0;
        let mut marked = false;
        loop {
            let due = start + interval.mul_f64(k as f64);
            if due >= end {
                break;
            }
            let now = Instant::now();
            if !marked && now >= measure_from {
                marked = true;
                *cell.lock().unwrap() = Some((now, CpuSample::take(node_pid)));
            }
            if due > now {
                std::thread::sleep(due - now);
                continue;
            }
            let _ = senders[(k % workers as u64) as usize].send(due);
            k += 1;
        }
    });
    tokio::task::spawn_blocking(move || pacer.join().expect("pacer"))
        .await
        .expect("pacer");
    let mut totals = Totals::default();
    let mut from_due = histogram();
    for h in handles {
        let (t, d) = h.await.expect("worker");
        totals.merge(t);
        from_due.add(d).expect("same bounds");
    }
    let (elapsed, cpu0) = match *mark.lock().unwrap() {
        Some((t0, cpu0)) => (t0.elapsed(), cpu0),
        // Never marked: no call fell due after the warm-up (the interval is
        // longer than `dur`), and the CPU times count from zero.
        None => (dur, CpuSample::default()),
    };
    Measured {
        totals,
        elapsed,
        from_due: Some(from_due),
        cpu: cpu0.until(CpuSample::take(node_pid)),
    }
}
