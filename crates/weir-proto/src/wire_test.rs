//! Protobuf bytes built by hand, and the strategies that generate and
//! break them ([`arb`]), for the tests that hold a hand-written reader to
//! prost's (`check_wire`, `rls_wire`).

pub(crate) mod arb;

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// The readers' wire types under the tests' short names. Sharing them
// weakens nothing: the bytes are held to prost's reading, not to ours.
pub(crate) use crate::read::{
    END_GROUP as EGROUP, LEN, SIXTY_FOUR_BIT as I64, START_GROUP as SGROUP, THIRTY_TWO_BIT as I32,
    VARINT,
};

/// The largest field number a key can carry.
pub(crate) const MAX_TAG: u32 = (1 << 29) - 1;

pub(crate) fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// `v` with `pad` redundant zero groups: longer than it needs, which
/// protobuf readers accept as long as it stays within ten bytes.
pub(crate) fn padded(v: u64, pad: usize) -> Vec<u8> {
    let mut out = varint(v);
    if pad > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.extend(std::iter::repeat_n(0x80, pad - 1));
        out.push(0x00);
    }
    out
}

pub(crate) fn key(tag: u32, wire_type: u8) -> Vec<u8> {
    varint(u64::from(tag) << 3 | u64::from(wire_type))
}

/// A key and whatever bytes follow it, fitting its wire type or not.
pub(crate) fn raw(tag: u32, wire_type: u8, payload: &[u8]) -> Vec<u8> {
    [key(tag, wire_type), payload.to_vec()].concat()
}

/// Keys alone, as groups' starts and ends are.
pub(crate) fn keys(keys: &[(u32, u8)]) -> Vec<u8> {
    keys.iter().flat_map(|&(tag, wt)| key(tag, wt)).collect()
}

pub(crate) fn uint(tag: u32, v: u64) -> Vec<u8> {
    [key(tag, VARINT), varint(v)].concat()
}

/// A length-delimited field whose length prefix is off by `adjust`.
pub(crate) fn delimited_off(tag: u32, body: &[u8], adjust: i64) -> Vec<u8> {
    let len = (body.len() as i64 + adjust).max(0) as u64;
    [key(tag, LEN), varint(len), body.to_vec()].concat()
}

pub(crate) fn delimited(tag: u32, body: &[u8]) -> Vec<u8> {
    delimited_off(tag, body, 0)
}

pub(crate) fn group(tag: u32, body: &[u8]) -> Vec<u8> {
    [key(tag, SGROUP), body.to_vec(), key(tag, EGROUP)].concat()
}

/// `depth` groups of field `tag`, each inside the one before.
pub(crate) fn nested_groups(tag: u32, depth: usize) -> Vec<u8> {
    [
        key(tag, SGROUP).repeat(depth),
        key(tag, EGROUP).repeat(depth),
    ]
    .concat()
}

/// One field of every wire type, numbered as no message here knows it;
/// the group holds what would be known fields outside it.
pub(crate) fn unknown_fields() -> Vec<u8> {
    [
        uint(9, 300),
        raw(10, I64, &[0xff; 8]),
        delimited(11, b"\x08\x01not read"),
        group(12, &[uint(1, 7), delimited(2, b"x")].concat()),
        raw(1000, I32, &[0xff; 4]),
    ]
    .concat()
}
