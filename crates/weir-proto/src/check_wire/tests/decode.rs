//! Named cases: what each rule of the wire format decodes to.

use super::*;

#[test]
fn an_empty_message_has_no_items() {
    assert_eq!(decoded(&[]), Items::new());
}

#[test]
fn an_empty_item_is_the_default_items_check() {
    assert_eq!(
        decoded(&[0x0a, 0x00]),
        vec![convert::request(pb::CheckItem::default())]
    );
}

#[test]
fn every_field_of_an_item_is_read() {
    let check = single(&item(&[
        delimited(1, b"k"),
        delimited(2, b"GET /"),
        uint(3, 3),
        delimited(4, "ü€😀".as_bytes()),
        delimited(5, b"::1"),
        limit(&[uint(1, 10), uint(2, 60_000)]),
        uint(7, 250),
    ]));
    assert_eq!(check.key, "k");
    assert_eq!(check.route, "GET /");
    assert_eq!(check.cost, 3);
    assert_eq!(check.tier.as_deref(), Some("ü€😀"));
    assert_eq!(check.ip.as_deref(), Some("::1"));
    let rule = check.limit.expect("a carried limit");
    assert_eq!((rule.limit, rule.window), (10, Duration::from_secs(60)));
    assert_eq!(check.max_delay, Some(Duration::from_millis(250)));
}

#[test]
fn a_repeated_scalar_or_string_keeps_its_last_value() {
    let check = single(&item(&[
        delimited(1, b"a"),
        delimited(2, b"r1"),
        uint(3, 5),
        delimited(4, b"t1"),
        delimited(5, b"ip1"),
        uint(7, 10),
        delimited(1, b"b"),
        delimited(2, b"r2"),
        uint(3, 7),
        delimited(4, b"t2"),
        delimited(5, b"ip2"),
        uint(7, 20),
    ]));
    assert_eq!(check.key, "b");
    assert_eq!(check.route, "r2");
    assert_eq!(check.cost, 7);
    assert_eq!(check.tier.as_deref(), Some("t2"));
    assert_eq!(check.ip.as_deref(), Some("ip2"));
    assert_eq!(check.max_delay, Some(Duration::from_millis(20)));
}

#[test]
fn a_repeated_limit_is_merged_field_by_field() {
    // Either half alone has a zero and would refuse the item: only a merge
    // carries a rule.
    let check = single(&item(&[
        delimited(1, b"k"),
        limit(&[uint(1, 5)]),
        limit(&[uint(2, 1000)]),
    ]));
    let rule = check.limit.expect("a carried limit");
    assert_eq!((rule.limit, rule.window), (5, Duration::from_secs(1)));
    let merged = convert::item_rule(&pb::ItemLimit {
        limit: 5,
        window_ms: 1000,
    })
    .unwrap();
    assert_eq!(*rule, merged);

    // A field sent again in the second occurrence replaces the first's.
    let check = single(&item(&[
        limit(&[uint(1, 5), uint(2, 1000)]),
        limit(&[uint(1, 7)]),
    ]));
    let rule = check.limit.expect("a carried limit");
    assert_eq!((rule.limit, rule.window), (7, Duration::from_secs(1)));
}

#[test]
fn a_limit_that_cannot_limit_refuses_its_item_alone() {
    let items = decoded(
        &[
            item(&[delimited(1, b"zero"), limit(&[uint(2, 1000)])]),
            item(&[delimited(1, b"fine")]),
            item(&[delimited(1, b"no-window"), limit(&[uint(1, 5)])]),
        ]
        .concat(),
    );
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap_err().field(), Some("limit"));
    assert_eq!(items[1].as_ref().unwrap().key, "fine");
    assert_eq!(items[2].as_ref().unwrap_err().field(), Some("limit"));
}

