//! A `weir.v1.CheckRequest` read into checks, with prost's rules: fields in
//! any order, the last of a repeated scalar or string winning, a repeated
//! `limit` merged, unknown fields skipped whatever their wire type, and
//! every malformed varint, key, length, group or string refused.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckError, CheckRequest};

use crate::convert;
use crate::read::{self, expect, Reader, WireError, LEN, RECURSION_LIMIT, VARINT};
use crate::weir::v1::ItemLimit;

/// A whole `CheckRequest` message, read in both passes: each item's check
/// in order, an item refused alone (a carried limit that cannot limit)
/// standing as an empty check and listed with its error.
pub fn decode_request(bytes: &[u8]) -> Result<super::Checks, WireError> {
    checks(bytes, count_items(bytes)?)
}

/// The items of a message whose top level [`count_items`] has read, into
/// a vector of `items` checks allocated once.
pub(super) fn checks(bytes: &[u8], items: usize) -> Result<super::Checks, WireError> {
    let mut checks = Vec::with_capacity(items);
    let mut refused = Vec::new();
    let mut refunds = Vec::new();
    let mut r = Reader { bytes };
    while !r.is_empty() {
        match r.key()? {
            (1, wt) => {
                expect(wt, LEN)?;
                let (item, refund) = check_item(r.delimited()?, RECURSION_LIMIT - 1)?;
                if refund {
                    refunds.push(checks.len());
                }
                match item {
                    Ok(check) => checks.push(check),
                    Err(e) => {
                        refused.push((checks.len(), e));
                        checks.push(CheckRequest::new("", ""));
                    }
                }
            }
            (tag, wt) => r.skip(tag, wt, RECURSION_LIMIT)?,
        }
    }
    Ok(super::Checks {
        checks,
        refused,
        refunds,
    })
}

/// How many items the message holds, from its top-level keys and lengths
/// alone; a message malformed at the top level is refused here.
pub(super) fn count_items(bytes: &[u8]) -> Result<usize, WireError> {
    read::count_field(bytes, 1)
}

/// One `CheckItem` read straight into the check it asks for, as
/// `convert::request` reads the prost message: an empty tier or IP is
/// proto3's "not set", an absent cost is 1, and a carried limit that
/// cannot limit refuses the item alone. With it, whether the item is a
/// refund (`refund`, a bool: any varint but 0, the last one winning).
fn check_item(
    bytes: &[u8],
    depth: u32,
) -> Result<(Result<CheckRequest, CheckError>, bool), WireError> {
    let mut check = CheckRequest::new(String::new(), String::new());
    let mut limit: Option<ItemLimit> = None;
    let mut refund = false;
    let mut r = Reader { bytes };
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match tag {
            1 | 2 | 4 | 5 => {
                expect(wt, LEN)?;
                let s = r.string()?;
                match tag {
                    1 => check.key = s,
                    2 => check.route = s,
                    4 => check.tier = (!s.is_empty()).then_some(s),
                    _ => check.ip = (!s.is_empty()).then_some(s),
                }
            }
            3 => {
                expect(wt, VARINT)?;
                check.cost = r.varint()?;
            }
            6 => {
                expect(wt, LEN)?;
                // No depth check before the limit is entered: an item is
                // read one level below the top, so `depth` is never 0 here.
                let limit = limit.get_or_insert_with(ItemLimit::default);
                merge_limit(limit, r.delimited()?, depth - 1)?;
            }
            7 => {
                expect(wt, VARINT)?;
                check.max_delay = Some(Duration::from_millis(r.varint()?));
            }
            8 => {
                expect(wt, VARINT)?;
                refund = r.varint()? != 0;
            }
            _ => r.skip(tag, wt, depth)?,
        }
    }
    if let Some(l) = limit {
        match convert::item_rule(&l) {
            Ok(rule) => check.limit = Some(Arc::new(rule)),
            Err(e) => return Ok((Err(e), refund)),
        }
    }
    Ok((Ok(check), refund))
}

/// An `ItemLimit`'s fields over `limit`: a second occurrence of the
/// message merges into the first, as protobuf merges messages.
fn merge_limit(limit: &mut ItemLimit, bytes: &[u8], depth: u32) -> Result<(), WireError> {
    read::merge_varints(bytes, depth, &[1, 2], |tag, v| match tag {
        1 => limit.limit = v,
        _ => limit.window_ms = v,
    })
}
