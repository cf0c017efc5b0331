//! One listening socket served by several threads: connections dealt out in turn, each moved to the runtime of the thread that serves it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::Listener;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::{CappedListener, CappedStream};

type Handed = (std::net::TcpStream, OwnedSemaphorePermit);

/// One thread's share of the connections `deal` accepts.
pub struct Dealt {
    rx: mpsc::UnboundedReceiver<Handed>,
    local: SocketAddr,
}

/// Accepts from `listener` on the caller's runtime until `stop`, each
/// connection holding one of `slots` (so those past the cap wait in the
/// kernel's backlog, as with one listener), and deals them out in turn to
/// `n` shares. In turn, not from the one socket in every thread: a thread
/// woken first took every connection of a burst (a client's pool of eight
/// all landed on one of two threads), leaving the other core idle.
pub fn deal(
    listener: TcpListener,
    slots: Arc<Semaphore>,
    n: usize,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<Vec<Dealt>> {
    let local = listener.local_addr()?;
    let (txs, shares): (Vec<_>, Vec<_>) = (0..n.max(1))
        .map(|_| {
            let (tx, rx) = mpsc::unbounded_channel();
            (tx, Dealt { rx, local })
        })
        .unzip();
    let mut listener = CappedListener::new(listener, slots);
    tokio::spawn(async move {
        tokio::pin!(stop);
        let mut next = 0;
        loop {
            let stream = tokio::select! {
                _ = &mut stop => return,
                (stream, _) = listener.accept() => stream,
            };
            // Off this runtime's reactor: the thread that serves the
            // connection registers it with its own, so its reads wake
            // that thread and no other.
            let (tcp, slot) = stream.into_parts();
            let Ok(tcp) = tcp.into_std() else { continue };
            // A share whose thread has ended is skipped; with none left
            // the socket closes.
            let mut handed = Some((tcp, slot));
            for _ in 0..txs.len() {
                let tx = &txs[next % txs.len()];
                next += 1;
                match tx.send(handed.take().expect("put back on failure")) {
                    Ok(()) => break,
                    Err(mpsc::error::SendError(back)) => handed = Some(back),
                }
            }
            if handed.is_some() {
                return tracing::error!(%local, "every thread serving this listener has ended");
            }
        }
    });
    Ok(shares)
}

impl Listener for Dealt {
    type Io = CappedStream;
    type Addr = SocketAddr;

    /// Never resolves once the dealer has stopped: the server stops on
    /// the same signal.
    async fn accept(&mut self) -> (CappedStream, SocketAddr) {
        loop {
            let Some((tcp, slot)) = self.rx.recv().await else {
                return std::future::pending().await;
            };
            let Ok(tcp) = TcpStream::from_std(tcp) else {
                continue;
            };
            let Ok(remote) = tcp.peer_addr() else {
                continue;
            };
            return (CappedStream::from_parts(tcp, slot), remote);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accept::slots;

    /// Guard: connections go to the shares in turn, not to whichever
    /// thread wakes first.
    #[tokio::test]
    async fn connections_are_dealt_to_the_shares_in_turn() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut shares = deal(listener, slots(8), 2, std::future::pending()).unwrap();
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        for share in &mut shares {
            for _ in 0..2 {
                let (_, remote) = share.accept().await;
                assert!(clients.iter().any(|c| c.local_addr().unwrap() == remote));
            }
            assert!(
                share.rx.try_recv().is_err(),
                "a share got more than its turn"
            );
        }
    }

    /// Guard: a connection dealt out still holds its slot.
    #[tokio::test]
    async fn a_dealt_connection_holds_its_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = slots(1);
        let mut shares = deal(listener, pool.clone(), 1, std::future::pending()).unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (conn, _) = shares[0].accept().await;
        assert_eq!(pool.available_permits(), 0);
        let _second = TcpStream::connect(addr).await.unwrap();
        // One slot: the second waits in the backlog while the first holds
        // it. A correct dealer never hands it over here, so the wait can
        // only miss a broken one, never fail a sound one.
        let held = std::time::Duration::from_millis(200);
        assert!(
            tokio::time::timeout(held, shares[0].accept())
                .await
                .is_err(),
            "dealt past the cap"
        );
        drop(conn);
        let wait = std::time::Duration::from_secs(10);
        tokio::time::timeout(wait, shares[0].accept())
            .await
            .expect("the slot came back with the first connection");
    }
}
