//! Optional HMAC-SHA256 tags on gossip datagrams, so only holders of the cluster secret can join.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Length of the tag appended to every datagram: the full SHA-256 output,
/// since 32 bytes are cheap next to a 1400-byte budget and need no argument
/// about truncation.
pub const TAG_LEN: usize = 32;

/// Signs and verifies datagrams with one shared secret.
#[derive(Clone)]
pub struct PacketAuth {
    // Keyed once; cloning a keyed state is cheaper than re-keying per packet.
    mac: HmacSha256,
}

impl PacketAuth {
    /// `None` for an empty secret: an empty key would authenticate nothing.
    pub fn new(secret: &[u8]) -> Option<Self> {
        if secret.is_empty() {
            return None;
        }
        let mac = HmacSha256::new_from_slice(secret).ok()?;
        Some(PacketAuth { mac })
    }

    /// Appends the tag of `payload` to `out` (which must hold `payload`).
    pub fn sign_into(&self, out: &mut Vec<u8>) {
        let mut mac = self.mac.clone();
        mac.update(out);
        let tag = mac.finalize().into_bytes();
        out.extend_from_slice(&tag);
    }

    /// The payload of an authentic datagram, or `None`. The comparison is
    /// `verify_slice`, which is constant time.
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Option<&'a [u8]> {
        let split = datagram.len().checked_sub(TAG_LEN)?;
        let (payload, tag) = datagram.split_at(split);
        let mut mac = self.mac.clone();
        mac.update(payload);
        mac.verify_slice(tag).ok()?;
        Some(payload)
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

    #[test]
    fn roundtrip_and_rejections() {
        let a = PacketAuth::new(b"secret-a").unwrap();
        let b = PacketAuth::new(b"secret-b").unwrap();
        let mut pkt = b"hello gossip".to_vec();
        a.sign_into(&mut pkt);
        assert_eq!(pkt.len(), 12 + TAG_LEN);
        assert_eq!(a.open(&pkt), Some(&b"hello gossip"[..]));
        assert_eq!(b.open(&pkt), None, "other secret");
        let mut flipped = pkt.clone();
        flipped[0] ^= 1;
        assert_eq!(a.open(&flipped), None, "tampered payload");
        assert_eq!(a.open(&pkt[..TAG_LEN - 1]), None, "too short");
        assert_eq!(a.open(b"hello gossip"), None, "unsigned");
        assert!(PacketAuth::new(b"").is_none());
    }
}
