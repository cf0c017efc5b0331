//! One batcher per owner: concurrent counter ops to the same owner ride one `Peer/Decide` call.
//!
//! The task takes the first queued op, drains whatever else is already
//! queued (up to `max_items`), and sends them as one call. With the default
//! `linger` of zero nothing waits to be batched, so a lone request pays no
//! batching delay; under load ops pile up while earlier calls are in flight
//! and the batches grow by themselves. `max_in_flight` bounds the calls in
//! flight per owner (a semaphore of call slots), which is what lets the
//! queue form.
//!
//! An op that finds its owner idle, no call in flight and nothing queued
//! (with no `linger`), skips the task: its caller sends it as a call of
//! one and polls the answer itself. Nothing could have joined it anyway,
//! and each task hand-off it skips, out and back, can wake a sleeping
//! worker thread at low load. The batcher's own calls are driven by its
//! task, not spawned.
//!
//! A caller's deadline is two clocks, both measured: the time its op waits
//! in this gateway's queue, and the time from sending to the answer. An op
//! still queued when the first runs out is never sent (nothing is consumed
//! at the owner); one that was sent and is not answered in time stays in
//! flight, and its answer is handed to whoever reconciles it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use dashmap::mapref::one::Ref;
use dashmap::DashMap;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use prost::Message;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use weir_core::Limiter;
use weir_proto::weir::v1::{CounterOp, DecideRequest, OpResult};

use crate::config::BatchConfig;
use crate::link::Link;
use crate::owner::peers::{LateAnswer, PeerFailure, Peers, Reply, HEARD_FOR};
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
    /// How long past the longest deadline of the ops it carries one
    /// Decide call may take: answers later than a caller's own deadline
    /// still arrive within it, to be reconciled.
    pub late_window: Duration,
}

type Answer = Result<OpResult, PeerFailure>;

struct Pending {
    op: CounterOp,
    /// None for fire-and-forget ops (refunds, charges), which are sent even
    /// when nobody waits for the answer.
    reply: Option<oneshot::Sender<Answer>>,
    /// Given the instant the op leaves in a call; None for fire-and-forget
    /// ops. Read by the caller only once its deadline has passed, so
    /// leaving wakes nobody.
    sent: Option<oneshot::Sender<Instant>>,
    queued_at: Instant,
    /// How long its caller waits for the answer from the send (zero for
    /// fire-and-forget ops): the call is heard for the late window past it.
    deadline: Duration,
}

impl Pending {
    /// Takes the op into a call leaving `at` unless its caller gave up
    /// while it was queued: the caller hears that it was sent, or the op
    /// stays out, never both (so a caller told "not sent" knows nothing was
    /// consumed).
    fn leave(&mut self, at: Instant) -> bool {
        match self.sent.take() {
            Some(sent) => sent.send(at).is_ok(),
            None => true,
        }
    }
}

struct Handle {
    to: Arc<NodeIdentity>,
    tx: mpsc::Sender<Pending>,
    /// `max_in_flight` call slots, taken by the task's calls and by
    /// callers sending their own.
    slots: Arc<Semaphore>,
    /// Dropped with the handle, which stops the task: the ops still queued
    /// are refused, and the calls in flight are finished, since an op that
    /// was sent may have been consumed and its answer is owed to a caller
    /// or a reconciler.
    _stop: oneshot::Sender<()>,
}

/// One batcher per owner, started on first use: the production [`Peers`].
pub(crate) struct Batchers {
    map: DashMap<String, Handle, weir_core::determinism::HashState>,
    ctx: Arc<Ctx>,
    config: BatchConfig,
}

impl Batchers {
    pub fn new(ctx: Ctx, mut config: BatchConfig) -> Self {
        config.max_items = config.max_items.max(1);
        config.max_in_flight = config.max_in_flight.max(1);
        config.queue = config.queue.max(1);
        Batchers {
            map: DashMap::default(),
            ctx: Arc::new(ctx),
            config,
        }
    }

