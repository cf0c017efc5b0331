//! Refund descriptors (`is_negative_hits`) in the Envoy mapping.

use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;

use super::*;

fn descriptor(hits: u64, refund: bool, limit: Option<u32>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: "client".into(),
            value: "c".into(),
        }],
        limit: limit.map(|requests_per_unit| RateLimitOverride {
            requests_per_unit,
            unit: RateLimitUnit::Minute as i32,
        }),
        hits_addend: Some(hits),
        is_negative_hits: refund,
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

#[test]
fn refunds_name_the_negative_descriptors_and_nothing_when_none_is() {
    let none = request(vec![descriptor(1, false, None), descriptor(2, false, None)]);
    assert_eq!(refunds(&RlsRequest::of(&none)), None);
    let mixed = request(vec![descriptor(1, false, None), descriptor(2, true, None)]);
    assert_eq!(refunds(&RlsRequest::of(&mixed)), Some(vec![false, true]));
}

#[test]
fn an_override_refund_past_its_limit_is_cut_to_the_limit_not_refused() {
    let r = request(vec![
        descriptor(100, true, Some(5)),
        descriptor(1, false, None),
    ]);
    let checks = to_checks(&RlsRequest::of(&r), 10).expect("a refund is never too large");
    assert_eq!(checks[0].cost, 5);
    // A check of the same size is refused: no check could pass it.
    let too_big = request(vec![
        descriptor(100, false, Some(5)),
        descriptor(1, false, None),
    ]);
    let e = to_checks(&RlsRequest::of(&too_big), 10).unwrap_err();
    assert_eq!(e.path(), "descriptors[0].cost");
}
