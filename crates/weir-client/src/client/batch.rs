//! Concurrent checks folded into one gRPC Check call each round.
//!
//! One task owns the queue. It waits for a free call slot, takes the first
//! pending check, drains whatever else is already queued (up to the batch
//! size) and sends them as one call; each caller hears back on its own
//! oneshot. Nothing waits to fill a batch: a lone check goes out at once,
//! and batches grow only while earlier calls are in flight, which is
//! exactly when batching saves round trips.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::transport::Channel;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::CheckItem;

use super::grpc;
use crate::error::ClientError;
use weir_core::CheckResponse;

pub(crate) type Reply = Result<CheckResponse, ClientError>;

pub(crate) struct Pending {
    pub item: CheckItem,
    /// How long this caller waits; the call carrying it waits as long as
    /// its most patient item.
    pub deadline: Duration,
    pub reply: oneshot::Sender<Reply>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchConfig {
    pub max_batch: usize,
    pub max_in_flight: usize,
    pub queue: usize,
}

pub(crate) fn spawn(channel: Channel, config: BatchConfig) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(config.queue.max(1));
    tokio::spawn(run(RateLimiterClient::new(channel), rx, config));
    tx
}

/// Ends when every sender (every clone of the client) is gone.
async fn run(
    client: RateLimiterClient<Channel>,
    mut rx: mpsc::Receiver<Pending>,
    config: BatchConfig,
) {
    let slots = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
    let max_batch = config.max_batch.max(1);
    loop {
        // The slot comes first: while every call is in flight, checks pile
        // up in the queue and the next call carries them all.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = Vec::with_capacity(max_batch);
        if rx.recv_many(&mut batch, max_batch).await == 0 {
            return;
        }
        // A caller whose deadline passed while queued is not asked about.
        batch.retain(|p| !p.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let mut client = client.clone();
        tokio::spawn(async move {
            let deadline = batch.iter().map(|p| p.deadline).max().unwrap_or_default();
            let (items, replies): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|p| (p.item, p.reply)).unzip();
            match grpc::call(&mut client, items, deadline).await {
                Ok(results) => {
                    for (reply, result) in replies.into_iter().zip(results) {
                        let _ = reply.send(result);
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
            drop(slot);
        });
    }
}
