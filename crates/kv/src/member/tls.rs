//! TLS on the client port: the member's certificate and key, and optionally the authority its
//! clients' certificates must come from, as Redis's `tls-cert-file`, `tls-key-file` and
//! `tls-ca-cert-file` (with client certificates then required, as Redis's
//! `tls-auth-clients yes`).
//!
//! The handshake and the records are `rustls`'s (with `ring`'s primitives); a connection
//! ([`super::conn::Conn`]) feeds it the socket's bytes and takes plaintext out, on the same
//! non-blocking loop as a plain one. TLS 1.2 and 1.3, rustls's safe defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// What a member serves TLS with, read from PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles<'a> {
    /// The member's certificate chain, leaf first.
    pub cert: &'a Path,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: &'a Path,
    /// The authority clients' certificates must be signed by; `None`: none are asked for.
    pub client_ca: Option<&'a Path>,
}

/// What is wrong with the TLS files or settings ([`server_config`]), in one line that names the
/// flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The certificate file could not be read or is not PEM.
    #[error("--tls-cert {}: {error}", .path.display())]
    Cert {
        /// The file.
        path: PathBuf,
        /// What the PEM reader found.
        error: pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("--tls-cert {}: no certificate in it", .path.display())]
    NoCert {
        /// The file.
        path: PathBuf,
    },
    /// The key file could not be read or holds no private key.
    #[error("--tls-key {}: {error}", .path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// What the PEM reader found.
        error: pem::Error,
    },
    /// rustls refused the protocol versions.
    #[error("TLS: {0}")]
    Protocol(rustls::Error),
    /// The client authority file could not be read, or its certificates make no verifier.
    #[error("--tls-ca-cert {}: {error}", .path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What went wrong with it.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The certificate and the key do not make a server configuration (they do not match).
    #[error("--tls-cert {} and --tls-key {}: {error}", .cert.display(), .key.display())]
    CertAndKey {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's refusal.
        error: rustls::Error,
    },
}

/// The server side of TLS for the client port, or what is wrong with the files, in one line.
pub fn server_config(files: &TlsFiles<'_>) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|error| TlsConfigError::Cert { path: files.cert.to_path_buf(), error })?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCert { path: files.cert.to_path_buf() });
    }
    let key = PrivateKeyDer::from_pem_file(files.key)
        .map_err(|error| TlsConfigError::Key { path: files.key.to_path_buf(), error })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Protocol)?;
    let builder = match files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let ca_error = |error: Box<dyn std::error::Error + Send + Sync>| TlsConfigError::ClientCa {
                path: ca.to_path_buf(),
                error,
            };
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| ca_error(e.into()))? {
                let cert = cert.map_err(|e| ca_error(e.into()))?;
                roots.add(cert).map_err(|e| ca_error(e.into()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| ca_error(e.into()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|error| TlsConfigError::CertAndKey {
        cert: files.cert.to_path_buf(),
        key: files.key.to_path_buf(),
        error,
    })?;
    Ok(Arc::new(config))
}
