//! `capw apiserver`.

use anyhow::Context;
use capw_apiserver::{Config, Server};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for the database, the token and the kubeconfig (created if missing).
    #[arg(long, env = "CAPW_DATA_DIR", default_value = ".capw")]
    pub data_dir: PathBuf,

    /// Address to listen on. Loopback by default: the API is meant for this machine only.
    /// Port 0 picks a free port; the chosen address is written into the kubeconfig.
    #[arg(long, env = "CAPW_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,

    /// Events kept for watch resumption, also across restarts (older resourceVersions get 410).
    #[arg(long, env = "CAPW_WATCH_RETENTION", default_value_t = 10_000)]
    pub watch_retention: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        tracing::warn!(listen = %args.listen, "listening beyond loopback: anyone who can reach this address and holds the token can change every object");
    }
    let mut config = Config::ephemeral(&args.data_dir);
    config.listen = args.listen;
    config.store.retention = args.watch_retention;
    let server = Server::start(config).await.with_context(|| {
        format!(
            "starting the API server with data in {}",
            args.data_dir.display()
        )
    })?;
    println!("capw apiserver listening on {}", server.url());
    println!("kubeconfig: {}", server.kubeconfig_path().display());
    println!(
        "try: KUBECONFIG={} kubectl get namespaces",
        server.kubeconfig_path().display()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    server.shutdown().await;
    Ok(())
}
