//! What an https:// node is verified against: the public roots, and the
//! PEM certificates the caller adds (a node's self-signed `--tls-cert`, or
//! the CA that signed it).

use crate::error::ClientError;

/// The extra certificates for an endpoint, checked before anything is sent:
/// none unless given, and only for an https:// URL, where they mean something.
pub(crate) fn extra_roots(
    url: &str,
    pem: Option<&[u8]>,
) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let Some(pem) = pem else {
        return Ok(Vec::new());
    };
    let bad = |reason: &str| ClientError::Endpoint {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    if !is_https(url) {
        return Err(bad(
            "a CA certificate is given, but the URL is not https://",
        ));
    }
    let certs = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| bad(&format!("the CA certificate is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("the CA certificate holds no PEM certificate"));
    }
    Ok(certs)
}

pub(crate) fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_certificate_is_no_extra_root() {
        assert!(extra_roots("http://127.0.0.1:1", None).unwrap().is_empty());
    }

    #[test]
    fn a_certificate_for_plain_http_or_without_pem_is_refused() {
        let refused = |url, pem: &[u8]| match extra_roots(url, Some(pem)) {
            Err(ClientError::Endpoint { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(refused("http://h:1", b"x").contains("not https://"));
        assert!(refused("https://h:1", b"no pem here").contains("no PEM certificate"));
    }

    #[test]
    fn https_is_read_whatever_its_case() {
        assert!(is_https("HTTPS://h:1") && is_https("https://h"));
        assert!(!is_https("http://h") && !is_https("http"));
    }
}
