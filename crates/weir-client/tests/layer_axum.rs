//! The tower layer in front of an axum service, on an in-process limiter, over real sockets.

mod common;

use std::sync::atomic::Ordering;

use common::{counting_app, header, limiter, per_client, serve, RATE_LIMIT_HEADERS};
use weir_client::layer::PROBLEM_JSON;
use weir_client::{KeyExtractor, RateLimitLayer};

#[tokio::test]
async fn denied_request_gets_429_with_every_header_and_never_reaches_the_service() {
    let layer = RateLimitLayer::new(limiter(&per_client(3)), KeyExtractor::header("x-client-id"));
    let stats = layer.stats();
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let http = reqwest::Client::new();
    let get = || {
        http.get(format!("http://{addr}/hello"))
            .header("x-client-id", "cust_42")
            .send()
    };

    for expected_remaining in ["2", "1", "0"] {
        let res = get().await.unwrap();
        assert_eq!(res.status(), 200);
        for h in RATE_LIMIT_HEADERS {
            assert!(header(&res, h).is_some(), "allowed response lacks {h}");
        }
        assert_eq!(header(&res, "ratelimit-limit"), Some("3"));
        assert_eq!(
            header(&res, "ratelimit-remaining"),
            Some(expected_remaining)
        );
        assert_eq!(
            header(&res, "retry-after"),
            None,
            "Retry-After is for denials only"
        );
        assert_eq!(res.text().await.unwrap(), "hello");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    for _ in 0..5 {
        let res = get().await.unwrap();
        assert_eq!(res.status(), 429);
        for h in RATE_LIMIT_HEADERS {
            assert!(header(&res, h).is_some(), "429 lacks {h}");
        }
        let retry_after: u64 = header(&res, "retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
        assert_eq!(header(&res, "ratelimit-remaining"), Some("0"));
        assert_eq!(header(&res, "content-type"), Some(PROBLEM_JSON));
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["allowed"], false);
        assert_eq!(body["limit"], 3);
        assert_eq!(body["rule"], "per-client");
        assert!(body["retry_after_ms"].as_u64().unwrap() > 0);
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "a denied request reached the service"
    );
    let s = stats.snapshot();
    assert_eq!((s.allowed, s.denied), (3, 5));
}

#[tokio::test]
async fn keys_are_counted_apart() {
    let layer = RateLimitLayer::new(limiter(&per_client(1)), KeyExtractor::header("x-client-id"));
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let http = reqwest::Client::new();
    for (key, status) in [("a", 200), ("b", 200), ("a", 429), ("b", 429), ("c", 200)] {
        let res = http
            .get(format!("http://{addr}/hello"))
            .header("x-client-id", key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), status, "key {key}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn missing_key_header_is_a_400_problem_naming_the_field() {
    let layer = RateLimitLayer::new(limiter(&per_client(3)), KeyExtractor::header("x-client-id"));
    let stats = layer.stats();
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let res = reqwest::get(format!("http://{addr}/hello")).await.unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(header(&res, "content-type"), Some(PROBLEM_JSON));
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["field"], "key");
    assert!(body["detail"].as_str().unwrap().contains("x-client-id"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(stats.snapshot().invalid, 1);
}

#[tokio::test]
async fn overlong_key_is_a_400_naming_key_not_a_429() {
    let layer = RateLimitLayer::new(limiter(&per_client(3)), KeyExtractor::header("x-client-id"));
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let res = reqwest::Client::new()
        .get(format!("http://{addr}/hello"))
        .header("x-client-id", "k".repeat(300))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["field"], "key");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn peer_ip_key_limits_each_address() {
    let rules = r#"
        [[rule]]
        name      = "per-ip"
        by        = "ip"
        algorithm = "fixed_window"
        limit     = 2
        window    = "60s"
    "#;
    let layer = RateLimitLayer::new(limiter(rules), KeyExtractor::PeerIp);
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let statuses: Vec<u16> = futures::future::join_all((0..3).map(|_| async {
        reqwest::get(format!("http://{addr}/hello"))
            .await
            .unwrap()
            .status()
            .as_u16()
    }))
    .await;
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, [200, 200, 429], "{statuses:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn unlimited_route_passes_without_headers() {
    let rules = r#"
        [[rule]]
        name      = "charges"
        route     = "POST /v1/charges"
        algorithm = "fixed_window"
        limit     = 1
        window    = "60s"
    "#;
    let layer = RateLimitLayer::new(limiter(rules), KeyExtractor::header("x-client-id"));
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    for _ in 0..3 {
        let res = reqwest::Client::new()
            .get(format!("http://{addr}/hello"))
            .header("x-client-id", "a")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "ratelimit-limit"), None);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn jittered_retry_after_stays_between_base_and_twice_base() {
    // A log's wait runs from the admitted request, so the base is close to
    // an hour whenever the test runs; a fixed window's base would be a
    // second or two near a minute's end, where whole-second jitter cannot
    // vary.
    let rules = r#"
        [[rule]]
        name      = "per-client"
        algorithm = "sliding_window_log"
        limit     = 1
        window    = "1h"
    "#;
    let layer = RateLimitLayer::new(limiter(rules), KeyExtractor::header("x-client-id"))
        .jitter_retry_after(true);
    let (app, _) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let http = reqwest::Client::new();
    let mut seen = Vec::new();
    for i in 0..40 {
        let res = http
            .get(format!("http://{addr}/hello"))
            .header("x-client-id", "j")
            .send()
            .await
            .unwrap();
        if i == 0 {
            continue;
        }
        assert_eq!(res.status(), 429);
        let base: u64 = header(&res, "ratelimit-reset").unwrap().parse().unwrap();
        let ra: u64 = header(&res, "retry-after").unwrap().parse().unwrap();
        assert!(
            ra + 1 >= base && ra <= 2 * base + 1,
            "Retry-After {ra}, base {base}"
        );
        seen.push(ra);
    }
    assert!(
        seen.iter().any(|&s| s != seen[0]),
        "Retry-After never varied: {seen:?}"
    );
}
