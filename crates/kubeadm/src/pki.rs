//! The certificate files a control-plane Machine's user data carries, at kubeadm's paths under
//! `certificatesDir`, in upstream's order (`secret.Certificates.AsFiles`).

use crate::spec::{ClusterConfiguration, File};

/// kubeadm's default `certificatesDir`.
pub const DEFAULT_DIR: &str = "/etc/kubernetes/pki";

/// A PEM certificate (or, for the service-account pair, public key) and its private key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPair {
    /// PEM; written with mode 0640.
    pub cert: String,
    /// PEM; written with mode 0600 when not empty.
    pub key: String,
}

/// The cluster's certificate authorities and keys, from the `<cluster>-ca`, `-etcd`, `-proxy`
/// and `-sa` Secrets (and `-apiserver-etcd-client` with external etcd).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Certificates {
    /// `<cluster>-ca`.
    pub cluster_ca: Option<KeyPair>,
    /// `<cluster>-etcd`.
    pub etcd_ca: Option<KeyPair>,
    /// `<cluster>-proxy`.
    pub front_proxy_ca: Option<KeyPair>,
    /// `<cluster>-sa`: `cert` holds the public key.
    pub service_account: Option<KeyPair>,
    /// `<cluster>-apiserver-etcd-client`, external etcd only.
    pub apiserver_etcd_client: Option<KeyPair>,
}

fn pair(out: &mut Vec<File>, p: &Option<KeyPair>, cert_path: &str, key_path: &str) {
    let Some(p) = p else { return };
    if !p.cert.is_empty() {
        out.push(File::root(cert_path, "0640", p.cert.clone()));
    }
    if !p.key.is_empty() && !key_path.is_empty() {
        out.push(File::root(key_path, "0600", p.key.clone()));
    }
}

impl Certificates {
    /// The files, in upstream's order: cluster CA, etcd CA, front-proxy CA, service-account
    /// keys, then the external etcd client. With external etcd the etcd CA goes to its
    /// `caFile` and the client pair to `certFile`/`keyFile`.
    pub fn files(&self, cc: &ClusterConfiguration) -> Vec<File> {
        let dir = if cc.certificates_dir.is_empty() {
            DEFAULT_DIR
        } else {
            cc.certificates_dir.trim_end_matches('/')
        };
        let at = |name: &str| format!("{dir}/{name}");
        let mut out = vec![];
        pair(&mut out, &self.cluster_ca, &at("ca.crt"), &at("ca.key"));
        let external = cc
            .etcd
            .external
            .as_ref()
            .filter(|e| !e.endpoints.is_empty());
        match external {
            Some(e) => pair(&mut out, &self.etcd_ca, &e.ca_file, ""),
            None => pair(
                &mut out,
                &self.etcd_ca,
                &at("etcd/ca.crt"),
                &at("etcd/ca.key"),
            ),
        }
        pair(
            &mut out,
            &self.front_proxy_ca,
            &at("front-proxy-ca.crt"),
            &at("front-proxy-ca.key"),
        );
        pair(
            &mut out,
            &self.service_account,
            &at("sa.pub"),
            &at("sa.key"),
        );
        if let Some(e) = external {
            pair(
                &mut out,
                &self.apiserver_etcd_client,
                &e.cert_file,
                &e.key_file,
            );
        }
        out
    }
}
