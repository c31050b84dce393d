//! `capw up` (the embedded API server plus the host) and `capw run` (the host against any API
//! server).

use anyhow::Context as _;
use capw_apiserver::{Config, Server};
use capw_manager::{self as manager, ConnectTo, Elector, HostConfig, Identities, LeaderElection};
use capw_runtime::capabilities::sim_cloud::SimSettings;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `capw up` and `capw run` share.
#[derive(Debug, clap::Args)]
pub struct HostArgs {
    /// Plugin directory: every NAME.wasm dropped here (with an optional NAME.yaml of grants and
    /// limits) becomes the WasmProvider NAME.
    #[arg(long, env = "CAPW_PLUGINS", default_value = "plugins.d")]
    pub plugins: PathBuf,
    /// Where `/metrics` (Prometheus text), `/healthz` and `/readyz` are served, from the start
    /// (a standby waiting for the leader-election Lease answers them too).
    #[arg(long, env = "CAPW_METRICS", default_value = "127.0.0.1:9440")]
    pub metrics: SocketAddr,
    /// Where the Cluster and ClusterClass admission webhooks are served over HTTPS; they are
    /// registered with the API server (a fresh CA each start). `capw up` serves them on a free
    /// loopback port unless told otherwise; `capw run` only when given an address the API
    /// server can reach.
    #[arg(long, env = "CAPW_WEBHOOKS")]
    pub webhooks: Option<SocketAddr>,
    /// In a cluster: the Service in front of the host's replicas (NAMESPACE/NAME or
    /// NAMESPACE/NAME:PORT). The webhook configurations then name the Service, and the replicas
    /// share a CA kept in the Secret NAME-cert in that namespace, made and rotated by the
    /// replicas themselves (no cert-manager). Every replica serves the webhooks, leading or not.
    #[arg(long, env = "CAPW_WEBHOOK_SERVICE", requires = "webhooks")]
    pub webhook_service: Option<manager::webhooks::ServiceRef>,
    /// How long a simulated VM of the in-memory provider takes to run its bootstrap data.
    #[arg(long, env = "CAPW_SIM_BOOT_DELAY_MS", default_value_t = 200)]
    pub sim_boot_delay_ms: u64,
    /// How long a simulated node agent takes to register its Node.
    #[arg(long, env = "CAPW_SIM_NODE_DELAY_MS", default_value_t = 500)]
    pub sim_node_delay_ms: u64,
    /// A file of `HOST:PORT:ADDR:PORT` lines, as curl's --connect-to: a workload API whose
    /// endpoint is HOST:PORT is dialled at ADDR:PORT, its certificate still checked for HOST.
    /// `capw sim ec2 --connect-to` writes it for the load balancers its emulator names.
    #[arg(long, env = "CAPW_CONNECT_TO")]
    pub connect_to: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Directory for the API server's data, its kubeconfig and the compiled-plugin cache.
    #[arg(long, env = "CAPW_DATA_DIR", default_value = ".capw")]
    pub data_dir: PathBuf,
    /// Address of the embedded API server (loopback by default; port 0 picks one).
    #[arg(long, env = "CAPW_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub host: HostArgs,
}

/// Leader election, as a Cluster API manager's `--leader-elect` flags.
#[derive(Debug, clap::Args)]
pub struct LeaderArgs {
    /// Take part in leader election: only the host holding the Lease runs the controllers and
    /// the plugin runtime; the others stand by, serving probes and metrics (`capw_leader 0`),
    /// and take over when the leader stops renewing. A leader that cannot renew within the
    /// renew deadline exits. `--leader-elect=false` for a single host.
    #[arg(long, env = "CAPW_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The name of the Lease.
    #[arg(
        long,
        env = "CAPW_LEADER_ELECTION_ID",
        default_value = "capw-controller-leader-election"
    )]
    pub leader_election_id: String,
    /// The Lease's namespace: by default the Pod's own (from its ServiceAccount mount), else
    /// kube-system.
    #[arg(long, env = "CAPW_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// How long a Lease stays taken after its last renewal (a standby waits this long after
    /// the leader's last renewal).
    #[arg(long = "leader-elect-lease-duration", default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up and exits.
    #[arg(long = "leader-elect-renew-deadline", default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,
    /// How often a standby tries to take the Lease and the leader renews it.
    #[arg(long = "leader-elect-retry-period", default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,
}

