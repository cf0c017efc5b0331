//! Peer-call authentication: a time-stamped token under a key derived from the cluster secret, checked by a tonic interceptor.
//!
//! Every `weir.v1.Peer` call carries `x-weir-cluster-auth: <unix ms>.<hex
//! HMAC-SHA256(peer key, label | unix ms)>`, the peer key derived from the
//! secret for this use alone (`crate::keys`). The receiver takes it while
//! the stamp is within `FRESHNESS_MS` (keys.rs) of its own clock, so a
//! token captured off the wire is useless once that window has passed; an
//! observer who keeps watching sees fresh ones, which is why the peer port
//! belongs on a private network (docs/security.md).

use std::sync::Arc;

use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

use crate::keys;
use crate::stats::{bump, Stats};

/// The metadata key every `weir.v1.Peer` call carries when a secret is set.
pub const PEER_AUTH_HEADER: &str = "x-weir-cluster-auth";

/// What the MAC covers besides the time: the token is for peer calls only.
const TOKEN_LABEL: &[u8] = b"weir.v1.Peer token";

/// Makes and checks peer tokens. The secret itself never goes on the wire.
#[derive(Clone)]
pub struct PeerToken {
    mac: Hmac<Sha256>,
    /// The token of the current millisecond-second, reused by every call
    /// made within it (one MAC a second, not one per call).
    cached: Arc<Mutex<(u64, AsciiMetadataValue)>>,
    /// The MAC of the stamp last checked, in hex: senders stamp to the
    /// second, so a receiver computes one MAC a second, not one per call.
    checked: Arc<Mutex<(u64, String)>>,
}

impl PeerToken {
    /// None for an empty secret, which would authenticate nothing.
    pub fn new(secret: &[u8]) -> Option<PeerToken> {
        let key = keys::derive(secret, keys::PEER)?;
        let mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
        let empty = AsciiMetadataValue::from_static("");
        Some(PeerToken {
            mac,
            cached: Arc::new(Mutex::new((u64::MAX, empty))),
            checked: Arc::new(Mutex::new((u64::MAX, String::new()))),
        })
    }

    fn hex_mac(&self, at_ms: u64) -> String {
        let mut mac = self.mac.clone();
        mac.update(TOKEN_LABEL);
        mac.update(&at_ms.to_be_bytes());
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = mac.finalize().into_bytes();
        let mut hex = String::with_capacity(2 * bytes.len());
        for b in bytes {
            hex.push(char::from(HEX[usize::from(b >> 4)]));
            hex.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        hex
    }

    /// The token stamped `at_ms`.
    pub(crate) fn token_at(&self, at_ms: u64) -> AsciiMetadataValue {
        AsciiMetadataValue::try_from(format!("{at_ms}.{}", self.hex_mac(at_ms)))
            .expect("digits, a dot and hex are ASCII")
    }

    pub(crate) fn attach(&self, metadata: &mut MetadataMap) {
        metadata.insert(PEER_AUTH_HEADER, self.current());
    }

    /// The token to send now: stamped to the second, fresh enough, and one
    /// MAC a second.
    pub(crate) fn current(&self) -> AsciiMetadataValue {
        let second = keys::unix_ms() / 1000 * 1000;
        let mut cached = self.cached.lock();
        if cached.0 != second {
            *cached = (second, self.token_at(second));
        }
        cached.1.clone()
    }

    /// Whether `got` is a token of this key, fresh at `now_ms`.
    fn accepts_token(&self, got: &str, now_ms: u64) -> bool {
        let Some((stamp, mac)) = got.split_once('.') else {
            return false;
        };
        let Ok(at) = stamp.parse::<u64>() else {
            return false;
        };
        if !keys::fresh(at, now_ms) {
            return false;
        }
        {
            // Held only to compare.
            let checked = self.checked.lock();
            if checked.0 == at {
                return bool::from(mac.as_bytes().ct_eq(checked.1.as_bytes()));
            }
        }
        // Computed with no lock held, and kept only when a token carried
        // it: forged stamps cannot evict the one the peers are sending.
        let expected = self.hex_mac(at);
        let ok = bool::from(mac.as_bytes().ct_eq(expected.as_bytes()));
        if ok {
            *self.checked.lock() = (at, expected);
        }
        ok
    }
}

impl std::fmt::Debug for PeerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerToken(..)")
    }
}

