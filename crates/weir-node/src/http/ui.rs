//! `GET /ui`: the live dashboard, plain HTML, CSS and JavaScript compiled into the binary, so it works with no internet and no build step.

use std::sync::Arc;

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::dashboard;
use crate::state::NodeState;

const PAGE: &str = include_str!("../../ui/index.html");
const SCRIPT: &str = include_str!("../../ui/dashboard.js");
const STYLE: &str = include_str!("../../ui/dashboard.css");
const ICON: &str = include_str!("../../ui/icon.svg");

/// The page loads nothing but these files and its own JSON: no inline
/// script, no other origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes; mounted only with `--ui true`.
pub fn routes() -> Router<Arc<NodeState>> {
    Router::new()
        .route(
            "/ui",
            get(|| async { asset(PAGE, "text/html; charset=utf-8") }),
        )
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }))
        .route(
            "/ui/dashboard.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/dashboard.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route(
            "/ui/icon.svg",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
        .route("/ui/api/cluster", get(dashboard::get_dashboard))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 4] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        // A new binary may ship a new page: always ask again.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body).into_response()
}
