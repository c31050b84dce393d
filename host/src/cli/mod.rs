//! Command-line interface.

mod apiserver;
mod crds;
mod describe;
mod image;
mod kubeadm;
mod lb;
mod manifests;
mod move_clusters;
mod node_agent;
mod plugin;
mod signals;
mod sim;
mod up;

use clap::{Parser, Subcommand};

/// capw: a Cluster API management plane whose infrastructure, bootstrap and control-plane
/// providers are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "capw", version, about, long_about = None)]
pub struct Cli {
    /// How log lines are written to stderr: `text` (coloured only on a terminal) or `json`, one
    /// object per line, for log shippers. `RUST_LOG` picks what is logged (default `info`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "CAPW_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// The form of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the embedded Kubernetes-compatible management API.
    ///
    /// Objects are stored durably in DATA_DIR (redb); DATA_DIR/kubeconfig (mode 0600) holds the
    /// server URL and the bearer token every request must carry. Point kubectl at it with
    /// `export KUBECONFIG=DATA_DIR/kubeconfig`.
    Apiserver(apiserver::Args),
    /// Run the embedded management API and the host, loading providers from a plugin directory.
    ///
    /// Prints the kubeconfig path; `kubectl get wasmproviders` shows what is loaded.
    Up(up::UpArgs),
    /// Run the host against an existing API server (any Kubernetes cluster, or `capw apiserver`).
    Run(up::RunArgs),
    /// Look at and check provider components (`.wasm`).
    #[command(subcommand)]
    Plugin(plugin::Command),
    /// Show Cluster API objects as a tree (`capw describe cluster NAME`).
    #[command(subcommand)]
    Describe(describe::Command),
    /// Build the node image the Docker provider runs (`capw image build`).
    #[command(subcommand)]
    Image(image::Command),
    /// A TCP load balancer with health checks, in front of a cluster's control plane.
    Lb(lb::Args),
    /// Register this machine's Node in its workload cluster and keep it Ready (what the
    /// bootstrap data of every machine starts).
    NodeAgent(node_agent::Args),
    /// kubeadm's `init` and `join` as the capw node image runs them, from the kubeadm
    /// configuration files the kubeadm bootstrap provider's user data writes (the node image's
    /// `kubeadm` runs this).
    #[command(subcommand)]
    Kubeadm(kubeadm::Command),
    /// Simulated machines for a cloud emulator (`capw sim ec2 --endpoint URL`): stands in for
    /// real machines in tests and demos.
    #[command(subcommand)]
    Sim(sim::Command),
    /// Print what `clusterctl init` would apply to run capw in a management cluster: the CRDs,
    /// a namespace and ServiceAccount, the ClusterRole the host needs, the plugins as
    /// ConfigMaps and a Deployment of leader-elected replicas (`capw manifests | kubectl apply
    /// -f -`).
    Manifests(manifests::Args),
    /// Move the Clusters of a namespace, and everything that belongs to them, to another
    /// management API without touching their machines (clusterctl move): pause, copy in
    /// dependency order with status, unpause at the target, delete at the source without
    /// running provider deletion. `--dry-run` prints what would move.
    Move(move_clusters::Args),
    /// Print the CRDs generated from the host's types (Cluster, Machine, WasmProvider), or write
    /// them with `--write crds`.
    Crds(crds::Args),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Apiserver(args) => apiserver::run(args).await,
        Command::Plugin(cmd) => plugin::run(cmd).await,
        Command::Up(args) => up::up(args).await,
        Command::Run(args) => up::run(args).await,
        Command::Describe(cmd) => describe::run(cmd).await,
        Command::Crds(args) => crds::run(args),
        Command::Manifests(args) => manifests::run(args),
        Command::Move(args) => move_clusters::run(args).await,
        Command::NodeAgent(args) => node_agent::run(args).await,
        Command::Lb(args) => lb::run(args).await,
        Command::Kubeadm(cmd) => kubeadm::run(cmd).await,
        Command::Image(cmd) => image::run(cmd),
        Command::Sim(cmd) => sim::run(cmd).await,
    }
}
