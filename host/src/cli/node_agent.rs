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
    /// The workload cluster's CA certificate (PEM).
    #[arg(long)]
    pub ca_cert: PathBuf,
    /// A file holding the workload API's bearer token.
    #[arg(long)]
    pub token_file: PathBuf,
    /// The provider ID; by default read from --provider-id-file, which the infrastructure
    /// provider writes before it runs the bootstrap data.
    #[arg(long)]
    pub provider_id: Option<String>,
    #[arg(long, default_value = "/run/capw/provider-id")]
    pub provider_id_file: PathBuf,
    /// The version the Node reports (`status.nodeInfo.kubeletVersion`): the Machine's
    /// `spec.version`, which the bootstrap data passes. The capw node image runs no kubelet of
    /// its own; it presents the version it was asked for.
    #[arg(long, default_value = capw::node::agent::DEFAULT_KUBELET_VERSION)]
    pub kubelet_version: String,
    /// This machine is a control-plane machine: the Node gets the control-plane role label and
    /// taint, and `kube-system/kube-apiserver-<node>` mirrors the API server it runs.
    #[arg(long)]
    pub control_plane: bool,
    /// With --control-plane: the kubeadm configuration the bootstrap data wrote
    /// (`/run/kubeadm/kubeadm.yaml`); its ClusterConfiguration is uploaded to this machine's
    /// API server (--local-api-server) as `kube-system/kubeadm-config` once the Node is
    /// registered, as `kubeadm init` does.
    #[arg(long, requires = "control_plane")]
    pub kubeadm_config: Option<PathBuf>,
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
    let ca = std::fs::read_to_string(&args.ca_cert)
        .with_context(|| format!("reading {}", args.ca_cert.display()))?;
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("reading {}", args.token_file.display()))?;
    let client = |server: &str| {
        let kubeconfig = capw_apiserver::kubeconfig::render(server, &ca, token.trim());
        async move {
            let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig)
                .context("building a kubeconfig")?;
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            anyhow::Ok(kube::Client::try_from(config)?)
        }
    };
    let cluster_configuration = match &args.kubeadm_config {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(
                capw_kubeadm::cluster_configuration_document(&text).with_context(|| {
                    format!("{} holds no ClusterConfiguration document", path.display())
                })?,
            )
        }
    };
    let workload = client(&args.server).await?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(workload.clone());
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(workload, "kube-system");
    let local = client(&args.local_api_server).await?;
    // To this machine's own API server: each capw control-plane machine keeps its own store,
    // and the one behind the endpoint must hold the cluster's configuration whichever it is.
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(local.clone(), "kube-system");
    let registration = capw::node::agent::Registration {
        name: &args.node_name,
        provider_id: &provider_id,
        addresses: &args.addresses,
        kubelet_version: &args.kubelet_version,
        control_plane: args.control_plane,
    };
    let mut registered = false;
    let mut uploaded = cluster_configuration.is_none();
    loop {
        let mut result = capw::node::agent::register(&nodes, &registration).await;
        if !uploaded
            && result.is_ok()
            && let Some(cc) = &cluster_configuration
        {
            result = capw::node::agent::upload_kubeadm_config(&config_maps, cc).await;
            uploaded = result.is_ok();
        }
        if args.control_plane && result.is_ok() {
            let ready = local
                .request_text(http::Request::get("/readyz").body(Vec::new())?)
                .await
                .is_ok_and(|body| body.trim() == "ok");
            result = capw::node::agent::report_api_server(&pods, &registration, ready).await;
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
