//! Arbitrary weir.v1 Check batches and Envoy RateLimitRequests through a real node's gRPC port: never a panic, only typed answers.
//!
//! A handler that panics surfaces as UNKNOWN or INTERNAL (or a broken
//! connection), so allowing only the codes weir documents catches it.
//! Bounded for CI by PROPTEST_CASES; a long run is
//! `PROPTEST_CASES=1000000 cargo test -p weir-tests --test fuzz_rls --release`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tonic::transport::Channel;
use tonic::Code;
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::Code as RlsCode;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest, ErrorCode};
use weir_tests::{proptest_cases, TestNode};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 3
window    = "60s"

[[rule]]
name      = "per-ip"
by        = "ip"
algorithm = "leaky_bucket"
limit     = 5
window    = "1s"
"#;

/// Small, so generated batches cross it.
const MAX_BATCH: usize = 6;

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop::sample::select(vec![
            "cust_42",
            "POST /v1/charges",
            "free",
            "203.0.113.9",
            "::1",
            "not-an-ip",
            "a\u{0}b",
            "\u{7f}",
        ])
        .prop_map(String::from),
        any::<String>(),
        "[a-z]{250,300}",
    ]
}

fn big_or_small_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![0u64, 1, 2, 3, 4, 5, 6, u64::from(u32::MAX), u64::MAX]),
        any::<u64>(),
    ]
}

fn item() -> impl Strategy<Value = CheckItem> {
    (
        string(),
        string(),
        prop::option::of(big_or_small_u64()),
        string(),
        string(),
        prop::option::of(big_or_small_u64()),
    )
        .prop_map(|(key, route, cost, tier, ip, max_delay_ms)| CheckItem {
            key,
            route,
            cost,
            tier,
            ip,
            limit: None,
            max_delay_ms,
            refund: false,
        })
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    let entry_key = prop_oneof![
        4 => prop::sample::select(vec![
            "client", "key", "client_id", "generic_key", "ip", "remote_address", "tier", "route",
            "path",
        ])
        .prop_map(String::from),
        1 => string(),
    ];
    let entries = prop::collection::vec(
        (entry_key, string()).prop_map(|(key, value)| Entry { key, value }),
        0..4,
    );
    let limit = prop::option::of(
        (
            prop_oneof![
                prop::sample::select(vec![0u32, 1, 2, u32::MAX]),
                any::<u32>()
            ],
            -1i32..9,
        )
            .prop_map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
    );
    (entries, limit, prop::option::of(big_or_small_u64())).prop_map(
        |(entries, limit, hits_addend)| RateLimitDescriptor {
            entries,
            limit,
            hits_addend,
            is_negative_hits: false,
        },
    )
}

fn rls_request() -> impl Strategy<Value = RateLimitRequest> {
    (
        string(),
        prop::collection::vec(descriptor(), 0..MAX_BATCH + 2),
        prop_oneof![
            prop::sample::select(vec![0u32, 1, 7, u32::MAX]),
            any::<u32>()
        ],
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

async fn check_batch(
    client: &mut RateLimiterClient<Channel>,
    items: Vec<CheckItem>,
) -> Result<(), TestCaseError> {
    let n = items.len();
    match client.check(CheckRequest { items }).await {
        Ok(res) => {
            prop_assert!((1..=MAX_BATCH).contains(&n), "{n} items answered");
            let results = res.into_inner().results;
            prop_assert_eq!(results.len(), n);
            for r in results {
                match r.error {
                    Some(e) => {
                        let code = ErrorCode::try_from(e.code);
                        prop_assert!(
                            matches!(
                                code,
                                Ok(ErrorCode::InvalidArgument
                                    | ErrorCode::CostExceedsLimit
                                    | ErrorCode::Unavailable)
                            ),
                            "item error code {}",
                            e.code
                        );
                        prop_assert!(!r.allowed, "an item error is not an admission");
                    }
                    None => prop_assert!(r.allowed || r.limited, "a denial names its limit"),
                }
            }
        }
        Err(s) => {
            prop_assert!(
                matches!(s.code(), Code::InvalidArgument | Code::OutOfRange),
                "{:?}: {}",
                s.code(),
                s.message()
            );
            prop_assert!(
                n == 0 || n > MAX_BATCH,
                "{n} items refused: {}",
                s.message()
            );
        }
    }
    Ok(())
}

async fn should_rate_limit(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> Result<(), TestCaseError> {
    let n = req.descriptors.len();
    match client.should_rate_limit(req).await {
        Ok(res) => {
            prop_assert!((1..=MAX_BATCH).contains(&n), "{n} descriptors answered");
            let res = res.into_inner();
            prop_assert_eq!(res.statuses.len(), n);
            let over = res
                .statuses
                .iter()
                .any(|s| s.code == RlsCode::OverLimit as i32);
            let overall = if over {
                RlsCode::OverLimit
            } else {
                RlsCode::Ok
            };
            prop_assert_eq!(res.overall_code, overall as i32);
        }
        Err(s) => prop_assert!(
            matches!(
                s.code(),
                Code::InvalidArgument | Code::Unavailable | Code::OutOfRange
            ),
            "{:?}: {}",
            s.code(),
            s.message()
        ),
    }
    Ok(())
}

#[test]
fn arbitrary_grpc_checks_get_typed_answers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let node = rt.block_on(TestNode::start(RULES, |c| {
        c.limits.max_batch_items = MAX_BATCH;
    }));
    let url = format!("http://{}", node.node().grpc_addr());
    let (mut weir, rls) = rt.block_on(async {
        (
            RateLimiterClient::connect(url.clone()).await.unwrap(),
            RateLimitServiceClient::connect(url).await.unwrap(),
        )
    });
    let items = prop::collection::vec(item(), 0..MAX_BATCH + 3);
    let mut runner = TestRunner::new(Config::with_cases(proptest_cases(300)));
    runner
        // Clients are handles on one channel; a clone per case shares it.
        .run(&items, |items| {
            rt.block_on(check_batch(&mut weir.clone(), items))
        })
        .unwrap();
    let mut runner = TestRunner::new(Config::with_cases(proptest_cases(300)));
    runner
        .run(&rls_request(), |req| {
            rt.block_on(should_rate_limit(&mut rls.clone(), req))
        })
        .unwrap();

    // The same connections still work: nothing was torn down by a panic.
    let after = CheckItem {
        key: "after-the-run".into(),
        ..CheckItem::default()
    };
    let res = rt
        .block_on(weir.check(CheckRequest { items: vec![after] }))
        .expect("node still answers");
    assert!(res.into_inner().results[0].allowed);
    rt.block_on(node.shutdown());
}
