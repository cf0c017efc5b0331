//! Client connections: at most N open per listener, TLS when configured, handshakes off the accept loop.

mod capped;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::{Connected, TcpConnectInfo};

pub use capped::{CappedListener, CappedStream};

/// One accepted connection, holding its slot until dropped.
pub struct Conn {
    io: Io,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
}

enum Io {
    Plain(CappedStream),
    Tls(Box<TlsStream<CappedStream>>),
}

impl Conn {
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }
}

/// Accepts on `listener` until `stop` resolves, then closes it (new
/// connections are refused from then on) and ends the stream. Connections
/// come out in the order their TLS handshakes finish.
///
/// A TLS handshake runs in a task of its own, bounded by `handshake_timeout`:
/// on the accept loop, one client that opens a connection and says nothing
/// would hold up every other client.
///
/// `preface` bytes (the HTTP/2 client preface, for gRPC) must arrive on a
/// plaintext connection within the same timeout before it is handed on:
/// the HTTP/2 server would otherwise wait for them with no deadline.
pub fn incoming(
    listener: TcpListener,
    max_connections: usize,
    tls: Option<TlsAcceptor>,
    handshake_timeout: Duration,
    preface: usize,
    stop: impl Future<Output = ()> + Send + 'static,
) -> mpsc::Receiver<Conn> {
    // Small: a connection waiting here already holds a slot.
    let (tx, rx) = mpsc::channel(64);
    let mut listener = CappedListener::new(listener, max_connections);
    tokio::spawn(async move {
        tokio::pin!(stop);
        loop {
            let stream = tokio::select! {
                _ = &mut stop => return,
                _ = tx.closed() => return,
                (stream, _) = listener.accept() => stream,
            };
            let Some(acceptor) = tls.clone() else {
                let (local, remote) = (
                    stream.tcp().local_addr().ok(),
                    stream.tcp().peer_addr().ok(),
                );
                let conn = Conn {
                    io: Io::Plain(stream),
                    local,
                    remote,
                };
                if preface == 0 {
                    if tx.send(conn).await.is_err() {
                        return;
                    }
                    continue;
                }
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Io::Plain(s) = &conn.io else { return };
                    match tokio::time::timeout(handshake_timeout, arrived(s.tcp(), preface)).await {
                        Ok(true) => {
                            let _ = tx.send(conn).await;
                        }
                        _ => tracing::debug!(?remote, "no preface in time; closing"),
                    }
                });
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let (local, remote) = (
                    stream.tcp().local_addr().ok(),
                    stream.tcp().peer_addr().ok(),
                );
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let conn = Conn {
                            io: Io::Tls(Box::new(tls)),
                            local,
                            remote,
                        };
                        let _ = tx.send(conn).await;
                    }
                    Ok(Err(e)) => tracing::debug!(?remote, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(?remote, "TLS handshake timed out"),
                }
            });
        }
    });
    rx
}

/// Waits until `n` bytes can be read without consuming them; false if the
/// peer closed first.
async fn arrived(tcp: &tokio::net::TcpStream, n: usize) -> bool {
    let mut buf = vec![0u8; n];
    loop {
        match tcp.peek(&mut buf).await {
            Ok(k) if k >= n => return true,
            Ok(0) | Err(_) => return false,
            // Part of it is here; peek would return at once again, so wait
            // a little for the rest instead of spinning.
            Ok(_) => tokio::time::sleep(PEEK_AGAIN).await,
        }
    }
}

const PEEK_AGAIN: Duration = Duration::from_millis(5);

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.local,
            remote_addr: self.remote,
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
