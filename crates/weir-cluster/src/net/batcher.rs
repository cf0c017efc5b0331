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
use futures::future::BoxFuture;
use prost::Message;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::AbortHandle;
use weir_core::Limiter;
use weir_proto::weir::v1::{CounterOp, DecideRequest, OpResult};

use crate::config::BatchConfig;
use crate::link::Link;
use crate::owner::peers::{PeerFailure, Peers};
use crate::stats::{bump, Stats};
use crate::topology::membership::NodeIdentity;
use crate::topology::rules_sync::RulesHints;

/// What every batcher task shares: where calls go and what they report.
pub(crate) struct Ctx {
    pub link: Arc<dyn Link>,
    pub me: String,
    /// Read for the rule-set version each call carries.
    pub limiter: Arc<Limiter>,
    pub hints: Arc<RulesHints>,
    pub stats: Arc<Stats>,
    /// Deadline of one Decide call.
    pub deadline: Duration,
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

/// One batcher per owner, started on first use: the production [`Peers`].
pub(crate) struct Batchers {
    map: DashMap<String, Handle>,
    ctx: Arc<Ctx>,
    config: BatchConfig,
}

impl Batchers {
    pub fn new(ctx: Ctx, mut config: BatchConfig) -> Self {
        config.max_items = config.max_items.max(1);
        config.max_in_flight = config.max_in_flight.max(1);
        config.queue = config.queue.max(1);
        Batchers {
            map: DashMap::new(),
            ctx: Arc::new(ctx),
            config,
        }
    }

    fn sender(&self, to: &NodeIdentity) -> mpsc::Sender<Pending> {
        let usable = |h: &Handle| h.addr == to.grpc && !h.tx.is_closed();
        if let Some(h) = self.map.get(&to.id) {
            if usable(&h) {
                return h.tx.clone();
            }
        }
        // Re-checked under the shard's write lock: two callers racing to
        // create the batcher must not each start one, or the loser's ops
        // would go to a task that is aborted.
        let mut entry = self
            .map
            .entry(to.id.clone())
            .or_insert_with(|| self.spawn(to));
        if !usable(&entry) {
            entry.task.abort();
            *entry = self.spawn(to);
        }
        entry.tx.clone()
    }

    fn spawn(&self, to: &NodeIdentity) -> Handle {
        let (tx, rx) = mpsc::channel(self.config.queue);
        let task = tokio::spawn(run(to.clone(), rx, self.ctx.clone(), self.config));
        Handle {
            addr: to.grpc,
            tx,
            task: task.abort_handle(),
        }
    }

    /// Stops every batcher.
    pub fn clear(&self) {
        self.retain(&|_| false);
    }
}

impl Peers for Batchers {
    fn decide(
        &self,
        to: &NodeIdentity,
        op: CounterOp,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<OpResult, PeerFailure>> {
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            op,
            reply: Some(reply),
        };
        let queued = self.sender(to).try_send(pending);
        Box::pin(async move {
            if queued.is_err() {
                return Err(PeerFailure::Overloaded);
            }
            match tokio::time::timeout(deadline, rx).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => Err(PeerFailure::Unreachable("batcher stopped".into())),
                Err(_) => Err(PeerFailure::Timeout(deadline)),
            }
        })
    }

    fn send(&self, to: &NodeIdentity, op: CounterOp) {
        let pending = Pending { op, reply: None };
        if self.sender(to).try_send(pending).is_err() {
            tracing::debug!(owner = %to.id, "refund dropped: owner queue full");
        }
    }

    fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        self.map.retain(|id, h| {
            let k = keep(id);
            if !k {
                h.task.abort();
            }
            k
        });
        self.ctx.link.retain(keep);
    }
}

async fn run(
    to: NodeIdentity,
    mut rx: mpsc::Receiver<Pending>,
    ctx: Arc<Ctx>,
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
        let ctx = ctx.clone();
        let to = to.clone();
        tokio::spawn(async move {
            send(&ctx, &to, batch).await;
            drop(permit);
        });
    }
}

async fn send(ctx: &Ctx, to: &NodeIdentity, batch: Vec<Pending>) {
    let n = batch.len();
    let (ops, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.op, p.reply)).unzip();
    let stats = &ctx.stats;
    bump(&stats.peer_calls, 1);
    bump(&stats.peer_ops, n as u64);
    let mine = ctx.limiter.rules().version();
    let req = DecideRequest {
        ops,
        rules_version: mine,
        from_node: ctx.me.clone(),
    };
    bump(&stats.peer_bytes, req.encoded_len() as u64);
    let outcome = match ctx.link.decide(to, req, ctx.deadline).await {
        Ok(resp) if resp.results.len() == n => {
            bump(&stats.peer_bytes, resp.encoded_len() as u64);
            if resp.rules_version > mine {
                ctx.hints.hint(to, resp.rules_version);
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
            bump(&stats.peer_failures, 1);
            tracing::debug!(owner = %to.id, %failure, ops = n, "Decide call failed");
            for reply in replies.into_iter().flatten() {
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}
