//! The hand-written codec held to prost's: a byte string decodes here
//! exactly when prost decodes it, to the checks prost's message converts
//! to, and an answer encodes to prost's bytes. Generated messages, mutated
//! ones and structured garbage go through [`agrees`]; the named tests pin
//! what each rule of the wire format comes to.

use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngAlgorithm;
use prost::Message;
use weir_core::CheckError;

use bytes::Bytes;

use super::{decode_request, Request, Response};
use crate::convert::{self, Answer};
use crate::weir::v1 as pb;

mod decode;
mod encode;
mod generated;

// --- the comparison ---

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Asserts that check_wire and prost accept the same bytes, and read them
/// to the same checks.
fn agrees(bytes: &[u8]) {
    let ours = decode_request(bytes);
    let theirs = pb::CheckRequest::decode(bytes);
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            let expected: Vec<_> = theirs.items.into_iter().map(convert::request).collect();
            assert_eq!(
                ours.into_items(),
                expected,
                "items differ for bytes [{}]",
                hex(bytes)
            );
        }
        (Err(_), Err(_)) => {}
        (ours, theirs) => panic!(
            "check_wire gives {ours:?}, prost {theirs:?}, for bytes [{}]",
            hex(bytes)
        ),
    }
}

type Items = Vec<Result<weir_core::CheckRequest, CheckError>>;

/// The items of a message both decoders accept.
fn decoded(bytes: &[u8]) -> Items {
    agrees(bytes);
    match decode_request(bytes) {
        Ok(r) => r.into_items(),
        Err(e) => panic!("refused ({e}) bytes [{}]", hex(bytes)),
    }
}

/// The one valid check of a one-item message.
fn single(bytes: &[u8]) -> weir_core::CheckRequest {
    let mut items = decoded(bytes);
    assert_eq!(items.len(), 1, "bytes [{}]", hex(bytes));
    match items.pop() {
        Some(Ok(check)) => check,
        other => panic!("{other:?} for bytes [{}]", hex(bytes)),
    }
}

/// Asserts both decoders refuse `bytes`.
fn refused(bytes: &[u8]) {
    agrees(bytes);
    assert!(
        decode_request(bytes).is_err(),
        "accepted bytes [{}]",
        hex(bytes)
    );
}

// --- building wire bytes by hand ---

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const I32: u8 = 5;

/// The largest field number a key can carry.
const MAX_TAG: u32 = (1 << 29) - 1;

fn varint(mut v: u64) -> Vec<u8> {
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
fn padded(v: u64, pad: usize) -> Vec<u8> {
    let mut out = varint(v);
    if pad > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.extend(std::iter::repeat_n(0x80, pad - 1));
        out.push(0x00);
    }
    out
}

fn key(tag: u32, wire_type: u8) -> Vec<u8> {
    varint(u64::from(tag) << 3 | u64::from(wire_type))
}

/// A key and whatever bytes follow it, fitting its wire type or not.
fn raw(tag: u32, wire_type: u8, payload: &[u8]) -> Vec<u8> {
    [key(tag, wire_type), payload.to_vec()].concat()
}

/// Keys alone, as groups' starts and ends are.
fn keys(keys: &[(u32, u8)]) -> Vec<u8> {
    keys.iter().flat_map(|&(tag, wt)| key(tag, wt)).collect()
}

fn uint(tag: u32, v: u64) -> Vec<u8> {
    [key(tag, VARINT), varint(v)].concat()
}

/// A length-delimited field whose length prefix is off by `adjust`.
fn delimited_off(tag: u32, body: &[u8], adjust: i64) -> Vec<u8> {
    let len = (body.len() as i64 + adjust).max(0) as u64;
    [key(tag, LEN), varint(len), body.to_vec()].concat()
}

fn delimited(tag: u32, body: &[u8]) -> Vec<u8> {
    delimited_off(tag, body, 0)
}

/// A `CheckRequest` item of the given encoded fields.
fn item(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(1, &fields.concat())
}

/// An item's `limit` of the given encoded `ItemLimit` fields.
fn limit(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(6, &fields.concat())
}

fn group(tag: u32, body: &[u8]) -> Vec<u8> {
    [key(tag, SGROUP), body.to_vec(), key(tag, EGROUP)].concat()
}

/// `depth` groups of field `tag`, each inside the one before.
fn nested_groups(tag: u32, depth: usize) -> Vec<u8> {
    [
        key(tag, SGROUP).repeat(depth),
        key(tag, EGROUP).repeat(depth),
    ]
    .concat()
}

/// One field of every wire type, numbered as no message here knows it;
/// the group holds what would be known fields outside it.
fn unknown_fields() -> Vec<u8> {
    [
        uint(9, 300),
        raw(10, I64, &[0xff; 8]),
        delimited(11, b"\x08\x01not read"),
        group(12, &[uint(1, 7), delimited(2, b"x")].concat()),
        raw(1000, I32, &[0xff; 4]),
    ]
    .concat()
}
