//! TLS on the client port: the member's certificate and key, and optionally the authority its
//! clients' certificates must come from, as Redis's `tls-cert-file`, `tls-key-file` and
//! `tls-ca-cert-file` (with client certificates then required, as Redis's
//! `tls-auth-clients yes`).
//!
//! The handshake and the records are `rustls`'s (with `ring`'s primitives); a connection
//! ([`super::conn::Conn`]) feeds it the socket's bytes and takes plaintext out, on the same
//! non-blocking loop as a plain one. TLS 1.2 and 1.3, rustls's safe defaults.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
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

/// The server side of TLS for the client port, or what is wrong with the files, in one line.
pub fn server_config(files: &TlsFiles<'_>) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("--tls-cert {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {}: no certificate in it", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(files.key)
        .map_err(|e| format!("--tls-key {}: {e}", files.key.display()))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca)
                .map_err(|e| format!("--tls-ca-cert {}: {e}", ca.display()))?
            {
                let cert = cert.map_err(|e| format!("--tls-ca-cert {}: {e}", ca.display()))?;
                roots.add(cert).map_err(|e| format!("--tls-ca-cert {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("--tls-ca-cert {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        format!("--tls-cert {} and --tls-key {}: {e}", files.cert.display(), files.key.display())
    })?;
    Ok(Arc::new(config))
}
