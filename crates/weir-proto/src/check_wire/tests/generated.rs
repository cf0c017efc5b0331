//! Generated, mutated and garbage messages, each decoded by both sides.

use super::*;

pub(super) fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(127),
        Just(128),
        Just(u64::MAX),
        Just(1 << 63),
        0..300u64,
        // Half of these need all ten bytes.
        any::<u64>(),
    ]
}

/// Characters at every UTF-8 length and its edges.
#[rustfmt::skip]
const CHARS: &[char] = &[
    'a', 'k', 'Z', '0', ' ', '/', ':', '\0', '\u{7f}', '\u{80}', 'ü', '\u{7ff}', '\u{800}', '€',
    '\u{ffff}', '\u{10000}', '😀', '\u{10ffff}',
];

/// Strings up to 40 characters (up to 160 bytes, so two bytes of length).
pub(super) fn text() -> impl Strategy<Value = String> {
    let char = prop_oneof![
        4 => (b' '..=b'~').prop_map(char::from),
        2 => prop::sample::select(CHARS),
        1 => any::<char>(),
    ];
    prop_oneof![
        1 => Just(String::new()),
        4 => prop::collection::vec(char, 1..=40).prop_map(String::from_iter),
    ]
}

fn item_limit() -> impl Strategy<Value = pb::ItemLimit> {
    prop_oneof![(1..100u64, 1..100_000u64), (number(), number())]
        .prop_map(|(limit, window_ms)| pb::ItemLimit { limit, window_ms })
}

fn check_item() -> impl Strategy<Value = pb::CheckItem> {
    (
        text(),
        text(),
        prop::option::of(number()),
        text(),
        text(),
        prop::option::of(item_limit()),
        prop::option::of(number()),
    )
        .prop_map(
            |(key, route, cost, tier, ip, limit, max_delay_ms)| pb::CheckItem {
                key,
                route,
                cost,
                tier,
                ip,
                limit,
                max_delay_ms,
            },
        )
}

fn check_request() -> impl Strategy<Value = pb::CheckRequest> {
    prop::collection::vec(check_item(), 0..20).prop_map(|items| pb::CheckRequest { items })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(Index, u8),
    Truncate(Index),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<Index>(), 1..16usize).prop_map(|(at, n)| Mutation::Delete(at, n)),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    // Positions run to one past the end, so that insertion can append.
    let at = |i: &Index| i.index(bytes.len() + 1);
    match m {
        Mutation::Flip(i, mask) => {
            if !bytes.is_empty() {
                let at = i.index(bytes.len());
                bytes[at] ^= mask;
            }
        }
        Mutation::Truncate(i) => {
            let at = at(i);
            bytes.truncate(at);
        }
        Mutation::Insert(i, new) => {
            let at = at(i);
            bytes.splice(at..at, new.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let at = at(i);
            let end = (at + n).min(bytes.len());
            bytes.drain(at..end);
        }
    }
}

/// 512 cases each, drawn from XorShift: proptest's default ChaCha, built
/// without optimization, costs more than the decoding under test.
pub(super) fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

// --- structured garbage: raw fields, mostly well-formed ---

/// A varint as it may arrive: canonical, padded, at and past ten bytes,
/// overflowing, or never ending.
fn raw_varint() -> impl Strategy<Value = Vec<u8>> {
    fn continuing(n: impl Into<prop::collection::SizeRange>) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0x80u8..=0xff, n)
    }
    prop_oneof![
        16 => number().prop_map(varint),
        3 => (0..300u64, 1..4usize).prop_map(|(v, pad)| padded(v, pad)),
        3 => continuing(9).prop_map(|v| [v, vec![0x01]].concat()),
        1 => (continuing(9), 0x02..0x80u8).prop_map(|(v, last)| [v, vec![last]].concat()),
        1 => continuing(10).prop_map(|v| [v, vec![0x00]].concat()),
        1 => continuing(1..4),
    ]
}

fn tag() -> impl Strategy<Value = u32> {
    prop_oneof![24 => 1..=12u32, 1 => Just(0), 1 => Just(MAX_TAG)]
}

