//! `capw lb`: the load balancer a DockerCluster runs in front of its control plane.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where clients connect; port 0 picks a free one (the banner names it).
    #[arg(long, default_value = "0.0.0.0:6443")]
    pub listen: String,
    /// A file of backends (`host:port` per line), re-read every check.
    #[arg(long, default_value = "/etc/capw/lb-backends")]
    pub backends_file: PathBuf,
    /// Backends in addition to the file.
    #[arg(long = "backend")]
    pub backends: Vec<String>,
    /// How often backends are health-checked (a TCP connect), in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub check_interval_ms: u64,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let lb = capw_node::lb::Lb::bind(capw_node::lb::Config {
        listen: args.listen,
        backends_file: args.backends_file,
        backends: args.backends,
        check_interval: Duration::from_millis(args.check_interval_ms),
    })
    .await?;
    // Printed once the socket is bound, so whoever waits for this line can connect at once.
    println!("capw lb listening on {}", lb.local_addr()?);
    lb.serve().await;
    Ok(())
}
