//! The load generator: sends a plan's checks at their planned times, bounded in concurrency, and records every verdict.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use weir_core::{Clock, SystemClock};

use crate::target::{Conn, Outcome};
use crate::workloads::{Plan, Retry};

/// One check as sent and answered.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Record {
    /// Index of the planned request this answers; a retry shares it.
    pub planned: u32,
    /// 0 for the first try, 1 for the retry.
    pub attempt: u8,
    /// The node it actually went to (a dead node's share is rerouted).
    pub node: u16,
    pub key: u32,
    pub rule: u8,
    /// Unix nanoseconds when it left, on the same clock the nodes read.
    pub sent_ns: u64,
    pub latency_ns: u64,
    pub outcome: Outcome,
}

#[cfg(test)]
impl Record {
    /// The first try of planned request 0 (key 0, rule 0, node 0), sent at
    /// `sent_ns` and allowed: a test sets the fields it is about.
    pub(crate) fn sent_at(sent_ns: u64) -> Record {
        Record {
            planned: 0,
            attempt: 0,
            node: 0,
            key: 0,
            rule: 0,
            sent_ns,
            latency_ns: 0,
            outcome: Outcome::Allowed,
        }
    }
}

/// Which nodes take traffic. A fault marks its victim down, as a load
/// balancer that health-checks would; its share goes to the next live node.
#[derive(Debug)]
pub struct Live(Vec<AtomicBool>);

impl Live {
    pub fn all(n: usize) -> Self {
        Live((0..n).map(|_| AtomicBool::new(true)).collect())
    }

    pub fn set(&self, node: usize, up: bool) {
        self.0[node].store(up, Ordering::SeqCst);
    }

    pub fn is_up(&self, node: usize) -> bool {
        self.0[node].load(Ordering::SeqCst)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The planned node if it is up, else the next one up.
    pub fn route(&self, planned: usize) -> usize {
        let n = self.0.len();
        (0..n)
            .map(|i| (planned + i) % n)
            .find(|&i| self.is_up(i))
            .unwrap_or(planned % n)
    }
}

/// How a plan is driven.
#[derive(Clone)]
pub struct Driver {
    pub conns: Arc<Vec<Conn>>,
    pub live: Arc<Live>,
    /// Checks in flight at once.
    pub concurrency: usize,
    /// Seeds the jitter draws, so a retry storm is reproducible too.
    pub seed: u64,
    pub clock: Arc<SystemClock>,
}

/// Generator `i` of the streams a run seeded with `seed` draws from: each
/// stream differs from the others and is reproducible from the pair.
pub fn stream_rng<R: SeedableRng>(seed: u64, i: u64) -> R {
    R::seed_from_u64(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// When a plan starts: now plus a short lead, moved later if the plan asks
/// for a window boundary at a given offset.
pub fn start_time(plan: &Plan, clock: &SystemClock) -> (Instant, u64) {
    const LEAD: Duration = Duration::from_millis(200);
    let now_tokio = Instant::now();
    let now_unix = clock.now();
    let earliest = now_unix + LEAD.as_nanos() as u64;
    let start_unix = match plan.align {
        None => earliest,
        Some(a) => {
            let w = a.window.as_nanos() as u64;
            let at = a.boundary_at.as_nanos() as u64;
            (earliest + at).div_ceil(w) * w - at
        }
    };
    (
        now_tokio + Duration::from_nanos(start_unix - now_unix),
        start_unix,
    )
}

impl Driver {
    /// Sends every planned check from `start` (see [`start_time`]) and
    /// returns the records sorted by send time.
    pub async fn drive(&self, plan: &Plan, start: Instant, progress: &ProgressBar) -> Vec<Record> {
        let plan = Arc::new(plan.clone());
        let permits = Arc::new(Semaphore::new(self.concurrency.max(1)));
        let records = Arc::new(Mutex::new(Vec::with_capacity(plan.requests.len() * 2)));
        let mut tasks = JoinSet::new();
        for (i, p) in plan.requests.iter().enumerate() {
            tokio::time::sleep_until(start + p.at).await;
            let permit = permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let this = self.clone();
            let plan = plan.clone();
            let records = records.clone();
            let permits = permits.clone();
            let progress = progress.clone();
            tasks.spawn(async move {
                let first = this.send(&plan, i, 0).await;
                records.lock().expect("no panics while held").push(first);
                drop(permit);
                progress.inc(1);
                if let Some(wait) = this.retry_wait(&plan, i, first.outcome) {
                    tokio::time::sleep(wait).await;
                    let _permit = permits.acquire_owned().await.expect("never closed");
                    let retry = this.send(&plan, i, 1).await;
                    records.lock().expect("no panics while held").push(retry);
                }
            });
            // Reap finished tasks as we go so the set stays small.
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        let mut records = std::mem::take(&mut *records.lock().expect("no panics while held"));
        records.sort_by_key(|r| (r.sent_ns, r.planned, r.attempt));
        records
    }

    async fn send(&self, plan: &Plan, i: usize, attempt: u8) -> Record {
        let p = plan.requests[i];
        let node = self.live.route(p.node);
        let key = &plan.keys[p.key as usize];
        let route = &plan.rules[p.rule as usize].route;
        let sent_ns = self.clock.now();
        let outcome = self.conns[node].check(key, route).await;
        let latency_ns = self.clock.now().saturating_sub(sent_ns);
        Record {
            planned: i as u32,
            attempt,
            node: node as u16,
            key: p.key,
            rule: p.rule,
            sent_ns,
            latency_ns,
            outcome,
        }
    }

    fn retry_wait(&self, plan: &Plan, i: usize, outcome: Outcome) -> Option<Duration> {
        let Outcome::Denied { retry_after_ms } = outcome else {
            return None;
        };
        let retry_after = Duration::from_millis(retry_after_ms);
        match plan.retry {
            Retry::Never => None,
            Retry::Literal => Some(retry_after),
            Retry::FullJitter => {
                let mut rng: StdRng = stream_rng(self.seed, i as u64);
                Some(weir_client::retry::honor_retry_after(retry_after, &mut rng))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{Align, Workload};

    #[test]
    fn aligned_start_puts_the_boundary_on_a_window_edge() {
        let clock = SystemClock::new();
        let mut plan = Plan::new(Workload::Boundary, Vec::new(), Duration::from_secs(1));
        plan.align = Some(Align {
            window: Duration::from_secs(2),
            boundary_at: Duration::from_millis(700),
        });
        let (_, start) = start_time(&plan, &clock);
        assert_eq!((start + 700_000_000) % 2_000_000_000, 0);
        assert!(start >= clock.now());
    }

    #[test]
    fn dead_nodes_share_goes_to_the_next_live_node() {
        let live = Live::all(3);
        live.set(1, false);
        assert_eq!(live.route(1), 2);
        live.set(2, false);
        assert_eq!(live.route(1), 0);
        assert_eq!(live.route(0), 0);
    }
}
