//! Keys derived from the cluster secret, one per use, so no key serves two purposes.
//!
//! HKDF-SHA256 (RFC 5869) with a fixed salt and one `info` label per use:
//! the gossip sealing keys and the peer-call key are independent, and
//! neither is the secret itself, so a weakness in how one is used (a
//! datagram an observer collects, a token replayed) says nothing about the
//! other.

use hkdf::Hkdf;
use sha2::Sha256;

/// Versioned, so a later change of derivation cannot collide with this one.
const SALT: &[u8] = b"weir cluster secret v2";
/// Followed by the sender's session id: each gossip sender seals under a
/// key of its own (`membership::seal`).
pub(crate) const GOSSIP_SEAL: &[u8] = b"weir gossip datagram seal";
pub(crate) const PEER: &[u8] = b"weir.v1.Peer call tokens";

/// The 32-byte key for `use_label`; None for an empty secret, which would
/// authenticate nothing.
pub(crate) fn derive(secret: &[u8], use_label: &[u8]) -> Option<[u8; 32]> {
    derive_for(secret, use_label, &[])
}

/// The 32-byte key for `use_label` and one `context` within that use (a
/// sender's session); None for an empty secret.
pub(crate) fn derive_for(secret: &[u8], use_label: &[u8], context: &[u8]) -> Option<[u8; 32]> {
    if secret.is_empty() {
        return None;
    }
    let mut key = [0u8; 32];
    Hkdf::<Sha256>::new(Some(SALT), secret)
        .expand_multi_info(&[use_label, context], &mut key)
        .ok()?;
    Some(key)
}

/// How far a message's time may be from the receiver's: wide enough for
/// clocks kept by NTP (well under a second apart) and a slow network, and
/// short enough that a message captured now is useless a minute later,
/// long before a removed member is forgotten (15 minutes).
pub const FRESHNESS_MS: u64 = 30_000;

/// Wall-clock milliseconds: what binds a message to a time window. The
/// only reading of the wall clock in this crate outside membership's
/// incarnation stamp; peers compare it, so it must be the real time.
pub(crate) fn unix_ms() -> u64 {
    crate::determinism::unix_ms()
}

/// Whether a message stamped `at` is fresh at `now` (both unix ms).
pub(crate) fn fresh(at: u64, now: u64) -> bool {
    at.abs_diff(now) <= FRESHNESS_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_use_has_its_own_key_and_neither_is_the_secret() {
        let g = derive_for(b"s3cret", GOSSIP_SEAL, b"session").unwrap();
        let p = derive(b"s3cret", PEER).unwrap();
        assert_ne!(g, p);
        assert_ne!(&g[..6], b"s3cret");
        assert_eq!(
            derive_for(b"s3cret", GOSSIP_SEAL, b"session"),
            Some(g),
            "deterministic"
        );
        assert_ne!(derive_for(b"other", GOSSIP_SEAL, b"session"), Some(g));
        assert_ne!(
            derive_for(b"s3cret", GOSSIP_SEAL, b"another session"),
            Some(g)
        );
        assert!(derive(b"", PEER).is_none());
    }

    #[test]
    fn freshness_is_symmetric_and_bounded() {
        assert!(fresh(1_000_000, 1_000_000 + FRESHNESS_MS));
        assert!(fresh(1_000_000 + FRESHNESS_MS, 1_000_000));
        assert!(!fresh(1_000_000, 1_000_001 + FRESHNESS_MS));
    }
}
