//! One `CheckResult` written from an [`Answer`], byte for byte as prost
//! writes the message: fields in number order, proto3's defaults (zero,
//! false, empty) left out.

use crate::convert::Answer;

/// Wire type 0 and 2 keys of the fields a decided result carries, and of
/// the response's `results`.
const RESULTS: u8 = 1 << 3 | 2;
const ALLOWED: u8 = 1 << 3;
const LIMIT: u8 = 2 << 3;
const REMAINING: u8 = 3 << 3;
const RETRY_AFTER_MS: u8 = 4 << 3;
const RESET_AT_MS: u8 = 5 << 3;
const RULE: u8 = 6 << 3 | 2;
const DELAY_MS: u8 = 7 << 3;
const LIMITED: u8 = 8 << 3;
const WINDOW_MS: u8 = 10 << 3;

/// Appends `a` as one of a `CheckResponse`'s `results`.
///
/// The fields around the rule's name are written to the stack first and
/// appended a few slices at a time: a push per byte, each checking the
/// vector's capacity, cost as much again.
pub(super) fn answer(out: &mut Vec<u8>, a: &Answer<'_>) {
    let mut head = Scratch::default();
    if a.allowed {
        head.put(&[ALLOWED, 1]);
    }
    head.uint(LIMIT, a.limit);
    head.uint(REMAINING, a.remaining);
    head.uint(RETRY_AFTER_MS, a.retry_after_ms);
    head.uint(RESET_AT_MS, a.reset_at_ms);
    let rule = a.rule.as_bytes();
    let mut rule_key = Scratch::default();
    if !rule.is_empty() {
        rule_key.put(&[RULE]);
        rule_key.varint(rule.len() as u64);
    }
    let mut tail = Scratch::default();
    tail.uint(DELAY_MS, a.delay_ms);
    if a.limited {
        tail.put(&[LIMITED, 1]);
    }
    tail.uint(WINDOW_MS, a.window_ms);

    let len = head.len + rule_key.len + rule.len() + tail.len;
    let mut lead = Scratch::default();
    lead.put(&[RESULTS]);
    lead.varint(len as u64);
    out.reserve(lead.len + len);
    for part in [
        lead.bytes(),
        head.bytes(),
        rule_key.bytes(),
        rule,
        tail.bytes(),
    ] {
        out.extend_from_slice(part);
    }
}

/// A few fields' bytes on the stack: at most one bool's two bytes and
/// four keyed varints of eleven.
struct Scratch {
    bytes: [u8; 48],
    len: usize,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            bytes: [0; 48],
            len: 0,
        }
    }
}

impl Scratch {
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn put(&mut self, bytes: &[u8]) {
        self.bytes[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// A uint64 field, left out at zero.
    fn uint(&mut self, key: u8, v: u64) {
        if v != 0 {
            self.put(&[key]);
            self.varint(v);
        }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.bytes[self.len] = v as u8 | 0x80;
            self.len += 1;
            v >>= 7;
        }
        self.bytes[self.len] = v as u8;
        self.len += 1;
    }
}
