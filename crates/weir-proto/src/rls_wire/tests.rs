//! The hand-written reader held to prost's: a byte string decodes here
//! exactly when prost decodes it, to the request prost's message reads
//! as ([`RlsRequest::of`]). Generated, mutated and garbage messages go
//! through [`agrees`]; the named tests pin what each rule comes to.

use bytes::Bytes;
use prost::Message;

use super::*;
use crate::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry as PbEntry, RateLimitOverride,
};
use crate::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::wire_test::*;

mod generated;

/// Reads `bytes` as the node does: counted, then decoded.
fn ours(bytes: &[u8]) -> Result<Request, Status> {
    let request = Request::new(Bytes::copy_from_slice(bytes))?;
    request.decode()?;
    Ok(request)
}

/// Asserts that the reader and prost accept the same bytes, and read
/// them to the same request.
fn agrees(bytes: &[u8]) {
    match (ours(bytes), RateLimitRequest::decode(bytes)) {
        (Ok(ours), Ok(theirs)) => {
            assert_eq!(
                ours.decode().expect("decoded once"),
                RlsRequest::of(&theirs),
                "requests differ for bytes [{}]",
                hex(bytes)
            );
            assert_eq!(ours.descriptors(), theirs.descriptors.len());
        }
        (Err(_), Err(_)) => {}
        (ours, theirs) => panic!(
            "rls_wire gives {ours:?}, prost {theirs:?}, for bytes [{}]",
            hex(bytes)
        ),
    }
}

/// The message prost reads from bytes both sides accept.
fn decoded(bytes: &[u8]) -> RateLimitRequest {
    agrees(bytes);
    RateLimitRequest::decode(bytes)
        .unwrap_or_else(|e| panic!("refused ({e}) bytes [{}]", hex(bytes)))
}

/// The lone descriptor of a message both sides accept.
fn single(bytes: &[u8]) -> RateLimitDescriptor {
    let mut request = decoded(bytes);
    assert_eq!(request.descriptors.len(), 1, "bytes [{}]", hex(bytes));
    request.descriptors.remove(0)
}

/// Asserts both sides refuse `bytes`.
fn refused(bytes: &[u8]) {
    agrees(bytes);
    assert!(ours(bytes).is_err(), "accepted bytes [{}]", hex(bytes));
}

/// A descriptor of the given encoded fields.
fn descriptor(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(2, &fields.concat())
}

/// A descriptor's entry of the given encoded fields.
fn entry(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(1, &fields.concat())
}

fn pair(key: &[u8], value: &[u8]) -> Vec<u8> {
    entry(&[delimited(1, key), delimited(2, value)])
}

/// A descriptor's `limit` of the given encoded fields.
fn limit(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(2, &fields.concat())
}

/// A descriptor's `hits_addend` wrapper of the given encoded fields.
fn hits(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(3, &fields.concat())
}

fn entries(d: &RateLimitDescriptor) -> Vec<(&str, &str)> {
    d.entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect()
}

#[test]
fn an_empty_message_is_the_default_request() {
    assert_eq!(decoded(&[]), RateLimitRequest::default());
}

#[test]
fn every_field_is_read() {
    let request = decoded(
        &[
            delimited(1, b"edge"),
            descriptor(&[
                pair(b"client", b"cust_42"),
                pair(b"route", "ü€😀".as_bytes()),
                limit(&[uint(1, 10), uint(2, 2)]),
                hits(&[uint(1, 3)]),
            ]),
            uint(3, 7),
            descriptor(&[]),
        ]
        .concat(),
    );
    assert_eq!(request.domain, "edge");
    assert_eq!(request.hits_addend, 7);
    assert_eq!(request.descriptors.len(), 2);
    let d = &request.descriptors[0];
    assert_eq!(
        entries(d),
        [("client", "cust_42"), ("route", "ü€😀")].to_vec()
    );
    assert_eq!(
        d.limit,
        Some(RateLimitOverride {
            requests_per_unit: 10,
            unit: 2
        })
    );
    assert_eq!(d.hits_addend, Some(3));
    assert_eq!(request.descriptors[1], RateLimitDescriptor::default());
}

#[test]
fn a_repeated_string_or_scalar_keeps_its_last_value() {
    let bytes = [
        delimited(1, b"first"),
        uint(3, 2),
        descriptor(&[entry(&[
            delimited(1, b"k1"),
            delimited(2, b"v1"),
            delimited(1, b"k2"),
            delimited(2, b"v2"),
        ])]),
        delimited(1, b"last"),
        uint(3, 5),
    ]
    .concat();
    let request = decoded(&bytes);
    assert_eq!((request.domain.as_str(), request.hits_addend), ("last", 5));
    assert_eq!(entries(&request.descriptors[0]), [("k2", "v2")].to_vec());
}