    /// The owner's batcher, started (or restarted at a new address) as
    /// needed. The guard is the map's: hold it across nothing else.
    fn handle(&self, to: &NodeIdentity) -> Ref<'_, String, Handle> {
        let usable = |h: &Handle| h.to.grpc == to.grpc && !h.tx.is_closed();
        if let Some(h) = self.map.get(&to.id) {
            if usable(&h) {
                return h;
            }
        }
        // Re-checked under the shard's write lock: two callers racing to
        // create the batcher must not each start one, or the loser's ops
        // would go to a task that is stopped.
        let mut entry = self
            .map
            .entry(to.id.clone())
            .or_insert_with(|| self.spawn(to));
        if !usable(&entry) {
            *entry = self.spawn(to);
        }
        entry.downgrade()
    }

    fn spawn(&self, to: &NodeIdentity) -> Handle {
        let (tx, rx) = mpsc::channel(self.config.queue);
        let (stop, stopped) = oneshot::channel();
        let to = Arc::new(to.clone());
        let slots = Arc::new(Semaphore::new(self.config.max_in_flight));
        let task = Task {
            to: to.clone(),
            ctx: self.ctx.clone(),
            slots: slots.clone(),
            config: self.config,
        };
        tokio::spawn(task.run(rx, stopped));
        Handle {
            to,
            tx,
            slots,
            _stop: stop,
        }
    }

    /// A slot to send a call of one in, when the owner has no call in
    /// flight and nothing queued (so nothing could join the op) and no
    /// `linger` asks to wait. With a call in flight the op goes through
    /// the queue: callers sending their own calls of one as soon as the
    /// last returned would keep the batches from forming under load.
    fn idle_slot(&self, h: &Handle) -> Option<(OwnedSemaphorePermit, Arc<NodeIdentity>)> {
        let idle = h.slots.available_permits() == self.config.max_in_flight
            && h.tx.capacity() == h.tx.max_capacity();
        if !idle || !self.config.linger.is_zero() {
            return None;
        }
        // Not ahead of the task once it waits: tokio's semaphore gives a
        // freed slot to its waiters first, and refuses `try_acquire` while
        // any wait. (Between taking an op and asking for a slot it does not
        // wait yet; with all slots free it gets one of the others.)
        let slot = h.slots.clone().try_acquire_owned().ok()?;
        Some((slot, h.to.clone()))
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
    ) -> BoxFuture<'static, Reply> {
        let h = self.handle(to);
        if let Some((slot, to)) = self.idle_slot(&h) {
            drop(h);
            return call_alone(&self.ctx, &to, op, slot, deadline);
        }
        let (reply, mut answer) = oneshot::channel();
        let (sent, mut left) = oneshot::channel();
        let pending = Pending {
            op,
            reply: Some(reply),
            sent: Some(sent),
            queued_at: Instant::now(),
            deadline,
        };
        let queued = h.tx.try_send(pending).is_ok();
        drop(h);
        Box::pin(async move {
            if !queued {
                return Reply::Failed(PeerFailure::Overloaded);
            }
            // Most answers come within the deadline from queueing: one clock,
            // and no wake-up when the op leaves the queue.
            let answered = match tokio::time::timeout(deadline, &mut answer).await {
                Ok(answered) => answered.ok(),
                Err(_) => {
                    // Closed first, then read: the batcher either sent before
                    // this (and the op is in flight) or can no longer send it.
                    left.close();
                    let Ok(sent_at) = left.try_recv() else {
                        return Reply::Failed(PeerFailure::Queued(deadline));
                    };
                    // Sent: the answer has a deadline of its own, from the send.
                    match tokio::time::timeout_at(sent_at + deadline, &mut answer).await {
                        Ok(answered) => answered.ok(),
                        Err(_) => return Reply::Late(late(answer, None)),
                    }
                }
            };
            heard(answered)
        })
    }

    fn send(&self, to: &NodeIdentity, op: CounterOp) {
        let pending = Pending {
            op,
            reply: None,
            sent: None,
            queued_at: Instant::now(),
            deadline: Duration::ZERO,
        };
        if self.handle(to).tx.try_send(pending).is_err() {
            tracing::debug!(owner = %to.id, "op dropped: owner queue full");
        }
    }

    fn on_late(&self, late: LateAnswer, then: Box<dyn FnOnce(OpResult) + Send>) {
        tokio::spawn(async move {
            if let Some(result) = late.0.await {
                then(result);
            }
        });
    }

    fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        self.map.retain(|id, _| keep(id));
        self.ctx.link.retain(keep);
    }
}

/// An op's answer past its deadline, to its reconciler: the call it
/// rides on goes on (when the caller drives it) until it ends.
fn late(answer: oneshot::Receiver<Answer>, call: Option<BoxFuture<'static, ()>>) -> LateAnswer {
    LateAnswer(Box::pin(async move {
        if let Some(call) = call {
            call.await;
        }
        answer.await.ok().and_then(Result::ok)
    }))
}

/// What a caller hears of an answer that came in time; None when its
/// batcher stopped before sending the op.
fn heard(answered: Option<Answer>) -> Reply {
    match answered {
        Some(Ok(result)) => Reply::Answered(result),
        Some(Err(failure)) => Reply::Failed(failure),
        None => Reply::Failed(PeerFailure::Unreachable("batcher stopped".into())),
    }
}

/// Sends `op` now, as a call of its own in `slot`, driven by its caller.
/// The op leaves as the call starts, so its one clock is the answer's;
/// past it, the call goes on as the late answer.
fn call_alone(
    ctx: &Arc<Ctx>,
    to: &Arc<NodeIdentity>,
    op: CounterOp,
    slot: OwnedSemaphorePermit,
    deadline: Duration,
) -> BoxFuture<'static, Reply> {
    let now = Instant::now();
    let (reply, mut answer) = oneshot::channel();
    let alone = Pending {
        op,
        reply: Some(reply),
        sent: None,
        queued_at: now,
        deadline,
    };
    let mut sending: BoxFuture<'static, ()> = Box::pin(call(ctx, to, vec![alone], slot, now));
    Box::pin(async move {
        if tokio::time::timeout(deadline, &mut sending).await.is_err() {
            return Reply::Late(late(answer, Some(sending)));
        }
        // The call ended, and `call` answers every op before it ends.
        heard(answer.try_recv().ok())
    })
}

