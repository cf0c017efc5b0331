//! A TCP listener that holds at most N connections open at once.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The kernel probes a connection that has been silent for 30 s, every
/// 10 s, and resets it after 3 probes go unanswered: a client whose host
/// vanished with a request half sent (in flight, so never idle) gives its
/// slot back within a minute. Kernel probes cost the node nothing per
/// request, where HTTP/2 pings took a lock and read the clock per frame.
fn keepalive() -> TcpKeepalive {
    TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3)
}

/// Waits for a free slot before accepting, so connections past the cap wait
/// in the kernel's backlog instead of each costing the node a task and buffers.
pub struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
}

/// A pool of `max_connections` slots, for one listener or shared by
/// several that accept from one socket.
pub fn slots(max_connections: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(max_connections.max(1)))
}

impl CappedListener {
    pub fn new(inner: TcpListener, slots: Arc<Semaphore>) -> Self {
        CappedListener { inner, slots }
    }
}

impl Listener for CappedListener {
    type Io = CappedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CappedStream, SocketAddr) {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (stream, addr) = Listener::accept(&mut self.inner).await;
        // Checks are tiny request/response exchanges; Nagle would only add latency.
        let _ = stream.set_nodelay(true);
        let _ = SockRef::from(&stream).set_tcp_keepalive(&keepalive());
        (
            CappedStream {
                stream,
                _slot: slot,
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that gives its slot back when it is dropped.
pub struct CappedStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl CappedStream {
    pub fn tcp(&self) -> &TcpStream {
        &self.stream
    }

    /// The connection and the slot it holds, to move to another runtime.
    pub fn into_parts(self) -> (TcpStream, OwnedSemaphorePermit) {
        (self.stream, self._slot)
    }

    pub fn from_parts(stream: TcpStream, slot: OwnedSemaphorePermit) -> Self {
        CappedStream {
            stream,
            _slot: slot,
        }
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// So a tonic server can take a share of dealt connections as they come
/// (weir-sim's bare references do; the node wraps them in `Conn` first).
impl tonic::transport::server::Connected for CappedStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener of one slot on loopback, and its address.
    async fn one_slot() -> (CappedListener, SocketAddr) {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        (CappedListener::new(inner, slots(1)), addr)
    }

    /// Guard: every accepted connection has the kernel's keepalive probes.
    #[tokio::test]
    async fn accepted_connections_are_probed_by_the_kernel() {
        let (mut listener, addr) = one_slot().await;
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await;
        let sock = SockRef::from(accepted.tcp());
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(30));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 3);
    }

    #[tokio::test]
    async fn second_connection_waits_until_the_first_closes() {
        let (mut listener, addr) = one_slot().await;
        let _c1 = TcpStream::connect(addr).await.unwrap();
        let (first, _) = listener.accept().await;
        // The handshake completes in the kernel, so an uncapped accept would
        // return this connection at once.
        let _c2 = TcpStream::connect(addr).await.unwrap();
        let mut second = Box::pin(listener.accept());
        for _ in 0..10 {
            assert!(futures::poll!(second.as_mut()).is_pending());
            tokio::task::yield_now().await;
        }
        drop(first);
        tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("accepted once the first connection closed");
    }
}
