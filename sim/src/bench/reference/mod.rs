//! The bare reference servers, built on the node's own stack so a ratio to them isolates weir's work: a hand-written HTTP/1.1 responder, an axum check handler, and bare tonic RateLimiter (plain and counting) and RLS services.
//!
//! Each answers with the bytes the node sends for the same request (the
//! same headers, body fields and descriptor statuses) without deciding.
//! The axum handler and the counting RateLimiter also bump one counter per
//! key: the cheapest honest check, which pays the memory access to a
//! key's counter that any limiter pays.
//! `weir-bare` serves them in a process of their own; `weir-bench
//! --reference` starts them inside the bench.

pub mod axum_check;
pub mod grpc;
pub mod raw_http;

pub use axum_check::bare_axum;
pub use grpc::bare_grpc;
pub use raw_http::bare_http;

use std::future::Future;
use std::net::SocketAddr;

use dashmap::DashMap;
use tokio::net::TcpListener;

/// One counter per key, as the cheapest honest references keep them.
#[derive(Default)]
pub struct Counts(DashMap<String, u64>);

impl Counts {
    /// Adds `cost` to `key`'s counter; its new value.
    pub fn bump(&self, key: &str, cost: u64) -> u64 {
        let mut c = match self.0.get_mut(key) {
            Some(c) => c,
            None => self.0.entry(key.to_string()).or_insert(0),
        };
        *c += cost;
        *c
    }
}

/// Binds 127.0.0.1 on a free port and spawns `serve` on it; the address.
/// The listener is bound before this returns, so the first call cannot
/// beat the server to its port.
async fn on_loopback<F>(serve: impl FnOnce(TcpListener) -> F) -> SocketAddr
where
    F: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(serve(listener));
    addr
}
