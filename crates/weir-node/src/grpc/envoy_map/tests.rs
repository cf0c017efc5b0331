//! Unit tests of the Envoy mapping.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{Decision, RuleSet, Verdict, NANOS_PER_MS};
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;

use super::*;
use weir_core::AlgorithmKind;

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

fn one(r: RateLimitRequest) -> CheckRequest {
    let mut checks = to_checks(&RlsRequest::of(&r), 10).expect("valid request");
    assert_eq!(checks.len(), 1);
    checks.remove(0)
}

fn refused(r: RateLimitRequest) -> String {
    to_checks(&RlsRequest::of(&r), 10)
        .expect_err("refused")
        .path()
}

#[test]
fn every_client_alias_becomes_the_caller_key() {
    for alias in CLIENT_KEYS {
        let c = one(req(
            "edge",
            vec![desc(&[("other", "x"), (alias, "cust_42")])],
        ));
        assert_eq!(c.key, "cust_42", "alias {alias}");
    }
}

#[test]
fn ip_tier_and_route_entries_map_to_their_attributes() {
    let c = one(req(
        "edge",
        vec![desc(&[
            ("client", "c"),
            ("remote_address", "10.0.0.1"),
            ("tier", "free"),
            ("path", "/v1/charges"),
        ])],
    ));
    assert_eq!(c.ip.as_deref(), Some("10.0.0.1"));
    assert_eq!(c.tier.as_deref(), Some("free"));
    assert_eq!(c.route, "/v1/charges");
    let c = one(req("edge", vec![desc(&[("ip", "::1"), ("route", "r")])]));
    assert_eq!(c.ip.as_deref(), Some("::1"));
    assert_eq!(c.route, "r");
}

#[test]
fn route_defaults_to_the_domain() {
    let c = one(req("edge", vec![desc(&[("client", "c")])]));
    assert_eq!(c.route, "edge");
    assert_eq!(c.tier, None);
    assert_eq!(c.ip, None);
}

#[test]
fn without_a_client_entry_the_key_is_the_domain_and_every_entry() {
    let c = one(req(
        "edge",
        vec![desc(&[
            ("destination_cluster", "a"),
            ("remote_address", "10.0.0.1"),
        ])],
    ));
    assert_eq!(c.key, "edge|destination_cluster=a|remote_address=10.0.0.1");
    let other = one(req("edge", vec![desc(&[("destination_cluster", "b")])]));
    assert_ne!(c.key, other.key);
}

#[test]
fn an_empty_client_value_does_not_make_an_empty_key() {
    let c = one(req("edge", vec![desc(&[("client", ""), ("x", "1")])]));
    assert_eq!(c.key, "edge|client=|x=1");
}

#[test]
fn a_derived_key_over_the_bound_is_refused_naming_the_descriptor() {
    let long = "v".repeat(MAX_KEY_LEN);
    let ok = desc(&[("client", "c")]);
    let r = req("edge", vec![ok.clone(), desc(&[("k", &long)])]);
    assert_eq!(refused(r), "descriptors[1].entries");
    // Exactly at the bound is accepted: "edge|k=" is 7 bytes.
    let fits = "v".repeat(MAX_KEY_LEN - 7);
    assert_eq!(
        one(req("edge", vec![desc(&[("k", &fits)])])).key.len(),
        MAX_KEY_LEN
    );
}

#[test]
fn request_level_fields_are_checked_first() {
    assert_eq!(refused(req("", vec![desc(&[("client", "c")])])), "domain");
    assert_eq!(refused(req("edge", vec![])), "descriptors");
    let many = vec![desc(&[("client", "c")]); 11];
    assert_eq!(refused(req("edge", many.clone())), "descriptors");
    let ten = req("edge", many[..10].to_vec());
    assert!(to_checks(&RlsRequest::of(&ten), 10).is_ok());
}

#[test]
fn descriptor_hits_win_then_request_hits_then_one() {
    let mut d = desc(&[("client", "c")]);
    let mut r = req("edge", vec![d.clone()]);
    assert_eq!(one(r.clone()).cost, 1);
    r.hits_addend = 3;
    assert_eq!(one(r.clone()).cost, 3);
    d.hits_addend = Some(5);
    r.descriptors = vec![d.clone()];
    assert_eq!(one(r.clone()).cost, 5);
    d.hits_addend = Some(0);
    r.descriptors = vec![d];
    assert_eq!(one(r).cost, 3);
}

