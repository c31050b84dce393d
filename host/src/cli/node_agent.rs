//! `capw node-agent`: registers this machine's Node in the workload cluster with its provider
//! ID and keeps it Ready, as the kubelet would. Control-plane and worker machines start it from
//! their bootstrap data. On a control-plane machine (`--control-plane`) it also posts the mirror
//! Pod of the API server the machine runs, Ready as that server's `/readyz` answers.

use anyhow::Context as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Node's name (the Machine's name).
    #[arg(long)]
    pub node_name: String,
    /// The workload API, e.g. https://10.0.0.2:6443.
    #[arg(long)]
    pub server: String,
    /// The workload cluster's CA certificate (PEM). With --token-file; a joining worker uses
    /// --bootstrap-token-file instead.
    #[arg(long, requires = "token_file", conflicts_with = "bootstrap_token_file")]
    pub ca_cert: Option<PathBuf>,
    /// A file holding the workload API's bearer token.
    #[arg(long, requires = "ca_cert")]
    pub token_file: Option<PathBuf>,
    /// Join as `kubeadm join` does: a file holding a bootstrap token (`<id>.<secret>`). The CA
    /// comes from the server's `kube-public/cluster-info`, accepted only when its public key
    /// matches a --discovery-token-ca-cert-hash.
    #[arg(long)]
    pub bootstrap_token_file: Option<PathBuf>,
    /// `sha256:<hex>` of the CA's SubjectPublicKeyInfo (repeatable), as kubeadm's
    /// `caCertHashes`.
    #[arg(
        long = "discovery-token-ca-cert-hash",
        requires = "bootstrap_token_file"
    )]
    pub ca_cert_hashes: Vec<String>,
    /// Where the node's own credential goes after its TLS bootstrap, and is reused from on
    /// restart while its certificate is valid: a kubeconfig with the client certificate the
    /// cluster signed, as a kubelet's.
    #[arg(long, default_value = "/etc/kubernetes/kubelet.conf")]
    pub kubelet_kubeconfig: PathBuf,
    /// Accept cluster-info's CA without a pinned hash (kubeadm's
    /// `unsafeSkipCAVerification`): anyone who can answer for the endpoint gets the token.
    #[arg(long, requires = "bootstrap_token_file")]
    pub discovery_token_unsafe_skip_ca_verification: bool,
    /// The provider ID; by default read from --provider-id-file, which the infrastructure
    /// provider writes before it runs the bootstrap data.
    #[arg(long)]
    pub provider_id: Option<String>,
    #[arg(long, default_value = "/run/capw/provider-id")]
    pub provider_id_file: PathBuf,
    /// The version the Node reports (`status.nodeInfo.kubeletVersion`): the Machine's
    /// `spec.version`, which the bootstrap data passes. The capw node image runs no kubelet of
    /// its own; it presents the version it was asked for.
    #[arg(long, default_value = capw_node::agent::DEFAULT_KUBELET_VERSION)]
    pub kubelet_version: String,
    /// This machine is a control-plane machine: the Node gets the control-plane role label and
    /// taint, and `kube-system/kube-apiserver-<node>` mirrors the API server it runs.
    #[arg(long)]
    pub control_plane: bool,
    /// Labels to register the Node with, `key=value` separated by commas (the kubelet's flag,
    /// which kubeadm fills from `kubeletExtraArgs`).
    #[arg(long, value_parser = node_labels)]
    pub node_labels: Option<std::collections::BTreeMap<String, String>>,
    /// Taints to register the Node with, `key[=value]:Effect` separated by commas (the
    /// kubelet's flag, which kubeadm fills from `nodeRegistration.taints`). Unset: the
    /// uninitialized taint on a worker, the control-plane taint with --control-plane.
    #[arg(long, value_parser = register_with_taints)]
    pub register_with_taints: Option<Taints>,
    /// This machine's own API server, probed (`/readyz`) for its mirror Pod's readiness.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    pub local_api_server: String,
    /// Addresses to report as InternalIP.
    #[arg(long = "address")]
    pub addresses: Vec<String>,
    /// How often the Node's Ready status is posted.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_seconds: u64,
    /// Register once and exit (for scripts and tests).
    #[arg(long)]
    pub once: bool,
}

/// `--register-with-taints`, parsed.
#[derive(Debug, Clone)]
pub struct Taints(Vec<serde_json::Value>);

fn register_with_taints(v: &str) -> Result<Taints, String> {
    capw_node::kubeadm::parse_taints(v).map(Taints)
}

