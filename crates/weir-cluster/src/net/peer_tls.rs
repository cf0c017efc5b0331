//! Mutual TLS between peers: each side shows a certificate the cluster's CA signed, and the configurations can be replaced while connections are open.
//!
//! Peers dial each other by the address they gossip, often a pod IP that
//! no certificate names, so a peer's certificate is checked against the
//! CA and not against a name: any certificate the peer CA signs is a
//! member's. That CA must therefore sign for this cluster alone
//! (docs/security.md).

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, TlsConnector};

/// `--peer-tls-cert`, `--peer-tls-key` and `--peer-ca`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsFiles {
    /// PEM certificate chain of this node, its own certificate first.
    pub cert: PathBuf,
    /// PEM private key of that certificate.
    pub key: PathBuf,
    /// PEM certificates of the CA (or CAs) that sign every peer's.
    pub ca: PathBuf,
}

/// A file that could not be used, and why. Nothing was installed.
#[derive(Debug, thiserror::Error)]
#[error("peer TLS: {path}: {reason}")]
pub struct PeerTlsError {
    pub path: String,
    pub reason: String,
}

fn err(path: &Path, reason: impl ToString) -> PeerTlsError {
    PeerTlsError {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    // Named, not the process default: another crate enabling a second
    // provider cannot change what peers speak.
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM certificates in `path`, in file order; why not, when it cannot
/// be read or holds none. The client port's certificate is read with it too.
pub fn pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PeerTlsError> {
    pem_certificates(path).map_err(|reason| err(path, reason))
}

/// Both sides of a peer connection, as one set of files makes them.
pub struct PeerTlsConfigs {
    pub client: Arc<ClientConfig>,
    pub server: Arc<ServerConfig>,
}

impl PeerTlsFiles {
    /// Reads and checks the three files: a key that does not match its
    /// certificate, or a CA file with no certificate, is refused here.
    pub fn load(&self) -> Result<PeerTlsConfigs, PeerTlsError> {
        let certs = certificates(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| err(&self.key, e))?;
        let mut roots = RootCertStore::empty();
        for ca in certificates(&self.ca)? {
            roots.add(ca).map_err(|e| err(&self.ca, e))?;
        }
        let roots = Arc::new(roots);
        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| err(&self.ca, e))?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| err(&self.cert, e))?
            .with_client_cert_verifier(clients)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| err(&self.key, e))?;
        // gRPC asks for h2; direct connections ask for nothing.
        server.alpn_protocols = vec![b"h2".to_vec()];
        let servers = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| err(&self.ca, e))?;
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| err(&self.cert, e))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SignedByTheCa(servers)))
            .with_client_auth_cert(certs, key)
            .map_err(|e| err(&self.key, e))?;
        client.alpn_protocols = vec![b"h2".to_vec()];
        Ok(PeerTlsConfigs {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }
}

/// Takes a server certificate the CA signed, whatever names it holds.
#[derive(Debug)]
struct SignedByTheCa(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for SignedByTheCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain (signature, validity, usage) before the
        // name, so a name error means the chain itself passed.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The peer TLS configurations in force; the node replaces them when the
/// files change, and each new connection takes the ones in force then.
pub struct PeerTls {
    client: ArcSwap<ClientConfig>,
    server: ArcSwap<ServerConfig>,
}

impl PeerTls {
    pub fn new(configs: PeerTlsConfigs) -> PeerTls {
        PeerTls {
            client: ArcSwap::new(configs.client),
            server: ArcSwap::new(configs.server),
        }
    }

    /// Puts `configs` in force for connections made or accepted from now on.
    pub fn install(&self, configs: PeerTlsConfigs) {
        self.client.store(configs.client);
        self.server.store(configs.server);
    }

    /// The server side in force, for the peer listener.
    pub fn server(&self) -> Arc<ServerConfig> {
        self.server.load_full()
    }

    /// The client side in force.
    pub fn client(&self) -> Arc<ClientConfig> {
        self.client.load_full()
    }

    /// Runs the client handshake on `io`, a connection to `ip`.
    pub async fn connect<S>(&self, ip: IpAddr, io: S) -> io::Result<client::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        TlsConnector::from(self.client())
            .connect(ServerName::IpAddress(ip.into()), io)
            .await
    }
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls(..)")
    }
}
