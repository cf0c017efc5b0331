//! Decide and Replicate calls on a connection of their own: length-prefixed frames, no HTTP/2 in between.
//!
//! A forwarded check is one small request and one small answer, and over
//! gRPC each crosses more tasks than the decision takes time: the
//! gateway's HTTP/2 connection task, the owner's connection task, a task
//! the owner's server spawns for every stream, and the owner's connection
//! task again on the way back. On two busy cores each of those is a turn
//! to wait for behind other tasks, and the forwarded check's tail is made
//! of such turns (docs/performance.md, "Where a forwarded check waits").
//! Here the gateway writes its request to the socket from the caller's
//! own task, the owner reads, decides and writes the answer in one task
//! per connection, and a reader task on the gateway hands the answer to
//! its caller.
//!
//! The connection goes to the peer's gRPC address. Its first byte is
//! `0x00`, which starts no HTTP request, TLS record or HTTP/2 preface, so
//! the owner's listener tells the two apart from the first byte and gives
//! the rest to its gRPC server. Under peer mutual TLS the same holds of
//! the first byte inside the session. A peer that does not speak this protocol
//! (an older node, or a server with no such listener) does not answer the
//! hello with [`MAGIC`], and the caller sends its Decide calls over gRPC.
//! The owner's copies to its replica holder (Replicate) take the same
//! connections; every other peer call stays on gRPC.
//!
//! Frames, all integers big-endian:
//! - hello, gateway to owner: [`MAGIC`], `u16` token length, the token (as
//!   the `x-weir-cluster-auth` header carries it; empty without a secret);
//! - the owner's answer to the hello: [`MAGIC`] to go on, or [`REFUSED`]
//!   and the connection closes;
//! - then frames both ways: `u32` length of what follows, `u64` call id,
//!   `u8` kind, the message (a `DecideRequest` or a `ReplicateRequest`,
//!   and the response to it).

mod client;
mod copies;
mod server;
mod socket;

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub(crate) use client::{DirectConfig, DirectConn};
pub(crate) use copies::Copies;
pub use server::DirectServer;

/// What a gateway opens the connection with, and what the owner answers
/// when it will serve it.
pub const MAGIC: &[u8; 8] = b"\0weir-d1";
/// The owner's answer to a hello it refuses (no fresh token of the secret).
pub const REFUSED: &[u8; 8] = b"\0weir-no";

/// Whether a connection that starts with `first` is a direct one.
pub fn is_direct(first: u8) -> bool {
    first == MAGIC[0]
}

/// The largest frame either side accepts; a larger one closes the connection.
pub(crate) const MAX_FRAME: usize = super::grpc::MAX_PEER_MESSAGE;

/// A frame's length prefix, then its call id and kind.
const LEN: usize = 4;
const HEAD: usize = 8 + 1;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A `DecideRequest`, or the `DecideResponse` to it.
    Decide = 0,
    /// Gateway to owner: are you there? Answered with a `Pong` at once.
    Ping = 1,
    Pong = 2,
    /// The owner answers no call: it was killed, as a killed process is.
    Unavailable = 3,
    /// A `ReplicateRequest`, or the `ReplicateResponse` to it.
    Replicate = 4,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        [
            Kind::Decide,
            Kind::Ping,
            Kind::Pong,
            Kind::Unavailable,
            Kind::Replicate,
        ]
        .into_iter()
        .find(|k| *k as u8 == b)
    }
}

/// One frame off the wire.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub id: u64,
    pub kind: Kind,
    pub body: Bytes,
}

/// Why a connection's bytes cannot be read as frames: it is closed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum FrameError {
    #[error("a frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("a frame of {0} bytes is shorter than its id and kind")]
    TooShort(usize),
    #[error("unknown frame kind {0}")]
    Kind(u8),
}

/// Appends one frame to `out`.
pub(crate) fn put_frame(out: &mut BytesMut, id: u64, kind: Kind, message: &impl prost::Message) {
    let body = message.encoded_len();
    out.reserve(LEN + HEAD + body);
    out.put_u32((HEAD + body) as u32);
    out.put_u64(id);
    out.put_u8(kind as u8);
    message
        .encode(out)
        .expect("reserved room for the whole message");
}

/// Takes the next whole frame off the front of `buf`, if one has arrived.
pub(crate) fn take_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    let Some(len) = buf.get(..LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(len.try_into().expect("four bytes")) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    if len < HEAD {
        return Err(FrameError::TooShort(len));
    }
    if buf.len() < LEN + len {
        buf.reserve(LEN + len - buf.len());
        return Ok(None);
    }
    buf.advance(LEN);
    let mut frame = buf.split_to(len);
    let id = frame.get_u64();
    let kind = frame.get_u8();
    let kind = Kind::from_u8(kind).ok_or(FrameError::Kind(kind))?;
    Ok(Some(Frame {
        id,
        kind,
        body: frame.freeze(),
    }))
}

/// The hello a gateway opens with.
pub(crate) fn hello(token: &str) -> Vec<u8> {
    let token = token.as_bytes();
    let len = u16::try_from(token.len()).expect("a token is a stamp and a MAC");
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + token.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(token);
    out
}

#[cfg(test)]
mod tests;
