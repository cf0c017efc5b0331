//! The hand-written codec held to prost's: a byte string decodes here
//! exactly when prost decodes it, to the checks prost's message converts
//! to, and an answer encodes to prost's bytes. Generated messages, mutated
//! ones and structured garbage go through [`agrees`]; the named tests pin
//! what each rule of the wire format comes to.

use std::time::Duration;

use prost::Message;
use weir_core::CheckError;

use bytes::Bytes;

use super::{decode_request, Request, Response};
use crate::convert::{self, Answer};
use crate::weir::v1 as pb;
use crate::wire_test::*;

mod decode;
mod encode;
mod generated;

// --- the comparison ---

/// Asserts that check_wire and prost accept the same bytes, and read them
/// to the same checks.
fn agrees(bytes: &[u8]) {
    let ours = decode_request(bytes);
    let theirs = pb::CheckRequest::decode(bytes);
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            let refunds: Vec<usize> = (0..theirs.items.len())
                .filter(|&i| theirs.items[i].refund)
                .collect();
            assert_eq!(
                ours.refunds,
                refunds,
                "refunds differ for bytes [{}]",
                hex(bytes)
            );
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

// --- the messages' own fields ---

/// A `CheckRequest` item of the given encoded fields.
fn item(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(1, &fields.concat())
}

/// An item's `limit` of the given encoded `ItemLimit` fields.
fn limit(fields: &[Vec<u8>]) -> Vec<u8> {
    delimited(6, &fields.concat())
}