/// One owner's batcher task and what it works with.
struct Task {
    to: Arc<NodeIdentity>,
    ctx: Arc<Ctx>,
    slots: Arc<Semaphore>,
    config: BatchConfig,
}

impl Task {
    async fn run(self, mut rx: mpsc::Receiver<Pending>, mut stop: oneshot::Receiver<()>) {
        let mut calls = FuturesUnordered::new();
        'run: loop {
            let first = tokio::select! {
                biased;
                _ = &mut stop => break,
                Some(()) = calls.next(), if !calls.is_empty() => continue,
                next = rx.recv() => match next {
                    Some(first) => first,
                    None => break,
                },
            };
            // The op leaves when a slot is free; the queue grows meanwhile,
            // and all of it that fits leaves together.
            let free = self.slots.clone().acquire_owned();
            tokio::pin!(free);
            let slot = loop {
                tokio::select! {
                    biased;
                    _ = &mut stop => break 'run,
                    slot = &mut free => break slot.expect("the slots are never closed"),
                    Some(()) = calls.next(), if !calls.is_empty() => {}
                }
            };
            let (batch, left) = gather(first, &mut rx, &mut calls, self.config).await;
            if !batch.is_empty() {
                calls.push(call(&self.ctx, &self.to, batch, slot, left));
            }
        }
        // Whoever still waits in the queue, or held for a slot, hears
        // "batcher stopped".
        drop(rx);
        while calls.next().await.is_some() {}
    }
}

/// The ops that leave with `first`: whatever is already queued, up to
/// `max_items`, after waiting `linger` for more; the calls in flight are
/// still driven meanwhile. Also the instant they leave, as their callers
/// were told.
async fn gather<F: std::future::Future<Output = ()>>(
    mut first: Pending,
    rx: &mut mpsc::Receiver<Pending>,
    calls: &mut FuturesUnordered<F>,
    config: BatchConfig,
) -> (Vec<Pending>, Instant) {
    let mut batch = Vec::with_capacity(config.max_items.min(64));
    // One clock read for the ops that leave together, not one per op.
    let mut now = Instant::now();
    if first.leave(now) {
        batch.push(first);
    }
    if !config.linger.is_zero() {
        let until = now + config.linger;
        while batch.len() < config.max_items {
            tokio::select! {
                biased;
                Some(()) = calls.next(), if !calls.is_empty() => {}
                next = rx.recv() => match next {
                    Some(mut p) => if p.leave(Instant::now()) { batch.push(p) },
                    None => break,
                },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        // What is drained below leaves after the linger.
        now = Instant::now();
    }
    while batch.len() < config.max_items {
        match rx.try_recv() {
            Ok(mut p) => {
                if p.leave(now) {
                    batch.push(p)
                }
            }
            Err(_) => break,
        }
    }
    (batch, now)
}

/// One Decide call carrying `batch`, leaving at `sent_at`, in `slot`: the
/// request is built and handed to the link now; the future hands out the
/// answers.
fn call(
    ctx: &Arc<Ctx>,
    to: &Arc<NodeIdentity>,
    batch: Vec<Pending>,
    slot: OwnedSemaphorePermit,
    sent_at: Instant,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let n = batch.len();
    let stats = &ctx.stats;
    for p in &batch {
        stats.queue_wait.record(sent_at - p.queued_at);
    }
    // Heard for the late window past the longest deadline it carries: an
    // op whose caller waits that long (a leaving node's forward waits the
    // late window itself) still has its late answer reconciled.
    let longest = batch.iter().map(|p| p.deadline).max().unwrap_or_default();
    let (ops, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.op, p.reply)).unzip();
    bump(&stats.peer_calls, 1);
    bump(&stats.peer_ops, n as u64);
    let mine = ctx.limiter.rules().version();
    let req = DecideRequest {
        ops,
        rules_version: mine,
        from_node: ctx.me.clone(),
    };
    bump(&stats.peer_bytes, req.encoded_len() as u64);
    // The slot is held for the late window, as long as an answer is
    // expected; the answer is listened for far longer (`HEARD_FOR`), so
    // that one the owner sent before its op's fence still reaches its
    // reconciler through a stall of seconds on either side.
    let called = ctx.link.decide(to, req, longest + HEARD_FOR);
    let held = longest + ctx.late_window;
    let (ctx, to) = (ctx.clone(), to.clone());
    async move {
        tokio::pin!(called);
        let called = match tokio::time::timeout(held, &mut called).await {
            Ok(called) => {
                drop(slot);
                called
            }
            Err(_) => {
                drop(slot);
                called.await
            }
        };
        let stats = &ctx.stats;
        stats.call_time.record(sent_at.elapsed());
        let outcome = match called {
            Ok(resp) if resp.results.len() == n => {
                bump(&stats.peer_bytes, resp.encoded_len() as u64);
                if resp.rules_version > mine {
                    ctx.hints.hint(&to, resp.rules_version);
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
}

#[cfg(test)]
mod tests;