#[test]
fn bad_attributes_are_refused_naming_the_descriptor_field() {
    let bad_ip = desc(&[("client", "c"), ("ip", "not-an-ip")]);
    let r = req("edge", vec![desc(&[("client", "c")]), bad_ip]);
    assert_eq!(refused(r), "descriptors[1].ip");
    let long_client = "c".repeat(MAX_KEY_LEN + 1);
    let r = req(
        "edge",
        vec![desc(&[("client", &long_client)]), desc(&[("client", "c")])],
    );
    assert_eq!(refused(r), "descriptors[0].key");
    // A lone descriptor of the rule set is refused by its decision instead,
    // with the same status (tests/tests/grpc_envoy.rs), not checked twice.
    let lone = req("edge", vec![desc(&[("client", &long_client)])]);
    assert!(to_checks(&RlsRequest::of(&lone), 10).is_ok());
}

fn with_override(requests_per_unit: u32, unit: RateLimitUnit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: unit as i32,
        }),
        ..desc(&[("client", "c")])
    }
}

#[test]
fn override_counters_are_keyed_by_domain_entries_and_never_by_the_client_alone() {
    let d = |route: &str| RateLimitDescriptor {
        limit: with_override(5, RateLimitUnit::Minute).limit,
        ..desc(&[("client", "c"), ("path", route)])
    };
    let key = |domain: &str, d: RateLimitDescriptor| one(req(domain, vec![d])).key;
    assert_eq!(key("edge", d("/a")), "edge|client=c|path=/a");
    assert_ne!(
        key("edge", d("/a")),
        key("edge", d("/b")),
        "one client, two descriptors"
    );
    assert_ne!(key("edge", d("/a")), key("other", d("/a")), "two domains");
    // `|` and `=` in values cannot make two descriptors one counter.
    let two = RateLimitDescriptor {
        limit: with_override(5, RateLimitUnit::Minute).limit,
        ..desc(&[("client", "c"), ("path", "x")])
    };
    let one_crafted = RateLimitDescriptor {
        limit: with_override(5, RateLimitUnit::Minute).limit,
        ..desc(&[("client", "c|path=x")])
    };
    let crafted = key("edge", one_crafted);
    assert_ne!(key("edge", two), crafted);
    assert!(crafted.starts_with('#') && crafted.len() == 65, "{crafted}");
    // A long descriptor still gets a key within the bound.
    let long = RateLimitDescriptor {
        limit: with_override(5, RateLimitUnit::Minute).limit,
        ..desc(&[("client", "c"), ("path", &"p".repeat(400))])
    };
    assert_eq!(key("edge", long).len(), 65);
}

#[test]
fn an_override_is_a_sliding_counter_rule_over_its_unit() {
    let c = one(req("edge", vec![with_override(5, RateLimitUnit::Minute)]));
    let rule = c.limit.expect("override rule");
    assert_eq!(&*rule.name, "override:5-per-minute");
    assert_eq!(rule.algorithm, AlgorithmKind::SlidingWindowCounter);
    assert_eq!(rule.limit, 5);
    assert_eq!(rule.window, Duration::from_secs(60));
    let month = override_rule(&RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Month as i32,
    })
    .expect("valid");
    assert_eq!(month.window, Duration::from_secs(30 * 24 * 3600));
    let year = override_rule(&RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Year as i32,
    })
    .expect("valid");
    assert_eq!(year.window, Duration::from_secs(365 * 24 * 3600));
}

#[test]
fn an_override_rule_reads_back_the_same_as_a_parsed_rule() {
    let built = override_rule(&RateLimitOverride {
        requests_per_unit: 7,
        unit: RateLimitUnit::Hour as i32,
    })
    .expect("valid");
    let parsed = RuleSet::parse_tier_json(None, &format!("{{\"rules\":[{}]}}", built.to_json()))
        .expect("the built rule passes the rules parser");
    // The same limit, read back as a rule of a set: no longer carried.
    assert!(built.carried);
    let as_set_rule = weir_core::Rule {
        carried: false,
        ..built
    };
    assert_eq!(parsed, vec![as_set_rule]);
}