/// How far a length prefix is off its body: mostly not at all.
fn length_error() -> impl Strategy<Value = i64> {
    prop_oneof![20 => Just(0i64), 1 => -3..=3i64]
}

#[derive(Debug, Clone, Copy)]
enum GroupEnd {
    Matching,
    Numbered(u32),
    Missing,
}

fn group_end() -> impl Strategy<Value = GroupEnd> {
    prop_oneof![
        6 => Just(GroupEnd::Matching),
        1 => (1..=12u32).prop_map(GroupEnd::Numbered),
        1 => Just(GroupEnd::Missing),
    ]
}

fn raw_group(tag: u32, body: &[u8], end: GroupEnd) -> Vec<u8> {
    let end = match end {
        GroupEnd::Matching => key(tag, EGROUP),
        GroupEnd::Numbered(t) => key(t, EGROUP),
        GroupEnd::Missing => Vec::new(),
    };
    [key(tag, SGROUP), body.to_vec(), end].concat()
}

/// A field of any number and wire type, groups and length-delimited
/// fields holding more of them.
fn any_field() -> BoxedStrategy<Vec<u8>> {
    let leaf = prop_oneof![
        4 => (tag(), raw_varint()).prop_map(|(t, v)| [key(t, VARINT), v].concat()),
        4 => (tag(), any::<[u8; 8]>()).prop_map(|(t, p)| [key(t, I64), p.to_vec()].concat()),
        4 => (tag(), any::<[u8; 4]>()).prop_map(|(t, p)| [key(t, I32), p.to_vec()].concat()),
        4 => (tag(), string_bytes(), length_error())
            .prop_map(|(t, body, off)| delimited_off(t, &body, off)),
        // Any wire type, 6 and 7 included, over bytes that may not fit it,
        // its key maybe padded.
        1 => (
            tag(),
            0..=7u8,
            0..2usize,
            prop::collection::vec(any::<u8>(), 0..12)
        )
            .prop_map(|(t, wt, pad, payload)| {
                [padded(u64::from(t) << 3 | u64::from(wt), pad), payload].concat()
            }),
        1 => tag().prop_map(|t| key(t, EGROUP)),
    ];
    leaf.prop_recursive(4, 48, 4, |inner| {
        let fields = prop::collection::vec(inner, 0..4).prop_map(|f| f.concat());
        prop_oneof![
            (tag(), fields.clone(), length_error())
                .prop_map(|(t, body, off)| delimited_off(t, &body, off)),
            (tag(), fields, group_end()).prop_map(|(t, body, end)| raw_group(t, &body, end)),
        ]
    })
    .boxed()
}

fn string_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => text().prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

fn limit_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (1..=2u32, raw_varint()).prop_map(|(t, v)| [key(t, VARINT), v].concat()),
        1 => any_field(),
    ]
}

fn item_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (prop::sample::select(vec![1u32, 2, 4, 5]), string_bytes(), length_error())
            .prop_map(|(t, body, off)| delimited_off(t, &body, off)),
        4 => (prop::sample::select(vec![3u32, 7]), raw_varint())
            .prop_map(|(t, v)| [key(t, VARINT), v].concat()),
        4 => (prop::collection::vec(limit_field(), 0..4), length_error())
            .prop_map(|(f, off)| delimited_off(6, &f.concat(), off)),
        1 => any_field(),
    ]
}

fn top_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (prop::collection::vec(item_field(), 0..6), length_error())
            .prop_map(|(f, off)| delimited_off(1, &f.concat(), off)),
        1 => any_field(),
    ]
}

fn garbage() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(top_field(), 0..6).prop_map(|f| f.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prosts_messages_decode_as_prost_decodes_them(msg in check_request()) {
        let bytes = msg.encode_to_vec();
        agrees(&bytes);
        prop_assert_eq!(decoded(&bytes).len(), msg.items.len());
    }

    #[test]
    fn mutated_messages_decode_as_prost_decodes_them(
        msg in check_request(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut bytes = msg.encode_to_vec();
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        agrees(&bytes);
    }

    #[test]
    fn structured_garbage_decodes_as_prost_decodes_it(bytes in garbage()) {
        agrees(&bytes);
    }
}