#[test]
fn a_repeated_limit_or_hits_addend_is_merged() {
    let d = single(&descriptor(&[
        limit(&[uint(1, 5)]),
        hits(&[uint(1, 4)]),
        limit(&[uint(2, 3)]),
        hits(&[]),
    ]));
    let expected = RateLimitOverride {
        requests_per_unit: 5,
        unit: 3,
    };
    assert_eq!(d.limit, Some(expected));
    // An empty wrapper sent second leaves the first's value.
    assert_eq!(d.hits_addend, Some(4));

    let d = single(&descriptor(&[limit(&[uint(1, 5)]), limit(&[uint(1, 9)])]));
    assert_eq!(d.limit.map(|l| l.requests_per_unit), Some(9));
}

#[test]
fn an_empty_limit_or_hits_addend_is_present_at_zero() {
    let d = single(&descriptor(&[limit(&[]), hits(&[])]));
    assert_eq!(d.limit, Some(RateLimitOverride::default()));
    assert_eq!(d.hits_addend, Some(0));
    let d = single(&descriptor(&[]));
    assert_eq!((d.limit, d.hits_addend), (None, None));
}

#[test]
fn integers_are_cut_to_their_width_as_prost_cuts_them() {
    let bytes = [
        uint(3, 1 << 32 | 6),
        descriptor(&[
            limit(&[uint(1, 1 << 32 | 5), uint(2, u64::MAX)]),
            hits(&[uint(1, u64::MAX)]),
        ]),
    ]
    .concat();
    let request = decoded(&bytes);
    assert_eq!(request.hits_addend, 6);
    let d = &request.descriptors[0];
    assert_eq!(
        d.limit,
        Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: -1
        })
    );
    assert_eq!(d.hits_addend, Some(u64::MAX));
}

#[test]
fn unknown_fields_of_every_wire_type_are_skipped_at_every_level() {
    let plain = [
        delimited(1, b"edge"),
        descriptor(&[
            pair(b"k", b"v"),
            limit(&[uint(1, 5), uint(2, 1)]),
            hits(&[uint(1, 2)]),
        ]),
    ]
    .concat();
    let u = unknown_fields();
    let noisy = [
        u.clone(),
        delimited(1, b"edge"),
        u.clone(),
        descriptor(&[
            u.clone(),
            entry(&[
                u.clone(),
                delimited(1, b"k"),
                u.clone(),
                delimited(2, b"v"),
                u.clone(),
            ]),
            u.clone(),
            limit(&[u.clone(), uint(1, 5), u.clone(), uint(2, 1), u.clone()]),
            hits(&[u.clone(), uint(1, 2), u.clone()]),
            u.clone(),
        ]),
        u,
    ]
    .concat();
    let expected = decoded(&plain);
    assert_eq!(expected.descriptors[0].hits_addend, Some(2));
    assert_eq!(decoded(&noisy), expected);
}

#[test]
fn a_known_field_with_another_wire_type_is_refused() {
    // Each payload also reads as well-formed fields under the field's own
    // wire type, so nothing but the wire type check can refuse it.
    let unknown_varint = uint(9, 1);
    refused(&uint(1, 0)); // domain as a varint
    refused(&uint(2, 0)); // descriptors as a varint
    refused(&group(2, &[])); // descriptors as a group
    refused(&delimited(3, &unknown_varint)); // hits_addend as bytes
    refused(&raw(3, I32, &[0x00, 0x4a, 0x01, 0x00])); // hits_addend as fixed32
    refused(&descriptor(&[uint(1, 0)])); // entries as a varint
    refused(&descriptor(&[uint(2, 0)])); // limit as a varint
    refused(&descriptor(&[uint(3, 0)])); // hits_addend as a varint
    refused(&descriptor(&[entry(&[uint(1, 0)])])); // an entry's key as a varint
    refused(&descriptor(&[entry(&[group(2, &[])])])); // its value as a group
    refused(&descriptor(&[limit(&[delimited(1, &unknown_varint)])]));
    refused(&descriptor(&[limit(&[raw(2, I64, &[0; 8])])]));
    refused(&descriptor(&[hits(&[delimited(1, &unknown_varint)])]));
}

