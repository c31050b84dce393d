//! `capw:host/sim-cloud`: simulated VMs for the in-memory provider.
//!
//! A VM boots from its bootstrap data the way a real machine runs cloud-config: after a
//! configurable delay it runs `runcmd`. `capw apiserver` starts the cluster's workload API (an
//! in-memory `capw-apiserver` on the loopback port reserved by `ensure-api-server`, with the CA
//! and token from `write_files`); `capw node-agent` registers the Node with the VM's provider ID
//! once that API answers; touching the sentinel file marks the VM running. Every workload API
//! runs in this process, so a thousand clusters cost a thousand in-memory stores, not a thousand
//! processes.

mod cloud_config;
mod glue;
mod metadata;

pub use metadata::Metadata;

use capw_apiserver::core::{DeleteOptions, Op, PatchBody, WriteOptions};
use capw_apiserver::{Core, InMemoryServer};
use cloud_config::{CloudConfig, flag};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::host::HostState;
use wasmtime::component::{HasSelf, Linker};

/// Its short name.
pub const NAME: &str = "sim-cloud";

/// `capw:host/sim-cloud`: its backend is the [`SimCloud`] the host provides
/// (`Backends::provide`); without one, every call answers `unavailable`.
pub struct SimCloudCapability;

impl super::HostCapability for SimCloudCapability {
    fn name(&self) -> &'static str {
        NAME
    }
    fn interface(&self) -> &'static str {
        "capw:host/sim-cloud@0.2.0"
    }
    fn link(&self, l: &mut Linker<HostState>) -> wasmtime::Result<()> {
        crate::bindings::sim_cloud::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s)
    }
}

/// The file the bootstrap data touches last; the VM is running once it exists.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// Why a sim-cloud call failed; the message reaches the plugin as the error string.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot reserve a loopback port for the workload API of {cluster}: {source}")]
    Bind {
        cluster: String,
        source: std::io::Error,
    },
    #[error("cluster {0:?} is not \"namespace/name\"")]
    BadCluster(String),
    #[error(
        "cluster {0} has no workload API endpoint in this cloud yet: its VMs boot once ensure-api-server has reserved it"
    )]
    NoEndpoint(String),
    #[error("VM {vm}: {source}")]
    Bootstrap {
        vm: String,
        source: cloud_config::CloudConfigError,
    },
    #[error("VM {vm}: {source}")]
    Template {
        vm: String,
        source: metadata::RenderError,
    },
}

/// Settings of the simulation.
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// How long a VM takes from creation to running its bootstrap commands.
    pub boot_delay: Duration,
    /// How long `capw node-agent` takes to register the Node after it starts.
    pub node_delay: Duration,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            boot_delay: Duration::from_millis(200),
            node_delay: Duration::from_millis(500),
        }
    }
}

pub struct SimCloud {
    settings: SimSettings,
    clusters: Mutex<HashMap<String, Arc<SimCluster>>>,
    next_ip: AtomicU32,
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        if let Some(p) = lock(&self.listener).take() {
            p.task.abort();
        }
    }
}

struct SimCluster {
    port: u16,
    /// Until a control-plane VM boots, a task holds the listener and closes every connection,
    /// so clients fail fast instead of waiting on a handshake nobody answers.
    listener: Mutex<Option<Parked>>,
    server: tokio::sync::OnceCell<InMemoryServer>,
    /// The CA the workload API was started with, for cluster-info and a joining node's pin.
    ca: std::sync::OnceLock<String>,
    /// The `controlPlaneEndpoint` (`host:port`) the first control plane's kubeadm named: where
    /// clients outside the simulation expect this workload API ([`SimCloud::routes`]).
    endpoint: std::sync::OnceLock<String>,
    vms: Mutex<BTreeMap<String, Vm>>,
}

struct Parked {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Option<tokio::net::TcpListener>>,
}

fn park(listener: tokio::net::TcpListener) -> Parked {
    let (stop, mut rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => drop(accepted),
                r = &mut rx => return r.ok().map(|_| listener),
            }
        }
    });
    Parked { stop, task }
}