/// The host's namespace: the Pod's own (from its ServiceAccount mount), else kube-system.
fn own_namespace() -> String {
    std::fs::read_to_string(service_account_dir().join("namespace"))
        .map(|n| n.trim().to_string())
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "kube-system".into())
}

impl LeaderArgs {
    fn election(&self) -> Option<LeaderElection> {
        if !self.leader_elect {
            return None;
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .unwrap_or_else(own_namespace);
        let mut e = LeaderElection::new(namespace, self.leader_election_id.clone());
        e.lease_duration = self.lease_duration;
        e.renew_deadline = self.renew_deadline;
        e.retry_period = self.retry_period;
        Some(e)
    }
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The kubeconfig of the management cluster (default: the usual kubeconfig lookup).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Where compiled plugins are cached.
    #[arg(long, env = "CAPW_CACHE_DIR", default_value = ".capw/cache")]
    pub cache_dir: PathBuf,
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub leader: LeaderArgs,
    /// Run the core controllers, the provider driver and the plugin runtime as the
    /// ServiceAccounts capw-core, capw-driver and capw-plugin-runtime of the host's namespace
    /// (kube's impersonation: the host's own account needs `impersonate` on exactly these,
    /// which `capw manifests` grants), so RBAC and the API server's records tell them apart.
    #[arg(long, env = "CAPW_COMPONENT_IDENTITIES")]
    pub component_identities: bool,
}

pub async fn client_from(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(config_from(kubeconfig).await?)?)
}

/// The client configuration: `kubeconfig`, else in a Pod its ServiceAccount, else kube's usual
/// lookup.
pub async fn config_from(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    let kc = match kubeconfig {
        Some(path) => Some(
            kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?,
        ),
        None => in_cluster()?,
    };
    let config = match kc {
        Some(kc) => kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?,
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig (pass --kubeconfig)")?,
    };
    Ok(config)
}

/// The ServiceAccount mount, as a Pod has it; `CAPW_SERVICE_ACCOUNT_DIR` points elsewhere
/// (the tests run the host outside a Pod with the same files).
pub fn service_account_dir() -> PathBuf {
    std::env::var_os("CAPW_SERVICE_ACCOUNT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount"))
}

/// In a Pod: the API server from `KUBERNETES_SERVICE_HOST`/`_PORT`, trusted with the mounted
/// `ca.crt`, authenticated with the mounted `token` (re-read as the kubelet rotates it), as
/// client-go's in-cluster configuration. `None` outside a Pod.
fn in_cluster() -> anyhow::Result<Option<kube::config::Kubeconfig>> {
    let (Ok(host), Ok(port)) = (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) else {
        return Ok(None);
    };
    let dir = service_account_dir();
    let token = dir.join("token");
    anyhow::ensure!(
        token.exists(),
        "KUBERNETES_SERVICE_HOST is set but {} is missing: mount the ServiceAccount token (automountServiceAccountToken) or pass --kubeconfig",
        token.display()
    );
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let namespace = std::fs::read_to_string(dir.join("namespace"))
        .map(|n| n.trim().to_string())
        .unwrap_or_else(|_| "default".into());
    let kc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
        "clusters": [{"name": "in-cluster", "cluster": {
            "server": format!("https://{host}:{port}"),
            "certificate-authority": dir.join("ca.crt")}}],
        "users": [{"name": "service-account", "user": {"tokenFile": token}}],
        "contexts": [{"name": "in-cluster", "context": {
            "cluster": "in-cluster", "user": "service-account", "namespace": namespace}}],
    });
    Ok(Some(
        serde_json::from_value(kc).context("the in-cluster configuration")?,
    ))
}

