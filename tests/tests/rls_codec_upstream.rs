//! The node's hand-written RLS request decoder and response encoder held to
//! prost over Envoy's messages as upstream defines them today
//! (`tests/proto/`): random full messages, with unknown fields at every
//! level, read the same by both. A field Envoy adds goes into
//! `tests/proto/`, and this test shows whether the node reads it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use weir_core::{Applied, Decision, Rule, Verdict};
use weir_node::grpc::envoy_map;
use weir_proto::rls_wire::{Request, RlsRequest};
use weir_tests::upstream::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_tests::upstream::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_tests::upstream::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// A field no message here defines at `tag`, of any wire type.
fn unknown_field(first_unknown: u32) -> impl Strategy<Value = Vec<u8>> {
    let tag = first_unknown..first_unknown + 40;
    (
        tag,
        0..4u8,
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..12),
    )
        .prop_map(|(tag, kind, n, body)| {
            let mut out = Vec::new();
            match kind {
                0 => {
                    encode_key(tag, WireType::Varint, &mut out);
                    encode_varint(n, &mut out);
                }
                1 => {
                    encode_key(tag, WireType::SixtyFourBit, &mut out);
                    out.extend_from_slice(&n.to_le_bytes());
                }
                2 => {
                    encode_key(tag, WireType::ThirtyTwoBit, &mut out);
                    out.extend_from_slice(&(n as u32).to_le_bytes());
                }
                _ => {
                    encode_key(tag, WireType::LengthDelimited, &mut out);
                    encode_varint(body.len() as u64, &mut out);
                    out.extend_from_slice(&body);
                }
            }
            out
        })
}

fn unknowns(first_unknown: u32) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(unknown_field(first_unknown), 0..3).prop_map(|f| f.concat())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z_]{1,12}", any::<String>()]
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    let entry = (text(), text()).prop_map(|(key, value)| Entry { key, value });
    let limit = (any::<u32>(), -2i32..9).prop_map(|(requests_per_unit, unit)| RateLimitOverride {
        requests_per_unit,
        unit,
    });
    (
        prop::collection::vec(entry, 0..4),
        prop::option::of(limit),
        prop::option::of(any::<u64>()),
        any::<bool>(),
    )
        .prop_map(
            |(entries, limit, hits_addend, is_negative_hits)| RateLimitDescriptor {
                entries,
                limit,
                hits_addend,
                is_negative_hits,
            },
        )
}

/// A request and its bytes: prost's encoding, with unknown fields after
/// the known ones of the request and of each descriptor.
fn request() -> impl Strategy<Value = (RateLimitRequest, Vec<u8>)> {
    let described = (descriptor(), unknowns(5));
    (
        text(),
        prop::collection::vec(described, 0..6),
        any::<u32>(),
        unknowns(4),
    )
        .prop_map(|(domain, described, hits_addend, top_unknown)| {
            let descriptors: Vec<_> = described.iter().map(|(d, _)| d.clone()).collect();
            let head = RateLimitRequest {
                domain: domain.clone(),
                descriptors: Vec::new(),
                hits_addend,
            };
            let mut bytes = head.encode_to_vec();
            for (d, extra) in &described {
                let body = [d.encode_to_vec(), extra.clone()].concat();
                encode_key(2, WireType::LengthDelimited, &mut bytes);
                encode_varint(body.len() as u64, &mut bytes);
                bytes.extend_from_slice(&body);
            }
            bytes.extend_from_slice(&top_unknown);
            let message = RateLimitRequest {
                descriptors,
                ..head
            };
            (message, bytes)
        })
}

/// The upstream message as the node's reader states it.
fn as_node_reads(m: &RateLimitRequest) -> (String, u32, Vec<DescriptorFields>) {
    let descriptors = m
        .descriptors
        .iter()
        .map(|d| DescriptorFields {
            entries: d
                .entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect(),
            limit: d.limit.map(|l| (l.requests_per_unit, l.unit)),
            hits_addend: d.hits_addend,
            is_negative_hits: d.is_negative_hits,
        })
        .collect();
    (m.domain.clone(), m.hits_addend, descriptors)
}

#[derive(Debug, PartialEq)]
struct DescriptorFields {
    entries: Vec<(String, String)>,
    limit: Option<(u32, i32)>,
    hits_addend: Option<u64>,
    is_negative_hits: bool,
}

fn node_read(r: &RlsRequest<'_>) -> (String, u32, Vec<DescriptorFields>) {
    let descriptors = r
        .descriptors
        .iter()
        .map(|d| DescriptorFields {
            entries: d
                .entries
                .iter()
                .map(|e| (e.key.into(), e.value.into()))
                .collect(),
            limit: d.limit.map(|l| (l.requests_per_unit, l.unit)),
            hits_addend: d.hits_addend,
            is_negative_hits: d.is_negative_hits,
        })
        .collect();
    (r.domain.to_string(), r.hits_addend, descriptors)
}

/// A verdict of one limit: a rule of `limit` per `window_s`, decided so.
fn verdict() -> impl Strategy<Value = Verdict> {
    (
        1..10_000u64,
        prop::sample::select(vec![1u64, 60, 3600, 86_400, 7, 90]),
        any::<bool>(),
        0..10_000u64,
        0..120_000u64,
        any::<bool>(),
    )
        .prop_map(
            |(limit, window_s, allowed, remaining, wait_ms, unlimited)| {
                if unlimited {
                    return Verdict {
                        allowed: true,
                        applied: Vec::new(),
                    };
                }
                let rule = Rule::carried("r", limit, Duration::from_secs(window_s)).unwrap();
                let now = 1_700_000_000_000_000_000;
                let decision = Decision {
                    allowed,
                    limit,
                    remaining: remaining.min(limit),
                    retry_after: Duration::from_millis(if allowed { 0 } else { wait_ms }),
                    reset_at: now / 1_000_000 + wait_ms,
                    delay: Duration::ZERO,
                    at: now,
                };
                Verdict {
                    allowed,
                    applied: vec![Applied {
                        rule: Arc::new(rule),
                        hash_part: "k".into(),
                        decision,
                    }],
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(weir_tests::proptest_cases(512)))]

    #[test]
    fn upstream_requests_read_as_prost_reads_them((message, bytes) in request()) {
        let theirs = RateLimitRequest::decode(bytes.as_slice()).expect("prost reads its own");
        prop_assert_eq!(&theirs, &message);
        let call = Request::new(Bytes::from(bytes)).expect("well formed at the top");
        prop_assert_eq!(call.descriptors(), message.descriptors.len());
        let ours = call.decode().expect("well formed");
        prop_assert_eq!(node_read(&ours), as_node_reads(&theirs));
    }

    #[test]
    fn responses_written_by_hand_read_as_prost_writes_them(
        verdicts in prop::collection::vec(verdict(), 1..5),
    ) {
        let written = envoy_map::wire::response(&verdicts, |_| None);
        let theirs = RateLimitResponse::decode(written.as_slice()).expect("upstream reads it");
        let built = envoy_map::to_response(&verdicts, |_| None).encode_to_vec();
        let expected = RateLimitResponse::decode(built.as_slice()).expect("prost's own");
        prop_assert_eq!(theirs, expected);
    }
}
