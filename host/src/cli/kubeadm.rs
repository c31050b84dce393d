//! `capw kubeadm init|join`: kubeadm's two commands as the capw node image runs them, from the
//! configuration files CABPK's user data writes (`/run/kubeadm/kubeadm.yaml`,
//! `/run/kubeadm/kubeadm-join-config.yaml`). The node image's `kubeadm` runs this, so the
//! same user data that builds a real cluster on a kubeadm node image builds a capw one here.
//!
//! What each does, in kubeadm's order:
//! - `init`: takes the cluster CA from `certificatesDir`, writes `admin.conf` and
//!   `kubelet.conf` signed by it, starts `capw apiserver` with that PKI, the SANs asked for
//!   and `kubernetesVersion`, waits until it is ready, uploads `kube-system/kubeadm-config`
//!   and `kube-public/cluster-info`, starts the node agent (the kubelet's part) and waits for
//!   the Node.
//! - `join`: a worker starts the node agent with the bootstrap token and CA pins, which finds
//!   the CA through cluster-info and gets its client certificate through a CSR; `join` returns
//!   once that is done. A control-plane join also serves the API with the CA it was given and
//!   copies the cluster's kubeadm-config into its own store (each capw control-plane machine
//!   keeps one).
//!
//! The version a node presents is its image's: `CAPW_KUBERNETES_VERSION`, which the
//! infrastructure provider sets as a `kindest/node:<version>` image would carry it.

use anyhow::Context as _;
use capw_node::kubeadm::{self as config, NodeRegistration};
use capw_node::kubeadm_node as plan;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Start this machine's control plane as the first of its cluster, from the
    /// ClusterConfiguration and InitConfiguration in --config.
    Init(Args),
    /// Join this machine to a cluster with a bootstrap token, from the JoinConfiguration in
    /// --config; with `controlPlane` set, as another control-plane machine.
    Join(Args),
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The kubeadm configuration file (kubeadm.k8s.io/v1beta3 or v1beta4).
    #[arg(long)]
    pub config: PathBuf,
    /// kubeadm's log level; accepted so user data with `--v N` runs. capw logs by `RUST_LOG`.
    #[arg(long = "v")]
    pub verbosity: Option<u32>,
    /// The Kubernetes version this node image presents: its Node's kubeletVersion, and the
    /// API version a control-plane join serves. Set by the infrastructure provider. `init`
    /// falls back to ClusterConfiguration.kubernetesVersion.
    #[arg(long, env = "CAPW_KUBERNETES_VERSION")]
    pub kubernetes_version: Option<String>,
    /// The Node's name when nodeRegistration.name is unset; by default the hostname.
    #[arg(long)]
    pub node_name: Option<String>,
    /// Where admin.conf and kubelet.conf are written.
    #[arg(long, default_value = "/etc/kubernetes")]
    pub kubernetes_dir: PathBuf,
    /// The API server's data directory on a control-plane machine.
    #[arg(long, default_value = "/var/lib/capw/apiserver")]
    pub data_dir: PathBuf,
    /// Where the started services write their logs.
    #[arg(long, default_value = "/var/log")]
    pub log_dir: PathBuf,
    /// How long to wait for the API server, the Node, or the node's certificate.
    #[arg(long, default_value_t = 240)]
    pub timeout_seconds: u64,
}

pub async fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Init(args) => init(&args).await,
        Command::Join(args) => join(&args).await,
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The Node's name as kubeadm picks it ([`plan::node_name`]); the hostname is read only when
/// nothing names the Node.
fn node_name(args: &Args, node: &NodeRegistration) -> anyhow::Result<String> {
    let hostname = if node.name.is_some() || args.node_name.is_some() {
        String::new()
    } else {
        read(Path::new("/proc/sys/kernel/hostname"))?
    };
    Ok(plan::node_name(node, args.node_name.as_deref(), &hostname))
}

/// The cluster CA from `dir`, which the user data wrote; a capw node does not make one.
fn cluster_ca(dir: &str) -> anyhow::Result<(String, String)> {
    let at = |f: &str| Path::new(dir).join(f);
    let ca = read(&at("ca.crt")).context(
        "the bootstrap provider writes the cluster CA to certificatesDir; capw's kubeadm does not generate one",
    )?;
    let key = read(&at("ca.key")).context(
        "a control-plane machine needs the CA key in certificatesDir to serve the API and sign its kubeconfigs",
    )?;
    Ok((ca, key))
}

