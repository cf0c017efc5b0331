//! A `RateLimitRequest` read in place, with prost's rules as check_wire
//! reads a `CheckRequest`: fields in any order, the last of a string or
//! scalar winning (`is_negative_hits` among them), a repeated `limit` or
//! `hits_addend` merged, unknown
//! fields skipped whatever their wire type, integers narrowed as prost
//! narrows them, and every malformed varint, key, length, group or string
//! refused.

use super::{Descriptor, Entry, RlsRequest};
use crate::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use crate::read::{self, expect, Reader, WireError, LEN, RECURSION_LIMIT, VARINT};

/// A whole message whose top level holds `descriptors` descriptors (as
/// counted by `read::count_field`), into a vector allocated once.
pub(super) fn request(bytes: &[u8], descriptors: usize) -> Result<RlsRequest<'_>, WireError> {
    let mut request = RlsRequest {
        descriptors: Vec::with_capacity(descriptors),
        ..RlsRequest::default()
    };
    let mut r = Reader { bytes };
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match tag {
            1 => {
                expect(wt, LEN)?;
                request.domain = r.str()?;
            }
            2 => {
                expect(wt, LEN)?;
                let d = descriptor(r.delimited()?, RECURSION_LIMIT - 1)?;
                request.descriptors.push(d);
            }
            3 => {
                expect(wt, VARINT)?;
                // A uint32 is read as a varint and cut to 32 bits.
                request.hits_addend = r.varint()? as u32;
            }
            _ => r.skip(tag, wt, RECURSION_LIMIT)?,
        }
    }
    Ok(request)
}

/// One `RateLimitDescriptor`; `depth` is what is left of the recursion
/// limit, one less for each message inside it.
fn descriptor(bytes: &[u8], depth: u32) -> Result<Descriptor<'_>, WireError> {
    let mut d = Descriptor::default();
    let mut r = Reader { bytes };
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        if tag == 4 {
            // `is_negative_hits`: a bool is any varint, true unless 0.
            expect(wt, VARINT)?;
            d.is_negative_hits = r.varint()? != 0;
            continue;
        }
        if !(1..=3).contains(&tag) {
            r.skip(tag, wt, depth)?;
            continue;
        }
        expect(wt, LEN)?;
        // No depth check before a level is entered: a descriptor is read
        // one level below the top, so `depth` here is never 0.
        let body = r.delimited()?;
        match tag {
            1 => d.entries.push(entry(body, depth - 1)?),
            2 => merge_override(
                d.limit.get_or_insert_with(Default::default),
                body,
                depth - 1,
            )?,
            _ => merge_count(d.hits_addend.get_or_insert(0), body, depth - 1)?,
        }
    }
    Ok(d)
}

fn entry(bytes: &[u8], depth: u32) -> Result<Entry<'_>, WireError> {
    let mut e = Entry::default();
    let mut r = Reader { bytes };
    while !r.is_empty() {
        match r.key()? {
            (1, wt) => {
                expect(wt, LEN)?;
                e.key = r.str()?;
            }
            (2, wt) => {
                expect(wt, LEN)?;
                e.value = r.str()?;
            }
            (tag, wt) => r.skip(tag, wt, depth)?,
        }
    }
    Ok(e)
}

/// A `RateLimitOverride`'s fields over `limit`: a second occurrence merges
/// into the first. The unit is an enum, kept as the number sent, as prost
/// keeps it.
fn merge_override(
    limit: &mut RateLimitOverride,
    bytes: &[u8],
    depth: u32,
) -> Result<(), WireError> {
    // A uint32 and an int32 are read as varints and cut to 32 bits.
    read::merge_varints(bytes, depth, &[1, 2], |tag, v| match tag {
        1 => limit.requests_per_unit = v as u32,
        _ => limit.unit = v as i32,
    })
}

/// A `google.protobuf.UInt64Value` over `value`: present but empty, it is
/// 0; sent again, its value replaces the first only if it carries one.
fn merge_count(value: &mut u64, bytes: &[u8], depth: u32) -> Result<(), WireError> {
    read::merge_varints(bytes, depth, &[1], |_, v| *value = v)
}
