//! gRPC connections served thread-per-core: one one-thread runtime per core, each accepting from the same listening socket.
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
use std::net::TcpListener as StdListener;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};

/// Serves on `threads` threads, each running `serve` on its own
/// one-thread runtime with its own handle on `listener`'s socket (the
/// kernel gives each connection to one of them) and the one pool of
/// `max_connections` slots; resolves once every thread has ended.
///
/// A thread that cannot start its runtime or register the socket logs it
/// and ends; the others serve on.
pub async fn serve<S, F>(
    threads: usize,
    listener: TcpListener,
    max_connections: usize,
    serve: S,
) -> io::Result<()>
where
    S: Fn(TcpListener, Arc<Semaphore>) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + 'static,
{
    let socket = listener.into_std()?;
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    let serve = Arc::new(serve);
    let mut ended = Vec::with_capacity(threads);
    for i in 0..threads.max(1) {
        let socket = socket.try_clone()?;
        let (serve, slots) = (serve.clone(), slots.clone());
        let (done, wait) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("weir-grpc-{i}"))
            .spawn(move || {
                // Dropped when the thread ends, however it ends.
                let _done = done;
                run(socket, slots, &*serve);
            })?;
        ended.push(wait);
    }
    for wait in ended {
        let _ = wait.await;
    }
    Ok(())
}

fn run<S, F>(socket: StdListener, slots: Arc<Semaphore>, serve: &S)
where
    S: Fn(TcpListener, Arc<Semaphore>) -> F,
    F: Future<Output = ()>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return tracing::error!(error = %e, "cannot start a gRPC thread's runtime"),
    };
    runtime.block_on(async move {
        match TcpListener::from_std(socket) {
            Ok(listener) => serve(listener, slots).await,
            Err(e) => tracing::error!(error = %e, "cannot register the gRPC listener"),
        }
    });
}
