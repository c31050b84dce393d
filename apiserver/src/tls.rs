//! TLS for the API: a CA kept in the data directory (so kubeconfigs stay valid across
//! restarts) and a fresh serving certificate for the listen address at every start.
//! kubectl and client-go never send a bearer token over plain HTTP, so the token-protected API
//! has to be served over TLS.
//!
//! Clients may also present a certificate signed by the CA, as kube-apiserver's
//! `--client-ca-file` allows: upstream's `<cluster>-kubeconfig` holds such an admin certificate
//! (O=`system:masters`). A certificate is optional; one that does not chain to the CA, or is
//! not for client authentication, ends the handshake, as Go's `VerifyClientCertIfGiven` does.
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Why TLS material could not be made or loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing the CA files failed.
    #[error("cannot read or write {path}")]
    Io {
        /// The file.
        path: String,
        /// Why it could not be used.
        #[source]
        source: std::io::Error,
    },
    /// Generating or parsing a key or certificate failed.
    #[error(
        "certificate generation failed (delete ca.key and ca.crt in the data directory to start with a new CA)"
    )]
    Cert(#[from] rcgen::Error),
    /// rustls rejected the configuration.
    #[error("the TLS configuration was rejected")]
    Rustls(#[from] rustls::Error),
    /// The CA certificate cannot verify client certificates.
    #[error("the CA certificate cannot verify client certificates: {0}")]
    ClientCa(String),
}

/// The CA (PEM, for kubeconfigs) and the server configuration.
pub struct TlsMaterial {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The CA's private key, PEM: the CSR signer issues client certificates with it.
    pub ca_key_pem: String,
    /// The rustls configuration serving with it.
    pub server_config: Arc<rustls::ServerConfig>,
}

fn ca_params() -> CertificateParams {
    ca_params_named("capw-apiserver-ca")
}

fn ca_params_named(common_name: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Loads the CA from `dir` (creating it on first use) and issues a certificate for `sans`.
pub fn load_or_create(dir: &Path, sans: Vec<String>) -> Result<TlsMaterial, TlsError> {
    let key_path = dir.join("ca.key");
    let crt_path = dir.join("ca.crt");
    let (ca_key, ca_pem) = if key_path.exists() && crt_path.exists() {
        let key = KeyPair::from_pem(&std::fs::read_to_string(&key_path).map_err(io(&key_path))?)?;
        (
            key,
            std::fs::read_to_string(&crt_path).map_err(io(&crt_path))?,
        )
    } else {
        let key = KeyPair::generate()?;
        let cert = ca_params().self_signed(&key)?;
        crate::kubeconfig::write_private(&key_path, &key.serialize_pem()).map_err(io(&key_path))?;
        crate::kubeconfig::write_private(&crt_path, &cert.pem()).map_err(io(&crt_path))?;
        (key, cert.pem())
    };
    let ca_key_pem = ca_key.serialize_pem();
    let server_config = serving_config(&ca_pem, ca_key, &sans)?;
    Ok(TlsMaterial {
        ca_pem,
        ca_key_pem,
        server_config,
    })
}

/// A new CA: (certificate PEM, key PEM). Workload clusters get one each.
pub fn generate_ca() -> Result<(String, String), TlsError> {
    let key = KeyPair::generate()?;
    let cert = ca_params().self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A new CA named `common_name`: CAs that must be told apart in one bundle (a rotation's old
/// and new) need names of their own, since verifiers find an issuer by its name.
pub fn generate_ca_named(common_name: &str) -> Result<(String, String), TlsError> {
    let key = KeyPair::generate()?;
    let cert = ca_params_named(common_name).self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A new key pair as (public key PEM, private key PEM): the service-account signing keys.
pub fn generate_key_pair() -> Result<(String, String), TlsError> {
    let key = KeyPair::generate()?;
    Ok((key.public_key_pem(), key.serialize_pem()))
}

/// How long a client certificate is valid: upstream's `certs.DefaultCertDuration`.
pub const CLIENT_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A client certificate signed by the CA, as (certificate PEM, key PEM), valid from now for
/// [`CLIENT_CERT_VALIDITY`]. The issuer is read from the CA certificate itself, so a CA the
/// user brought (any subject) signs certificates that chain to it.
pub fn client_certificate(
    ca_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    organizations: &[&str],
) -> Result<(String, String), TlsError> {
    let issuer = Issuer::from_ca_cert_pem(ca_pem, KeyPair::from_pem(ca_key_pem)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = subject(common_name, organizations);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = now + CLIENT_CERT_VALIDITY;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The subject of a PEM certificate signing request whose signature verifies: the common name
/// and the organizations. `None` for anything else.
pub fn csr_subject(csr_pem: &str) -> Option<(String, Vec<String>)> {
    use rustls::pki_types::CertificateSigningRequestDer;
    use x509_parser::prelude::FromDer as _;
    let der = CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes()).ok()?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
            .ok()?;
    csr.verify_signature().ok()?;
    let subject = &csr.certification_request_info.subject;
    let cn = subject
        .iter_common_name()
        .find_map(|a| a.as_str().ok().map(String::from))?;
    let orgs = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(String::from))
        .collect();
    Some((cn, orgs))
}

/// A client certificate for the key and subject in `csr_pem`, signed by the CA and valid for
/// `validity`: whatever else the request asks for (CA, server use, names), the certificate is
/// for client authentication only, as kube's client signers issue it.
pub fn sign_client_csr(
    csr_pem: &str,
    ca_pem: &str,
    ca_key_pem: &str,
    validity: Duration,
) -> Result<String, TlsError> {
    let issuer = Issuer::from_ca_cert_pem(ca_pem, KeyPair::from_pem(ca_key_pem)?)?;
    let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)?;
    let p = &mut csr.params;
    p.is_ca = IsCa::ExplicitNoCa;
    p.subject_alt_names.clear();
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let now = time::OffsetDateTime::now_utc();
    // As kube's signer: backdated five minutes for clock skew.
    p.not_before = now - Duration::from_secs(300);
    p.not_after = now + validity;
    Ok(csr.signed_by(&issuer)?.pem())
}

/// A client's subject as kube reads it: the user in CN, the groups in O.
fn subject(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A new key and a PEM certificate signing request for `common_name` in `organizations`, as a
/// kubelet makes for its client certificate: (request PEM, key PEM).
pub fn client_csr(common_name: &str, organizations: &[&str]) -> Result<(String, String), TlsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = subject(common_name, organizations);
    let csr = params.serialize_request(&key)?;
    Ok((csr.pem()?, key.serialize_pem()))
}

/// How long the client certificate `cert_pem` stays valid, or `None` when it is not a
/// certificate signed by the CA `ca_pem` (another CA's, or not a certificate at all): such a
/// credential must be replaced, whatever its dates say.
pub fn remaining_validity(cert_pem: &str, ca_pem: &str) -> Option<Duration> {
    let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
    let ca_der = CertificateDer::from_pem_slice(ca_pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der).ok()?;
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).ok()?;
    cert.verify_signature(Some(ca.public_key())).ok()?;
    let left = cert.validity().time_to_expiration()?;
    Some(Duration::from_secs(
        u64::try_from(left.whole_seconds()).ok()?,
    ))
}

/// kubeadm's CA pin: `sha256:` and the lowercase hex SHA-256 of the certificate's
/// SubjectPublicKeyInfo, as `discovery.bootstrapToken.caCertHashes` holds it. `None` when
/// `cert_pem` is not a certificate.
pub fn spki_sha256(cert_pem: &str) -> Option<String> {
    use sha2::Digest as _;
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let digest = sha2::Sha256::digest(cert.tbs_certificate.subject_pki.raw);
    Some(format!(
        "sha256:{}",
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// Serving TLS for `sans`, signed by the CA given as PEM.
pub fn from_ca(ca_pem: &str, ca_key_pem: &str, sans: &[String]) -> Result<TlsMaterial, TlsError> {
    let key = KeyPair::from_pem(ca_key_pem)?;
    Ok(TlsMaterial {
        ca_pem: ca_pem.to_string(),
        ca_key_pem: ca_key_pem.to_string(),
        server_config: serving_config(ca_pem, key, sans)?,
    })
}

fn serving_config(
    ca_pem: &str,
    ca_key: KeyPair,
    sans: &[String],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key)?;
    let server_key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "capw-apiserver");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&server_key, &issuer)?;
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca_der = CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(|e| TlsError::ClientCa(e.to_string()))?;
    roots.add(ca_der)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::ClientCa(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    /// The pin of a certificate made and hashed by openssl
    /// (`openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`), as
    /// kubeadm documents computing `--discovery-token-ca-cert-hash`.
    #[test]
    fn the_ca_pin_is_the_spki_hash_openssl_computes() {
        let pem = "-----BEGIN CERTIFICATE-----
MIIBfjCCASWgAwIBAgIUYrjzbEcvYjI7urzJlUXQqIuldtowCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjEyMDIyMDA3MTBaFw0zNjExMjky
MDA3MTBaMBUxEzARBgNVBAMMCmt1YmVybmV0ZXMwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASt4AD7vi9cCrRb2PBTNE6w4/qdNOoKIsBVczNYLdIbGk3Ur1xnmjzp
PljndDYCWeNhWo1veIEMOL03Orx1YUCHo1MwUTAdBgNVHQ4EFgQUmjce2v00jgnh
EDhB/W5P+sDcMjgwHwYDVR0jBBgwFoAUmjce2v00jgnhEDhB/W5P+sDcMjgwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiAflnaHncN5L8RrxVzVx8KE
agvEvvXnq2V7ECJ/IEm8ngIgc8G7ZX7fgNMkGP+oS7gMc6dJ6aWp7ka3Z2T4W7kD
vS4=
-----END CERTIFICATE-----
";
        assert_eq!(
            super::spki_sha256(pem).as_deref(),
            Some("sha256:e1570500003bfe99b08eb09e4fb3462ec5a0903be3a33e71c176fa81bde1b1bb")
        );
        assert_eq!(super::spki_sha256("not a certificate"), None);
    }
}
