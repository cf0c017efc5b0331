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
