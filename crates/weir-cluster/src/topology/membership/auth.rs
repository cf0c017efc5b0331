//! HMAC-SHA256 tags on gossip datagrams, bound to a time window and seen once, so only holders of the cluster secret can join and a captured datagram cannot be replayed later.
//!
//! A datagram is `payload | unix ms (8 bytes, big endian) | tag`, the tag
//! HMAC-SHA256 over payload and time under a key derived from the secret
//! (`crate::keys`). A receiver drops a datagram whose tag is wrong, whose
//! time is more than [`FRESHNESS_MS`] from its own, or whose tag it has
//! already seen within that window: an observer can neither forge one, nor
//! replay one later (a departed node's announcement, say, after the
//! members have forgotten it), nor replay one twice to the same node.

use std::collections::{HashSet, VecDeque};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::keys::{self, FRESHNESS_MS};

type HmacSha256 = Hmac<Sha256>;

const STAMP_LEN: usize = 8;
const MAC_LEN: usize = 32;

/// Bytes added to every datagram: the time stamp and the tag (the full
/// SHA-256 output: 40 bytes are cheap next to a 1400-byte budget and need
/// no argument about truncation).
pub const TAG_LEN: usize = STAMP_LEN + MAC_LEN;

/// Tags remembered to refuse replays. Only authentic, fresh datagrams
/// enter, so this bounds memory against the cluster's own gossip rate over
/// the freshness window; past it the oldest are forgotten first.
const SEEN_MAX: usize = 65_536;

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// No tag, or a tag made without the secret.
    BadTag,
    /// Authentic, but stamped outside the freshness window.
    Stale,
    /// Authentic and fresh, and already received once.
    Replayed,
}

/// Signs and verifies datagrams with a key derived from the cluster secret.
pub struct PacketAuth {
    // Keyed once; cloning a keyed state is cheaper than re-keying per packet.
    mac: HmacSha256,
    /// Tags seen within the window, oldest first, with their stamps.
    seen: HashSet<[u8; MAC_LEN]>,
    order: VecDeque<(u64, [u8; MAC_LEN])>,
}

impl PacketAuth {
    /// `None` for an empty secret: an empty key would authenticate nothing.
    pub fn new(secret: &[u8]) -> Option<Self> {
        let key = keys::derive(secret, keys::GOSSIP)?;
        let mac = HmacSha256::new_from_slice(&key).ok()?;
        Some(PacketAuth {
            mac,
            seen: HashSet::new(),
            order: VecDeque::new(),
        })
    }

    fn tag(&self, payload: &[u8], stamp: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(payload);
        mac.update(stamp);
        mac
    }

    /// Appends the stamp `now_ms` and the tag to `out` (which holds the payload).
    pub fn sign_into(&self, out: &mut Vec<u8>, now_ms: u64) {
        let stamp = now_ms.to_be_bytes();
        let tag = self.tag(out, &stamp).finalize().into_bytes();
        out.extend_from_slice(&stamp);
        out.extend_from_slice(&tag);
    }

    /// The payload of an authentic, fresh datagram seen for the first time.
    /// The tag comparison is `verify_slice`, which is constant time.
    pub fn open<'a>(&mut self, datagram: &'a [u8], now_ms: u64) -> Result<&'a [u8], Dropped> {
        let split = datagram.len().checked_sub(TAG_LEN).ok_or(Dropped::BadTag)?;
        let (payload, rest) = datagram.split_at(split);
        let (stamp, tag) = rest.split_at(STAMP_LEN);
        self.tag(payload, stamp)
            .verify_slice(tag)
            .map_err(|_| Dropped::BadTag)?;
        let at = u64::from_be_bytes(stamp.try_into().expect("8 bytes"));
        if !keys::fresh(at, now_ms) {
            return Err(Dropped::Stale);
        }
        self.forget_before(now_ms.saturating_sub(FRESHNESS_MS));
        let tag: [u8; MAC_LEN] = tag.try_into().expect("32 bytes");
        if !self.seen.insert(tag) {
            return Err(Dropped::Replayed);
        }
        self.order.push_back((at, tag));
        if self.order.len() > SEEN_MAX {
            if let Some((_, old)) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        Ok(payload)
    }

    /// Forgets tags stamped before `oldest`: a replay of one is stale now.
    fn forget_before(&mut self, oldest: u64) {
        while self.order.front().is_some_and(|&(at, _)| at < oldest) {
            if let Some((_, tag)) = self.order.pop_front() {
                self.seen.remove(&tag);
            }
        }
    }
}

