//! The owner's side: one task per connection reads calls, decides them and writes the answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weir_proto::weir::v1::{DecideRequest, DecideResponse, ReplicateResponse};

use super::Copies;
use super::{put_frame, take_frame, Frame, Kind, MAGIC, REFUSED};
use crate::handler::PeerHandler;
use crate::net::auth::PeerAuth;
use crate::stats::{bump, Stats};

/// A connection that sends nothing, not even the gateway's pings (one
/// each keepalive interval), for a whole period of this is closed.
const SILENT: Duration = Duration::from_secs(10);

/// Serves direct connections (Decide and Replicate calls) for one node.
#[derive(Clone)]
pub struct DirectServer {
    handler: Arc<PeerHandler>,
    killed: Arc<AtomicBool>,
    auth: PeerAuth,
    stats: Arc<Stats>,
    /// The node's copies, taken off the connections' tasks.
    copies: Arc<Copies>,
}

/// A call being answered; it borrows the server, so a call costs no
/// reference counts.
type Answering<'a> = Pin<Box<dyn Future<Output = (u64, std::io::Result<Reply>)> + Send + 'a>>;

/// A call's answer; None when this member was killed, which answers no call.
enum Reply {
    Decided(Option<DecideResponse>),
    Copied(Option<ReplicateResponse>),
}

impl DirectServer {
    pub(crate) fn new(
        handler: Arc<PeerHandler>,
        killed: Arc<AtomicBool>,
        auth: PeerAuth,
        stats: Arc<Stats>,
        copies: Arc<Copies>,
    ) -> Self {
        DirectServer {
            handler,
            killed,
            auth,
            stats,
            copies,
        }
    }

    /// Serves one connection whose first byte said it is direct, until it
    /// closes or `closing` resolves: then the calls already read are
    /// answered and the connection ends, as a gRPC server drains. The
    /// hello must arrive within `head`.
    pub async fn serve<S>(&self, mut io: S, head: Duration, closing: impl Future<Output = ()>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        match tokio::time::timeout(head, self.greet(&mut io)).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "direct peer hello failed");
                return;
            }
            Err(_) => {
                tracing::debug!("direct peer hello timed out");
                return;
            }
        }
        if let Err(e) = self.answer(io, closing).await {
            tracing::debug!(error = %e, "direct peer connection closed");
        }
    }

    /// Reads the hello and answers it: true to go on.
    async fn greet<S>(&self, io: &mut S) -> std::io::Result<bool>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut head = [0u8; MAGIC.len() + 2];
        io.read_exact(&mut head).await?;
        if &head[..MAGIC.len()] != MAGIC {
            return Ok(false);
        }
        let len = u16::from_be_bytes([head[MAGIC.len()], head[MAGIC.len() + 1]]);
        let mut token = vec![0u8; usize::from(len)];
        io.read_exact(&mut token).await?;
        let token = (!token.is_empty()).then(|| String::from_utf8_lossy(&token).into_owned());
        if let Err(refusal) = self.auth.admit(token.as_deref()) {
            tracing::debug!(refusal, "direct peer connection refused");
            io.write_all(REFUSED).await?;
            return Ok(false);
        }
        io.write_all(MAGIC).await?;
        bump(&self.stats.direct_connections, 1);
        Ok(true)
    }

    /// Reads calls and writes answers until the connection closes. An
    /// answer ready at once (the usual case: a decision takes microseconds)
    /// is written in the same turn as its call was read; one that waits
    /// (a stand-in that asks another node) is polled with the rest and
    /// written when it is ready, without holding up the calls behind it.
    async fn answer<S>(&self, mut io: S, closing: impl Future<Output = ()>) -> std::io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut read = BytesMut::with_capacity(8 * 1024);
        let mut write = BytesMut::with_capacity(8 * 1024);
        let mut running: FuturesUnordered<Answering> = FuturesUnordered::new();
        let mut closing = std::pin::pin!(closing);
        // Checked once a period rather than timed per read: a timer per
        // read would cost every call a timer-wheel insert and removal.
        let mut silent = tokio::time::interval_at(tokio::time::Instant::now() + SILENT, SILENT);
        let mut heard = false;
        loop {
            while let Some(frame) = take_frame(&mut read).map_err(std::io::Error::other)? {
                self.take(frame, &mut running, &mut write)?;
            }
            while let Some(Some((id, answer))) = running.next().now_or_never() {
                put_answer(&mut write, id, answer)?;
            }
            if !write.is_empty() {
                io.write_all(&write).await?;
                write.clear();
            }
            tokio::select! {
                biased;
                _ = &mut closing => break,
                n = io.read_buf(&mut read) => match n? {
                    0 => return Ok(()),
                    _ => heard = true,
                },
                Some((id, answer)) = running.next(), if !running.is_empty() => {
                    put_answer(&mut write, id, answer)?;
                }
                _ = silent.tick() => if !std::mem::take(&mut heard) {
                    return Err(std::io::Error::other("the peer went silent"));
                },
            }
        }
        // Closing: every call that has arrived gets its answer (the
        // gateway counts on one it sent being answered or refused, never
        // dropped once decided), then the connection ends.
        while let Some(Ok(n)) = io.read_buf(&mut read).now_or_never() {
            if n == 0 {
                break;
            }
        }
        while let Some(frame) = take_frame(&mut read).map_err(std::io::Error::other)? {
            self.take(frame, &mut running, &mut write)?;
        }
        while let Some((id, answer)) = running.next().await {
            put_answer(&mut write, id, answer)?;
        }
        io.write_all(&write).await?;
        io.shutdown().await
    }

    fn take<'a>(
        &'a self,
        frame: Frame,
        running: &mut FuturesUnordered<Answering<'a>>,
        write: &mut BytesMut,
    ) -> std::io::Result<()> {
        let id = frame.id;
        match frame.kind {
            Kind::Ping => put_frame(write, id, Kind::Pong, &()),
            Kind::Decide => {
                let req = DecideRequest::decode(frame.body).map_err(std::io::Error::other)?;
                running.push(Box::pin(async move {
                    // A killed member answers no call, even one on a
                    // connection that outlived it.
                    if self.killed.load(Ordering::SeqCst) {
                        return (id, Ok(Reply::Decided(None)));
                    }
                    (id, Ok(Reply::Decided(Some(self.handler.decide(req).await))))
                }));
            }
            Kind::Replicate => {
                let copied = self.copies.take(frame.body);
                running.push(Box::pin(
                    async move { (id, copied.await.map(Reply::Copied)) },
                ));
            }
            Kind::Pong | Kind::Unavailable => {
                return Err(std::io::Error::other(format!(
                    "a gateway sent a {:?} frame",
                    frame.kind
                )))
            }
        }
        Ok(())
    }
}

/// Writes a call's answer; a frame of copies that did not decode closes
/// the connection, as an undecodable call does.
fn put_answer(
    write: &mut BytesMut,
    id: u64,
    answer: std::io::Result<Reply>,
) -> std::io::Result<()> {
    match answer? {
        Reply::Decided(Some(r)) => put_frame(write, id, Kind::Decide, &r),
        Reply::Copied(Some(r)) => put_frame(write, id, Kind::Replicate, &r),
        Reply::Decided(None) | Reply::Copied(None) => put_frame(write, id, Kind::Unavailable, &()),
    }
    Ok(())
}
