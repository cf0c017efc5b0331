//! Client connections: at most N open per listener, TLS when configured, handshakes off the accept loop.

mod capped;
mod dealt;
mod first_byte;
mod watch;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::AsyncReadExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::{Connected, TcpConnectInfo};
use weir_cluster::net::direct::{is_direct, DirectServer};
use weir_cluster::net::peer_tls::PeerTls;

use first_byte::FirstByte;

pub use capped::{slots, CappedListener, CappedStream};
pub use dealt::{deal, Dealt};
use watch::Watch;
pub use watch::{Activity, Busy};

/// How long a connection may take and sit: `head` for a TLS handshake and
/// for an HTTP/2 client's preface and SETTINGS, `idle` with no request,
/// `stall` with requests in flight of which none ends (checked from the
/// watch's next timer firing, at most `idle` away, to one `stall` later).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub head: Duration,
    pub idle: Duration,
    pub stall: Duration,
}

/// One accepted connection, holding its slot until dropped.
pub struct Conn {
    io: Io,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    watch: Watch,
}

/// What a gRPC request learns of its connection: the address, as tonic
/// reports it, and the activity the server counts requests on.
#[derive(Clone)]
pub struct ConnInfo {
    pub tcp: TcpConnectInfo,
    pub activity: Arc<Activity>,
}

enum Io {
    Plain(CappedStream),
    Tls(Box<FirstByte<TlsStream<CappedStream>>>),
}

/// Where a listener's TLS comes from.
#[derive(Clone)]
pub enum Handshake {
    /// The client ports: one certificate, fixed at start.
    Fixed(TlsAcceptor),
    /// The peer port: mutual TLS, its files reloaded while serving; each
    /// connection takes the configuration in force when it is accepted.
    Peers(Arc<PeerTls>),
}

impl Handshake {
    fn acceptor(&self) -> TlsAcceptor {
        match self {
            Handshake::Fixed(a) => a.clone(),
            Handshake::Peers(p) => TlsAcceptor::from(p.server()),
        }
    }
}

impl Conn {
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// Where the server counts this connection's requests.
    pub fn activity(&self) -> Arc<Activity> {
        self.watch.activity().clone()
    }
}

