//! Encoding round trips for weir's own messages, and byte-level pins of the
//! Envoy RLS wire format (field numbers and types are a contract with Envoy).

use prost::Message;
use weir_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::{
    rate_limit_response::{rate_limit::Unit, Code, DescriptorStatus, RateLimit},
    RateLimitRequest, RateLimitResponse,
};
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResponse, CheckResult};

#[test]
fn check_request_round_trips() {
    let request = CheckRequest {
        items: vec![
            CheckItem {
                key: "cust_42".into(),
                route: "POST /v1/charges".into(),
                cost: Some(3),
                tier: "free".into(),
                ip: "203.0.113.9".into(),
                limit: None,
                max_delay_ms: Some(0),
                refund: true,
            },
            CheckItem {
                key: "cust_7".into(),
                route: "GET /v1/balance".into(),
                cost: None,
                tier: String::new(),
                ip: String::new(),
                limit: None,
                max_delay_ms: None,
                refund: false,
            },
        ],
    };
    let bytes = request.encode_to_vec();
    let decoded = CheckRequest::decode(bytes.as_slice()).expect("decode CheckRequest");
    assert_eq!(decoded, request);
    // `optional` keeps presence: an absent cost stays absent, a zero stays zero.
    assert_eq!(decoded.items[0].cost, Some(3));
    assert_eq!(decoded.items[1].cost, None);
    assert_eq!(decoded.items[0].max_delay_ms, Some(0), "a meter survives");
    assert_eq!(decoded.items[1].max_delay_ms, None);
    let zero = CheckItem {
        cost: Some(0),
        ..CheckItem::default()
    };
    let zero = CheckItem::decode(zero.encode_to_vec().as_slice()).expect("decode CheckItem");
    assert_eq!(zero.cost, Some(0));
}

#[test]
fn check_response_round_trips() {
    let response = CheckResponse {
        results: vec![CheckResult {
            allowed: false,
            limit: 100,
            remaining: 0,
            retry_after_ms: 6000,
            reset_at_ms: 1_738_368_060_000,
            rule: "charges-per-client".into(),
            delay_ms: 0,
            limited: true,
            error: None,
            window_ms: 60_000,
        }],
    };
    let decoded = CheckResponse::decode(response.encode_to_vec().as_slice()).expect("decode");
    assert_eq!(decoded, response);
}

/// A RateLimitRequest as Envoy puts it on the wire, assembled by hand:
///
/// ```text
/// RateLimitRequest {
///   domain: "envoy"                                   // field 1, string
///   descriptors: [{                                   // field 2, message
///     entries: [{key: "remote_address", value: "10.0.0.1"},   // field 1 {1, 2}
///               {key: "path", value: "/foo"}],
///     limit: {requests_per_unit: 100, unit: MINUTE},  // field 2 {1 uint32, 2 enum}
///     hits_addend: {value: 5},                        // field 3, UInt64Value
///   }]
///   hits_addend: 7                                    // field 3, uint32
/// }
/// ```
fn envoy_request_bytes() -> Vec<u8> {
    let entry_1: &[u8] = &[
        0x0A, 14, // Entry.key: field 1, wire type 2 (length-delimited), 14 bytes
        b'r', b'e', b'm', b'o', b't', b'e', b'_', b'a', b'd', b'd', b'r', b'e', b's', b's', 0x12,
        8, // Entry.value: field 2, wire type 2, 8 bytes
        b'1', b'0', b'.', b'0', b'.', b'0', b'.', b'1',
    ];
    let entry_2: &[u8] = &[
        0x0A, 4, b'p', b'a', b't', b'h', // Entry.key
        0x12, 4, b'/', b'f', b'o', b'o', // Entry.value
    ];
    assert_eq!(entry_1.len(), 26);
    assert_eq!(entry_2.len(), 12);
    let descriptor: Vec<u8> = [
        &[0x0A, 26][..], // RateLimitDescriptor.entries: field 1, wire type 2
        entry_1,
        &[0x0A, 12][..], // second entry
        entry_2,
        // RateLimitDescriptor.limit: field 2, wire type 2, 4 bytes:
        //   requests_per_unit (field 1, varint) = 100, unit (field 2, varint) = MINUTE (2)
        &[0x12, 4, 0x08, 100, 0x10, 2][..],
        // RateLimitDescriptor.hits_addend: field 3, wire type 2, 2 bytes:
        //   UInt64Value.value (field 1, varint) = 5
        &[0x1A, 2, 0x08, 5][..],
    ]
    .concat();
    assert_eq!(descriptor.len(), 52);
    [
        &[0x0A, 5, b'e', b'n', b'v', b'o', b'y'][..], // RateLimitRequest.domain: field 1
        &[0x12, 52][..], // RateLimitRequest.descriptors: field 2, wire type 2
        &descriptor,
        &[0x18, 7][..], // RateLimitRequest.hits_addend: field 3, wire type 0 (varint) = 7
    ]
    .concat()
}

