//! The copies an owner sends on a direct connection, taken off the task that answers its Decide calls.
//!
//! After a ring change an owner copies every counter it holds to its new
//! replica holder, 4,096 to a round: a frame of some 400 KB that took the
//! holder 5-70 ms to decode and take on two busy cores (measured during a
//! million-counter join). Taken on the connection's task, every Decide
//! call behind it on the same connection waited that long, past the
//! gateway's 5 ms owner deadline, and the gateway refused those checks for
//! now. Here the connection's task hands each copy frame to a task of its
//! own and goes on deciding; a large frame is decoded and taken on the
//! blocking pool, off the workers that answer calls.
//!
//! The frames are taken one at a time in the order they arrived: a copy
//! replaces what the holder had, so a frame taken after a later one
//! (an owner's retry of a call that timed out here) would put an older
//! count back. Each frame is still answered only once it has been taken,
//! so an owner's acknowledged copy is one the holder has.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use weir_proto::weir::v1::{ReplicateRequest, ReplicateResponse};

use crate::handler::PeerHandler;

/// Frames of at most this many bytes (about 300 counters, a fraction of a
/// millisecond to take) are taken on the copies' own task; larger ones on
/// the blocking pool.
const INLINE_BYTES: usize = 32 * 1024;

/// What became of one frame of copies: None when this member was killed,
/// which answers no call.
pub(super) type Copied = std::io::Result<Option<ReplicateResponse>>;

/// The copies of one connection, queued for its copies' task. The queue
/// holds what an owner has in flight, one replication round's calls.
pub(super) struct Copies {
    queue: mpsc::UnboundedSender<(Bytes, oneshot::Sender<Copied>)>,
}

impl Copies {
    /// Starts the task that takes this connection's copies; it ends once
    /// the connection has dropped this and every queued frame is taken.
    pub fn start(handler: Arc<PeerHandler>, killed: Arc<AtomicBool>) -> Copies {
        let (queue, mut arrived) = mpsc::unbounded_channel::<(Bytes, oneshot::Sender<Copied>)>();
        tokio::spawn(async move {
            while let Some((body, answer)) = arrived.recv().await {
                let _ = answer.send(take(&handler, &killed, body).await);
            }
        });
        Copies { queue }
    }

    /// Queues a frame's body; resolves to what became of it once taken.
    pub fn take(&self, body: Bytes) -> impl std::future::Future<Output = Copied> + Send {
        let (tx, rx) = oneshot::channel();
        let queued = self.queue.send((body, tx)).is_ok();
        async move {
            if !queued {
                return Err(std::io::Error::other("the copies' task has ended"));
            }
            rx.await
                .map_err(|_| std::io::Error::other("the copies' task has ended"))?
        }
    }
}

async fn take(handler: &Arc<PeerHandler>, killed: &AtomicBool, body: Bytes) -> Copied {
    // A killed member answers no call, even one on a connection that outlived it.
    if killed.load(Ordering::SeqCst) {
        return Ok(None);
    }
    let apply = |handler: &PeerHandler, body: Bytes| -> Copied {
        let req = ReplicateRequest::decode(body).map_err(std::io::Error::other)?;
        Ok(Some(handler.replicate(req)))
    };
    if body.len() <= INLINE_BYTES {
        return apply(handler, body);
    }
    let handler = handler.clone();
    tokio::task::spawn_blocking(move || apply(&handler, body))
        .await
        .map_err(std::io::Error::other)?
}