/// The server side: with secrets, refuses calls without a fresh token of
/// one of them (counted); without, refuses every call unless the operator
/// opened the cluster (`insecure_open`), so a node started without a secret
/// serves no peer calls at all.
#[derive(Clone)]
pub struct PeerAuth {
    /// The cluster secret's token first, then the accepted secrets': the
    /// one peers use most is tried first.
    accepted: Arc<[PeerToken]>,
    open: bool,
    stats: Arc<Stats>,
}

impl PeerAuth {
    pub fn new(accepted: Vec<PeerToken>, insecure_open: bool, stats: Arc<Stats>) -> Self {
        PeerAuth {
            accepted: accepted.into(),
            open: insecure_open,
            stats,
        }
    }
}

impl PeerAuth {
    /// Admits a caller that sent `token` (None: no token at all), or says
    /// why not and counts the refusal.
    pub(crate) fn admit(&self, token: Option<&str>) -> Result<(), &'static str> {
        let refusal = if self.accepted.is_empty() {
            if self.open {
                return Ok(());
            }
            "this node has no cluster secret and serves no peer calls"
        } else {
            let now = keys::unix_ms();
            if token.is_some_and(|got| self.accepted.iter().any(|t| t.accepts_token(got, now))) {
                return Ok(());
            }
            "peer call without a fresh token of the cluster secret"
        };
        bump(&self.stats.unauthenticated, 1);
        Err(refusal)
    }
}

