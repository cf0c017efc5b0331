//! A delaying TCP relay between regions: every byte reaches the other side a fixed time after it was sent, in order; a cut drops every connection and refuses new ones.
//!
//! This machine has no kernel delay injection (no `tc netem`), so the sim
//! delays inter-region links itself. Each direction of each connection is
//! a reader that stamps chunks with when they are due and a writer that
//! sends them then: the delay holds under load without stretching it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::SimError;

/// One listening end of a delayed link to one target.
pub struct Relay {
    pub addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    cut: Arc<AtomicBool>,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Relay {
    /// Listens on 127.0.0.1:0; bytes each way are held for `delay`.
    pub async fn start(delay: Duration) -> Result<Relay, SimError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| SimError::io("binding a region relay", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| SimError::io("reading a relay's address", e))?;
        let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let cut: Arc<AtomicBool> = Arc::default();
        let tasks: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = {
            let (target, cut, tasks) = (target.clone(), cut.clone(), tasks.clone());
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let to = *target.lock().expect("relay lock");
                    if cut.load(Ordering::SeqCst) {
                        continue;
                    }
                    let Some(to) = to else { continue };
                    let (tasks2, cut2) = (tasks.clone(), cut.clone());
                    let t = tokio::spawn(async move {
                        let Ok(outbound) = TcpStream::connect(to).await else {
                            return;
                        };
                        let _ = outbound.set_nodelay(true);
                        let _ = inbound.set_nodelay(true);
                        let (ir, iw) = inbound.into_split();
                        let (or, ow) = outbound.into_split();
                        let mut handles = pipe(ir, ow, delay);
                        handles.extend(pipe(or, iw, delay));
                        // Checked under the lock a cut drains: a cut that
                        // came while this connected finds nothing to drain.
                        let mut tasks = tasks2.lock().expect("relay lock");
                        if cut2.load(Ordering::SeqCst) {
                            handles.iter().for_each(AbortHandle::abort);
                        } else {
                            tasks.extend(handles);
                        }
                    });
                    tasks.lock().expect("relay lock").push(t.abort_handle());
                }
            })
            .abort_handle()
        };
        Ok(Relay {
            addr,
            target,
            cut,
            tasks,
            accept,
        })
    }

    pub fn point_at(&self, to: SocketAddr) {
        *self.target.lock().expect("relay lock") = Some(to);
    }

    /// Cuts the link (every open connection dropped, new ones refused) or heals it.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            for t in self.tasks.lock().expect("relay lock").drain(..) {
                t.abort();
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.set_cut(true);
    }
}

/// Bytes from `r` to `w`, each chunk written `delay` after it was read.
fn pipe(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) -> Vec<AbortHandle> {
    // Unbounded: what is in flight is one link's delay of traffic, and the
    // reader must never stall behind the writer's sleep.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    let writer = tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    vec![reader.abort_handle(), writer.abort_handle()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_arrive_after_the_delay_and_a_cut_drops_the_link() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let relay = Relay::start(Duration::from_millis(40)).await.unwrap();
        relay.point_at(echo_addr);
        let mut s = TcpStream::connect(relay.addr).await.unwrap();
        let sent = Instant::now();
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        assert!(
            sent.elapsed() >= Duration::from_millis(80),
            "both ways delayed"
        );
        relay.set_cut(true);
        let mut b = [0u8; 4];
        let got = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await;
        assert!(
            matches!(got, Ok(Ok(0)) | Ok(Err(_))),
            "the cut closed the link: {got:?}"
        );
    }
}
