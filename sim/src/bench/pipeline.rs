//! The 100-item weir.v1 Check in one process, without its transport: what
//! `benches/pipeline.rs` times and `examples/pipeline_count.rs` counts the
//! instructions of (docs/performance.md, "The 100-item call without its
//! transport").
//!
//! Each call decodes one of a few hundred encoded requests (100 items,
//! each a key drawn from 100,000 as weir-bench draws them), runs a
//! handler, and encodes the answer, on one thread:
//!
//! - the node: `RateLimiterService` of a node started in process with the
//!   rules `bench/edges.sh` serves (the admitting rule's window an hour
//!   instead of a minute), the owner strategy on a ring of one, on its own
//!   codec (`weir_proto::check_wire`), as `weir serve` runs;
//! - the counting reference (`weir-bare --grpc-counting`), which bumps one
//!   counter per item's key and decides nothing;
//! - the plain reference, which answers every item without a counter.
//!
//! The references decode and encode with prost, as their servers do.
//!
//! The same for Envoy's ShouldRateLimit with the one-descriptor request
//! `bench/edges.sh` sends: the node's `EnvoyRls`, writing its answer's
//! bytes itself, and the bare RLS responder, which answers with the same
//! fields deciding nothing, encoded by prost; and
//! for `POST /v1/check` with the bodies `bench/wrk/check.lua` sends: the
//! node's router, and the axum reference, which parses the same JSON and
//! bumps one counter.

use std::future::Future;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http;
use axum::Router;
use prost::Message;
use tokio::runtime::Runtime;
use tower::ServiceExt;
use weir_node::grpc::{EnvoyRls, RateLimiterService};
use weir_node::{Node, NodeState, ServeConfig};
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use weir_proto::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, RateLimitRequest, RateLimitResponse,
};
use weir_proto::prost;
use weir_proto::weir::v1::rate_limiter_server::RateLimiter;
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResponse};
use weir_proto::{check_wire, rls_wire};

use super::keys::{worker_rng, Keys};
use super::reference::grpc::DENY_DOMAIN;
use super::requests::{check1, rls, RULES};
use super::ROUTE;

pub const ITEMS: usize = 100;
const KEYS: usize = 100_000;
/// Encoded requests cycled through: 40,000 keys' worth, so the counters
/// touched are spread over the table as weir-bench's random draws spread them.
pub const BODIES: usize = 400;