/// Writes a kubeconfig for `user` (organizations `groups`), with a certificate the CA signs.
fn signed_kubeconfig(
    path: &Path,
    server: &str,
    (ca, key): &(String, String),
    user: &str,
    groups: &[&str],
) -> anyhow::Result<String> {
    let (cert, cert_key) = capw_apiserver::tls::client_certificate(ca, key, user, groups)
        .with_context(|| format!("signing the client certificate of {user}"))?;
    let text =
        capw_apiserver::kubeconfig::render_with_certificate(server, ca, user, &cert, &cert_key);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    capw_apiserver::kubeconfig::write_private(path, &text)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("[kubeconfig] Writing \"{}\"", path.display());
    Ok(text)
}

async fn client(kubeconfig: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).context("building a kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Starts `capw ARGS` detached, logging to `LOG_DIR/capw-NAME.log`: the services kubeadm
/// hands to the kubelet and systemd.
fn start(args: &Args, name: &str, argv: &[String]) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    std::fs::create_dir_all(&args.log_dir)
        .with_context(|| format!("creating {}", args.log_dir.display()))?;
    let log_path = args.log_dir.join(format!("capw-{name}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let err = log.try_clone()?;
    let exe = std::env::current_exe().context("finding the capw binary")?;
    let child = std::process::Command::new(exe)
        .args(argv)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        // Its own process group: it outlives this command and the exec that ran it.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting capw {name}"))?;
    println!(
        "[{name}] started, pid {} (log: {})",
        child.id(),
        log_path.display()
    );
    Ok(child)
}

/// The last lines of a service's log, for an error.
fn log_tail(args: &Args, name: &str) -> String {
    let text =
        std::fs::read_to_string(args.log_dir.join(format!("capw-{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Waits for `check` to answer `true`, failing when `child` exits first or time runs out.
async fn wait_for<F, Fut>(
    args: &Args,
    what: &str,
    child: &mut std::process::Child,
    service: &str,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    loop {
        if check().await {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "capw {service} exited ({status}) while waiting for {what}:\n{}",
                log_tail(args, service)
            );
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "timed out after {} s waiting for {what}:\n{}",
                args.timeout_seconds,
                log_tail(args, service)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Starts the API server with the cluster's PKI and waits until it is ready; returns the
/// client of `admin_kubeconfig_for_local`.
async fn serve(
    args: &Args,
    certificates_dir: &str,
    port: u16,
    version: &str,
    sans: Vec<String>,
    admin_kubeconfig_for_local: &str,
) -> anyhow::Result<kube::Client> {
    let argv = plan::apiserver_argv(
        &args.data_dir,
        Path::new(certificates_dir),
        port,
        version,
        &sans,
    );
    let mut child = start(args, "apiserver", &argv)?;
    let local = client(admin_kubeconfig_for_local).await?;
    println!("[wait-control-plane] Waiting for the API server at https://127.0.0.1:{port}");
    wait_for(
        args,
        "the API server to be ready",
        &mut child,
        "apiserver",
        || {
            let local = local.clone();
            async move {
                let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
                    return false;
                };
                local
                    .request_text(req)
                    .await
                    .is_ok_and(|b| b.trim() == "ok")
            }
        },
    )
    .await?;
    Ok(local)
}

async fn init(args: &Args) -> anyhow::Result<()> {
    let file = args.config.display().to_string();
    let cfg = config::init_config(&file, &read(&args.config)?)?;
    let name = node_name(args, &cfg.node)?;
    let kubelet_version = args
        .kubernetes_version
        .clone()
        .unwrap_or_else(|| cfg.kubernetes_version.clone());
    println!(
        "[init] Using Kubernetes version: {} (node {name})",
        cfg.kubernetes_version
    );
    let ca = cluster_ca(&cfg.certificates_dir)?;
    let server = plan::server_url(&cfg.control_plane_endpoint, cfg.bind_port);
    let admin = control_plane_kubeconfigs(args, &server, &ca, &name)?;
    run_control_plane(
        args,
        &ControlPlane {
            name: &name,
            server: &server,
            endpoint: &cfg.control_plane_endpoint,
            ca: &ca,
            certificates_dir: &cfg.certificates_dir,
            port: cfg.bind_port,
            version: &cfg.kubernetes_version,
            kubelet_version: &kubelet_version,
            node: &cfg.node,
            cert_sans: cfg.cert_sans.clone(),
            cluster_configuration: &cfg.cluster_configuration,
            admin: &admin,
        },
    )
    .await?;
    println!("\nYour Kubernetes control-plane has initialized successfully!");
    Ok(())
}

/// Writes `admin.conf` and `kubelet.conf` for the Node `name`, both signed by the cluster CA, as
/// kubeadm does on a control-plane machine; returns admin.conf.
fn control_plane_kubeconfigs(
    args: &Args,
    server: &str,
    ca: &(String, String),
    name: &str,
) -> anyhow::Result<String> {
    let admin = signed_kubeconfig(
        &args.kubernetes_dir.join("admin.conf"),
        server,
        ca,
        "kubernetes-admin",
        &["system:masters"],
    )?;
    signed_kubeconfig(
        &args.kubernetes_dir.join("kubelet.conf"),
        server,
        ca,
        &format!("system:node:{name}"),
        &["system:nodes"],
    )?;
    Ok(admin)
}

/// A control-plane machine, `init`'s or a control-plane `join`'s, once its kubeconfigs are
/// written.
struct ControlPlane<'a> {
    name: &'a str,
    /// The cluster's endpoint as a URL.
    server: &'a str,
    /// The endpoint as `host:port`, for the serving certificate.
    endpoint: &'a str,
    ca: &'a (String, String),
    certificates_dir: &'a str,
    port: u16,
    /// What this machine's API server presents at `/version`.
    version: &'a str,
    kubelet_version: &'a str,
    node: &'a NodeRegistration,
    cert_sans: Vec<String>,
    /// Uploaded to this machine's store as `kube-system/kubeadm-config`.
    cluster_configuration: &'a str,
    /// admin.conf, which reaches the cluster through its endpoint.
    admin: &'a str,
}

/// What both kinds of control-plane machine do: serve the API with the cluster's PKI, upload
/// kubeadm-config and cluster-info to this machine's store, start the node agent and wait for
/// the Node.
async fn run_control_plane(args: &Args, cp: &ControlPlane<'_>) -> anyhow::Result<()> {
    let mut sans = cp.cert_sans.clone();
    sans.extend(plan::endpoint_host(cp.endpoint));
    sans.push(cp.name.to_string());
    let local_url = format!("https://127.0.0.1:{}", cp.port);
    let local = serve(
        args,
        cp.certificates_dir,
        cp.port,
        cp.version,
        sans,
        &local_kubeconfig(cp.ca, &local_url)?,
    )
    .await?;
    println!(
        "[upload-config] Storing the configuration in ConfigMap \"kubeadm-config\" in the \"kube-system\" Namespace"
    );
    upload(&local, cp.cluster_configuration, cp.server, &cp.ca.0).await?;
    let mut agent = start(
        args,
        "node-agent",
        &plan::agent_argv(
            cp.name,
            cp.server,
            &args.kubernetes_dir.join("kubelet.conf"),
            cp.kubelet_version,
            cp.node,
            Some(cp.port),
        ),
    )?;
    wait_for_node(args, &client(cp.admin).await?, cp.name, &mut agent).await
}

/// An administrator's kubeconfig for this machine's own API server.
fn local_kubeconfig(ca: &(String, String), url: &str) -> anyhow::Result<String> {
    let (cert, key) = capw_apiserver::tls::client_certificate(
        &ca.0,
        &ca.1,
        "kubernetes-admin",
        &["system:masters"],
    )
    .context("signing the local administrator's certificate")?;
    Ok(capw_apiserver::kubeconfig::render_with_certificate(
        url,
        &ca.0,
        "kubernetes-admin",
        &cert,
        &key,
    ))
}

/// What `kubeadm init` uploads: `kube-system/kubeadm-config` and `kube-public/cluster-info`.
async fn upload(
    local: &kube::Client,
    cluster_configuration: &str,
    server: &str,
    ca: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let system: kube::Api<ConfigMap> = kube::Api::namespaced(local.clone(), "kube-system");
    capw_node::agent::put_config_map(
        &system,
        capw_node::agent::kubeadm_config_map(cluster_configuration),
    )
    .await
    .context("uploading kube-system/kubeadm-config")?;
    let public: kube::Api<ConfigMap> = kube::Api::namespaced(local.clone(), "kube-public");
    capw_node::agent::put_config_map(
        &public,
        capw_node::agent::cluster_info_config_map(server, ca),
    )
    .await
    .context("uploading kube-public/cluster-info")?;
    Ok(())
}

async fn wait_for_node(
    args: &Args,
    client: &kube::Client,
    name: &str,
    agent: &mut std::process::Child,
) -> anyhow::Result<()> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    println!("[kubelet-start] Waiting for the Node {name} to register");
    wait_for(
        args,
        &format!("the Node {name}"),
        agent,
        "node-agent",
        || {
            let nodes = nodes.clone();
            async move { matches!(nodes.get_opt(name).await, Ok(Some(_))) }
        },
    )
    .await
}

async fn join(args: &Args) -> anyhow::Result<()> {
    let file = args.config.display().to_string();
    let cfg = config::join_config(&file, &read(&args.config)?)?;
    let name = node_name(args, &cfg.node)?;
    let version = args.kubernetes_version.clone().with_context(|| {
        "CAPW_KUBERNETES_VERSION is not set: the infrastructure provider sets the version the node image presents (the Machine's spec.version)"
    })?;
    capw_apiserver::KubernetesVersion::parse(&version)
        .map_err(|e| anyhow::anyhow!("CAPW_KUBERNETES_VERSION {version:?}: {e}"))?;
    let d = &cfg.discovery;
    let server = format!("https://{}", d.api_server_endpoint);
    let kubelet_conf = args.kubernetes_dir.join("kubelet.conf");
    println!("[preflight] Joining {server} as {name}, Kubernetes {version}");
    let Some(port) = cfg.control_plane else {
        let token_file = args.kubernetes_dir.join("bootstrap-token");
        std::fs::create_dir_all(&args.kubernetes_dir)
            .with_context(|| format!("creating {}", args.kubernetes_dir.display()))?;
        capw_apiserver::kubeconfig::write_private(&token_file, &d.token)
            .with_context(|| format!("writing {}", token_file.display()))?;
        let mut argv = plan::agent_argv(&name, &server, &kubelet_conf, &version, &cfg.node, None);
        argv.push("--bootstrap-token-file".into());
        argv.push(token_file.display().to_string());
        for h in &d.ca_cert_hashes {
            argv.push("--discovery-token-ca-cert-hash".into());
            argv.push(h.clone());
        }
        if d.ca_cert_hashes.is_empty() && d.unsafe_skip_ca_verification {
            argv.push("--discovery-token-unsafe-skip-ca-verification".into());
        }
        let mut agent = start(args, "node-agent", &argv)?;
        println!("[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap");
        let conf = kubelet_conf.clone();
        wait_for(
            args,
            "the node's client certificate (TLS bootstrap)",
            &mut agent,
            "node-agent",
            || {
                let conf = conf.clone();
                async move { conf.exists() }
            },
        )
        .await?;
        println!("\nThis node has joined the cluster.");
        return Ok(());
    };
    let ca = cluster_ca(&cfg.certificates_dir)?;
    // The pin is checked against the CA this machine was given, as kubeadm checks
    // cluster-info's: a control-plane join with another cluster's CA stops here.
    let pin = capw_apiserver::tls::spki_sha256(&ca.0).unwrap_or_default();
    anyhow::ensure!(
        d.ca_cert_hashes.is_empty() || d.ca_cert_hashes.contains(&pin),
        "the CA in {}/ca.crt has public key hash {pin}, which is not among discovery.bootstrapToken.caCertHashes {:?}",
        cfg.certificates_dir,
        d.ca_cert_hashes
    );
    let admin = control_plane_kubeconfigs(args, &server, &ca, &name)?;
    // The cluster's configuration, read through the endpoint before this machine serves.
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client(&admin).await?, "kube-system");
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    let cluster_configuration = loop {
        match cms.get("kubeadm-config").await {
            Ok(cm) => {
                let cc = cm
                    .data
                    .and_then(|mut d| d.remove("ClusterConfiguration"))
                    .unwrap_or_default();
                break cc;
            }
            Err(e) if Instant::now() > deadline => {
                anyhow::bail!("reading kube-system/kubeadm-config from {server}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    println!("[preflight] Read the cluster's kubeadm-config from {server}");
    // This machine's control plane runs its image's version; its copy says so, as the one
    // kubeadm-config holds once KubeadmControlPlane moved it to the version it rolls to.
    let cluster_configuration =
        capw_kubeadm::with_kubernetes_version(&cluster_configuration, &version)
            .unwrap_or(cluster_configuration);
    run_control_plane(
        args,
        &ControlPlane {
            name: &name,
            server: &server,
            endpoint: &d.api_server_endpoint,
            ca: &ca,
            certificates_dir: &cfg.certificates_dir,
            port,
            version: &version,
            kubelet_version: &version,
            node: &cfg.node,
            cert_sans: config::cert_sans(&cluster_configuration),
            cluster_configuration: &cluster_configuration,
            admin: &admin,
        },
    )
    .await?;
    println!("\nThis node has joined the cluster and a new control plane instance was created.");
    Ok(())
}
