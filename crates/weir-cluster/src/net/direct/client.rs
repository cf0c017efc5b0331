//! The gateway's side: a call is written from its caller's task, and one reader task hands answers back.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use super::socket::Socket;
use super::{hello, put_frame, take_frame, Kind, MAGIC, REFUSED};
use crate::link::PeerFailure;
use crate::net::peer_tls::PeerTls;

/// An answer's message, still encoded, or why there is none.
type Answer = Result<Bytes, PeerFailure>;

/// How a dial ended.
#[derive(Clone)]
enum Dialled {
    Live(Arc<Live>),
    /// The peer does not serve direct calls: they go over gRPC.
    Unsupported,
    Failed(String),
}

/// One direct connection to a peer, dialled in the background; cheap to
/// clone, every clone calling over the same connection. When the last
/// clone is dropped (the link redialled, or forgot the peer) the
/// connection closes: its pings would otherwise keep it open for good.
#[derive(Clone)]
pub(crate) struct DirectConn {
    dialled: Arc<Handle>,
}

struct Handle(watch::Receiver<Option<Dialled>>);

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(Dialled::Live(live)) = &*self.0.borrow() {
            live.close("no longer used");
        }
    }
}

/// Settings of a direct connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectConfig {
    pub connect_timeout: Duration,
    /// A ping goes out this often, and a connection that has heard
    /// nothing for two of them is closed.
    pub keepalive: Duration,
}

impl DirectConn {
    /// Starts dialling `addr`, sending `token` in the hello.
    #[cfg(test)]
    pub fn dial(addr: SocketAddr, token: Option<String>, config: DirectConfig) -> DirectConn {
        Self::dial_over(addr, token, config, None)
    }

    /// [`DirectConn::dial`], under mutual TLS when `tls` is given.
    pub fn dial_over(
        addr: SocketAddr,
        token: Option<String>,
        config: DirectConfig,
        tls: Option<Arc<PeerTls>>,
    ) -> DirectConn {
        let (tx, dialled) = watch::channel(None);
        tokio::spawn(async move {
            let result = connect(addr, token.as_deref().unwrap_or(""), config, tls).await;
            let result = match result {
                Ok(Some(socket)) => Dialled::Live(Live::start(socket, config.keepalive)),
                Ok(None) => Dialled::Unsupported,
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "direct peer dial failed");
                    Dialled::Failed(e.to_string())
                }
            };
            // Nobody holds the connection any more: it was dialled for no one.
            if let Err(unused) = tx.send(Some(result)) {
                if let Some(Dialled::Live(live)) = unused.0 {
                    live.close("no longer used");
                }
            }
        });
        DirectConn {
            dialled: Arc::new(Handle(dialled)),
        }
    }

    fn dialled(&self) -> watch::Ref<'_, Option<Dialled>> {
        self.dialled.0.borrow()
    }

    /// Whether calls made now can never succeed here: the dial failed, or
    /// the connection has closed since. A peer without direct calls is
    /// not closed: it is asked over gRPC, for as long as it is at this address.
    pub fn is_closed(&self) -> bool {
        match &*self.dialled() {
            None | Some(Dialled::Unsupported) => false,
            Some(Dialled::Live(live)) => live.is_closed(),
            Some(Dialled::Failed(_)) => true,
        }
    }

    /// Whether the peer said it takes no direct calls.
    pub fn is_unsupported(&self) -> bool {
        matches!(&*self.dialled(), Some(Dialled::Unsupported))
    }

    /// Whether the dial has ended, one way or another.
    pub fn is_dialled(&self) -> bool {
        self.dialled().is_some()
    }

    /// Calls waiting for their answers on the live connection.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        match &*self.dialled() {
            Some(Dialled::Live(live)) => live.waiting.lock().len(),
            _ => 0,
        }
    }

    /// Sends one call of `kind` and waits up to `deadline` for its answer;
    /// None when the peer takes no direct calls, so the caller asks over gRPC.
    pub async fn call<Resp: Message + Default>(
        &self,
        kind: Kind,
        req: &impl Message,
        deadline: Duration,
    ) -> Option<Result<Resp, PeerFailure>> {
        // Dialled already (every call but a connection's first few): no
        // wait and no clock read before the send.
        let ended = self.dialled().clone();
        let (ended, left) = match ended {
            Some(ended) => (ended, deadline),
            None => {
                let started = Instant::now();
                let mut dialled = self.dialled.0.clone();
                let wait = dialled.wait_for(Option::is_some);
                let ended = match tokio::time::timeout(deadline, wait).await {
                    Err(_) => return Some(Err(PeerFailure::Timeout(deadline))),
                    Ok(Err(_)) => return Some(Err(unreachable("the dial was abandoned"))),
                    Ok(Ok(d)) => d.clone().expect("waited for the dial to end"),
                };
                (ended, deadline.saturating_sub(started.elapsed()))
            }
        };
        let live = match ended {
            Dialled::Live(live) => live,
            Dialled::Unsupported => return None,
            Dialled::Failed(e) => return Some(Err(unreachable(&e))),
        };
        if left.is_zero() {
            // The dial took the whole deadline: nothing was sent.
            return Some(Err(PeerFailure::Timeout(deadline)));
        }
        let answer = live.call(kind, req, left, deadline).await.and_then(|body| {
            Resp::decode(body).map_err(|e| unreachable(&format!("an answer did not decode: {e}")))
        });
        Some(answer)
    }
}