#[test]
fn envoy_rate_limit_request_decodes_from_envoy_wire_bytes() {
    let bytes = envoy_request_bytes();
    let decoded = RateLimitRequest::decode(bytes.as_slice()).expect("decode RateLimitRequest");
    let expected = RateLimitRequest {
        domain: "envoy".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "remote_address".into(),
                    value: "10.0.0.1".into(),
                },
                Entry {
                    key: "path".into(),
                    value: "/foo".into(),
                },
            ],
            limit: Some(RateLimitOverride {
                requests_per_unit: 100,
                unit: RateLimitUnit::Minute as i32,
            }),
            hits_addend: Some(5),
            is_negative_hits: false,
        }],
        hits_addend: 7,
    };
    assert_eq!(decoded, expected);
    // prost writes fields in field-number order, as these bytes are laid out,
    // so encoding must reproduce them exactly.
    assert_eq!(expected.encode_to_vec(), bytes);
}

#[test]
fn envoy_descriptor_status_field_numbers() {
    let status = DescriptorStatus {
        code: Code::OverLimit as i32,
        current_limit: None,
        limit_remaining: 7,
        duration_until_reset: Some(prost_types::Duration {
            seconds: 3,
            nanos: 0,
        }),
        quota: None,
    };
    assert_eq!(
        status.encode_to_vec(),
        [
            0x08, 2, // code: field 1, varint, OVER_LIMIT = 2
            0x18, 7, // limit_remaining: field 3, varint
            0x22, 2, // duration_until_reset: field 4, wire type 2, 2 bytes
            0x08, 3, //   Duration.seconds: field 1, varint
        ]
    );
}

#[test]
fn envoy_rate_limit_response_field_numbers() {
    let response = RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![DescriptorStatus {
            code: Code::Ok as i32,
            current_limit: Some(RateLimit {
                name: "x".into(),
                requests_per_unit: 10,
                unit: Unit::Minute as i32,
            }),
            limit_remaining: 9,
            duration_until_reset: None,
            quota: None,
        }],
        response_headers_to_add: vec![weir_proto::envoy::config::core::v3::HeaderValue {
            key: "a".into(),
            value: "b".into(),
            raw_value: Vec::new(),
        }],
        request_headers_to_add: Vec::new(),
        raw_body: b"no".to_vec(),
        dynamic_metadata: None,
        quota: None,
    };
    let status: &[u8] = &[
        0x08, 1, // code: field 1 = OK
        0x12, 7, // current_limit: field 2, 7 bytes
        0x08, 10, //   RateLimit.requests_per_unit: field 1
        0x10, 2, //   RateLimit.unit: field 2 = MINUTE
        0x1A, 1, b'x', //   RateLimit.name: field 3
        0x18, 9, // limit_remaining: field 3
    ];
    let expected: Vec<u8> = [
        &[0x08, 1][..],  // overall_code: field 1 = OK
        &[0x12, 13][..], // statuses: field 2
        status,
        &[0x1A, 6, 0x0A, 1, b'a', 0x12, 1, b'b'][..], // response_headers_to_add: field 3
        &[0x2A, 2, b'n', b'o'][..],                   // raw_body: field 5
    ]
    .concat();
    assert_eq!(status.len(), 13);
    assert_eq!(response.encode_to_vec(), expected);
    assert_eq!(
        RateLimitResponse::decode(expected.as_slice()).expect("decode"),
        response
    );
}

#[test]
fn envoy_enum_values() {
    assert_eq!(Code::Unknown as i32, 0);
    assert_eq!(Code::Ok as i32, 1);
    assert_eq!(Code::OverLimit as i32, 2);
    let units = [
        Unit::Unknown,
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Month,
        Unit::Year,
    ];
    for (i, unit) in units.into_iter().enumerate() {
        assert_eq!(unit as usize, i);
    }
    let units = [
        RateLimitUnit::Unknown,
        RateLimitUnit::Second,
        RateLimitUnit::Minute,
        RateLimitUnit::Hour,
        RateLimitUnit::Day,
        RateLimitUnit::Month,
        RateLimitUnit::Year,
    ];
    for (i, unit) in units.into_iter().enumerate() {
        assert_eq!(unit as usize, i);
    }
}

#[test]
fn file_descriptor_set_lists_the_services() {
    let fds = prost_types::FileDescriptorSet::decode(weir_proto::FILE_DESCRIPTOR_SET)
        .expect("decode descriptor set");
    let services: Vec<String> = fds
        .file
        .iter()
        .flat_map(|f| {
            let package = f.package().to_owned();
            f.service
                .iter()
                .map(move |s| format!("{package}.{}", s.name()))
        })
        .collect();
    for want in [
        "weir.v1.RateLimiter",
        "weir.v1.Peer",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        assert!(services.iter().any(|s| s == want), "{want} in {services:?}");
    }
}