/// Runs the host until Ctrl-C or SIGTERM, printing a one-line status whenever it changes.
/// With an election, the host first waits for the Lease, and exits with an error once it
/// loses it.
async fn host(
    client: kube::Client,
    args: HostArgs,
    cache_dir: PathBuf,
    election: Option<LeaderElection>,
    identities: Option<Identities>,
) -> anyhow::Result<()> {
    // One listener for the whole run (see `signals`): a Ctrl-C or SIGTERM while a new leader
    // starts its host would otherwise be lost, and the host would keep running and keep the
    // Lease.
    let mut stop = super::signals::Stop::listen()?;
    let mut config = HostConfig::new(args.plugins.clone(), cache_dir);
    config.identities = identities;
    if let Some(path) = &args.connect_to {
        config.connect_to = ConnectTo::file(path.clone());
    }
    config.sim = SimSettings {
        boot_delay: Duration::from_millis(args.sim_boot_delay_ms),
        node_delay: Duration::from_millis(args.sim_node_delay_ms),
    };
    let metrics = config.metrics.clone();
    let (addr, _health) = manager::health::serve(args.metrics, metrics.clone())
        .await
        .context("serving /metrics and /healthz")?;
    println!("metrics at http://{addr}/metrics");
    // Before the election: a standby behind the webhook Service answers admission too.
    let mut webhook_tasks = vec![];
    if let Some(addr) = args.webhooks {
        let lookups = config
            .identities
            .as_ref()
            .map_or_else(|| client.clone(), |i| i.core.clone());
        let served = manager::webhooks::start(
            client.clone(),
            lookups,
            addr,
            args.webhook_service.clone(),
            &mut webhook_tasks,
        )
        .await
        .context("serving the admission webhooks")?;
        println!("admission webhooks at https://{served}");
    }
    let mut elector = match election {
        Some(settings) => {
            metrics.set_leader(false);
            let mut elector = Elector::new(client.clone(), settings)?;
            println!("standing by for the Lease {}", elector.describe());
            tokio::select! {
                () = stop.recv() => return Ok(()),
                () = elector.acquire() => {}
            }
            println!("leading: Lease {}", elector.describe());
            Some(elector)
        }
        None => None,
    };
    metrics.set_leader(true);
    let host = tokio::select! {
        () = stop.recv() => {
            if let Some(e) = elector.as_mut() {
                e.release().await;
            }
            return Ok(());
        }
        host = manager::start(client, config) => host.context("starting the host")?,
    };
    println!(
        "watching {} for plugins (drop NAME.wasm there)",
        args.plugins.display()
    );
    let status = async {
        let mut last = String::new();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let line = host.status_line();
            if line != last {
                println!("{line}");
                last = line;
            }
        }
    };
    let lost = async {
        match elector.as_mut() {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = stop.recv() => {}
        () = status => {}
        e = lost => {
            metrics.set_leader(false);
            // controller-runtime's answer: stop at once, so nothing reconciles without the Lease.
            return Err(anyhow::Error::new(e).context("leader election lost; exiting"));
        }
    }
    drop(host);
    if let Some(e) = elector.as_mut() {
        e.release().await;
    }
    Ok(())
}

pub async fn up(args: UpArgs) -> anyhow::Result<()> {
    let mut config = Config::ephemeral(&args.data_dir);
    config.listen = args.listen;
    let server = Server::start(config)
        .await
        .context("starting the embedded API server")?;
    println!("capw up: API server at {}", server.url());
    println!("kubeconfig: {}", server.kubeconfig_path().display());
    let client = client_from(Some(server.kubeconfig_path())).await?;
    let mut host_args = args.host;
    host_args.webhooks = host_args
        .webhooks
        .or(Some(SocketAddr::from(([127, 0, 0, 1], 0))));
    host(client, host_args, args.data_dir.join("cache"), None, None).await?;
    server.shutdown().await;
    Ok(())
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = config_from(args.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(config.clone())?;
    let identities = if args.component_identities {
        let namespace = args
            .leader
            .leader_election_namespace
            .clone()
            .unwrap_or_else(own_namespace);
        let as_account = |name: &str| -> anyhow::Result<kube::Client> {
            let mut c = config.clone();
            c.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
            Ok(kube::Client::try_from(c)?)
        };
        let [core, driver, runtime] = manager::COMPONENT_ACCOUNTS;
        Some(Identities {
            core: as_account(core)?,
            driver: as_account(driver)?,
            runtime: as_account(runtime)?,
        })
    } else {
        None
    };
    host(
        client,
        args.host,
        args.cache_dir,
        args.leader.election(),
        identities,
    )
    .await
}