impl tonic::service::Interceptor for PeerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let token = request
            .metadata()
            .get(PEER_AUTH_HEADER)
            .and_then(|v| v.to_str().ok());
        match self.admit(token) {
            Ok(()) => Ok(request),
            Err(refusal) => Err(Status::unauthenticated(refusal)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn request_with(token: Option<AsciiMetadataValue>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(t) = token {
            r.metadata_mut().insert(PEER_AUTH_HEADER, t);
        }
        r
    }

    fn attached(t: &PeerToken) -> Request<()> {
        let mut r = Request::new(());
        t.attach(r.metadata_mut());
        r
    }

    /// The token's MAC of `at` under `key`, written out the slow, plain way.
    fn plain_hex_mac(key: &[u8], at: u64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(TOKEN_LABEL);
        mac.update(&at.to_be_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn unauthenticated(stats: &Stats) -> u64 {
        stats
            .unauthenticated
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn interceptor_refuses_missing_wrong_and_stale_tokens_and_counts_them() {
        let stats = Arc::new(Stats::default());
        let right = PeerToken::new(b"s3cret").unwrap();
        let wrong = PeerToken::new(b"other").unwrap();
        let mut auth = PeerAuth::new(vec![right.clone()], false, stats.clone());
        assert!(auth.call(attached(&right)).is_ok());
        for refused in [
            attached(&wrong),
            request_with(None),
            // Captured sixteen minutes ago: a valid MAC, a stale stamp.
            request_with(Some(right.token_at(keys::unix_ms() - 16 * 60_000))),
            request_with(Some(AsciiMetadataValue::from_static("12.zz"))),
        ] {
            let e = auth.call(refused).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
        }
        assert_eq!(unauthenticated(&stats), 4);
    }

    #[test]
    fn without_a_secret_nothing_passes_unless_the_cluster_is_opened() {
        let stats = Arc::new(Stats::default());
        let mut closed = PeerAuth::new(Vec::new(), false, stats.clone());
        let e = closed.call(request_with(None)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("no cluster secret"), "{}", e.message());
        let mut open = PeerAuth::new(Vec::new(), true, stats.clone());
        assert!(open.call(request_with(None)).is_ok());
        assert_eq!(unauthenticated(&stats), 1);
        assert!(PeerToken::new(b"").is_none());
    }

    #[test]
    fn the_token_carries_neither_the_secret_nor_the_gossip_key() {
        let t = PeerToken::new(b"s3cret").unwrap();
        let shown = t.token_at(1_000).to_str().unwrap().to_string();
        let (stamp, mac) = shown.split_once('.').unwrap();
        assert_eq!((stamp, mac.len()), ("1000", 64));
        assert!(!shown.contains("s3cret"));
        let gossip = keys::derive(b"s3cret", keys::GOSSIP_SEAL).unwrap();
        assert_ne!(mac, plain_hex_mac(&gossip, 1_000));
    }

    #[test]
    fn the_mac_checked_is_the_one_of_the_stamp_the_token_carries() {
        let stats = Arc::new(Stats::default());
        let right = PeerToken::new(b"s3cret").unwrap();
        let mut auth = PeerAuth::new(vec![right.clone()], false, stats.clone());
        let now = keys::unix_ms() / 1000 * 1000;
        let forged = |at: u64| {
            // A MAC of another stamp under this stamp: the shape of a
            // replayed token with its stamp rewritten.
            let other = right.token_at(at - 1000);
            let mac = other.to_str().unwrap().split_once('.').unwrap().1;
            request_with(Some(
                AsciiMetadataValue::try_from(format!("{at}.{mac}")).unwrap(),
            ))
        };
        // Stamps alternating as two senders' clocks straddle a second.
        for at in [now, now - 1000, now, now - 1000] {
            assert!(auth.call(request_with(Some(right.token_at(at)))).is_ok());
            assert!(auth.call(forged(at)).is_err(), "forged token at {at}");
        }
        assert_eq!(unauthenticated(&stats), 4);
    }

    /// Guard: a token that fails leaves the kept MAC alone, so a sender of
    /// forged stamps cannot make every peer call compute the MAC again.
    #[test]
    fn a_refused_token_does_not_replace_the_mac_kept() {
        let right = PeerToken::new(b"s3cret").unwrap();
        let wrong = PeerToken::new(b"other").unwrap();
        let mut auth = PeerAuth::new(vec![right.clone()], false, Arc::new(Stats::default()));
        let now = keys::unix_ms() / 1000 * 1000;
        let kept = || right.checked.lock().0;
        assert!(auth.call(request_with(Some(right.token_at(now)))).is_ok());
        assert_eq!(kept(), now);
        assert!(auth
            .call(request_with(Some(wrong.token_at(now - 1000))))
            .is_err());
        assert_eq!(kept(), now, "the forged stamp was not kept");
        assert!(auth
            .call(request_with(Some(right.token_at(now - 1000))))
            .is_ok());
        assert_eq!(kept(), now - 1000, "a valid stamp is kept");
    }

    #[test]
    fn a_token_of_any_accepted_secret_passes_and_no_other() {
        let stats = Arc::new(Stats::default());
        let new = PeerToken::new(b"new").unwrap();
        let old = PeerToken::new(b"old").unwrap();
        let other = PeerToken::new(b"other").unwrap();
        let mut rotating = PeerAuth::new(vec![new.clone(), old.clone()], false, stats.clone());
        assert!(rotating.call(attached(&new)).is_ok());
        assert!(rotating.call(attached(&old)).is_ok());
        assert!(rotating.call(attached(&other)).is_err());
        let mut done = PeerAuth::new(vec![new.clone()], false, stats.clone());
        assert!(done.call(attached(&old)).is_err(), "old no longer accepted");
        assert_eq!(unauthenticated(&stats), 2);
    }

    #[test]
    fn the_mac_is_lowercase_hex_of_hmac_sha256() {
        let t = PeerToken::new(b"s3cret").unwrap();
        let key = keys::derive(b"s3cret", keys::PEER).unwrap();
        assert_eq!(t.hex_mac(1_000), plain_hex_mac(&key, 1_000));
    }
}
