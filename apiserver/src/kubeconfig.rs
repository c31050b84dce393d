//! The kubeconfigs the server and the node programs write, for kubectl, kube-rs and the Python
//! client: built as kube's [`Kubeconfig`] and serialized, so every field is spelled as kubectl
//! reads it.

use base64::Engine;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use std::io::Write;
use std::path::Path;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// One cluster, one user and one context naming both, in namespace `default`.
fn single(
    cluster: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    auth: AuthInfo,
    context: &str,
) -> String {
    let kc = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: cluster.into(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                certificate_authority_data: Some(b64(ca_pem)),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.into(),
            auth_info: Some(auth),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: context.into(),
            context: Some(Context {
                cluster: cluster.into(),
                user: Some(user.into()),
                namespace: Some("default".into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(context.into()),
        ..Kubeconfig::default()
    };
    // Plain strings and lists: serializing them cannot fail.
    serde_yaml::to_string(&kc).unwrap_or_default()
}

/// A kubeconfig with one cluster, one user holding the bearer token, and one context.
pub fn render(server: &str, ca_pem: &str, token: &str) -> String {
    let auth = AuthInfo {
        token: Some(token.to_string().into()),
        ..AuthInfo::default()
    };
    single("capw", server, ca_pem, "capw-admin", auth, "capw")
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
    let auth = AuthInfo {
        client_certificate_data: Some(b64(cert_pem)),
        client_key_data: Some(b64(key_pem).into()),
        ..AuthInfo::default()
    };
    single(
        "default-cluster",
        server,
        ca_pem,
        user,
        auth,
        "default-context",
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
    use secrecy::ExposeSecret;
    let kc = Kubeconfig::from_yaml(text).ok()?;
    let current = kc.current_context.as_deref()?;
    let context = kc
        .contexts
        .iter()
        .find(|c| c.name == current)?
        .context
        .as_ref()?;
    let user = context.user.as_deref()?;
    let auth = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()?;
    let decode = |v: &str| {
        let bytes = base64::engine::general_purpose::STANDARD.decode(v).ok()?;
        String::from_utf8(bytes).ok()
    };
    let ca = kc
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref()?.certificate_authority_data.as_deref())
        .and_then(decode);
    Some(ClientCredential {
        ca,
        cert: decode(auth.client_certificate_data.as_deref()?)?,
        key: decode(auth.client_key_data.as_ref()?.expose_secret())?,
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
        let kc = kube::config::Kubeconfig::from_yaml(&token).unwrap();
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        use secrecy::ExposeSecret;
        assert_eq!(user.token.as_ref().unwrap().expose_secret(), "t");
        assert_eq!(kc.current_context.as_deref(), Some("capw"));
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://x:6443")
        );
    }
}
