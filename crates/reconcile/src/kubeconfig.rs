//! The one shape of workload kubeconfig the host builds clients from (SECURITY.md, "kubeconfig").
//!
//! A `<cluster>-kubeconfig` Secret is written by a control-plane plugin, or by anyone with write
//! access to Secrets, and the host would otherwise interpret it with every kubeconfig feature on:
//! `exec` and `auth-provider` run commands on the host, file references read the host's files
//! (the management API's own token among them) and send them to whatever server the file names,
//! and a proxy or a skipped TLS check hands the connection to someone else. Upstream's
//! ClusterCache trusts the Secret; capw does not. A kubeconfig is accepted only when its current
//! context names a cluster with an inline CA and a server that is the Cluster's
//! `spec.controlPlaneEndpoint`, and a user with inline credentials; the client is then built from
//! a fresh kubeconfig holding just those fields, so nothing else in the text can take effect.

use capw_api::common::ApiEndpoint;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KubeconfigError {
    #[error("is not a kubeconfig: {0}")]
    Parse(String),
    /// A rule of the kubeconfig shape was broken; `field` is the kubeconfig path.
    #[error("{field}: {why}")]
    Refused { field: String, why: String },
}

fn refused(field: impl Into<String>, why: impl Into<String>) -> KubeconfigError {
    KubeconfigError::Refused {
        field: field.into(),
        why: why.into(),
    }
}

const FIX: &str = "a workload kubeconfig may hold only an inline server, certificate-authority-data and inline credentials (token, or client-certificate-data with client-key-data)";

