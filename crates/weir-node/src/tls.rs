//! TLS for the client ports: a certificate chain and key from PEM files, served with rustls.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use weir_cluster::net::peer_tls::pem_certificates;

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
        let certs = pem_certificates(&self.cert).map_err(|reason| err(&self.cert, reason))?;
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

    /// A self-signed certificate for 127.0.0.1 and its key, a CA one when `as_ca`.
    fn self_signed(as_ca: bool) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        if as_ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        (params.self_signed(&key).unwrap(), key)
    }

    #[test]
    fn a_ca_certificate_served_as_the_nodes_own_is_recognised() {
        assert!(is_ca_certificate(self_signed(true).0.der()));
        assert!(!is_ca_certificate(self_signed(false).0.der()));
    }

    /// What loading the files logs, for a CA certificate or not.
    fn load_logs(as_ca: bool) -> String {
        use std::sync::Mutex;
        let (cert, key) = self_signed(as_ca);
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        let logs = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || files.load().map(|_| ()))
            .expect("a certificate and key that match");
        let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        text
    }

    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn loading_a_ca_certificate_warns_and_serves_it() {
        assert!(load_logs(true).contains("is a CA certificate"));
        assert!(!load_logs(false).contains("CA certificate"));
    }
}
