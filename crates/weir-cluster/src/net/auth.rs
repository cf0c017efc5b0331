//! Peer-call authentication: a token derived from the cluster secret, checked by a tonic interceptor.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

use crate::stats::{bump, Stats};

/// The metadata key every `weir.v1.Peer` call carries when a secret is set.
pub const PEER_AUTH_HEADER: &str = "x-weir-cluster-auth";

/// Domain label of the token, so the token is useless as a gossip key and
/// a gossip tag is useless as a token.
const TOKEN_LABEL: &[u8] = b"weir.v1.Peer token";

/// HMAC-SHA256(secret, label) in hex. The secret itself never goes on the
/// wire; without TLS the token is still a bearer credential for peer calls
/// (see docs/cluster.md), while gossip is authenticated per datagram.
#[derive(Clone)]
pub struct PeerToken {
    hex: AsciiMetadataValue,
}

impl PeerToken {
    /// None for an empty secret, which would authenticate nothing.
    pub fn new(secret: &[u8]) -> Option<PeerToken> {
        if secret.is_empty() {
            return None;
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
        mac.update(TOKEN_LABEL);
        let tag = mac.finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        Some(PeerToken {
            hex: AsciiMetadataValue::try_from(hex).ok()?,
        })
    }

    pub(crate) fn attach(&self, metadata: &mut MetadataMap) {
        metadata.insert(PEER_AUTH_HEADER, self.hex.clone());
    }

    fn matches(&self, metadata: &MetadataMap) -> bool {
        metadata
            .get(PEER_AUTH_HEADER)
            .is_some_and(|got| bool::from(got.as_bytes().ct_eq(self.hex.as_bytes())))
    }
}

impl std::fmt::Debug for PeerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerToken(..)")
    }
}

/// The server side: refuses calls without the token (counted) when the
/// cluster has a secret; lets everything through when it has none.
#[derive(Clone)]
pub struct PeerAuth {
    expected: Option<PeerToken>,
    stats: Arc<Stats>,
}

impl PeerAuth {
    pub fn new(expected: Option<PeerToken>, stats: Arc<Stats>) -> Self {
        PeerAuth { expected, stats }
    }
}

impl tonic::service::Interceptor for PeerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match &self.expected {
            Some(token) if !token.matches(request.metadata()) => {
                bump(&self.stats.unauthenticated, 1);
                Err(Status::unauthenticated(
                    "peer call without the cluster secret",
                ))
            }
            _ => Ok(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn request_with(token: Option<&PeerToken>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(t) = token {
            t.attach(r.metadata_mut());
        }
        r
    }

    #[test]
    fn interceptor_refuses_missing_and_wrong_tokens_and_counts_them() {
        let stats = Arc::new(Stats::default());
        let right = PeerToken::new(b"s3cret").unwrap();
        let wrong = PeerToken::new(b"other").unwrap();
        let mut auth = PeerAuth::new(Some(right.clone()), stats.clone());
        assert!(auth.call(request_with(Some(&right))).is_ok());
        let e = auth.call(request_with(Some(&wrong))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let e = auth.call(request_with(None)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert_eq!(
            stats
                .unauthenticated
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn without_a_secret_everything_passes() {
        let mut auth = PeerAuth::new(None, Arc::new(Stats::default()));
        assert!(auth.call(request_with(None)).is_ok());
        assert!(PeerToken::new(b"").is_none());
    }

    #[test]
    fn token_does_not_carry_the_secret() {
        let t = PeerToken::new(b"s3cret").unwrap();
        let s = t.hex.to_str().unwrap();
        assert_eq!(s.len(), 64);
        assert!(!s.contains("s3cret"));
    }
}