#[test]
fn unknown_fields_of_every_wire_type_are_skipped_at_every_level() {
    let plain = [
        item(&[delimited(1, b"k"), limit(&[uint(1, 5), uint(2, 1000)])]),
        item(&[delimited(1, b"k2"), uint(3, 2)]),
    ]
    .concat();
    let unknown = unknown_fields();
    let noisy = [
        unknown.clone(),
        item(&[
            unknown.clone(),
            delimited(1, b"k"),
            unknown.clone(),
            limit(&[unknown.clone(), uint(1, 5), unknown.clone(), uint(2, 1000)]),
            unknown.clone(),
        ]),
        unknown.clone(),
        item(&[delimited(1, b"k2"), unknown.clone(), uint(3, 2)]),
        unknown,
    ]
    .concat();
    let expected = decoded(&plain);
    assert_eq!(expected.len(), 2);
    assert_eq!(decoded(&noisy), expected);
}

#[test]
fn the_largest_field_number_is_an_unknown_field() {
    let bytes = [uint(MAX_TAG, 1), item(&[delimited(1, b"k")])].concat();
    assert_eq!(single(&bytes).key, "k");
}

#[test]
fn non_canonical_varints_are_read_for_their_value() {
    let bytes = [
        // The item's key and length, each a byte longer than needed.
        padded(1 << 3 | 2, 1),
        padded(9, 2),
        [padded(3 << 3, 1), padded(5, 3)].concat(),
        delimited(1, b"k"),
    ]
    .concat();
    let check = single(&bytes);
    assert_eq!((check.key.as_str(), check.cost), ("k", 5));
    // Eleven bytes is past any varint's length, whatever they hold.
    refused(&item(&[[key(3, VARINT), padded(5, 10)].concat()]));
}

#[test]
fn a_known_field_with_another_wire_type_is_refused() {
    // Each payload also reads as well-formed fields under the field's own
    // wire type, so nothing but the wire type check can refuse it.
    let unknown_varint = uint(9, 1);
    // key as a varint
    refused(&item(&[uint(1, 0)]));
    // cost as bytes
    refused(&item(&[delimited(3, &unknown_varint)]));
    // max_delay_ms as bytes
    refused(&item(&[delimited(7, &unknown_varint)]));
    // cost as fixed64
    refused(&item(&[raw(3, I64, &[0x00, 0x4a, 0x05, 0, 0, 0, 0, 0])]));
    // limit as a varint
    refused(&item(&[uint(6, 0)]));
    // limit.limit as bytes
    refused(&item(&[limit(&[delimited(1, &unknown_varint)])]));
    // window_ms as fixed32
    refused(&item(&[limit(&[raw(2, I32, &[0x00, 0x4a, 0x01, 0x00])])]));
    // items as a varint
    refused(&uint(1, 0));
    // route as a group
    refused(&item(&[group(2, &[])]));
    // items as a group
    refused(&group(1, &[]));
}

#[test]
fn malformed_keys_are_refused() {
    refused(&[0x00]); // field 0
    refused(&uint(0, 1));
    refused(&item(&[uint(0, 1)]));
    refused(&item(&[limit(&[uint(0, 1)])]));
    refused(&raw(9, 6, &[0x01]));
    refused(&raw(9, 7, &[0x01]));
    refused(&item(&[key(9, 6)]));
    // A key is 32 bits: one past fits its varint but not a key.
    refused(&[varint(1 << 32 | 9 << 3), vec![0x01]].concat());
    refused(&[0x80]); // a key's varint that never ends
}

#[test]
fn an_end_group_key_out_of_place_is_refused() {
    refused(&key(9, EGROUP));
    refused(&item(&[key(9, EGROUP)]));
    refused(&keys(&[(9, SGROUP), (10, EGROUP)]));
    refused(&item(&[keys(&[(9, SGROUP), (10, EGROUP)])]));
    // The outer group's end key closing the inner group.
    refused(&keys(&[
        (9, SGROUP),
        (10, SGROUP),
        (9, EGROUP),
        (10, EGROUP),
    ]));
    // Never closed.
    refused(&key(9, SGROUP));
    let nested = keys(&[(9, SGROUP), (10, SGROUP), (10, EGROUP), (9, EGROUP)]);
    assert_eq!(decoded(&nested), Items::new());
}

