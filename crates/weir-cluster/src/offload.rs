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
    tokio::task::spawn_blocking(f).await.ok()
}