fn unreachable(why: &str) -> PeerFailure {
    PeerFailure::Unreachable(format!("direct peer connection: {why}"))
}

/// Dials and says hello: the connection when the peer answers with the
/// magic, None when it answers anything else or closes (it does not take
/// direct calls), an error when it cannot be reached or refuses the token.
async fn connect(
    addr: SocketAddr,
    token: &str,
    config: DirectConfig,
    tls: Option<Arc<PeerTls>>,
) -> Result<Option<Socket>, String> {
    let exchange = async {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let Some(tls) = tls else {
            return Ok::<_, std::io::Error>(greet(tcp, token).await?.map(Socket::Plain));
        };
        let stream = tls.connect(addr.ip(), tcp).await?;
        Ok(greet(stream, token).await?.map(|stream| {
            // The hello is over: from here on the socket is written and
            // read without waiting, the session kept beside it.
            let (tcp, session) = stream.into_inner();
            Socket::Tls {
                tcp,
                session: Box::new(Mutex::new(session)),
            }
        }))
    };
    match tokio::time::timeout(config.connect_timeout, exchange).await {
        Err(_) => Err(format!(
            "no answer to the hello within {:?}",
            config.connect_timeout
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(Ok(socket))) => Ok(Some(socket)),
        Ok(Ok(Err(answer))) if &answer == REFUSED => {
            Err("the peer refused this node's cluster token".to_string())
        }
        Ok(Ok(Err(_))) => Ok(None),
    }
}

/// Says hello on `io`: `io` back when the peer answers with the magic,
/// else what it answered (zeros when it closed).
async fn greet<S>(mut io: S, token: &str) -> std::io::Result<Result<S, [u8; MAGIC.len()]>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(&hello(token)).await?;
    let mut answer = [0u8; MAGIC.len()];
    match io.read_exact(&mut answer).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(Err(answer)),
        Err(e) => return Err(e),
    }
    Ok(if &answer == MAGIC {
        Ok(io)
    } else {
        Err(answer)
    })
}

/// A live connection: what callers write to and the reader answers from.
struct Live {
    socket: Socket,
    /// Bytes not yet on the socket. Held only to append and to write
    /// without waiting, never across an await.
    unsent: Mutex<BytesMut>,
    /// Wakes the flusher when a write could not finish at once.
    flush: Notify,
    /// Callers waiting for answers, by call id (ids are this node's own,
    /// so a fast hasher is safe).
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>, weir_core::determinism::HashState>>,
    next_id: AtomicU64,
    /// Set once, when the connection closes; the reader and the flusher
    /// end on it.
    closed: watch::Sender<bool>,
}

impl Live {
    fn start(socket: Socket, keepalive: Duration) -> Arc<Live> {
        let live = Arc::new(Live {
            socket,
            unsent: Mutex::new(BytesMut::new()),
            flush: Notify::new(),
            waiting: Mutex::default(),
            // Zero is the pings' id.
            next_id: AtomicU64::new(1),
            closed: watch::Sender::new(false),
        });
        tokio::spawn(read_answers(live.clone(), keepalive));
        tokio::spawn(flush(live.clone()));
        live
    }

