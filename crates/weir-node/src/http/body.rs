//! Reading a request body with a ceiling, so no client can make a node buffer without bound.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::problem::Problem;
use crate::config::InputLimits;

/// The whole body, or 413 naming `body` once it passes `--max-body-bytes`,
/// or 408 when it has not all arrived within `--body-read-timeout`.
///
/// A declared Content-Length over the cap is refused before a byte is read;
/// a chunked body is cut off as soon as it passes the cap. The timeout runs
/// over the whole body, not between chunks: a client dripping a byte at a
/// time would otherwise hold its connection for as long as it likes.
pub async fn read_capped(
    headers: &HeaderMap,
    body: Body,
    limits: &InputLimits,
) -> Result<Bytes, Problem> {
    let max = limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(Problem::too_large(max));
    }
    let collect = Limited::new(body, max).collect();
    tokio::pin!(collect);
    // A small body usually arrives with its head and is complete at the
    // first poll; only one still in flight needs the timer, whose start and
    // stop take a lock on the runtime's timer wheel.
    let read = match futures::poll!(collect.as_mut()) {
        std::task::Poll::Ready(read) => read,
        std::task::Poll::Pending => {
            let timed = tokio::time::timeout(limits.body_read_timeout, collect);
            let Ok(read) = timed.await else {
                return Err(Problem::request_timeout(limits.body_read_timeout));
            };
            read
        }
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::too_large(max)),
        Err(e) => Err(Problem::invalid(
            "body",
            format!("the request body could not be read: {e}"),
        )),
    }
}
