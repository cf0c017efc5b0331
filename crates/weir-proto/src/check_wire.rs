//! `weir.v1.RateLimiter/Check` read and written by hand: the node's codec
//! for its busiest call.
//!
//! The prost messages go through a generic decoder that grows the item
//! vector by doubling and builds each `CheckItem` before it becomes a
//! [`CheckRequest`], and an answer is built as a `CheckResult` (its rule
//! name allocated) only to be measured and encoded field by field. Here a
//! request is read straight into the checks it asks for, into a vector
//! sized by one pass over the items, and each answer is written straight
//! from its [`Answer`]. prost's side of that was half of a 100-item call's
//! instructions in process; this one is about a third (docs/performance.md).
//!
//! The bytes are protobuf's, the same as prost's on both sides: a request
//! decodes here exactly when prost decodes it, to the same checks, and an
//! answer encodes to the same bytes (both tested against prost over
//! generated and mutated messages, `check_wire/tests.rs`). Clients keep
//! the prost messages; only the server side is replaced.

mod decode;
mod encode;
#[cfg(test)]
mod tests;

use bytes::{Buf, Bytes};
use tonic::codec::{DecodeBuf, Decoder};
use tonic::Status;
use weir_core::{CheckError, CheckRequest};

pub use decode::{decode_request, WireError};

use crate::convert::Answer;
use crate::weir::v1::CheckResult;
use crate::write::ServerCodec;

/// A `CheckRequest` as it arrived: its bytes, and how many items they
/// hold, counted from the message's top-level fields alone.
///
/// The items are decoded only when asked, so a batch over the node's limit
/// is refused before it costs anything. An empty item is two bytes on the
/// wire and a [`CheckRequest`] of over a hundred in memory: decoded
/// first, the largest message a node accepts could have become some
/// 740,000 checks and 94 MB before the limit was read.
#[derive(Debug, Clone)]
pub struct Request {
    bytes: Bytes,
    items: usize,
}

impl Request {
    /// Reads the message's top level: each item's length, and every other
    /// field passed over. A message malformed there is refused now; one
    /// malformed inside an item, when it is decoded.
    pub fn new(bytes: Bytes) -> Result<Self, WireError> {
        let items = decode::count_items(&bytes)?;
        Ok(Request { bytes, items })
    }

    /// How many items the message holds.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Each item's check, in order.
    pub fn decode(&self) -> Result<Checks, WireError> {
        decode::checks(&self.bytes, self.items)
    }
}

/// A decoded `CheckRequest`: each item as the check it asks for, in order.
/// An item refused alone (a carried limit that cannot limit) stands as an
/// empty check, which no limiter admits, and is listed in `refused` with
/// its error; a batch almost never has one.
#[derive(Debug, Default, PartialEq)]
pub struct Checks {
    pub checks: Vec<CheckRequest>,
    pub refused: Vec<(usize, CheckError)>,
}

impl Checks {
    /// Each item's check, or its refusal.
    pub fn into_items(self) -> Vec<Result<CheckRequest, CheckError>> {
        let mut items: Vec<_> = self.checks.into_iter().map(Ok).collect();
        for (i, e) in self.refused {
            items[i] = Err(e);
        }
        items
    }
}

/// An encoded `CheckResponse`, one result appended per item in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Response {
    bytes: Vec<u8>,
}

/// Bytes one result mostly takes (a rule name of some ten bytes and five
/// numbers), so a batch's answer is sized once.
const RESULT_BYTES: usize = 48;

impl Response {
    /// Room for `items` results.
    pub fn with_capacity(items: usize) -> Self {
        Response {
            bytes: Vec::with_capacity(items.saturating_mul(RESULT_BYTES)),
        }
    }

    /// Appends a decided item's result.
    pub fn push_answer(&mut self, a: &Answer<'_>) {
        encode::answer(&mut self.bytes, a);
    }

    /// Appends any result (an item's error): prost's encoding, for what is rare.
    pub fn push_result(&mut self, r: &CheckResult) {
        prost::encoding::message::encode(1, r, &mut self.bytes);
    }

    /// The encoded `CheckResponse`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl AsRef<[u8]> for Response {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The tonic codec of the generated server below: decodes into
/// [`Request`], sends a [`Response`]'s bytes as they are.
pub type CheckCodec = ServerCodec<CheckDecoder, Response>;

/// Reads a [`Request`] from the message's bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct CheckDecoder;

impl Decoder for CheckDecoder {
    type Item = Request;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Request>, Status> {
        // tonic's buffer gives the message up without a copy.
        let len = buf.remaining();
        Request::new(buf.copy_to_bytes(len))
            .map(Some)
            .map_err(Status::from)
    }
}

impl From<WireError> for Status {
    /// INTERNAL, as tonic's prost codec answers a message it cannot parse.
    fn from(e: WireError) -> Status {
        Status::internal(format!("failed to decode Protobuf message: {e}"))
    }
}

/// `weir.v1.RateLimiter`'s server on [`CheckCodec`], generated by
/// tonic-build from `build.rs` as `rate_limiter_server`: the trait a node
/// implements with [`Request`] and [`Response`] in place of the prost
/// messages.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/weir.v1.RateLimiter.rs"));
}
pub use generated::rate_limiter_server;
