//! One HTTP/2 connection to a peer, called straight from the caller's task.
//!
//! tonic's `Channel` puts a worker task behind every call (a tower
//! `Buffer`): the call goes to the worker, the worker hands it to the
//! connection, and its response future comes back to the caller. On a
//! forwarded check that is two more task hand-offs before the request
//! reaches the connection, each of which can wake a sleeping worker
//! thread. Here the caller hands its request to hyper's connection task
//! directly, which is all the transport needs.
//!
//! The connection is dialled in a task of its own, so a caller that gives
//! up at its deadline does not abandon the dial for the callers after it.
//! A failed dial, or a connection that has closed, is never reused: the
//! link drops the slot and the next call dials afresh.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tonic::body::Body;

use super::peer_tls::PeerTls;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a dial ended: the connection's request handle, or why there is none.
type Dialled = Option<Result<SendRequest<Body>, String>>;

/// HTTP/2 settings of a peer connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnConfig {
    pub connect_timeout: Duration,
    /// Pings at this interval even when no call is waiting, and closes the
    /// connection when one is not answered within it.
    pub keepalive: Duration,
}

/// A peer connection as a tower service, cheap to clone: every clone calls
/// over the same connection.
#[derive(Clone)]
pub(crate) struct PeerConn {
    dialled: watch::Receiver<Dialled>,
}

impl PeerConn {
    /// Starts dialling `addr` in the background; calls wait for the dial.
    #[cfg(test)]
    pub fn dial(addr: SocketAddr, config: ConnConfig) -> PeerConn {
        Self::dial_over(addr, config, None)
    }

    /// [`PeerConn::dial`], under mutual TLS when `tls` is given.
    pub fn dial_over(addr: SocketAddr, config: ConnConfig, tls: Option<Arc<PeerTls>>) -> PeerConn {
        let (tx, dialled) = watch::channel(None);
        tokio::spawn(async move {
            let result = connect(addr, config, tls).await.map_err(|e| e.to_string());
            if let Err(e) = &result {
                tracing::debug!(%addr, error = %e, "peer dial failed");
            }
            let _ = tx.send(Some(result));
        });
        PeerConn { dialled }
    }

    /// Whether calls made now can never succeed: the dial failed, or the
    /// connection has closed since (the peer went away, or a keepalive
    /// ping went unanswered). A dial still under way is not closed.
    pub fn is_closed(&self) -> bool {
        match &*self.dialled.borrow() {
            None => false,
            Some(Ok(send)) => send.is_closed(),
            Some(Err(_)) => true,
        }
    }
}

#[cfg(test)]
impl PeerConn {
    pub fn same_connection(&self, other: &PeerConn) -> bool {
        self.dialled.same_channel(&other.dialled)
    }
}

async fn connect(
    addr: SocketAddr,
    config: ConnConfig,
    tls: Option<Arc<PeerTls>>,
) -> Result<SendRequest<Body>, BoxError> {
    let timed_out = || format!("connect timed out after {:?}", config.connect_timeout);
    let tcp = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())??;
    tcp.set_nodelay(true)?;
    match tls {
        None => handshake(addr, config, tcp).await,
        Some(tls) => {
            let stream = tokio::time::timeout(config.connect_timeout, tls.connect(addr.ip(), tcp))
                .await
                .map_err(|_| timed_out())??;
            handshake(addr, config, stream).await
        }
    }
}

/// Starts HTTP/2 on `io` and its connection task.
async fn handshake<S>(
    addr: SocketAddr,
    config: ConnConfig,
    io: S,
) -> Result<SendRequest<Body>, BoxError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(config.keepalive)
        .keep_alive_timeout(config.keepalive)
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(%addr, error = %e, "peer connection closed");
        }
    });
    Ok(send)
}

impl tower::Service<http::Request<Body>> for PeerConn {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    /// Always ready: a call waits for the dial and for the connection's
    /// stream capacity itself, under its caller's deadline.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let mut dialled = self.dialled.clone();
        Box::pin(async move {
            let mut send = {
                let dialled = dialled.wait_for(Option::is_some).await?;
                match &*dialled {
                    Some(Ok(send)) => send.clone(),
                    Some(Err(e)) => return Err(e.clone().into()),
                    None => unreachable!("waited for the dial to end"),
                }
            };
            send.ready().await?;
            Ok(send.send_request(req).await?)
        })
    }
}

#[cfg(test)]
pub(super) mod tests;
