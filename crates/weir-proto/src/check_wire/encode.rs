//! One `CheckResult` written from an [`Answer`], byte for byte as prost
//! writes the message: fields in number order, proto3's defaults (zero,
//! false, empty) left out.

use crate::convert::Answer;
use crate::write;

/// Appends `a` as one of a `CheckResponse`'s `results` (field 1).
pub(super) fn answer(out: &mut Vec<u8>, a: &Answer<'_>) {
    write::message(out, 1, |out| {
        write::uint(out, 1, u64::from(a.allowed));
        write::uint(out, 2, a.limit);
        write::uint(out, 3, a.remaining);
        write::uint(out, 4, a.retry_after_ms);
        write::uint(out, 5, a.reset_at_ms);
        write::bytes(out, 6, a.rule.as_bytes());
        write::uint(out, 7, a.delay_ms);
        write::uint(out, 8, u64::from(a.limited));
        // 9 is `error`, never set on a decided item.
        write::uint(out, 10, a.window_ms);
    });
}