fn node_labels(v: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    capw_node::kubeadm::parse_labels(v)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let provider_id = match &args.provider_id {
        Some(p) => p.clone(),
        None => std::fs::read_to_string(&args.provider_id_file)
            .with_context(|| {
                format!(
                    "reading the provider ID from {} (or pass --provider-id)",
                    args.provider_id_file.display()
                )
            })?
            .trim()
            .to_string(),
    };
    anyhow::ensure!(!provider_id.is_empty(), "the provider ID is empty");
    let (ca, auth) = credentials(&args).await?;
    let client = |server: &str| {
        let kubeconfig = match &auth {
            Auth::Token(token) => capw_apiserver::kubeconfig::render(server, &ca, token),
            Auth::Certificate { cert, key } => capw_apiserver::kubeconfig::render_with_certificate(
                server,
                &ca,
                &user(&args),
                cert,
                key,
            ),
        };
        async move {
            let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig)
                .context("building a kubeconfig")?;
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            anyhow::Ok(kube::Client::try_from(config)?)
        }
    };
    let workload = client(&args.server).await?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(workload.clone());
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(workload, "kube-system");
    let local = client(&args.local_api_server).await?;
    let registration = capw_node::agent::Registration {
        name: &args.node_name,
        provider_id: &provider_id,
        addresses: &args.addresses,
        kubelet_version: &args.kubelet_version,
        control_plane: args.control_plane,
        labels: &args.node_labels.clone().unwrap_or_default(),
        taints: args.register_with_taints.as_ref().map(|t| t.0.as_slice()),
    };
    let mut registered = false;
    loop {
        let mut result = capw_node::agent::register(&nodes, &registration).await;
        if args.control_plane && result.is_ok() {
            let ready = local
                .request_text(http::Request::get("/readyz").body(Vec::new())?)
                .await
                .is_ok_and(|body| body.trim() == "ok");
            result = capw_node::agent::report_api_server(&pods, &registration, ready).await;
        }
        match result {
            Ok(()) => {
                if !registered {
                    println!(
                        "node {} registered with provider ID {provider_id}",
                        args.node_name
                    );
                    registered = true;
                }
                if args.once {
                    return Ok(());
                }
            }
            // The workload API may not be up yet (the control plane boots in parallel).
            Err(e) => {
                tracing::warn!(error = %e, server = %args.server, "registering the node failed; retrying")
            }
        }
        // Until registered, retry soon: the control plane's API usually comes up within a second.
        tokio::time::sleep(if registered {
            Duration::from_secs(args.heartbeat_seconds)
        } else {
            Duration::from_millis(250)
        })
        .await;
    }
}

fn read(path: &std::path::Path) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_string())
}

/// How the node agent authenticates.
enum Auth {
    /// A bearer token (control-plane machines: the cluster's node token).
    Token(String),
    /// The client certificate the cluster signed for this node.
    Certificate { cert: String, key: String },
}

/// The user a node's certificate names, as a kubelet's.
fn user(args: &Args) -> String {
    format!("system:node:{}", args.node_name)
}