#[test]
fn groups_nest_as_deep_as_prosts_recursion_limit() {
    // Each level of message or group spends one of 100: the top level's
    // unknown field has all of them, an item's one less, a limit's two.
    assert_eq!(decoded(&nested_groups(9, 98)), Items::new());
    assert_eq!(decoded(&nested_groups(9, 100)), Items::new());
    refused(&nested_groups(9, 101));
    refused(&nested_groups(9, 150));

    let in_item = |depth| item(&[delimited(1, b"k"), nested_groups(9, depth)]);
    assert_eq!(single(&in_item(99)).key, "k");
    refused(&in_item(100));

    let in_limit = |depth| item(&[limit(&[uint(1, 5), uint(2, 1000), nested_groups(9, depth)])]);
    assert_eq!(single(&in_limit(98)).limit.unwrap().limit, 5);
    refused(&in_limit(99));
}

#[test]
fn a_string_that_is_not_utf8_is_refused() {
    refused(&item(&[delimited(2, &[b'G', 0xff, 0xfe])]));
    refused(&item(&[delimited(1, &"ü".as_bytes()[..1])]));
    refused(&item(&[delimited(5, &[0xed, 0xa0, 0x80])])); // a surrogate
}

#[test]
fn a_length_past_its_end_is_refused() {
    // Five bytes of item, one there.
    refused(&[0x0a, 0x05, 0x00]);
    refused(&item(&[delimited_off(1, b"ab", 1)]));
    // The item's key runs five bytes past the item: the rest of the
    // message holds them, but they are not the item's.
    refused(&[vec![0x0a, 0x04, 0x0a, 0x05], b"abcdefgh".to_vec()].concat());
    // So does its cost's varint.
    refused(&[0x0a, 0x02, 0x18, 0x80, 0x01]);
    refused(&raw(9, I64, &[0; 7]));
    refused(&raw(9, I32, &[0; 3]));
    refused(&[key(9, LEN), varint(u64::MAX)].concat());
}

#[test]
fn a_ten_byte_varint_holds_one_bit_in_its_last_byte() {
    // Bit 0 set, then nothing but continuation up to the tenth byte.
    let ten_bytes = |last: u8| [&[0x81][..], &[0x80; 8], &[last]].concat();
    let cost = |last: u8| item(&[raw(3, VARINT, &ten_bytes(last))]);
    assert_eq!(single(&cost(0x01)).cost, 1 << 63 | 1);
    // Bit 64, past a u64.
    refused(&cost(0x02));
    // An eleventh byte announced.
    refused(&cost(0x81));
    assert_eq!(single(&item(&[uint(3, u64::MAX)])).cost, u64::MAX);
}

#[test]
fn a_thousand_items_decode_to_a_thousand_checks() {
    let items = (0..1000u64)
        .map(|i| pb::CheckItem {
            key: format!("k{i}"),
            cost: (i % 3 != 0).then_some(i),
            ..pb::CheckItem::default()
        })
        .collect();
    let bytes = pb::CheckRequest { items }.encode_to_vec();
    let checks = decoded(&bytes);
    assert_eq!(checks.len(), 1000);
    assert_eq!(checks[999].as_ref().unwrap().key, "k999");
}

#[test]
fn a_request_counts_its_items_without_decoding_them() {
    // Three items; the last holds a key that is not UTF-8.
    let mut bytes = item(&[delimited(1, b"a")]);
    bytes.extend_from_slice(&[0x0a, 0x00]);
    bytes.extend_from_slice(&item(&[delimited(1, &[0xff])]));
    let request = Request::new(Bytes::from(bytes)).expect("a well-formed top level");
    assert_eq!(request.items(), 3);
    let e = request.decode().expect_err("an item that is not UTF-8");
    assert!(e.to_string().contains("UTF-8"), "{e}");
}

#[test]
fn a_request_malformed_at_its_top_level_is_refused_before_it_is_counted() {
    let refused_at_once: [&[u8]; 4] = [
        &[0x0a, 0x05, 0x0a], // an item longer than the message
        &[0x08, 0x80, 0x80], // an unknown field's varint that never ends
        &[0x0d, 0x01],       // items sent as a 32-bit field
        &[0x00],             // field number 0
    ];
    for bytes in refused_at_once {
        assert!(
            Request::new(Bytes::from_static(bytes)).is_err(),
            "{bytes:02x?}"
        );
        refused(bytes);
    }
}
