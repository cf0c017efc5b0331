//! weir-core's one HTTP rendering (answers and RFC 9457 problems) as axum responses.

use axum::body::Body;
use axum::response::Response;
pub use weir_core::render::{Problem, Rendered, PROBLEM_JSON};

/// An answer rendered by weir-core, as axum sends it.
pub fn respond(r: Rendered) -> Response {
    let mut res = Response::new(Body::from(r.body));
    *res.status_mut() = r.status;
    *res.headers_mut() = r.headers;
    res
}

/// `into_response` for weir-core's [`Problem`], which axum's trait cannot
/// be implemented for here.
pub trait ProblemResponse {
    fn into_response(self) -> Response;
}

impl ProblemResponse for Problem {
    fn into_response(self) -> Response {
        respond(self.render())
    }
}