#[test]
fn an_override_with_no_requests_or_no_unit_is_refused() {
    let r = req("edge", vec![with_override(0, RateLimitUnit::Second)]);
    assert_eq!(refused(r), "descriptors[0].limit");
    let r = req("edge", vec![with_override(5, RateLimitUnit::Unknown)]);
    assert_eq!(refused(r), "descriptors[0].limit");
    let mut d = with_override(5, RateLimitUnit::Second);
    d.limit.as_mut().expect("set").unit = 42;
    assert_eq!(refused(req("edge", vec![d])), "descriptors[0].limit");
}

#[test]
fn a_cost_above_the_override_limit_is_refused() {
    let mut d = with_override(5, RateLimitUnit::Hour);
    d.hits_addend = Some(6);
    assert_eq!(refused(req("edge", vec![d.clone()])), "descriptors[0].cost");
    d.hits_addend = Some(5);
    assert_eq!(one(req("edge", vec![d])).cost, 5);
}

#[test]
fn rate_limit_keeps_whole_units_and_scales_the_rest_to_per_second() {
    let rl = rate_limit("r", 100, Duration::from_secs(60));
    assert_eq!((rl.requests_per_unit, rl.unit), (100, Unit::Minute as i32));
    assert_eq!(rl.name, "r");
    let rl = rate_limit("r", 9, Duration::from_secs(86_400));
    assert_eq!((rl.requests_per_unit, rl.unit), (9, Unit::Day as i32));
    let rl = rate_limit("r", 50, Duration::from_secs(10));
    assert_eq!((rl.requests_per_unit, rl.unit), (5, Unit::Second as i32));
    // 5 per 7s is 0.71/s: rounded down it would read as zero, so 1.
    let rl = rate_limit("r", 5, Duration::from_secs(7));
    assert_eq!((rl.requests_per_unit, rl.unit), (1, Unit::Second as i32));
    let rl = rate_limit("r", 10, Duration::from_millis(500));
    assert_eq!((rl.requests_per_unit, rl.unit), (20, Unit::Second as i32));
    let rl = rate_limit("r", 1 << 40, Duration::from_secs(1));
    assert_eq!(rl.requests_per_unit, u32::MAX);
}

fn verdict(limit: u32, remaining: u64, allowed: bool, at_ms: u64, reset_at: u64) -> Verdict {
    verdict_waiting(limit, remaining, allowed, at_ms, reset_at, Duration::ZERO)
}

fn verdict_waiting(
    limit: u32,
    remaining: u64,
    allowed: bool,
    at_ms: u64,
    reset_at: u64,
    retry_after: Duration,
) -> Verdict {
    let rule = override_rule(&RateLimitOverride {
        requests_per_unit: limit,
        unit: RateLimitUnit::Minute as i32,
    })
    .expect("valid");
    let decision = Decision {
        allowed,
        limit: u64::from(limit),
        remaining,
        retry_after,
        reset_at,
        delay: Duration::ZERO,
        at: at_ms * NANOS_PER_MS,
    };
    Verdict::single(Arc::new(rule), "c", decision)
}

#[test]
fn a_limited_status_carries_limit_remaining_and_time_to_reset() {
    let s = status(&verdict(10, 4, true, 1_000, 3_500));
    assert_eq!(s.code, Code::Ok as i32);
    let limit = s.current_limit.expect("limited");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (10, Unit::Minute as i32)
    );
    assert_eq!(limit.name, "override:10-per-minute");
    assert_eq!(s.limit_remaining, 4);
    let reset = s.duration_until_reset.expect("set");
    assert_eq!((reset.seconds, reset.nanos), (2, 500_000_000));
}

#[test]
fn an_unlimited_descriptor_is_ok_without_a_current_limit() {
    let unlimited = Verdict {
        allowed: true,
        applied: vec![],
    };
    let s = status(&unlimited);
    assert_eq!(s.code, Code::Ok as i32);
    assert_eq!(s.current_limit, None);
    assert_eq!(s.duration_until_reset, None);
}