impl std::fmt::Debug for PacketAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.write_str("PacketAuth(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn roundtrip_and_rejections() {
        let mut a = PacketAuth::new(b"secret-a").unwrap();
        let mut b = PacketAuth::new(b"secret-b").unwrap();
        let mut pkt = b"hello gossip".to_vec();
        a.sign_into(&mut pkt, NOW);
        assert_eq!(pkt.len(), 12 + TAG_LEN);
        assert_eq!(b.open(&pkt, NOW), Err(Dropped::BadTag), "other secret");
        let mut flipped = pkt.clone();
        flipped[0] ^= 1;
        assert_eq!(
            a.open(&flipped, NOW),
            Err(Dropped::BadTag),
            "tampered payload"
        );
        let mut restamped = pkt.clone();
        restamped[12] ^= 1;
        assert_eq!(
            a.open(&restamped, NOW),
            Err(Dropped::BadTag),
            "tampered time"
        );
        assert_eq!(
            a.open(&pkt[..TAG_LEN - 1], NOW),
            Err(Dropped::BadTag),
            "too short"
        );
        assert_eq!(
            a.open(b"hello gossip", NOW),
            Err(Dropped::BadTag),
            "unsigned"
        );
        assert_eq!(a.open(&pkt, NOW), Ok(&b"hello gossip"[..]));
        assert!(PacketAuth::new(b"").is_none());
    }

    #[test]
    fn a_datagram_is_taken_once_and_only_while_fresh() {
        let mut a = PacketAuth::new(b"s").unwrap();
        let mut pkt = b"announce".to_vec();
        a.sign_into(&mut pkt, NOW);
        assert!(a.open(&pkt, NOW + 5).is_ok());
        assert_eq!(a.open(&pkt, NOW + 6), Err(Dropped::Replayed));
        // Fifteen minutes on (a removed member forgotten), the same bytes
        // are refused for their age, by a node that never saw them too.
        let mut other = PacketAuth::new(b"s").unwrap();
        assert_eq!(other.open(&pkt, NOW + 15 * 60_000), Err(Dropped::Stale));
        assert_eq!(
            other.open(&pkt, NOW - FRESHNESS_MS - 1),
            Err(Dropped::Stale)
        );
    }

    #[test]
    fn remembered_tags_are_bounded() {
        let mut a = PacketAuth::new(b"s").unwrap();
        for i in 0..(SEEN_MAX + 10) as u64 {
            let mut pkt = i.to_be_bytes().to_vec();
            a.sign_into(&mut pkt, NOW);
            assert!(a.open(&pkt, NOW).is_ok());
        }
        assert_eq!(a.order.len(), SEEN_MAX);
        assert_eq!(a.seen.len(), SEEN_MAX);
    }

    #[test]
    fn the_tag_key_is_not_the_secret() {
        let mut pkt = b"x".to_vec();
        PacketAuth::new(b"s3cret").unwrap().sign_into(&mut pkt, NOW);
        let mut raw = HmacSha256::new_from_slice(b"s3cret").unwrap();
        raw.update(b"x");
        raw.update(&NOW.to_be_bytes());
        assert_ne!(&pkt[1 + STAMP_LEN..], &raw.finalize().into_bytes()[..]);
    }
}
