//! A `weir.v1.CheckRequest` read into checks, with prost's rules: fields in
//! any order, the last of a repeated scalar or string winning, a repeated
//! `limit` merged, unknown fields skipped whatever their wire type, and
//! every malformed varint, key, length, group or string refused.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckError, CheckRequest};

use crate::convert;
use crate::weir::v1::ItemLimit;

/// Why a message is not a `CheckRequest`. Named like prost's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireError(&'static str);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for WireError {}

const VARINT: u8 = 0;
const SIXTY_FOUR_BIT: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const THIRTY_TWO_BIT: u8 = 5;

/// How deep messages and groups may nest: prost's limit, counted the same
/// way, so a message one decoder refuses for depth the other does too.
const RECURSION_LIMIT: u32 = 100;

/// Reads `bytes` front to back.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// A base-128 varint of at most ten bytes, the tenth holding one bit.
    fn varint(&mut self) -> Result<u64, WireError> {
        // Most varints here are one byte: keys, lengths, a cost of 1.
        if let Some((&b, rest)) = self.bytes.split_first() {
            if b < 0x80 {
                self.bytes = rest;
                return Ok(u64::from(b));
            }
        }
        let mut value = 0u64;
        for (i, &b) in self.bytes.iter().take(10).enumerate() {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    break;
                }
                self.bytes = &self.bytes[i + 1..];
                return Ok(value);
            }
        }
        Err(WireError("invalid varint"))
    }

    /// A field's number and wire type.
    fn key(&mut self) -> Result<(u32, u8), WireError> {
        let key = self.varint()?;
        let key = u32::try_from(key).map_err(|_| WireError("invalid key value"))?;
        let wire_type = (key & 7) as u8;
        if wire_type > THIRTY_TWO_BIT {
            return Err(WireError("invalid wire type value"));
        }
        if key >> 3 == 0 {
            return Err(WireError("invalid tag value: 0"));
        }
        Ok((key >> 3, wire_type))
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], WireError> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= self.bytes.len())
            .ok_or(WireError("buffer underflow"))?;
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    /// A length-delimited field's bytes.
    fn delimited(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.varint()?;
        self.take(len)
    }

    fn string(&mut self) -> Result<String, WireError> {
        utf8(self.delimited()?)
    }

    /// Passes over a field this decoder does not read. `depth` is what is
    /// left of the recursion limit.
    fn skip(&mut self, tag: u32, wire_type: u8, depth: u32) -> Result<(), WireError> {
        if depth == 0 {
            return Err(WireError("recursion limit reached"));
        }
        match wire_type {
            VARINT => self.varint().map(drop),
            SIXTY_FOUR_BIT => self.take(8).map(drop),
            THIRTY_TWO_BIT => self.take(4).map(drop),
            LEN => self.delimited().map(drop),
            START_GROUP => loop {
                match self.key()? {
                    (end, END_GROUP) if end == tag => return Ok(()),
                    (_, END_GROUP) => return Err(WireError("unexpected end group tag")),
                    (inner, wt) => self.skip(inner, wt, depth - 1)?,
                }
            },
            _ => Err(WireError("unexpected end group tag")),
        }
    }
}

/// Refuses a known field sent with another wire type.
fn expect(wire_type: u8, wanted: u8) -> Result<(), WireError> {
    if wire_type == wanted {
        Ok(())
    } else {
        Err(WireError("invalid wire type for a known field"))
    }
}

/// A string field's bytes as a `String`, refused unless UTF-8.
fn utf8(bytes: &[u8]) -> Result<String, WireError> {
    // Keys and routes are mostly short ASCII, where `str::from_utf8` took
    // 112 instructions a string and `is_ascii` a handful
    // (bench/pipeline-count.sh).
    if bytes.is_ascii() {
        #[allow(unsafe_code)]
        // SAFETY: ASCII is UTF-8.
        return Ok(unsafe { String::from_utf8_unchecked(bytes.to_vec()) });
    }
    std::str::from_utf8(bytes)
        .map(String::from)
        .map_err(|_| WireError("invalid string value: data is not UTF-8 encoded"))
}

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
    let mut r = Reader { bytes };
    while !r.is_empty() {
        match r.key()? {
            (1, wt) => {
                expect(wt, LEN)?;
                match check_item(r.delimited()?, RECURSION_LIMIT - 1)? {
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
    Ok(super::Checks { checks, refused })
}

/// How many items the message holds, from its top-level keys and lengths
/// alone; a message malformed at the top level is refused here.
pub(super) fn count_items(bytes: &[u8]) -> Result<usize, WireError> {
    let mut r = Reader { bytes };
    let mut n = 0;
    while !r.is_empty() {
        match r.key()? {
            (1, wt) => {
                expect(wt, LEN)?;
                r.delimited()?;
                n += 1;
            }
            (tag, wt) => r.skip(tag, wt, RECURSION_LIMIT)?,
        }
    }
    Ok(n)
}

/// One `CheckItem` read straight into the check it asks for, as
/// `convert::request` reads the prost message: an empty tier or IP is
/// proto3's "not set", an absent cost is 1, and a carried limit that
/// cannot limit refuses the item alone.
fn check_item(bytes: &[u8], depth: u32) -> Result<Result<CheckRequest, CheckError>, WireError> {
    let mut check = CheckRequest::new(String::new(), String::new());
    let mut limit: Option<ItemLimit> = None;
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
                if depth == 0 {
                    return Err(WireError("recursion limit reached"));
                }
                let limit = limit.get_or_insert_with(ItemLimit::default);
                merge_limit(limit, r.delimited()?, depth - 1)?;
            }
            7 => {
                expect(wt, VARINT)?;
                check.max_delay = Some(Duration::from_millis(r.varint()?));
            }
            _ => r.skip(tag, wt, depth)?,
        }
    }
    if let Some(l) = limit {
        match convert::item_rule(&l) {
            Ok(rule) => check.limit = Some(Arc::new(rule)),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(check))
}

/// An `ItemLimit`'s fields over `limit`: a second occurrence of the
/// message merges into the first, as protobuf merges messages.
fn merge_limit(limit: &mut ItemLimit, bytes: &[u8], depth: u32) -> Result<(), WireError> {
    let mut r = Reader { bytes };
    while !r.is_empty() {
        match r.key()? {
            (1, wt) => {
                expect(wt, VARINT)?;
                limit.limit = r.varint()?;
            }
            (2, wt) => {
                expect(wt, VARINT)?;
                limit.window_ms = r.varint()?;
            }
            (tag, wt) => r.skip(tag, wt, depth)?,
        }
    }
    Ok(())
}
