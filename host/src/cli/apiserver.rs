//! `capw apiserver`.

use anyhow::Context;
use capw_apiserver::{Config, KubernetesVersion, Server};
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

    /// Serve with a certificate signed by this CA (PEM) instead of the data directory's own CA:
    /// what a workload cluster's control-plane machine does with the CA its bootstrap data
    /// wrote. Needs --ca-key.
    #[arg(long, requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,

    /// The key of --ca-cert (PEM).
    #[arg(long, requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,

    /// Require the bearer token in this file instead of the data directory's own token.
    #[arg(long)]
    pub token_file: Option<PathBuf>,

    /// The Kubernetes version `/version` reports (such as v1.30.4): a workload control-plane
    /// machine presents the version its Machine asks for. capw's own API level when unset.
    #[arg(long, value_parser = kubernetes_version)]
    pub kubernetes_version: Option<KubernetesVersion>,

    /// Another name or IP address the serving certificate covers (repeatable), as kubeadm's
    /// `apiServer.certSANs`. Loopback and the listen address are always covered.
    #[arg(long = "san")]
    pub sans: Vec<String>,

    /// How users' requests are authorized, as kube-apiserver's flag: `AlwaysAllow` (every
    /// authenticated user may do everything) or `RBAC` (the admin token, being in
    /// `system:masters`, still may; everyone else what Roles, ClusterRoles and their bindings
    /// allow). Bootstrap tokens and node certificates keep their fixed rights either way.
    #[arg(long, value_enum, default_value_t = AuthorizationMode::AlwaysAllow)]
    pub authorization_mode: AuthorizationMode,

    /// More users, as kube-apiserver's --token-auth-file: a CSV of
    /// `token,user,uid,"group1,group2"`, one user per line.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,

    /// The shortest lifetime a TokenRequest may ask for: kube's is 10 minutes; shorter ones
    /// are for tests and demos of expiry.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub service_account_min_token_expiration: std::time::Duration,
}

/// `--authorization-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    #[value(name = "RBAC")]
    Rbac,
}

fn kubernetes_version(v: &str) -> Result<KubernetesVersion, String> {
    KubernetesVersion::parse(v).map_err(|e| e.to_string())
}

fn read(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the {what} {}", path.display()))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        tracing::warn!(listen = %args.listen, "listening beyond loopback: anyone who can reach this address and holds the token can change every object");
    }
    let mut config = Config::ephemeral(&args.data_dir);
    config.listen = args.listen;
    config.store.retention = args.watch_retention;
    if let (Some(crt), Some(key)) = (&args.ca_cert, &args.ca_key) {
        config.ca = Some((read(crt, "CA certificate")?, read(key, "CA key")?));
    }
    if let Some(t) = &args.token_file {
        let token = read(t, "token file")?.trim().to_string();
        anyhow::ensure!(!token.is_empty(), "the token file {} is empty", t.display());
        config.token = Some(token);
    }
    config.kubernetes_version = args.kubernetes_version;
    config.authorization = match args.authorization_mode {
        AuthorizationMode::AlwaysAllow => capw_apiserver::auth::Mode::AlwaysAllow,
        AuthorizationMode::Rbac => capw_apiserver::auth::Mode::Rbac,
    };
    config.token_auth_file = args.token_auth_file;
    config.min_token_expiration = args.service_account_min_token_expiration;
    config.sans = args.sans;
    let mut stop = super::signals::Stop::listen()?;
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
    stop.recv().await;
    server.shutdown().await;
    Ok(())
}