/// The CA and the credential: given, or for a joining worker, the node's certificate from an
/// earlier bootstrap, or a new one got as a kubelet's TLS bootstrap gets it: the CA discovered
/// and pinned as `kubeadm join` does, then a CertificateSigningRequest sent with the bootstrap
/// token and signed by the cluster. Retried until the control plane answers.
async fn credentials(args: &Args) -> anyhow::Result<(String, Auth)> {
    if let (Some(ca), Some(token)) = (&args.ca_cert, &args.token_file) {
        return Ok((read(ca)?, Auth::Token(read(token)?)));
    }
    if let Some((ca, cert, key)) = kubelet_credential(&args.kubelet_kubeconfig) {
        tracing::info!(path = %args.kubelet_kubeconfig.display(), "using the node certificate from an earlier bootstrap");
        return Ok((ca, Auth::Certificate { cert, key }));
    }
    let Some(path) = &args.bootstrap_token_file else {
        anyhow::bail!(
            "{} holds no valid node certificate: pass --bootstrap-token-file to get one, or --ca-cert and --token-file",
            args.kubelet_kubeconfig.display()
        );
    };
    let token = read(path)?;
    anyhow::ensure!(
        capw_apiserver::bootstrap_token::parse(&token).is_some(),
        "{} does not hold a bootstrap token ([a-z0-9]{{6}}.[a-z0-9]{{16}})",
        path.display()
    );
    anyhow::ensure!(
        !args.ca_cert_hashes.is_empty() || args.discovery_token_unsafe_skip_ca_verification,
        "pass --discovery-token-ca-cert-hash, or --discovery-token-unsafe-skip-ca-verification to trust any CA"
    );
    let ca = loop {
        match discover_ca(args).await {
            Ok(ca) => break ca,
            // A wrong pin is an attack or a misconfiguration: retrying does not help.
            Err(Discovery::Mismatch(e)) => anyhow::bail!(e),
            Err(Discovery::Unavailable(e)) => {
                tracing::warn!(error = %e, server = %args.server, "reading cluster-info failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let (cert, key) = loop {
        match request_certificate(args, &ca, &token).await {
            Ok(pair) => break pair,
            Err(e) => {
                tracing::warn!(error = %e, server = %args.server, "getting the node's client certificate failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let kubeconfig = capw_apiserver::kubeconfig::render_with_certificate(
        &args.server,
        &ca,
        &user(args),
        &cert,
        &key,
    );
    if let Some(dir) = args.kubelet_kubeconfig.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    capw_apiserver::kubeconfig::write_private(&args.kubelet_kubeconfig, &kubeconfig)
        .with_context(|| format!("writing {}", args.kubelet_kubeconfig.display()))?;
    Ok((ca, Auth::Certificate { cert, key }))
}

/// The CA, certificate and key of an earlier bootstrap's kubeconfig, while the certificate
/// chains to that CA and has not expired.
fn kubelet_credential(path: &std::path::Path) -> Option<(String, String, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    let c = capw_apiserver::kubeconfig::client_credential(&text)?;
    let ca = c.ca?;
    capw_apiserver::tls::remaining_validity(&c.cert, &ca)
        .filter(|left| !left.is_zero())
        .map(|_| (ca, c.cert, c.key))
}

/// A kubelet's client-certificate request, sent with the bootstrap token; waits until the
/// cluster signs it.
async fn request_certificate(
    args: &Args,
    ca: &str,
    token: &str,
) -> anyhow::Result<(String, String)> {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestSpec,
    };
    let kubeconfig = capw_apiserver::kubeconfig::render(&args.server, ca, token);
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).context("building a kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let csrs: kube::Api<CertificateSigningRequest> =
        kube::Api::all(kube::Client::try_from(config)?);
    let (request, key) = capw_apiserver::tls::client_csr(&user(args), &["system:nodes"])?;
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("node-csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request.into_bytes()),
            signer_name: capw_apiserver::KUBELET_CLIENT_SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        status: None,
    };
    let created = csrs.create(&Default::default(), &csr).await?;
    let name = created.metadata.name.unwrap_or_default();
    println!("sent certificate signing request {name} for {}", user(args));
    loop {
        let current = csrs.get(&name).await?;
        let status = current.status.unwrap_or_default();
        if let Some(refused) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True")
        {
            anyhow::bail!(
                "certificate signing request {name} was {}: {}",
                refused.type_,
                refused.message.clone().unwrap_or_default()
            );
        }
        if let Some(cert) = status.certificate {
            let pem = String::from_utf8(cert.0).context("the signed certificate is not PEM")?;
            return Ok((pem, key));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

enum Discovery {
    Unavailable(anyhow::Error),
    Mismatch(String),
}

/// Reads `kube-public/cluster-info` without credentials and without trusting the server yet,
/// then accepts its CA only when a pinned hash matches the CA's public key.
async fn discover_ca(args: &Args) -> Result<String, Discovery> {
    use base64::Engine as _;
    let unavailable = |e: anyhow::Error| Discovery::Unavailable(e);
    let uri = args
        .server
        .parse()
        .map_err(|e: http::uri::InvalidUri| unavailable(e.into()))?;
    let mut config = kube::Config::new(uri);
    // Nothing is trusted yet: the CA read here is checked against the pins below. An empty
    // root list keeps the client from looking for system roots, which the node image lacks.
    config.accept_invalid_certs = true;
    config.root_cert = Some(vec![]);
    let client = kube::Client::try_from(config).map_err(|e| unavailable(e.into()))?;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "kube-public");
    let cm = cms
        .get("cluster-info")
        .await
        .map_err(|e| unavailable(e.into()))?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .ok_or_else(|| Discovery::Mismatch("cluster-info holds no kubeconfig".into()))?;
    let kc = kube::config::Kubeconfig::from_yaml(text)
        .map_err(|e| Discovery::Mismatch(format!("cluster-info's kubeconfig: {e}")))?;
    let ca = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.as_ref())
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| Discovery::Mismatch("cluster-info names no CA".into()))?;
    let pin = capw_apiserver::tls::spki_sha256(&ca)
        .ok_or_else(|| Discovery::Mismatch("cluster-info's CA is not a certificate".into()))?;
    if args.ca_cert_hashes.is_empty() || args.ca_cert_hashes.contains(&pin) {
        Ok(ca)
    } else {
        Err(Discovery::Mismatch(format!(
            "cluster-info's CA has public key hash {pin}, which is not among --discovery-token-ca-cert-hash {}: refusing to send the token to this server",
            args.ca_cert_hashes.join(", ")
        )))
    }
}