/// Checks `text` and returns the kubeconfig the host may use: only the current context, its
/// cluster's server, CA and TLS server name, and its user's inline credentials.
pub fn sanitize(text: &str, endpoint: Option<&ApiEndpoint>) -> Result<Kubeconfig, KubeconfigError> {
    let kc = Kubeconfig::from_yaml(text).map_err(|e| KubeconfigError::Parse(e.to_string()))?;
    let current = kc
        .current_context
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| refused("current-context", "is not set"))?;
    let context = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| {
            refused(
                "current-context",
                format!("names context {current:?}, which is not in contexts"),
            )
        })?;
    let named_cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .ok_or_else(|| {
            refused(
                format!("contexts[{current}].context.cluster"),
                format!(
                    "names cluster {:?}, which is not in clusters",
                    context.cluster
                ),
            )
        })?;
    let cluster = named_cluster.cluster.clone().ok_or_else(|| {
        refused(
            format!("clusters[{}].cluster", named_cluster.name),
            "is empty",
        )
    })?;
    let at = format!("clusters[{}].cluster", named_cluster.name);
    if cluster.certificate_authority.is_some() {
        return Err(refused(
            format!("{at}.certificate-authority"),
            format!("file references are refused; {FIX}"),
        ));
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        return Err(refused(
            format!("{at}.insecure-skip-tls-verify"),
            "skipping TLS verification is refused: the workload API must be verified against the cluster's CA",
        ));
    }
    if cluster.proxy_url.is_some() {
        return Err(refused(
            format!("{at}.proxy-url"),
            "proxies are refused: the host connects to the Cluster's spec.controlPlaneEndpoint directly",
        ));
    }
    let ca = cluster
        .certificate_authority_data
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            refused(
                format!("{at}.certificate-authority-data"),
                "is missing: the workload API must be verified against an inline CA",
            )
        })?;
    let server = cluster.server.clone().unwrap_or_default();
    check_server(&server, endpoint).map_err(|why| refused(format!("{at}.server"), why))?;

    let user_name = context.user.clone().unwrap_or_default();
    let uat = format!("users[{user_name}].user");
    let user = kc
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .ok_or_else(|| {
            refused(
                format!("contexts[{current}].context.user"),
                format!("names user {user_name:?}, which is not in users"),
            )
        })?;
    let forbidden: [(&str, bool, &str); 7] = [
        (
            "exec",
            user.exec.is_some(),
            "credential plugins run commands on the host",
        ),
        (
            "auth-provider",
            user.auth_provider.is_some(),
            "auth providers run commands on the host",
        ),
        (
            "tokenFile",
            user.token_file.is_some(),
            "file references read the host's files",
        ),
        (
            "client-certificate",
            user.client_certificate.is_some(),
            "file references read the host's files",
        ),
        (
            "client-key",
            user.client_key.is_some(),
            "file references read the host's files",
        ),
        (
            "as",
            user.impersonate.is_some()
                || user.impersonate_groups.is_some()
                || user.impersonate_uid.is_some(),
            "impersonation is refused",
        ),
        (
            "username",
            user.username.is_some() || user.password.is_some(),
            "basic authentication is refused",
        ),
    ];
    if let Some((field, _, why)) = forbidden.iter().find(|f| f.1) {
        return Err(refused(format!("{uat}.{field}"), format!("{why}; {FIX}")));
    }
    let has_cert = user.client_certificate_data.is_some() && user.client_key_data.is_some();
    if user.token.is_none() && !has_cert {
        return Err(refused(uat, format!("has no inline credentials; {FIX}")));
    }
    Ok(Kubeconfig {
        clusters: vec![NamedCluster {
            name: "workload".into(),
            cluster: Some(Cluster {
                server: Some(server),
                certificate_authority_data: Some(ca),
                tls_server_name: cluster.tls_server_name,
                ..Default::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "workload".into(),
            auth_info: Some(AuthInfo {
                token: user.token,
                client_certificate_data: user.client_certificate_data,
                client_key_data: user.client_key_data,
                ..Default::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: "workload".into(),
            context: Some(Context {
                cluster: "workload".into(),
                user: Some("workload".into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some("workload".into()),
        ..Default::default()
    })
}

/// The kubeconfig the host stores as `<cluster>-kubeconfig` for `text`: the one [`sanitize`]
/// built, which is what was checked, under the names of `text`'s current context, cluster and
/// user (upstream's `<cluster>-admin@<cluster>`, say), so users see the names they expect.
pub fn stored(text: &str, endpoint: Option<&ApiEndpoint>) -> Result<String, KubeconfigError> {
    let mut clean = sanitize(text, endpoint)?;
    if let Ok(kc) = Kubeconfig::from_yaml(text)
        && let Some(current) = kc.current_context.clone()
        && let Some(ctx) = kc
            .contexts
            .iter()
            .find(|c| c.name == current)
            .and_then(|c| c.context.clone())
    {
        clean.clusters[0].name = ctx.cluster.clone();
        clean.auth_infos[0].name = ctx.user.clone().unwrap_or_default();
        clean.contexts[0].name = current.clone();
        if let Some(c) = clean.contexts[0].context.as_mut() {
            c.cluster = ctx.cluster;
            c.user = ctx.user;
        }
        clean.current_context = Some(current);
    }
    clean.api_version = Some("v1".into());
    clean.kind = Some("Config".into());
    serde_yaml::to_string(&clean).map_err(|e| KubeconfigError::Parse(e.to_string()))
}

/// The server must be `https://HOST:PORT` of the Cluster's endpoint, and nothing else: no path,
/// no user info, no other host.
fn check_server(server: &str, endpoint: Option<&ApiEndpoint>) -> Result<(), String> {
    let endpoint = endpoint
        .filter(|e| !e.host.is_empty() && e.port != 0)
        .ok_or("the Cluster has no spec.controlPlaneEndpoint yet, so no server can be trusted")?;
    let uri: http::Uri = server
        .parse()
        .map_err(|e| format!("{server:?} is not a URL: {e}"))?;
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(443);
    let path_ok = matches!(uri.path(), "" | "/") && uri.query().is_none();
    let no_userinfo = uri.authority().is_some_and(|a| !a.as_str().contains('@'));
    if uri.scheme_str() != Some("https") || !path_ok || !no_userinfo {
        return Err(format!(
            "{server:?} must be https://{}:{} with no path",
            endpoint.host, endpoint.port
        ));
    }
    let want_host = endpoint.host.trim_start_matches('[').trim_end_matches(']');
    if !host.eq_ignore_ascii_case(want_host) || i32::from(port) != endpoint.port {
        return Err(format!(
            "{server:?} is not the Cluster's spec.controlPlaneEndpoint ({}:{}); the host connects only to the endpoint of the Cluster the kubeconfig belongs to",
            endpoint.host, endpoint.port
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is stored holds the checked fields under the text's names, and nothing else of it.
    #[test]
    fn the_stored_kubeconfig_is_the_checked_one_under_its_names() {
        let text = serde_json::json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "demo-admin@demo",
            "contexts": [
                {"name": "demo-admin@demo", "context": {"cluster": "demo", "user": "demo-admin"}},
                {"name": "other", "context": {"cluster": "elsewhere", "user": "runner"}}],
            "clusters": [
                {"name": "demo", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Y2E="}},
                {"name": "elsewhere", "cluster": {"server": "https://evil.example:443", "insecure-skip-tls-verify": true}}],
            "users": [
                {"name": "demo-admin", "user": {"token": "t0ken"}},
                {"name": "runner", "user": {"exec": {"command": "/bin/sh", "apiVersion": "client.authentication.k8s.io/v1"}}}],
        })
        .to_string();
        let out = stored(&text, Some(&ep())).expect("stored");
        let kc = Kubeconfig::from_yaml(&out).expect("parses");
        assert_eq!(kc.current_context.as_deref(), Some("demo-admin@demo"));
        assert_eq!(
            (kc.clusters.len(), kc.auth_infos.len(), kc.contexts.len()),
            (1, 1, 1)
        );
        assert_eq!(kc.clusters[0].name, "demo");
        assert_eq!(kc.auth_infos[0].name, "demo-admin");
        for gone in ["evil.example", "/bin/sh", "runner", "insecure"] {
            assert!(!out.contains(gone), "{gone} survived:\n{out}");
        }
        assert_eq!(sanitize(&out, Some(&ep())).map(|_| ()), Ok(()));
    }

    fn ep() -> ApiEndpoint {
        ApiEndpoint {
            host: "127.0.0.1".into(),
            port: 6443,
        }
    }

    fn kc(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: w, user: u}}\nclusters:\n- name: w\n  cluster: {{{cluster}}}\nusers:\n- name: u\n  user: {{{user}}}\n"
        )
    }

    const OK_CLUSTER: &str = "server: 'https://127.0.0.1:6443', certificate-authority-data: Y2E=";

    #[test]
    fn an_inline_kubeconfig_for_the_endpoint_is_kept_with_only_its_inline_fields() {
        let out = sanitize(&kc(OK_CLUSTER, "token: t"), Some(&ep())).unwrap();
        let user = out.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some() && user.exec.is_none());
        assert_eq!(
            out.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://127.0.0.1:6443")
        );
    }

    #[test]
    fn every_feature_that_reaches_outside_the_text_is_refused_by_its_field() {
        let cases = [
            (
                OK_CLUSTER,
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: touch}",
                ".exec",
            ),
            (
                OK_CLUSTER,
                "auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}",
                ".auth-provider",
            ),
            (OK_CLUSTER, "tokenFile: .capw/token", ".tokenFile"),
            (
                OK_CLUSTER,
                "client-certificate: /etc/x, client-key: /etc/y",
                ".client-certificate",
            ),
            (
                "server: 'https://127.0.0.1:6443', certificate-authority: /etc/ca",
                "token: t",
                ".certificate-authority",
            ),
            (
                "server: 'https://127.0.0.1:6443', certificate-authority-data: Y2E=, proxy-url: 'http://evil'",
                "token: t",
                ".proxy-url",
            ),
            (
                "server: 'https://127.0.0.1:6443', certificate-authority-data: Y2E=, insecure-skip-tls-verify: true",
                "token: t",
                ".insecure-skip-tls-verify",
            ),
            (
                "server: 'https://127.0.0.1:6443'",
                "token: t",
                ".certificate-authority-data",
            ),
            (
                "server: 'https://evil.example:6443', certificate-authority-data: Y2E=",
                "token: t",
                ".server",
            ),
            (
                "server: 'https://127.0.0.1:6444', certificate-authority-data: Y2E=",
                "token: t",
                ".server",
            ),
            (
                "server: 'http://127.0.0.1:6443', certificate-authority-data: Y2E=",
                "token: t",
                ".server",
            ),
            (OK_CLUSTER, "", "users[u].user"),
        ];
        for (cluster, user, field) in cases {
            match sanitize(&kc(cluster, user), Some(&ep())) {
                Err(KubeconfigError::Refused { field: f, .. }) => {
                    assert!(f.ends_with(field), "{f} for {user} / {cluster}")
                }
                other => panic!("{cluster} / {user}: {other:?}"),
            }
        }
    }

    #[test]
    fn without_an_endpoint_no_server_is_trusted() {
        let e = sanitize(&kc(OK_CLUSTER, "token: t"), None).unwrap_err();
        assert!(e.to_string().contains("controlPlaneEndpoint"), "{e}");
    }
}
