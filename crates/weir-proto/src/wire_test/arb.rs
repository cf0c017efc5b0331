//! Strategies for protobuf bytes: numbers and strings at their edges,
//! mutations of a valid message, and fields of any number and wire type
//! that are mostly, not always, well-formed.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngAlgorithm;

use super::*;

pub(crate) fn number() -> impl Strategy<Value = u64> {
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
pub(crate) fn text() -> impl Strategy<Value = String> {
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

#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Flip(Index, u8),
    Truncate(Index),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<Index>(), 1..16usize).prop_map(|(at, n)| Mutation::Delete(at, n)),
    ]
}

/// `bytes` with every mutation applied, in order.
pub(crate) fn mutated(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        mutate(&mut bytes, m);
    }
    bytes
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
pub(crate) fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

/// A varint as it may arrive: canonical, padded, at and past ten bytes,
/// overflowing, or never ending.
pub(crate) fn raw_varint() -> impl Strategy<Value = Vec<u8>> {
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

pub(crate) fn tag() -> impl Strategy<Value = u32> {
    prop_oneof![24 => 1..=12u32, 1 => Just(0), 1 => Just(MAX_TAG)]
}

/// How far a length prefix is off its body: mostly not at all.
pub(crate) fn length_error() -> impl Strategy<Value = i64> {
    prop_oneof![20 => Just(0i64), 1 => -3..=3i64]
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum GroupEnd {
    Matching,
    Numbered(u32),
    Missing,
}

pub(crate) fn group_end() -> impl Strategy<Value = GroupEnd> {
    prop_oneof![
        6 => Just(GroupEnd::Matching),
        1 => (1..=12u32).prop_map(GroupEnd::Numbered),
        1 => Just(GroupEnd::Missing),
    ]
}

pub(crate) fn raw_group(tag: u32, body: &[u8], end: GroupEnd) -> Vec<u8> {
    let end = match end {
        GroupEnd::Matching => key(tag, EGROUP),
        GroupEnd::Numbered(t) => key(t, EGROUP),
        GroupEnd::Missing => Vec::new(),
    };
    [key(tag, SGROUP), body.to_vec(), end].concat()
}

/// A field of any number and wire type, groups and length-delimited
/// fields holding more of them.
pub(crate) fn any_field() -> BoxedStrategy<Vec<u8>> {
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

pub(crate) fn string_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => text().prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

/// A message of up to five top-level fields drawn from `field`.
pub(crate) fn fields(field: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(field, 0..6).prop_map(|f| f.concat())
}
