//! Connections served thread-per-core: one one-thread runtime per core, each serving the connections dealt to it (`accept::deal`).
//!
//! The gRPC port is served so, and HTTP/2 on the HTTP port; the bare
//! reference servers of the benchmarks (weir-sim's `weir-bare`) call this
//! too, so they are measured on the same layout.
//!
//! Why not the node's multi-thread runtime: hyper serves each HTTP/2
//! stream as a task of its own (tonic spawns it on the current runtime).
//! On a multi-thread runtime a task spawned or woken by the running one
//! goes to the worker's LIFO slot and runs next, so after the connection
//! task reads eight requests, each stream task answers and wakes the
//! connection task, which runs at once and writes that one answer: one
//! `writev` per request, and each spawn also wakes an idle worker to
//! steal. On a one-thread runtime spawned and woken tasks queue in order:
//! the eight answers are all ready when the connection task runs again
//! and go out in one write, and nothing crosses a thread
//! (docs/performance.md, "Writes and wake-ups per request").

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::accept::Dealt;

/// Serves each share on a thread of its own, named `{name}-{i}`, running
/// `serve` on a one-thread runtime; resolves once every thread has ended.
///
/// A thread that cannot start its runtime logs it and ends; the dealer
/// then passes its connections to the others.
pub async fn serve<S, F>(name: &str, shares: Vec<Dealt>, serve: S) -> io::Result<()>
where
    S: Fn(Dealt) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + 'static,
{
    let serve = Arc::new(serve);
    let mut ended = Vec::with_capacity(shares.len());
    for (i, share) in shares.into_iter().enumerate() {
        let serve = serve.clone();
        let (done, wait) = oneshot::channel::<()>();
        let thread = format!("{name}-{i}");
        std::thread::Builder::new()
            .name(thread.clone())
            .spawn(move || {
                // Dropped when the thread ends, however it ends.
                let _done = done;
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    // Called inside: `serve` spawns its accept loop.
                    Ok(runtime) => runtime.block_on(async move { serve(share).await }),
                    Err(e) => tracing::error!(error = %e, thread, "cannot start a serving thread's runtime"),
                }
            })?;
        ended.push(wait);
    }
    for wait in ended {
        let _ = wait.await;
    }
    Ok(())
}
