//! `capw node-agent`: registers this machine's Node in the workload cluster with its provider
//! ID and keeps it Ready, as the kubelet would. Control-plane and worker machines start it from
//! their bootstrap data.

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
    let kubeconfig = capw_apiserver::kubeconfig::render(&args.server, &ca, token.trim());
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).context("building a kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
        kube::Api::all(kube::Client::try_from(config)?);
    let registration = capw::node::agent::Registration {
        name: &args.node_name,
        provider_id: &provider_id,
        addresses: &args.addresses,
        kubelet_version: &args.kubelet_version,
    };
    let mut registered = false;
    loop {
        match capw::node::agent::register(&nodes, &registration).await {
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