struct Vm {
    provider_id: String,
    address: String,
    running: Arc<AtomicBool>,
    boot: tokio::task::JoinHandle<()>,
}

impl Vm {
    fn info(&self, name: &str) -> VmInfo {
        VmInfo {
            name: name.to_string(),
            provider_id: self.provider_id.clone(),
            running: self.running.load(Ordering::Acquire),
            addresses: vec![self.address.clone()],
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.boot.abort();
    }
}

/// A VM as a cloud describes it: the simulation boots `data` on it.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub provider_id: String,
    pub address: String,
    /// The version its image presents; empty when it names none.
    pub version: String,
    /// What its metadata service answers, for user data that is a Jinja template.
    pub metadata: Metadata,
}

/// What `ensure-vm` reports.
pub struct VmInfo {
    pub name: String,
    pub provider_id: String,
    pub running: bool,
    pub addresses: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimCloud {
    pub fn new(settings: SimSettings) -> Arc<SimCloud> {
        Arc::new(SimCloud {
            settings,
            clusters: Mutex::new(HashMap::new()),
            next_ip: AtomicU32::new(1),
        })
    }

    fn cluster(&self, key: &str) -> Result<Arc<SimCluster>, SimError> {
        self.cluster_at(key, None)
    }

    /// The cluster `key`, made on `port` (any free one when `None`) if it is new.
    fn cluster_at(&self, key: &str, port: Option<u16>) -> Result<Arc<SimCluster>, SimError> {
        if key.split('/').count() != 2 || key.split('/').any(str::is_empty) {
            return Err(SimError::BadCluster(key.to_string()));
        }
        let mut all = lock(&self.clusters);
        if let Some(c) = all.get(key) {
            return Ok(c.clone());
        }
        let bind = |source| SimError::Bind {
            cluster: key.to_string(),
            source,
        };
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", port.unwrap_or(0))).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let port = listener.local_addr().map_err(bind)?.port();
        let listener = tokio::net::TcpListener::from_std(listener).map_err(bind)?;
        let c = Arc::new(SimCluster {
            port,
            listener: Mutex::new(Some(park(listener))),
            server: tokio::sync::OnceCell::new(),
            ca: std::sync::OnceLock::new(),
            endpoint: std::sync::OnceLock::new(),
            vms: Mutex::new(BTreeMap::new()),
        });
        all.insert(key.to_string(), c.clone());
        Ok(c)
    }

    /// Reserves the workload API endpoint of `cluster` ("namespace/name").
    pub fn ensure_api_server(&self, cluster: &str) -> Result<(String, u16), SimError> {
        self.ensure_api_server_at(cluster, None)
    }

    /// [`SimCloud::ensure_api_server`] on `port` when the cluster is new here: where its
    /// endpoint was before this host started.
    pub fn ensure_api_server_at(
        &self,
        cluster: &str,
        port: Option<u16>,
    ) -> Result<(String, u16), SimError> {
        Ok((
            "127.0.0.1".to_string(),
            self.cluster_at(cluster, port)?.port,
        ))
    }

    pub fn delete_api_server(&self, cluster: &str) -> bool {
        lock(&self.clusters).remove(cluster);
        true
    }

    /// Creates the VM `name` (or reports the existing one) and boots it from `data`, on an image
    /// that presents Kubernetes `version` (empty: none).
    pub fn ensure_vm(
        &self,
        cluster: &str,
        name: &str,
        version: &str,
        data: &str,
    ) -> Result<VmInfo, SimError> {
        // A VM must not make its cluster: that would pick a new port for a cluster whose
        // endpoint was handed out before this host started.
        if !lock(&self.clusters).contains_key(cluster) {
            return Err(SimError::NoEndpoint(cluster.to_string()));
        }
        if let Some(vm) = self.vm(cluster, name)? {
            return Ok(vm);
        }
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
        let address = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
        let spec = VmSpec {
            provider_id: format!("inmemory:///{cluster}/{name}"),
            address: address.clone(),
            version: version.to_string(),
            metadata: Metadata {
                instance_id: name.to_string(),
                local_hostname: name.to_string(),
                local_ipv4: address,
                ..Metadata::default()
            },
        };
        self.boot_vm(cluster, name, spec, data)
    }

    /// The VM `name` of `cluster`, if it exists.
    pub fn vm(&self, cluster: &str, name: &str) -> Result<Option<VmInfo>, SimError> {
        let c = self.cluster(cluster)?;
        let vms = lock(&c.vms);
        Ok(vms.get(name).map(|vm| vm.info(name)))
    }

    /// Boots the VM `name` that a cloud describes as `spec` from its user data `data` (or
    /// reports the existing one).
    pub fn boot_vm(
        &self,
        cluster: &str,
        name: &str,
        spec: VmSpec,
        data: &str,
    ) -> Result<VmInfo, SimError> {
        let c = self.cluster(cluster)?;
        let mut vms = lock(&c.vms);
        if let Some(vm) = vms.get(name) {
            return Ok(vm.info(name));
        }
        let data = metadata::render(data, &spec.metadata).map_err(|source| SimError::Template {
            vm: name.to_string(),
            source,
        })?;
        let cc = CloudConfig::parse(&data).map_err(|source| SimError::Bootstrap {
            vm: name.to_string(),
            source,
        })?;
        let running = Arc::new(AtomicBool::new(false));
        let boot = tokio::spawn(boot(
            c.clone(),
            self.settings.clone(),
            Machine {
                name: name.to_string(),
                provider_id: spec.provider_id.clone(),
                address: spec.address.clone(),
                version: spec.version,
            },
            cc,
            running.clone(),
        ));
        let vm = Vm {
            provider_id: spec.provider_id,
            address: spec.address,
            running,
            boot,
        };
        let info = vm.info(name);
        vms.insert(name.to_string(), vm);
        Ok(info)
    }

    /// The VMs of `cluster`, by name.
    pub fn vm_names(&self, cluster: &str) -> Vec<String> {
        lock(&self.clusters)
            .get(cluster)
            .map(|c| lock(&c.vms).keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Where each serving workload API is reached: its kubeadm `controlPlaneEndpoint`
    /// (`host:port`) and the loopback port it really listens on.
    pub fn routes(&self) -> BTreeMap<String, u16> {
        lock(&self.clusters)
            .values()
            .filter(|c| c.server.initialized())
            .filter_map(|c| c.endpoint.get().map(|e| (e.clone(), c.port)))
            .collect()
    }

    /// Deletes the VM and its Node (the Node stays if the workload API is not up). The Node is
    /// found by the VM's provider ID, as a cloud controller manager finds the Node of a gone
    /// instance: its name is whatever the bootstrap data registered.
    pub fn delete_vm(&self, cluster: &str, name: &str) -> bool {
        let Some(c) = lock(&self.clusters).get(cluster).cloned() else {
            return true;
        };
        let Some(vm) = lock(&c.vms).remove(name) else {
            return true;
        };
        if let Some(server) = c.server.get() {
            let core = server.core.clone();
            let provider_id = vm.provider_id.clone();
            tokio::spawn(async move {
                let Some(rt) = core.registry.get("", "v1", "nodes") else {
                    return;
                };
                let (nodes, _) = core.store.list("/nodes", None);
                let names = nodes.iter().filter_map(|n| {
                    (n.pointer("/spec/providerID")?.as_str()? == provider_id)
                        .then(|| n.pointer("/metadata/name")?.as_str().map(str::to_string))?
                });
                for node in names.collect::<Vec<_>>() {
                    let _ = core.delete(&rt, "", &node, &DeleteOptions::default()).await;
                }
            });
        }
        drop(vm);
        true
    }

    /// How many VMs exist, over all clusters.
    pub fn vm_count(&self) -> usize {
        lock(&self.clusters)
            .values()
            .map(|c| lock(&c.vms).len())
            .sum()
    }
}

/// A VM as its bootstrap commands see it.
struct Machine {
    name: String,
    provider_id: String,
    address: String,
    /// The version its image presents; empty when it names none.
    version: String,
}

/// Runs a VM's bootstrap commands.
async fn boot(
    c: Arc<SimCluster>,
    settings: SimSettings,
    vm: Machine,
    cc: CloudConfig,
    running: Arc<AtomicBool>,
) {
    tokio::time::sleep(settings.boot_delay).await;
    let name = &vm.name;
    for (argv, line) in cc.argvs().into_iter().zip(&cc.runcmd) {
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        match args.as_slice() {
            ["kubeadm", "init" | "join", ..] => {
                match kubeadm(&c, &settings, &vm, &cc, &argv).await {
                    // `kubeadm … && echo success > SENTINEL`.
                    Ok(()) => {
                        if let capw_cloud_config::Command::Shell(l) = line
                            && l.contains(SENTINEL)
                        {
                            running.store(true, Ordering::Release);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(vm = %name, error = %e, "kubeadm failed; the VM stays booting");
                        return;
                    }
                }
            }
            ["capw", "apiserver", ..] => {
                let file = |flag_name: &str| {
                    flag(&argv, flag_name)
                        .and_then(|p| cc.file(p))
                        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                };
                let (Some(ca), Some(key), Some(token)) =
                    (file("ca-cert"), file("ca-key"), file("token-file"))
                else {
                    tracing::warn!(vm = %name, "capw apiserver needs --ca-cert, --ca-key and --token-file naming written files; the workload API stays down");
                    return;
                };
                let version = flag(&argv, "kubernetes-version").unwrap_or_default();
                if let Err(e) = c.serve(&ca, &key, token.trim(), version, &[]).await {
                    tracing::warn!(vm = %name, error = %e, "the workload API did not start");
                    return;
                }
            }
            ["capw", "node-agent", ..] => {
                let node = flag(&argv, "node-name").unwrap_or(name).to_string();
                let join = flag(&argv, "bootstrap-token-file").map(|path| Join {
                    token: cc
                        .file(path)
                        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                        .unwrap_or_default(),
                    pins: all_flags(&argv, "discovery-token-ca-cert-hash"),
                });
                let version = flag(&argv, "kubelet-version")
                    .unwrap_or(capw_node::agent::DEFAULT_KUBELET_VERSION)
                    .to_string();
                tokio::spawn(node_agent(
                    c.clone(),
                    settings.node_delay,
                    Registered {
                        node,
                        provider_id: vm.provider_id.clone(),
                        address: vm.address.clone(),
                        version,
                        control_plane: argv.iter().any(|a| a == "--control-plane"),
                        cluster_configuration: None,
                        join,
                        labels: BTreeMap::new(),
                        taints: None,
                    },
                ));
            }
            ["touch", path] if *path == SENTINEL => running.store(true, Ordering::Release),
            _ => tracing::debug!(vm = %name, command = ?argv, "simulated"),
        }
    }
}

/// Serves the cluster's one workload API with the CA the bootstrap data wrote to `dir`, at
/// `version`.
async fn serve_from(
    c: &SimCluster,
    cc: &CloudConfig,
    dir: &str,
    version: &str,
    sans: &[String],
) -> Result<(), String> {
    let file = |f: &str| {
        cc.file(&format!("{}/{f}", dir.trim_end_matches('/')))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok_or_else(|| format!("{dir}/{f} is not among the bootstrap data's write_files"))
    };
    // Nothing authenticates with a bearer token: clients use certificates the CA signed.
    let token = uuid::Uuid::new_v4().simple().to_string();
    c.serve(&file("ca.crt")?, &file("ca.key")?, &token, version, sans)
        .await
        .map_err(|e| e.to_string())
}

/// `capw kubeadm init|join`, in-process: the same configuration files read by the same code
/// (`capw_node::kubeadm`), with the cluster's one in-process server standing for every
/// control-plane machine's, and the node agent registering the Node as over HTTPS.
async fn kubeadm(
    c: &Arc<SimCluster>,
    settings: &SimSettings,
    vm: &Machine,
    cc: &CloudConfig,
    argv: &[String],
) -> Result<(), String> {
    use capw_node::kubeadm as config;
    let path = flag(argv, "config").ok_or("kubeadm needs --config")?;
    let text = cc
        .file(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .ok_or_else(|| format!("{path} is not among the bootstrap data's write_files"))?;
    let init = argv.get(1).map(String::as_str) == Some("init");
    let (node, control_plane, version, cluster_configuration, join) = if init {
        let cfg = config::init_config(path, &text).map_err(|e| e.to_string())?;
        // kubeadm signs the API server for its endpoint and certSANs, as here.
        let mut sans = cfg.cert_sans.clone();
        if let Some(host) = endpoint_host(&cfg.control_plane_endpoint) {
            sans.push(host.to_string());
            let _ = c.endpoint.set(cfg.control_plane_endpoint.clone());
        }
        serve_from(c, cc, &cfg.certificates_dir, &cfg.kubernetes_version, &sans).await?;
        let version = if vm.version.is_empty() {
            cfg.kubernetes_version.clone()
        } else {
            vm.version.clone()
        };
        (
            cfg.node,
            true,
            version,
            Some(cfg.cluster_configuration),
            None,
        )
    } else {
        let cfg = config::join_config(path, &text).map_err(|e| e.to_string())?;
        if vm.version.is_empty() {
            return Err("the VM's image names no Kubernetes version: the infrastructure provider passes the Machine's spec.version (ensure-vm-from-image)".into());
        }
        if cfg.control_plane.is_some() {
            let endpoint = &cfg.discovery.api_server_endpoint;
            let sans: Vec<String> = endpoint_host(endpoint)
                .map(str::to_string)
                .into_iter()
                .collect();
            if !sans.is_empty() {
                let _ = c.endpoint.set(endpoint.clone());
            }
            serve_from(c, cc, &cfg.certificates_dir, &vm.version, &sans).await?;
            (cfg.node, true, vm.version.clone(), None, None)
        } else {
            let join = Join {
                token: cfg.discovery.token,
                pins: cfg.discovery.ca_cert_hashes,
            };
            (cfg.node, false, vm.version.clone(), None, Some(join))
        }
    };
    tokio::spawn(node_agent(
        c.clone(),
        settings.node_delay,
        Registered {
            node: node.name.clone().unwrap_or_else(|| vm.name.clone()),
            provider_id: vm.provider_id.clone(),
            address: vm.address.clone(),
            version,
            control_plane,
            cluster_configuration,
            join,
            taints: Some(config::taints(&node, control_plane)),
            labels: node.labels,
        },
    ));
    Ok(())
}

/// The host of a `host:port` endpoint; `None` when it names none.
fn endpoint_host(endpoint: &str) -> Option<&str> {
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    (!host.is_empty()).then_some(host)
}

impl SimCluster {
    /// Starts the workload API once; every later control-plane machine shares it and it
    /// presents the version of the one that booted last, as a rolled control plane does.
    async fn serve(
        &self,
        ca: &str,
        key: &str,
        token: &str,
        version: &str,
        sans: &[String],
    ) -> Result<(), capw_apiserver::ServerError> {
        let server = self.start_server(ca, key, token, sans).await?;
        if let Ok(v) = capw_apiserver::KubernetesVersion::parse(version) {
            server.set_kubernetes_version(v);
        }
        Ok(())
    }

    async fn start_server(
        &self,
        ca: &str,
        key: &str,
        token: &str,
        sans: &[String],
    ) -> Result<&InMemoryServer, capw_apiserver::ServerError> {
        self.server
            .get_or_try_init(|| async {
                let parked = lock(&self.listener).take();
                let listener = match parked {
                    Some(p) => {
                        let _ = p.stop.send(());
                        match p.task.await {
                            Ok(Some(l)) => Ok(l),
                            _ => tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await,
                        }
                    }
                    None => tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await,
                }
                .map_err(|source| capw_apiserver::ServerError::Bind {
                    addr: std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
                    source,
                })?;
                let _ = self.ca.set(ca.to_string());
                InMemoryServer::start(listener, ca, key, token.to_string(), sans).await
            })
            .await
    }
}

/// What a simulated machine's node agent registers: its bootstrap data's `capw node-agent`
/// flags and the machine's provider ID and address.
struct Registered {
    node: String,
    provider_id: String,
    address: String,
    version: String,
    /// `--control-plane`: the machine's bootstrap data ran `capw apiserver`, which the
    /// simulated cloud serves as the cluster's one workload API.
    control_plane: bool,
    /// `kubeadm init`'s ClusterConfiguration, uploaded as `kube-system/kubeadm-config`.
    cluster_configuration: Option<String>,
    /// `--bootstrap-token-file`: a worker joining as `kubeadm join` does.
    join: Option<Join>,
    /// `--node-labels`.
    labels: BTreeMap<String, String>,
    /// `--register-with-taints`; `None`: the node agent's default.
    taints: Option<Vec<serde_json::Value>>,
}

/// A joining worker's bootstrap token and CA pins.
struct Join {
    token: String,
    pins: Vec<String>,
}

/// Every value of a repeatable `--flag VALUE`.
fn all_flags(argv: &[String], name: &str) -> Vec<String> {
    let long = format!("--{name}");
    argv.windows(2)
        .filter(|w| w[0] == long)
        .map(|w| w[1].clone())
        .collect()
}

/// What `capw node-agent --bootstrap-token-file` checks over HTTPS, checked in-process: the
/// CA's pin (a mismatch is final) and the token against the workload's bootstrap-token Secrets.
fn joined(c: &SimCluster, server: &InMemoryServer, join: &Join) -> Result<bool, String> {
    let ca = c.ca.get().map(String::as_str).unwrap_or_default();
    let pin = capw_apiserver::tls::spki_sha256(ca).unwrap_or_default();
    if !join.pins.is_empty() && !join.pins.contains(&pin) {
        return Err(format!(
            "the cluster CA's hash {pin} is not among the pinned {:?}",
            join.pins
        ));
    }
    Ok(capw_apiserver::bootstrap_token::authenticates(
        &server.core.store,
        &join.token,
        jiff::Timestamp::now(),
    ))
}

/// Registers the Node once the workload API is up, as a kubelet would, and keeps it Ready.
async fn node_agent(c: Arc<SimCluster>, delay: Duration, r: Registered) {
    tokio::time::sleep(delay).await;
    let mut certified = false;
    loop {
        if let Some(server) = c.server.get() {
            if let Some(join) = r.join.as_ref().filter(|_| !certified) {
                match joined(&c, server, join) {
                    Ok(true) => match tls_bootstrap(&server.core, &r.node, &join.token).await {
                        Ok(()) => certified = true,
                        Err(e) => {
                            tracing::debug!(node = %r.node, error = %e, "the node's certificate request failed; retrying");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                    Ok(false) => {
                        tracing::debug!(node = %r.node, "the bootstrap token does not authenticate yet; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(node = %r.node, error = %e, "refusing to join");
                        return;
                    }
                }
            }
            match register(&c, &server.core, &r).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(node = %r.node, error = %e, "registering the node failed; retrying")
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `capw node-agent`'s TLS bootstrap, in-process: a kubelet client CertificateSigningRequest
/// from the bootstrap token's user, which the workload's signer approves and signs.
async fn tls_bootstrap(core: &Core, node: &str, token: &str) -> Result<(), String> {
    use base64::Engine as _;
    let rt = core
        .registry
        .get("certificates.k8s.io", "v1", "certificatesigningrequests")
        .ok_or("the workload API serves no CertificateSigningRequests")?;
    let user = format!("system:node:{node}");
    let (request, _key) =
        capw_apiserver::tls::client_csr(&user, &["system:nodes"]).map_err(|e| e.to_string())?;
    let id = token.split('.').next().unwrap_or_default();
    let name = format!("node-csr-{node}");
    let csr = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request),
            "signerName": capw_apiserver::KUBELET_CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
            "username": format!("system:bootstrap:{id}"),
            "groups": ["system:bootstrappers", capw_apiserver::bootstrap_token::NODE_GROUP, "system:authenticated"],
        },
    });
    let opts = WriteOptions {
        field_manager: "capw-node-agent".into(),
        ..Default::default()
    };
    match core.write(&rt, "", &name, "", Op::Create(csr), &opts).await {
        Err(e) if e.code != 409 => return Err(e.to_string()),
        _ => {}
    }
    for _ in 0..100 {
        let current = core.get(&rt, "", &name).map_err(|e| e.to_string())?;
        if current.pointer("/status/certificate").is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("certificate signing request {name} was not signed"))
}

async fn register(
    c: &SimCluster,
    core: &Core,
    reg: &Registered,
) -> Result<(), capw_apiserver::status::ApiError> {
    let addresses = [reg.address.clone()];
    let r = capw_node::agent::Registration {
        name: &reg.node,
        provider_id: &reg.provider_id,
        addresses: &addresses,
        kubelet_version: &reg.version,
        control_plane: reg.control_plane,
        labels: &reg.labels,
        taints: reg.taints.as_deref(),
    };
    // Strategic: conditions merge by type, so a condition the agent did not set (an
    // operator's, or a test's standing in for a failing kubelet) stays, as with a kubelet.
    // The Node is born with its status, as a kubelet registers it.
    let status = PatchBody::Strategic(capw_node::agent::ready_status(&r));
    ensure_with_status(
        core,
        "nodes",
        "",
        capw_node::agent::object(&r),
        status,
        true,
    )
    .await?;
    if reg.control_plane {
        // Ready: this write goes through the server the Pod stands for.
        let status = PatchBody::Merge(capw_node::agent::api_server_pod_status(true));
        let pod = capw_node::agent::api_server_pod(&r);
        ensure_with_status(core, "pods", "kube-system", pod, status, false).await?;
    }
    if let Some(cc) = &reg.cluster_configuration {
        put_config_map(core, capw_node::agent::kubeadm_config_map(cc)).await?;
        let server = format!("https://127.0.0.1:{}", c.port);
        let ca = c.ca.get().map(String::as_str).unwrap_or_default();
        put_config_map(core, capw_node::agent::cluster_info_config_map(&server, ca)).await?;
    }
    Ok(())
}

/// `capw_node::agent::put_config_map`, written to the simulated cluster's store.
async fn put_config_map(
    core: &Core,
    object: serde_json::Value,
) -> Result<(), capw_apiserver::status::ApiError> {
    let Some(rt) = core.registry.get("", "v1", "configmaps") else {
        return Ok(());
    };
    let opts = WriteOptions {
        field_manager: "capw-node-agent".into(),
        ..Default::default()
    };
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (ns, name) = (text("/metadata/namespace"), text("/metadata/name"));
    let data = serde_json::json!({"data": object["data"]});
    match core
        .write(&rt, &ns, &name, "", Op::Create(object), &opts)
        .await
    {
        Err(e) if e.code == 409 => {
            core.write(
                &rt,
                &ns,
                &name,
                "",
                Op::Patch(PatchBody::Merge(data)),
                &opts,
            )
            .await?;
            Ok(())
        }
        r => r.map(|_| ()),
    }
}

/// `capw_node::agent`'s create-unless-present then status patch of a core/v1 `resource`,
/// written to the simulated cluster's store directly; with `born_with_status`, a create
/// carries the status and needs no patch.
async fn ensure_with_status(
    core: &Core,
    resource: &str,
    ns: &str,
    mut object: serde_json::Value,
    status: PatchBody,
    born_with_status: bool,
) -> Result<(), capw_apiserver::status::ApiError> {
    let Some(rt) = core.registry.get("", "v1", resource) else {
        return Ok(());
    };
    let opts = WriteOptions {
        field_manager: "capw-node-agent".into(),
        ..Default::default()
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if born_with_status && let PatchBody::Strategic(body) | PatchBody::Merge(body) = &status {
        object["status"] = body["status"].clone();
    }
    match core
        .write(&rt, ns, &name, "", Op::Create(object), &opts)
        .await
    {
        Ok(_) if born_with_status => return Ok(()),
        Err(e) if e.code != 409 => return Err(e),
        _ => {}
    }
    core.write(&rt, ns, &name, "status", Op::Patch(status), &opts)
        .await?;
    Ok(())
}