/// The rules `bench/edges.sh` gives the node, with the admitting rule's
/// window an hour instead of a minute: each key's window then rolls once an
/// hour, so two runs (or an instruction count) do the same work whenever
/// they start.
fn edges_rules_by_the_hour() -> String {
    let minute = r#"window    = "60s""#;
    assert!(RULES.contains(minute), "the bench rules' admitting window");
    RULES.replacen(minute, r#"window    = "1h""#, 1)
}

/// `n` keys of 100,000, drawn as weir-bench draws them.
fn drawn_keys(n: usize) -> Vec<String> {
    let keys = Keys::new(KEYS);
    let mut rng = worker_rng(7, 0);
    (0..n).map(|_| keys.pick(&mut rng).to_owned()).collect()
}

/// Each item a key drawn as weir-bench draws them, on its route.
pub fn bodies() -> Vec<Vec<u8>> {
    drawn_keys(BODIES * ITEMS)
        .chunks(ITEMS)
        .map(|keys| {
            let items = keys
                .iter()
                .map(|key| CheckItem {
                    key: key.clone(),
                    route: ROUTE.to_owned(),
                    cost: Some(1),
                    ..Default::default()
                })
                .collect();
            CheckRequest { items }.encode_to_vec()
        })
        .collect()
}

/// A gRPC handler (weir.v1 Check, or Envoy's ShouldRateLimit) as its
/// server runs it: from the encoded request to the encoded answer, through
/// the codec that server uses.
pub trait Handler {
    fn answer(&self, body: &[u8]) -> impl Future<Output = Vec<u8>>;
}

/// A weir.v1 Check handler on prost's messages and codec: the bare references.
pub struct Prost<S>(pub S);

impl<S: RateLimiter> Handler for Prost<S> {
    async fn answer(&self, body: &[u8]) -> Vec<u8> {
        let request = CheckRequest::decode(body).expect("a request this bench encoded");
        let answer = self
            .0
            .check(tonic::Request::new(request))
            .await
            .expect("a well-formed batch");
        answer.into_inner().encode_to_vec()
    }
}

/// The node's handler on its own codec.
impl Handler for RateLimiterService {
    async fn answer(&self, body: &[u8]) -> Vec<u8> {
        // Copied once, where tonic hands its buffer over without a copy.
        let request = check_wire::Request::new(Bytes::copy_from_slice(body))
            .expect("a request this bench encoded");
        let answer =
            check_wire::rate_limiter_server::RateLimiter::check(self, tonic::Request::new(request))
                .await
                .expect("a well-formed batch");
        answer.into_inner().into_bytes()
    }
}

/// Whether an encoded answer admits every item: read apart from the
/// calls that are timed or counted.
pub fn all_admitted(answer: &[u8]) -> bool {
    let answer = CheckResponse::decode(answer).expect("an answer a handler encoded");
    answer.results.iter().all(|r| r.allowed)
}

/// The RLS request `bench/edges.sh` sends (one `user_id` descriptor), to
/// domain `bench` or, `denied`, to the domain the rules deny.
pub fn rls_body(denied: bool) -> Vec<u8> {
    rls(if denied { DENY_DOMAIN } else { "bench" }).encode_to_vec()
}

/// The 1-item Check `bench/edges.sh` sends (key `u1`), on the bench route
/// or, `denied`, on the route the rules deny.
pub fn one_item_body(denied: bool) -> Vec<u8> {
    check1(if denied { DENY_DOMAIN } else { ROUTE }).encode_to_vec()
}

/// Envoy's bare RLS responder on prost's messages and codec.
pub struct ProstRls<S>(pub S);

impl<S: RateLimitService> Handler for ProstRls<S> {
    async fn answer(&self, body: &[u8]) -> Vec<u8> {
        let request = RateLimitRequest::decode(body).expect("a request this bench encoded");
        let answer = self
            .0
            .should_rate_limit(tonic::Request::new(request))
            .await
            .expect("a well-formed request");
        answer.into_inner().encode_to_vec()
    }
}

/// The node's RLS: prost's decoding once the descriptors are counted, its
/// own answer's bytes (`weir_proto::rls_wire`).
impl Handler for EnvoyRls {
    async fn answer(&self, body: &[u8]) -> Vec<u8> {
        // Copied once, where tonic hands its buffer over without a copy.
        let request = rls_wire::Request::new(Bytes::copy_from_slice(body))
            .expect("a request this bench encoded");
        let answer = rls_wire::rate_limit_service_server::RateLimitService::should_rate_limit(
            self,
            tonic::Request::new(request),
        )
        .await
        .expect("a well-formed request");
        answer.into_inner().0
    }
}

/// Whether an encoded RLS answer is OK: read apart from the calls that are
/// timed or counted.
pub fn rls_ok(answer: &[u8]) -> bool {
    let answer = RateLimitResponse::decode(answer).expect("an answer a handler encoded");
    answer.overall_code == Code::Ok as i32
}

/// The bodies `bench/wrk/check.lua` sends: each a key of 100,000 drawn
/// as weir-bench draws them, on the bench route or, `denied`, on the
/// route the rules deny.
pub fn http_bodies(denied: bool) -> Vec<Bytes> {
    let route = if denied { DENY_DOMAIN } else { ROUTE };
    drawn_keys(BODIES)
        .iter()
        .map(|key| format!(r#"{{"key":"{key}","route":"{route}","cost":1}}"#).into())
        .collect()
}

/// `POST /v1/check` through `app`: the answer body's length,
/// and whether it was 200.
pub async fn call_http(app: &Router, body: &Bytes) -> (usize, bool) {
    let request = http::Request::post("/v1/check")
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(Body::from(body.clone()))
        .expect("a request this bench built");
    let answer = app.clone().oneshot(request).await.expect("infallible");
    let ok = answer.status() == http::StatusCode::OK;
    let body = axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .expect("an answer in memory");
    (body.len(), ok)
}

/// A node started in process on the edges rules, and the runtime it runs
/// on: one worker for its own tasks (gossip, sweeps), the calls made on
/// the caller's thread through `block_on`.
pub struct InProcess {
    rt: Runtime,
    node: Option<Node>,
    // Removed when dropped: the node has read it by then.
    _rules: tempfile::NamedTempFile,
}

impl InProcess {
    pub fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let rules = tempfile::NamedTempFile::new().expect("a rules file");
        std::fs::write(rules.path(), edges_rules_by_the_hour()).expect("rules written");
        let node = rt
            .block_on(Node::start(ServeConfig {
                rules_file: Some(rules.path().to_path_buf()),
                ..ServeConfig::ephemeral()
            }))
            .expect("node starts");
        InProcess {
            rt,
            node: Some(node),
            _rules: rules,
        }
    }

    fn state(&self) -> Arc<NodeState> {
        let node = self.node.as_ref().expect("running until dropped");
        node.state().clone()
    }

    pub fn service(&self) -> RateLimiterService {
        RateLimiterService::new(self.state())
    }

    pub fn rls_service(&self) -> EnvoyRls {
        EnvoyRls::new(self.state())
    }

    /// The node's HTTP endpoints, as `weir serve` routes them.
    pub fn router(&self) -> Router {
        weir_node::http::router(self.state())
    }

    /// One call of `handler` on `body`: the encoded answer.
    pub fn run(&self, handler: &impl Handler, body: &[u8]) -> Vec<u8> {
        self.rt.block_on(handler.answer(body))
    }

    /// One `POST /v1/check`, as [`call_http`] makes it.
    pub fn run_http(&self, app: &Router, body: &Bytes) -> (usize, bool) {
        self.rt.block_on(call_http(app, body))
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            self.rt.block_on(node.shutdown());
        }
    }
}
