//! The kubeconfig the server writes for kubectl, kube-rs and the Python client.

use std::io::Write;
use std::path::Path;

/// A kubeconfig with one cluster, one user holding the bearer token, and one context.
pub fn render(server: &str, ca_pem: &str, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capw\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: capw-admin\n  user:\n    token: {token}\ncontexts:\n- name: capw\n  context:\n    cluster: capw\n    user: capw-admin\n    namespace: default\ncurrent-context: capw\npreferences: {{}}\n"
    )
}

/// A kubeconfig whose user authenticates with a client certificate (PEM certificate and key),
/// as a kubelet's `kubelet.conf` after its TLS bootstrap.
pub fn render_with_certificate(
    server: &str,
    ca_pem: &str,
    user: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    user: {user}\n    namespace: default\ncurrent-context: default-context\npreferences: {{}}\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem),
    )
}

/// Writes `contents` to `path` with mode 0600, atomically (temp file + rename), so a reader
/// never sees a half-written file and the secret is never world-readable.
pub fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::rename(&tmp, path)
}