/// Accepts on `listener` until `stop` resolves, then closes it (new
/// connections are refused from then on) and ends the stream. Connections
/// come out in the order their TLS handshakes finish.
///
/// A TLS handshake runs in a task of its own, bounded by the head timeout:
/// on the accept loop, one client that opens a connection and says nothing
/// would hold up every other client. Every connection is then watched
/// (`watch.rs`): an HTTP/2 client's preface and SETTINGS must arrive
/// within the head timeout too, and a connection with no request for the
/// idle timeout is closed.
///
/// With `direct`, a connection whose first byte (inside TLS, under TLS)
/// asks for direct peer calls (`weir_cluster::net::direct`) is served by
/// it instead, in a task of its own, which closes it once `stop` resolves
/// (answering the calls it has read); its first byte must come within the
/// head timeout.
pub fn incoming<L>(
    mut listener: L,
    tls: Option<Handshake>,
    direct: Option<DirectServer>,
    timeouts: Timeouts,
    stop: impl Future<Output = ()> + Send + 'static,
) -> mpsc::Receiver<Conn>
where
    L: Listener<Io = CappedStream, Addr = SocketAddr> + Send + 'static,
{
    // Small: a connection waiting here already holds a slot.
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        tokio::pin!(stop);
        // Direct connections begin to close when the loop ends (this
        // sender is dropped): a stopped node answers the calls it has
        // read, and takes no more.
        let (_open, closing) = tokio::sync::watch::channel(());
        loop {
            let stream = tokio::select! {
                _ = &mut stop => return,
                _ = tx.closed() => return,
                (stream, _) = listener.accept() => stream,
            };
            let (local, remote) = (
                stream.tcp().local_addr().ok(),
                stream.tcp().peer_addr().ok(),
            );
            // The clock starts at accept: the handshake's time counts
            // against the head timeout of the HTTP/2 start as well.
            let watch = Watch::new(timeouts);
            let Some(acceptor) = tls.as_ref().map(Handshake::acceptor) else {
                if let Some(direct) = &direct {
                    let mut closing = closing.clone();
                    let closing = async move {
                        let _ = closing.changed().await;
                    };
                    tokio::spawn(divert(
                        stream,
                        direct.clone(),
                        timeouts.head,
                        tx.clone(),
                        closing,
                        move |io| Conn {
                            io: Io::Plain(io),
                            local,
                            remote,
                            watch,
                        },
                    ));
                    continue;
                }
                let conn = Conn {
                    io: Io::Plain(stream),
                    local,
                    remote,
                    watch,
                };
                if tx.send(conn).await.is_err() {
                    return;
                }
                continue;
            };
            let tx = tx.clone();
            let direct = direct.clone();
            let mut closing = closing.clone();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(timeouts.head, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        return tracing::debug!(?remote, error = %e, "TLS handshake failed")
                    }
                    Err(_) => return tracing::debug!(?remote, "TLS handshake timed out"),
                };
                let Some(direct) = direct else {
                    let conn = Conn {
                        io: Io::Tls(Box::new(FirstByte::new(None, tls))),
                        local,
                        remote,
                        watch,
                    };
                    let _ = tx.send(conn).await;
                    return;
                };
                let closing = async move {
                    let _ = closing.changed().await;
                };
                divert_tls(tls, direct, timeouts.head, tx, closing, move |io| Conn {
                    io: Io::Tls(Box::new(io)),
                    local,
                    remote,
                    watch,
                })
                .await;
            });
        }
    });
    rx
}

/// Serves `stream` as a direct peer connection if its first byte says it
/// is one, or passes it on as a connection for the gRPC server.
async fn divert(
    stream: CappedStream,
    direct: DirectServer,
    head: Duration,
    tx: mpsc::Sender<Conn>,
    closing: impl Future<Output = ()>,
    conn: impl FnOnce(CappedStream) -> Conn,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(head, stream.tcp().peek(&mut first)).await {
        Ok(Ok(1)) if is_direct(first[0]) => direct.serve(stream, head, closing).await,
        Ok(Ok(1)) => {
            let _ = tx.send(conn(stream)).await;
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "a connection failed before its first byte"),
        Err(_) => tracing::debug!("a connection sent nothing within the head timeout"),
    }
}

/// [`divert`] for a connection under TLS: its first byte is read through
/// the session (it cannot be peeked) and handed on with the stream.
async fn divert_tls(
    mut tls: TlsStream<CappedStream>,
    direct: DirectServer,
    head: Duration,
    tx: mpsc::Sender<Conn>,
    closing: impl Future<Output = ()>,
    conn: impl FnOnce(FirstByte<TlsStream<CappedStream>>) -> Conn,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(head, tls.read(&mut first)).await {
        Ok(Ok(1)) if is_direct(first[0]) => {
            let io = FirstByte::new(Some(first[0]), tls);
            direct.serve(io, head, closing).await;
        }
        Ok(Ok(1)) => {
            let _ = tx.send(conn(FirstByte::new(Some(first[0]), tls))).await;
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "a connection failed before its first byte"),
        Err(_) => tracing::debug!("a connection sent nothing within the head timeout"),
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            tcp: TcpConnectInfo {
                local_addr: self.local,
                remote_addr: self.remote,
            },
            activity: self.activity(),
        }
    }
}

impl AsyncRead for Conn {
    /// Reads as closed (end of stream) once the watch says so: the server
    /// then ends the connection and its slot comes back.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.watch.expired(cx) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if let Poll::Ready(Ok(())) = read {
            this.watch.saw(&buf.filled()[before..]);
        }
        read
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
