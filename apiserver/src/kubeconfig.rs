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

/// The inline credential of a kubeconfig's current context, as [`render_with_certificate`]
/// writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCredential {
    /// The context's cluster CA (PEM), when it is inline.
    pub ca: Option<String>,
    /// The user's client certificate (PEM).
    pub cert: String,
    /// The user's client key (PEM).
    pub key: String,
}

/// The client certificate and key of `text`'s current user, and its cluster's CA, when the
/// kubeconfig carries them inline (`*-data`). `None` for anything else.
pub fn client_credential(text: &str) -> Option<ClientCredential> {
    use base64::Engine;
    use serde_json::Value;
    let kc: Value = serde_yaml::from_str(text).ok()?;
    let named = |list: &str, name: &str| {
        kc.get(list)?
            .as_array()?
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
            .cloned()
    };
    let current = kc.get("current-context")?.as_str()?;
    let context = named("contexts", current)?;
    let user = named("users", context.pointer("/context/user")?.as_str()?)?;
    let decode = |v: Option<&Value>| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v?.as_str()?)
            .ok()?;
        String::from_utf8(bytes).ok()
    };
    let ca = context
        .pointer("/context/cluster")
        .and_then(Value::as_str)
        .and_then(|c| named("clusters", c))
        .and_then(|c| decode(c.pointer("/cluster/certificate-authority-data")));
    Some(ClientCredential {
        ca,
        cert: decode(user.pointer("/user/client-certificate-data"))?,
        key: decode(user.pointer("/user/client-key-data"))?,
    })
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_rendered_certificate_kubeconfig_reads_back() {
        let text = super::render_with_certificate("https://x:6443", "CA", "u", "CERT", "KEY");
        assert_eq!(
            super::client_credential(&text),
            Some(super::ClientCredential {
                ca: Some("CA".into()),
                cert: "CERT".into(),
                key: "KEY".into(),
            })
        );
        let token = super::render("https://x:6443", "CA", "t");
        assert_eq!(super::client_credential(&token), None);
    }
}
