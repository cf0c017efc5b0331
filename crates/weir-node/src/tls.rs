//! TLS for the client ports: a certificate chain and key from PEM files, served with rustls.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// `--tls-cert` and `--tls-key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the node's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("TLS: {path}: {reason}")]
pub struct TlsError {
    pub path: String,
    pub reason: String,
}

fn err(path: &Path, reason: impl ToString) -> TlsError {
    TlsError {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// The acceptors of the HTTP port (HTTP/2 or HTTP/1.1 by ALPN) and of the
/// gRPC port (HTTP/2 only: gRPC clients ask for `h2` and some refuse a
/// server that does not confirm it).
pub struct Acceptors {
    pub http: TlsAcceptor,
    pub grpc: TlsAcceptor,
}

impl TlsFiles {
    /// Reads and checks both files; a key that does not match the
    /// certificate is refused here, at start, not at the first handshake.
    pub fn load(&self) -> Result<Acceptors, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| err(&self.cert, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| err(&self.cert, e))?;
        if certs.is_empty() {
            return Err(err(&self.cert, "holds no PEM certificate"));
        }
        if is_ca_certificate(&certs[0]) {
            // Served all the same: OpenSSL-based clients take it.
            tracing::warn!(
                cert = %self.cert.display(),
                "the node's certificate is a CA certificate (basicConstraints CA:TRUE), which \
                 rustls clients (weir check, weir-client) refuse as a server's own: make it with \
                 CA:FALSE or sign it with a CA (docs/security.md)"
            );
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| err(&self.key, e))?;
        let config = |alpn: &[&[u8]]| -> Result<Arc<ServerConfig>, TlsError> {
            // The provider is named, not taken from the process default, so
            // another crate enabling a second provider cannot change it.
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut c = ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| err(&self.cert, e))?
                .with_no_client_auth()
                .with_single_cert(certs.clone(), key.clone_key())
                .map_err(|e| err(&self.key, e))?;
            c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(Arc::new(c))
        };
        Ok(Acceptors {
            http: TlsAcceptor::from(config(&[b"h2", b"http/1.1"])?),
            grpc: TlsAcceptor::from(config(&[b"h2"])?),
        })
    }
}

/// Whether rustls clients refuse `leaf` as a server's own for being a CA
/// certificate. Trusted as its own root, such a leaf fails verification
/// with webpki's `CaUsedAsEndEntity` before any name is compared, so a
/// name of nobody's serves; any other outcome is not this fault.
fn is_ca_certificate(leaf: &CertificateDer<'_>) -> bool {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(leaf.clone().into_owned()).is_err() {
        return false;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(verifier) =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
    else {
        return false;
    };
    let name = ServerName::try_from("weir.invalid").expect("a valid DNS name");
    match verifier.verify_server_cert(leaf, &[], &name, &[], UnixTime::now()) {
        // rustls carries webpki's reason as an opaque `Other`; its name is
        // the one stable handle on it.
        Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(e))) => {
            format!("{e:?}").contains("CaUsedAsEndEntity")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(as_ca: bool) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        if as_ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn a_ca_certificate_served_as_the_nodes_own_is_recognised() {
        assert!(is_ca_certificate(&self_signed(true)));
        assert!(!is_ca_certificate(&self_signed(false)));
    }
}
