//! The datagram transport membership runs over: a UDP socket in production, an in-memory network in tests.

use std::io;
use std::net::SocketAddr;

use futures::future::BoxFuture;
use tokio::net::UdpSocket;

/// Sends and receives whole datagrams, as a UDP socket does. Losing one is
/// allowed (SWIM is built for it); corrupting one is not.
pub trait Datagrams: Send + Sync + 'static {
    /// The address peers reach this socket at.
    fn local_addr(&self) -> SocketAddr;
    fn send_to<'a>(&'a self, payload: &'a [u8], to: SocketAddr)
        -> BoxFuture<'a, io::Result<usize>>;
    /// The next datagram and its sender. Cancel-safe: dropping the future
    /// loses no datagram.
    fn recv_from<'a>(&'a self, buf: &'a mut [u8])
        -> BoxFuture<'a, io::Result<(usize, SocketAddr)>>;
}

/// Gossip over a real UDP socket.
pub struct UdpDatagrams {
    socket: UdpSocket,
    local: SocketAddr,
}

impl UdpDatagrams {
    pub async fn bind(addr: SocketAddr) -> io::Result<UdpDatagrams> {
        let socket = UdpSocket::bind(addr).await?;
        let local = socket.local_addr()?;
        Ok(UdpDatagrams { socket, local })
    }

    /// Takes over a bound std socket, registering it with the runtime this
    /// is called in: the one runtime that may poll it.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpDatagrams> {
        socket.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(socket)?;
        let local = socket.local_addr()?;
        Ok(UdpDatagrams { socket, local })
    }
}

impl Datagrams for UdpDatagrams {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn send_to<'a>(
        &'a self,
        payload: &'a [u8],
        to: SocketAddr,
    ) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.socket.send_to(payload, to))
    }

    fn recv_from<'a>(
        &'a self,
        buf: &'a mut [u8],
    ) -> BoxFuture<'a, io::Result<(usize, SocketAddr)>> {
        Box::pin(self.socket.recv_from(buf))
    }
}