    async fn call(
        &self,
        kind: Kind,
        req: &impl Message,
        left: Duration,
        deadline: Duration,
    ) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(id, tx);
        // Taken out again if the call ends unanswered, so an answer that
        // never comes leaves nothing behind (an answer was taken out by
        // the reader that handed it over).
        let mut waiting = Waiting {
            live: self,
            id,
            answered: false,
        };
        // Checked after the entry is in: a close from now on fails it.
        if self.is_closed() {
            return Err(unreachable("closed"));
        }
        self.send(id, kind, req);
        let answer = match tokio::time::timeout(left, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(unreachable("closed with the call in flight")),
            Err(_) => return Err(PeerFailure::Timeout(deadline)),
        };
        waiting.answered = true;
        answer
    }

    /// Writes a frame now if nothing is queued ahead of it and the socket
    /// takes it; what it does not take, the flusher writes.
    fn send(&self, id: u64, kind: Kind, message: &impl Message) {
        // A frame of copies is encoded before the lock: a ring change's
        // are hundreds of KB, 0.5-2.4 ms each to encode on two busy cores
        // (up to 10 ms; timed in a build logging each send during
        // `bench/join-load.sh`), and a Decide call sent meanwhile would wait.
        let copies = (kind == Kind::Replicate).then(|| {
            let mut frame = BytesMut::new();
            put_frame(&mut frame, id, kind, message);
            frame
        });
        let mut unsent = self.unsent.lock();
        let flushing = !unsent.is_empty();
        match copies {
            Some(frame) => unsent.extend_from_slice(&frame),
            None => put_frame(&mut unsent, id, kind, message),
        }
        if flushing {
            return;
        }
        if let Err(e) = self.write_now(&mut unsent) {
            drop(unsent);
            self.close(&e.to_string());
            return;
        }
        if !unsent.is_empty() || self.socket.has_unsent() {
            self.flush.notify_one();
        }
    }

    /// Writes as much of `unsent` as the socket takes without waiting.
    fn write_now(&self, unsent: &mut BytesMut) -> std::io::Result<()> {
        match self.socket.try_write(unsent) {
            Ok(n) => unsent.advance(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the connection is closed.
    async fn closing(&self) {
        let _ = self.closed.subscribe().wait_for(|closed| *closed).await;
    }

    /// Marks the connection closed and fails every call waiting on it.
    fn close(&self, why: &str) {
        if !self
            .closed
            .send_if_modified(|closed| !std::mem::replace(closed, true))
        {
            return;
        }
        tracing::debug!(why, "direct peer connection closed");
        let waiting = std::mem::take(&mut *self.waiting.lock());
        for (_, tx) in waiting {
            let _ = tx.send(Err(unreachable(why)));
        }
    }
}

/// Removes a call's entry when the call ends without its answer.
struct Waiting<'a> {
    live: &'a Live,
    id: u64,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.live.waiting.lock().remove(&self.id);
        }
    }
}

/// Writes what callers could not write at once, whenever there is some.
async fn flush(live: Arc<Live>) {
    let closing = live.closing();
    tokio::pin!(closing);
    loop {
        tokio::select! {
            _ = live.flush.notified() => {}
            _ = &mut closing => return,
        }
        loop {
            if live.unsent.lock().is_empty() && !live.socket.has_unsent() {
                break;
            }
            tokio::select! {
                r = live.socket.writable() => if let Err(e) = r {
                    live.close(&e.to_string());
                    return;
                },
                _ = &mut closing => return,
            }
            let mut unsent = live.unsent.lock();
            if let Err(e) = live.write_now(&mut unsent) {
                drop(unsent);
                live.close(&e.to_string());
                return;
            }
        }
    }
}

/// Reads answers and hands each to its caller; pings the peer each
/// `keepalive` and closes the connection when two whole intervals go by
/// with nothing read (counted in ticks, so a read costs no clock read).
async fn read_answers(live: Arc<Live>, keepalive: Duration) {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut silent_ticks = 0u32;
    let mut ping = tokio::time::interval(keepalive);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let closing = live.closing();
    tokio::pin!(closing);
    let why = loop {
        tokio::select! {
            r = live.socket.readable() => if let Err(e) = r {
                break e.to_string();
            },
            _ = ping.tick() => {
                // The first tick is at once: two more with nothing read
                // are two whole intervals.
                silent_ticks += 1;
                if silent_ticks > 2 {
                    break format!("no answer to pings for {:?}", 2 * keepalive);
                }
                live.send(0, Kind::Ping, &());
                continue;
            }
            _ = &mut closing => return,
        }
        match live.socket.try_read_buf(&mut buf) {
            Ok(0) => break "the peer closed it".to_string(),
            Ok(_) => silent_ticks = 0,
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(e) => break e.to_string(),
        }
        if let Err(why) = hand_out(&live, &mut buf) {
            break why;
        }
    };
    live.close(&why);
}

/// Hands every whole answer in `buf` to its caller.
fn hand_out(live: &Live, buf: &mut BytesMut) -> Result<(), String> {
    while let Some(frame) = take_frame(buf).map_err(|e| e.to_string())? {
        let answer = match frame.kind {
            Kind::Pong => continue,
            Kind::Decide | Kind::Replicate => Ok(frame.body),
            Kind::Unavailable => Err(unreachable("the peer was killed")),
            Kind::Ping => return Err("the peer sent a ping".to_string()),
        };
        // Taken out before the send: the caller is woken with no lock held.
        let waiting = live.waiting.lock().remove(&frame.id);
        if let Some(tx) = waiting {
            let _ = tx.send(answer);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
