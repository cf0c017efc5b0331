//! Shared helpers for the client and layer tests: limiters, rule files, servers on ephemeral ports.
#![allow(dead_code)]

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tempfile::TempPath;
use tokio::net::TcpListener;
use weir_core::{Limiter, LimiterConfig, RuleSet, SystemClock};

/// A limiter in this process with `rules` (TOML).
pub fn limiter(rules: &str) -> Arc<Limiter> {
    Arc::new(Limiter::new(
        RuleSet::from_toml(rules).expect("test rules parse"),
        Arc::new(SystemClock::new()),
        LimiterConfig::default(),
    ))
}

/// One fixed-window rule of `limit` per minute keyed on the client.
pub fn per_client(limit: u64) -> String {
    format!(
        r#"
        [[rule]]
        name      = "per-client"
        algorithm = "fixed_window"
        limit     = {limit}
        window    = "60s"
        "#
    )
}

/// A rules file no other test shares, removed when the returned path is
/// dropped: keep it bound for as long as a node may read it.
pub fn rules_file(text: &str) -> TempPath {
    let mut file = tempfile::Builder::new()
        .prefix("weir-client-test-")
        .suffix(".toml")
        .tempfile()
        .expect("temp dir is writable");
    file.write_all(text.as_bytes())
        .expect("temp dir is writable");
    file.into_temp_path()
}

/// An axum hello-world whose handler counts how often it runs.
pub fn counting_app() -> (Router, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let app = Router::new().route(
        "/hello",
        get(move || {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                "hello"
            }
        }),
    );
    (app, calls)
}

/// Serves `app` on 127.0.0.1:0 with peer addresses recorded.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// A port nothing listens on: bound, read, released.
pub async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    addr
}

/// Polls `probe` until it returns true or `within` passes; false on timeout.
pub async fn eventually<F, Fut>(within: Duration, mut probe: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if probe().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn header<'a>(res: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    res.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The RateLimit headers every limited response carries.
pub const RATE_LIMIT_HEADERS: [&str; 8] = [
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-policy",
    "ratelimit",
];
