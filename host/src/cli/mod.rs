//! Command-line interface.

mod apiserver;
mod plugin;

use clap::{Parser, Subcommand};

/// capw: a Cluster API management plane whose infrastructure, bootstrap and control-plane
/// providers are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "capw", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the embedded Kubernetes-compatible management API.
    ///
    /// Objects are stored durably in DATA_DIR (redb); DATA_DIR/kubeconfig (mode 0600) holds the
    /// server URL and the bearer token every request must carry. Point kubectl at it with
    /// `export KUBECONFIG=DATA_DIR/kubeconfig`.
    Apiserver(apiserver::Args),
    /// Look at and check provider components (`.wasm`).
    #[command(subcommand)]
    Plugin(plugin::Command),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Apiserver(args) => apiserver::run(args).await,
        Command::Plugin(cmd) => plugin::run(cmd).await,
    }
}
