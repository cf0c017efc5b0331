//! One batcher per owner: concurrent counter ops to the same owner ride one `Peer/Decide` call.
//!
//! The task takes the first queued op, drains whatever else is already
//! queued (up to `max_items`), and sends them as one call. With the default
//! `linger` of zero nothing waits to be batched, so a lone request pays no
//! batching delay; under load ops pile up while earlier calls are in flight
//! and the batches grow by themselves. `max_in_flight` bounds the calls in
//! flight per owner, which is what lets the queue form.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use prost::Message;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::AbortHandle;
use weir_proto::weir::v1::{CounterOp, DecideRequest, OpResult};

use super::peers::PeerFailure;
use super::status::bump;
use super::Net;

/// Batching knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Most ops in one Decide call; 1 turns batching off.
    pub max_items: usize,
    /// How long the first op of a batch waits for company. Zero: only what
    /// is already queued goes along.
    pub linger: Duration,
    /// Decide calls in flight per owner at once.
    pub max_in_flight: usize,
    /// Ops queued per owner before new ones are refused (and decided by the
    /// owner-failure policy): a stalled owner must not grow memory.
    pub queue: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_items: 256,
            linger: Duration::ZERO,
            max_in_flight: 4,
            queue: 16_384,
        }
    }
}

impl BatchConfig {
    /// One op per call with up to `max_in_flight` calls at once: the
    /// no-batching baseline the benchmark compares against.
    pub fn unbatched(max_in_flight: usize) -> Self {
        BatchConfig {
            max_items: 1,
            max_in_flight,
            ..BatchConfig::default()
        }
    }
}

pub(crate) type Reply = Result<OpResult, PeerFailure>;

struct Pending {
    op: CounterOp,
    /// None for fire-and-forget ops (refunds), which are sent even when
    /// nobody waits for the answer.
    reply: Option<oneshot::Sender<Reply>>,
}

impl Pending {
    /// False when the caller has given up (its deadline passed): sending
    /// the op would only consume budget nobody uses.
    fn wanted(&self) -> bool {
        self.reply.as_ref().is_none_or(|r| !r.is_closed())
    }
}

struct Handle {
    addr: SocketAddr,
    tx: mpsc::Sender<Pending>,
    task: AbortHandle,
}

pub(crate) struct Batchers {
    map: DashMap<String, Handle>,
    net: Arc<Net>,
    config: BatchConfig,
}

impl Batchers {
    pub fn new(net: Arc<Net>, mut config: BatchConfig) -> Self {
        config.max_items = config.max_items.max(1);
        config.max_in_flight = config.max_in_flight.max(1);
        config.queue = config.queue.max(1);
        Batchers {
            map: DashMap::new(),
            net,
            config,
        }
    }

    fn sender(&self, id: &str, addr: SocketAddr) -> mpsc::Sender<Pending> {
        let usable = |h: &Handle| h.addr == addr && !h.tx.is_closed();
        if let Some(h) = self.map.get(id) {
            if usable(&h) {
                return h.tx.clone();
            }
        }
        // Re-checked under the shard's write lock: two callers racing to
        // create the batcher must not each start one, or the loser's ops
        // would go to a task that is aborted.
        let mut entry = self
            .map
            .entry(id.to_string())
            .or_insert_with(|| self.spawn(id, addr));
        if !usable(&entry) {
            entry.task.abort();
            *entry = self.spawn(id, addr);
        }
        entry.tx.clone()
    }

    fn spawn(&self, id: &str, addr: SocketAddr) -> Handle {
        let (tx, rx) = mpsc::channel(self.config.queue);
        let task = tokio::spawn(run(id.to_string(), addr, rx, self.net.clone(), self.config));
        Handle {
            addr,
            tx,
            task: task.abort_handle(),
        }
    }

    /// Queues `op` for `id`; the receiver yields the owner's answer.
    pub fn submit(
        &self,
        id: &str,
        addr: SocketAddr,
        op: CounterOp,
    ) -> Result<oneshot::Receiver<Reply>, PeerFailure> {
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            op,
            reply: Some(reply),
        };
        match self.sender(id, addr).try_send(pending) {
            Ok(()) => Ok(rx),
            Err(_) => Err(PeerFailure::Overloaded),
        }
    }

    /// Queues `op` with nobody waiting for the answer (a refund).
    pub fn send_and_forget(&self, id: &str, addr: SocketAddr, op: CounterOp) {
        let pending = Pending { op, reply: None };
        if self.sender(id, addr).try_send(pending).is_err() {
            tracing::debug!(owner = id, "refund dropped: owner queue full");
        }
    }

    /// Stops the batchers of nodes `keep` rejects.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.map.retain(|id, h| {
            let k = keep(id);
            if !k {
                h.task.abort();
            }
            k
        });
    }

    pub fn clear(&self) {
        self.retain(|_| false);
    }
}

async fn run(
    id: String,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<Pending>,
    net: Arc<Net>,
    config: BatchConfig,
) {
    let permits = Arc::new(Semaphore::new(config.max_in_flight));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut batch = Vec::with_capacity(config.max_items.min(64));
        if first.wanted() {
            batch.push(first);
        }
        if !config.linger.is_zero() {
            let until = tokio::time::Instant::now() + config.linger;
            while batch.len() < config.max_items {
                tokio::select! {
                    biased;
                    next = rx.recv() => match next {
                        Some(p) if p.wanted() => batch.push(p),
                        Some(_) => {}
                        None => break,
                    },
                    _ = tokio::time::sleep_until(until) => break,
                }
            }
        }
        while batch.len() < config.max_items {
            match rx.try_recv() {
                Ok(p) if p.wanted() => batch.push(p),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let net = net.clone();
        let id = id.clone();
        tokio::spawn(async move {
            send(&net, &id, addr, batch).await;
            drop(permit);
        });
    }
}

async fn send(net: &Net, id: &str, addr: SocketAddr, batch: Vec<Pending>) {
    let n = batch.len();
    let (ops, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.op, p.reply)).unzip();
    bump(&net.stats.peer_calls, 1);
    bump(&net.stats.peer_ops, n as u64);
    let mine = net.limiter.rules().version();
    let req = DecideRequest {
        ops,
        rules_version: mine,
        from_node: net.me.clone(),
    };
    bump(&net.stats.peer_bytes, req.encoded_len() as u64);
    let outcome = match net.peers.decide(id, addr, req, net.deadline).await {
        Ok(resp) if resp.results.len() == n => {
            bump(&net.stats.peer_bytes, resp.encoded_len() as u64);
            if resp.rules_version > mine {
                net.hint_rules(id, addr, resp.rules_version);
            }
            Ok(resp.results)
        }
        Ok(resp) => Err(PeerFailure::Refused(format!(
            "{} results for {n} ops",
            resp.results.len()
        ))),
        Err(f) => Err(f),
    };
    match outcome {
        Ok(results) => {
            for (result, reply) in results.into_iter().zip(replies) {
                if let Some(reply) = reply {
                    let _ = reply.send(Ok(result));
                }
            }
        }
        Err(failure) => {
            bump(&net.stats.peer_failures, 1);
            tracing::debug!(owner = id, %failure, ops = n, "Decide call failed");
            for reply in replies.into_iter().flatten() {
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}
