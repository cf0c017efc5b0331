//! Protobuf fields appended to a byte vector by hand, as prost writes
//! them: for answers a server writes straight from its own types
//! (`check_wire`, and the node's Envoy RLS response), so no message is
//! built only to be encoded and dropped. A field at its proto3 default
//! (zero, empty) is left out, as prost leaves it out.

use std::marker::PhantomData;

use bytes::BufMut;
use tonic::codec::{Codec, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// The tonic codec of a server that writes its answers' bytes itself
/// (`check_wire`, `rls_wire`): requests go through the decoder `D`, and an
/// answer `T`'s bytes are sent as they are.
pub struct ServerCodec<D, T>(PhantomData<fn() -> (D, T)>);

impl<D, T> Default for ServerCodec<D, T> {
    fn default() -> Self {
        ServerCodec(PhantomData)
    }
}

impl<D, T> Codec for ServerCodec<D, T>
where
    D: Decoder<Error = Status> + Default + Send + 'static,
    D::Item: Send + 'static,
    T: AsRef<[u8]> + Send + 'static,
{
    type Encode = T;
    type Decode = D::Item;
    type Encoder = Written<T>;
    type Decoder = D;

    fn encoder(&mut self) -> Written<T> {
        Written(PhantomData)
    }

    fn decoder(&mut self) -> D {
        D::default()
    }
}

/// [`ServerCodec`]'s encoder: an answer's bytes, sent as they are.
pub struct Written<T>(PhantomData<fn() -> T>);

impl<T: AsRef<[u8]> + Send + 'static> Encoder for Written<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(item.as_ref());
        Ok(())
    }
}

/// A field's key: its number and wire type.
pub fn key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire_type)));
}

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A uint32, uint64, int64 (not negative) or enum field.
pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, 0);
        varint(out, v);
    }
}

/// A string or bytes field.
pub fn bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    if !v.is_empty() {
        key(out, field, 2);
        varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }
}

/// A message field, present even when empty: `body` writes its fields,
/// and their length is put before them once known.
pub fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, 2);
    // One byte for the length, which holds it for a body under 128 bytes;
    // a longer body moves over to make room.
    let at = out.len();
    out.push(0);
    body(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        varint(&mut prefix, len as u64);
        out.splice(at..=at, prefix);
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use crate::weir::v1::{CheckResponse, CheckResult, ItemError};

    /// A message with a string, numbers and a nested message, written
    /// both ways; `message_len` sets how long its nested message is.
    fn both(message_len: usize) -> (Vec<u8>, Vec<u8>) {
        let r = CheckResult {
            allowed: true,
            limit: 1 << 40,
            rule: "r".repeat(7),
            error: Some(ItemError {
                code: 3,
                field: String::new(),
                message: "m".repeat(message_len),
            }),
            ..CheckResult::default()
        };
        let theirs = CheckResponse {
            results: vec![r.clone()],
        }
        .encode_to_vec();
        let mut ours = Vec::new();
        super::message(&mut ours, 1, |out| {
            super::uint(out, 1, u64::from(r.allowed));
            super::uint(out, 2, r.limit);
            super::uint(out, 3, r.remaining);
            super::bytes(out, 6, r.rule.as_bytes());
            let e = r.error.as_ref().unwrap();
            super::message(out, 9, |out| {
                super::uint(out, 1, e.code as u64);
                super::bytes(out, 2, e.field.as_bytes());
                super::bytes(out, 3, e.message.as_bytes());
            });
        });
        (ours, theirs)
    }

    #[test]
    fn fields_are_written_as_prost_writes_them_at_every_length() {
        // Around the one-byte length's edge and the two-byte one's.
        for len in [
            0, 1, 100, 124, 125, 126, 127, 128, 200, 16_383, 16_384, 70_000,
        ] {
            let (ours, theirs) = both(len);
            assert_eq!(ours, theirs, "a nested message of {len} bytes");
        }
    }
}
