//! Protobuf read by hand, by prost's rules, for the messages a server
//! reads itself (`check_wire`, `rls_wire`); and the decoder that hands a
//! message's bytes to the handler with one count taken from its top level,
//! so a request over the node's limits is refused before it is decoded.

use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use tonic::codec::{DecodeBuf, Decoder};
use tonic::Status;

/// Why bytes are not the message they should be. Named like prost's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireError(pub(crate) &'static str);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for WireError {}

pub(crate) const VARINT: u8 = 0;
pub(crate) const SIXTY_FOUR_BIT: u8 = 1;
pub(crate) const LEN: u8 = 2;
pub(crate) const START_GROUP: u8 = 3;
pub(crate) const END_GROUP: u8 = 4;
pub(crate) const THIRTY_TWO_BIT: u8 = 5;

/// How deep messages and groups may nest: prost's limit, counted the same
/// way, so a message one decoder refuses for depth the other does too.
pub(crate) const RECURSION_LIMIT: u32 = 100;

/// Reads `bytes` front to back.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// A base-128 varint of at most ten bytes, the tenth holding one bit.
    pub(crate) fn varint(&mut self) -> Result<u64, WireError> {
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
    pub(crate) fn key(&mut self) -> Result<(u32, u8), WireError> {
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

    pub(crate) fn take(&mut self, len: u64) -> Result<&'a [u8], WireError> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= self.bytes.len())
            .ok_or(WireError("buffer underflow"))?;
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    /// A length-delimited field's bytes.
    pub(crate) fn delimited(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.varint()?;
        self.take(len)
    }

    pub(crate) fn string(&mut self) -> Result<String, WireError> {
        self.str().map(String::from)
    }

    /// A string field borrowed from the message.
    pub(crate) fn str(&mut self) -> Result<&'a str, WireError> {
        as_str(self.delimited()?)
    }

    /// Passes over a field this decoder does not read. `depth` is what is
    /// left of the recursion limit.
    pub(crate) fn skip(&mut self, tag: u32, wire_type: u8, depth: u32) -> Result<(), WireError> {
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

/// Reads a message whose known fields, `known`, are all varints: each
/// value goes to `set` with its field number, in the order sent (so a
/// field sent again replaces what it set, and a message sent again merges
/// into the first); every other field is passed over. `depth` as for
/// [`Reader::skip`].
pub(crate) fn merge_varints(
    bytes: &[u8],
    depth: u32,
    known: &[u32],
    mut set: impl FnMut(u32, u64),
) -> Result<(), WireError> {
    let mut r = Reader { bytes };
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        if known.contains(&tag) {
            expect(wt, VARINT)?;
            set(tag, r.varint()?);
        } else {
            r.skip(tag, wt, depth)?;
        }
    }
    Ok(())
}

/// Refuses a known field sent with another wire type.
pub(crate) fn expect(wire_type: u8, wanted: u8) -> Result<(), WireError> {
    if wire_type == wanted {
        Ok(())
    } else {
        Err(WireError("invalid wire type for a known field"))
    }
}

/// A string field's bytes as a `str`, refused unless UTF-8.
fn as_str(bytes: &[u8]) -> Result<&str, WireError> {
    // Keys and routes are mostly short ASCII, where `str::from_utf8` took
    // 112 instructions a string and `is_ascii` a handful
    // (bench/pipeline-count.sh).
    if bytes.is_ascii() {
        #[allow(unsafe_code)]
        // SAFETY: ASCII is UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes)
        .map_err(|_| WireError("invalid string value: data is not UTF-8 encoded"))
}

/// How many times field `tag`, length-delimited, occurs at the message's
/// top level, every other field passed over; a message malformed at its
/// top level is refused here.
pub(crate) fn count_field(bytes: &[u8], tag: u32) -> Result<usize, WireError> {
    let mut r = Reader { bytes };
    let mut n = 0;
    while !r.is_empty() {
        match r.key()? {
            (t, wt) if t == tag => {
                expect(wt, LEN)?;
                r.delimited()?;
                n += 1;
            }
            (t, wt) => r.skip(t, wt, RECURSION_LIMIT)?,
        }
    }
    Ok(n)
}

impl From<WireError> for Status {
    /// INTERNAL, as tonic's prost codec answers a message it cannot parse.
    fn from(e: WireError) -> Status {
        Status::internal(format!("failed to decode Protobuf message: {e}"))
    }
}

/// A request read from its bytes alone, its items left to decode later.
pub trait FromBytes: Sized {
    fn from_bytes(bytes: Bytes) -> Result<Self, WireError>;
}

/// A tonic decoder that hands the message's bytes to `M`.
pub struct BytesDecoder<M>(PhantomData<fn() -> M>);

impl<M> Default for BytesDecoder<M> {
    fn default() -> Self {
        BytesDecoder(PhantomData)
    }
}

impl<M: FromBytes> Decoder for BytesDecoder<M> {
    type Item = M;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<M>, Status> {
        // tonic's buffer gives the message up without a copy.
        let len = buf.remaining();
        M::from_bytes(buf.copy_to_bytes(len))
            .map(Some)
            .map_err(Status::from)
    }
}