#[test]
fn one_descriptor_over_its_limit_makes_the_whole_response_over_limit() {
    let ok = verdict(10, 4, true, 0, 1);
    let over = verdict(10, 0, false, 0, 1);
    let r = to_response(&[ok.clone(), ok.clone()], no_wait);
    assert_eq!(r.overall_code, Code::Ok as i32);
    let r = to_response(&[ok, over], no_wait);
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, vec![Code::Ok as i32, Code::OverLimit as i32]);
}

/// No server-side jitter: each denial shows its own wait.
fn no_wait(_: &CheckResponse) -> Option<u64> {
    None
}

#[test]
fn a_jittered_wait_replaces_the_denials_own_in_retry_after() {
    let v = [verdict_waiting(
        3,
        0,
        false,
        0,
        60_000,
        Duration::from_secs(10),
    )];
    let h = response_headers(&v, |r| Some(r.retry_after_ms() * 2 - 1));
    assert_eq!(header(&h, "Retry-After"), Some("20"), "19,999 ms rounds up");
}

fn header<'a>(h: &'a [HeaderValue], name: &str) -> Option<&'a str> {
    h.iter().find(|v| v.key == name).map(|v| v.value.as_str())
}

fn rule_of(a: Option<&Applied>) -> &str {
    &a.expect("a limit applies").rule.name
}

#[test]
fn the_most_restrictive_is_the_denial_with_the_longest_wait() {
    let ok = verdict(1, 0, true, 0, 60_000);
    let short = verdict_waiting(2, 0, false, 0, 60_000, Duration::from_secs(5));
    let long = verdict_waiting(3, 0, false, 0, 60_000, Duration::from_secs(10));
    let v = [ok, long, short];
    assert_eq!(rule_of(most_restrictive(&v)), "override:3-per-minute");
    let h = to_response(&v, no_wait).response_headers_to_add;
    assert_eq!(header(&h, "Retry-After"), Some("10"));
    assert_eq!(header(&h, "RateLimit-Limit"), Some("3"));
}

#[test]
fn without_a_denial_the_most_restrictive_has_the_least_left() {
    let v = [
        verdict(9, 5, true, 0, 60_000),
        verdict(4, 2, true, 0, 60_000),
    ];
    assert_eq!(rule_of(most_restrictive(&v)), "override:4-per-minute");
    let h = response_headers(&v, no_wait);
    assert_eq!(header(&h, "RateLimit-Remaining"), Some("2"));
    assert_eq!(header(&h, "RateLimit-Reset"), Some("60"));
    assert_eq!(header(&h, "Retry-After"), None);
    assert!(header(&h, "RateLimit-Policy").is_some());
    assert!(header(&h, "RateLimit").is_some());
    // Envoy writes the X- family itself when asked to.
    assert!(h.iter().all(|v| !v.key.starts_with("X-")), "{h:?}");
}

#[test]
fn unlimited_descriptors_add_no_headers() {
    let unlimited = Verdict {
        allowed: true,
        applied: vec![],
    };
    assert!(most_restrictive(std::slice::from_ref(&unlimited)).is_none());
    assert!(to_response(&[unlimited], no_wait)
        .response_headers_to_add
        .is_empty());
}

#[test]
fn response_headers_are_the_ietf_pairs_in_order_without_the_x_family() {
    use weir_core::headers::{
        rate_limit_headers, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
    };
    for v in [
        verdict(3, 2, true, 1_000, 61_000),
        verdict_waiting(3, 0, false, 1_000, 61_000, Duration::from_millis(9_500)),
    ] {
        let a = v.binding().expect("limited");
        let answer = weir_core::CheckResponse::of(v.allowed, a);
        let expected: Vec<(String, String)> = rate_limit_headers(&answer, a.decision.at, None)
            .into_iter()
            .filter(|(n, _)| {
                ![X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET].contains(n)
            })
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        let got: Vec<(String, String)> = response_headers(std::slice::from_ref(&v), no_wait)
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(got.len(), if v.allowed { 5 } else { 6 });
    }
}
