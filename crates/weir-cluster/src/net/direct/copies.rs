//! The copies an owner sends on a direct connection, taken off the task that answers its Decide calls.
//!
//! After a ring change an owner copies every counter it holds to its new
//! replica holder, 4,096 to a round: a frame of some 400 KB that took the
//! holder 5-70 ms to decode and take on two busy cores (timed in a build
//! logging each frame, during `bench/join-load.sh`'s million-counter join;
//! no committed benchmark measures it). Taken on the connection's task, every Decide
//! call behind it on the same connection waited that long, past the
//! gateway's 5 ms owner deadline, and the gateway refused those checks for
//! now. Here the connection's task hands each frame of copies to the
//! node's task for them and goes on deciding; a large frame is decoded
//! and taken on the blocking pool, off the workers that answer calls.
//!
//! The frames are taken one at a time, in the order they arrived, on one
//! task for the whole node: a copy replaces what the holder had, so a
//! frame taken after a later one would put an older count back. A queue
//! per connection would not do: an owner whose connection closed with a
//! frame still queued here resends its keys on a new connection, and that
//! frame, taken by another queue, could land first. Each frame is still
//! answered only once it has been taken, so an owner's acknowledged copy
//! is one the holder has.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use weir_proto::weir::v1::{ReplicateRequest, ReplicateResponse};

use crate::handler::PeerHandler;

/// Frames of at most this many bytes (about 300 counters at the some 100
/// bytes a counter of the frames timed above) are taken on the copies' own
/// task; larger ones on the blocking pool.
const INLINE_BYTES: usize = 32 * 1024;

/// What became of one frame of copies: None when this member was killed,
/// which answers no call.
pub(super) type Copied = std::io::Result<Option<ReplicateResponse>>;

type Queue = mpsc::UnboundedSender<(Bytes, oneshot::Sender<Copied>)>;

/// The node's queue of copies to take. It holds what owners have in
/// flight, a replication round's calls each.
pub struct Copies {
    handler: Arc<PeerHandler>,
    killed: Arc<AtomicBool>,
    /// Started with the first frame, on the runtime that serves it; its
    /// task ends once this is dropped and every queued frame is taken.
    queue: OnceLock<Queue>,
}

impl Copies {
    pub fn new(handler: Arc<PeerHandler>, killed: Arc<AtomicBool>) -> Copies {
        Copies {
            handler,
            killed,
            queue: OnceLock::new(),
        }
    }

    /// Queues a frame's body; resolves to what became of it once taken.
    pub(super) fn take(&self, body: Bytes) -> impl std::future::Future<Output = Copied> + Send {
        let (tx, rx) = oneshot::channel();
        let queued = self.queue.get_or_init(|| self.start()).send((body, tx));
        async move {
            let ended = || std::io::Error::other("the copies' task has ended");
            queued.map_err(|_| ended())?;
            rx.await.map_err(|_| ended())?
        }
    }

    fn start(&self) -> Queue {
        let (queue, mut arrived) = mpsc::unbounded_channel::<(Bytes, oneshot::Sender<Copied>)>();
        let (handler, killed) = (self.handler.clone(), self.killed.clone());
        tokio::spawn(async move {
            while let Some((body, answer)) = arrived.recv().await {
                let _ = answer.send(take(&handler, &killed, body).await);
            }
        });
        queue
    }
}

async fn take(handler: &Arc<PeerHandler>, killed: &AtomicBool, body: Bytes) -> Copied {
    // A killed member answers no call, even one on a connection that outlived it.
    if killed.load(Ordering::SeqCst) {
        return Ok(None);
    }
    let (n, handler) = (body.len(), handler.clone());
    let apply = move || -> Copied {
        let req = ReplicateRequest::decode(body).map_err(std::io::Error::other)?;
        Ok(Some(handler.replicate(req)))
    };
    let taken = crate::offload::by_size(n, INLINE_BYTES, apply).await;
    taken.unwrap_or_else(|| Err(std::io::Error::other("taking the copies did not finish")))
}
