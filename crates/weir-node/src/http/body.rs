//! Reading a request body with a ceiling, so no client can make a node buffer without bound.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::problem::Problem;

/// The whole body, or 413 naming `body` once it passes `max` bytes.
///
/// A declared Content-Length over the cap is refused before a byte is read;
/// a chunked body is cut off as soon as it passes the cap.
pub async fn read_capped(headers: &HeaderMap, body: Body, max: usize) -> Result<Bytes, Problem> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(Problem::too_large(max));
    }
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::too_large(max)),
        Err(e) => Err(Problem::invalid(
            "body",
            format!("the request body could not be read: {e}"),
        )),
    }
}