#[test]
fn malformed_keys_and_lengths_are_refused_at_every_level() {
    refused(&[0x00]);
    refused(&descriptor(&[uint(0, 1)]));
    refused(&descriptor(&[entry(&[uint(0, 1)])]));
    refused(&descriptor(&[limit(&[raw(9, 6, &[0x01])])]));
    refused(&descriptor(&[hits(&[key(9, EGROUP)])]));
    // An entry one byte longer than its descriptor.
    refused(&descriptor(&[delimited_off(1, &delimited(1, b"k"), 1)]));
    refused(&descriptor(&[entry(&[delimited_off(2, b"ab", 1)])]));
    // The descriptor's varint runs past its end into the next field.
    refused(&[vec![0x12, 0x02, 0x1a, 0x80], uint(3, 1)].concat());
}

#[test]
fn a_string_that_is_not_utf8_is_refused() {
    refused(&delimited(1, &[b'e', 0xff]));
    refused(&descriptor(&[pair(&"ü".as_bytes()[..1], b"v")]));
    refused(&descriptor(&[pair(b"k", &[0xed, 0xa0, 0x80])])); // a surrogate
}

#[test]
fn groups_nest_as_deep_as_prosts_recursion_limit() {
    // The top level's unknown field has all 100 levels, a descriptor's one
    // less, an entry's, limit's or wrapper's two.
    assert_eq!(decoded(&nested_groups(9, 100)), RateLimitRequest::default());
    refused(&nested_groups(9, 101));

    let in_descriptor = |depth| descriptor(&[pair(b"k", b"v"), nested_groups(9, depth)]);
    assert_eq!(entries(&single(&in_descriptor(99))), [("k", "v")].to_vec());
    refused(&in_descriptor(100));

    let deep = |depth| nested_groups(9, depth);
    for (name, at) in [
        ("entry", entry(&[deep(98)])),
        ("limit", limit(&[deep(98)])),
        ("hits_addend", hits(&[deep(98)])),
    ] {
        assert_eq!(decoded(&descriptor(&[at])).descriptors.len(), 1, "{name}");
    }
    refused(&descriptor(&[entry(&[deep(99)])]));
    refused(&descriptor(&[limit(&[deep(99)])]));
    refused(&descriptor(&[hits(&[deep(99)])]));
}

#[test]
fn is_negative_hits_is_read_as_a_bool_the_last_one_winning() {
    let d = single(&descriptor(&[pair(b"k", b"v"), uint(4, 1)]));
    assert!(d.is_negative_hits);
    // Any varint but 0 is true, and the last occurrence wins.
    assert!(single(&descriptor(&[uint(4, 0), uint(4, 300)])).is_negative_hits);
    assert!(!single(&descriptor(&[uint(4, 1), uint(4, 0)])).is_negative_hits);
    let ours = ours(&descriptor(&[uint(4, 2)])).unwrap();
    assert!(ours.decode().unwrap().descriptors[0].is_negative_hits);
    // Under a length-delimited wire type it is malformed, as prost reads it.
    refused(&descriptor(&[delimited(4, &[1])]));
}

#[test]
fn a_request_counts_its_descriptors_and_reads_as_prosts_message() {
    let message = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![
            RateLimitDescriptor::default(),
            RateLimitDescriptor {
                entries: vec![PbEntry {
                    key: "user_id".into(),
                    value: "u1".into(),
                }],
                limit: None,
                hits_addend: Some(3),
                is_negative_hits: true,
            },
            RateLimitDescriptor::default(),
        ],
        hits_addend: 2,
    };
    let request = Request::new(Bytes::from(message.encode_to_vec())).expect("well formed");
    assert_eq!(request.descriptors(), 3);
    assert_eq!(
        request.decode().expect("well formed"),
        RlsRequest::of(&message)
    );
}

#[test]
fn a_descriptor_malformed_inside_is_counted_and_refused_when_decoded() {
    // Domain "d", then two descriptors: an empty one, and one whose
    // entry is longer than the descriptor.
    let bytes = Bytes::from_static(&[0x0a, 0x01, b'd', 0x12, 0x00, 0x12, 0x02, 0x0a, 0x05]);
    let request = Request::new(bytes).expect("a well-formed top level");
    assert_eq!(request.descriptors(), 2);
    let status = request.decode().expect_err("a malformed descriptor");
    assert_eq!(status.code(), tonic::Code::Internal);
    assert!(status.message().contains("failed to decode"), "{status:?}");
}

#[test]
fn a_request_malformed_at_its_top_level_is_refused_at_once() {
    let malformed: [&'static [u8]; 3] = [
        &[0x0a, 0x05, b'd'], // a domain longer than the message
        &[0x15, 0x00],       // descriptors sent as a 32-bit field
        &[0x18, 0x80],       // a hits_addend whose varint never ends
    ];
    for bytes in malformed {
        assert!(
            Request::new(Bytes::from_static(bytes)).is_err(),
            "{bytes:02x?}"
        );
        refused(bytes);
    }
}
