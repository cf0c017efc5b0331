//! A shaping rule's delay reaches the caller: the layer holds an admitted request for it (at most the service's maximum) and the client reports it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::rules_file;
use http::{Request, Response};
use http_body_util::{Empty, Full};
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use weir_client::{CheckRequest, Client, KeyExtractor, RateLimitLayer};
use weir_core::{FakeClock, Limiter, LimiterConfig, RuleSet};
use weir_node::{Node, ServeConfig};

/// One request a second per client, up to five scheduled ahead.
const PACED: &str = r#"
[[rule]]
name      = "paced"
algorithm = "leaky_bucket"
limit     = 10
window    = "10s"
queue     = 5
"#;

fn request() -> Request<Empty<Bytes>> {
    Request::builder()
        .uri("/hello")
        .header("x-client-id", "cust_42")
        .body(Empty::new())
        .unwrap()
}

/// Under tokio's paused clock: the service runs exactly when the slot the
/// limiter scheduled comes, and a request whose slot is past the layer's
/// maximum is refused without ever reaching it (and without taking the slot).
#[tokio::test(start_paused = true)]
async fn the_layer_holds_a_shaped_request_for_its_delay_and_refuses_one_past_its_maximum() {
    // The limiter's clock stands still: every decision is at one instant,
    // so each admission is scheduled one interval after the one before.
    let limiter = Arc::new(Limiter::new(
        RuleSet::from_toml(PACED).unwrap(),
        Arc::new(FakeClock::at_secs(1_000.0)),
        LimiterConfig::default(),
    ));
    let layer = RateLimitLayer::new(limiter.clone(), KeyExtractor::header("x-client-id"))
        .max_delay(Duration::from_millis(1500));
    let stats = layer.stats();
    let called: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = called.clone();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service_fn(move |_req: Request<Empty<Bytes>>| {
            seen.lock().unwrap().push(Instant::now());
            async { Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from("hi")))) }
        });
    let start = Instant::now();

    let first = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(first.status(), 200);
    let second = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(second.status(), 200);
    let third = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(third.status(), 429, "2 s of delay, 1.5 s allowed");
    assert_eq!(third.headers()["retry-after"], "1", "0.5 s, rounded up");

    let called = called.lock().unwrap().clone();
    assert_eq!(
        called.iter().map(|t| *t - start).collect::<Vec<_>>(),
        [Duration::ZERO, Duration::from_secs(1)],
        "the second request reached the service one interval later"
    );
    let s = stats.snapshot();
    assert_eq!((s.allowed, s.delayed, s.denied), (2, 1, 1));
    // The refused request took no slot: the next one is due 2 s after
    // the first, not 3 s.
    let next = limiter
        .check(&CheckRequest::new("cust_42", "GET /hello"))
        .unwrap();
    assert_eq!(next.response().delay, Duration::from_secs(2));
}

/// The remote client carries `max_delay` to the node and reads `delay`
/// back, over gRPC and over HTTP alike.
#[tokio::test]
async fn the_client_reports_the_delay_and_sends_its_maximum_over_both_transports() {
    let mut config = ServeConfig::ephemeral();
    let rules = rules_file(PACED);
    config.rules_file = Some(rules.to_path_buf());
    let node = Node::start(config).await.unwrap();
    let clients = [
        (
            "grpc",
            Client::grpc(&format!("http://{}", node.grpc_addr())).unwrap(),
        ),
        (
            "http",
            Client::http(&format!("http://{}", node.http_addr())).unwrap(),
        ),
    ];
    for (name, client) in clients {
        let key = format!("cust-{name}");
        let first = client
            .check(CheckRequest::new(&key, "GET /"))
            .await
            .unwrap();
        assert!(first.allowed && first.delay.is_zero(), "{name}: {first:?}");
        let second = client
            .check(CheckRequest::new(&key, "GET /"))
            .await
            .unwrap();
        assert!(second.allowed, "{name}: {second:?}");
        assert!(
            second.delay > Duration::from_millis(900) && second.delay <= Duration::from_secs(1),
            "{name}: one interval behind the first: {second:?}"
        );
        let meter = CheckRequest::new(&key, "GET /").max_delay(Duration::ZERO);
        let refused = client.check(meter).await.unwrap();
        assert!(
            !refused.allowed,
            "{name}: a meter refuses what must wait: {refused:?}"
        );
        assert!(
            refused.retry_after > Duration::from_secs(1),
            "{name}: {refused:?}"
        );
        // Nothing was scheduled for the refused check.
        let third = client
            .check(CheckRequest::new(&key, "GET /"))
            .await
            .unwrap();
        assert!(third.delay <= Duration::from_secs(2), "{name}: {third:?}");
    }
    node.shutdown().await;
}

/// A decider that schedules every request 5 s out and ignores the
/// request's `max_delay`, as a node that predates the field would.
struct FarSchedule;

impl weir_core::Decide for FarSchedule {
    async fn decide(
        &self,
        _req: &CheckRequest,
    ) -> Result<weir_core::CheckResponse, weir_core::CheckError> {
        Ok(weir_core::CheckResponse {
            allowed: true,
            limited: true,
            rule: Some("far".into()),
            limit: 10,
            remaining: 5,
            delay: Duration::from_secs(5),
            ..weir_core::CheckResponse::default()
        })
    }

    fn now(&self) -> weir_core::Nanos {
        0
    }
}

#[tokio::test(start_paused = true)]
async fn a_delay_past_the_maximum_is_refused_even_when_the_decider_ignores_it() {
    let layer = RateLimitLayer::new(FarSchedule, KeyExtractor::header("x-client-id"))
        .max_delay(Duration::from_secs(1));
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_req: Request<Empty<Bytes>>| async {
            panic!("the service must not see a request it would have had to hold 5 s");
            #[allow(unreachable_code)]
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new())))
        });
    let start = Instant::now();
    let res = svc.oneshot(request()).await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "4");
    assert_eq!(Instant::now(), start, "refused at once, not after a wait");
}
