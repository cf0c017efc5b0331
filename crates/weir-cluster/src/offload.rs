//! Work over many counters run where it belongs: in place when small, on the blocking pool, off the workers that answer checks, when large.

/// Runs `f`, work over `n` items, in place when `n` is at most `in_place`,
/// else on the blocking pool; None when that task did not finish (it
/// panicked, or the runtime is shutting down).
pub(crate) async fn by_size<T: Send + 'static>(
    n: usize,
    in_place: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if n <= in_place {
        return Some(f());
    }
    blocking(f).await
}

/// Runs `f`, which may block (a DNS lookup, a large copy), on the blocking
/// pool; in place on a simulated thread, where another thread's timing
/// would decide the order of what follows.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if weir_core::determinism::simulated() {
        return Some(f());
    }
    tokio::task::spawn_blocking(f).await.ok()
}

/// Runs `f`, work that may take long (every rule divided again), here
/// and now, without holding up the tasks queued behind it: on a
/// multi-thread runtime they move to another worker for the time. In
/// place elsewhere (a current-thread runtime, a simulated thread), where
/// the caller's own thread is all there is.
pub(crate) fn off_the_workers<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi && !weir_core::determinism::simulated() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::off_the_workers;

    // One worker: a task queued behind long work on it runs only if the
    // work lets the worker's queue go to another thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn long_work_lets_the_tasks_queued_behind_it_run() {
        let ran = tokio::spawn(async {
            let (tx, rx) = mpsc::channel();
            // Queued on this worker, behind the work below.
            tokio::spawn(async move { tx.send(()).unwrap() });
            off_the_workers(|| rx.recv_timeout(Duration::from_secs(5)).is_ok())
        })
        .await
        .unwrap();
        assert!(ran, "the queued task waited for the work to end");
    }

    #[tokio::test]
    async fn on_a_current_thread_runtime_the_work_runs_in_place() {
        assert_eq!(off_the_workers(|| 7), 7);
    }
}
